//! The transactional outbox against a real broker and real databases: nothing is published
//! for a rolled-back transaction, everything committed is, with its id and causation; the
//! order per source survives two relays; two relays share 50,000 events without a duplicate;
//! processes upgrading one SQLite outbox at once all succeed.

mod common;

use std::time::Duration;

use common::{consumer, emitter, PATIENCE};
use mesh::Outgoing;
use mesh_outbox::{EmitIn, Outbox, RelayOptions};
use mesh_testkit::{eventually, Ledger, TestVhost};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct OrderPlaced {
    order: u64,
}

impl mesh::Event for OrderPlaced {
    const KEY: &'static str = "module.shop.order.placed";
    const SCHEMA: u32 = 2;
}

/// Relays that notice quickly (the poll matters on SQLite) and fail over quickly.
fn quick() -> RelayOptions {
    RelayOptions::default()
        .poll_interval(Duration::from_millis(50))
        .retry_delay(Duration::from_millis(100))
}

/// The tests that run on both backends, each in a module named after its backend.
macro_rules! on_both_backends {
    ($backend:ident) => {
        mod $backend {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_rolled_back_transaction_publishes_nothing_a_committed_one_its_events(
            ) -> anyhow::Result<()> {
                let (_store, pool) = common::$backend().await?;
                let vhost = TestVhost::create("outbox-commit").await?;
                let (sink, received) = consumer(&vhost, &["module.shop.#"]).await?;
                let shop = emitter(&vhost, "shop").await?;
                let outbox = Outbox::new(pool.clone()).await?;
                sqlx::query("CREATE TABLE orders (id bigint NOT NULL)")
                    .execute(&pool)
                    .await?;

                // Rolled back: the order and its event are gone together.
                let mut tx = pool.begin().await?;
                sqlx::query("INSERT INTO orders (id) VALUES (1)")
                    .execute(&mut *tx)
                    .await?;
                let rolled_back = shop.emit_in(&mut tx, &OrderPlaced { order: 1 }).await?;
                tx.rollback().await?;

                // Committed: two events, one with a causation id of its own choosing.
                let mut tx = pool.begin().await?;
                sqlx::query("INSERT INTO orders (id) VALUES (2)")
                    .execute(&mut *tx)
                    .await?;
                let first = shop.emit_in(&mut tx, &OrderPlaced { order: 2 }).await?;
                let second = shop
                    .emit_outgoing_in(
                        &mut tx,
                        Outgoing::json("order.confirmed", &serde_json::json!({ "order": 2 }))?
                            .causation_id(first.to_string()),
                    )
                    .await?;
                // Nothing is relayed before the commit, whatever the relay does.
                let relay = outbox.start_relay([shop.clone()], quick()).await?;
                assert_eq!(outbox.counts().await?.pending, 0, "uncommitted rows are invisible");
                tx.commit().await?;

                eventually(PATIENCE, "both committed events delivered", || async {
                    (received.len() >= 2).then_some(())
                })
                .await;
                // And the rows are marked sent once confirmed.
                eventually(PATIENCE, "both rows marked sent", || async {
                    let counts = outbox.counts().await.ok()?;
                    (counts.pending == 0 && counts.sent == 2).then_some(())
                })
                .await;
                relay.stop().await;
                sink.drain().await?;
                shop.drain().await?;

                let seen = received.all();
                assert_eq!(seen.len(), 2, "{seen:?}");
                assert_eq!(seen[0].id, first.to_string());
                assert_eq!(seen[0].key, "module.shop.order.placed");
                assert_eq!(seen[0].source, "shop");
                assert_eq!(seen[0].causation_id, None);
                assert_eq!(&seen[0].body[..], br#"{"order":2}"#);
                assert_eq!(seen[1].id, second.to_string());
                assert_eq!(seen[1].key, "module.shop.order.confirmed");
                assert_eq!(seen[1].causation_id.as_deref(), Some(first.to_string().as_str()));
                assert!(seen.iter().all(|s| s.id != rolled_back.to_string()));
                Ok(())
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn order_per_source_survives_two_relays() -> anyhow::Result<()> {
                let (_store, pool) = common::$backend().await?;
                let vhost = TestVhost::create("outbox-order").await?;
                let (sink, received) = consumer(&vhost, &["module.shop.#"]).await?;
                let outbox = Outbox::new(pool.clone()).await?;
                // Two relays, each with its own bus (and connection) for the one source,
                // racing for its lease from the start.
                let (shop_a, shop_b) = (emitter(&vhost, "shop").await?, emitter(&vhost, "shop").await?);
                let small = quick().batch(7);
                let a = outbox.start_relay([shop_a.clone()], small.clone()).await?;
                let b = outbox.start_relay([shop_b.clone()], small).await?;

                // 600 events in 120 transactions, committed one after the other while the
                // relays run.
                let total = 600u64;
                for tx_number in 0..total / 5 {
                    let mut tx = pool.begin().await?;
                    for n in 0..5 {
                        let order = tx_number * 5 + n;
                        shop_a.emit_in(&mut tx, &OrderPlaced { order }).await?;
                    }
                    tx.commit().await?;
                }
                eventually(PATIENCE, "every event delivered", || async {
                    (received.len() as u64 >= total).then_some(())
                })
                .await;
                let relayed = (a.relayed(), b.relayed());
                a.stop().await;
                b.stop().await;
                sink.drain().await?;
                let orders: Vec<u64> = received
                    .all()
                    .iter()
                    .map(|s| serde_json::from_slice::<OrderPlaced>(&s.body).map(|o| o.order))
                    .collect::<Result<_, _>>()?;
                let expected: Vec<u64> = (0..total).collect();
                assert_eq!(orders, expected, "relayed by each: {relayed:?}");
                assert_eq!(relayed.0 + relayed.1, total);
                Ok(())
            }

            /// A module and a context of one name are two sources (`module.shop`,
            /// `mesh.shop`): one relay publishes both, each through its own bus.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_module_and_a_context_of_one_name_are_two_sources() -> anyhow::Result<()> {
                let (_store, pool) = common::$backend().await?;
                let vhost = TestVhost::create("outbox-origins").await?;
                let (sink, received) = consumer(&vhost, &["module.shop.#", "mesh.shop.#"]).await?;
                let outbox = Outbox::new(pool.clone()).await?;
                let module = emitter(&vhost, "shop").await?;
                let context = mesh::Bus::builder()
                    .node("n1")
                    .context("shop")
                    .start(mesh_testkit::sdk::transport(&vhost.url()).await?)
                    .await?;
                let relay = outbox
                    .start_relay([module.clone(), context.clone()], quick())
                    .await?;
                let mut tx = pool.begin().await?;
                let from_module = module
                    .emit_outgoing_in(&mut tx, Outgoing::json("order.placed", &serde_json::json!({}))?)
                    .await?;
                let from_context = context
                    .emit_outgoing_in(&mut tx, Outgoing::json("price.changed", &serde_json::json!({}))?)
                    .await?;
                tx.commit().await?;
                eventually(PATIENCE, "both events delivered", || async {
                    (received.len() >= 2).then_some(())
                })
                .await;
                relay.stop().await;
                sink.drain().await?;
                let mut keys: Vec<(String, String)> = received
                    .all()
                    .into_iter()
                    .map(|s| (s.id, s.key))
                    .collect();
                keys.sort();
                let mut expected = vec![
                    (from_module.to_string(), "module.shop.order.placed".to_owned()),
                    (from_context.to_string(), "mesh.shop.price.changed".to_owned()),
                ];
                expected.sort();
                assert_eq!(keys, expected);
                assert_eq!(outbox.counts().await?.pending, 0);
                Ok(())
            }
        }
    };
}

on_both_backends!(postgres);
on_both_backends!(sqlite);

/// Acceptance: two relays on one PostgreSQL outbox, 50,000 events: each delivered, no
/// duplicate. Four sources, each relay holding a bus for every one of them, so the relays
/// share the sources through their leases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_on_one_postgres_outbox_deliver_50000_events_without_duplicates(
) -> anyhow::Result<()> {
    const SOURCES: [&str; 4] = ["shop", "billing", "stock", "mail"];
    const EVENTS: usize = 50_000;
    const PER_TX: usize = 100;
    let (_store, pool) = common::postgres().await?;
    let vhost = TestVhost::create("outbox-two-relays").await?;
    let ledger = Ledger::new();
    let handled = ledger.clone();
    let sink = mesh::Bus::builder()
        .node("n1")
        .module("sink")
        .prefetch(256)
        .on_raw(["module.*.done"], move |e: mesh::Incoming<bytes::Bytes>| {
            handled.handled(e.meta.id().to_string());
            async { Ok(()) }
        })
        .start(mesh_testkit::sdk::transport(&vhost.url()).await?)
        .await?;
    let outbox = Outbox::new(pool.clone()).await?;
    let mut writers = Vec::new();
    let mut relay_buses = (Vec::new(), Vec::new());
    for source in SOURCES {
        writers.push(emitter(&vhost, source).await?);
        relay_buses.0.push(emitter(&vhost, source).await?);
        relay_buses.1.push(emitter(&vhost, source).await?);
    }
    let a = outbox
        .start_relay(relay_buses.0.clone(), quick().owner("relay-a"))
        .await?;
    let b = outbox
        .start_relay(relay_buses.1.clone(), quick().owner("relay-b"))
        .await?;

    // Every committed event is owed to the consumer.
    for (n, chunk) in (0..EVENTS).collect::<Vec<_>>().chunks(PER_TX).enumerate() {
        let writer = &writers[n % SOURCES.len()];
        let mut tx = pool.begin().await?;
        let ids = writer
            .emit_all_in(
                &mut tx,
                chunk
                    .iter()
                    .map(|i| Outgoing::json("done", &serde_json::json!({ "n": i })))
                    .collect::<Result<Vec<_>, _>>()?,
            )
            .await?;
        tx.commit().await?;
        for id in ids {
            ledger.attempted(id.to_string());
            ledger.confirmed(id.to_string());
        }
    }
    let report = ledger.wait_all_handled(Duration::from_secs(300)).await;
    // A relay counts a batch once it has marked it sent, which may come after the consumer
    // handled its events: wait for the counts to cover every event (more would be a double send,
    // refused below).
    let relayed = mesh_testkit::eventually(
        Duration::from_secs(60),
        "the relays to count every event they marked sent",
        || async {
            let relayed = (a.relayed(), b.relayed());
            (relayed.0 + relayed.1 >= EVENTS as u64).then_some(relayed)
        },
    )
    .await;
    a.stop().await;
    b.stop().await;
    sink.drain().await?;
    report.assert_clean();
    assert_eq!(report.confirmed, EVENTS);
    assert_eq!(report.handled_unique, EVENTS);
    assert_eq!(report.duplicates, 0, "relayed by each: {relayed:?}");
    assert_eq!(relayed.0 + relayed.1, EVENTS as u64, "{relayed:?}");
    eprintln!(
        "relayed by relay a: {}, by relay b: {}",
        relayed.0, relayed.1
    );
    assert_eq!(outbox.counts().await?.pending, 0);
    Ok(())
}

/// A relay refuses options under which two relays could publish the same rows in the
/// normal case: a lease shorter than a publish may wait.
#[tokio::test]
async fn a_lease_shorter_than_the_publish_deadline_is_refused() -> anyhow::Result<()> {
    let (_store, pool) = common::sqlite().await?;
    let outbox = Outbox::new(pool).await?;
    let broker = mesh::MemoryBroker::new();
    let bus = mesh::Bus::builder()
        .node("n1")
        .module("shop")
        .start(std::sync::Arc::new(broker.transport()))
        .await?;
    let error = outbox
        .start_relay(
            [bus],
            RelayOptions::default()
                .lease_ttl(Duration::from_secs(10))
                .publish_deadline(Some(Duration::from_secs(30))),
        )
        .await
        .expect_err("refused");
    assert_eq!(error.kind(), &mesh_outbox::ErrorKind::InvalidOptions);
    Ok(())
}

/// The library's tables stay out of the application's way: its own schema (or names) and
/// version table, installable twice, and next to an application's sqlx migrations.
#[tokio::test]
async fn the_outbox_tables_never_meet_the_applications() -> anyhow::Result<()> {
    let (_store, pool) = common::postgres().await?;
    // The application's own migrator table, as sqlx's migrator makes it, with a version 1.
    sqlx::query("CREATE TABLE _sqlx_migrations (version bigint PRIMARY KEY)")
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO _sqlx_migrations VALUES (1)")
        .execute(&pool)
        .await?;
    sqlx::query("CREATE TABLE outbox (id int)")
        .execute(&pool)
        .await?;
    Outbox::new(pool.clone()).await?;
    Outbox::new(pool.clone()).await?;
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM mesh_outbox.versions ORDER BY version")
            .fetch_all(&pool)
            .await?;
    // Version 3 added the scheduled events' table (decision 0028).
    assert_eq!(versions, [1, 2, 3]);
    // Version 2 dropped version 1's commit notification: no trigger makes the application's
    // transactions notify (a notifying commit serialises the database's commits).
    let triggers: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_trigger
         WHERE tgrelid = 'mesh_outbox.outbox'::regclass AND NOT tgisinternal",
    )
    .fetch_one(&pool)
    .await?;
    assert_eq!(triggers, 0, "the outbox table has no trigger");
    let functions: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_proc WHERE pronamespace = 'mesh_outbox'::regnamespace",
    )
    .fetch_one(&pool)
    .await?;
    assert_eq!(functions, 0, "no function is left in the schema");
    let app: Vec<i64> = sqlx::query_scalar("SELECT version FROM _sqlx_migrations")
        .fetch_all(&pool)
        .await?;
    assert_eq!(app, [1], "the application's migrations are untouched");
    let tables: Vec<(String, String)> = sqlx::query_as(
        "SELECT table_name::text, table_schema::text FROM information_schema.tables
         WHERE table_schema IN ('public', 'mesh_outbox')",
    )
    .fetch_all(&pool)
    .await?;
    let has = |table: &str, schema: &str| tables.contains(&(table.into(), schema.into()));
    assert!(has("outbox", "public"), "{tables:?}");
    for table in ["outbox", "versions", "leases", "inbox", "scheduled"] {
        assert!(has(table, "mesh_outbox"), "{table}: {tables:?}");
    }
    assert!(has("_sqlx_migrations", "public"), "{tables:?}");
    assert_eq!(tables.len(), 7, "{tables:?}");
    Ok(())
}

/// Processes upgrading one SQLite outbox at once all succeed, the upgrade made once. Each
/// round takes the file back to version 1 (as an earlier release left it) and four pools
/// install at once: an install that has read the version in a deferred transaction cannot
/// wait to become the writer, and SQLite answered it "database is locked" at once while
/// another upgraded; it takes the write lock before it reads (`BEGIN IMMEDIATE`), waits, and
/// finds the tables upgraded.
#[tokio::test]
async fn concurrent_upgrades_of_a_sqlite_outbox_all_succeed() -> anyhow::Result<()> {
    use anyhow::Context;
    const ROUNDS: usize = 10;
    const INSTALLS: usize = 4;
    let (store, pool) = common::sqlite().await?;
    Outbox::new(pool.clone()).await?;
    let mut pools = Vec::new();
    for _ in 0..INSTALLS {
        pools.push(common::sqlite_pool(store.url()).await?);
    }
    for round in 0..ROUNDS {
        sqlx::raw_sql(
            "DROP TABLE mesh_scheduled; DELETE FROM mesh_outbox_versions WHERE version = 2",
        )
        .execute(&pool)
        .await?;
        let installs = pools.iter().map(|pool| Outbox::new(pool.clone()));
        for (i, installed) in futures::future::join_all(installs)
            .await
            .into_iter()
            .enumerate()
        {
            installed.with_context(|| format!("round {round} of {ROUNDS}, install {i}"))?;
        }
    }
    let versions: Vec<i64> =
        sqlx::query_scalar("SELECT version FROM mesh_outbox_versions ORDER BY version")
            .fetch_all(&pool)
            .await?;
    assert_eq!(versions, [1, 2]);
    for pool in pools {
        pool.close().await;
    }
    pool.close().await;
    Ok(())
}
