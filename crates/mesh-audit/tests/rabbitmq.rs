//! The logger on RabbitMQ (a vhost of each test's own on the shared broker), into SQLite and
//! PostgreSQL: completeness across restarts, resends absorbed, re-drive to one consumer, and
//! causation trees.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{emitter, transport, AuditStore, RunningLogger, TempStore};
use mesh::{Bus, HandlerError, Outgoing};
use mesh_audit::{
    AuditOptions, Backend, CausationNode, DeadLetterQuery, EventQuery, Order, Redrive, Store,
};
use mesh_core::{DeadReason, EventId};
use mesh_testkit::{eventually, TestVhost};

const WAIT: Duration = Duration::from_secs(60);

fn options() -> AuditOptions {
    AuditOptions::new().node("n1")
}

async fn audit_queue_messages(vhost: &TestVhost) -> u64 {
    vhost
        .list_queues()
        .await
        .expect("listing queues")
        .into_iter()
        .find(|q| q.name == "n1.audit-logger.events")
        .map_or(u64::MAX, |q| q.messages)
}

/// 10,000 events emitted (pipelined) while the logger is stopped gracefully once and killed
/// once, each time restarted: every confirmed event is stored exactly once.
async fn ten_thousand_events_across_two_restarts(backend: Backend) -> anyhow::Result<()> {
    const TOTAL: usize = 10_000;
    let vhost = TestVhost::create("audit-10k").await?;
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    let url = vhost.url();
    let mut logger = Some(RunningLogger::start(&url, store.clone(), options()).await?);
    let bus = emitter(&url, "n1", "load").await?;

    let mut pending = Vec::with_capacity(TOTAL);
    for n in 0..TOTAL {
        match n {
            2_500 => {
                if let Some(running) = logger.take() {
                    running.stop().await?;
                }
            }
            6_000 => {
                // Abrupt this time: whatever it had not acked goes back to the queue.
                if let Some(running) = logger.take() {
                    running.kill().await;
                }
            }
            4_000 | 7_500 => {
                logger = Some(RunningLogger::start(&url, store.clone(), options()).await?);
            }
            _ => {}
        }
        let outgoing = Outgoing::json("tick.happened", &serde_json::json!({ "n": n }))?;
        pending.push(bus.emit_nowait(outgoing).await?);
    }
    let mut confirmed = HashSet::with_capacity(TOTAL);
    for emit in pending {
        confirmed.insert(emit.await?);
    }
    assert_eq!(confirmed.len(), TOTAL);

    eventually(Duration::from_secs(180), "10,000 rows", || {
        let store = store.clone();
        async move { (store.counts().await.ok()?.events >= TOTAL as u64).then_some(()) }
    })
    .await;
    eventually(WAIT, "the audit queue drained and acked", || async {
        (audit_queue_messages(&vhost).await == 0).then_some(())
    })
    .await;

    let rows = store
        .events(&EventQuery::new().limit(2 * TOTAL).order(Order::Asc))
        .await?;
    assert_eq!(rows.len(), TOTAL, "exactly one row per event");
    let stored: HashSet<EventId> = rows.iter().map(|r| r.id).collect();
    assert_eq!(stored, confirmed, "the rows are the confirmed events");
    let mut seen = vec![false; TOTAL];
    for row in &rows {
        let n = row.body_json()?["n"].as_u64().expect("a number") as usize;
        assert!(!seen[n], "event {n} stored twice");
        seen[n] = true;
    }
    assert!(seen.iter().all(|s| *s), "no gap");

    if let Some(running) = logger.take() {
        running.stop().await?;
    }
    bus.drain().await?;
    store.close().await;
    vhost.delete().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_events_across_two_restarts_sqlite() -> anyhow::Result<()> {
    ten_thousand_events_across_two_restarts(Backend::Sqlite).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_events_across_two_restarts_postgres() -> anyhow::Result<()> {
    ten_thousand_events_across_two_restarts(Backend::Postgres).await
}

async fn the_same_event_twice_is_one_row(backend: Backend) -> anyhow::Result<()> {
    let vhost = TestVhost::create("audit-resend").await?;
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    let url = vhost.url();
    let logger = RunningLogger::start(&url, store.clone(), options()).await?;
    let bus = emitter(&url, "n1", "shop").await?;

    let id = EventId::new();
    let payload = serde_json::json!({"order": 42});
    for _ in 0..2 {
        let resent = bus
            .emit_outgoing(Outgoing::json("order.placed", &payload)?.id(id))
            .await?;
        assert_eq!(resent, id);
    }
    let sentinel = bus
        .emit_outgoing(mesh::Outgoing::json("order.checked", &payload)?)
        .await?;
    let stats = logger.logger.clone();
    eventually(WAIT, "all three deliveries processed", || {
        let stats = stats.stats();
        async move { (stats.events_stored + stats.duplicates == 3).then_some(()) }
    })
    .await;
    let stats = logger.logger.stats();
    assert_eq!((stats.events_stored, stats.duplicates), (2, 1));
    assert_eq!(store.counts().await?.events, 2);
    assert!(store.event(id).await?.is_some());
    assert!(store.event(sentinel).await?.is_some());
    assert_eq!(
        store
            .count_events(&EventQuery::new().pattern("module.shop.order.placed"))
            .await?,
        1
    );

    logger.stop().await?;
    bus.drain().await?;
    store.close().await;
    vhost.delete().await?;
    Ok(())
}

#[tokio::test]
async fn the_same_event_twice_is_one_row_sqlite() -> anyhow::Result<()> {
    the_same_event_twice_is_one_row(Backend::Sqlite).await
}

#[tokio::test]
async fn the_same_event_twice_is_one_row_postgres() -> anyhow::Result<()> {
    the_same_event_twice_is_one_row(Backend::Postgres).await
}

/// `(id, children)` of a tree, for comparing shapes.
#[derive(Debug, PartialEq)]
struct Shape(EventId, Vec<Shape>);

fn shape(node: &CausationNode) -> Shape {
    Shape(node.event.id, node.children.iter().map(shape).collect())
}

async fn causation_trees(backend: Backend) -> anyhow::Result<()> {
    let vhost = TestVhost::create("audit-causation").await?;
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    let url = vhost.url();
    let logger = RunningLogger::start(&url, store.clone(), options()).await?;
    let bus = emitter(&url, "n1", "flow").await?;

    // A caused B caused C; A also caused D.
    let a = bus
        .emit_outgoing(mesh::Outgoing::json("step.a", &serde_json::json!({}))?)
        .await?;
    let b = bus
        .emit_outgoing(
            Outgoing::json("step.b", &serde_json::json!({}))?.causation_id(a.to_string()),
        )
        .await?;
    let c = bus
        .emit_outgoing(
            Outgoing::json("step.c", &serde_json::json!({}))?.causation_id(b.to_string()),
        )
        .await?;
    let d = bus
        .emit_outgoing(
            Outgoing::json("step.d", &serde_json::json!({}))?.causation_id(a.to_string()),
        )
        .await?;
    // Unrelated, with a cause that was never stored.
    let orphan_cause = EventId::new().to_string();
    let orphan = bus
        .emit_outgoing(
            Outgoing::json("step.e", &serde_json::json!({}))?.causation_id(orphan_cause.clone()),
        )
        .await?;
    eventually(WAIT, "five events stored", || {
        let store = store.clone();
        async move { (store.counts().await.ok()?.events == 5).then_some(()) }
    })
    .await;

    let chain = Shape(a, vec![Shape(b, vec![Shape(c, vec![])])]);
    for focus in [b, c] {
        let tree = store.causation_tree(focus).await?.expect("a tree");
        assert_eq!(shape(&tree.root), chain, "from {focus}");
        assert_eq!(tree.focus, focus);
        assert_eq!(tree.missing_cause, None);
        assert!(!tree.truncated);
    }
    let from_a = store.causation_tree(a).await?.expect("a tree");
    assert_eq!(
        shape(&from_a.root),
        Shape(a, vec![Shape(b, vec![Shape(c, vec![])]), Shape(d, vec![])]),
        "everything A caused, oldest first"
    );
    assert_eq!(from_a.len(), 4);
    assert!(from_a.find(c).is_some());
    let from_d = store.causation_tree(d).await?.expect("a tree");
    assert_eq!(shape(&from_d.root), Shape(a, vec![Shape(d, vec![])]));

    let lone = store.causation_tree(orphan).await?.expect("a tree");
    assert_eq!(shape(&lone.root), Shape(orphan, vec![]));
    assert_eq!(lone.missing_cause, Some(orphan_cause));
    assert!(store.causation_tree(EventId::new()).await?.is_none());

    logger.stop().await?;
    bus.drain().await?;
    store.close().await;
    vhost.delete().await?;
    Ok(())
}

#[tokio::test]
async fn causation_trees_sqlite() -> anyhow::Result<()> {
    causation_trees(Backend::Sqlite).await
}

#[tokio::test]
async fn causation_trees_postgres() -> anyhow::Result<()> {
    causation_trees(Backend::Postgres).await
}

/// A consumer gives up on an event; it is listed with reason and attempts, re-driven to that
/// consumer's queue only, handled there, and marked.
async fn a_dead_letter_is_redriven_to_its_consumer_only(backend: Backend) -> anyhow::Result<()> {
    let vhost = TestVhost::create("audit-redrive").await?;
    let temp = TempStore::new(backend).await?;
    let store: Store = temp.open().await?;
    let url = vhost.url();
    let logger = RunningLogger::start(&url, store.clone(), options()).await?;

    let failing = Arc::new(AtomicBool::new(true));
    let billing_handled: Arc<Mutex<Vec<(EventId, u32)>>> = Arc::default();
    let billing = {
        let (failing, handled) = (failing.clone(), billing_handled.clone());
        Bus::builder()
            .node("n1")
            .module("billing")
            .on_raw(["module.shop.order.placed"], move |incoming| {
                let (failing, handled) = (failing.clone(), handled.clone());
                async move {
                    if failing.load(Ordering::SeqCst) {
                        return Err(HandlerError::permanent("the ledger is closed"));
                    }
                    handled
                        .lock()
                        .expect("lock")
                        .push((incoming.meta.id(), incoming.meta.attempt()));
                    Ok(())
                }
            })
            .start(transport(&url).await?)
            .await?
    };
    let mailer_handled: Arc<Mutex<Vec<EventId>>> = Arc::default();
    let mailer = {
        let handled = mailer_handled.clone();
        Bus::builder()
            .node("n1")
            .module("mailer")
            .on_raw(["module.shop.order.placed"], move |incoming| {
                handled.lock().expect("lock").push(incoming.meta.id());
                async { Ok(()) }
            })
            .start(transport(&url).await?)
            .await?
    };
    let shop = emitter(&url, "n1", "shop").await?;
    let id = shop
        .emit_outgoing(mesh::Outgoing::json(
            "order.placed",
            &serde_json::json!({"order": 7}),
        )?)
        .await?;

    let dead = eventually(WAIT, "the dead letter listed", || {
        let store = store.clone();
        async move {
            store
                .dead_letters(&DeadLetterQuery::new().queue("n1.billing.events"))
                .await
                .ok()?
                .into_iter()
                .next()
        }
    })
    .await;
    assert_eq!(dead.event_id, Some(id));
    assert_eq!(dead.reason, Some(DeadReason::Permanent));
    assert_eq!(dead.attempts, 1);
    assert!(dead
        .last_error
        .as_deref()
        .is_some_and(|e| e.contains("the ledger is closed")));
    assert_eq!(dead.routing_key, "module.shop.order.placed");
    assert_eq!(dead.redriven_at, None);
    assert_eq!(*mailer_handled.lock().expect("lock"), vec![id]);

    failing.store(false, Ordering::SeqCst);
    let redriver = transport(&url).await?;
    let report = store
        .redrive(
            redriver.as_ref(),
            Redrive::Matching(
                DeadLetterQuery::new()
                    .queue("n1.billing.events")
                    .reason(DeadReason::Permanent),
            ),
        )
        .await?;
    assert_eq!(report.redriven, vec![dead.id]);
    assert!(report.failed.is_empty());
    eventually(WAIT, "billing handling the re-driven event", || {
        let handled = billing_handled.lock().expect("lock").clone();
        async move { (!handled.is_empty()).then_some(()) }
    })
    .await;
    assert_eq!(
        *billing_handled.lock().expect("lock"),
        vec![(id, 1)],
        "the same event, on a fresh first attempt"
    );
    // Billing is bound to the key too and will handle the sentinel below.

    // A sentinel behind it on the mailer's queue: once the mailer has it, a copy of the
    // re-driven event on that queue would have been handled before it.
    let sentinel = shop
        .emit_outgoing(mesh::Outgoing::json(
            "order.placed",
            &serde_json::json!({"order": 8}),
        )?)
        .await?;
    eventually(WAIT, "the mailer handling the sentinel", || {
        let handled = mailer_handled.lock().expect("lock").clone();
        async move { handled.contains(&sentinel).then_some(()) }
    })
    .await;
    assert_eq!(
        *mailer_handled.lock().expect("lock"),
        vec![id, sentinel],
        "the mailer never saw the re-driven event again"
    );

    let marked = store.dead_letter(dead.id).await?.expect("still listed");
    assert!(marked.redriven_at.is_some());
    assert_eq!(marked.redrive_count, 1);
    assert_eq!(store.counts().await?.dead_letters_pending, 0);
    // Re-driving it by id again is refused unless asked for (`Redrive::Again`), which
    // re-drives it whatever its state, and counts again.
    let refused = store
        .redrive(redriver.as_ref(), Redrive::One(dead.id))
        .await
        .expect_err("a second re-drive needs Again");
    assert_eq!(
        refused.kind(),
        &mesh_audit::ErrorKind::AlreadyRedriven,
        "{refused}"
    );
    let one = store
        .redrive(redriver.as_ref(), Redrive::Again(dead.id))
        .await?;
    assert_eq!(one.redriven, vec![dead.id]);
    eventually(WAIT, "billing handling the second re-drive", || {
        let n = billing_handled
            .lock()
            .expect("lock")
            .iter()
            .filter(|(handled, _)| *handled == id)
            .count();
        async move { (n == 2).then_some(()) }
    })
    .await;
    assert_eq!(
        store.dead_letter(dead.id).await?.map(|d| d.redrive_count),
        Some(2)
    );
    let unknown = store
        .redrive(redriver.as_ref(), Redrive::One(uuid::Uuid::nil().into()))
        .await
        .expect_err("no such dead letter");
    assert!(unknown.is_not_found());

    logger.stop().await?;
    redriver.close().await;
    for bus in [billing, mailer, shop] {
        bus.drain().await?;
    }
    store.close().await;
    vhost.delete().await?;
    Ok(())
}

#[tokio::test]
async fn a_dead_letter_is_redriven_to_its_consumer_only_sqlite() -> anyhow::Result<()> {
    a_dead_letter_is_redriven_to_its_consumer_only(Backend::Sqlite).await
}

#[tokio::test]
async fn a_dead_letter_is_redriven_to_its_consumer_only_postgres() -> anyhow::Result<()> {
    a_dead_letter_is_redriven_to_its_consumer_only(Backend::Postgres).await
}

/// Puts a forged dead letter, naming `queue` as the one that gave up on it, straight into
/// logger n1's dead-letter queue, as a rogue client with write access there could (through
/// the default exchange, like mesh's own copies, so its annotations are believed as far as
/// the logger can tell; re-drive must not be).
async fn forge_dead_letter(
    raw: &dyn mesh_core::Transport,
    queue: &str,
    body: &str,
) -> anyhow::Result<()> {
    use mesh_core::{codec, PublishOptions, Target, WireMessage};
    let mut message = WireMessage::new("module.shop.order.placed", body.to_owned());
    message.properties.content_type = Some(codec::CONTENT_TYPE_JSON.to_owned());
    message.properties.persistent = true;
    let headers = &mut message.properties.headers;
    headers.insert(codec::DEAD_QUEUE.to_owned(), queue.into());
    headers.insert(codec::DEAD_REASON.to_owned(), "permanent".into());
    headers.insert(
        codec::EVENT_ID.to_owned(),
        EventId::new().to_string().into(),
    );
    let options = PublishOptions {
        target: Target::Queue(mesh_core::naming::audit_dead_queue(&"n1".parse()?)),
        mandatory: true,
        ..PublishOptions::default()
    };
    raw.publish(message, options).await?.await?;
    Ok(())
}

async fn queue_messages(vhost: &TestVhost, name: &str) -> Option<u64> {
    vhost
        .list_queues()
        .await
        .ok()?
        .into_iter()
        .find(|q| q.name == name)
        .map(|q| q.messages)
}

/// Two loggers on two nodes with stores of their own, one of them down while the dead
/// letters are made, and a module tapping them: each store ends up with all 100 and the tap
/// saw them. Then forged dead letters naming a serve queue, a retry queue and a foreign
/// queue (all existing) are refused by a re-drive and a dry run, nothing reaching them,
/// while a genuine one still goes back to its consumer queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_logger_records_every_dead_letter_and_redrive_goes_only_to_consumer_queues(
) -> anyhow::Result<()> {
    const TOTAL: usize = 100;
    let vhost = TestVhost::create("audit-dead-fanout").await?;
    let url = vhost.url();
    let (temp1, temp2) = (TempStore::postgres().await?, TempStore::postgres().await?);
    let (store1, store2) = (temp1.open().await?, temp2.open().await?);
    let logger1 =
        RunningLogger::start(&url, store1.clone(), AuditOptions::new().node("n1")).await?;
    // The second logger declares its queue once, then is down while dead letters are made.
    RunningLogger::start(&url, store2.clone(), AuditOptions::new().node("n2"))
        .await?
        .stop()
        .await?;

    let failing = Arc::new(AtomicBool::new(true));
    let handled: Arc<Mutex<Vec<EventId>>> = Arc::default();
    let billing = {
        let (failing, handled) = (failing.clone(), handled.clone());
        Bus::builder()
            .node("n1")
            .module("billing")
            .on_raw(["module.shop.order.placed"], move |incoming| {
                let (failing, handled) = (failing.clone(), handled.clone());
                async move {
                    if failing.load(Ordering::SeqCst) {
                        return Err(HandlerError::permanent("the ledger is closed"));
                    }
                    handled.lock().expect("lock").push(incoming.meta.id());
                    Ok(())
                }
            })
            .start(transport(&url).await?)
            .await?
    };
    let watcher = emitter(&url, "n1", "watcher").await?;
    let mut tap = watcher.all_dead_letters().await?;
    let shop = emitter(&url, "n1", "shop").await?;
    let mut emitted = HashSet::new();
    for n in 0..TOTAL {
        emitted.insert(
            shop.emit_outgoing(mesh::Outgoing::json(
                "order.placed",
                &serde_json::json!({ "order": n }),
            )?)
            .await?,
        );
    }

    let mut tapped = HashSet::new();
    while tapped.len() < TOTAL {
        let letter = tokio::time::timeout(WAIT, tap.next())
            .await?
            .expect("the tap ends only with the bus");
        tapped.extend(letter.event_id);
        letter.ack().await?;
    }
    assert_eq!(tapped, emitted, "the tap saw every dead letter");
    let all = || DeadLetterQuery::new().queue("n1.billing.events");
    let stored = |store: Store| async move {
        let n = store.count_dead_letters(&all()).await.ok()?;
        (n >= TOTAL as u64).then_some(())
    };
    eventually(WAIT, "logger 1 storing all 100", || stored(store1.clone())).await;
    assert_eq!(store1.count_dead_letters(&all()).await?, TOTAL as u64);
    // Its queue kept them for logger 2, which stores them all once it starts.
    eventually(WAIT, "logger 2's queue holding all 100", || async {
        (queue_messages(&vhost, "n2.audit-logger.dead").await == Some(TOTAL as u64)).then_some(())
    })
    .await;
    let logger2 =
        RunningLogger::start(&url, store2.clone(), AuditOptions::new().node("n2")).await?;
    eventually(WAIT, "logger 2 storing all 100", || stored(store2.clone())).await;
    assert_eq!(store2.count_dead_letters(&all()).await?, TOTAL as u64);
    let ids = |letters: Vec<mesh_audit::DeadLetterRecord>| -> HashSet<EventId> {
        letters.into_iter().filter_map(|d| d.event_id).collect()
    };
    assert_eq!(
        ids(store1.dead_letters(&all().limit(TOTAL)).await?),
        emitted
    );
    assert_eq!(
        ids(store2.dead_letters(&all().limit(TOTAL)).await?),
        emitted
    );

    // Forged dead letters naming queues that exist but are no consumer's.
    let raw = transport(&url).await?;
    let foreign = ["serve.x", "n1.billing.events.retry.1s", "foreign-queue"];
    for name in ["serve.x", "foreign-queue"] {
        let declared = mesh_core::Transport::subscribe(
            raw.as_ref(),
            mesh_core::SubscriptionSpec {
                queue: mesh_core::QueueSpec::Durable {
                    name: name.to_owned(),
                },
                patterns: Vec::new(),
                prefetch: 1,
                retry_delays: Vec::new(),
            },
        )
        .await?;
        drop(declared);
    }
    for queue in foreign {
        assert_eq!(
            queue_messages(&vhost, queue).await,
            Some(0),
            "{queue} exists"
        );
        forge_dead_letter(raw.as_ref(), queue, &format!("{{\"forged\":\"{queue}\"}}")).await?;
    }
    let forged = |store: Store| async move {
        let n = store
            .count_dead_letters(&DeadLetterQuery::new())
            .await
            .ok()?;
        (n >= TOTAL as u64 + 3).then_some(())
    };
    eventually(WAIT, "logger 1 storing the forged dead letters", || {
        forged(store1.clone())
    })
    .await;

    // Only one genuine dead letter left to re-drive, besides the forged ones.
    failing.store(false, Ordering::SeqCst);
    let keep = store1.dead_letters(&all().limit(1)).await?;
    let genuine = keep.first().expect("a genuine dead letter").clone();
    let others: Vec<_> = store1
        .dead_letters(&all().limit(TOTAL))
        .await?
        .into_iter()
        .filter(|d| d.id != genuine.id)
        .map(|d| d.id)
        .collect();
    for id in others {
        store1
            .purge_dead_letters(
                &DeadLetterQuery::new().event_id(
                    store1
                        .dead_letter(id)
                        .await?
                        .and_then(|d| d.event_id)
                        .expect("an id"),
                ),
            )
            .await?;
    }

    let plan = store1.redrive_plan(Redrive::All).await?;
    assert_eq!(
        plan.redrive,
        vec![(genuine.id, "n1.billing.events".to_owned())]
    );
    assert_eq!(plan.refused.len(), 3, "{:?}", plan.refused);
    assert!(plan
        .refused
        .iter()
        .all(|(_, e)| e.kind() == &mesh_audit::ErrorKind::ForeignQueue));

    let report = store1.redrive(raw.as_ref(), Redrive::All).await?;
    assert_eq!(report.redriven, vec![genuine.id]);
    assert_eq!(report.failed.len(), 3, "{:?}", report.failed);
    assert!(report
        .failed
        .iter()
        .all(|(_, e)| e.kind() == &mesh_audit::ErrorKind::ForeignQueue));
    eventually(WAIT, "billing handling the genuine re-driven event", || {
        let done = handled
            .lock()
            .expect("lock")
            .contains(&genuine.event_id.expect("an id"));
        async move { done.then_some(()) }
    })
    .await;
    for queue in foreign {
        assert_eq!(
            queue_messages(&vhost, queue).await,
            Some(0),
            "nothing reached {queue}"
        );
    }
    // Still not re-driven: a later re-drive refuses them again.
    assert_eq!(store1.counts().await?.dead_letters_pending, 3);

    mesh_core::Transport::close(raw.as_ref()).await;
    billing.drain().await?;
    watcher.drain().await?;
    shop.drain().await?;
    logger1.stop().await?;
    logger2.stop().await?;
    vhost.delete().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_limit_dead_letter_is_recorded_with_its_real_deliveries() -> anyhow::Result<()> {
    let vhost = TestVhost::create("audit-delivery-limit").await?;
    let temp = TempStore::sqlite();
    let store = temp.open().await?;
    let url = vhost.url();
    let running = RunningLogger::start(
        &url,
        store.clone(),
        AuditOptions::new().node("n1").delivery_limit(Some(2)),
    )
    .await?;
    // A consumer that crashes on every delivery (it never settles): the broker gives up
    // after the queue's limit of 2, that is after 3 deliveries.
    let options = url
        .parse::<mesh_amqp::AmqpOptions>()?
        .connection_name("poison")
        .delivery_limit(2);
    let consumer = mesh::amqp::connect(options).await?;
    let mut subscription = mesh_core::Transport::subscribe(
        &consumer,
        mesh_core::SubscriptionSpec {
            queue: mesh_core::QueueSpec::Durable {
                name: "n1.poison.events".to_owned(),
            },
            patterns: vec![mesh_core::TopicPattern::parse("module.shop.#")?],
            prefetch: 1,
            retry_delays: vec![Duration::from_secs(1)],
        },
    )
    .await?;
    let bus = emitter(&url, "n1", "shop").await?;
    let id = bus
        .emit_outgoing(Outgoing::json(
            "order.placed",
            &serde_json::json!({ "n": 1 }),
        )?)
        .await?;
    for _ in 0..3 {
        let delivery = tokio::time::timeout(WAIT, subscription.next())
            .await?
            .expect("open");
        delivery.release();
    }
    let letter = eventually(WAIT, "the dead letter stored", || {
        let store = store.clone();
        async move {
            let letters = store.dead_letters(&DeadLetterQuery::new()).await.ok()?;
            letters.into_iter().find(|l| l.event_id == Some(id))
        }
    })
    .await;
    assert_eq!(letter.reason, Some(DeadReason::DeliveryLimit));
    assert_eq!(letter.attempts, 3);
    assert_eq!(letter.queue.as_deref(), Some("n1.poison.events"));
    bus.close().await;
    mesh_core::Transport::close(&consumer).await;
    running.stop().await?;
    Ok(())
}

/// Through mesh's RabbitMQ transport, which stamps `user-id` on every publish: an event is
/// stored with the connection's user as its publisher. With identity enforced (no user
/// prefix), an event under `module.umami.…` published as that user (not `module.umami`) is
/// dead-lettered `forged-source` instead, and not stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_publisher_is_recorded_and_with_identity_enforced_checked() -> anyhow::Result<()> {
    let vhost = TestVhost::create("audit-identity").await?;
    let url = vhost.url();
    let user = url.parse::<mesh_amqp::AmqpOptions>()?.get_user().to_owned();
    assert_ne!(
        user, "module.umami",
        "the shared broker's user must not own the key"
    );
    let bus = emitter(&url, "n1", "umami").await?;

    // Enforcement off: stored, with the connection's user.
    let temp = TempStore::new(Backend::Sqlite).await?;
    let store = temp.open().await?;
    let logger = RunningLogger::start(&url, store.clone(), options()).await?;
    let believed = bus
        .emit_outgoing(mesh::Outgoing::json(
            "site.created",
            &serde_json::json!({"n": 1}),
        )?)
        .await?;
    let stored = eventually(WAIT, "the event stored", || {
        let store = store.clone();
        async move { store.event(believed).await.ok().flatten() }
    })
    .await;
    assert_eq!(stored.routing_key, "module.umami.site.created");
    assert_eq!(stored.publisher.as_deref(), Some(user.as_str()));
    logger.stop().await?;
    store.close().await;

    // Enforcement on, into a store of its own: the same emit is a forgery now.
    let enforcing = TempStore::new(Backend::Sqlite).await?;
    let store = enforcing.open().await?;
    let logger = RunningLogger::start(
        &url,
        store.clone(),
        options().enforce_identity(Some(String::new())),
    )
    .await?;
    let forged = bus
        .emit_outgoing(mesh::Outgoing::json(
            "site.created",
            &serde_json::json!({"n": 2}),
        )?)
        .await?;
    let dead = eventually(WAIT, "the forged event dead-lettered", || {
        let store = store.clone();
        async move {
            let found = store
                .dead_letters(&DeadLetterQuery::new().event_id(forged))
                .await
                .ok()?;
            found.into_iter().next()
        }
    })
    .await;
    assert_eq!(dead.reason, Some(DeadReason::ForgedSource));
    assert_eq!(dead.queue.as_deref(), Some("n1.audit-logger.events"));
    assert!(
        dead.last_error
            .as_deref()
            .is_some_and(|e| e.contains("`module.umami`")),
        "{:?}",
        dead.last_error
    );
    // The original publisher rides in `x-mesh-user`; the copy was published by the
    // logger's own connection, which runs as the same user here.
    assert_eq!(
        dead.headers[mesh_core::codec::USER].as_str(),
        Some(user.as_str())
    );
    assert_eq!(dead.user_id.as_deref(), Some(user.as_str()));
    // Decided before its dead letter existed: never stored.
    assert_eq!(store.event(forged).await?, None);
    assert_eq!(store.counts().await?.events, 0);
    assert_eq!(logger.logger.stats().rejected, 1);
    logger.stop().await?;
    bus.drain().await?;
    store.close().await;
    vhost.delete().await?;
    Ok(())
}
