//! The audit logger: consumes `<node>.audit-logger.events` (bound to `#` on `mesh.events`)
//! and `<node>.audit-logger.dead` (bound to `#` on `mesh.events.dead`), or their shared
//! counterparts `shared.audit-logger.…` (see [Shared loggers](#shared-loggers)), and stores
//! each message once, in batches.
//!
//! # Every logger records every dead letter
//!
//! Each logger has its own durable queue of dead letters, so no reader takes them from
//! another: two loggers (two nodes, two stores) each record all of them, a module's
//! [`dead_letters`](https://docs.rs/mesh) tap takes nothing away, and dead letters made
//! while a logger is down wait in its queue. That queue is not dead-lettered itself (a dead
//! letter's dead letter would loop) and has no delivery limit.
//!
//! # Shared loggers
//!
//! With [`AuditOptions::shared`] the logger consumes `shared.audit-logger.events` and
//! `shared.audit-logger.dead` instead of its node's queues (same bindings, same arguments):
//! every shared logger competes on those two queues, so each event and each dead letter is
//! delivered to one of them at a time, and adding a logger adds a share of the work rather
//! than a second full copy. They write into one store (PostgreSQL), where the event id
//! keeps each event once whichever logger commits it: a logger killed after its commit but
//! before its ack has its deliveries redelivered to another, which finds the ids stored and
//! counts them as duplicates; two loggers racing on one id (a redelivery while the first
//! transaction is still open) are ordered by PostgreSQL's unique index of `event_ids`, the
//! second waiting for the first and then inserting nothing (or everything, if the first
//! rolled back). A deadlock between such writers is a transient error: the batch is
//! retried. `shared` is a reserved node name, so no node's queue is ever the shared one.
//!
//! # The retired `mesh.dead-letters`
//!
//! Older versions of mesh declared one shared queue `mesh.dead-letters`, bound to
//! `mesh.events.dead`. At every start, once its own queues are consuming, a logger run by the
//! service on RabbitMQ ([`AuditService`](crate::AuditService)) retires it if it exists: it
//! removes that binding (no new dead letter reaches it; they reach the loggers' own queues),
//! stores what the queue holds like any dead letter, and once the
//! queue stayed quiet for a moment deletes it, only if it is empty and unused (if-empty,
//! if-unused). If another consumer still reads it (a logger of an older version), or
//! anything fails, it stays for the next start: nothing is ever deleted with a dead letter
//! in it. The migration is no part of the [`Transport`] seam (only a RabbitMQ that an older
//! mesh ran on holds the queue): the service hands the logger its `AmqpTransport` as a
//! `RetiredDeadQueue`, and [`AuditLogger::run`] alone does not look for the queue.
//!
//! # Batches and acks
//!
//! Deliveries from both queues gather in one batch. A batch closes when it holds
//! `batch_size` rows or `batch_wait` after its first delivery, whichever comes first (so a
//! trickle is stored within `batch_wait`), and is written in one transaction of multi-row
//! inserts while the next batch fills (one batch is written at a time: the next waits for
//! it, so at most two batches are unacked). Only once that transaction committed are its
//! deliveries acked, all at once (`Delivery::ack_all`), so the transport sends them as one
//! command folded into `multiple` acks. Nothing is acked before it is durable;
//! a crash loses only unacked deliveries, which the broker delivers again, and the event id
//! as primary key (`ON CONFLICT DO NOTHING`) absorbs them, as it absorbs a publisher's resend.
//!
//! # One id, one event
//!
//! A delivery whose id is stored already is a duplicate (a redelivery or a resend) only when
//! its routing key, source and body (by SHA-256) are the stored event's. Otherwise it is a
//! different event reusing the id: it is kept in full in `event_conflicts`, keyed by its own
//! content so that its redeliveries are duplicates in turn, and counted
//! (`mesh_audit_id_conflicts_total`, [`LoggerStats::id_conflicts`]). Rows of one batch are
//! decided the same way, the first of an id being the stored event.
//!
//! # What cannot be stored
//!
//! An event that breaks the contract (no id, a header of the wrong type, a time out of range,
//! a body that is not JSON) has no key to be stored under: it is dead-lettered with reason
//! `undecodable`, like any consumer does, and so reaches the dead-letter store through
//! `<node>.audit-logger.dead` with its raw headers and body and the decoder's error as its last
//! error. Nothing vanishes, nothing panics: the decoder range-checks every time, and the
//! row conversion is checked too.
//!
//! A `module` or `node` event whose `x-source` is not the owner of its key is a forgery: the
//! logger records it the same way, as a dead letter with reason `forged-source` (so
//! `mesh dead list --reason forged-source` shows it), never in the trail of events, which
//! holds only events the contract accepts.
//!
//! # Who published it
//!
//! Every stored event records its broker-validated publisher
//! ([`codec::validated_user`]: the `user-id` RabbitMQ checked against the publishing
//! connection, or `x-mesh-user` on a retry copy), and every dead letter its own `user-id`.
//! With [`AuditOptions::enforce_identity`] the logger also checks it, as a bus with
//! identity enforced does: an event whose validated user is not the owner of its key
//! ([`codec::check_user`]) is dead-lettered `forged-source` too, counted in
//! `mesh_audit_rejected_total{reason="forged-source"}` and [`LoggerStats::rejected`].
//!
//! A database that is down or busy is retried with backoff while the batch's deliveries
//! stay unacked. A batch the database refuses for its content is split: each row is written
//! on its own, and an event the database refuses is dead-lettered (`permanent`, with the
//! database's error); a refused dead letter stays in its queue, since dead-lettering it
//! again would loop.
//!
//! # Shutdown
//!
//! When the shutdown token fires, the logger waits for the batch being written, cancels both
//! consumers, takes the deliveries already buffered into the open batch, commits it, acks it
//! and returns.

use mesh_core::text::{Escaped, EscapedDisplay};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use mesh_core::backoff::Backoff;
use mesh_core::{
    codec, naming, BoxFuture, DeadLetterNote, DeadQueue, DeadReason, Delivery, QueueSpec,
    Subscription, SubscriptionSpec, Timestamp, TopicPattern, Transport, TransportError,
    TransportErrorKind,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn, Instrument};

use crate::error::{is_transient, Error, ErrorKind};
use crate::options::AuditOptions;
use crate::store::{now_text, DeadRow, EventRow, Store, Written};
use crate::telemetry;

/// The first pause after a failed write; it doubles up to [`MAX_BACKOFF`] (the workspace's
/// schedule, `mesh_core::backoff`, with its jitter).
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// The pause after the database refused a dead letter, which comes straight back.
const REFUSED_PAUSE: Duration = Duration::from_secs(1);
/// How long the retired `mesh.dead-letters` must deliver nothing before the logger takes it
/// for drained and tries to delete it (which the broker refuses unless it is empty).
const RETIRED_QUIET: Duration = Duration::from_secs(2);
/// Tries at deleting the retired queue once drained: the acks of its last deliveries travel
/// on another channel than the delete, and may reach the broker after it.
const RETIRED_DELETE_TRIES: u32 = 3;

/// The retired `mesh.dead-letters` where a broker may still hold it, as retiring it needs
/// it: unbound first, deleted once drained. Only RabbitMQ can hold it, so no [`Transport`]
/// does this; the service's `AmqpTransport` does.
pub(crate) trait RetiredDeadQueue: Sync {
    /// Removes its binding to `mesh.events.dead`; whether the queue exists.
    fn unbind(&self) -> BoxFuture<'_, Result<bool, TransportError>>;

    /// Deletes it if it holds no message and has no consumer; whether it is gone.
    fn delete(&self) -> BoxFuture<'_, Result<bool, TransportError>>;
}

/// What the logger did so far. Cheap to read while it runs ([`AuditLogger::stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoggerStats {
    /// Events stored (new rows).
    pub events_stored: u64,
    /// Event deliveries stored already: redeliveries and resends of a stored event (same
    /// id, routing key, source and body) or of a stored id conflict.
    pub duplicates: u64,
    /// Events that reused the id of a different stored event, stored as conflicts (each
    /// conflicting event once).
    pub id_conflicts: u64,
    /// Dead letters stored (new rows).
    pub dead_letters_stored: u64,
    /// Events dead-lettered because they break the contract or the database refused them.
    pub rejected: u64,
    /// Transactions committed.
    pub batches: u64,
    /// Rows retention removed (every table; see [`AuditOptions::retain`](crate::AuditOptions::retain)).
    pub rows_pruned: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    events_stored: AtomicU64,
    duplicates: AtomicU64,
    id_conflicts: AtomicU64,
    dead_letters_stored: AtomicU64,
    rejected: AtomicU64,
    batches: AtomicU64,
    pub(crate) rows_pruned: AtomicU64,
    /// Both subscriptions are open and a run is taking their deliveries.
    consuming: AtomicBool,
}

/// Marks the logger consuming while it lives.
struct Consuming<'a>(&'a AtomicBool);

impl<'a> Consuming<'a> {
    fn new(flag: &'a AtomicBool) -> Consuming<'a> {
        flag.store(true, Ordering::Relaxed);
        Consuming(flag)
    }
}

impl Drop for Consuming<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// The audit logger. Build it with a store and options, then [`run`](AuditLogger::run) it
/// on a transport.
///
/// ```no_run
/// # async fn demo(transport: &dyn mesh_core::Transport) -> Result<(), mesh_audit::Error> {
/// use mesh_audit::{AuditLogger, AuditOptions, Store, StoreOptions};
/// use tokio_util::sync::CancellationToken;
///
/// let store = Store::open(StoreOptions::url("sqlite://audit.db?mode=rwc")?).await?;
/// let logger = AuditLogger::new(store, AuditOptions::new().node("anchor"));
/// let shutdown = CancellationToken::new();
/// logger.run(transport, &shutdown).await?; // until `shutdown.cancel()`
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct AuditLogger {
    store: Store,
    options: AuditOptions,
    counters: Arc<Counters>,
}

/// The open batch: rows and the deliveries they came from, index for index.
#[derive(Default)]
struct Batch {
    events: Vec<EventRow>,
    event_deliveries: Vec<Delivery>,
    dead: Vec<DeadRow>,
    dead_deliveries: Vec<Delivery>,
    opened: Option<Instant>,
}

impl Batch {
    fn len(&self) -> usize {
        self.events.len() + self.dead.len()
    }

    fn open(&mut self) {
        if self.opened.is_none() {
            self.opened = Some(Instant::now());
        }
    }
}

/// Which queue a delivery came from.
#[derive(Debug, Clone, Copy)]
enum Source {
    Events,
    DeadLetters,
}

impl AuditLogger {
    /// A logger writing to `store`.
    pub fn new(store: Store, options: AuditOptions) -> AuditLogger {
        AuditLogger {
            store,
            options,
            counters: Arc::default(),
        }
    }

    /// The store it writes to.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// What it did so far (over every run of this logger and its clones).
    pub fn stats(&self) -> LoggerStats {
        let c = &self.counters;
        // Batches first: every batch it counts has its rows counted below.
        let batches = c.batches.load(Ordering::Acquire);
        LoggerStats {
            events_stored: c.events_stored.load(Ordering::Relaxed),
            duplicates: c.duplicates.load(Ordering::Relaxed),
            id_conflicts: c.id_conflicts.load(Ordering::Relaxed),
            dead_letters_stored: c.dead_letters_stored.load(Ordering::Relaxed),
            rejected: c.rejected.load(Ordering::Relaxed),
            batches,
            rows_pruned: c.rows_pruned.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Whether a [`run`](AuditLogger::run) is consuming both queues now (of this logger or
    /// a clone): false before it subscribed, and from the moment it stops taking deliveries.
    pub fn is_consuming(&self) -> bool {
        self.counters.consuming.load(Ordering::Relaxed)
    }

    /// Consumes and stores until `shutdown` fires; then commits and acks the open batch and
    /// returns `Ok`.
    ///
    /// Fails when a subscription ends on its own (the transport lost its connection: the
    /// open batch is still committed and acked as far as the channel allows) or the
    /// database cannot take a batch and shutdown was asked for meanwhile. The caller may
    /// run it again, on a new transport if need be: nothing acked is lost and nothing
    /// stored twice.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future loses nothing: the deliveries of the open batch are released
    /// back to their queues (or, if their transaction had committed, delivered again and
    /// absorbed). Prefer the shutdown token, which commits the open batch first.
    pub async fn run(
        &self,
        transport: &dyn Transport,
        shutdown: &CancellationToken,
    ) -> Result<(), Error> {
        self.run_with(transport, None, shutdown).await
    }

    /// As [`run`](AuditLogger::run), and once both queues are consuming, retires the old
    /// `mesh.dead-letters` through `retired` (see the module docs). Only the service
    /// (feature `service`) has a transport that can retire it.
    #[cfg(feature = "service")]
    pub(crate) async fn run_retiring(
        &self,
        transport: &dyn Transport,
        retired: &dyn RetiredDeadQueue,
        shutdown: &CancellationToken,
    ) -> Result<(), Error> {
        self.run_with(transport, Some(retired), shutdown).await
    }

    async fn run_with(
        &self,
        transport: &dyn Transport,
        retired: Option<&dyn RetiredDeadQueue>,
        shutdown: &CancellationToken,
    ) -> Result<(), Error> {
        let (queue, dead_queue) = self.options.queues()?;
        let span = tracing::info_span!("mesh.audit", queue = %EscapedDisplay(&queue));
        self.run_inner(transport, retired, shutdown, queue, dead_queue)
            .instrument(span)
            .await
    }

    async fn run_inner(
        &self,
        transport: &dyn Transport,
        retired: Option<&dyn RetiredDeadQueue>,
        shutdown: &CancellationToken,
        queue: String,
        dead_queue: String,
    ) -> Result<(), Error> {
        let prefetch = self.options.get_prefetch();
        let mut events = transport
            .subscribe(SubscriptionSpec {
                queue: QueueSpec::Durable {
                    name: queue.clone(),
                },
                patterns: vec![TopicPattern::all()],
                prefetch,
                // The logger never retries: a delivery is stored, or dead-lettered at once.
                retry_delays: Vec::new(),
            })
            .await
            .map_err(|e| Error::transport(format!("consuming `{queue}`"), e))?;
        let mut dead = transport
            .subscribe(SubscriptionSpec {
                queue: QueueSpec::DeadLetters(DeadQueue::Durable {
                    name: dead_queue.clone(),
                }),
                patterns: Vec::new(),
                prefetch,
                retry_delays: Vec::new(),
            })
            .await
            .map_err(|e| Error::transport(format!("consuming `{dead_queue}`"), e))?;
        // Both queues are bound now: a dead letter reaches this logger's own queue before
        // the retired one stops receiving them.
        if let Some(retired) = retired {
            self.retire_old_dead_queue(transport, retired, shutdown)
                .await?;
        }
        info!(
            prefetch,
            batch_size = self.options.get_batch_size(),
            batch_wait_ms = self.options.get_batch_wait().as_millis(),
            "audit logger consuming"
        );
        let consuming = Consuming::new(&self.counters.consuming);

        // Retention runs where a batch's write would, between batches: one bounded step,
        // due first at once, then as `retention_step` sets (`None` while one runs).
        let retention = self.options.get_retain().cloned();
        let due: crate::retention::Due =
            std::sync::Mutex::new(retention.as_ref().map(|_| Instant::now()));
        let mut batch = Batch::default();
        // The batch being written while the next one fills; one at most, so no more than
        // two batches are unacked at a time.
        let mut writing: Option<BoxFuture<'_, Result<(), Error>>> = None;
        let mut ended = None;
        // The shutdown and the batch's deadline are waited on by futures made once, not at
        // every turn of the loop: a fresh one would register with the token or the timer,
        // and unregister again, for every delivery.
        let stopped = shutdown.cancelled();
        tokio::pin!(stopped);
        let timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(timer);
        let mut armed = None;
        let prune_timer = tokio::time::sleep_until(Instant::now());
        tokio::pin!(prune_timer);
        let mut prune_armed = None;
        loop {
            if shutdown.is_cancelled() {
                break;
            }
            if let Some(retention) = retention.as_ref().filter(|_| writing.is_none()) {
                let next = due.lock().ok().and_then(|d| *d);
                if next.is_some_and(|next| next <= Instant::now()) {
                    if let Ok(mut d) = due.lock() {
                        *d = None;
                    }
                    writing = Some(Box::pin(self.retention_step(retention, &due)));
                    continue;
                }
                if next != prune_armed {
                    if let Some(next) = next {
                        prune_timer.as_mut().reset(next);
                    }
                    prune_armed = next;
                }
            }
            let deadline = batch.opened.map(|t| t + self.options.get_batch_wait());
            if deadline.is_some_and(|d| d <= Instant::now())
                || batch.len() >= self.options.get_batch_size()
            {
                if let Some(previous) = writing.take() {
                    previous.await?;
                }
                writing = Some(Box::pin(self.commit(std::mem::take(&mut batch), shutdown)));
                continue;
            }
            if deadline != armed {
                if let Some(deadline) = deadline {
                    timer.as_mut().reset(deadline);
                }
                armed = deadline;
            }
            // Not biased: under a backlog of events, dead letters still get their turn.
            tokio::select! {
                () = &mut stopped => break,
                outcome = written(&mut writing) => {
                    writing = None;
                    outcome?;
                }
                () = &mut timer, if armed.is_some() => {}
                () = &mut prune_timer, if prune_armed.is_some() && writing.is_none() => {
                    prune_armed = None;
                }
                delivery = events.next() => match delivery {
                    Some(delivery) => self.take(Source::Events, delivery, &mut batch).await,
                    None => { ended = Some(queue.clone()); break; }
                },
                delivery = dead.next() => match delivery {
                    Some(delivery) => self.take(Source::DeadLetters, delivery, &mut batch).await,
                    None => { ended = Some(dead_queue.clone()); break; }
                },
            }
            // What else both queues hold ready joins the batch without another turn of the
            // select (each turn polls every branch): a backlog is taken a burst at a time.
            match self.take_ready(&mut events, &mut dead, &mut batch).await {
                Some(Source::Events) => {
                    ended = Some(queue.clone());
                    break;
                }
                Some(Source::DeadLetters) => {
                    ended = Some(dead_queue.clone());
                    break;
                }
                None => {}
            }
        }

        if let Some(previous) = writing.take() {
            previous.await?;
        }
        // Stop both consumers, and store what they had buffered rather than hand it back.
        drop(consuming);
        events.cancel();
        dead.cancel();
        self.drain_buffered(Source::Events, &mut events, &mut batch, shutdown)
            .await?;
        self.drain_buffered(Source::DeadLetters, &mut dead, &mut batch, shutdown)
            .await?;
        self.commit(batch, shutdown).await?;

        match ended {
            None => {
                info!(stats = ?self.stats(), "audit logger stopped");
                Ok(())
            }
            Some(queue) => {
                warn!(queue = %EscapedDisplay(&queue), "subscription ended: the transport lost its connection");
                Err(Error::transport(
                    format!("the subscription to `{queue}` ended"),
                    TransportError::new(TransportErrorKind::ConnectionLost, "subscription ended"),
                ))
            }
        }
    }

    /// Retires `mesh.dead-letters` if it exists: unbinds it, stores what it holds, and
    /// deletes it once empty and unused (see the module docs). A failure on the broker's
    /// side leaves it for the next start and is only logged; a failure of the store fails
    /// like any batch.
    async fn retire_old_dead_queue(
        &self,
        transport: &dyn Transport,
        queue: &dyn RetiredDeadQueue,
        shutdown: &CancellationToken,
    ) -> Result<(), Error> {
        let retired = naming::RETIRED_DEAD_QUEUE;
        match queue.unbind().await {
            Ok(false) => return Ok(()),
            Ok(true) => info!(
                queue = retired,
                "retiring the old queue of dead letters: storing what it holds"
            ),
            Err(e) => {
                warn!(queue = retired, error = %EscapedDisplay(&e), "could not unbind the retired queue of dead letters; trying again at the next start");
                return Ok(());
            }
        }
        let mut old = match transport
            .subscribe(SubscriptionSpec {
                queue: QueueSpec::DeadLetters(DeadQueue::Retired),
                patterns: Vec::new(),
                prefetch: self.options.get_prefetch(),
                retry_delays: Vec::new(),
            })
            .await
        {
            Ok(subscription) => subscription,
            Err(e) => {
                warn!(queue = retired, error = %EscapedDisplay(&e), "could not consume the retired queue of dead letters; trying again at the next start");
                return Ok(());
            }
        };
        let mut batch = Batch::default();
        let mut taken = 0u64;
        loop {
            tokio::select! {
                () = shutdown.cancelled() => break,
                next = tokio::time::timeout(RETIRED_QUIET, old.next()) => match next {
                    Ok(Some(delivery)) => {
                        taken += 1;
                        self.take(Source::DeadLetters, delivery, &mut batch).await;
                        if batch.len() >= self.options.get_batch_size() {
                            self.commit(std::mem::take(&mut batch), shutdown).await?;
                        }
                    }
                    // Quiet for a while (drained, or read by another consumer), or ended.
                    Ok(None) | Err(_) => break,
                },
            }
        }
        old.cancel();
        self.drain_buffered(Source::DeadLetters, &mut old, &mut batch, shutdown)
            .await?;
        self.commit(batch, shutdown).await?;
        drop(old);
        info!(
            queue = retired,
            dead_letters = taken,
            "the retired queue of dead letters drained"
        );
        if shutdown.is_cancelled() {
            return Ok(());
        }
        for attempt in 1..=RETIRED_DELETE_TRIES {
            match queue.delete().await {
                Ok(true) => {
                    info!(queue = retired, "the retired queue of dead letters is deleted");
                    return Ok(());
                }
                Ok(false) if attempt < RETIRED_DELETE_TRIES => {
                    if !pause(REFUSED_PAUSE, shutdown).await {
                        return Ok(());
                    }
                }
                Ok(false) => warn!(queue = retired, "the retired queue of dead letters is not empty or still read by another consumer; kept until the next start"),
                Err(e) => {
                    warn!(queue = retired, error = %EscapedDisplay(&e), "could not delete the retired queue of dead letters; trying again at the next start");
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Takes the deliveries both subscriptions have ready, one of each in turn, until
    /// neither has one or the batch is full; which subscription ended, if one did.
    async fn take_ready(
        &self,
        events: &mut Subscription,
        dead: &mut Subscription,
        batch: &mut Batch,
    ) -> Option<Source> {
        while batch.len() < self.options.get_batch_size() {
            let mut took = false;
            for (source, subscription) in [
                (Source::Events, &mut *events),
                (Source::DeadLetters, &mut *dead),
            ] {
                match ready(subscription).await {
                    Poll::Ready(Some(delivery)) => {
                        self.take(source, delivery, batch).await;
                        took = true;
                    }
                    Poll::Ready(None) => return Some(source),
                    Poll::Pending => {}
                }
            }
            if !took {
                break;
            }
        }
        None
    }

    async fn drain_buffered(
        &self,
        source: Source,
        subscription: &mut Subscription,
        batch: &mut Batch,
        shutdown: &CancellationToken,
    ) -> Result<(), Error> {
        while let Some(delivery) = subscription.next().await {
            self.take(source, delivery, batch).await;
            if batch.len() >= self.options.get_batch_size() {
                self.commit(std::mem::take(batch), shutdown).await?;
            }
        }
        Ok(())
    }

    /// Adds a delivery to the batch, or dead-letters an event that cannot be stored.
    async fn take(&self, source: Source, delivery: Delivery, batch: &mut Batch) {
        let received_at = now_text();
        match source {
            Source::DeadLetters => {
                batch.dead.push(
                    DeadRow::new(
                        &delivery.message,
                        &received_at,
                        self.options.get_delivery_limit(),
                    )
                    .judged(&delivery.message, self.options.get_enforce_identity()),
                );
                batch.dead_deliveries.push(delivery);
                batch.open();
            }
            Source::Events => {
                let row = codec::decode(&delivery.message)
                    .and_then(|envelope| match self.options.get_enforce_identity() {
                        // The broker-validated publisher must own the key.
                        Some(prefix) => codec::check_user(&envelope.key, &delivery.message, prefix)
                            .map(|()| envelope),
                        None => Ok(envelope),
                    })
                    .map_err(|e| (e.dead_reason(), e.to_string()))
                    .and_then(|envelope| {
                        EventRow::new(envelope, &delivery.message, &received_at)
                            .map_err(|problem| (DeadReason::Undecodable, problem))
                    });
                match row {
                    Ok(row) => {
                        batch.events.push(row);
                        batch.event_deliveries.push(delivery);
                        batch.open();
                    }
                    Err((reason, problem)) => {
                        // Wire data, escaped: a publisher cannot forge a log line.
                        warn!(
                            key = %codec::quote(&delivery.message.routing_key),
                            reason = %EscapedDisplay(&reason),
                            problem = %Escaped(&problem),
                            "event dead-lettered, it breaks the contract"
                        );
                        self.reject(delivery, reason, problem).await;
                    }
                }
            }
        }
    }

    /// Dead-letters an event delivery with `reason`; if that fails the delivery goes back to
    /// its queue (the acker releases it), so it is never lost.
    async fn reject(&self, delivery: Delivery, reason: DeadReason, problem: String) {
        let mut copy = delivery.message.clone();
        codec::mark_dead(
            &mut copy,
            &DeadLetterNote {
                reason,
                attempts: codec::attempts(&delivery.message).saturating_add(1),
                last_error: Some(problem),
                queue: delivery.queue.clone(),
                time: Timestamp::now(),
            },
        );
        match delivery.dead_letter(copy).await {
            Ok(()) => {
                self.counters.rejected.fetch_add(1, Ordering::Relaxed);
                telemetry::rejected(reason);
            }
            Err(e) => {
                warn!(error = %EscapedDisplay(&e), "dead-lettering failed; the event will be delivered again")
            }
        }
    }

    /// Writes the batch in one transaction and acks its deliveries; see the module docs for
    /// what happens when the database fails.
    async fn commit(&self, batch: Batch, shutdown: &CancellationToken) -> Result<(), Error> {
        if batch.len() == 0 {
            return Ok(());
        }
        let started = Instant::now();
        match self
            .write_retrying(&batch.events, &batch.dead, shutdown)
            .await?
        {
            Ok(written) => {
                self.count(&written, batch.events.len(), started);
                debug!(
                    events = batch.events.len(),
                    new_events = written.events,
                    new_conflicts = written.conflicts,
                    dead_letters = batch.dead.len(),
                    elapsed_ms = started.elapsed().as_millis(),
                    "batch committed"
                );
                // Both queues' deliveries in one batch: their acks go out together.
                ack_all(
                    batch
                        .event_deliveries
                        .into_iter()
                        .chain(batch.dead_deliveries),
                )
                .await;
            }
            Err(refused) => {
                telemetry::write_failed("refused");
                warn!(error = %EscapedDisplay(&refused), rows = batch.len(), "the database refused a batch; writing its rows one by one");
                self.commit_one_by_one(batch, shutdown).await?;
            }
        }
        Ok(())
    }

    async fn commit_one_by_one(
        &self,
        batch: Batch,
        shutdown: &CancellationToken,
    ) -> Result<(), Error> {
        for (row, delivery) in batch.events.into_iter().zip(batch.event_deliveries) {
            let started = Instant::now();
            match self
                .write_retrying(std::slice::from_ref(&row), &[], shutdown)
                .await?
            {
                Ok(written) => {
                    self.count(&written, 1, started);
                    ack_all(vec![delivery]).await;
                }
                Err(refused) => {
                    telemetry::write_failed("refused");
                    error!(id = %row.id, error = %EscapedDisplay(&refused), "the database refused an event; dead-lettering it");
                    self.reject(
                        delivery,
                        DeadReason::Permanent,
                        format!("the audit store refused it: {refused}"),
                    )
                    .await;
                }
            }
        }
        let mut refused_any = false;
        for (row, delivery) in batch.dead.into_iter().zip(batch.dead_deliveries) {
            let started = Instant::now();
            match self
                .write_retrying(&[], std::slice::from_ref(&row), shutdown)
                .await?
            {
                Ok(written) => {
                    self.count(&written, 0, started);
                    ack_all(vec![delivery]).await;
                }
                Err(refused) => {
                    telemetry::write_failed("refused");
                    // Dead-lettering a dead letter would loop: it stays in its queue.
                    error!(id = %row.id, error = %EscapedDisplay(&refused), "the database refused a dead letter; it stays in its queue");
                    delivery.release();
                    refused_any = true;
                }
            }
        }
        if refused_any {
            // The released dead letter comes straight back; do not spin on it.
            pause(REFUSED_PAUSE, shutdown).await;
        }
        Ok(())
    }

    /// Counts a committed transaction of `events` event deliveries, written since `started`.
    fn count(&self, written: &Written, events: usize, started: Instant) {
        telemetry::committed(
            written.events,
            written.conflicts,
            events as u64,
            written.dead_letters,
            started.elapsed(),
        );
        if written.conflicts > 0 {
            warn!(
                conflicts = written.conflicts,
                "events reused the id of a different stored event; kept as id conflicts"
            );
        }
        let c = &self.counters;
        c.events_stored.fetch_add(written.events, Ordering::Relaxed);
        c.id_conflicts
            .fetch_add(written.conflicts, Ordering::Relaxed);
        c.duplicates.fetch_add(
            telemetry::duplicates(written.events, written.conflicts, events as u64),
            Ordering::Relaxed,
        );
        c.dead_letters_stored
            .fetch_add(written.dead_letters, Ordering::Relaxed);
        // Last: whoever sees the batch counted sees its rows counted too.
        c.batches.fetch_add(1, Ordering::Release);
    }

    /// Writes, retrying transient failures with backoff. The outer `Err` gives up (shutdown
    /// was asked for, or the pool is closed): the caller drops the deliveries, which releases
    /// them. The inner `Err` is a refusal that retrying cannot change.
    async fn write_retrying(
        &self,
        events: &[EventRow],
        dead: &[DeadRow],
        shutdown: &CancellationToken,
    ) -> Result<Result<Written, sqlx::Error>, Error> {
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        loop {
            match self.store.write(events, dead).await {
                Ok(written) => return Ok(Ok(written)),
                Err(e) if is_transient(&e) => {
                    telemetry::write_failed("transient");
                    if shutdown.is_cancelled() {
                        return Err(Error::database("committing the last batch at shutdown", e));
                    }
                    let delay = backoff.next_delay();
                    warn!(error = %EscapedDisplay(&e), retry_in_ms = delay.as_millis(), "writing a batch failed; retrying");
                    if !pause(delay, shutdown).await {
                        // One more try: shutdown wants the batch committed if at all possible.
                        return match self.store.write(events, dead).await {
                            Ok(written) => Ok(Ok(written)),
                            Err(e) => {
                                Err(Error::database("committing the last batch at shutdown", e))
                            }
                        };
                    }
                }
                Err(e @ sqlx::Error::PoolClosed) => {
                    return Err(
                        Error::new(ErrorKind::Database, "the store was closed").with_source(e)
                    )
                }
                Err(e) => return Ok(Err(e)),
            }
        }
    }
}

/// Acks every delivery at once: the transport sends the acks of one channel as one command,
/// folded into `multiple` acks. A failed ack (the channel closed) needs nothing more: the
/// broker delivers the message again, and its id absorbs it.
async fn ack_all(deliveries: impl IntoIterator<Item = Delivery>) {
    if let Err(e) = Delivery::ack_all(deliveries).await {
        warn!(failed = e.failed, error = %EscapedDisplay(&e.error), "acks failed after commit; the broker will deliver those again");
    }
}

/// The subscription's next delivery if one is ready, polled once (with this task's waker,
/// so a `Pending` still wakes the task when one arrives).
async fn ready(subscription: &mut Subscription) -> Poll<Option<Delivery>> {
    std::future::poll_fn(|cx| Poll::Ready(subscription.poll_next(cx))).await
}

/// Resolves with the outcome of the batch being written; never, while none is.
async fn written(writing: &mut Option<BoxFuture<'_, Result<(), Error>>>) -> Result<(), Error> {
    match writing {
        Some(write) => write.await,
        None => std::future::pending().await,
    }
}

/// Waits `duration`, or less if `shutdown` fires; returns whether it waited the whole time.
async fn pause(duration: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        () = tokio::time::sleep(duration) => true,
        () = shutdown.cancelled() => false,
    }
}

impl AuditLogger {
    /// One retention step: removes a bounded chunk of what is older than the retention, and
    /// sets when the next is due. A failure is logged and retried after the interval: it
    /// never stops the logger.
    pub(crate) async fn retention_step(
        &self,
        retention: &crate::retention::Retention,
        due: &crate::retention::Due,
    ) -> Result<(), Error> {
        let started = Instant::now();
        let outcome = async {
            let prune = retention.prune_at(Timestamp::now())?;
            let step = self.store().prune_step(&prune).await?;
            if step.done {
                self.store().prepare_partitions_ahead().await?;
                telemetry::oldest_arrival(self.store().oldest_arrival().await?);
            }
            Ok::<crate::retention::Pruned, Error>(step)
        }
        .await;
        let next = match outcome {
            Ok(step) => {
                self.counters()
                    .rows_pruned
                    .fetch_add(step.rows(), Ordering::Relaxed);
                telemetry::pruned(&step);
                debug!(?step, "retention step");
                if step.done {
                    Instant::now() + retention.interval
                } else {
                    Instant::now() + started.elapsed() * crate::retention::PACE
                }
            }
            Err(e) => {
                warn!(error = %e, "retention step failed; retrying later");
                Instant::now() + retention.interval
            }
        };
        if let Ok(mut due) = due.lock() {
            *due = Some(next);
        }
        Ok(())
    }
}
