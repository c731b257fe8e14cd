//! Dead letters with provenance, on a private node under the applied access plan (users are
//! global to a broker): a dead letter umami forges naming billing's queue is stored as
//! untrusted and `mesh dead redrive` refuses it (unless its claims are stripped), a genuine
//! one is re-driven; umami's tap gets umami's dead letters and none of billing's, and the
//! audit logger (enforcing identity) gets both.
//!
//! The spec: modules `billing` and `umami` both read `module.shop.#`, module `shop` emits,
//! and the node runs an audit logger. Each consumer fails an event of its own kind once,
//! permanently, so it is dead-lettered; re-driven, it is handled.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use amqprs::channel::BasicPublishArguments;
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{BasicProperties, FieldTable, FieldValue};
use bytes::Bytes;
use mesh::amqp::access::AccessSpec;
use mesh::raw::{DeadReason, Name, RetryPolicy, TopicPattern};
use mesh::{Bus, HandlerError, Incoming, Outgoing};
use mesh_audit::{
    AuditLogger, AuditOptions, DeadLetterQuery, DeadLetterRecord, Store, StoreOptions,
};
use mesh_testkit::planned::PlannedNode;
use mesh_testkit::{eventually, TempStore};
use tokio_util::sync::CancellationToken;

use crate::{code, finish, mesh, stdout, WAIT};

const BILLING_QUEUE: &str = "n1.billing.events";
const UMAMI_QUEUE: &str = "n1.umami.events";

fn spec() -> AccessSpec {
    let shop = || [TopicPattern::parse("module.shop.#").unwrap()];
    AccessSpec::new(Name::parse("n1").unwrap())
        .module(Name::parse("billing").unwrap(), shop())
        .module(Name::parse("umami").unwrap(), shop())
        .module(Name::parse("shop").unwrap(), [])
        .audit_logger(true)
}

/// A consumer of `module.shop.#` as `module`'s planned user, with identity enforced: it fails
/// `module.shop.<module>.fails` permanently the first time, handles everything else (and
/// that event again, once re-driven). Counts what it handled, per key.
async fn consumer(
    node: &PlannedNode,
    module: &str,
    handled: Arc<Mutex<HashMap<String, u32>>>,
) -> Bus {
    let fails = format!("module.shop.{module}.fails");
    let seen = Arc::new(Mutex::new(0u32));
    Bus::builder()
        .node("n1")
        .module(module)
        .enforce_identity(true)
        .on_raw(["module.shop.#"], move |incoming: Incoming<Bytes>| {
            let (handled, seen, fails) = (handled.clone(), seen.clone(), fails.clone());
            async move {
                let key = incoming.meta.key().to_string();
                if key == fails {
                    let first = {
                        let mut seen = seen.lock().unwrap();
                        *seen += 1;
                        *seen == 1
                    };
                    if first {
                        return Err(HandlerError::permanent(std::io::Error::other("no")));
                    }
                }
                *handled.lock().unwrap().entry(key).or_default() += 1;
                Ok(())
            }
        })
        .start(node.transport(&format!("module.{module}")).await.unwrap())
        .await
        .unwrap_or_else(|e| panic!("{module} starts as its own user: {e}"))
}

/// Waits until the store holds a dead letter matching `pick`, and returns it.
async fn stored(
    store: &Store,
    what: &str,
    pick: impl Fn(&DeadLetterRecord) -> bool,
) -> DeadLetterRecord {
    let pick = &pick;
    eventually(WAIT, what, || async move {
        let all = store
            .dead_letters(&DeadLetterQuery::new().limit(100))
            .await
            .ok()?;
        all.into_iter().find(|d| pick(d))
    })
    .await
}

/// A dead letter written by umami's user on `mesh.events.dead` under `key`, claiming to be
/// billing's: `x-mesh-dead-queue` billing's queue, `x-mesh-user` billing's user.
fn forged() -> BasicProperties {
    let mut headers = FieldTable::new();
    for (name, value) in [
        ("x-event-id", mesh_core::EventId::new().to_string()),
        ("x-source", "shop".to_owned()),
        ("x-node", "n1".to_owned()),
        ("x-time", "2026-12-02T00:00:00Z".to_owned()),
        ("x-mesh-routing-key", "module.shop.order.placed".to_owned()),
        ("x-mesh-dead-reason", "permanent".to_owned()),
        ("x-mesh-dead-queue", BILLING_QUEUE.to_owned()),
        ("x-mesh-dead-time", "2026-12-02T00:00:01Z".to_owned()),
        ("x-mesh-user", "module.billing".to_owned()),
    ] {
        headers.insert(
            name.try_into().unwrap(),
            FieldValue::S(value.try_into().unwrap()),
        );
    }
    let mut props = BasicProperties::default();
    props
        .with_content_type("application/json")
        .with_delivery_mode(2)
        .with_user_id("module.umami")
        .with_headers(headers);
    props
}

async fn redrive(node: &PlannedNode, store: &TempStore, args: &[&str]) -> std::process::Output {
    let child = mesh(Some(&node.url("operator")))
        .args(["dead", "redrive", "--store", store.url()])
        .args(args)
        .spawn()
        .expect("mesh starts");
    finish(child).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_dead_letters_are_untrusted_and_taps_see_their_own() {
    let node = PlannedNode::start(&spec()).await.expect("the planned node");
    let temp = TempStore::sqlite();
    let store = Store::open(StoreOptions::url(temp.url()).unwrap())
        .await
        .expect("the audit store");

    // The audit logger, as its planned user, enforcing identity.
    let logger_transport = node.transport("audit-logger.n1").await.unwrap();
    let logger = AuditLogger::new(
        store.clone(),
        AuditOptions::new()
            .node("n1")
            .enforce_identity(Some(String::new())),
    );
    let shutdown = CancellationToken::new();
    let task = {
        let (logger, transport, shutdown) =
            (logger.clone(), logger_transport.clone(), shutdown.clone());
        tokio::spawn(async move { logger.run(transport.as_ref(), &shutdown).await })
    };
    eventually(WAIT, "the logger's two consumers", || {
        let attached = mesh_core::Transport::health(logger_transport.as_ref()).consumers_attached;
        async move { (attached >= 2).then_some(()) }
    })
    .await;

    // Their queues are the operator's to declare (as `mesh topology apply` does).
    for module in ["billing", "umami"] {
        node.declare_consumer("n1", module, &["module.shop.#"], &RetryPolicy::default())
            .await
            .expect("the operator declares the consumers' queues");
    }
    let handled = Arc::new(Mutex::new(HashMap::<String, u32>::new()));
    let billing = consumer(&node, "billing", handled.clone()).await;
    let umami = consumer(&node, "umami", Arc::new(Mutex::new(HashMap::new()))).await;
    let mut tap = umami
        .dead_letters()
        .await
        .expect("umami taps its own dead letters");
    // All of them it may not: the broker refuses umami a tap on `#`.
    assert!(
        umami.all_dead_letters().await.is_err(),
        "umami may not read every dead letter"
    );
    let shop = Bus::builder()
        .node("n1")
        .module("shop")
        .start(node.transport("module.shop").await.unwrap())
        .await
        .expect("shop starts");

    // billing's dead letter first: once the logger has it, the broker has routed it to every
    // queue bound to its key, so a tap bound to it would get it before umami's.
    shop.emit_outgoing(Outgoing::json("billing.fails", &serde_json::json!({"n": 1})).unwrap())
        .await
        .expect("shop emits");
    let genuine = stored(&store, "billing's dead letter", |d| {
        d.queue.as_deref() == Some(BILLING_QUEUE) && d.user_id.as_deref() == Some("module.billing")
    })
    .await;
    assert!(!genuine.untrusted, "{genuine:?}");
    assert_eq!(genuine.routing_key, "module.shop.billing.fails");

    shop.emit_outgoing(Outgoing::json("umami.fails", &serde_json::json!({"n": 2})).unwrap())
        .await
        .expect("shop emits");
    let first = tokio::time::timeout(WAIT, tap.next())
        .await
        .expect("a dead letter on umami's tap in time")
        .expect("the tap is open");
    assert_eq!(first.message.routing_key, "module.shop.umami.fails");
    assert_eq!(
        first.note.as_ref().map(|n| n.queue.as_str()),
        Some(UMAMI_QUEUE),
        "umami's tap gets its own dead letters, not billing's"
    );
    let own = stored(&store, "umami's dead letter", |d| {
        d.queue.as_deref() == Some(UMAMI_QUEUE)
    })
    .await;
    assert!(!own.untrusted, "{own:?}");

    // umami forges one of billing's: under billing's queue name the broker refuses it …
    let raw = Connection::open(&OpenConnectionArguments::new(
        "127.0.0.1",
        node.node.port(),
        "module.umami",
        node.password("module.umami"),
    ))
    .await
    .expect("umami connects");
    let refused = raw.open_channel(None).await.unwrap();
    refused
        .basic_publish(
            forged(),
            b"{}".to_vec(),
            BasicPublishArguments::new("mesh.events.dead", BILLING_QUEUE),
        )
        .await
        .expect("sent");
    eventually(WAIT, "the broker closes the channel (403)", || {
        let open = refused.is_open();
        async move { (!open).then_some(()) }
    })
    .await;
    // … under its own, it goes through, and is stored as untrusted.
    let channel = raw.open_channel(None).await.unwrap();
    channel
        .basic_publish(
            forged(),
            b"{}".to_vec(),
            BasicPublishArguments::new("mesh.events.dead", UMAMI_QUEUE),
        )
        .await
        .expect("published");
    let forgery = stored(&store, "the forged dead letter", |d| {
        d.queue.as_deref() == Some(BILLING_QUEUE) && d.user_id.as_deref() == Some("module.umami")
    })
    .await;
    assert!(forgery.untrusted, "{forgery:?}");

    // `mesh dead list` shows it as such.
    let child = mesh(None)
        .args(["dead", "list", "--store", temp.url()])
        .spawn()
        .expect("mesh starts");
    let list = finish(child).await;
    assert_eq!(code(&list), 0, "{list:?}");
    let text = stdout(&list);
    let line = text
        .lines()
        .find(|l| l.contains(&forgery.id.to_string()))
        .unwrap_or_else(|| panic!("the forgery is listed: {text}"));
    assert!(line.contains("UNTRUSTED"), "{line}");
    assert!(
        !text
            .lines()
            .find(|l| l.contains(&genuine.id.to_string()))
            .unwrap_or_default()
            .contains("UNTRUSTED"),
        "{text}"
    );

    // Re-drive refuses it without the override, and publishes nothing.
    let out = redrive(&node, &temp, &[&forgery.id.to_string()]).await;
    assert_eq!(code(&out), 1, "{out:?}");
    assert!(stdout(&out).contains("untrusted"), "{out:?}");
    let after = store.dead_letter(forgery.id).await.unwrap().unwrap();
    assert_eq!(after.redrive_count, 0);

    // The genuine one is re-driven, and billing handles it.
    let out = redrive(&node, &temp, &[&genuine.id.to_string()]).await;
    assert_eq!(code(&out), 0, "{out:?}");
    eventually(WAIT, "billing handles the re-driven event", || {
        let n = handled
            .lock()
            .unwrap()
            .get("module.shop.billing.fails")
            .copied();
        async move { (n == Some(1)).then_some(()) }
    })
    .await;

    // With the override, the forgery goes without its claims.
    let out = redrive(
        &node,
        &temp,
        &[&forgery.id.to_string(), "--strip-untrusted-claims"],
    )
    .await;
    assert_eq!(code(&out), 0, "{out:?}");
    let after = store.dead_letter(forgery.id).await.unwrap().unwrap();
    assert_eq!(after.redrive_count, 1);
    // Without its `x-mesh-user`, billing (enforcing identity) believes nothing of it: it
    // comes with the operator's user-id under shop's key, and is dead-lettered as forged.
    let refused = stored(&store, "billing refuses the stripped forgery", |d| {
        d.queue.as_deref() == Some(BILLING_QUEUE)
            && d.reason == Some(DeadReason::ForgedSource)
            && d.routing_key == "module.shop.order.placed"
    })
    .await;
    assert!(!refused.untrusted, "{refused:?}");
    assert_eq!(
        handled.lock().unwrap().get("module.shop.order.placed"),
        None
    );

    // The logger has every dead letter: billing's, umami's, the forgery.
    let all = store
        .dead_letters(&DeadLetterQuery::new().limit(100))
        .await
        .unwrap();
    for id in [genuine.id, own.id, forgery.id] {
        assert!(all.iter().any(|d| d.id == id), "{all:?}");
    }

    let _ = raw.close().await;
    shop.drain().await.unwrap();
    umami.drain().await.unwrap();
    billing.drain().await.unwrap();
    shutdown.cancel();
    task.await.unwrap().unwrap();
    store.close().await;
}
