//! The rollups (events per minute, key and source) agree with the events themselves: after
//! any batches, duplicates and id conflicts included, and after an upgrade from a store that
//! had none (the migration fills them from the events).

mod common;

use bytes::Bytes;
use common::{AuditStore, TempStore};
use mesh_audit::{Backend, EventQuery, Flow};
use mesh_core::{codec, Envelope, EventId, Headers, RoutingKey, Timestamp, WireMessage};
use proptest::prelude::*;
use sqlx::Connection;

const KEYS: [(&str, &str); 3] = [
    ("module.shop.order.placed", "shop"),
    ("module.shop.order.cancelled", "shop"),
    ("module.billing.invoice.paid", "billing"),
];

/// The start of a minute (1,800,000,000 is a multiple of 60).
const MINUTE: i64 = 1_800_000_000;

/// Seconds after a fixed minute.
fn at(seconds: i64) -> Timestamp {
    let base = time::OffsetDateTime::from_unix_timestamp(MINUTE).expect("a valid time");
    Timestamp::from(base + time::Duration::seconds(seconds))
}

fn event(id: EventId, key: usize, seconds: i64, body: &'static str) -> WireMessage {
    let (key, source) = KEYS[key % KEYS.len()];
    codec::encode(&Envelope {
        id,
        key: RoutingKey::parse(key).expect("a valid key"),
        source: source.to_owned(),
        node: "n1".to_owned(),
        time: at(seconds),
        causation_id: None,
        schema: None,
        extra_headers: Headers::new(),
        body: Bytes::from_static(body.as_bytes()),
    })
}

/// The flows of every stored event, counted from the events.
async fn counted(store: &mesh_audit::Store) -> anyhow::Result<Vec<Flow>> {
    Ok(store
        .event_flows(&EventQuery::new().limit(usize::MAX))
        .await?)
}

/// Batches of (key, second, whether the id repeats an earlier one, whether the body differs).
type Batches = Vec<Vec<(usize, i64, bool, bool)>>;

fn batches() -> impl Strategy<Value = Batches> {
    proptest::collection::vec(
        proptest::collection::vec((0..3usize, 0..600i64, any::<bool>(), any::<bool>()), 0..30),
        1..5,
    )
}

async fn rollups_agree(backend: Backend, batches: Batches) -> anyhow::Result<()> {
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    let mut ids: Vec<(EventId, usize, i64)> = Vec::new();
    for batch in batches {
        let mut messages = Vec::new();
        for (key, seconds, again, other_body) in batch {
            let message = match (again, ids.last().copied()) {
                // A redelivery (the same event) or a conflict (the id, another body).
                (true, Some((id, key, seconds))) => event(
                    id,
                    key,
                    seconds,
                    if other_body { "{\"b\":2}" } else { "{}" },
                ),
                _ => {
                    let id = EventId::new();
                    ids.push((id, key, seconds));
                    event(id, key, seconds, "{}")
                }
            };
            messages.push(message);
        }
        store.record_events(&messages).await?;
    }
    let since = at(0);
    let until = at(600);
    assert_eq!(
        store.rolled_up_flows(since, Some(until)).await?,
        counted(&store).await?,
        "the rollups count each stored event once"
    );
    assert_eq!(store.counts().await?.events, ids.len() as u64);
    let per_minute = store.events_per_minute(since, Some(until)).await?;
    assert_eq!(
        per_minute.iter().map(|(_, n)| n).sum::<u64>(),
        ids.len() as u64
    );
    for (minute, n) in &per_minute {
        assert_eq!(minute.unix_seconds() % 60, 0, "{minute} starts a minute");
        let in_minute = ids
            .iter()
            .filter(|(_, _, s)| at(*s).unix_seconds() / 60 == minute.unix_seconds() / 60)
            .count() as u64;
        assert_eq!(*n, in_minute, "{minute}");
    }
    // A window of whole minutes: only theirs.
    let second_minute = store.rolled_up_flows(at(60), Some(at(119))).await?;
    let expected: u64 = ids.iter().filter(|(_, _, s)| (60..120).contains(s)).count() as u64;
    assert_eq!(
        second_minute.iter().map(|f| f.events).sum::<u64>(),
        expected
    );
    store.close().await;
    Ok(())
}

fn property(backend: Backend, cases: u32) {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    proptest!(ProptestConfig::with_cases(cases), |(batches in batches())| {
        runtime.block_on(rollups_agree(backend, batches)).expect("the rollups agree");
    });
}

#[test]
fn rollups_agree_with_the_events_sqlite() {
    property(Backend::Sqlite, 48);
}

#[test]
fn rollups_agree_with_the_events_postgres() {
    property(Backend::Postgres, 16);
}

/// A store of the version before the rollups, with events: the migration fills them.
async fn an_upgrade_fills_the_rollups(backend: Backend) -> anyhow::Result<()> {
    let temp = TempStore::new(backend).await?;
    {
        let store = temp.open().await?;
        let messages: Vec<WireMessage> = (0..50)
            .map(|n| event(EventId::new(), n, i64::try_from(n).unwrap_or(0) * 7, "{}"))
            .collect();
        store.record_events(&messages).await?;
        store.close().await;
    }
    // Back to version 3: no rollups, nor the dead letters' provenance of a later migration.
    let undo = [
        "DROP TABLE event_rollups",
        "ALTER TABLE dead_letters DROP COLUMN untrusted",
        "DELETE FROM _sqlx_migrations WHERE version > 3",
    ];
    match backend {
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(temp.url()).await?;
            for statement in undo {
                sqlx::query(statement).execute(&mut conn).await?;
            }
            conn.close().await?;
        }
        _ => {
            let mut conn = sqlx::SqliteConnection::connect(temp.url()).await?;
            for statement in undo {
                sqlx::query(statement).execute(&mut conn).await?;
            }
            conn.close().await?;
        }
    }
    let store = temp.open().await?;
    assert_eq!(store.counts().await?.events, 50);
    assert_eq!(
        store.rolled_up_flows(at(0), None).await?,
        counted(&store).await?
    );
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn an_upgrade_fills_the_rollups_sqlite() -> anyhow::Result<()> {
    an_upgrade_fills_the_rollups(Backend::Sqlite).await
}

#[tokio::test]
async fn an_upgrade_fills_the_rollups_postgres() -> anyhow::Result<()> {
    an_upgrade_fills_the_rollups(Backend::Postgres).await
}
