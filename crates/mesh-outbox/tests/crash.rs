//! Acceptance: the crash ledger, on PostgreSQL and on SQLite. A child process writes rows and
//! emits through the outbox in the same transactions (one in four rolled back), with a relay
//! of its own, and is SIGKILLed at random points 20 times, the broker being stopped for 30 s
//! once while a child writes on; a last child only relays what is left. Every committed row's
//! event must reach the consumer (lost 0), no event of a rolled-back transaction may
//! (unexpected 0); duplicates are reported.
//!
//! The child is this test binary again, running this same test with `CHILD_ENV` set, so a
//! random kill lands before a commit, between a commit and the publish, in the middle of a
//! relay round or between a confirm and the mark. The broker is a private node: the shared
//! one is never stopped.

mod common;

use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use mesh::{Bus, EventId, Incoming, Outgoing};
use mesh_outbox::{EmitIn, Outbox, RelayOptions};
use mesh_testkit::{sdk, Ledger, NodeOptions, PrivateNode};
use rand::Rng;

/// Set in a child: `<database URL> <broker URL> <write|drain>`.
const CHILD_ENV: &str = "MESH_OUTBOX_CRASH_CHILD";
const KILLS: usize = 20;
const OUTAGE_AT: usize = 10;
const OUTAGE: Duration = Duration::from_secs(30);

/// Relays that take over quickly from a killed one, and give up a publish quickly while the
/// broker is down.
fn options() -> RelayOptions {
    RelayOptions::default()
        .batch(50)
        .poll_interval(Duration::from_millis(50))
        .retry_delay(Duration::from_millis(100))
        .lease_ttl(Duration::from_secs(1))
        .publish_deadline(Some(Duration::from_millis(500)))
}

/// The ledger on one backend, in a module named after it.
macro_rules! crash_ledger {
    ($backend:ident, $pool:ty, $connect:path) => {
        mod $backend {
            use super::*;

            /// This test's name, for the child's filter.
            const NAME: &str = concat!(stringify!($backend), "::crash_ledger");

            async fn connect(url: &str) -> anyhow::Result<sqlx::Pool<$pool>> {
                $connect(url).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn crash_ledger() -> anyhow::Result<()> {
                match std::env::var(CHILD_ENV) {
                    Ok(config) => child(&config).await,
                    Err(_) => parent().await,
                }
            }

            async fn child(config: &str) -> anyhow::Result<()> {
                let mut words = config.split(' ');
                let (Some(db), Some(amqp), Some(mode)) =
                    (words.next(), words.next(), words.next())
                else {
                    anyhow::bail!("{CHILD_ENV} needs a database URL, a broker URL and a mode");
                };
                let pool = connect(db).await?;
                let outbox = Outbox::new(pool.clone()).await?;
                let bus = sdk::emitter(amqp, "n1", "crashy").await?;
                let relay = outbox.start_relay([bus.clone()], options()).await?;
                if mode == "drain" {
                    let drained = || async {
                        (outbox.counts().await.ok()?.pending == 0).then_some(())
                    };
                    mesh_testkit::eventually(Duration::from_secs(120), "the drain", drained)
                        .await;
                    relay.stop().await;
                    bus.drain().await?;
                    return Ok(());
                }
                for n in 0u64.. {
                    let count = 1 + (n % 3);
                    let roll_back = n % 4 == 3;
                    let ids: Vec<EventId> = (0..count).map(|_| EventId::new()).collect();
                    if roll_back {
                        // Recorded before (and outside) the transaction, so the parent can
                        // check they never arrive.
                        for id in &ids {
                            sqlx::query(&format!(
                                "INSERT INTO rolled_back (event_id) VALUES ('{id}')"
                            ))
                            .execute(&pool)
                            .await?;
                        }
                    }
                    let mut tx = pool.begin().await?;
                    let events = ids
                        .iter()
                        .enumerate()
                        .map(|(i, id)| {
                            let body = serde_json::json!({ "n": n, "i": i });
                            Ok(Outgoing::json("written", &body)?.id(*id))
                        })
                        .collect::<Result<Vec<_>, mesh::Error>>()?;
                    bus.emit_all_in(&mut tx, events).await?;
                    for id in &ids {
                        sqlx::query(&format!(
                            "INSERT INTO ledger_rows (event_id) VALUES ('{id}')"
                        ))
                        .execute(&mut *tx)
                        .await?;
                    }
                    if roll_back {
                        tx.rollback().await?;
                    } else {
                        tx.commit().await?;
                    }
                }
                Ok(())
            }

            fn spawn_child(
                db: &str,
                amqp: &str,
                mode: &str,
            ) -> anyhow::Result<tokio::process::Child> {
                Ok(tokio::process::Command::new(std::env::current_exe()?)
                    .args([NAME, "--exact", "--nocapture", "--test-threads=1"])
                    .env(CHILD_ENV, format!("{db} {amqp} {mode}"))
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .kill_on_drop(true)
                    .spawn()?)
            }

            async fn parent() -> anyhow::Result<()> {
                let node = PrivateNode::start(NodeOptions::default().heartbeat(2)).await?;
                let (store, pool) = common::$backend().await?;
                Outbox::new(pool.clone()).await?;
                sqlx::query("CREATE TABLE ledger_rows (event_id text PRIMARY KEY)")
                    .execute(&pool)
                    .await?;
                sqlx::query("CREATE TABLE rolled_back (event_id text PRIMARY KEY)")
                    .execute(&pool)
                    .await?;
                let ledger = Ledger::new();
                let handled = ledger.clone();
                let sink = Bus::builder()
                    .node("n1")
                    .module("sink")
                    .prefetch(256)
                    .on_raw(["module.crashy.#"], move |e: Incoming<Bytes>| {
                        handled.handled(e.meta.id().to_string());
                        async { Ok(()) }
                    })
                    .start(sdk::transport(&node.url()).await?)
                    .await?;

                let mut rng = rand::thread_rng();
                for run in 0..KILLS {
                    let mut child = spawn_child(store.url(), &node.url(), "write")?;
                    // Fault timing, not synchronisation: the kill lands wherever the child is.
                    tokio::time::sleep(Duration::from_millis(rng.gen_range(300..2500))).await;
                    if run == OUTAGE_AT {
                        node.stop().await?;
                        tokio::time::sleep(OUTAGE).await;
                        node.start_again().await?;
                        tokio::time::sleep(Duration::from_millis(rng.gen_range(300..2500))).await;
                    }
                    child.start_kill()?;
                    child.wait().await?;
                }
                let mut drain = spawn_child(store.url(), &node.url(), "drain")?;
                let status = tokio::time::timeout(Duration::from_secs(180), drain.wait()).await??;
                assert!(status.success(), "the draining child failed: {status}");

                let committed: Vec<String> = sqlx::query_scalar("SELECT event_id FROM ledger_rows")
                    .fetch_all(&pool)
                    .await?;
                let rolled_back: Vec<String> =
                    sqlx::query_scalar("SELECT event_id FROM rolled_back")
                        .fetch_all(&pool)
                        .await?;
                for id in &committed {
                    ledger.attempted(id.clone());
                    ledger.confirmed(id.clone());
                }
                let report = ledger.wait_all_handled(Duration::from_secs(120)).await;
                sink.drain().await?;
                eprintln!(
                    "crash ledger: {} committed, {} rolled back, {} delivered, {} duplicates",
                    committed.len(),
                    rolled_back.len(),
                    report.handled_unique,
                    report.duplicates
                );
                assert!(
                    committed.len() > 100,
                    "the children committed too little to test: {}",
                    committed.len()
                );
                assert!(!rolled_back.is_empty());
                // Lost: committed and never delivered. Unexpected: delivered and never committed,
                // which covers every rolled-back event.
                report.assert_clean();
                assert_eq!(report.handled_unique, committed.len());
                Ok(())
            }
        }
    };
}

crash_ledger!(postgres, sqlx::Postgres, common::postgres_pool);
crash_ledger!(sqlite, sqlx::Sqlite, common::sqlite_pool);
