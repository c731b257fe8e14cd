//! `codegen::rust` on the demo: billing's generated types are exactly the committed
//! tests/generated/billing.rs, which compiles here (this test crate depends on mesh, serde,
//! serde_json and schemars 1, as a consumer's crate would), reads the events the demo's umami
//! emits through a bus, and derives a schema `check` finds compatible with the emitter's; a
//! breaking change of the emitter is a finding naming billing, while the generated type
//! would refuse the new body.

use std::sync::Arc;

use mesh::{Bus, Event, Incoming, MemoryBroker};
use mesh_contract::codegen::{rust, CodegenOptions};
use mesh_contract::{check, Rule, System};
use serde::{Deserialize, Serialize};

#[path = "support/realistic.rs"]
mod realistic;

#[path = "../../mesh/examples/demo/modules.rs"]
#[allow(dead_code, unreachable_pub)]
mod modules;

/// The committed output of `mesh contract codegen rust` on the realistic system.
#[path = "generated/system.rs"]
#[allow(unreachable_pub)]
#[rustfmt::skip]
mod generated_system;

/// The committed output of `mesh contract codegen rust` on the odd system.
#[path = "generated/odd.rs"]
#[allow(unreachable_pub)]
#[rustfmt::skip]
mod generated_odd;

/// The committed output of `mesh contract codegen rust --module module.billing` on the demo.
#[path = "generated/billing.rs"]
#[allow(unreachable_pub)]
#[rustfmt::skip]
mod generated;

const GENERATED: &str = "tests/generated/billing.rs";
const GENERATED_SYSTEM: &str = "tests/generated/system.rs";

/// Asserts `code` is the committed file `path` (rewritten first with `MESH_WRITE_CODEGEN=1`).
fn assert_committed(code: &str, path: &str) -> anyhow::Result<()> {
    let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    if std::env::var_os("MESH_WRITE_CODEGEN").is_some() {
        std::fs::write(&full, code)?;
    }
    let committed = std::fs::read_to_string(&full)?;
    assert_eq!(
        committed, code,
        "{path} is not what codegen writes: regenerate it with MESH_WRITE_CODEGEN=1 cargo test -p meshbus-contract --test codegen"
    );
    Ok(())
}

#[test]
fn the_realistic_systems_code_is_the_committed_file() -> anyhow::Result<()> {
    let system = realistic::realistic_system();
    let code = rust(&system, &CodegenOptions::default())?;
    assert_committed(&code, GENERATED_SYSTEM)?;
    // The same system, the same code, byte for byte.
    assert_eq!(rust(&system, &CodegenOptions::default())?, code);
    Ok(())
}

/// The demo's system, as its buses announce it (the buses drained).
async fn demo_system() -> anyhow::Result<System> {
    let broker = MemoryBroker::new();
    let (done, _) = tokio::sync::mpsc::unbounded_channel();
    let mut system = System::new();
    for builder in [
        modules::billing(done.clone()),
        modules::mailer(done)?,
        modules::umami(),
    ] {
        let bus: Bus = builder.start(Arc::new(broker.transport())).await?;
        system.insert(bus.contract().clone());
        bus.drain().await?;
    }
    Ok(system)
}

fn billing_options() -> CodegenOptions {
    CodegenOptions {
        module: Some("module.billing".into()),
    }
}

#[tokio::test]
async fn billing_code_is_the_committed_file() -> anyhow::Result<()> {
    let code = rust(&demo_system().await?, &billing_options())?;
    assert_committed(&code, GENERATED)?;
    assert!(
        code.contains("impl mesh::Event for UmamiSiteCreated"),
        "{code}"
    );
    assert!(
        !code.contains("Quote"),
        "billing serves billing.quote, it neither consumes nor calls it:\n{code}"
    );
    Ok(())
}

#[tokio::test]
async fn generated_types_read_the_demos_events_through_a_bus() -> anyhow::Result<()> {
    assert_eq!(generated::UmamiSiteCreated::KEY, modules::SiteCreated::KEY);
    assert_eq!(generated::UmamiSiteCreated::SCHEMA, 1);
    let sent = modules::SiteCreated {
        site: "blog".into(),
        owner: "ada".into(),
    };
    // As JSON: the emitter's body reads into the generated type and writes back unchanged.
    let body = serde_json::to_value(&sent)?;
    let read: generated::UmamiSiteCreated = serde_json::from_value(body.clone())?;
    assert_eq!(serde_json::to_value(&read)?, body);

    // Through a bus: umami emits its own type, a module handles the generated one.
    let broker = MemoryBroker::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let consumer = Bus::builder()
        .node(modules::NODE)
        .module("billing")
        .on(move |incoming: Incoming<generated::UmamiSiteCreated>| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(incoming.event);
                Ok(())
            }
        })
        .start(Arc::new(broker.transport()))
        .await?;
    let umami = modules::umami().start(Arc::new(broker.transport())).await?;
    umami.emit(&sent).await?;
    let handled = tokio::time::timeout(std::time::Duration::from_secs(10), rx.recv())
        .await?
        .expect("the handler ran");
    assert_eq!(
        handled,
        generated::UmamiSiteCreated {
            site: "blog".into(),
            owner: "ada".into()
        }
    );

    // The generated type's schema, announced by the consumer, is compatible with the emitter.
    let before = demo_system().await?;
    let mut after = before.clone();
    let mut contract = consumer.contract().clone();
    contract.serves = before
        .module("module.billing")
        .expect("billing")
        .serves
        .clone();
    after.insert(contract);
    assert_eq!(check(&before, &after), Vec::new());
    umami.drain().await?;
    consumer.drain().await?;
    Ok(())
}

/// umami's event after a breaking change: `owner` is now a number.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
struct SiteCreatedBroken {
    site: String,
    owner: u64,
}

impl Event for SiteCreatedBroken {
    const KEY: &'static str = modules::SiteCreated::KEY;
    fn json_schema() -> Option<mesh::Schema> {
        Some(mesh::Schema::of::<Self>())
    }
}

#[tokio::test]
async fn a_breaking_change_of_the_emitter_fails_check_before_the_code_misreads(
) -> anyhow::Result<()> {
    let before = demo_system().await?;
    let broker = MemoryBroker::new();
    let umami = Bus::builder()
        .node(modules::NODE)
        .module("umami")
        .emits::<SiteCreatedBroken>()
        .calls::<modules::QuoteRequest, u64>(modules::QUOTE)
        .start(Arc::new(broker.transport()))
        .await?;
    let mut after = before.clone();
    after.insert(umami.contract().clone());
    umami.drain().await?;

    let findings = check(&before, &after);
    let finding = findings
        .iter()
        .find(|f| f.subject.to_string() == modules::SiteCreated::KEY)
        .unwrap_or_else(|| panic!("no finding on the key: {findings:?}"));
    assert_eq!(finding.rule, Rule::ShapeChangedSameVersion, "{finding:?}");
    assert!(
        finding.broken.iter().any(|m| m == "module.billing"),
        "{finding:?}"
    );
    // The body the changed emitter writes: the generated type refuses it rather than
    // misreading it (and check said so first).
    let body = serde_json::to_value(SiteCreatedBroken {
        site: "blog".into(),
        owner: 7,
    })?;
    assert!(serde_json::from_value::<generated::UmamiSiteCreated>(body).is_err());
    Ok(())
}

/// The schema a consumer using `E` announces, as a handler of its key.
fn handler_of<E: Event>() -> mesh_core::contract::HandlerContract {
    mesh_core::contract::HandlerContract {
        pattern: E::KEY.to_owned(),
        version: Some(E::SCHEMA),
        schema: E::json_schema().map(mesh::Schema::into_json),
    }
}

#[test]
fn generated_types_of_a_realistic_system_read_its_events_and_check_finds_them_compatible(
) -> anyhow::Result<()> {
    use generated_system as g;
    let before = realistic::realistic_system();
    // A new module reading every event through the generated types, and calling the tool
    // with the generated request and reply: nothing breaks.
    let tool = before
        .modules()
        .flat_map(|m| &m.serves)
        .find(|t| t.tool == g::SHOP_QUOTE)
        .expect("shop.quote");
    let consumer = mesh_core::contract::ModuleContract {
        owner: "module.reader".into(),
        node: "anchor".into(),
        emits: Vec::new(),
        handles: vec![
            handler_of::<g::ShopOrderPlaced>(),
            handler_of::<g::ShopOrderCancelled>(),
            handler_of::<g::BillingInvoicePaid>(),
        ],
        serves: Vec::new(),
        calls: vec![mesh_core::contract::ToolContract {
            tool: tool.tool.clone(),
            request: Some(mesh::Schema::of::<g::ShopQuoteRequest>().into_json()),
            reply: Some(mesh::Schema::of::<g::ShopQuoteReply>().into_json()),
        }],
    };
    let mut after = before.clone();
    after.insert(consumer);
    assert_eq!(check(&before, &after), Vec::new());

    // A body of each shape reads and writes back unchanged.
    let bodies = [
        serde_json::json!({"id": "o-1", "total": {"amount": 1200, "currency": "EUR"},
            "customer": {"name": "Ada", "address": {"city": "Lyon", "country": "FR"}},
            "lines": [{"sku": "tea", "price": {"amount": 600, "currency": "EUR"}}, {}]}),
        serde_json::json!({"id": "o-2", "reason": "stock"}),
        serde_json::json!({"invoice": "i-1", "amount": {"amount": "12.00", "currency": "EUR"}}),
    ];
    let placed: g::ShopOrderPlaced = serde_json::from_value(bodies[0].clone())?;
    assert_eq!(
        placed.customer.address.as_ref().and_then(|a| a.country),
        Some(g::AddressCountry::Fr)
    );
    assert_eq!(serde_json::to_value(&placed)?, bodies[0]);
    let cancelled: g::ShopOrderCancelled = serde_json::from_value(bodies[1].clone())?;
    assert_eq!(serde_json::to_value(&cancelled)?, bodies[1]);
    let paid: g::BillingInvoicePaid = serde_json::from_value(bodies[2].clone())?;
    assert_eq!(serde_json::to_value(&paid)?, bodies[2]);
    let request = g::ShopQuoteRequest {
        plan: g::Plan::Pro,
        seats: Some(3),
    };
    assert_eq!(
        serde_json::to_value(&request)?,
        serde_json::json!({"plan": "pro", "seats": 3})
    );
    Ok(())
}

/// Names and schemas that are hard on a code generator: keywords, digits, names that differ
/// only by case or punctuation, prelude names, recursion, unions, tuples, external
/// references, control characters in descriptions, no schema at all.
fn odd_system() -> System {
    let odd = serde_json::json!({
        "type": "object",
        "required": ["type", "self", "1st", "a-b"],
        "properties": {
            "type": {"type": "string"},
            "self": {"type": "integer", "format": "uint8"},
            "1st": {"type": "boolean"},
            "a-b": {"type": ["string", "null"]},
            "aB": {"type": "number"},
            "a_b": {"type": "string"},
            "tree": {"$ref": "#"},
            "node": {"$ref": "#/definitions/Node"},
            "mix": {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            "tuple": {"type": "array", "items": [{"type": "string"}]},
            "map": {"type": "object", "additionalProperties": {"type": "integer"}},
            "kind": {"enum": ["self", "Self", "a b", "", "1"]},
            "String": {"$ref": "#/definitions/String"},
            "desc": {"type": "string", "description": "line one\r\nline\u{7}two */ \"quoted\" \\"},
            "ext": {"$ref": "http://example.com/x.json"},
            "A": {"$ref": "#/definitions/A"},
            "inline": {"type": "object", "properties": {"x": {"type": "integer", "minimum": 0}}},
            "looped": {"$ref": "#/definitions/Looped"},
        },
        "definitions": {
            "Node": {"type": "object", "properties": {
                "next": {"anyOf": [{"$ref": "#/definitions/Node"}, {"type": "null"}]}}},
            "String": {"type": "string", "enum": ["x"]},
            "A": {"$ref": "#/definitions/B"},
            "B": {"$ref": "#/definitions/A"},
            "Looped": {"type": "array", "items": {"$ref": "#/definitions/Looped"}},
        },
    });
    let contracts = serde_json::json!([
        {"owner": "module.odd", "node": "n",
         "emits": [{"key": "module.odd.type", "version": 3, "schema": odd},
                   {"key": "module.odd.no-schema", "version": 1},
                   {"key": "module.odd.plain", "version": 1, "schema": {"type": "string"}}],
         "serves": [{"tool": "odd.t", "request": {"type": "string"},
                     "reply": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}]},
        {"owner": "module.caller", "node": "n",
         "calls": [{"tool": "odd.t"}, {"tool": "nobody.serves"}]},
    ]);
    System::from_document(&contracts).expect("the odd contracts read")
}

#[test]
fn odd_names_and_schemas_give_code_that_compiles_and_reads_their_bodies() -> anyhow::Result<()> {
    use generated_odd as g;
    let system = odd_system();
    assert_committed(
        &rust(&system, &CodegenOptions::default())?,
        "tests/generated/odd.rs",
    )?;
    let body = serde_json::json!({
        "type": "t", "self": 255, "1st": true, "a-b": null, "aB": 1.5, "a_b": "u",
        "tree": {"type": "inner", "self": 0, "1st": false, "a-b": "x"},
        "node": {"next": {"next": {}}},
        "mix": 7, "tuple": ["a"], "map": {"k": 1}, "kind": "Self", "String": "x",
        "desc": "d", "ext": {"anything": [1]}, "A": "whatever", "inline": {"x": 3},
        "looped": [[], [[]]],
    });
    let read: g::OddType = serde_json::from_value(body.clone())?;
    assert_eq!(read.r#type, "t");
    assert_eq!(read.self_, 255);
    assert_eq!(serde_json::to_value(&read)?, body);
    assert_eq!(<g::OddType as Event>::SCHEMA, 3);
    let none: g::OddNoSchema = serde_json::from_value(serde_json::json!([1, "two"]))?;
    assert!(<g::OddNoSchema as Event>::json_schema().is_none());
    assert_eq!(serde_json::to_value(&none)?, serde_json::json!([1, "two"]));
    let plain: g::OddPlain = serde_json::from_value(serde_json::json!("text"))?;
    assert_eq!(plain.0, "text");
    let request: g::OddTRequest = "hi".to_owned();
    let reply: g::OddTReply = Some(serde_json::json!({"any": "thing"}));
    assert_eq!(g::ODD_T, "odd.t");
    assert_eq!(g::NOBODY_SERVES, "nobody.serves");
    let unknown_request: g::NobodyServesRequest = serde_json::json!(1);
    let unknown_reply: g::NobodyServesReply = serde_json::json!(2);
    let _ = (request, reply, unknown_request, unknown_reply);
    // Only what a module consumes or calls: the caller handles nothing and calls two tools.
    let caller = rust(
        &system,
        &CodegenOptions {
            module: Some("module.caller".into()),
        },
    )?;
    assert!(!caller.contains("impl mesh::Event"), "{caller}");
    assert!(
        caller.contains("ODD_T") && caller.contains("NOBODY_SERVES"),
        "{caller}"
    );
    let unknown = rust(
        &system,
        &CodegenOptions {
            module: Some("module.nobody".into()),
        },
    );
    assert!(unknown.is_err());
    Ok(())
}
