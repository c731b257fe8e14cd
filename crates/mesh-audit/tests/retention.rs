//! Retention by arrival (decision 0022), on SQLite and PostgreSQL: a store whose rows arrived
//! over ten days keeps exactly the newest three whatever the events' own `x-time`, pending
//! dead letters survive, ingest running meanwhile loses nothing, a redelivery after its first
//! copy's partition is stored once, and an existing PostgreSQL store is partitioned keeping
//! every row.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use common::{AuditStore, TempStore};
use mesh_audit::{Backend, Prune, Retention, Store};
use mesh_core::{
    codec, DeadLetterNote, DeadReason, Envelope, EventId, Headers, RoutingKey, Timestamp,
    WireMessage,
};
use sqlx::Connection;

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

fn event(id: EventId, time: Timestamp, body: &'static str) -> WireMessage {
    codec::encode(&Envelope {
        id,
        key: RoutingKey::parse("module.shop.order.placed").expect("a valid key"),
        source: "shop".to_owned(),
        node: "n1".to_owned(),
        time,
        causation_id: None,
        schema: None,
        extra_headers: Headers::new(),
        body: Bytes::from_static(body.as_bytes()),
    })
}

fn parse(text: &str) -> Timestamp {
    Timestamp::parse(text).expect("a valid time")
}

/// Runs statements on the store's database, outside the store.
async fn execute(temp: &TempStore, statements: &[String]) -> anyhow::Result<()> {
    if temp.url().starts_with("postgres") {
        let mut conn = sqlx::PgConnection::connect(temp.url()).await?;
        for statement in statements {
            sqlx::raw_sql(statement).execute(&mut conn).await?;
        }
        conn.close().await?;
    } else {
        let mut conn = sqlx::SqliteConnection::connect(temp.url()).await?;
        for statement in statements {
            sqlx::raw_sql(statement).execute(&mut conn).await?;
        }
        conn.close().await?;
    }
    Ok(())
}

/// The first column of a query's rows, as text.
async fn texts(temp: &TempStore, query: &str) -> anyhow::Result<BTreeSet<String>> {
    Ok(if temp.url().starts_with("postgres") {
        let mut conn = sqlx::PgConnection::connect(temp.url()).await?;
        let rows: Vec<String> = sqlx::query_scalar(query).fetch_all(&mut conn).await?;
        conn.close().await?;
        rows.into_iter().collect()
    } else {
        let mut conn = sqlx::SqliteConnection::connect(temp.url()).await?;
        let rows: Vec<String> = sqlx::query_scalar(query).fetch_all(&mut conn).await?;
        conn.close().await?;
        rows.into_iter().collect()
    })
}

async fn stored_ids(temp: &TempStore) -> anyhow::Result<BTreeSet<String>> {
    texts(temp, "SELECT CAST(id AS TEXT) FROM events").await
}

/// A dead letter of `message` to store, made at `time`.
fn dead(message: &WireMessage, queue: &str, time: Timestamp) -> WireMessage {
    let mut copy = message.clone();
    codec::mark_dead(
        &mut copy,
        &DeadLetterNote {
            reason: DeadReason::MaxAttempts,
            attempts: 5,
            last_error: Some("handler failed".into()),
            queue: queue.into(),
            time,
        },
    );
    copy
}

/// Rows arriving every hour over ten days, with x-times of 1970, 2999 and their arrival;
/// `--retain 3d` keeps exactly those of the newest three days.
async fn keeps_exactly_the_newest_days(backend: Backend) -> anyhow::Result<()> {
    let temp = TempStore::new(backend).await?;
    let store: Store = temp.open().await?;
    let now = Timestamp::now();
    let oldest = now.checked_sub(DAY * 10).expect("in range");
    store.prepare_partitions(oldest, now).await?;
    let retention = Retention::new(DAY * 3);
    let prune = retention.prune_at(now)?;

    let mut kept = BTreeSet::new();
    let mut all = BTreeSet::new();
    for hour in 0..240_u32 {
        let arrived = now
            .checked_sub(HOUR * hour + Duration::from_secs(1_800))
            .expect("in range");
        let messages: Vec<WireMessage> = [
            parse("1970-01-01T00:00:00Z"),
            parse("2999-12-31T23:59:59Z"),
            arrived,
        ]
        .into_iter()
        .map(|time| event(EventId::new(), time, "{}"))
        .collect();
        for message in &messages {
            let id = codec::event_id(message).expect("an id").to_string();
            if arrived >= prune.before {
                kept.insert(id.clone());
            }
            all.insert(id);
        }
        assert_eq!(store.record_events_arrived(&messages, arrived).await?, 3);
    }
    assert_eq!(kept.len(), 3 * 72, "three days of hours, three events each");

    // Dead letters arrived nine days ago: one re-driven since, one pending.
    let original = event(EventId::new(), now, "{}");
    let pending = dead(&original, "n1.billing.events", now);
    let redriven = dead(&original, "n1.stock.events", now);
    assert_eq!(store.record_dead_letters(&[pending, redriven]).await?, 2);
    let old = mesh_audit::DeadLetterQuery::default();
    let letters = store.dead_letters(&old).await?;
    let redriven_id = letters
        .iter()
        .find(|l| l.queue.as_deref() == Some("n1.stock.events"))
        .expect("stored")
        .id;
    let long_ago = format!("{}", now.checked_sub(DAY * 9).expect("in range"));
    execute(
        &temp,
        &[
            format!("UPDATE dead_letters SET received_at = '{long_ago}'"),
            format!(
                "UPDATE dead_letters SET redriven_at = '{long_ago}' WHERE CAST(id AS TEXT) = '{redriven_id}'"
            ),
        ],
    )
    .await?;

    let preview = store.prune_preview(&prune).await?;
    assert_eq!(preview.events, (all.len() - kept.len()) as u64);
    assert_eq!(preview.dead_letters, 1, "only the re-driven dead letter");
    assert_eq!(stored_ids(&temp).await?, all, "a dry run changes nothing");

    let pruned = store
        .prune(&Prune {
            chunk: 100,
            ..prune.clone()
        })
        .await?;
    assert_eq!(pruned.events, preview.events);
    assert_eq!(pruned.dead_letters, 1);
    if backend == Backend::Postgres {
        assert!(
            pruned.partitions_dropped >= 6,
            "whole days dropped, not deleted: {pruned:?}"
        );
    }
    assert_eq!(stored_ids(&temp).await?, kept);
    assert!(store.oldest_arrival().await? >= Some(prune.before));
    let left = store.dead_letters(&old).await?;
    assert_eq!(left.len(), 1, "the pending dead letter survives");
    assert_ne!(left[0].id, redriven_id);
    // The rollups keep the whole history (they have a retention of their own).
    assert_eq!(store.counts().await?.events, all.len() as u64);

    // With the flag, pending dead letters go too; a second prune finds nothing else.
    let again = store
        .prune(&Prune {
            pending_dead_letters: true,
            ..prune
        })
        .await?;
    assert_eq!((again.events, again.dead_letters), (0, 1));
    assert!(store.dead_letters(&old).await?.is_empty());
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn keeps_exactly_the_newest_days_sqlite() -> anyhow::Result<()> {
    keeps_exactly_the_newest_days(Backend::Sqlite).await
}

#[tokio::test]
async fn keeps_exactly_the_newest_days_postgres() -> anyhow::Result<()> {
    keeps_exactly_the_newest_days(Backend::Postgres).await
}

/// Ingest running while old rows are pruned in small steps loses no event, and the old rows
/// all go.
async fn ingest_meanwhile_loses_nothing(backend: Backend) -> anyhow::Result<()> {
    let temp = TempStore::new(backend).await?;
    let store: Store = temp.open().await?;
    let now = Timestamp::now();
    let long_ago = now.checked_sub(DAY * 5).expect("in range");
    store.prepare_partitions(long_ago, now).await?;
    for _ in 0..20 {
        let old: Vec<WireMessage> = (0..500).map(|_| event(EventId::new(), now, "{}")).collect();
        store.record_events_arrived(&old, long_ago).await?;
    }
    let fresh: Vec<WireMessage> = (0..20_000)
        .map(|_| event(EventId::new(), parse("1970-01-01T00:00:00Z"), "{}"))
        .collect();
    let expected: BTreeSet<String> = fresh
        .iter()
        .map(|m| codec::event_id(m).expect("an id").to_string())
        .collect();
    let ingest = {
        let store = store.clone();
        tokio::spawn(async move {
            for batch in fresh.chunks(500) {
                store.record_events(batch).await?;
            }
            Ok::<(), mesh_audit::Error>(())
        })
    };
    let prune = Prune {
        chunk: 250,
        ..Retention::new(DAY).prune_at(now)?
    };
    let pruned = store.prune(&prune).await?;
    ingest.await??;
    assert_eq!(pruned.events, 10_000);
    assert_eq!(stored_ids(&temp).await?, expected);
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn ingest_meanwhile_loses_nothing_sqlite() -> anyhow::Result<()> {
    ingest_meanwhile_loses_nothing(Backend::Sqlite).await
}

#[tokio::test]
async fn ingest_meanwhile_loses_nothing_postgres() -> anyhow::Result<()> {
    ingest_meanwhile_loses_nothing(Backend::Postgres).await
}

/// Batches recorded on connections new to the store, while another store prunes without
/// pause, are all stored. A connection's first insert into `events` connects the body index
/// (FTS5), which reads the index's configuration before the insert writes: in a deferred
/// transaction that read makes the transaction a reader, and SQLite answers a reader that
/// wants to write while another connection writes with "database is locked" at once,
/// without waiting for the busy timeout. Each round opens the store anew (fresh
/// connections) and records one batch; the rows arrived long ago, so the prune always has
/// rows to remove and keeps writing.
#[tokio::test]
async fn fresh_connections_ingest_while_pruning_sqlite() -> anyhow::Result<()> {
    const ROUNDS: usize = 40;
    let temp = TempStore::new(Backend::Sqlite).await?;
    let pruner: Store = temp.open().await?;
    let now = Timestamp::now();
    let long_ago = now.checked_sub(DAY * 5).expect("in range");
    let prune = Prune {
        chunk: 64,
        ..Retention::new(DAY).prune_at(now)?
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let pruning = tokio::spawn({
        let (pruner, stop) = (pruner.clone(), stop.clone());
        async move {
            let mut steps = 0_u64;
            while !stop.is_cancelled() {
                pruner.prune_step(&prune).await?;
                steps += 1;
            }
            Ok::<u64, mesh_audit::Error>(steps)
        }
    });
    let options: mesh_audit::StoreOptions = temp.url().parse()?;
    let mut recorded = 0;
    let mut failed = None;
    for round in 0..ROUNDS {
        let ingest = Store::open_existing(options.clone()).await?;
        let batch: Vec<WireMessage> = (0..64)
            .map(|_| event(EventId::new(), now, r#"{"word": "fresh"}"#))
            .collect();
        let stored = ingest.record_events_arrived(&batch, long_ago).await;
        ingest.close().await;
        match stored {
            Ok(n) => recorded += n,
            Err(e) => {
                failed = Some(anyhow::Error::from(e).context(format!("round {round} of {ROUNDS}")));
                break;
            }
        }
    }
    stop.cancel();
    let steps = pruning.await??;
    if let Some(failed) = failed {
        return Err(failed);
    }
    assert_eq!(recorded, (ROUNDS * 64) as u64);
    assert!(steps > 0, "the prune ran meanwhile");
    pruner.close().await;
    Ok(())
}

/// An event stored in yesterday's partition and delivered again today is not stored again;
/// another event reusing its id is a conflict, as before partitioning.
async fn a_redelivery_across_partitions_is_stored_once(backend: Backend) -> anyhow::Result<()> {
    let temp = TempStore::new(backend).await?;
    let store: Store = temp.open().await?;
    let now = Timestamp::now();
    let yesterday = now.checked_sub(DAY).expect("in range");
    store.prepare_partitions(yesterday, now).await?;
    let id = EventId::new();
    let first = event(id, yesterday, r#"{"n": 1}"#);
    assert_eq!(
        store
            .record_events_arrived(std::slice::from_ref(&first), yesterday)
            .await?,
        1
    );
    // Redelivered today, alone and in a batch twice over with another.
    assert_eq!(store.record_events(std::slice::from_ref(&first)).await?, 0);
    let other = event(EventId::new(), now, "{}");
    assert_eq!(
        store
            .record_events(&[first.clone(), other.clone(), first.clone(), other])
            .await?,
        1
    );
    let reuse = event(id, now, r#"{"n": 2}"#);
    assert_eq!(store.record_events(&[reuse]).await?, 0);
    let rows = texts(
        &temp,
        &format!("SELECT CAST(received_at AS TEXT) FROM events WHERE CAST(id AS TEXT) = '{id}'"),
    )
    .await?;
    assert_eq!(rows.len(), 1, "stored once: {rows:?}");
    let conflicts = texts(&temp, "SELECT CAST(event_id AS TEXT) FROM event_conflicts").await?;
    assert_eq!(conflicts, BTreeSet::from([id.to_string()]));
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn a_redelivery_across_partitions_is_stored_once_sqlite() -> anyhow::Result<()> {
    a_redelivery_across_partitions_is_stored_once(Backend::Sqlite).await
}

#[tokio::test]
async fn a_redelivery_across_partitions_is_stored_once_postgres() -> anyhow::Result<()> {
    a_redelivery_across_partitions_is_stored_once(Backend::Postgres).await
}

/// A PostgreSQL store of version 5 (`events` one plain table) with rows of ten days of
/// arrival is partitioned by the migration keeping every row, deduplicates against them, and
/// prunes them.
#[tokio::test]
async fn the_migration_keeps_every_row_postgres() -> anyhow::Result<()> {
    let temp = TempStore::new(Backend::Postgres).await?;
    temp.open().await?.close().await;
    // Back to version 5: `events` as versions 1 and 3 made it, no `event_ids`.
    let undo = [
        "DROP TABLE events",
        "DROP TABLE event_ids",
        "DROP INDEX event_conflicts_by_arrival",
        "DROP INDEX dead_letters_by_arrival",
        "CREATE TABLE events (
            id uuid NOT NULL PRIMARY KEY, routing_key text NOT NULL, source text NOT NULL,
            node text NOT NULL, time timestamptz NOT NULL, causation_id text, schema bigint,
            received_at timestamptz NOT NULL, headers jsonb NOT NULL, body json NOT NULL)",
        "CREATE INDEX events_by_time ON events (time, id)",
        "CREATE INDEX events_by_key ON events (routing_key text_pattern_ops, time)",
        "CREATE INDEX events_by_source ON events (source, time)",
        "CREATE INDEX events_by_causation ON events (causation_id) WHERE causation_id IS NOT NULL",
        "ALTER TABLE events ADD COLUMN publisher text",
        "DELETE FROM _sqlx_migrations WHERE version > 5",
        // 10,000 events over ten days of arrival, x-times of 1970 and 2999 among them.
        "INSERT INTO events (id, routing_key, source, node, time, received_at, headers, body)
         SELECT gen_random_uuid(), 'module.shop.order.placed', 'shop', 'n1',
                CASE n % 3 WHEN 0 THEN '1970-01-01T00:00:00Z'::timestamptz
                           WHEN 1 THEN '2999-12-31T00:00:00Z'::timestamptz
                           ELSE now() END,
                now() - (n * interval '86 seconds'), '{}', '{}'
         FROM generate_series(1, 10000) AS n",
    ]
    .map(str::to_owned);
    execute(&temp, &undo).await?;
    let rows = "SELECT CAST(id AS TEXT) || ' ' || CAST(received_at AS TEXT) || ' ' || \
                CAST(time AS TEXT) FROM events";
    let before = texts(&temp, rows).await?;
    assert_eq!(before.len(), 10_000);

    let store = temp.open().await?;
    assert_eq!(texts(&temp, rows).await?, before, "every row kept");
    let kind = texts(
        &temp,
        "SELECT CAST(relkind AS TEXT) FROM pg_class WHERE relname = 'events'",
    )
    .await?;
    assert_eq!(kind, BTreeSet::from(["p".to_owned()]), "partitioned");
    let ids = texts(&temp, "SELECT CAST(id AS TEXT) FROM event_ids").await?;
    assert_eq!(ids.len(), 10_000);

    // A migrated event delivered again is not stored twice.
    let some: EventId = ids.iter().next().expect("an id").parse()?;
    assert_eq!(
        store
            .record_events(&[event(some, Timestamp::now(), "{}")])
            .await?,
        0
    );

    // Retention applies to the migrated rows as to any: newest three days kept.
    let prune = Retention::new(DAY * 3).prune_at(Timestamp::now())?;
    let keep = texts(
        &temp,
        &format!(
            "SELECT CAST(id AS TEXT) FROM events WHERE received_at >= '{}'",
            prune.before
        ),
    )
    .await?;
    store.prune(&prune).await?;
    assert_eq!(stored_ids(&temp).await?, keep);
    assert!(keep.len() > 2_000 && keep.len() < 4_000, "{}", keep.len());
    store.close().await;
    Ok(())
}

/// The logger with `--retain 3d` removes the old rows, a step at a time between its batches,
/// while it stores every new event (the in-process transport: no broker).
async fn the_logger_prunes_while_it_ingests(backend: Backend) -> anyhow::Result<()> {
    use std::sync::Arc;

    use mesh::{Bus, MemoryBroker, Outgoing};
    use mesh_audit::{AuditLogger, AuditOptions};
    use mesh_testkit::eventually;
    use tokio_util::sync::CancellationToken;

    let temp = TempStore::new(backend).await?;
    let store: Store = temp.open().await?;
    let now = Timestamp::now();
    let long_ago = now.checked_sub(DAY * 5).expect("in range");
    store.prepare_partitions(long_ago, now).await?;
    for _ in 0..4 {
        let old: Vec<WireMessage> = (0..500)
            .map(|_| event(EventId::new(), parse("2999-12-31T23:59:59Z"), "{}"))
            .collect();
        store.record_events_arrived(&old, long_ago).await?;
    }

    let broker = MemoryBroker::new();
    let options = AuditOptions::new()
        .node("n1")
        .retain(Some(Retention::new(DAY * 3).chunk(300)));
    let logger = AuditLogger::new(store.clone(), options);
    let shutdown = CancellationToken::new();
    let task = {
        let (logger, shutdown, transport) = (logger.clone(), shutdown.clone(), broker.transport());
        tokio::spawn(async move { logger.run(&transport, &shutdown).await })
    };
    let bus = Bus::builder()
        .node("n1")
        .module("shop")
        .start(Arc::new(broker.transport()))
        .await?;
    eventually(
        Duration::from_secs(20),
        "the audit queue's consumer",
        || {
            let attached = broker.consumer_count("n1.audit-logger.events").unwrap_or(0);
            async move { (attached == 1).then_some(()) }
        },
    )
    .await;
    for n in 0..1_000 {
        bus.emit_outgoing(Outgoing::json(
            "order.placed",
            &serde_json::json!({ "n": n }),
        )?)
        .await?;
    }
    let cutoff = now.checked_sub(DAY * 3).expect("in range");
    eventually(
        Duration::from_secs(60),
        "new events stored, old ones pruned",
        || {
            let (store, logger) = (store.clone(), logger.clone());
            async move {
                let stats = logger.stats();
                let oldest = store.oldest_arrival().await.ok()??;
                (stats.events_stored == 1_000 && stats.rows_pruned == 2_000 && oldest >= cutoff)
                    .then_some(())
            }
        },
    )
    .await;
    assert_eq!(
        stored_ids(&temp).await?.len(),
        1_000,
        "every new event, once"
    );
    shutdown.cancel();
    task.await??;
    bus.close().await;
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn the_logger_prunes_while_it_ingests_sqlite() -> anyhow::Result<()> {
    the_logger_prunes_while_it_ingests(Backend::Sqlite).await
}

#[tokio::test]
async fn the_logger_prunes_while_it_ingests_postgres() -> anyhow::Result<()> {
    the_logger_prunes_while_it_ingests(Backend::Postgres).await
}
