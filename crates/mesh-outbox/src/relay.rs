//! The relay: publishes the outbox's committed rows through the buses of their sources, with
//! confirms, in order per source, and marks them sent only after the confirm.
//!
//! # Design
//!
//! One task per source (a bus given to the relay; the source is the bus's `<origin>.<owner>`), one
//! that turns a spool's commits into wake-ups (a spool's relay only), and one that cleans up
//! and records the table's size. A source's task:
//!
//! 1. holds the source's **lease**, a row `(source, owner, expires_at)`: one relay at a time
//!    publishes a source's rows, whatever number of relays share the database. It takes it
//!    before its first read and renews it only once half the margin between the lease and
//!    the publish deadline passed (checked before every publish), so a row is published only
//!    while the lease outlasts its deadline. A relay that cannot take it leaves the source
//!    to the one holding it, and looks again after a second. Without the lease, it looks
//!    for unsent rows with a read-only query and takes the lease only when there are some,
//!    so an idle relay writes nothing;
//! 2. reads the oldest `batch` unsent rows of the source by `seq`, **skipping the rows in
//!    flight** by their seqs (not by a high-water mark: see below), and publishes them in
//!    that order, pipelined (the transport keeps the order on its one confirm channel);
//! 3. reads and publishes the next batch while the previous one's confirms are awaited,
//!    with at most two batches awaiting confirms (`MAX_BATCHES`); with nothing to read, it waits
//!    for the poll interval (or a spool's commit);
//! 4. takes the confirms in publish order and hands the confirmed **prefix** to a marking
//!    task of its own, which marks rows sent in that order, one statement for all the rows
//!    queued meanwhile, so a read or a publish never waits for a mark's commit. A row
//!    confirmed after one that failed is never marked: it stays unsent and is published
//!    again after the failed one (a duplicate, which consumers deduplicate by event id,
//!    rather than a reordering);
//! 5. on a failed publish (refused, timed out, nacked), a failed mark or a lost lease,
//!    stops: forgets the rows still unconfirmed (they are read and published again, at
//!    least once), lets the marks already handed out finish, gives the lease up and tries
//!    again after the retry delay. With nothing in flight and nothing to read for a second
//!    (`LEASE_IDLE`, or the poll interval when longer) it lets the lease go, so another
//!    relay may take it without waiting for its expiry.
//!
//! Why a poll and not PostgreSQL's `LISTEN`/`NOTIFY`: a transaction that notifies takes,
//! at its commit, one lock for the whole database's notification queue and holds it
//! through the commit's WAL flush, so the commits of notifying transactions run one after
//! another and group commit is lost. Notified from a trigger, every transaction that wrote
//! to the outbox did; measured here with 32 clients inserting one row per transaction,
//! PostgreSQL 15 took about 600 such commits a second (p50 near 1 s once behind), and
//! 1,000/s at a p50 of 2 ms without the notification. The poll costs one indexed
//! `EXISTS` per source and interval while idle (an empty partial index), and at most one
//! interval of lag.
//!
//! The bookkeeping of the rows in flight (which to skip, which to mark, what a failure
//! forgets) is an I/O-free state machine, `Window` (`window.rs`).
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

use mesh_core::text::EscapedDisplay;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::StreamExt;
use mesh::{Bus, Prepared, Timestamp, TransportErrorKind};
use sqlx::Pool;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use crate::error::Error;
use crate::pending::Pending;
use crate::row::source_of;
use crate::sql::Backend;
use crate::telemetry;
use crate::window::{Batch, Mark, Window};

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
    pub(crate) owner: Option<String>,
}

impl Default for RelayOptions {
    /// Batches of 500, a poll every 10 ms, leases of 60 s, a publish deadline of 30 s, a
    /// retry after 1 s, a cleanup every 60 s of rows sent over an hour ago.
    fn default() -> Self {
        RelayOptions {
            batch: 500,
            poll_interval: Duration::from_millis(10),
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
    /// Rows read and published at once (default 500).
    pub fn batch(mut self, batch: usize) -> Self {
        self.batch = batch;
        self
    }

    /// How often a source with nothing in flight looks for committed rows (default 10 ms):
    /// the relay's lag is at most this on top of a round, on both backends. Idle, each look
    /// is one read-only indexed query per source (100 a second at the default), and writes
    /// nothing; a relay whose lag may be longer can look less often. No commit wakes the
    /// relay (see the module's design: a notifying commit serialises the database's
    /// commits), except a spool's, in its own process.
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

    /// How long a source waits after a failure (default 1 s).
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

    /// Stops: each source reads nothing more, awaits the confirms of the rows in flight,
    /// marks the confirmed ones, gives its lease up, and the tasks end.
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

/// What a spool adds to a relay: the count of its pending bytes, lowered as rows are marked,
/// and a wake-up on each of its commits.
#[derive(Default)]
pub(crate) struct Hooks {
    pub(crate) pending: Option<Arc<Pending>>,
    pub(crate) committed: Option<Arc<Notify>>,
}

/// Refuses options a relay cannot work with.
pub(crate) fn check(options: &RelayOptions) -> Result<(), Error> {
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
    Ok(())
}

pub(crate) async fn start<DB: Backend>(
    pool: Pool<DB>,
    buses: Vec<Bus>,
    options: RelayOptions,
    hooks: Hooks,
) -> Result<Relay, Error> {
    check(&options)?;
    let owner: Arc<str> = options
        .owner
        .clone()
        .unwrap_or_else(|| format!("relay-{}", uuid::Uuid::new_v4()))
        .into();
    let mut by_source: HashMap<String, Bus> = HashMap::new();
    for bus in buses {
        let source = source_of(&bus);
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
    if let Some(committed) = hooks.committed {
        let wakes = Arc::clone(&wakes);
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = committed.notified() => wakes.values().for_each(|w| w.notify_one()),
                    () = stop.cancelled() => break,
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
            pending: hooks.pending.clone(),
            renew_at: None,
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
            Err(e) => warn!(error = %EscapedDisplay(&e), "counting outbox rows failed"),
        }
        tokio::select! {
            () = tokio::time::sleep(options.cleanup_interval) => {}
            () = stop.cancelled() => return,
        }
    }
}

/// How long a source with nothing in flight and nothing to read keeps its lease (or the
/// poll interval, when longer): then it lets it go, so another relay may take it.
const LEASE_IDLE: Duration = Duration::from_secs(1);

/// How long a source whose lease another relay holds waits before it tries again (or the
/// poll interval, when longer).
const TAKEN_WAIT: Duration = Duration::from_secs(1);

/// Batches a source publishes before the confirms of the first are in: the next batch is
/// read and published while the previous one's confirms are awaited.
const MAX_BATCHES: usize = 2;

/// Why a source's session (its work while holding the lease) ended.
enum Stop {
    /// The relay was stopped: the confirms are awaited, the confirmed rows marked.
    Stopped,
    /// Another relay holds the source's lease.
    Taken,
    /// The bus is closed: the source's task ends.
    Closed,
    /// The database or the broker failed: tried again after the retry delay, lease given up.
    Failed(String),
}

impl From<sqlx::Error> for Stop {
    fn from(error: sqlx::Error) -> Self {
        Stop::Failed(format!("database: {error}"))
    }
}

/// What a read of the source's rows found.
enum Read {
    /// No unsent row outside the window.
    Empty,
    /// Rows, published; `more` when there may be others to read at once.
    Rows { more: bool },
}

/// What a bus's refusal means for a row.
enum Fate {
    /// Never to be published: given up with this reason.
    Poison(&'static str, String),
    /// Failed now; published again later.
    Failed(String),
    Closed,
}

/// A row's confirm: its seq, its `x-time`, and the broker's answer.
type Confirming = BoxFuture<'static, (i64, Timestamp, Result<(), mesh::Error>)>;

/// A committed mark, as the marking task reports it.
struct Marked {
    seqs: Vec<i64>,
    given_up: bool,
}

/// The task that marks a source's rows, so reading and publishing never wait for a mark's
/// commit. It marks in the order it is given, all the sent rows queued meanwhile in one
/// statement, and stops at the first failure: a mark after a failed one would let a later
/// row be sent while an earlier one is published again after it.
struct Marker {
    jobs: mpsc::UnboundedSender<Mark>,
    done: mpsc::UnboundedReceiver<Result<Marked, String>>,
}

impl Marker {
    fn spawn<DB: Backend>(pool: Pool<DB>) -> Marker {
        let (jobs, queue) = mpsc::unbounded_channel();
        let (report, done) = mpsc::unbounded_channel();
        tokio::spawn(mark_loop(pool, queue, report));
        Marker { jobs, done }
    }
}

async fn mark_loop<DB: Backend>(
    pool: Pool<DB>,
    mut queue: mpsc::UnboundedReceiver<Mark>,
    report: mpsc::UnboundedSender<Result<Marked, String>>,
) {
    let mut held: Option<Mark> = None;
    loop {
        let mut mark = match held.take() {
            Some(mark) => mark,
            None => match queue.recv().await {
                Some(mark) => mark,
                // The source's task is done with this session.
                None => return,
            },
        };
        if mark.error.is_none() {
            while let Ok(next) = queue.try_recv() {
                if next.error.is_none() {
                    mark.seqs.extend(next.seqs);
                } else {
                    held = Some(next);
                    break;
                }
            }
        }
        let result = DB::mark_sent(&pool, &mark.seqs, mark.error.as_deref()).await;
        let failed = result.is_err();
        let _ = report.send(
            result
                .map(|()| Marked {
                    given_up: mark.error.is_some(),
                    seqs: mark.seqs,
                })
                .map_err(|e| format!("database: marking outbox rows sent: {e}")),
        );
        if failed {
            return;
        }
    }
}

/// A source's work while it holds the lease: its rows in flight, their confirms in publish
/// order, and the marking task (started at the first mark).
struct Session {
    window: Window<u64>,
    confirms: FuturesOrdered<Confirming>,
    marker: Option<Marker>,
    lag: metrics::Histogram,
}

/// The next report of a session's marking task (never, without one).
async fn next_marked(marker: &mut Option<Marker>) -> Option<Result<Marked, String>> {
    match marker {
        Some(marker) => marker.done.recv().await,
        None => std::future::pending().await,
    }
}

struct SourceWorker<DB: Backend> {
    pool: Pool<DB>,
    source: String,
    bus: Bus,
    wake: Arc<Notify>,
    options: Arc<RelayOptions>,
    owner: Arc<str>,
    relayed: Arc<AtomicU64>,
    /// A spool's pending bytes, lowered by the size of each row marked.
    pending: Option<Arc<Pending>>,
    /// When this relay, holding the source's lease as far as it knows, renews it: `None`
    /// when it does not hold it.
    renew_at: Option<Instant>,
}

impl<DB: Backend> SourceWorker<DB> {
    async fn run(mut self, stop: CancellationToken) {
        loop {
            if stop.is_cancelled() {
                break;
            }
            match self.session(&stop).await {
                Stop::Stopped => break,
                Stop::Closed => {
                    debug!(source = %self.source, "the relay's bus is closed");
                    break;
                }
                Stop::Taken => {
                    tokio::select! {
                        () = tokio::time::sleep(self.options.poll_interval.max(TAKEN_WAIT)) => {}
                        () = stop.cancelled() => break,
                    }
                }
                Stop::Failed(reason) => {
                    telemetry::relay_failed(&self.source);
                    warn!(source = %self.source, reason = %EscapedDisplay(&reason), "outbox relay failed; trying again");
                    self.release().await;
                    tokio::select! {
                        () = tokio::time::sleep(self.options.retry_delay) => {}
                        () = stop.cancelled() => break,
                    }
                }
            }
        }
        self.release().await;
    }

    async fn release(&mut self) {
        if self.renew_at.take().is_none() {
            return;
        }
        if let Err(e) = DB::release_lease(&self.pool, &self.source, &self.owner).await {
            // It expires by itself.
            warn!(source = %self.source, error = %EscapedDisplay(&e), "giving an outbox lease up failed");
        }
    }

    /// Takes or renews the lease when it must: `false` when another relay holds it.
    ///
    /// A lease taken at `t` lasts until `t + lease_ttl` on the database's clock (which
    /// starts later than this one's `t`). It is renewed once half the margin between the
    /// lease and the publish deadline passed, and checked before every publish, so a row is
    /// only published while the lease outlasts its deadline by half that margin at least:
    /// its confirm (or its timeout) comes while the lease holds, without renewing it on
    /// every read.
    async fn hold_lease(&mut self) -> Result<bool, Stop> {
        let now = Instant::now();
        if self.renew_at.is_some_and(|at| now < at) {
            return Ok(true);
        }
        let ttl = self.options.lease_ttl;
        if !DB::acquire_lease(&self.pool, &self.source, &self.owner, ttl).await? {
            self.renew_at = None;
            return Ok(false);
        }
        if self.renew_at.is_none() {
            debug!(source = %self.source, owner = %self.owner, "outbox lease taken");
        }
        let margin = ttl.saturating_sub(self.options.publish_deadline.unwrap_or(ttl / 2));
        self.renew_at = Some(now + margin / 2);
        Ok(true)
    }

    /// Publishes the source's rows until the relay stops, the bus closes, the lease is lost
    /// or something fails; then forgets the rows still unconfirmed (after awaiting them,
    /// when stopped) and waits for the marks of the confirmed ones.
    async fn session(&mut self, stop: &CancellationToken) -> Stop {
        let mut session = Session {
            window: Window::new(MAX_BATCHES),
            confirms: FuturesOrdered::new(),
            marker: None,
            lag: telemetry::lag(&self.source),
        };
        let ended = self.pump(&mut session, stop).await;
        self.settle(&mut session, ended).await
    }

    /// The session's loop: reads and publishes a batch whenever there may be rows and fewer
    /// than [`MAX_BATCHES`] batches await confirms, and meanwhile takes the confirms in
    /// publish order and hands the confirmed prefix to the marking task.
    async fn pump(&mut self, s: &mut Session, stop: &CancellationToken) -> Stop {
        let interval = self.options.poll_interval;
        let lease_idle = interval.max(LEASE_IDLE);
        let mut look = true;
        let mut empty_since: Option<Instant> = None;
        let poll = tokio::time::sleep(interval);
        tokio::pin!(poll);
        loop {
            if look && s.window.can_open() {
                look = false;
                poll.as_mut().reset(Instant::now() + interval);
                match self.read(s).await {
                    Ok(Read::Rows { more }) => {
                        empty_since = None;
                        look = more;
                    }
                    Ok(Read::Empty) => {
                        // Nothing in flight and nothing to read for a while: the lease
                        // goes, so another relay need not wait for its expiry.
                        if s.window.is_empty() {
                            let since = *empty_since.get_or_insert_with(Instant::now);
                            if since.elapsed() >= lease_idle {
                                self.release().await;
                                empty_since = None;
                            }
                        }
                    }
                    Err(stop) => return stop,
                }
            }
            self.send_marks(s);
            tokio::select! {
                biased;
                () = stop.cancelled() => return Stop::Stopped,
                Some((seq, time, result)) = s.confirms.next() => {
                    if let Err(stop) = self.confirmed(s, seq, time, result) {
                        return stop;
                    }
                }
                Some(done) = next_marked(&mut s.marker) => {
                    if let Err(stop) = self.marked(s, done) {
                        return stop;
                    }
                }
                () = self.wake.notified() => look = true,
                () = &mut poll => {
                    look = true;
                    poll.as_mut().reset(Instant::now() + interval);
                }
            }
        }
    }

    /// Ends a session: awaits the confirms when stopped, forgets the unconfirmed rows
    /// otherwise (they are read and published again: at-least-once), lets the marks of the
    /// confirmed ones finish, and says why it ended.
    async fn settle(&mut self, s: &mut Session, mut ended: Stop) -> Stop {
        if matches!(ended, Stop::Stopped) {
            while let Some((seq, time, result)) = s.confirms.next().await {
                if let Err(stop) = self.confirmed(s, seq, time, result) {
                    ended = stop;
                    break;
                }
            }
        }
        s.confirms = FuturesOrdered::new();
        let forgotten = s.window.fail();
        if !forgotten.is_empty() {
            debug!(source = %self.source, rows = forgotten.len(), "unconfirmed outbox rows left unsent");
        }
        self.send_marks(s);
        if let Some(Marker { jobs, mut done }) = s.marker.take() {
            drop(jobs);
            while let Some(report) = done.recv().await {
                if let Err(stop) = self.marked(s, report) {
                    if !matches!(ended, Stop::Failed(_)) {
                        ended = stop;
                    }
                }
            }
        }
        ended
    }

    /// Hands the marks the window has ready to the marking task.
    fn send_marks(&self, s: &mut Session) {
        for mark in s.window.take_marks() {
            let marker = s
                .marker
                .get_or_insert_with(|| Marker::spawn(self.pool.clone()));
            // A marking task that stopped has reported why; the session ends on it.
            let _ = marker.jobs.send(mark);
        }
    }

    /// Reads the oldest unsent rows outside the window and publishes them in order,
    /// pipelined (the transport keeps the order on its one confirm channel); their confirms
    /// are awaited by the session's loop.
    async fn read(&mut self, s: &mut Session) -> Result<Read, Stop> {
        // A read-only look first: an idle relay writes nothing.
        // Due by the bus's clock when it is not the system's (the test harness's, which a
        // test moves on), by the backend's otherwise.
        let now = (!self.bus.on_system_clock()).then(|| self.bus.now());
        let look = DB::look(&self.pool, &self.source, now).await?;
        if self.renew_at.is_none() && !look.unsent && !look.due {
            return Ok(Read::Empty);
        }
        if !self.hold_lease().await? {
            return Err(Stop::Taken);
        }
        // Due scheduled rows join the outbox's, after the rows already there.
        if look.due {
            let limit = i64::try_from(self.options.batch).unwrap_or(i64::MAX);
            let moved = DB::promote(&self.pool, &self.source, limit, now).await?;
            debug!(source = %self.source, moved, "due scheduled events moved to the outbox");
        }
        let Some(batch) = s.window.open_batch() else {
            return Ok(Read::Rows { more: true });
        };
        let limit = i64::try_from(self.options.batch).unwrap_or(i64::MAX);
        let skip = s.window.in_flight();
        let rows = DB::fetch(&self.pool, &self.source, limit, &skip).await?;
        if rows.is_empty() {
            return Ok(Read::Empty);
        }
        let more = rows.len() == self.options.batch;
        let deadline = self.options.publish_deadline;
        for row in rows {
            if !self.hold_lease().await? {
                return Err(Stop::Taken);
            }
            let seq = row.seq;
            // Only a spool counts its rows' bytes.
            let size = match self.pending {
                Some(_) => row.columns.stored_size(),
                None => 0,
            };
            let prepared = match row.columns.into_message() {
                Ok(message) => match Prepared::from_message(message) {
                    Ok(prepared) => prepared,
                    Err(e) => {
                        self.give_up(s, batch, seq, size, "undecodable", &e.to_string());
                        // The rest of the batch is read again, after this row.
                        return Ok(Read::Rows { more: true });
                    }
                },
                Err(e) => {
                    self.give_up(s, batch, seq, size, "corrupt", &e.to_string());
                    return Ok(Read::Rows { more: true });
                }
            };
            let time = prepared.time();
            match self.bus.publish_prepared(prepared, deadline).await {
                Ok(confirm) => {
                    s.window.published(batch, seq, size);
                    s.confirms.push_back(Box::pin(async move {
                        (seq, time, confirm.await.map(|_| ()))
                    }));
                }
                Err(e) => match fate_of(&e) {
                    Fate::Poison(reason, detail) => {
                        self.give_up(s, batch, seq, size, reason, &detail);
                        return Ok(Read::Rows { more: true });
                    }
                    Fate::Failed(reason) => return Err(Stop::Failed(reason)),
                    Fate::Closed => return Err(Stop::Closed),
                },
            }
        }
        Ok(Read::Rows { more })
    }

    /// A row never to be published: given up in its place, marked with its reason.
    fn give_up(
        &self,
        s: &mut Session,
        batch: Batch,
        seq: i64,
        size: u64,
        reason: &'static str,
        detail: &str,
    ) {
        error!(source = %self.source, seq, reason, detail = %EscapedDisplay(&detail), "outbox row given up");
        telemetry::given_up(&self.source, reason);
        s.window
            .given_up(batch, seq, size, format!("{reason}: {detail}"));
    }

    /// A row's confirm (or refusal), in publish order.
    fn confirmed(
        &self,
        s: &mut Session,
        seq: i64,
        time: Timestamp,
        result: Result<(), mesh::Error>,
    ) -> Result<(), Stop> {
        match result {
            Ok(()) => {
                s.window.confirmed(seq);
                let lag = Timestamp::now().unix_nanos() - time.unix_nanos();
                s.lag
                    .record(Duration::from_nanos(u64::try_from(lag).unwrap_or(0)).as_secs_f64());
                Ok(())
            }
            Err(e) => match fate_of(&e) {
                Fate::Poison(reason, detail) => {
                    error!(source = %self.source, seq, reason, detail = %EscapedDisplay(&detail), "outbox row given up");
                    telemetry::given_up(&self.source, reason);
                    s.window.refused(seq, format!("{reason}: {detail}"));
                    Ok(())
                }
                Fate::Failed(reason) => Err(Stop::Failed(reason)),
                Fate::Closed => Err(Stop::Closed),
            },
        }
    }

    /// A mark committed (its rows leave the window) or failed (every row still in the
    /// window is forgotten, and the session ends).
    fn marked(&self, s: &mut Session, report: Result<Marked, String>) -> Result<(), Stop> {
        match report {
            Ok(marked) => {
                let sizes = s.window.marked(&marked.seqs);
                if let Some(pending) = &self.pending {
                    pending.release(sizes.iter().sum());
                }
                if !marked.given_up {
                    self.relayed
                        .fetch_add(sizes.len() as u64, Ordering::Relaxed);
                    telemetry::relayed(&self.source, sizes.len());
                }
                Ok(())
            }
            Err(reason) => {
                s.window.mark_failed();
                Err(Stop::Failed(reason))
            }
        }
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
