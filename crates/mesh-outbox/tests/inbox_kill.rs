//! Acceptance: the inbox across a crash. A consumer process commits an event's effect with
//! the inbox and is SIGKILLed before it acks; the broker redelivers the event to the next
//! consumer, and the same event is resent twice more: the database changed exactly once.
//!
//! The consumer is this test binary again, running this same test with `CHILD_ENV` set; it
//! holds the delivery (never acks) once its transaction committed, so the kill lands exactly
//! between the commit and the ack.

mod common;

use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use common::PATIENCE;
use mesh::{Bus, EventId, HandlerError, Incoming, Outgoing};
use mesh_outbox::Inbox;
use mesh_testkit::{eventually, sdk, TestVhost};
use sqlx::postgres::PgPoolOptions;

/// Set in the child: `<database URL> <broker URL>`.
const CHILD_ENV: &str = "MESH_OUTBOX_INBOX_CHILD";
const PATTERN: &str = "module.shop.#";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_effect_committed_before_a_kill_is_not_repeated() -> anyhow::Result<()> {
    match std::env::var(CHILD_ENV) {
        Ok(config) => child(&config).await,
        Err(_) => parent().await,
    }
}

/// The inbox's work: one more on the counter.
fn count(
    inbox: &Inbox<sqlx::Postgres>,
) -> impl Fn(Incoming<Bytes>) -> futures::future::BoxFuture<'static, Result<(), HandlerError>>
       + Send
       + Sync
       + 'static {
    inbox.handler("count", |_e: Incoming<Bytes>, mut tx| async move {
        sqlx::query("UPDATE counter SET n = n + 1")
            .execute(&mut *tx)
            .await
            .map_err(HandlerError::retry)?;
        Ok(tx)
    })
}

async fn child(config: &str) -> anyhow::Result<()> {
    let Some((db, amqp)) = config.split_once(' ') else {
        anyhow::bail!("{CHILD_ENV} needs a database URL and a broker URL");
    };
    let pool = PgPoolOptions::new().max_connections(2).connect(db).await?;
    let work = count(&Inbox::new(pool).await?);
    let _bus = Bus::builder()
        .node("n1")
        .module("billing")
        .prefetch(1)
        .on_raw([PATTERN], move |e: Incoming<Bytes>| {
            let done = work(e);
            async move {
                done.await?;
                // Committed; the ack never comes: the parent kills this process now.
                std::future::pending::<()>().await;
                Ok(())
            }
        })
        .start(sdk::transport(amqp).await?)
        .await?;
    std::future::pending::<()>().await;
    Ok(())
}

async fn parent() -> anyhow::Result<()> {
    let (store, pool) = common::postgres().await?;
    let vhost = TestVhost::create("inbox-kill").await?;
    sqlx::query("CREATE TABLE counter (n bigint NOT NULL)")
        .execute(&pool)
        .await?;
    sqlx::query("INSERT INTO counter (n) VALUES (0)")
        .execute(&pool)
        .await?;
    let inbox = Inbox::new(pool.clone()).await?;
    // The consumer's queue and binding first (a bus that declares them and stops), so the
    // event waits there for the child.
    Bus::builder()
        .node("n1")
        .module("billing")
        .on_raw([PATTERN], |_e: Incoming<Bytes>| async { Ok(()) })
        .start(sdk::transport(&vhost.url()).await?)
        .await?
        .close()
        .await;
    let shop = sdk::emitter(&vhost.url(), "n1", "shop").await?;
    let id = EventId::new();
    shop.emit_outgoing(Outgoing::json("paid", &1)?.id(id))
        .await?;

    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .args([
            "an_effect_committed_before_a_kill_is_not_repeated",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{} {}", store.url(), vhost.url()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let counter = || async {
        sqlx::query_scalar::<_, i64>("SELECT n FROM counter")
            .fetch_one(&pool)
            .await
            .ok()
    };
    eventually(PATIENCE, "the child committed the effect", || async {
        (counter().await? == 1).then_some(())
    })
    .await;
    assert!(inbox.processed("count", id).await?);
    child.start_kill()?;
    child.wait().await?;

    // The next consumer gets the unacked delivery again, and two resends.
    let work = count(&inbox);
    let deliveries = Arc::new(AtomicU32::new(0));
    let redelivered = Arc::new(AtomicU32::new(0));
    let (seen, again) = (Arc::clone(&deliveries), Arc::clone(&redelivered));
    let billing = Bus::builder()
        .node("n1")
        .module("billing")
        .prefetch(1)
        .on_raw([PATTERN], move |e: Incoming<Bytes>| {
            if e.meta.redelivered() {
                again.fetch_add(1, Ordering::SeqCst);
            }
            let done = work(e);
            let seen = Arc::clone(&seen);
            async move {
                done.await?;
                seen.fetch_add(1, Ordering::SeqCst);
                Ok(())
            }
        })
        .start(sdk::transport(&vhost.url()).await?)
        .await?;
    eventually(PATIENCE, "the redelivery handled", || async {
        (deliveries.load(Ordering::SeqCst) >= 1).then_some(())
    })
    .await;
    for _ in 0..2 {
        shop.emit_outgoing(Outgoing::json("paid", &1)?.id(id))
            .await?;
    }
    eventually(PATIENCE, "three deliveries handled", || async {
        (deliveries.load(Ordering::SeqCst) >= 3).then_some(())
    })
    .await;
    billing.drain().await?;
    shop.drain().await?;
    assert_eq!(
        redelivered.load(Ordering::SeqCst),
        1,
        "the killed consumer's delivery came back"
    );
    assert_eq!(
        counter().await,
        Some(1),
        "the database changed once in four deliveries"
    );
    Ok(())
}
