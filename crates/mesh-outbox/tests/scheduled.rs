//! Scheduled events in the outbox, against a real broker and real databases: published when
//! due and not before; a cancelled one never arrives and a cancel that comes too late says
//! so, exactly, even racing the relay; an upgrade from the previous schema keeps its rows.

mod common;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::{emitter, PATIENCE};
use mesh::{Bus, EventId, Incoming, Outgoing, Timestamp};
use mesh_outbox::{cancel_in, EmitIn, Outbox, RelayOptions, ScheduleIn};
use mesh_testkit::{eventually, sdk, TestVhost};

/// Relays that notice quickly.
fn quick() -> RelayOptions {
    RelayOptions::default()
        .poll_interval(Duration::from_millis(20))
        .retry_delay(Duration::from_millis(100))
}

/// One delivery: its id, its `x-time`, and when it arrived.
#[derive(Debug, Clone)]
struct Arrival {
    id: EventId,
    time: Timestamp,
    at: Timestamp,
    /// Its `x-due`, if it has one.
    due: Option<String>,
}

#[derive(Debug, Clone, Default)]
struct Arrivals(Arc<Mutex<Vec<Arrival>>>);

impl Arrivals {
    fn all(&self) -> Vec<Arrival> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn of(&self, id: EventId) -> Option<Arrival> {
        self.all().into_iter().find(|a| a.id == id)
    }
}

/// A consumer of `module.shop.#`, one delivery at a time (so in the order published).
async fn watcher(vhost: &TestVhost) -> anyhow::Result<(Bus, Arrivals)> {
    let arrivals = Arrivals::default();
    let record = arrivals.clone();
    let bus = Bus::builder()
        .node("n1")
        .module("sink")
        .prefetch(1)
        .on_raw(["module.shop.#"], move |e: Incoming<Bytes>| {
            let record = record.clone();
            async move {
                record
                    .0
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Arrival {
                        id: e.meta.id(),
                        time: e.meta.time(),
                        at: Timestamp::now(),
                        due: e
                            .meta
                            .headers()
                            .get("x-due")
                            .and_then(|v| v.as_str())
                            .map(str::to_owned),
                    });
                Ok(())
            }
        })
        .start(sdk::transport(&vhost.url()).await?)
        .await?;
    Ok((bus, arrivals))
}

fn after(d: Duration) -> Timestamp {
    Timestamp::now().checked_add(d).expect("in range")
}

fn reminder(n: u64) -> anyhow::Result<Outgoing> {
    Ok(Outgoing::json("reminder.due", &n)?)
}

/// The tests that run on both backends, each in a module named after its backend.
macro_rules! on_both_backends {
    ($backend:ident) => {
        mod $backend {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_cancelled_event_never_arrives_and_a_late_cancel_says_so(
            ) -> anyhow::Result<()> {
                let (_store, pool) = common::$backend().await?;
                let vhost = TestVhost::create("outbox-scheduled").await?;
                let (sink, arrivals) = watcher(&vhost).await?;
                let shop = emitter(&vhost, "shop").await?;
                let outbox = Outbox::new(pool.clone()).await?;
                let relay = outbox.start_relay([shop.clone()], quick()).await?;

                // Rolled back: never scheduled.
                let mut tx = pool.begin().await?;
                let rolled_back = shop
                    .emit_outgoing_at_in(&mut tx, after(Duration::from_millis(1500)), reminder(0)?)
                    .await?;
                tx.rollback().await?;

                let due = after(Duration::from_millis(1500));
                let mut tx = pool.begin().await?;
                let cancelled = shop.emit_outgoing_at_in(&mut tx, due, reminder(1)?).await?;
                let kept = shop.emit_outgoing_at_in(&mut tx, due, reminder(2)?).await?;
                // Later than the others: once it arrived, they would have.
                let last = shop
                    .emit_outgoing_at_in(&mut tx, after(Duration::from_millis(2500)), reminder(3)?)
                    .await?;
                tx.commit().await?;
                // Another module's key is refused, as for an emit.
                let mut tx = pool.begin().await?;
                let foreign = shop
                    .emit_outgoing_at_in(
                        &mut tx,
                        due,
                        Outgoing::raw("module.billing.invoice.due", Bytes::from_static(b"{}"))?,
                    )
                    .await
                    .expect_err("another module's key");
                assert_eq!(foreign.kind(), &mesh_outbox::ErrorKind::Bus, "{foreign}");
                tx.rollback().await?;

                assert_eq!(outbox.counts().await?.scheduled, 3);
                assert!(outbox.cancel(cancelled).await?, "cancelled in time");
                assert!(!outbox.cancel(cancelled).await?, "no second cancel");
                assert!(!outbox.cancel(rolled_back).await?, "never scheduled");
                // A cancel rolled back with its transaction cancels nothing.
                let mut tx = pool.begin().await?;
                assert!(cancel_in(&mut tx, kept).await?);
                tx.rollback().await?;
                assert_eq!(outbox.counts().await?.scheduled, 2);

                let kept_arrival = eventually(PATIENCE, "the kept event delivered", || async {
                    arrivals.of(kept)
                })
                .await;
                assert!(!outbox.cancel(kept).await?, "too late: it was delivered");
                assert_eq!(kept_arrival.time, due, "x-time is the due time");
                assert_eq!(
                    kept_arrival.due,
                    Some(due.text()),
                    "x-due says it was scheduled"
                );
                assert!(
                    kept_arrival.at >= due,
                    "arrived at {}, before it was due at {}",
                    kept_arrival.at,
                    due
                );
                eventually(PATIENCE, "the last event delivered", || async {
                    arrivals.of(last)
                })
                .await;
                let ids: Vec<EventId> = arrivals.all().iter().map(|a| a.id).collect();
                assert_eq!(
                    ids,
                    vec![kept, last],
                    "only what was not cancelled, in due order"
                );
                assert_eq!(outbox.counts().await?.scheduled, 0);

                relay.stop().await;
                shop.drain().await?;
                sink.drain().await?;
                Ok(())
            }

            /// Cancels racing the relay, around the due times: every cancel that said "in
            /// time" kept its event from arriving, every one that said "too late" did not.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn cancels_racing_the_relay_are_exact() -> anyhow::Result<()> {
                const EVENTS: u64 = 300;
                let (_store, pool) = common::$backend().await?;
                let vhost = TestVhost::create("outbox-cancel-race").await?;
                let (sink, arrivals) = watcher(&vhost).await?;
                let shop = emitter(&vhost, "shop").await?;
                let outbox = Outbox::new(pool.clone()).await?;
                let relay = outbox
                    .start_relay(
                        [shop.clone()],
                        quick().poll_interval(Duration::from_millis(1)).batch(7),
                    )
                    .await?;
                // Due one every 4 ms from 300 ms on; the cancels run from the commit on, as
                // fast as the database takes them, so some come in time and some do not.
                let start = after(Duration::from_millis(300));
                let mut tx = pool.begin().await?;
                let mut ids = Vec::new();
                for n in 0..EVENTS {
                    let at = start
                        .checked_add(Duration::from_millis(4 * n))
                        .expect("in range");
                    ids.push(shop.emit_outgoing_at_in(&mut tx, at, reminder(n)?).await?);
                }
                let last = shop
                    .emit_outgoing_at_in(
                        &mut tx,
                        start
                            .checked_add(Duration::from_millis(4 * EVENTS + 500))
                            .expect("in range"),
                        reminder(EVENTS)?,
                    )
                    .await?;
                tx.commit().await?;
                let mut in_time = HashSet::new();
                let mut too_late = HashSet::new();
                for id in ids {
                    if outbox.cancel(id).await? {
                        in_time.insert(id);
                    } else {
                        too_late.insert(id);
                    }
                }
                eventually(PATIENCE, "the last event delivered", || async {
                    arrivals.of(last)
                })
                .await;
                let arrived: HashSet<EventId> = arrivals
                    .all()
                    .iter()
                    .map(|a| a.id)
                    .filter(|id| *id != last)
                    .collect();
                eprintln!(
                    "{} cancelled in time, {} too late, {} arrived",
                    in_time.len(),
                    too_late.len(),
                    arrived.len()
                );
                assert_eq!(
                    arrived, too_late,
                    "exactly the events cancelled too late arrived"
                );
                for a in arrivals.all() {
                    assert!(
                        a.at >= a.time,
                        "{} arrived at {}, before {}",
                        a.id,
                        a.at,
                        a.time
                    );
                }
                relay.stop().await;
                shop.drain().await?;
                sink.drain().await?;
                Ok(())
            }
        }
    };
}

on_both_backends!(postgres);
on_both_backends!(sqlite);

/// The tables the previous release (schema version 2) left on PostgreSQL.
const POSTGRES_V2: &str = r#"
CREATE SCHEMA mesh_outbox;
CREATE TABLE mesh_outbox.versions (
    version    bigint      NOT NULL PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO mesh_outbox.versions (version) VALUES (1), (2);
CREATE TABLE mesh_outbox.outbox (
    seq            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source         text        NOT NULL,
    event_id       uuid        NOT NULL,
    routing_key    text        NOT NULL,
    content_type   text,
    message_id     text,
    amqp_timestamp bigint,
    persistent     boolean     NOT NULL,
    headers        text        NOT NULL,
    body           bytea       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    sent_at        timestamptz,
    error          text
);
CREATE INDEX outbox_unsent ON mesh_outbox.outbox (source, seq) WHERE sent_at IS NULL;
CREATE INDEX outbox_sent ON mesh_outbox.outbox (sent_at) WHERE sent_at IS NOT NULL;
CREATE TABLE mesh_outbox.leases (
    source     text        NOT NULL PRIMARY KEY,
    owner      text        NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE TABLE mesh_outbox.inbox (
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX inbox_by_time ON mesh_outbox.inbox (processed_at);
"#;

/// The tables the previous release (schema version 1) left on SQLite.
const SQLITE_V1: &str = r#"
CREATE TABLE mesh_outbox_versions (
    version    INTEGER NOT NULL PRIMARY KEY,
    applied_at INTEGER NOT NULL
);
INSERT INTO mesh_outbox_versions (version, applied_at) VALUES (1, 0);
CREATE TABLE mesh_outbox (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    source         TEXT    NOT NULL,
    event_id       TEXT    NOT NULL,
    routing_key    TEXT    NOT NULL,
    content_type   TEXT,
    message_id     TEXT,
    amqp_timestamp INTEGER,
    persistent     INTEGER NOT NULL,
    headers        TEXT    NOT NULL,
    body           BLOB    NOT NULL,
    created_at     INTEGER NOT NULL,
    sent_at        INTEGER,
    error          TEXT
);
CREATE INDEX mesh_outbox_unsent ON mesh_outbox (source, seq) WHERE sent_at IS NULL;
CREATE INDEX mesh_outbox_sent ON mesh_outbox (sent_at) WHERE sent_at IS NOT NULL;
CREATE TABLE mesh_outbox_leases (
    source     TEXT    NOT NULL PRIMARY KEY,
    owner      TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE TABLE mesh_inbox (
    consumer     TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    processed_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX mesh_inbox_by_time ON mesh_inbox (processed_at);
"#;

/// The upgrade to scheduled events keeps what the previous schema held: an unsent row
/// written before the upgrade is published after it, and a sent one stays sent.
macro_rules! upgrade_keeps_rows {
    ($name:ident, $backend:ident, $old:expr, $mark_sent:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() -> anyhow::Result<()> {
            let (_store, pool) = common::$backend().await?;
            let vhost = TestVhost::create("outbox-upgrade").await?;
            let (sink, arrivals) = watcher(&vhost).await?;
            let shop = emitter(&vhost, "shop").await?;
            sqlx::raw_sql($old).execute(&pool).await?;
            // Rows the previous release wrote (the outbox table is the same): one sent, one
            // not.
            let mut tx = pool.begin().await?;
            let sent = shop.emit_outgoing_in(&mut tx, reminder(1)?).await?;
            let unsent = shop.emit_outgoing_in(&mut tx, reminder(2)?).await?;
            tx.commit().await?;
            sqlx::query($mark_sent).execute(&pool).await?;

            let outbox = Outbox::new(pool.clone()).await?;
            let counts = outbox.counts().await?;
            assert_eq!((counts.pending, counts.sent, counts.scheduled), (1, 1, 0));
            let relay = outbox.start_relay([shop.clone()], quick()).await?;
            let due = after(Duration::from_millis(200));
            let mut tx = pool.begin().await?;
            let scheduled = shop.emit_outgoing_at_in(&mut tx, due, reminder(3)?).await?;
            tx.commit().await?;
            eventually(
                PATIENCE,
                "the old row and the scheduled one delivered",
                || async { (arrivals.all().len() >= 2).then_some(()) },
            )
            .await;
            let ids: Vec<EventId> = arrivals.all().iter().map(|a| a.id).collect();
            assert_eq!(ids, vec![unsent, scheduled]);
            assert!(!ids.contains(&sent));
            relay.stop().await;
            shop.drain().await?;
            sink.drain().await?;
            Ok(())
        }
    };
}

upgrade_keeps_rows!(
    an_upgrade_keeps_the_postgres_rows_it_found,
    postgres,
    POSTGRES_V2,
    "UPDATE mesh_outbox.outbox SET sent_at = now() WHERE seq = (SELECT min(seq) FROM mesh_outbox.outbox)"
);
upgrade_keeps_rows!(
    an_upgrade_keeps_the_sqlite_rows_it_found,
    sqlite,
    SQLITE_V1,
    "UPDATE mesh_outbox SET sent_at = 1 WHERE seq = (SELECT min(seq) FROM mesh_outbox)"
);
