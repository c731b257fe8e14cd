//! The logger on the in-process transport: batching by time, shutdown, contract breakers,
//! re-drive, and events reusing an id, without a broker.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::{AuditStore, TempStore};
use mesh::{Bus, HandlerError, MemoryBroker, Outgoing};
use mesh_audit::{
    AuditLogger, AuditOptions, DeadLetterQuery, ErrorKind, EventQuery, Redrive, Store,
};
use mesh_core::{DeadReason, EventId, PublishOptions, Transport, WireMessage};
use mesh_testkit::eventually;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);

struct Running {
    logger: AuditLogger,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), mesh_audit::Error>>,
}

async fn start(broker: &MemoryBroker, store: Store, options: AuditOptions) -> Running {
    let logger = AuditLogger::new(store, options);
    let shutdown = CancellationToken::new();
    let task = {
        let (logger, shutdown) = (logger.clone(), shutdown.clone());
        let transport = broker.transport();
        tokio::spawn(async move { logger.run(&transport, &shutdown).await })
    };
    let broker = broker.clone();
    eventually(WAIT, "the audit queue's consumer", || {
        let attached = broker.consumer_count("n1.audit-logger.events").unwrap_or(0)
            + broker.consumer_count("n1.audit-logger.dead").unwrap_or(0);
        async move { (attached == 2).then_some(()) }
    })
    .await;
    Running {
        logger,
        shutdown,
        task,
    }
}

impl Running {
    async fn stop(self) -> Result<(), mesh_audit::Error> {
        self.shutdown.cancel();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the logger stops")
            .expect("the logger task does not panic")
    }
}

async fn emitter(broker: &MemoryBroker, module: &str) -> anyhow::Result<Bus> {
    Ok(Bus::builder()
        .node("n1")
        .module(module)
        .start(Arc::new(broker.transport()))
        .await?)
}

/// Batches of `size` that only their size (or the shutdown) closes: they would wait an hour.
fn hour_long_batches(size: usize) -> AuditOptions {
    AuditOptions::new()
        .node("n1")
        .batch_size(size)
        .batch_wait(Duration::from_secs(3600))
}

/// Emits `n` events, then waits until the logger holds them all unacked.
async fn emit_orders(broker: &MemoryBroker, bus: &Bus, n: usize) -> anyhow::Result<()> {
    for i in 0..n {
        bus.emit_outgoing(mesh::Outgoing::json(
            "order.placed",
            &serde_json::json!({ "n": i }),
        )?)
        .await?;
    }
    eventually(WAIT, "every event handed to the logger", || {
        let unacked = broker.unacked("n1.audit-logger.events");
        async move { (unacked == Some(n)).then_some(()) }
    })
    .await;
    Ok(())
}

async fn count(store: &Store) -> u64 {
    store.counts().await.expect("counting").events
}

#[tokio::test]
async fn a_trickle_is_stored_without_waiting_for_a_full_batch() -> anyhow::Result<()> {
    let temp = TempStore::sqlite();
    let store = temp.open().await?;
    let broker = MemoryBroker::new();
    let logger = start(&broker, store.clone(), AuditOptions::new().node("n1")).await;
    let bus = emitter(&broker, "shop").await?;
    let id = bus
        .emit_outgoing(mesh::Outgoing::json(
            "order.placed",
            &serde_json::json!({"n": 1}),
        )?)
        .await?;
    // One event, a batch of 500: stored after the batch wait (50 ms), well within the
    // timeout, and acked only then.
    eventually(WAIT, "the single event stored", || {
        let store = store.clone();
        async move { store.event(id).await.ok().flatten() }
    })
    .await;
    eventually(WAIT, "the event acked", || {
        let unacked = broker.unacked("n1.audit-logger.events");
        let ready = broker.queue_depth("n1.audit-logger.events");
        async move { (unacked == Some(0) && ready == Some(0)).then_some(()) }
    })
    .await;
    assert_eq!(logger.logger.stats().events_stored, 1);
    logger.stop().await?;
    bus.drain().await?;
    Ok(())
}

#[tokio::test]
async fn shutdown_commits_and_acks_the_open_batch() -> anyhow::Result<()> {
    let temp = TempStore::sqlite();
    let store = temp.open().await?;
    let broker = MemoryBroker::new();
    // A batch that would stay open for an hour: only the shutdown can close it.
    let logger = start(&broker, store.clone(), hour_long_batches(1000)).await;
    let bus = emitter(&broker, "shop").await?;
    emit_orders(&broker, &bus, 10).await?;
    assert_eq!(
        count(&store).await,
        0,
        "nothing committed before the batch closes"
    );
    logger.stop().await?;
    assert_eq!(count(&store).await, 10);
    assert_eq!(broker.unacked("n1.audit-logger.events"), Some(0));
    assert_eq!(broker.queue_depth("n1.audit-logger.events"), Some(0));
    bus.drain().await?;
    Ok(())
}

#[tokio::test]
async fn a_batch_closes_at_its_size() -> anyhow::Result<()> {
    let temp = TempStore::sqlite();
    let store = temp.open().await?;
    let broker = MemoryBroker::new();
    let logger = start(&broker, store.clone(), hour_long_batches(5)).await;
    let bus = emitter(&broker, "shop").await?;
    for n in 0..12 {
        bus.emit_outgoing(mesh::Outgoing::json(
            "order.placed",
            &serde_json::json!({ "n": n }),
        )?)
        .await?;
    }
    // Two full batches commit at once; the last two events wait for the (hour-long) wait.
    eventually(WAIT, "two full batches", || {
        let store = store.clone();
        async move { (count(&store).await == 10).then_some(()) }
    })
    .await;
    // Acks follow each commit; the two left over stay unacked in the open batch.
    eventually(WAIT, "the two batches acked", || {
        let unacked = broker.unacked("n1.audit-logger.events");
        async move { (unacked == Some(2)).then_some(()) }
    })
    .await;
    let stats = logger.logger.stats();
    assert_eq!((stats.batches, stats.events_stored), (2, 10));
    logger.stop().await?;
    assert_eq!(count(&store).await, 12);
    bus.drain().await?;
    Ok(())
}

/// A different event reusing a stored id is counted as a conflict and kept, a resend as a
/// duplicate: within one batch and across batches, each delivery acked.
#[tokio::test]
async fn a_reused_id_is_a_conflict_and_a_resend_a_duplicate() -> anyhow::Result<()> {
    let temp = TempStore::sqlite();
    let store = temp.open().await?;
    let broker = MemoryBroker::new();
    // Batches of exactly four deliveries.
    let logger = start(&broker, store.clone(), hour_long_batches(4)).await;
    let bus = emitter(&broker, "shop").await?;
    let id = EventId::new();
    let emit = |name: &'static str, n: u32| {
        let bus = bus.clone();
        async move {
            bus.emit_outgoing(Outgoing::json(name, &serde_json::json!({ "n": n }))?.id(id))
                .await?;
            anyhow::Ok(())
        }
    };
    // One batch: the event, its resend, a different body with its id, and that again.
    emit("order.placed", 1).await?;
    emit("order.placed", 1).await?;
    emit("order.placed", 2).await?;
    emit("order.placed", 2).await?;
    let stats = eventually(WAIT, "the first batch", || {
        let stats = logger.logger.stats();
        let seen = stats.events_stored + stats.duplicates + stats.id_conflicts;
        async move { (stats.batches == 1 && seen == 4).then_some(stats) }
    })
    .await;
    assert_eq!(
        (stats.events_stored, stats.duplicates, stats.id_conflicts),
        (1, 2, 1),
        "{stats:?}"
    );
    // The next: the event and the conflict again, another key with the id, a new event.
    emit("order.placed", 1).await?;
    emit("order.placed", 2).await?;
    emit("order.paid", 1).await?;
    bus.emit_outgoing(mesh::Outgoing::json(
        "order.placed",
        &serde_json::json!({ "n": 3 }),
    )?)
    .await?;
    let stats = eventually(WAIT, "the second batch", || {
        let stats = logger.logger.stats();
        let seen = stats.events_stored + stats.duplicates + stats.id_conflicts;
        async move { (stats.batches == 2 && seen == 8).then_some(stats) }
    })
    .await;
    assert_eq!(
        (stats.events_stored, stats.duplicates, stats.id_conflicts),
        (2, 4, 2),
        "{stats:?}"
    );
    eventually(WAIT, "every delivery acked", || {
        let unacked = broker.unacked("n1.audit-logger.events");
        let ready = broker.queue_depth("n1.audit-logger.events");
        async move { (unacked == Some(0) && ready == Some(0)).then_some(()) }
    })
    .await;
    logger.stop().await?;
    let counts = store.counts().await?;
    assert_eq!((counts.events, counts.conflicts), (2, 2));
    let stored = store.event(id).await?.expect("the first event is stored");
    assert_eq!(stored.body_json()?, serde_json::json!({ "n": 1 }));
    bus.drain().await?;
    Ok(())
}

/// While one batch waits for a locked database, the next fills behind it, and nothing is
/// acked, lost or stored twice once the lock goes.
#[tokio::test]
async fn batches_wait_for_a_locked_database_and_lose_nothing() -> anyhow::Result<()> {
    use sqlx::Connection;

    let temp = TempStore::sqlite();
    let store = temp.open().await?;
    let path = temp.sqlite_path().expect("a SQLite store");
    let mut lock = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display())).await?;
    sqlx::query("BEGIN IMMEDIATE").execute(&mut lock).await?;

    let broker = MemoryBroker::new();
    let logger = start(&broker, store.clone(), hour_long_batches(5)).await;
    let bus = emitter(&broker, "shop").await?;
    emit_orders(&broker, &bus, 17).await?;
    assert_eq!(
        logger.logger.stats().batches,
        0,
        "nothing commits while locked"
    );

    sqlx::query("ROLLBACK").execute(&mut lock).await?;
    lock.close().await?;
    eventually(WAIT, "three full batches stored and acked", || {
        let unacked = broker.unacked("n1.audit-logger.events");
        let store = store.clone();
        async move { (unacked == Some(2) && count(&store).await == 15).then_some(()) }
    })
    .await;
    let stats = logger.logger.stats();
    assert_eq!(
        (stats.batches, stats.events_stored, stats.duplicates),
        (3, 15, 0)
    );
    logger.stop().await?;
    assert_eq!(count(&store).await, 17);
    assert_eq!(broker.unacked("n1.audit-logger.events"), Some(0));
    bus.drain().await?;
    Ok(())
}

#[tokio::test]
async fn an_event_that_breaks_the_contract_is_dead_lettered_and_kept() -> anyhow::Result<()> {
    let temp = TempStore::sqlite();
    let store = temp.open().await?;
    let broker = MemoryBroker::new();
    let logger = start(&broker, store.clone(), AuditOptions::new().node("n1")).await;
    // No headers at all, and a body that is not JSON.
    let transport = broker.transport();
    let garbage = WireMessage::new(
        "module.rogue.thing.happened",
        Bytes::from_static(b"not json"),
    );
    transport
        .publish(garbage, PublishOptions::default())
        .await?
        .await?;
    let dead = eventually(
        WAIT,
        "the contract breaker in the dead-letter store",
        || {
            let store = store.clone();
            async move {
                let found = store.dead_letters(&DeadLetterQuery::new()).await.ok()?;
                found.into_iter().next()
            }
        },
    )
    .await;
    assert_eq!(dead.reason, Some(DeadReason::Undecodable));
    assert_eq!(dead.queue.as_deref(), Some("n1.audit-logger.events"));
    assert_eq!(dead.event_id, None);
    assert_eq!(dead.body.as_ref(), b"not json");
    assert!(dead
        .last_error
        .as_deref()
        .is_some_and(|e| e.contains("x-event-id")));
    assert_eq!(count(&store).await, 0);
    assert_eq!(logger.logger.stats().rejected, 1);
    logger.stop().await?;
    transport.close().await;
    Ok(())
}

#[tokio::test]
async fn a_redriven_dead_letter_reaches_its_consumer_only() -> anyhow::Result<()> {
    let temp = TempStore::sqlite();
    let store = temp.open().await?;
    let broker = MemoryBroker::new();
    let logger = start(&broker, store.clone(), AuditOptions::new().node("n1")).await;

    let failing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let billing_seen: Arc<Mutex<Vec<u32>>> = Arc::default();
    let billing = {
        let (failing, seen) = (failing.clone(), billing_seen.clone());
        Bus::builder()
            .node("n1")
            .module("billing")
            .on_raw(["module.shop.order.placed"], move |incoming| {
                let (failing, seen) = (failing.clone(), seen.clone());
                async move {
                    if failing.load(Ordering::SeqCst) {
                        return Err(HandlerError::permanent("billing is down"));
                    }
                    seen.lock().expect("lock").push(incoming.meta.attempt());
                    Ok(())
                }
            })
            .start(Arc::new(broker.transport()))
            .await?
    };
    let mailer_calls = Arc::new(AtomicUsize::new(0));
    let mailer = {
        let calls = mailer_calls.clone();
        Bus::builder()
            .node("n1")
            .module("mailer")
            .on_raw(["module.shop.order.placed"], move |_| {
                calls.fetch_add(1, Ordering::SeqCst);
                async { Ok(()) }
            })
            .start(Arc::new(broker.transport()))
            .await?
    };
    let shop = emitter(&broker, "shop").await?;
    let id = shop
        .emit_outgoing(mesh::Outgoing::json(
            "order.placed",
            &serde_json::json!({"order": 7}),
        )?)
        .await?;
    let dead = eventually(WAIT, "the dead letter stored", || {
        let store = store.clone();
        async move {
            store
                .dead_letters(&DeadLetterQuery::new().event_id(id))
                .await
                .ok()?
                .into_iter()
                .next()
        }
    })
    .await;
    assert_eq!(dead.reason, Some(DeadReason::Permanent));
    assert_eq!(dead.queue.as_deref(), Some("n1.billing.events"));
    assert_eq!(mailer_calls.load(Ordering::SeqCst), 1);

    failing.store(false, Ordering::SeqCst);
    let report = store.redrive(&broker.transport(), Redrive::All).await?;
    assert_eq!(report.redriven, vec![dead.id]);
    eventually(WAIT, "billing handling the re-driven event", || {
        let seen = billing_seen.lock().expect("lock").clone();
        async move { (!seen.is_empty()).then_some(()) }
    })
    .await;
    assert_eq!(
        *billing_seen.lock().expect("lock"),
        vec![1],
        "the consumer starts afresh: first attempt"
    );
    assert_eq!(broker.queue_depth("n1.mailer.events"), Some(0));
    assert_eq!(
        mailer_calls.load(Ordering::SeqCst),
        1,
        "the mailer did not see it again"
    );
    let marked = store.dead_letter(dead.id).await?.expect("still listed");
    assert_eq!(marked.redrive_count, 1);
    assert!(marked.redriven_at.is_some());
    // Nothing pending: a second re-drive of all does nothing.
    let again = store.redrive(&broker.transport(), Redrive::All).await?;
    assert!(again.redriven.is_empty() && again.failed.is_empty());
    // Named by id, it is refused (nothing sent, the record kept) unless asked for again.
    let refused = store
        .redrive(&broker.transport(), Redrive::One(dead.id))
        .await
        .expect_err("a second re-drive by id is refused");
    assert_eq!(refused.kind(), &ErrorKind::AlreadyRedriven, "{refused}");
    let plan = store.redrive_plan(Redrive::One(dead.id)).await?;
    assert!(plan.redrive.is_empty() && plan.refused.len() == 1);
    assert_eq!(
        store
            .dead_letter(dead.id)
            .await?
            .expect("kept")
            .redrive_count,
        1
    );
    let again = store
        .redrive(&broker.transport(), Redrive::Again(dead.id))
        .await?;
    assert_eq!(again.redriven, vec![dead.id]);
    eventually(WAIT, "billing handling it once more", || {
        let seen = billing_seen.lock().expect("lock").len();
        async move { (seen == 2).then_some(()) }
    })
    .await;
    assert_eq!(
        store
            .dead_letter(dead.id)
            .await?
            .expect("kept")
            .redrive_count,
        2
    );
    // The audit trail has the event once: the re-drive did not pass through `mesh.events`.
    assert_eq!(
        store
            .count_events(&EventQuery::new().pattern("module.shop.#"))
            .await?,
        1
    );

    logger.stop().await?;
    for bus in [billing, mailer, shop] {
        bus.drain().await?;
    }
    Ok(())
}

/// A row the database refuses (here a rule added to the test's own schema, standing in for
/// any value a database may refuse): the batch is split, the rest of it stored, and the
/// refused event dead-lettered with the database's error, not lost.
async fn an_event_the_database_refuses_is_dead_lettered_not_lost(
    backend: mesh_audit::Backend,
) -> anyhow::Result<()> {
    use sqlx::Connection;
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    match backend {
        mesh_audit::Backend::Postgres => {
            let mut db = sqlx::PgConnection::connect(temp.url()).await?;
            sqlx::query(
                "ALTER TABLE events ADD CONSTRAINT no_poison \
                 CHECK (routing_key <> 'module.shop.poison.sent')",
            )
            .execute(&mut db)
            .await?;
        }
        _ => {
            let mut db = sqlx::SqliteConnection::connect(temp.url()).await?;
            sqlx::query(
                "CREATE TRIGGER no_poison BEFORE INSERT ON events \
                 WHEN NEW.routing_key = 'module.shop.poison.sent' \
                 BEGIN SELECT RAISE(ABORT, 'poison refused'); END",
            )
            .execute(&mut db)
            .await?;
        }
    }
    let broker = MemoryBroker::new();
    let logger = start(&broker, store.clone(), AuditOptions::new().node("n1")).await;
    let shop = emitter(&broker, "shop").await?;
    let mut ids = Vec::new();
    for name in ["order.placed", "poison.sent", "order.paid"] {
        ids.push(
            shop.emit_outgoing(mesh::Outgoing::json(name, &serde_json::json!({}))?)
                .await?,
        );
    }
    let stats = logger.logger.clone();
    eventually(WAIT, "all three events settled", || {
        let s = stats.stats();
        async move { (s.events_stored + s.rejected == 3).then_some(()) }
    })
    .await;
    assert_eq!(logger.logger.stats().events_stored, 2);
    assert!(store.event(ids[0]).await?.is_some());
    assert!(store.event(ids[1]).await?.is_none());
    assert!(store.event(ids[2]).await?.is_some());
    let dead = eventually(WAIT, "the refused event as a dead letter", || {
        let store = store.clone();
        let id = ids[1];
        async move {
            store
                .dead_letters(&DeadLetterQuery::new().event_id(id))
                .await
                .ok()?
                .into_iter()
                .next()
        }
    })
    .await;
    assert_eq!(dead.reason, Some(DeadReason::Permanent));
    assert_eq!(dead.queue.as_deref(), Some("n1.audit-logger.events"));
    assert!(dead
        .last_error
        .as_deref()
        .is_some_and(|e| e.contains("audit store refused")));
    assert_eq!(broker.queue_depth("n1.audit-logger.events"), Some(0));
    logger.stop().await?;
    shop.drain().await?;
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn an_event_the_database_refuses_is_dead_lettered_not_lost_sqlite() -> anyhow::Result<()> {
    an_event_the_database_refuses_is_dead_lettered_not_lost(mesh_audit::Backend::Sqlite).await
}

#[tokio::test]
async fn an_event_the_database_refuses_is_dead_lettered_not_lost_postgres() -> anyhow::Result<()> {
    an_event_the_database_refuses_is_dead_lettered_not_lost(mesh_audit::Backend::Postgres).await
}

/// Values at the edges of their types: the largest `x-schema`, and a body with an escaped
/// U+0000 and a lone surrogate escape, which the decoder accepts. Both stores keep them.
async fn values_at_the_edges_are_stored(backend: mesh_audit::Backend) -> anyhow::Result<()> {
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    let body: &'static [u8] = br#"{"nul": "\u0000", "lone": "\ud800"}"#;
    let envelope = mesh_core::Envelope {
        id: mesh_core::EventId::new(),
        key: mesh_core::RoutingKey::parse("module.shop.order.placed")?,
        source: "shop".into(),
        node: "n1".into(),
        time: mesh_core::Timestamp::now(),
        causation_id: Some("not-a-uuid".into()),
        schema: Some(mesh_core::SchemaVersion(u32::MAX)),
        extra_headers: mesh_core::Headers::new(),
        body: Bytes::from_static(body),
    };
    assert_eq!(
        store
            .record_events(&[mesh_core::codec::encode(&envelope)])
            .await?,
        1
    );
    let stored = store.event(envelope.id).await?.expect("stored");
    assert_eq!(stored.schema, Some(u32::MAX));
    assert_eq!(stored.body.as_bytes(), body);
    assert_eq!(stored.causation_id.as_deref(), Some("not-a-uuid"));
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn values_at_the_edges_are_stored_sqlite() -> anyhow::Result<()> {
    values_at_the_edges_are_stored(mesh_audit::Backend::Sqlite).await
}

#[tokio::test]
async fn values_at_the_edges_are_stored_postgres() -> anyhow::Result<()> {
    values_at_the_edges_are_stored(mesh_audit::Backend::Postgres).await
}

/// An event under `key` (source its owner) published on `transport` with `user_id` as its
/// `user-id` property.
async fn publish_as(
    transport: &impl Transport,
    key: &str,
    user_id: Option<&str>,
) -> anyhow::Result<EventId> {
    let id = EventId::new();
    let key = mesh_core::RoutingKey::parse(key)?;
    let mut message = mesh_core::codec::encode(&mesh_core::Envelope {
        id,
        source: key.name().to_owned(),
        key,
        node: "n1".to_owned(),
        time: mesh_core::Timestamp::now(),
        causation_id: None,
        schema: None,
        extra_headers: mesh_core::Headers::new(),
        body: Bytes::from_static(b"{}"),
    });
    message.properties.user_id = user_id.map(str::to_owned);
    transport
        .publish(message, PublishOptions::default())
        .await?
        .await?;
    Ok(id)
}

/// With identity enforced (prefix `acme/`), an event from the user owning its key is stored
/// with that user as its publisher; one from another user, or with no `user-id`, is
/// dead-lettered `forged-source`, the original publisher kept in `x-mesh-user`.
#[tokio::test]
async fn with_identity_enforced_only_the_owner_s_events_are_stored() -> anyhow::Result<()> {
    let temp = TempStore::sqlite();
    let store = temp.open().await?;
    let broker = MemoryBroker::new();
    let options = AuditOptions::new()
        .node("n1")
        .enforce_identity(Some("acme/".to_owned()));
    let logger = start(&broker, store.clone(), options).await;
    let transport = broker.transport();

    let owned = publish_as(
        &transport,
        "module.umami.site.created",
        Some("acme/module.umami"),
    )
    .await?;
    let other = publish_as(
        &transport,
        "module.umami.site.created",
        Some("acme/module.billing"),
    )
    .await?;
    let unprefixed = publish_as(
        &transport,
        "module.umami.site.created",
        Some("module.umami"),
    )
    .await?;
    let anonymous = publish_as(&transport, "node.n1.started", None).await?;
    let node_owned = publish_as(&transport, "node.n1.started", Some("acme/node.n1")).await?;

    let dead = eventually(WAIT, "three forged-source dead letters", || {
        let store = store.clone();
        async move {
            let found = store
                .dead_letters(&DeadLetterQuery::new().reason(DeadReason::ForgedSource))
                .await
                .ok()?;
            (found.len() == 3).then_some(found)
        }
    })
    .await;
    let mut forged: Vec<(EventId, Option<String>)> = dead
        .iter()
        .map(|d| {
            (
                d.event_id.expect("an event id"),
                d.headers[mesh_core::codec::USER]
                    .as_str()
                    .map(str::to_owned),
            )
        })
        .collect();
    forged.sort();
    let mut expected = vec![
        (other, Some("acme/module.billing".to_owned())),
        (unprefixed, Some("module.umami".to_owned())),
        (anonymous, None),
    ];
    expected.sort();
    assert_eq!(forged, expected);
    for d in &dead {
        assert_eq!(d.queue.as_deref(), Some("n1.audit-logger.events"));
        assert!(
            d.last_error
                .as_deref()
                .is_some_and(
                    |e| e.contains("published by") && e.contains("`acme/module.umami`")
                        || e.contains("`acme/node.n1`")
                ),
            "{:?}",
            d.last_error
        );
    }

    let stored = eventually(WAIT, "the two owned events stored", || {
        let store = store.clone();
        async move {
            let found = store.events(&EventQuery::new()).await.ok()?;
            (found.len() == 2).then_some(found)
        }
    })
    .await;
    let mut stored: Vec<(EventId, Option<String>)> =
        stored.into_iter().map(|e| (e.id, e.publisher)).collect();
    stored.sort();
    let mut expected = vec![
        (owned, Some("acme/module.umami".to_owned())),
        (node_owned, Some("acme/node.n1".to_owned())),
    ];
    expected.sort();
    assert_eq!(stored, expected);
    assert_eq!(logger.logger.stats().rejected, 3);
    logger.stop().await?;
    transport.close().await;
    Ok(())
}

/// Without enforcement every well-formed event is stored, whoever published it, with its
/// validated user recorded (none when it carried no `user-id`).
#[tokio::test]
async fn without_enforcement_every_event_is_stored_with_its_publisher() -> anyhow::Result<()> {
    let temp = TempStore::sqlite();
    let store = temp.open().await?;
    let broker = MemoryBroker::new();
    let logger = start(&broker, store.clone(), AuditOptions::new().node("n1")).await;
    let transport = broker.transport();
    let by_other = publish_as(&transport, "module.umami.site.created", Some("guest")).await?;
    let anonymous = publish_as(&transport, "module.umami.site.created", None).await?;
    let stored = eventually(WAIT, "both events stored", || {
        let store = store.clone();
        async move {
            let found = store.events(&EventQuery::new()).await.ok()?;
            (found.len() == 2).then_some(found)
        }
    })
    .await;
    let mut stored: Vec<(EventId, Option<String>)> =
        stored.into_iter().map(|e| (e.id, e.publisher)).collect();
    stored.sort();
    let mut expected = vec![(by_other, Some("guest".to_owned())), (anonymous, None)];
    expected.sort();
    assert_eq!(stored, expected);
    assert_eq!(logger.logger.stats().rejected, 0);
    logger.stop().await?;
    transport.close().await;
    Ok(())
}
