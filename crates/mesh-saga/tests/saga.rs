//! The order saga of `examples/saga.rs` on both backends, on the harness's in-memory broker
//! with the outbox's relay: the happy path, the timeout path (compensation) and duplicate
//! deliveries each reach the right final state, and each effect happens once. Processes
//! opening one SQLite store at once all succeed.
//!
//! The timeout runs on the harness's clock: the saga's timeouts are due by its bus's clock,
//! and the relay compares due times with that clock when it is the harness's, so a payment
//! timeout of 30 minutes fires once the harness advances 30 minutes, in no wall time.

mod common;

use std::time::Duration;

use common::order::{
    OrderCancelled, OrderCompleted, OrderPlaced, OrderShipped, PaymentExpired, PaymentReceived,
    PaymentRequested, ShipmentRequested, Stage,
};
use common::{order, World};
use mesh::{EventId, Outgoing};

/// Long enough never to fire in a test that does not wait for it.
const HOUR: Duration = Duration::from_secs(3600);

/// The payment timeout of the timeout path, passed by advancing the harness's clock.
const HALF_AN_HOUR: Duration = Duration::from_secs(30 * 60);

macro_rules! on_both_backends {
    ($backend:ident) => {
        mod $backend {
            use super::*;

            /// Placed, paid, shipped: completed as `Shipped`, its payment timeout cancelled
            /// (never published), each of its events published once.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn an_order_paid_and_shipped_completes_once() -> anyhow::Result<()> {
                let (_db, pool) = common::$backend().await?;
                let w = World::start(pool, HOUR).await?;

                w.shop
                    .emit(&OrderPlaced {
                        order: 1,
                        cents: 4200,
                    })
                    .await?;
                w.harness
                    .published_where(|e: &PaymentRequested| e.order == 1 && e.cents == 4200)
                    .await?;
                let waiting = w
                    .instance_when("1", "order 1 started", |i| i.version == 1)
                    .await;
                assert_eq!(waiting.state.stage, Stage::AwaitingPayment);
                assert_eq!(waiting.timeouts.len(), 1, "{:?}", waiting.timeouts);
                assert_eq!(waiting.timeouts[0].name, "payment");
                assert_eq!(w.outbox.counts().await?.scheduled, 1);

                w.payments.emit(&PaymentReceived { order: 1 }).await?;
                w.harness
                    .published_where(|e: &ShipmentRequested| e.order == 1)
                    .await?;
                let paid = w
                    .instance_when("1", "order 1 paid", |i| i.version == 2)
                    .await;
                assert_eq!(paid.state.stage, Stage::AwaitingShipment);
                assert!(paid.timeouts.is_empty(), "the payment timeout is cancelled");
                assert_eq!(
                    w.outbox.counts().await?.scheduled,
                    0,
                    "and gone from the outbox"
                );

                w.warehouse.emit(&OrderShipped { order: 1 }).await?;
                w.harness
                    .published_where(|e: &OrderCompleted| e.order == 1)
                    .await?;
                let done = w.instance_when("1", "order 1 done", |i| i.completed).await;
                assert_eq!(done.state.stage, Stage::Shipped);
                assert_eq!(done.version, 3);

                w.relay_idle().await;
                assert_eq!(w.published(|e: &PaymentRequested| e.order == 1), 1);
                assert_eq!(w.published(|e: &ShipmentRequested| e.order == 1), 1);
                assert_eq!(w.published(|e: &OrderCompleted| e.order == 1), 1);
                assert_eq!(w.published(|_: &PaymentExpired| true), 0);
                assert_eq!(w.published(|_: &OrderCancelled| true), 0);

                // Each applied event emitted the instance after it, caused by that event.
                let transitions = common::transitions(&w.harness);
                let seen: Vec<(u64, bool, Option<Stage>)> = transitions
                    .iter()
                    .map(|(_, _, t)| {
                        let stage = serde_json::from_value::<order::Order>(t.state.clone())
                            .ok()
                            .map(|o| o.stage);
                        (t.version, t.completed, stage)
                    })
                    .collect();
                assert_eq!(
                    seen,
                    [
                        (1, false, Some(Stage::AwaitingPayment)),
                        (2, false, Some(Stage::AwaitingShipment)),
                        (3, true, Some(Stage::Shipped)),
                    ]
                );
                assert!(transitions
                    .iter()
                    .all(|(_, cause, t)| t.saga == "order" && t.key == "1" && cause.is_some()));
                w.stop().await
            }

            /// Placed and never paid: once the harness's clock passed the 30-minute payment
            /// timeout, the timeout arrives, the order is cancelled (the compensation is
            /// emitted once), and a payment after that changes nothing.
            ///
            /// On a current-thread runtime, as `Harness::advance` asks; the clock runs on
            /// real time otherwise (the relay waits on the database).
            #[tokio::test]
            async fn an_order_not_paid_in_time_is_cancelled_once() -> anyhow::Result<()> {
                let (_db, pool) = common::$backend().await?;
                let w = World::start(pool, HALF_AN_HOUR).await?;
                // The harness's clock an hour ahead of the system's: a timeout due by the
                // system's clock would be due already, and fire before the advance below.
                w.harness.advance(HOUR).await;

                w.shop
                    .emit(&OrderPlaced {
                        order: 2,
                        cents: 990,
                    })
                    .await?;
                w.harness
                    .published_where(|e: &PaymentRequested| e.order == 2)
                    .await?;
                let waiting = w
                    .instance_when("2", "order 2 started", |i| i.version == 1)
                    .await;
                assert_eq!(waiting.state.stage, Stage::AwaitingPayment);
                assert_eq!(waiting.timeouts.len(), 1, "{:?}", waiting.timeouts);
                let due = mesh::Timestamp::parse(&waiting.timeouts[0].due)?;
                let from = w.orders.now();
                assert!(
                    due.unix_nanos() - from.unix_nanos() > 29 * 60 * 1_000_000_000,
                    "the timeout is due in half an hour by the harness's clock: {due:?}, now {from:?}"
                );
                assert!(
                    due.unix_nanos() - mesh::Timestamp::now().unix_nanos()
                        > 89 * 60 * 1_000_000_000,
                    "not by the system's: {due:?}"
                );
                // Everything the start emitted is out; the timeout waits for its time.
                w.relay_idle().await;
                assert_eq!(w.outbox.counts().await?.scheduled, 1);
                assert_eq!(w.published(|_: &PaymentExpired| true), 0);

                w.harness.advance(HALF_AN_HOUR).await;
                w.harness
                    .published_where(|e: &OrderCancelled| e.order == 2)
                    .await?;
                let done = w.instance_when("2", "order 2 done", |i| i.completed).await;
                assert_eq!(done.state.stage, Stage::Cancelled);
                assert_eq!(done.version, 2, "started, then timed out");
                assert!(done.timeouts.is_empty());

                // A payment too late: acked, and the completed instance stays as it is.
                w.payments.emit(&PaymentReceived { order: 2 }).await?;
                w.harness.handled::<PaymentReceived>("orders").await?;
                let after = w.instance_when("2", "order 2", |_| true).await;
                assert_eq!(after.version, 2);
                assert_eq!(after.state.stage, Stage::Cancelled);

                w.relay_idle().await;
                assert_eq!(w.published(|e: &PaymentExpired| e.order == 2), 1);
                assert_eq!(w.published(|e: &OrderCancelled| e.order == 2), 1);
                assert_eq!(w.published(|_: &ShipmentRequested| true), 0);
                assert_eq!(w.published(|_: &OrderCompleted| true), 0);
                w.stop().await
            }

            /// Every event of an order delivered two or three times (the same id): each
            /// is applied once, and each effect is published once. A timeout event that is
            /// not the instance's pending one (a stray copy) changes nothing either.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn duplicate_deliveries_are_applied_once() -> anyhow::Result<()> {
                let (_db, pool) = common::$backend().await?;
                let w = World::start(pool, HOUR).await?;

                let placed = EventId::new();
                for _ in 0..3 {
                    let e = Outgoing::event(&OrderPlaced {
                        order: 3,
                        cents: 100,
                    })?
                    .id(placed);
                    w.shop.emit_outgoing(e).await?;
                }
                common::wait_handled(&w, 3).await;
                let started = w.instance_when("3", "order 3 started", |_| true).await;
                assert_eq!(started.version, 1);

                // Not the pending timeout's id: ignored.
                w.orders.emit(&PaymentExpired { order: 3 }).await?;
                common::wait_handled(&w, 4).await;

                let paid = EventId::new();
                for _ in 0..2 {
                    let e = Outgoing::event(&PaymentReceived { order: 3 })?.id(paid);
                    w.payments.emit_outgoing(e).await?;
                }
                common::wait_handled(&w, 6).await;
                let shipped = EventId::new();
                for _ in 0..2 {
                    let e = Outgoing::event(&OrderShipped { order: 3 })?.id(shipped);
                    w.warehouse.emit_outgoing(e).await?;
                }
                common::wait_handled(&w, 8).await;

                let done = w.instance_when("3", "order 3 done", |i| i.completed).await;
                assert_eq!(done.state.stage, Stage::Shipped);
                assert_eq!(done.version, 3, "three events applied, each once");
                w.relay_idle().await;
                assert_eq!(w.published(|e: &PaymentRequested| e.order == 3), 1);
                assert_eq!(w.published(|e: &ShipmentRequested| e.order == 3), 1);
                assert_eq!(w.published(|e: &OrderCompleted| e.order == 3), 1);
                assert_eq!(w.published(|_: &OrderCancelled| true), 0);
                let versions: Vec<u64> = common::transitions(&w.harness)
                    .iter()
                    .map(|(_, _, t)| t.version)
                    .collect();
                assert_eq!(versions, [1, 2, 3], "a transition per applied event, none per copy");
                w.stop().await
            }
        }
    };
}

on_both_backends!(sqlite);
on_both_backends!(postgres);

/// Processes opening one SQLite saga store at once all succeed, and the saga tables'
/// version is recorded once. Each round empties the version table (the tables stay) and
/// four pools open the store at once: an install that has read the version in a deferred
/// transaction cannot wait to become the writer, and SQLite answered it "database is
/// locked" at once while another wrote; it takes the write lock before it reads
/// (`BEGIN IMMEDIATE`), waits, and finds the version recorded.
#[tokio::test]
async fn concurrent_installs_of_a_sqlite_saga_store_all_succeed() -> anyhow::Result<()> {
    use anyhow::Context;
    const ROUNDS: usize = 10;
    const INSTALLS: usize = 4;
    let (store, pool) = common::sqlite().await?;
    mesh_saga::SagaStore::new(pool.clone()).await?;
    let mut pools = Vec::new();
    for _ in 0..INSTALLS {
        pools.push(common::sqlite_pool(store.url()).await?);
    }
    for round in 0..ROUNDS {
        sqlx::query("DELETE FROM mesh_saga_versions")
            .execute(&pool)
            .await?;
        let installs = pools
            .iter()
            .map(|pool| mesh_saga::SagaStore::new(pool.clone()));
        for (i, installed) in futures::future::join_all(installs)
            .await
            .into_iter()
            .enumerate()
        {
            installed.with_context(|| format!("round {round} of {ROUNDS}, install {i}"))?;
        }
        let versions: Vec<i64> = sqlx::query_scalar("SELECT version FROM mesh_saga_versions")
            .fetch_all(&pool)
            .await?;
        assert_eq!(versions, [1], "round {round}: the version recorded once");
    }
    for pool in pools {
        pool.close().await;
    }
    pool.close().await;
    Ok(())
}
