//! Contracts as code on the in-memory transport: what a bus announces when it starts, and
//! the validation of incoming bodies against the schemas of their handlers.

use std::sync::Arc;
use std::time::Duration;

use mesh::{
    Bus, DeadReason, ErrorKind, Event, HandlerContract, Incoming, MemoryBroker, MessageContract,
    ModuleContract, Outgoing, RemoteError, RequestMeta, Schema, SchemaVersion, ToolContract,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct SiteCreated {
    #[schemars(length(min = 1))]
    site: String,
    owner: String,
    plan: Plan,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
enum Plan {
    Basic,
    Pro,
}

impl Event for SiteCreated {
    const KEY: &'static str = "module.umami.site.created";
    fn json_schema() -> Option<Schema> {
        Some(Schema::of::<Self>())
    }
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct InvoiceOpened {
    #[schemars(range(max = 1_000_000))]
    invoice: u64,
    plan: Plan,
}

impl Event for InvoiceOpened {
    const KEY: &'static str = "module.billing.invoice.opened";
    const SCHEMA: u32 = 3;
    fn reads(version: u32) -> bool {
        (2..=3).contains(&version)
    }
    fn json_schema() -> Option<Schema> {
        Some(Schema::of::<Self>())
    }
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct QuoteRequest {
    plan: Plan,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct Quote {
    cents: u64,
}

fn transport(broker: &MemoryBroker) -> Arc<dyn mesh::raw::Transport> {
    Arc::new(broker.transport())
}

async fn observer(broker: &MemoryBroker, patterns: &[&str]) -> anyhow::Result<mesh::Listener> {
    let bus = Bus::builder()
        .node("anchor")
        .module("observer")
        .start(transport(broker))
        .await?;
    Ok(bus.listen(patterns.iter().copied()).await?)
}

async fn next_event(listener: &mut mesh::Listener) -> anyhow::Result<Incoming<bytes::Bytes>> {
    Ok(tokio::time::timeout(WAIT, listener.next())
        .await?
        .ok_or_else(|| anyhow::anyhow!("the listener closed"))??)
}

/// The billing module of these tests: a typed handler, a raw handler with a declared
/// schema, a served tool, a declared emit and a declared call.
fn billing() -> mesh::BusBuilder {
    Bus::builder()
        .node("anchor")
        .module("billing")
        .on(|_: Incoming<SiteCreated>| async { Ok(()) })
        .on_raw_with_schema(
            ["module.crm.#", "module.shop.order.*"],
            Schema::from_json(json!({"type": "object", "required": ["id"]})),
            |_| async { Ok(()) },
        )
        .serve_with_schemas(
            "billing.quote",
            |request: QuoteRequest, _: RequestMeta| async move {
                match request.plan {
                    Plan::Basic => Ok(Quote { cents: 900 }),
                    Plan::Pro => Err(RemoteError::new("no-quote", "ask sales")),
                }
            },
        )
        .emits::<InvoiceOpened>()
        .emits_json("invoice.paid", 1, None)
        .calls::<QuoteRequest, Quote>("tax.rate")
}

fn expected_billing() -> ModuleContract {
    let raw_schema = json!({"type": "object", "required": ["id"]});
    ModuleContract {
        owner: "module.billing".into(),
        node: "anchor".into(),
        emits: vec![
            MessageContract {
                key: "module.billing.invoice.opened".into(),
                version: 3,
                schema: Some(Schema::of::<InvoiceOpened>().into_json()),
            },
            MessageContract {
                key: "module.billing.invoice.paid".into(),
                version: 1,
                schema: None,
            },
        ],
        handles: vec![
            HandlerContract {
                pattern: "module.umami.site.created".into(),
                version: Some(1),
                schema: Some(Schema::of::<SiteCreated>().into_json()),
            },
            HandlerContract {
                pattern: "module.crm.#".into(),
                version: None,
                schema: Some(raw_schema.clone()),
            },
            HandlerContract {
                pattern: "module.shop.order.*".into(),
                version: None,
                schema: Some(raw_schema),
            },
        ],
        serves: vec![ToolContract {
            tool: "billing.quote".into(),
            request: Some(Schema::of::<QuoteRequest>().into_json()),
            reply: Some(Schema::of::<Quote>().into_json()),
        }],
        calls: vec![ToolContract {
            tool: "tax.rate".into(),
            request: Some(Schema::of::<QuoteRequest>().into_json()),
            reply: Some(Schema::of::<Quote>().into_json()),
        }],
    }
}

#[tokio::test]
async fn a_bus_announces_its_contract_when_it_starts() -> anyhow::Result<()> {
    let broker = MemoryBroker::new();
    let mut announcements = observer(&broker, &["#"]).await?;
    let bus = billing().start(transport(&broker)).await?;

    let seen = next_event(&mut announcements).await?;
    assert_eq!(
        seen.meta.key().as_str(),
        "module.billing.contract.announced"
    );
    assert_eq!(seen.meta.source(), "billing");
    assert_eq!(
        seen.meta.schema(),
        Some(SchemaVersion(mesh::CONTRACT_FORMAT))
    );
    let announced: ModuleContract = serde_json::from_slice(&seen.event)?;
    assert_eq!(announced, expected_billing());
    assert_eq!(bus.contract(), &expected_billing());
    // Draft-07 style: shared parts under `definitions` (the enum `Plan` is one), no `$defs`.
    let text = String::from_utf8(seen.event.to_vec())?;
    assert!(!text.contains("$defs"), "{text}");
    assert!(text.contains("#/definitions/Plan"), "{text}");

    // The tool it declared is served as before.
    let quote: Quote = bus
        .call("billing.quote", &QuoteRequest { plan: Plan::Basic }, WAIT)
        .await?;
    assert_eq!(quote.cents, 900);
    bus.drain().await?;
    Ok(())
}

/// The first event a `#` listener sees after `bus` started and emitted `marker`.
async fn first_after_start(builder: mesh::BusBuilder) -> anyhow::Result<String> {
    let broker = MemoryBroker::new();
    let mut everything = observer(&broker, &["#"]).await?;
    let bus = builder.start(transport(&broker)).await?;
    bus.emit_outgoing(Outgoing::json("marker", &1)?).await?;
    let first = next_event(&mut everything).await?;
    bus.drain().await?;
    Ok(first.meta.key().to_string())
}

#[tokio::test]
async fn announce_false_announces_nothing() -> anyhow::Result<()> {
    // Handed to the transport before `start` returns: the announcement precedes every
    // event the bus emits, so the first event seen tells whether there was one.
    assert_eq!(
        first_after_start(billing()).await?,
        "module.billing.contract.announced"
    );
    assert_eq!(
        first_after_start(billing().announce(false)).await?,
        "module.billing.marker"
    );
    Ok(())
}

#[tokio::test]
async fn a_bus_that_declares_nothing_announces_nothing() -> anyhow::Result<()> {
    let quiet = Bus::builder().node("anchor").module("billing");
    assert_eq!(first_after_start(quiet).await?, "module.billing.marker");
    // One declaration is enough to announce.
    let one = Bus::builder()
        .node("anchor")
        .module("billing")
        .emits_json("marker", 1, None);
    assert_eq!(
        first_after_start(one).await?,
        "module.billing.contract.announced"
    );
    Ok(())
}

#[tokio::test]
async fn a_declared_emit_must_be_the_bus_s_own() -> anyhow::Result<()> {
    let broker = MemoryBroker::new();
    let refused = Bus::builder()
        .node("anchor")
        .module("umami")
        .emits::<InvoiceOpened>()
        .start(transport(&broker))
        .await
        .expect_err("module.billing.… is not umami's");
    assert!(
        matches!(refused.kind(), ErrorKind::ForeignKey { key, .. } if key == InvoiceOpened::KEY),
        "{refused}"
    );
    Ok(())
}

#[tokio::test]
async fn a_schema_that_does_not_compile_or_uses_defs_fails_start() -> anyhow::Result<()> {
    let broker = MemoryBroker::new();
    let broken = Bus::builder()
        .node("anchor")
        .module("billing")
        .validate_schemas(true)
        .on_raw_with_schema(
            ["module.crm.#"],
            Schema::from_json(json!({"type": 12})),
            |_| async { Ok(()) },
        )
        .start(transport(&broker))
        .await
        .expect_err("`type` must be a string or an array");
    assert!(
        matches!(broken.kind(), ErrorKind::InvalidSchema { subject, .. } if subject.contains("module.crm.#")),
        "{broken}"
    );
    // Validating or not: a contract announces only schemas a reader can use.
    let broken = Bus::builder()
        .node("anchor")
        .module("billing")
        .calls_json(
            "tax.rate",
            Some(Schema::from_json(json!({"minimum": "zero"}))),
            None,
        )
        .start(transport(&broker))
        .await
        .expect_err("`minimum` must be a number");
    assert!(
        matches!(broken.kind(), ErrorKind::InvalidSchema { subject, .. } if subject.contains("tax.rate")),
        "{broken}"
    );
    let defs = Bus::builder()
        .node("anchor")
        .module("billing")
        .emits_json(
            "invoice.paid",
            1,
            Some(Schema::from_json(json!({
                "$ref": "#/$defs/Paid",
                "$defs": {"Paid": {"type": "object"}}
            }))),
        )
        .start(transport(&broker))
        .await
        .expect_err("2020-12 `$defs` would dangle in an AsyncAPI document");
    assert!(
        matches!(defs.kind(), ErrorKind::InvalidSchema { problem, .. } if problem.contains("definitions")),
        "{defs}"
    );
    Ok(())
}

/// What the stats module's handler saw: the sites of the events it was called with.
type Seen = tokio::sync::mpsc::UnboundedReceiver<String>;

async fn stats(broker: &MemoryBroker, validate: bool) -> anyhow::Result<(Bus, Seen)> {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let bus = Bus::builder()
        .node("anchor")
        .module("stats")
        .validate_schemas(validate)
        .on(move |e: Incoming<SiteCreated>| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(e.event.site);
                Ok(())
            }
        })
        .start(transport(broker))
        .await?;
    Ok((bus, rx))
}

async fn next_dead(tap: &mut mesh::DeadLetterTap) -> anyhow::Result<mesh::DeadLetterNote> {
    let letter = tokio::time::timeout(WAIT, tap.next())
        .await?
        .ok_or_else(|| anyhow::anyhow!("the tap closed"))?;
    letter
        .note
        .clone()
        .ok_or_else(|| anyhow::anyhow!("a dead letter without its note"))
}

#[tokio::test]
async fn with_validation_a_body_that_breaks_the_schema_is_dead_lettered_schema_invalid(
) -> anyhow::Result<()> {
    let broker = MemoryBroker::new();
    let (consumer, mut handled) = stats(&broker, true).await?;
    let umami = Bus::builder()
        .node("anchor")
        .module("umami")
        .start(transport(&broker))
        .await?;
    let mut dead = consumer.dead_letters().await?;

    // A required field missing: refused before deserializing, the error names it.
    let missing = json!({"site": "blog", "plan": "basic"}).to_string();
    umami
        .emit_outgoing(Outgoing::raw(SiteCreated::KEY, missing)?)
        .await?;
    let note = next_dead(&mut dead).await?;
    assert_eq!(note.reason, DeadReason::SchemaInvalid);
    assert_eq!(note.reason.as_str(), "schema-invalid");
    let error = note.last_error.unwrap_or_default();
    assert!(error.contains("owner"), "{error}");
    assert!(error.contains("required"), "{error}");

    // A body serde would read, which the schema refuses (an empty site): the handler is
    // not called. Its value is never quoted: only where it is and what is wrong.
    let secret = "x".repeat(5000);
    let empty = json!({"site": "", "owner": secret, "plan": "basic"}).to_string();
    umami
        .emit_outgoing(Outgoing::raw(SiteCreated::KEY, empty)?)
        .await?;
    let note = next_dead(&mut dead).await?;
    assert_eq!(note.reason, DeadReason::SchemaInvalid);
    let error = note.last_error.unwrap_or_default();
    assert!(error.contains("/site"), "{error}");
    assert!(
        !error.contains("xxxxxxxx") && error.len() <= 1024,
        "{error}"
    );

    // A valid one is handled.
    umami
        .emit(&SiteCreated {
            site: "journal".into(),
            owner: "ada".into(),
            plan: Plan::Pro,
        })
        .await?;
    let site = tokio::time::timeout(WAIT, handled.recv()).await?;
    assert_eq!(site.as_deref(), Some("journal"));
    consumer.drain().await?;
    // Only the valid one reached the handler.
    assert_eq!(handled.recv().await, None);
    umami.drain().await?;
    Ok(())
}

#[tokio::test]
async fn without_validation_the_same_bodies_reach_serde() -> anyhow::Result<()> {
    let broker = MemoryBroker::new();
    let (consumer, mut handled) = stats(&broker, false).await?;
    let umami = Bus::builder()
        .node("anchor")
        .module("umami")
        .start(transport(&broker))
        .await?;
    let mut dead = consumer.dead_letters().await?;
    let missing = json!({"site": "blog", "plan": "basic"}).to_string();
    umami
        .emit_outgoing(Outgoing::raw(SiteCreated::KEY, missing)?)
        .await?;
    assert_eq!(next_dead(&mut dead).await?.reason, DeadReason::Undecodable);
    let empty = json!({"site": "", "owner": "ada", "plan": "basic"}).to_string();
    umami
        .emit_outgoing(Outgoing::raw(SiteCreated::KEY, empty)?)
        .await?;
    let site = tokio::time::timeout(WAIT, handled.recv()).await?;
    assert_eq!(site.as_deref(), Some(""));
    consumer.drain().await?;
    umami.drain().await?;
    Ok(())
}

#[tokio::test]
async fn a_typed_schema_checks_only_the_version_it_describes() -> anyhow::Result<()> {
    let broker = MemoryBroker::new();
    let (tx, mut handled) = tokio::sync::mpsc::unbounded_channel();
    let consumer = Bus::builder()
        .node("anchor")
        .module("ledger")
        .validate_schemas(true)
        .on(move |e: Incoming<InvoiceOpened>| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((e.meta.schema(), e.event.invoice));
                Ok(())
            }
        })
        .start(transport(&broker))
        .await?;
    let billing = Bus::builder()
        .node("anchor")
        .module("billing")
        .start(transport(&broker))
        .await?;
    let mut dead = consumer.dead_letters().await?;
    // Version 2 (read, but not the version the schema describes) with an invoice number
    // version 3's schema refuses and serde reads: not checked, so it reaches the handler.
    let v2 = json!({"invoice": 5_000_000, "plan": "basic"}).to_string();
    billing
        .emit_outgoing(Outgoing::raw(InvoiceOpened::KEY, v2)?.schema(2))
        .await?;
    assert_eq!(
        tokio::time::timeout(WAIT, handled.recv()).await?,
        Some((Some(SchemaVersion(2)), 5_000_000))
    );
    // The same body as version 3: the schema (`maximum: 1000000`) refuses it.
    let v3 = json!({"invoice": 5_000_000, "plan": "basic"}).to_string();
    billing
        .emit_outgoing(Outgoing::raw(InvoiceOpened::KEY, v3)?.schema(3))
        .await?;
    let note = next_dead(&mut dead).await?;
    assert_eq!(note.reason, DeadReason::SchemaInvalid);
    assert!(
        note.last_error
            .as_deref()
            .unwrap_or_default()
            .contains("/invoice"),
        "{note:?}"
    );
    consumer.drain().await?;
    billing.drain().await?;
    Ok(())
}

#[tokio::test]
async fn a_raw_handler_s_declared_schema_is_checked() -> anyhow::Result<()> {
    let broker = MemoryBroker::new();
    let (tx, mut handled) = tokio::sync::mpsc::unbounded_channel();
    let consumer = Bus::builder()
        .node("anchor")
        .module("crm")
        .validate_schemas(true)
        .on_raw_with_schema(
            ["module.shop.#"],
            Schema::from_json(json!({"type": "object", "required": ["id"]})),
            move |e| {
                let tx = tx.clone();
                async move {
                    let _ = tx.send(e.event);
                    Ok(())
                }
            },
        )
        .start(transport(&broker))
        .await?;
    let shop = Bus::builder()
        .node("anchor")
        .module("shop")
        .start(transport(&broker))
        .await?;
    let mut dead = consumer.dead_letters().await?;
    shop.emit_outgoing(Outgoing::json("order.placed", &json!({"total": 3}))?)
        .await?;
    let note = next_dead(&mut dead).await?;
    assert_eq!(note.reason, DeadReason::SchemaInvalid);
    shop.emit_outgoing(Outgoing::json("order.placed", &json!({"id": 3}))?)
        .await?;
    let body = tokio::time::timeout(WAIT, handled.recv()).await?;
    assert_eq!(body.as_deref(), Some(&br#"{"id":3}"#[..]));
    consumer.drain().await?;
    shop.drain().await?;
    Ok(())
}
