//! The inbox: the same event delivered three times (and once more after a "crash" between
//! the commit and the ack) changes the database exactly once; the dedup store's claims
//! survive a restart; old ids are cleaned up after the retention.

mod common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{emitter, PATIENCE};
use mesh::{Bus, DedupStore, EventId, HandlerError, Incoming, Outgoing, RetryPolicy};
use mesh_outbox::Inbox;
use mesh_testkit::{eventually, sdk, TestVhost};

macro_rules! on_both_backends {
    ($backend:ident) => {
        mod $backend {
            use super::*;

            /// Acceptance: one event, delivered three times by its publisher's resends and a
            /// fourth time after its first handling "crashed" between the commit and the
            /// ack (the handler fails after the inbox committed, so the retry ladder brings
            /// it back): the counter moves once.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_same_event_delivered_again_changes_the_database_once(
            ) -> anyhow::Result<()> {
                let (_store, pool) = common::$backend().await?;
                let vhost = TestVhost::create("inbox-once").await?;
                sqlx::query("CREATE TABLE counter (n bigint NOT NULL)")
                    .execute(&pool)
                    .await?;
                sqlx::query("INSERT INTO counter (n) VALUES (0)")
                    .execute(&pool)
                    .await?;
                let inbox = Inbox::new(pool.clone()).await?;
                let work = inbox.handler("count", |_e: Incoming<Bytes>, mut tx| async move {
                    sqlx::query("UPDATE counter SET n = n + 1")
                        .execute(&mut *tx)
                        .await
                        .map_err(HandlerError::retry)?;
                    Ok(tx)
                });
                let deliveries = Arc::new(AtomicU32::new(0));
                let counted = Arc::clone(&deliveries);
                let crash_once = Arc::new(AtomicU32::new(0));
                let sink = Bus::builder()
                    .node("n1")
                    .module("sink")
                    .prefetch(1)
                    .retry(RetryPolicy::new(3, vec![Duration::from_millis(100)])?)
                    .on_raw(["module.shop.#"], move |e: Incoming<Bytes>| {
                        let done = work(e);
                        let counted = Arc::clone(&counted);
                        let crash_once = Arc::clone(&crash_once);
                        async move {
                            done.await?;
                            counted.fetch_add(1, Ordering::SeqCst);
                            // The first handling "dies" after its commit: no ack.
                            if crash_once.fetch_add(1, Ordering::SeqCst) == 0 {
                                return Err(HandlerError::retry("killed after the commit"));
                            }
                            Ok(())
                        }
                    })
                    .start(sdk::transport(&vhost.url()).await?)
                    .await?;
                let shop = emitter(&vhost, "shop").await?;
                let id = EventId::new();
                for _ in 0..3 {
                    shop.emit_outgoing(Outgoing::json("paid", &1)?.id(id)).await?;
                }
                // Three deliveries and the retry of the "crashed" one.
                eventually(PATIENCE, "four deliveries handled", || async {
                    (deliveries.load(Ordering::SeqCst) >= 4).then_some(())
                })
                .await;
                sink.drain().await?;
                shop.drain().await?;
                let n: i64 = sqlx::query_scalar("SELECT n FROM counter").fetch_one(&pool).await?;
                assert_eq!(n, 1, "the database changed once");
                assert_eq!(deliveries.load(Ordering::SeqCst), 4);
                assert!(inbox.processed("count", id).await?);
                assert!(!inbox.processed("other", id).await?, "per consumer");
                Ok(())
            }

            /// Work that fails leaves no record: the retry runs it again, and the effect
            /// of the failed try was rolled back with it.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn failed_work_is_rolled_back_with_its_record() -> anyhow::Result<()> {
                let (_store, pool) = common::$backend().await?;
                sqlx::query("CREATE TABLE counter (n bigint NOT NULL)")
                    .execute(&pool)
                    .await?;
                sqlx::query("INSERT INTO counter (n) VALUES (0)")
                    .execute(&pool)
                    .await?;
                let inbox = Inbox::new(pool.clone()).await?;
                let tries = Arc::new(AtomicU32::new(0));
                let counted = Arc::clone(&tries);
                // The retry waits for the test to have looked at the inbox after the
                // failed try.
                let gate = Arc::new(tokio::sync::Semaphore::new(0));
                let opened = Arc::clone(&gate);
                let handler = inbox.handler("count", move |_e: Incoming<Bytes>, mut tx| {
                    let tries = Arc::clone(&counted);
                    let gate = Arc::clone(&opened);
                    async move {
                        sqlx::query("UPDATE counter SET n = n + 1")
                            .execute(&mut *tx)
                            .await
                            .map_err(HandlerError::retry)?;
                        if tries.fetch_add(1, Ordering::SeqCst) == 0 {
                            return Err(HandlerError::retry("the first try fails"));
                        }
                        gate.acquire().await.map_err(HandlerError::retry)?.forget();
                        Ok(tx)
                    }
                });
                let broker = mesh::MemoryBroker::new();
                let (done, mut finished) = tokio::sync::mpsc::unbounded_channel();
                let sink = Bus::builder()
                    .node("n1")
                    .module("sink")
                    .retry(RetryPolicy::new(3, vec![Duration::from_millis(10)])?)
                    .on_raw(["module.shop.#"], move |e: Incoming<Bytes>| {
                        let result = handler(e);
                        let done = done.clone();
                        async move {
                            let result = result.await;
                            let _ = done.send(result.is_ok());
                            result
                        }
                    })
                    .start(Arc::new(broker.transport()))
                    .await?;
                let shop = Bus::builder()
                    .node("n1")
                    .module("shop")
                    .start(Arc::new(broker.transport()))
                    .await?;
                let id = shop.emit_outgoing(Outgoing::json("paid", &1)?).await?;
                let first = tokio::time::timeout(PATIENCE, finished.recv()).await?;
                assert_eq!(first, Some(false));
                assert!(!inbox.processed("count", id).await?, "no record of a failed try");
                gate.add_permits(1);
                let second = tokio::time::timeout(PATIENCE, finished.recv()).await?;
                assert_eq!(second, Some(true));
                sink.drain().await?;
                let n: i64 = sqlx::query_scalar("SELECT n FROM counter").fetch_one(&pool).await?;
                assert_eq!(n, 1, "the failed try's change was rolled back");
                assert!(inbox.processed("count", id).await?);
                Ok(())
            }

            /// The dedup store's claims are rows: a new store on the same database (a
            /// restarted process) knows them; a released claim can be taken again; ids
            /// past the retention are cleaned up.
            #[tokio::test]
            async fn dedup_claims_survive_a_restart_and_expire_with_the_retention(
            ) -> anyhow::Result<()> {
                let (_store, pool) = common::$backend().await?;
                let (a, b) = (EventId::new(), EventId::new());
                {
                    let store = Inbox::new(pool.clone()).await?.dedup_store("mailer");
                    assert!(store.claim(a).await);
                    assert!(!store.claim(a).await);
                    assert!(store.claim(b).await);
                    store.release(b).await;
                }
                let inbox = Inbox::new(pool.clone()).await?;
                let store = inbox.dedup_store("mailer");
                assert!(!store.claim(a).await, "claimed before the restart");
                assert!(store.claim(b).await, "released before the restart");
                assert!(inbox.dedup_store("other").claim(a).await, "per consumer");
                assert_eq!(inbox.clone().retention(Duration::from_secs(3600)).cleanup().await?, 0);
                // Past a retention of zero, every id goes.
                let cleaned = inbox.retention(Duration::ZERO);
                eventually(PATIENCE, "the clock to move past the claims", || async {
                    (cleaned.cleanup().await.ok()? > 0).then_some(())
                })
                .await;
                let store = cleaned.dedup_store("mailer");
                assert!(store.claim(a).await, "forgotten after the retention");
                Ok(())
            }
        }
    };
}

on_both_backends!(postgres);
on_both_backends!(sqlite);
