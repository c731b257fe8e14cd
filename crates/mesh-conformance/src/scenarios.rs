//! The scenarios. Each takes a fresh harness, uses only the SDK and the harness, and waits
//! on conditions with a timeout, never on bare sleeps.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mesh::{
    Bus, DeadReason, ErrorKind, Event, EventId, Incoming, MemoryDedup, Outgoing, RemoteError,
    RetryPolicy,
};
use mesh_core::{PublishOptions, WireMessage};
use mesh_testkit::eventually;
use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

use crate::harness::{Harness, Role};
use crate::kit::{within, Tally, WAIT};

/// Short delays so the suite runs in seconds on a real broker.
fn short_policy(attempts: u32) -> RetryPolicy {
    RetryPolicy::new(
        attempts,
        vec![Duration::from_millis(200), Duration::from_millis(400)],
    )
    .expect("a valid policy")
}

/// An event with an empty JSON body from `source` on node `n1`, as published by hand.
fn event(key: &str, source: &str) -> mesh_core::Envelope {
    mesh_core::Envelope {
        id: EventId::new(),
        key: mesh_core::RoutingKey::parse(key).expect("key"),
        source: source.into(),
        node: "n1".into(),
        time: mesh_core::Timestamp::now(),
        causation_id: None,
        schema: None,
        extra_headers: Default::default(),
        body: Bytes::from_static(b"{}"),
    }
}

async fn emitter(harness: &dyn Harness, module: &str) -> Bus {
    Bus::builder()
        .node("n1")
        .module(module)
        .start(harness.transport(Role::Module(module)).await)
        .await
        .expect("emitter starts")
}

/// A bus of the operator's, which reads every dead letter: under the access plan a module
/// reads only its own queues' dead letters (and the broker's own only the operator and the
/// audit logger).
async fn operator(harness: &dyn Harness) -> Bus {
    Bus::builder()
        .node("n1")
        .module("operator")
        .start(harness.transport(Role::Operator).await)
        .await
        .expect("the operator's bus starts")
}

/// 10,000 events through 3 competing consumers with prefetch 32 arrive exactly once each.
pub async fn competing_consumers_get_each_event_once(harness: &dyn Harness) {
    const EVENTS: usize = 10_000;
    let seen = Arc::new(Tally::default());
    let per_worker = Arc::new(Tally::default());
    let mut workers = Vec::new();
    for worker in 0..3 {
        let seen = Arc::clone(&seen);
        let per_worker = Arc::clone(&per_worker);
        let bus = Bus::builder()
            .node("n1")
            .module("worker")
            .prefetch(32)
            .on_raw(["module.src.job.#"], move |incoming: Incoming<Bytes>| {
                seen.hit(incoming.meta.id().to_string());
                per_worker.hit(worker.to_string());
                async { Ok(()) }
            })
            .start(harness.transport(Role::Module("worker")).await)
            .await
            .expect("worker starts");
        workers.push(bus);
    }
    let src = emitter(harness, "src").await;
    let mut pending = Vec::with_capacity(EVENTS);
    for n in 0..EVENTS {
        let outgoing = Outgoing::json("job.created", &serde_json::json!({ "n": n })).expect("json");
        pending.push(src.emit_nowait(outgoing).await.expect("emit accepted"));
    }
    for confirm in futures::future::join_all(pending).await {
        confirm.expect("emit confirmed");
    }
    seen.wait_for("every event handled", |c| c.len() == EVENTS)
        .await;
    for worker in &workers {
        worker.drain().await.expect("drain");
    }
    let counts = seen.snapshot();
    assert_eq!(counts.len(), EVENTS);
    let duplicates: Vec<_> = counts.iter().filter(|(_, n)| **n != 1).collect();
    assert!(
        duplicates.is_empty(),
        "events handled more than once: {duplicates:?}"
    );
    let shares = per_worker.snapshot();
    assert_eq!(shares.len(), 3, "every worker got a share: {shares:?}");
    assert_eq!(shares.values().sum::<u32>() as usize, EVENTS);
    src.drain().await.expect("drain");
}

/// Two `on` handlers of one module with different patterns each get exactly their events,
/// from one queue.
pub async fn handlers_of_one_module_share_one_queue(harness: &dyn Harness) {
    let a = Arc::new(Tally::default());
    let b = Arc::new(Tally::default());
    let (ta, tb) = (Arc::clone(&a), Arc::clone(&b));
    let bus = Bus::builder()
        .node("n1")
        .module("m")
        .on_raw(["module.src.a.*"], move |i: Incoming<Bytes>| {
            ta.hit(i.meta.key().to_string());
            async { Ok(()) }
        })
        .on_raw(["module.src.b.#"], move |i: Incoming<Bytes>| {
            tb.hit(i.meta.key().to_string());
            async { Ok(()) }
        })
        .start(harness.transport(Role::Module("m")).await)
        .await
        .expect("bus starts");
    let src = emitter(harness, "src").await;
    for _ in 0..10 {
        for name in ["a.one", "b.two", "b.two.three", "c.other", "a.one.deep"] {
            src.emit_outgoing(
                mesh::Outgoing::json(name, &serde_json::json!({})).expect("a JSON payload"),
            )
            .await
            .expect("emit");
        }
    }
    a.wait_for("handler a's events", |c| c.values().sum::<u32>() == 10)
        .await;
    b.wait_for("handler b's events", |c| c.values().sum::<u32>() == 20)
        .await;
    bus.drain().await.expect("drain");
    assert_eq!(
        a.snapshot(),
        HashMap::from([("module.src.a.one".to_owned(), 10)])
    );
    assert_eq!(
        b.snapshot(),
        HashMap::from([
            ("module.src.b.two".to_owned(), 10),
            ("module.src.b.two.three".to_owned(), 10)
        ])
    );
    let queues: Vec<String> = harness
        .queues()
        .await
        .into_iter()
        .filter(|q| q.starts_with("n1.m.") && !q.contains(".retry."))
        .collect();
    assert_eq!(queues, vec!["n1.m.events".to_owned()]);
    src.drain().await.expect("drain");
}

/// A durable queue of dead letters some scenarios bind to see that nothing died.
const WATCH_DEAD: &str = "n1.audit-logger.dead";

/// A handler that fails twice then succeeds is called 3 times and the event is acked.
pub async fn a_handler_that_fails_twice_is_called_three_times(harness: &dyn Harness) {
    let calls = Arc::new(Tally::default());
    let counted = Arc::clone(&calls);
    let bus = Bus::builder()
        .node("n1")
        .module("m")
        .retry(short_policy(5))
        .on_raw(["module.src.flaky.#"], move |i: Incoming<Bytes>| {
            counted.hit("calls");
            let attempt = i.meta.attempt();
            async move {
                if attempt < 3 {
                    Err(mesh::HandlerError::retry(format!(
                        "attempt {attempt} fails"
                    )))
                } else {
                    Ok(())
                }
            }
        })
        .start(harness.transport(Role::Module("m")).await)
        .await
        .expect("bus starts");
    // A durable queue of dead letters, bound before the event: it would keep one.
    drop(
        harness
            .transport(Role::AuditLogger)
            .await
            .subscribe(mesh_core::SubscriptionSpec {
                queue: mesh_core::QueueSpec::DeadLetters(mesh_core::DeadQueue::Durable {
                    name: WATCH_DEAD.to_owned(),
                }),
                patterns: Vec::new(),
                prefetch: 1,
                retry_delays: Vec::new(),
            })
            .await
            .expect("a queue of dead letters"),
    );
    let src = emitter(harness, "src").await;
    src.emit_outgoing(
        mesh::Outgoing::json("flaky.job", &serde_json::json!({})).expect("a JSON payload"),
    )
    .await
    .expect("emit");
    calls
        .wait_for("three calls", |c| c.get("calls") == Some(&3))
        .await;
    bus.drain().await.expect("drain");
    assert_eq!(calls.get("calls"), 3);
    eventually(WAIT, "the event acked", || async {
        (harness.messages("n1.m.events").await == Some(0)).then_some(())
    })
    .await;
    assert_eq!(harness.messages(WATCH_DEAD).await, Some(0));
    src.drain().await.expect("drain");
}

/// A handler that always fails is called exactly max-attempts times; the event is then
/// dead-lettered with reason and attempt count, while other events keep flowing.
pub async fn a_handler_that_always_fails_is_dead_lettered_after_max_attempts(
    harness: &dyn Harness,
) {
    let calls = Arc::new(Tally::default());
    let good_done = Arc::new(Mutex::new(None::<Instant>));
    let last_poison_call = Arc::new(Mutex::new(None::<Instant>));
    let (counted, good, poison) = (
        Arc::clone(&calls),
        Arc::clone(&good_done),
        Arc::clone(&last_poison_call),
    );
    let bus = Bus::builder()
        .node("n1")
        .module("m")
        .prefetch(1)
        .retry(short_policy(3))
        .on_raw(["module.src.#"], move |i: Incoming<Bytes>| {
            let key = i.meta.key().to_string();
            counted.hit(key.clone());
            let failed = key.ends_with("poison");
            if failed {
                *poison.lock().expect("lock") = Some(Instant::now());
            } else if counted.get(&key) == 5 {
                *good.lock().expect("lock") = Some(Instant::now());
            }
            async move {
                if failed {
                    Err(mesh::HandlerError::retry("always fails"))
                } else {
                    Ok(())
                }
            }
        })
        .start(harness.transport(Role::Module("m")).await)
        .await
        .expect("bus starts");
    let src = emitter(harness, "src").await;
    let watcher = operator(harness).await;
    let mut dead = watcher.all_dead_letters().await.expect("dead letters");
    let poison_id = src
        .emit_outgoing(
            mesh::Outgoing::json("item.poison", &serde_json::json!({"poison": true}))
                .expect("a JSON payload"),
        )
        .await
        .expect("emit");
    for _ in 0..5 {
        src.emit_outgoing(
            mesh::Outgoing::json("item.good", &serde_json::json!({})).expect("a JSON payload"),
        )
        .await
        .expect("emit");
    }
    let letter = within("the dead letter", dead.next())
        .await
        .expect("a dead letter");
    assert_eq!(letter.event_id, Some(poison_id));
    let info = letter.note.clone().expect("dead-letter annotations");
    assert_eq!(info.reason, DeadReason::MaxAttempts);
    assert_eq!(info.attempts, 3);
    assert_eq!(info.queue, "n1.m.events");
    assert!(info
        .last_error
        .as_deref()
        .is_some_and(|e| e.contains("always fails")));
    assert_eq!(
        letter.message.body,
        Bytes::from_static(b"{\"poison\":true}")
    );
    letter.ack().await.expect("ack dead letter");
    calls
        .wait_for("the good events", |c| {
            c.get("module.src.item.good") == Some(&5)
        })
        .await;
    bus.drain().await.expect("drain");
    assert_eq!(calls.get("module.src.item.poison"), 3);
    let good_at = good_done.lock().expect("lock").expect("good handled");
    let poison_at = last_poison_call
        .lock()
        .expect("lock")
        .expect("poison called");
    assert!(
        good_at < poison_at,
        "the good events flowed while the poison event waited for its retries"
    );
    src.drain().await.expect("drain");
}

/// A permanent error dead-letters after one call.
pub async fn a_permanent_error_dead_letters_after_one_call(harness: &dyn Harness) {
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let bus = Bus::builder()
        .node("n1")
        .module("m")
        .retry(short_policy(5))
        .on_raw(["module.src.#"], move |_: Incoming<Bytes>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Err(mesh::HandlerError::permanent("invariant broken")) }
        })
        .start(harness.transport(Role::Module("m")).await)
        .await
        .expect("bus starts");
    let src = emitter(harness, "src").await;
    let watcher = operator(harness).await;
    let mut dead = watcher.all_dead_letters().await.expect("dead letters");
    let id = src
        .emit_outgoing(
            mesh::Outgoing::json("order.placed", &serde_json::json!({})).expect("a JSON payload"),
        )
        .await
        .expect("emit");
    let letter = within("the dead letter", dead.next())
        .await
        .expect("letter");
    assert_eq!(letter.event_id, Some(id));
    let info = letter.note.clone().expect("annotations");
    assert_eq!(info.reason, DeadReason::Permanent);
    assert_eq!(info.attempts, 1);
    letter.ack().await.expect("ack");
    bus.drain().await.expect("drain");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    src.drain().await.expect("drain");
}

/// Messages from foreign publishers that break the contract are dead-lettered after one
/// delivery, with the reason; the next good event still flows.
pub async fn an_undecodable_message_is_dead_lettered(harness: &dyn Harness) {
    let calls = Arc::new(Tally::default());
    let counted = Arc::clone(&calls);
    let bus = Bus::builder()
        .node("n1")
        .module("m")
        .on_raw(["module.src.#"], move |i: Incoming<Bytes>| {
            counted.hit(i.meta.key().to_string());
            async { Ok(()) }
        })
        .start(harness.transport(Role::Module("m")).await)
        .await
        .expect("bus starts");
    let src = emitter(harness, "src").await;
    let watcher = operator(harness).await;
    let mut dead = watcher.all_dead_letters().await.expect("dead letters");
    let raw = harness.transport(Role::Module("src")).await;

    let good = event("module.src.raw.event", "src");
    let mut no_id = mesh_core::codec::encode(&good);
    no_id.properties.headers.remove(mesh_core::codec::EVENT_ID);
    let mut not_json: WireMessage = mesh_core::codec::encode(&mesh_core::Envelope {
        id: EventId::new(),
        ..good.clone()
    });
    not_json.body = Bytes::from_static(b"not json");
    for message in [no_id, not_json] {
        raw.publish(message, PublishOptions::default())
            .await
            .expect("published")
            .await
            .expect("confirmed");
    }
    let mut fields = Vec::new();
    for _ in 0..2 {
        let letter = within("a dead letter", dead.next()).await.expect("letter");
        let info = letter.note.clone().expect("annotations");
        assert_eq!(info.reason, DeadReason::Undecodable);
        assert_eq!(info.attempts, 1);
        fields.push(info.last_error.unwrap_or_default());
        letter.ack().await.expect("ack");
    }
    fields.sort();
    assert!(fields[0].contains("body is not JSON"), "{fields:?}");
    assert!(fields[1].contains("x-event-id"), "{fields:?}");
    // The next good event still flows, and the bad ones never reached the handler.
    raw.publish(mesh_core::codec::encode(&good), PublishOptions::default())
        .await
        .expect("published")
        .await
        .expect("confirmed");
    calls
        .wait_for("the good event", |c| {
            c.get("module.src.raw.event") == Some(&1)
        })
        .await;
    bus.drain().await.expect("drain");
    assert_eq!(calls.snapshot().values().sum::<u32>(), 1);
    raw.close().await;
    src.drain().await.expect("drain");
}

#[derive(Serialize, Deserialize)]
struct ThingV2 {
    name: String,
    size: u32,
}

impl Event for ThingV2 {
    const KEY: &'static str = "module.src.thing.made";
    const SCHEMA: u32 = 2;
}

#[derive(Serialize, Deserialize)]
struct ThingV1 {
    name: String,
}

impl Event for ThingV1 {
    const KEY: &'static str = "module.src.thing.made";
}

/// An event whose schema version the consumer does not read is dead-lettered with that
/// reason, never misread.
pub async fn an_unread_schema_version_is_dead_lettered(harness: &dyn Harness) {
    let calls = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&calls);
    let bus = Bus::builder()
        .node("n1")
        .module("m")
        .on(move |_: Incoming<ThingV1>| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Ok(()) }
        })
        .start(harness.transport(Role::Module("m")).await)
        .await
        .expect("bus starts");
    let src = emitter(harness, "src").await;
    let watcher = operator(harness).await;
    let mut dead = watcher.all_dead_letters().await.expect("dead letters");
    let id = src
        .emit(&ThingV2 {
            name: "x".into(),
            size: 3,
        })
        .await
        .expect("emit");
    let letter = within("the dead letter", dead.next())
        .await
        .expect("letter");
    assert_eq!(letter.event_id, Some(id));
    let info = letter.note.clone().expect("annotations");
    assert_eq!(info.reason, DeadReason::UnreadSchema);
    assert!(info
        .last_error
        .unwrap_or_default()
        .contains("schema version 2"));
    letter.ack().await.expect("ack");
    bus.drain().await.expect("drain");
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    src.drain().await.expect("drain");
}

#[derive(Serialize, Deserialize)]
struct OtherModulesEvent {}

impl Event for OtherModulesEvent {
    const KEY: &'static str = "module.other.site.created";
}

/// A module cannot emit under another module's name, nor an invalid name.
pub async fn an_emit_under_another_module_is_refused(harness: &dyn Harness) {
    let src = emitter(harness, "src").await;
    let error = src.emit(&OtherModulesEvent {}).await.expect_err("refused");
    assert!(
        matches!(error.kind(), ErrorKind::ForeignKey { key, .. } if key == "module.other.site.created"),
        "{error:?}"
    );
    let error = src
        .emit_outgoing(Outgoing::raw("mesh.delivery.deployed", "{}").expect("valid key"))
        .await
        .expect_err("refused");
    assert!(
        matches!(error.kind(), ErrorKind::ForeignKey { .. }),
        "{error:?}"
    );
    // A wildcard is no event name: refused when the event is built, before any emit.
    let error = mesh::Outgoing::json("site.*", &serde_json::json!({})).expect_err("refused");
    assert_eq!(error.kind(), &ErrorKind::InvalidKey);
    src.drain().await.expect("drain");
}

/// An ephemeral listener sees only events emitted after it started and leaves nothing
/// behind.
pub async fn an_ephemeral_listener_sees_only_later_events_and_leaves_nothing(
    harness: &dyn Harness,
) {
    let src = emitter(harness, "src").await;
    let before = src
        .emit_outgoing(
            mesh::Outgoing::json("note.before", &serde_json::json!({})).expect("a JSON payload"),
        )
        .await
        .expect("emit");
    let mut listener = src.listen(["module.src.note.#"]).await.expect("listen");
    let queue = listener.queue().to_owned();
    assert!(harness.queues().await.contains(&queue));
    let first = src
        .emit_outgoing(
            mesh::Outgoing::json("note.after", &serde_json::json!({"n": 1}))
                .expect("a JSON payload"),
        )
        .await
        .expect("emit");
    let second = src
        .emit_outgoing(
            mesh::Outgoing::json("note.after", &serde_json::json!({"n": 2}))
                .expect("a JSON payload"),
        )
        .await
        .expect("emit");
    let got1 = within("first note", listener.next())
        .await
        .expect("open")
        .expect("valid");
    let got2 = within("second note", listener.next())
        .await
        .expect("open")
        .expect("valid");
    assert_ne!(got1.meta.id(), before);
    assert_eq!((got1.meta.id(), got2.meta.id()), (first, second));
    drop(listener);
    eventually(WAIT, "the listener's queue is gone", || async {
        (!harness.queues().await.contains(&queue)).then_some(())
    })
    .await;
    src.drain().await.expect("drain");
}

/// `drain()` waits for an in-flight handler and its ack.
pub async fn drain_waits_for_an_in_flight_handler(harness: &dyn Harness) {
    let started = Arc::new(Notify::new());
    let release = Arc::new(Notify::new());
    let finished = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (s, r, f) = (
        Arc::clone(&started),
        Arc::clone(&release),
        Arc::clone(&finished),
    );
    let bus = Bus::builder()
        .node("n1")
        .module("m")
        .on_raw(["module.src.#"], move |_: Incoming<Bytes>| {
            let (s, r, f) = (Arc::clone(&s), Arc::clone(&r), Arc::clone(&f));
            async move {
                let released = r.notified();
                s.notify_one();
                released.await;
                f.store(true, Ordering::SeqCst);
                Ok(())
            }
        })
        .start(harness.transport(Role::Module("m")).await)
        .await
        .expect("bus starts");
    let src = emitter(harness, "src").await;
    src.emit_outgoing(
        mesh::Outgoing::json("slow.job", &serde_json::json!({})).expect("a JSON payload"),
    )
    .await
    .expect("emit");
    within("the handler to start", started.notified()).await;
    let draining = {
        let bus = bus.clone();
        let finished = Arc::clone(&finished);
        tokio::spawn(async move {
            bus.drain().await.expect("drain");
            finished.load(Ordering::SeqCst)
        })
    };
    for _ in 0..100 {
        tokio::task::yield_now().await;
    }
    assert!(
        !draining.is_finished(),
        "drain returned while a handler ran"
    );
    release.notify_one();
    let handler_had_finished = within("drain", draining).await.expect("drain task");
    assert!(
        handler_had_finished,
        "drain returned before the handler finished"
    );
    eventually(WAIT, "the event acked", || async {
        (harness.messages("n1.m.events").await == Some(0)).then_some(())
    })
    .await;
    src.drain().await.expect("drain");
}

/// `drain()` waits for the confirms of emits nobody awaited: those whose `PendingEmit` is
/// still held resolve to success afterwards, and those dropped are delivered too.
pub async fn drain_confirms_emits_nobody_awaited(harness: &dyn Harness) {
    const EMITS: u32 = 200;
    let seen = Arc::new(Tally::default());
    let tally = Arc::clone(&seen);
    let sink = Bus::builder()
        .node("n1")
        .module("sink")
        .on_raw(["module.src.#"], move |_: Incoming<Bytes>| {
            tally.hit("burst");
            std::future::ready(Ok(()))
        })
        .start(harness.transport(Role::Module("sink")).await)
        .await
        .expect("bus starts");
    // One emitter drops every `PendingEmit` at once; drain waits for their confirms.
    let dropping = emitter(harness, "src").await;
    for i in 0..EMITS / 2 {
        let outgoing = Outgoing::json("dropped", &serde_json::json!({ "i": i })).expect("valid");
        drop(dropping.emit_nowait(outgoing).await.expect("taken"));
    }
    dropping.drain().await.expect("drain");
    // Another holds them across its drain, and awaits them afterwards.
    let holding = emitter(harness, "src").await;
    let mut held = Vec::new();
    for i in 0..EMITS / 2 {
        let outgoing = Outgoing::json("held", &serde_json::json!({ "i": i })).expect("valid");
        held.push(holding.emit_nowait(outgoing).await.expect("taken"));
    }
    holding.drain().await.expect("drain");
    for pending in held {
        within("a held emit", pending)
            .await
            .expect("confirmed: drain waited for it");
    }
    seen.wait_for("every emit handled", |counts| {
        counts.get("burst").copied() == Some(EMITS)
    })
    .await;
    sink.drain().await.expect("drain");
}

/// With the dedup helper, the same event delivered twice runs the effect once.
pub async fn dedup_runs_the_effect_once(harness: &dyn Harness) {
    let deliveries = Arc::new(Tally::default());
    let effects = Arc::new(AtomicU32::new(0));
    let store: Arc<dyn mesh::DedupStore> = Arc::new(MemoryDedup::default());
    let effect = Arc::clone(&effects);
    let deduped = mesh::dedup(store, move |_: Incoming<Bytes>| {
        effect.fetch_add(1, Ordering::SeqCst);
        async { Ok(()) }
    });
    let counted = Arc::clone(&deliveries);
    let bus = Bus::builder()
        .node("n1")
        .module("m")
        .prefetch(1)
        .on_raw(["module.src.#"], move |i: Incoming<Bytes>| {
            counted.hit(i.meta.key().to_string());
            deduped(i)
        })
        .start(harness.transport(Role::Module("m")).await)
        .await
        .expect("bus starts");
    let src = emitter(harness, "src").await;
    let id = EventId::new();
    for _ in 0..2 {
        let outgoing = Outgoing::json("pay.charged", &serde_json::json!({}))
            .expect("json")
            .id(id);
        src.emit_outgoing(outgoing).await.expect("emit");
    }
    src.emit_outgoing(
        mesh::Outgoing::json("pay.end", &serde_json::json!({})).expect("a JSON payload"),
    )
    .await
    .expect("emit");
    deliveries
        .wait_for("both copies and the end marker", |c| {
            c.get("module.src.pay.charged") == Some(&2) && c.get("module.src.pay.end") == Some(&1)
        })
        .await;
    bus.drain().await.expect("drain");
    // The end marker's effect counts too: 1 for the charge, 1 for the marker.
    assert_eq!(effects.load(Ordering::SeqCst), 2);
    src.drain().await.expect("drain");
}

#[derive(Serialize, Deserialize)]
struct Add {
    a: i64,
    b: i64,
}

async fn calculator(harness: &dyn Harness) -> Bus {
    Bus::builder()
        .node("n2")
        .module("calc")
        .serve("calc.add", |req: Add, _meta| async move {
            if req.b == 0 {
                Err(RemoteError {
                    code: "zero".into(),
                    message: "adding zero is pointless".into(),
                })
            } else {
                Ok(req.a + req.b)
            }
        })
        .start(harness.transport(Role::Module("calc")).await)
        .await
        .expect("server starts")
}

/// RPC: a round trip, and a remote error arriving as the typed error with its code.
pub async fn rpc_round_trip_and_remote_error(harness: &dyn Harness) {
    let server = calculator(harness).await;
    let client = emitter(harness, "client").await;
    let sum: i64 = client
        .call("calc.add", &Add { a: 2, b: 3 }, Duration::from_secs(10))
        .await
        .expect("reply");
    assert_eq!(sum, 5);
    let error = client
        .call::<_, i64>("calc.add", &Add { a: 2, b: 0 }, Duration::from_secs(10))
        .await
        .expect_err("remote error");
    let remote = error.remote().expect("a remote error");
    assert_eq!(remote.code, "zero");
    assert_eq!(remote.message, "adding zero is pointless");
    client.drain().await.expect("drain");
    server.drain().await.expect("drain");
}

/// RPC: a never-served tool fails with no-server well before the timeout; a served tool
/// with no server attached times out near the set time when that is shorter than the
/// no-server check, and fails with no-server at the check otherwise.
pub async fn rpc_timeout_and_no_server(harness: &dyn Harness) {
    let client = emitter(harness, "client").await;
    let started = Instant::now();
    let error = client
        .call::<_, i64>("nobody.home", &Add { a: 1, b: 1 }, Duration::from_secs(10))
        .await
        .expect_err("no server");
    assert!(error.is_no_server(), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // The tool's queue exists, but its server is gone.
    let server = calculator(harness).await;
    server.close().await;
    let timeout = Duration::from_millis(800);
    let started = Instant::now();
    let error = client
        .call::<_, i64>("calc.add", &Add { a: 1, b: 1 }, timeout)
        .await
        .expect_err("timeout");
    let elapsed = started.elapsed();
    assert!(error.is_timeout(), "{error:?}");
    assert!(elapsed >= timeout, "{elapsed:?}");
    assert!(elapsed < timeout * 4, "{elapsed:?}");

    // Given longer, the call looks at the tool's queue once its reply is slow: nothing
    // consumes it, so it fails with no-server, saying so, long before its timeout.
    let started = Instant::now();
    let error = client
        .call::<_, i64>("calc.add", &Add { a: 1, b: 1 }, Duration::from_secs(60))
        .await
        .expect_err("no server");
    let elapsed = started.elapsed();
    assert!(error.is_no_server(), "{error:?}");
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}");
    let cause = std::error::Error::source(&error).map(ToString::to_string);
    assert!(
        cause
            .as_deref()
            .is_some_and(|c| c.contains("no server is consuming `serve.calc.add`")),
        "{cause:?}"
    );
    client.drain().await.expect("drain");
}

/// With the shared option, workers of one module on two nodes compete on
/// `shared.<module>.events`: each event is handled once, by either node.
pub async fn shared_workers_on_two_nodes_compete_on_one_queue(harness: &dyn Harness) {
    const EVENTS: usize = 200;
    let seen = Arc::new(Tally::default());
    let per_node = Arc::new(Tally::default());
    let mut workers = Vec::new();
    for node in ["n1", "n2"] {
        let (seen, per_node) = (Arc::clone(&seen), Arc::clone(&per_node));
        let bus = Bus::builder()
            .node(node)
            .module("worker")
            .shared(true)
            .prefetch(4)
            .on_raw(["module.src.task.#"], move |i: Incoming<Bytes>| {
                seen.hit(i.meta.id().to_string());
                per_node.hit(node);
                async { Ok(()) }
            })
            .start(harness.transport(Role::Module("worker")).await)
            .await
            .expect("worker starts");
        workers.push(bus);
    }
    let src = emitter(harness, "src").await;
    for n in 0..EVENTS {
        src.emit_outgoing(
            mesh::Outgoing::json("task.queued", &serde_json::json!({ "n": n }))
                .expect("a JSON payload"),
        )
        .await
        .expect("emit");
    }
    seen.wait_for("every task", |c| c.len() == EVENTS).await;
    for worker in &workers {
        worker.drain().await.expect("drain");
    }
    assert!(
        seen.snapshot().values().all(|n| *n == 1),
        "a task ran twice"
    );
    let shares = per_node.snapshot();
    assert_eq!(shares.len(), 2, "both nodes worked: {shares:?}");
    let queues: Vec<String> = harness
        .queues()
        .await
        .into_iter()
        .filter(|q| q.ends_with(".worker.events"))
        .collect();
    assert_eq!(queues, vec!["shared.worker.events".to_owned()]);
    src.drain().await.expect("drain");
}

/// Acks sent together ([`Delivery::ack_all`](mesh_core::Delivery::ack_all)) settle exactly
/// the deliveries given, from several subscriptions at once, in any order; one left out
/// stays with its consumer and, released, comes back.
pub async fn ack_all_settles_exactly_the_deliveries_given(harness: &dyn Harness) {
    use mesh_core::{Delivery, QueueSpec, SubscriptionSpec, TopicPattern};

    const EVENTS: usize = 40;
    // One transport plays two consumer modules and an emitter: the operator's.
    let transport = harness.transport(Role::Operator).await;
    let mut subscriptions = Vec::new();
    for queue in ["n1.batch-a.events", "n1.batch-b.events"] {
        let subscription = transport
            .subscribe(SubscriptionSpec {
                queue: QueueSpec::Durable {
                    name: queue.to_owned(),
                },
                patterns: vec![TopicPattern::parse("module.batch.#").expect("pattern")],
                prefetch: 64,
                retry_delays: Vec::new(),
            })
            .await
            .expect("subscribed");
        subscriptions.push((queue, subscription));
    }
    for _ in 0..EVENTS {
        let envelope = event("module.batch.thing", "batch");
        transport
            .publish(
                mesh_core::codec::encode(&envelope),
                PublishOptions::default(),
            )
            .await
            .expect("published")
            .await
            .expect("confirmed");
    }

    // Every delivery of both queues, interleaved and newest first; the oldest of the first
    // queue is kept back.
    let mut taken = Vec::new();
    for (_, subscription) in &mut subscriptions {
        for _ in 0..EVENTS {
            let delivery = within("a delivery", subscription.next())
                .await
                .expect("subscription open");
            taken.push(delivery);
        }
    }
    let kept = taken.remove(0);
    let kept_id = kept
        .message
        .properties
        .headers
        .get(mesh_core::codec::EVENT_ID)
        .cloned();
    taken.reverse();
    Delivery::ack_all(taken).await.expect("all acked");

    let (first, second) = (subscriptions[0].0, subscriptions[1].0);
    eventually(
        WAIT,
        "the second queue empty, the first holding one",
        || async {
            (harness.messages(second).await == Some(0) && harness.messages(first).await == Some(1))
                .then_some(())
        },
    )
    .await;

    kept.release();
    let again = within("the released delivery", subscriptions[0].1.next())
        .await
        .expect("subscription open");
    assert!(
        again.redelivered,
        "released deliveries come back marked redelivered"
    );
    assert_eq!(
        again
            .message
            .properties
            .headers
            .get(mesh_core::codec::EVENT_ID)
            .cloned(),
        kept_id
    );
    Delivery::ack_all([again]).await.expect("acked");
    eventually(WAIT, "the first queue empty", || async {
        (harness.messages(first).await == Some(0)).then_some(())
    })
    .await;
    transport.close().await;
}
