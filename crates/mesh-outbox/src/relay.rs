//! The relay: publishes the outbox's committed rows through the buses of their sources, with
//! confirms, in order per source, and marks them sent only after the confirm.
//!
//! # Design
//!
//! One task per source (a bus given to the relay; the source is the bus's `x-source`), one
//! task that turns PostgreSQL's notifications into wake-ups, and one that cleans up and
//! records the table's size. A source's task, in rounds:
//!
//! 1. takes (or renews) the source's **lease**, a row `(source, owner, expires_at)`: one
//!    relay at a time publishes a source's rows, whatever number of relays share the
//!    database. A relay that cannot take it leaves the source to the one holding it;
//! 2. reads the oldest `batch` unsent rows of the source, by `seq`;
//! 3. publishes them in that order (pipelined: the transport keeps the order on its one
//!    confirm channel), then awaits their confirms in order;
//! 4. marks sent the rows of the confirmed prefix only: a row after one that failed stays
//!    unsent even if confirmed, so the next round publishes it again after the failed one
//!    (a duplicate, which consumers deduplicate by event id, rather than a reordering);
//! 5. with a full batch, goes on; otherwise waits for a wake-up (a notification, or the
//!    poll interval), and lets the lease go once the source stayed empty for a poll
//!    interval, so another relay may take it without waiting for its expiry.
//!
//! Why the order holds: if an event B of a source was written after the transaction of its
//! event A committed, B's `seq` is larger (sequences only grow) and A is visible to any
//! read that sees B; the one relay holding the lease reads unsent rows in `seq` order, so
//! publishes A before B. A row that commits late with a lower `seq` than rows already
//! published is not skipped (there is no high-water mark; the read is "unsent, by seq"): it
//! is published when it becomes visible, which is its commit order, and no event of the
//! source can have depended on it. Events of concurrent transactions have no order to keep.
//!
//! After a crash: a relay killed between the confirm and the mark leaves its rows unsent
//! and its lease until it expires ([`RelayOptions::lease_ttl`]); the next holder publishes
//! them again (at-least-once). A relay that stalls longer than the lease (its process
//! paused) may publish rows another relay publishes too; the lease must outlast the publish
//! deadline, which is checked at start.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use mesh::{Bus, Prepared, Timestamp, TransportErrorKind};
use sqlx::Pool;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::error::Error;
use crate::sql::StoredRow;
use crate::{telemetry, Backend};

/// Rows the cleanup deletes per statement.
const CLEANUP_BATCH: i64 = 10_000;

/// How a relay runs. `Default` + consuming setters.
#[derive(Debug, Clone)]
pub struct RelayOptions {
    batch: usize,
    poll_interval: Duration,
    lease_ttl: Duration,
    publish_deadline: Option<Duration>,
    retry_delay: Duration,
    cleanup_interval: Duration,
    retention: Duration,
    owner: Option<String>,
}

impl Default for RelayOptions {
    /// Batches of 500, a poll every second, leases of 60 s, a publish deadline of 30 s, a
    /// retry after 1 s, a cleanup every 60 s of rows sent over an hour ago.
    fn default() -> Self {
        RelayOptions {
            batch: 500,
            poll_interval: Duration::from_secs(1),
            lease_ttl: Duration::from_secs(60),
            publish_deadline: Some(Duration::from_secs(30)),
            retry_delay: Duration::from_secs(1),
            cleanup_interval: Duration::from_secs(60),
            retention: Duration::from_secs(3600),
            owner: None,
        }
    }
}

impl RelayOptions {
    /// Rows read and published per round (default 500).
    pub fn batch(mut self, batch: usize) -> Self {
        self.batch = batch;
        self
    }

    /// How often a source is looked at without a wake-up (default 1 s). PostgreSQL wakes
    /// the relay on each commit (`LISTEN`/`NOTIFY`), so this only bounds the delay after a
    /// lost notification; SQLite has no notifications, so it is the relay's latency there.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// How long a source's lease lasts without renewal (default 60 s): after a relay's
    /// crash, its sources wait this long for another relay. It must exceed the publish
    /// deadline.
    pub fn lease_ttl(mut self, ttl: Duration) -> Self {
        self.lease_ttl = ttl;
        self
    }

    /// How long one publish may wait for room and its confirm (default 30 s; `None`:
    /// forever, which a relay sharing its database with others should not use).
    pub fn publish_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.publish_deadline = deadline;
        self
    }

    /// How long a source waits after a failed round (default 1 s).
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// How often sent rows are deleted and the table's size recorded (default 60 s).
    pub fn cleanup_interval(mut self, interval: Duration) -> Self {
        self.cleanup_interval = interval;
        self
    }

    /// How long sent rows are kept before the cleanup deletes them (default 1 h).
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    /// This relay's name in the lease table (default: random), unique among the relays of
    /// one database.
    pub fn owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = Some(owner.into());
        self
    }
}

/// A running relay: publishes the committed outbox rows of its buses' sources, with
/// confirms, in order per source, and marks them sent only after the confirm. Several
/// relays on one database share the sources through leases (one holder per source at a
/// time); the design, and why the order holds, is in the project's `ARCHITECTURE.md`.
/// Started by [`Outbox::start_relay`](crate::Outbox::start_relay).
///
/// Under broker-enforced identity it publishes through the buses it was given, so as their
/// users: run in a module's own bus, it publishes as the module, which is what consumers
/// check. A standalone relay (one process relaying for several modules) needs a bus, with
/// the owner's credentials, for each source.
///
/// Stop it with [`Relay::stop`] before draining its buses; dropping it stops it too, without
/// waiting.
#[derive(Debug)]
pub struct Relay {
    owner: Arc<str>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    relayed: Arc<AtomicU64>,
}

impl Relay {
    /// Its name in the lease table.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Rows this relay published and marked sent so far.
    pub fn relayed(&self) -> u64 {
        self.relayed.load(Ordering::Relaxed)
    }

    /// Stops: each source finishes its round (its confirms awaited, its rows marked),
    /// gives its lease up, and the tasks end.
    pub async fn stop(mut self) {
        self.stop.cancel();
        for task in std::mem::take(&mut self.tasks) {
            let _ = task.await;
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

pub(crate) async fn start<DB: Backend>(
    pool: Pool<DB>,
    buses: Vec<Bus>,
    options: RelayOptions,
) -> Result<Relay, Error> {
    if options.batch == 0 {
        return Err(Error::options("a relay's batch must be at least 1"));
    }
    if options
        .publish_deadline
        .is_some_and(|d| d >= options.lease_ttl)
    {
        return Err(Error::options(
            "a relay's lease must outlast its publish deadline",
        ));
    }
    let owner: Arc<str> = options
        .owner
        .clone()
        .unwrap_or_else(|| format!("relay-{}", uuid::Uuid::new_v4()))
        .into();
    let mut by_source: HashMap<String, Bus> = HashMap::new();
    for bus in buses {
        let source = bus.identity().owner(bus.node()).to_string();
        if by_source.insert(source.clone(), bus).is_some() {
            return Err(Error::options(format!(
                "two buses of the relay speak for source `{source}`"
            )));
        }
    }
    let stop = CancellationToken::new();
    let relayed = Arc::new(AtomicU64::new(0));
    let options = Arc::new(options);
    let wakes: Arc<HashMap<String, Arc<Notify>>> = Arc::new(
        by_source
            .keys()
            .map(|s| (s.clone(), Arc::new(Notify::new())))
            .collect(),
    );
    let mut tasks = Vec::new();
    // Listening starts before the sources' first round, so no commit falls between.
    let wakeups = DB::listen(&pool)
        .await
        .map_err(|e| Error::database("listening for outbox commits", e))?;
    if let Some(mut wakeups) = wakeups {
        let wakes = Arc::clone(&wakes);
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let item = tokio::select! {
                    item = wakeups.next() => item,
                    () = stop.cancelled() => break,
                };
                match item {
                    Some(Some(source)) => {
                        if let Some(wake) = wakes.get(&source) {
                            wake.notify_one();
                        }
                    }
                    Some(None) => wakes.values().for_each(|w| w.notify_one()),
                    None => break,
                }
            }
        }));
    }
    for (source, bus) in by_source {
        let worker = SourceWorker {
            pool: pool.clone(),
            wake: Arc::clone(&wakes[&source]),
            source,
            bus,
            options: Arc::clone(&options),
            owner: Arc::clone(&owner),
            relayed: Arc::clone(&relayed),
            holding: false,
        };
        tasks.push(tokio::spawn(worker.run(stop.clone())));
    }
    tasks.push(tokio::spawn(cleanup_loop(
        pool,
        Arc::clone(&options),
        stop.clone(),
    )));
    info!(owner = %owner, "outbox relay started");
    Ok(Relay {
        owner,
        stop,
        tasks,
        relayed,
    })
}

pub(crate) async fn cleanup<DB: Backend>(
    pool: &Pool<DB>,
    older_than: Duration,
) -> Result<u64, Error> {
    let mut total = 0;
    loop {
        let deleted = DB::cleanup(pool, older_than, CLEANUP_BATCH)
            .await
            .map_err(|e| Error::database("deleting sent outbox rows", e))?;
        total += deleted;
        if deleted < CLEANUP_BATCH as u64 {
            return Ok(total);
        }
    }
}

async fn cleanup_loop<DB: Backend>(
    pool: Pool<DB>,
    options: Arc<RelayOptions>,
    stop: CancellationToken,
) {
    loop {
        let cleaned = match cleanup(&pool, options.retention).await {
            Ok(n) => n,
            Err(e) => {
                warn!(error = %error_chain(&e), "outbox cleanup failed");
                0
            }
        };
        match DB::counts(&pool).await {
            Ok(counts) => telemetry::table(&counts, cleaned),
            Err(e) => warn!(error = %e, "counting outbox rows failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(options.cleanup_interval) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// What one round did.
enum Round {
    /// Published a full batch: there may be more.
    Full,
    /// Published what there was.
    Drained,
    /// Nothing to publish.
    Empty,
    /// Another relay holds the source's lease.
    Taken,
}

/// Why a round failed.
enum RoundError {
    /// The bus is closed: the source's task ends.
    Closed,
    /// The database or the broker failed: tried again after the retry delay.
    Failed(String),
}

impl From<sqlx::Error> for RoundError {
    fn from(error: sqlx::Error) -> Self {
        RoundError::Failed(format!("database: {error}"))
    }
}

/// What became of one row of a round.
enum Fate {
    Confirmed(Timestamp),
    /// Never to be published: given up with this reason.
    Poison(&'static str, String),
    /// Failed now; the next round tries again.
    Failed(String),
    Closed,
}

struct SourceWorker<DB: Backend> {
    pool: Pool<DB>,
    source: String,
    bus: Bus,
    wake: Arc<Notify>,
    options: Arc<RelayOptions>,
    owner: Arc<str>,
    relayed: Arc<AtomicU64>,
    /// Whether this relay holds the source's lease (as far as it knows).
    holding: bool,
}

impl<DB: Backend> SourceWorker<DB> {
    async fn run(mut self, stop: CancellationToken) {
        let mut empty_since: Option<Instant> = None;
        loop {
            if stop.is_cancelled() {
                break;
            }
            let wait = match self.round().await {
                Ok(Round::Full) => {
                    empty_since = None;
                    continue;
                }
                Ok(Round::Drained) => {
                    empty_since = None;
                    self.options.poll_interval
                }
                Ok(Round::Empty) => {
                    let since = *empty_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= self.options.poll_interval {
                        self.release().await;
                        empty_since = None;
                    }
                    self.options.poll_interval
                }
                Ok(Round::Taken) => {
                    empty_since = None;
                    self.options.poll_interval
                }
                Err(RoundError::Closed) => {
                    debug!(source = %self.source, "the relay's bus is closed");
                    break;
                }
                Err(RoundError::Failed(reason)) => {
                    telemetry::relay_failed(&self.source);
                    warn!(source = %self.source, %reason, "outbox relay round failed; trying again");
                    self.release().await;
                    empty_since = None;
                    tokio::select! {
                        () = tokio::time::sleep(self.options.retry_delay) => {}
                        () = stop.cancelled() => break,
                    }
                    continue;
                }
            };
            tokio::select! {
                () = self.wake.notified() => {}
                () = tokio::time::sleep(wait) => {}
                () = stop.cancelled() => break,
            }
        }
        self.release().await;
    }

    async fn release(&mut self) {
        if !self.holding {
            return;
        }
        self.holding = false;
        if let Err(e) = DB::release_lease(&self.pool, &self.source, &self.owner).await {
            // It expires by itself.
            warn!(source = %self.source, error = %e, "giving an outbox lease up failed");
        }
    }

    async fn round(&mut self) -> Result<Round, RoundError> {
        let options = Arc::clone(&self.options);
        if !DB::acquire_lease(&self.pool, &self.source, &self.owner, options.lease_ttl).await? {
            self.holding = false;
            return Ok(Round::Taken);
        }
        if !self.holding {
            debug!(source = %self.source, owner = %self.owner, "outbox lease taken");
        }
        self.holding = true;
        let limit = i64::try_from(options.batch).unwrap_or(i64::MAX);
        let rows = DB::fetch(&self.pool, &self.source, limit).await?;
        if rows.is_empty() {
            return Ok(Round::Empty);
        }
        let full = rows.len() == options.batch;
        let fates = self.publish(rows).await;

        // The confirmed prefix is marked sent; the first other fate decides the rest.
        let mut sent = Vec::new();
        let mut lags = Vec::new();
        let now = Timestamp::now();
        let mut rest = fates.into_iter();
        let mut stopped = None;
        for (seq, fate) in rest.by_ref() {
            match fate {
                Fate::Confirmed(time) => {
                    sent.push(seq);
                    let lag = now.unix_nanos() - time.unix_nanos();
                    lags.push(Duration::from_nanos(u64::try_from(lag).unwrap_or(0)));
                }
                other => {
                    stopped = Some((seq, other));
                    break;
                }
            }
        }
        if !sent.is_empty() {
            DB::mark_sent(&self.pool, &sent, None).await?;
            self.relayed.fetch_add(sent.len() as u64, Ordering::Relaxed);
            telemetry::relayed(&self.source, sent.len(), lags.into_iter());
        }
        match stopped {
            None => Ok(if full { Round::Full } else { Round::Drained }),
            Some((seq, Fate::Poison(reason, detail))) => {
                error!(source = %self.source, seq, reason, %detail, "outbox row given up");
                DB::mark_sent(&self.pool, &[seq], Some(&format!("{reason}: {detail}"))).await?;
                telemetry::given_up(&self.source, reason);
                Ok(Round::Full)
            }
            Some((_, Fate::Failed(reason))) => Err(RoundError::Failed(reason)),
            Some((_, Fate::Closed)) => Err(RoundError::Closed),
            Some((_, Fate::Confirmed(_))) => Ok(Round::Full),
        }
    }

    /// Publishes the rows in order, pipelined, and awaits their confirms: each row's fate,
    /// in order; rows after the first that could not be published are not tried.
    async fn publish(&self, rows: Vec<StoredRow>) -> Vec<(i64, Fate)> {
        let deadline = self.options.publish_deadline;
        let mut pending = Vec::with_capacity(rows.len());
        let mut last = None;
        for row in rows {
            let seq = row.seq;
            let prepared = match row.columns.into_message() {
                Ok(message) => match Prepared::from_message(message) {
                    Ok(prepared) => prepared,
                    Err(e) => {
                        last = Some((seq, Fate::Poison("undecodable", e.to_string())));
                        break;
                    }
                },
                Err(e) => {
                    last = Some((seq, Fate::Poison("corrupt", e.to_string())));
                    break;
                }
            };
            let time = prepared.time();
            match self.bus.publish_prepared(prepared, deadline).await {
                Ok(confirm) => pending.push((seq, time, confirm)),
                Err(e) => {
                    last = Some((seq, fate_of(&e)));
                    break;
                }
            }
        }
        let mut fates = Vec::with_capacity(pending.len() + 1);
        for (seq, time, confirm) in pending {
            let fate = match confirm.await {
                Ok(_) => Fate::Confirmed(time),
                Err(e) => fate_of(&e),
            };
            fates.push((seq, fate));
        }
        fates.extend(last);
        fates
    }
}

/// What a bus's refusal means for a row: a message no broker will take is given up; a
/// closed bus ends the relay's source; anything else is tried again.
fn fate_of(error: &mesh::Error) -> Fate {
    match error.kind() {
        mesh::ErrorKind::Closed => Fate::Closed,
        mesh::ErrorKind::ForeignKey { .. } => Fate::Poison("foreign-key", error.to_string()),
        mesh::ErrorKind::InvalidKey | mesh::ErrorKind::Decode => {
            Fate::Poison("undecodable", error.to_string())
        }
        mesh::ErrorKind::Transport(
            TransportErrorKind::TooLarge { .. } | TransportErrorKind::HeadersTooLarge { .. },
        ) => Fate::Poison("too-large", error.to_string()),
        mesh::ErrorKind::Transport(TransportErrorKind::Closed) => Fate::Closed,
        _ => Fate::Failed(error_chain(error)),
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}
