//! The inbox: a handler's database work and the record of the event's id, committed in one
//! transaction, so a redelivered event (a resend, a redelivery after a crash, a retry after
//! the commit) has no second effect; and a durable [`DedupStore`](mesh::DedupStore) on the
//! same table.

use mesh_core::text::EscapedDisplay;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use mesh::{EventId, HandlerError, Incoming};
use sqlx::{Pool, Transaction};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::error::Error;
use crate::sql::Backend;
use crate::telemetry;

/// The processed event ids of one database's consumers (PostgreSQL `mesh_outbox.inbox`,
/// SQLite `mesh_inbox`), keyed by consumer name and event id, kept for a retention.
///
/// ```no_run
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)]
/// # struct OrderPaid { order: i64 }
/// # impl mesh::Event for OrderPaid { const KEY: &'static str = "module.shop.order.paid"; }
/// # async fn demo(transport: std::sync::Arc<dyn mesh::raw::Transport>) -> Result<(), Box<dyn std::error::Error>> {
/// use mesh::{HandlerError, Incoming};
/// use mesh_outbox::Inbox;
///
/// let pool = sqlx::PgPool::connect("postgres://localhost/billing").await?;
/// let inbox = Inbox::new(pool).await?;
/// let bus = mesh::Bus::builder().node("n1").module("billing")
///     .on(inbox.handler("mark-paid", |e: Incoming<OrderPaid>, mut tx| async move {
///         sqlx::query("UPDATE invoices SET paid = true WHERE order_id = $1")
///             .bind(e.event.order)
///             .execute(&mut *tx)
///             .await
///             .map_err(HandlerError::retry)?;
///         Ok(tx) // committed with the record of the event's id
///     }))
///     .start(transport)
///     .await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Inbox<DB: Backend> {
    pool: Pool<DB>,
    retention: Duration,
}

impl<DB: Backend> Clone for Inbox<DB> {
    fn clone(&self) -> Self {
        Inbox {
            pool: self.pool.clone(),
            retention: self.retention,
        }
    }
}

impl<DB: Backend> Inbox<DB> {
    /// The inbox on `pool`'s database: creates or upgrades the library's tables (as
    /// [`Outbox::new`](crate::Outbox::new) does). Processed ids are kept 7 days.
    pub async fn new(pool: Pool<DB>) -> Result<Inbox<DB>, Error> {
        DB::install(&pool).await?;
        Ok(Inbox {
            pool,
            retention: Duration::from_secs(7 * 24 * 3600),
        })
    }

    /// How long processed ids are kept (default 7 days): a redelivery later than that runs
    /// the work again. Keep it longer than any event may take to come back (the retry
    /// ladder's total, a dead letter's re-drive, a publisher's outage).
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// A handler (for [`BusBuilder::on`](mesh::BusBuilder::on)) that runs `work` in a
    /// transaction that also records the event's id under `consumer`, and commits both
    /// together:
    ///
    /// - an id `consumer` processed before is acked without running `work`;
    /// - `work` returning `Err`, or the commit failing, rolls everything back: the event is
    ///   retried (or dead-lettered) as any handler's, and nothing was recorded;
    /// - a crash after the commit and before the ack: the redelivery finds the id, no second
    ///   effect.
    ///
    /// Two deliveries of one id at once (a resend consumed by another worker) are
    /// serialised by the database: on PostgreSQL the second waits for the first's commit,
    /// then skips. `consumer` names this handler's effect: two handlers of one event with
    /// different effects use different names.
    pub fn handler<T, F, Fut>(
        &self,
        consumer: &str,
        work: F,
    ) -> impl Fn(Incoming<T>) -> BoxFuture<'static, Result<(), HandlerError>> + Send + Sync + 'static
    where
        T: Send + 'static,
        F: Fn(Incoming<T>, Transaction<'static, DB>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Transaction<'static, DB>, HandlerError>> + Send + 'static,
    {
        let pool = self.pool.clone();
        let consumer: Arc<str> = consumer.into();
        let work = Arc::new(work);
        move |incoming: Incoming<T>| {
            let pool = pool.clone();
            let consumer = Arc::clone(&consumer);
            let work = Arc::clone(&work);
            Box::pin(async move {
                let id = incoming.meta.id().to_string();
                let mut tx = pool.begin().await.map_err(HandlerError::retry)?;
                if !DB::inbox_insert(&mut *tx, &consumer, &id)
                    .await
                    .map_err(HandlerError::retry)?
                {
                    debug!(%id, consumer = %EscapedDisplay(&consumer), "event processed before; skipped");
                    telemetry::inbox(&consumer, true);
                    // Nothing was written: the rollback only ends the transaction.
                    tx.rollback().await.map_err(HandlerError::retry)?;
                    return Ok(());
                }
                let tx = work(incoming, tx).await?;
                tx.commit().await.map_err(HandlerError::retry)?;
                telemetry::inbox(&consumer, false);
                Ok(())
            })
        }
    }

    /// A durable [`DedupStore`](mesh::DedupStore) for [`mesh::dedup`], its ids under
    /// `consumer` in the inbox table.
    ///
    /// Unlike [`Inbox::handler`] it cannot commit the claim with the effect (the effect is
    /// not in this database): the claim is written first, so a crash while the handler runs
    /// leaves the id claimed, and the redelivery is skipped (at most once for that event).
    /// Use it for effects outside the database where a skip beats a repeat; use
    /// [`Inbox::handler`] for database effects.
    pub fn dedup_store(&self, consumer: &str) -> SqlDedup<DB> {
        SqlDedup {
            pool: self.pool.clone(),
            consumer: consumer.into(),
        }
    }

    /// Whether `consumer` processed `id` (kept within the retention).
    pub async fn processed(&self, consumer: &str, id: EventId) -> Result<bool, Error> {
        DB::inbox_contains(&self.pool, consumer, &id.to_string())
            .await
            .map_err(|e| Error::database("reading the inbox", e))
    }

    /// Deletes the ids processed longer ago than the retention; returns how many.
    pub async fn cleanup(&self) -> Result<u64, Error> {
        DB::inbox_cleanup(&self.pool, self.retention)
            .await
            .map_err(|e| Error::database("deleting old inbox ids", e))
    }

    /// Runs [`Inbox::cleanup`] every `interval` until the returned handle is stopped or
    /// dropped.
    pub fn start_cleanup(&self, interval: Duration) -> InboxCleanup {
        let inbox = self.clone();
        let stop = CancellationToken::new();
        let token = stop.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Err(e) = inbox.cleanup().await {
                    warn!(error = %EscapedDisplay(&e), "inbox cleanup failed");
                }
                tokio::select! {
                    () = tokio::time::sleep(interval) => {}
                    () = token.cancelled() => return,
                }
            }
        });
        InboxCleanup { stop, task }
    }
}

/// Records that `consumer` processed the event `id`, in the caller's transaction: `true` when
/// it is recorded now, `false` when it was recorded before (the event's effect is done; roll
/// back). The record commits or rolls back with `tx`, as in [`Inbox::handler`]; use this
/// when the work around it is more than one handler's (a saga retrying its transaction on a
/// conflict). A concurrent transaction recording the same id makes this wait for its outcome.
pub async fn record_in<DB: Backend>(
    tx: &mut Transaction<'_, DB>,
    consumer: &str,
    id: EventId,
) -> Result<bool, Error> {
    let recorded = DB::inbox_insert(&mut **tx, consumer, &id.to_string())
        .await
        .map_err(|e| Error::database("recording a processed event", e))?;
    telemetry::inbox(consumer, !recorded);
    Ok(recorded)
}

/// The inbox's cleanup on a schedule ([`Inbox::start_cleanup`]); stops when dropped.
#[derive(Debug)]
pub struct InboxCleanup {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl InboxCleanup {
    /// Stops it and waits for its end.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = (&mut { self }.task).await;
    }
}

impl Drop for InboxCleanup {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A durable [`DedupStore`](mesh::DedupStore): claims are rows of the inbox table (see
/// [`Inbox::dedup_store`]).
#[derive(Debug)]
pub struct SqlDedup<DB: Backend> {
    pool: Pool<DB>,
    consumer: String,
}

impl<DB: Backend> mesh::DedupStore for SqlDedup<DB> {
    fn claim(&self, id: EventId) -> BoxFuture<'_, bool> {
        Box::pin(async move {
            let id = id.to_string();
            let claimed = async {
                let mut conn = self.pool.acquire().await?;
                DB::inbox_insert(&mut *conn, &self.consumer, &id).await
            };
            match claimed.await {
                Ok(claimed) => {
                    telemetry::inbox(&self.consumer, !claimed);
                    claimed
                }
                Err(e) => {
                    // The store cannot tell: the handler runs (at least once beats never).
                    warn!(%id, error = %EscapedDisplay(&e), "dedup claim failed; handling the event anyway");
                    true
                }
            }
        })
    }

    fn release(&self, id: EventId) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Err(e) = DB::inbox_delete(&self.pool, &self.consumer, &id.to_string()).await {
                warn!(%id, error = %EscapedDisplay(&e), "dedup release failed; a retry of the event will be skipped");
            }
        })
    }
}
