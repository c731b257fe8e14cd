//! The emit spool: the SDK's [`EmitSpool`] on a SQLite file, so that emits made while the
//! broker is unreachable survive a crash or a restart of the process and are published
//! after it, with their ids.
//!
//! # Design
//!
//! The spool is an outbox on a SQLite file of its own, written in autocommit rather than in
//! the caller's transaction: the same table (`mesh_outbox`), the same rows, and the same
//! [`Relay`](crate::Relay), which publishes them through the bus with confirms, in order,
//! and marks a row sent only after its confirm.
//!
//! - **Keep.** [`EmitSpool::keep`] turns the prepared event into a row, reserves its size
//!   against the bound (a typed [`mesh::ErrorKind::SpoolFull`] when it would exceed it), and
//!   hands it to the one **writer** task, which commits every row waiting for it in one
//!   transaction (group commit: one `fsync` for all the emits that arrived meanwhile) and
//!   only then answers each emit. The file is in WAL mode with `synchronous = FULL`, so a
//!   committed row survives a crash of the process and of the machine. A failed commit
//!   writes nothing, and its emits fail with [`mesh::ErrorKind::Spool`].
//! - **Bound.** The spool counts the bytes of its unsent rows (routing key, headers, body,
//!   and 128 bytes for the rest), read from the file when it opens, raised by each keep and
//!   lowered by the relay as it marks rows sent; a keep that would pass the bound fails,
//!   whole, before anything is written.
//! - **Relay.** Started when the bus starts ([`EmitSpool::start`]), woken by each commit, and
//!   named `spool` in the lease table: a spool file serves one bus, so the process that opens
//!   it after a crash takes the lease over at once instead of waiting for its expiry.
//! - **Shutdown.** [`EmitSpool::drain`] (from `Bus::drain`) waits until nothing is left or
//!   the deadline passes, then stops the relay (its round finished, its confirms marked);
//!   [`EmitSpool::stop`] (from `Bus::close`) stops it at once. The relay holds the bus and the
//!   bus the spool: both end the cycle.
//!
//! One bus at a time, of one identity, uses a spool file: rows of another source stay in it
//! unsent (and counted) until a bus of that source opens it. One `Spool` at a time has the
//! file open: [`Spool::open`] takes an exclusive lock on `<file>.lock` (an advisory
//! `flock` on Unix, a `LockFileEx` lock on Windows, held by the open file and so released
//! by the kernel when the process dies, however it dies) and refuses with
//! [`ErrorKind::InUse`](crate::ErrorKind::InUse) while another holds it, in this process
//! or another. Two relays on one file would publish its events twice.

use mesh_core::text::EscapedDisplay;
use std::fmt;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use mesh::{Bus, EmitSpool, Prepared, SpoolFuture};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::Sqlite;
use tokio::sync::{mpsc, oneshot, Notify};
use tracing::{debug, warn};

use crate::error::Error;
use crate::pending::Pending;
use crate::relay::{self, Hooks, Relay, RelayOptions};
use crate::row::{source_of, MessageColumns};
use crate::sql::statements::sqlite_pending_bytes;
use crate::sql::{Counts, NewRow, Sql};
use crate::telemetry;

/// Rows the writer commits in one transaction at most.
const MAX_GROUP: usize = 1000;

/// The spool relay's name in the lease table (see the module's design).
const OWNER: &str = "spool";

/// How a spool runs. `Default` + consuming setters.
#[derive(Debug, Clone)]
pub struct SpoolOptions {
    max_bytes: u64,
    relay: RelayOptions,
}

impl Default for SpoolOptions {
    /// A bound of 64 MiB, and the relay's defaults ([`RelayOptions::default`]) under the
    /// owner `spool`, but a poll every second: the spool wakes its relay on each commit.
    fn default() -> Self {
        SpoolOptions {
            max_bytes: 64 * 1024 * 1024,
            relay: RelayOptions::default().poll_interval(Duration::from_secs(1)),
        }
    }
}

impl SpoolOptions {
    /// The bound on the unsent events the spool holds, in bytes (default 64 MiB): an event
    /// counts its routing key, headers and body, plus 128 bytes. A keep that would pass it
    /// fails with [`mesh::ErrorKind::SpoolFull`].
    pub fn max_bytes(mut self, bytes: u64) -> Self {
        self.max_bytes = bytes;
        self
    }

    /// How the spool's relay runs (default [`RelayOptions::default`] with a poll every
    /// second). The spool wakes it on each commit, so its poll interval only bounds the
    /// delay after a failed round; its owner, unless set, is `spool`, which lets a
    /// restarted process take the lease over at once.
    pub fn relay(mut self, relay: RelayOptions) -> Self {
        self.relay = relay;
        self
    }
}

/// A row for the writer, and where its outcome goes.
struct Keep {
    row: NewRow,
    done: oneshot::Sender<Result<(), Arc<sqlx::Error>>>,
}

/// The spool's relay, as far as the bus's life went.
#[derive(Debug)]
enum RelayState {
    Idle,
    Starting,
    Running(Relay),
    Ended,
}

/// An emit spool on a SQLite file: give it to a bus with [`mesh::BusBuilder::spool`], and
/// the bus's emits resolve once the event is in the file (`fsync`ed), to be published
/// through the bus with confirms, after a crash or a restart if need be, with their ids.
/// The design is in the module's source and in the project's `ARCHITECTURE.md`.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use mesh_outbox::{Spool, SpoolOptions};
///
/// let spool = Spool::open("orders.spool", SpoolOptions::default().max_bytes(16 << 20)).await?;
/// let transport = std::sync::Arc::new(mesh::MemoryBroker::new().transport());
/// let bus = mesh::Bus::builder()
///     .node("n1")
///     .module("shop")
///     .spool(spool.clone())
///     .start(transport)
///     .await?;
/// // Resolves once kept in the file, whether the broker is reachable or not.
/// bus.emit_outgoing(mesh::Outgoing::json("order.placed", &42)?).await?;
/// bus.drain().await?; // publishes what it can within the emit deadline
/// # Ok(()) }
/// ```
///
/// Cheap to clone: every clone is the same spool. A spool serves one bus, once: after that
/// bus's `drain` or `close`, open the file again for another.
#[derive(Clone)]
pub struct Spool {
    shared: Arc<Shared>,
}

struct Shared {
    path: PathBuf,
    pool: SqlitePool,
    pending: Arc<Pending>,
    committed: Arc<Notify>,
    writer: mpsc::UnboundedSender<Keep>,
    relay_options: RelayOptions,
    relay: Mutex<RelayState>,
    /// `<file>.lock`, locked as long as this spool lives.
    _lock: File,
}

impl fmt::Debug for Spool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Spool")
            .field("path", &self.shared.path)
            .field("pending_bytes", &self.shared.pending.bytes())
            .field("limit_bytes", &self.shared.pending.limit())
            .finish_non_exhaustive()
    }
}

impl Spool {
    /// Opens (or creates) the spool file at `path`: WAL, `synchronous = FULL`, the outbox's
    /// tables, and the count of the bytes it holds unsent. Its relay starts with the bus it
    /// is given to; what the file holds from before is published then, with its ids.
    ///
    /// The spool keeps `<path>.lock` locked until it is dropped: while another spool, in
    /// this process or another, has the file open, this fails with
    /// [`ErrorKind::InUse`](crate::ErrorKind::InUse) and touches nothing.
    pub async fn open(path: impl AsRef<Path>, options: SpoolOptions) -> Result<Spool, Error> {
        let path = path.as_ref().to_owned();
        if options.max_bytes == 0 {
            return Err(Error::options("a spool's bound must be at least 1 byte"));
        }
        let mut relay_options = options.relay;
        relay::check(&relay_options)?;
        if relay_options.owner.is_none() {
            relay_options.owner = Some(OWNER.to_owned());
        }
        let lock = lock(&path)?;
        let connect = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(30));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(connect)
            .await
            .map_err(|e| Error::database("opening the spool file", e))?;
        Sqlite::install(&pool).await?;
        let bytes: i64 = sqlx::query_scalar(&sqlite_pending_bytes())
            .fetch_one(&pool)
            .await
            .map_err(|e| Error::database("counting the spool's pending bytes", e))?;
        let bytes = u64::try_from(bytes).unwrap_or(0);
        telemetry::spool_pending(bytes);
        let pending = Arc::new(Pending::new(bytes, options.max_bytes));
        let committed = Arc::new(Notify::new());
        let (writer, rows) = mpsc::unbounded_channel();
        tokio::spawn(write(pool.clone(), rows, Arc::clone(&committed)));
        debug!(path = %EscapedDisplay(path.display()), pending_bytes = bytes, "spool opened");
        Ok(Spool {
            shared: Arc::new(Shared {
                path,
                pool,
                pending,
                committed,
                writer,
                relay_options,
                relay: Mutex::new(RelayState::Idle),
                _lock: lock,
            }),
        })
    }

    /// The bytes of the unsent events it holds, as counted against its bound.
    pub fn pending_bytes(&self) -> u64 {
        self.shared.pending.bytes()
    }

    /// Its bound, in bytes.
    pub fn limit_bytes(&self) -> u64 {
        self.shared.pending.limit()
    }

    /// The file's outbox table now: unsent rows, sent rows kept until the cleanup.
    pub async fn counts(&self) -> Result<Counts, Error> {
        Sqlite::counts(&self.shared.pool)
            .await
            .map_err(|e| Error::database("counting spool rows", e))
    }

    fn relay(&self) -> MutexGuard<'_, RelayState> {
        // The state is a plain value: a panic elsewhere leaves it usable.
        self.shared.relay.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the running relay out, leaving the spool ended.
    fn take_relay(&self) -> Option<Relay> {
        match std::mem::replace(&mut *self.relay(), RelayState::Ended) {
            RelayState::Running(relay) => Some(relay),
            _ => None,
        }
    }

    async fn keep_row(&self, event: Prepared) -> Result<(), mesh::Error> {
        let message = event.message();
        // The source is the key's `<origin>.<owner>`, as `source_of` gives the relay's bus
        // (a prepared event's key is its bus's own).
        let key = mesh_core::RoutingKey::parse(&message.routing_key)
            .map_err(|_| mesh::Error::spool("the event's routing key is not a contract key"))?;
        let row = NewRow {
            source: format!("{}.{}", key.origin().as_str(), key.name()),
            event_id: event.id().to_string(),
            columns: MessageColumns::from_message(message),
        };
        let size = row.columns.stored_size();
        let pending = &self.shared.pending;
        if !pending.reserve(size) {
            telemetry::spool_full();
            return Err(mesh::Error::spool_full(pending.limit()));
        }
        let (done, outcome) = oneshot::channel();
        if self.shared.writer.send(Keep { row, done }).is_err() {
            pending.release(size);
            return Err(mesh::Error::spool("the spool's writer has stopped"));
        }
        match outcome.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                pending.release(size);
                Err(mesh::Error::spool(Error::shared_database(
                    "writing to the spool file",
                    e,
                )))
            }
            // The writer ended without answering (its runtime shut down): the row may be
            // in the file, so it stays counted.
            Err(_) => Err(mesh::Error::spool("the spool's writer has stopped")),
        }
    }
}

impl EmitSpool for Spool {
    fn keep(&self, event: Prepared) -> SpoolFuture<'_, Result<(), mesh::Error>> {
        Box::pin(self.keep_row(event))
    }

    fn start(&self, bus: Bus) -> SpoolFuture<'_, Result<(), mesh::Error>> {
        Box::pin(async move {
            {
                let mut state = self.relay();
                if !matches!(*state, RelayState::Idle) {
                    return Err(mesh::Error::spool(Error::options(
                        "a spool serves one bus, once",
                    )));
                }
                *state = RelayState::Starting;
            }
            let source = source_of(&bus);
            let foreign: Result<i64, _> = sqlx::query_scalar(
                "SELECT count(*) FROM mesh_outbox WHERE sent_at IS NULL AND source <> ?",
            )
            .bind(&source)
            .fetch_one(&self.shared.pool)
            .await;
            if let Ok(foreign @ 1..) = foreign {
                warn!(
                    path = %EscapedDisplay(self.shared.path.display()),
                    rows = foreign,
                    source = %EscapedDisplay(&source),
                    "the spool holds unsent events of another source; they stay in it"
                );
            }
            let hooks = Hooks {
                pending: Some(Arc::clone(&self.shared.pending)),
                committed: Some(Arc::clone(&self.shared.committed)),
            };
            let started = relay::start(
                self.shared.pool.clone(),
                vec![bus],
                self.shared.relay_options.clone(),
                hooks,
            )
            .await;
            let mut state = self.relay();
            match started {
                Ok(relay) => {
                    *state = RelayState::Running(relay);
                    Ok(())
                }
                Err(e) => {
                    *state = RelayState::Ended;
                    Err(mesh::Error::spool(e))
                }
            }
        })
    }

    fn drain(&self, deadline: Option<Duration>) -> SpoolFuture<'_, ()> {
        Box::pin(async move {
            let emptied = self.shared.pending.emptied();
            let left = match deadline {
                Some(deadline) => tokio::time::timeout(deadline, emptied).await.is_err(),
                None => {
                    emptied.await;
                    false
                }
            };
            if left {
                warn!(
                    path = %EscapedDisplay(self.shared.path.display()),
                    pending_bytes = self.pending_bytes(),
                    "spool: unsent events remain after the emit deadline; kept for the next start"
                );
            }
            if let Some(relay) = self.take_relay() {
                relay.stop().await;
            }
        })
    }

    fn stop(&self) -> SpoolFuture<'_, ()> {
        // Dropped, the relay is cancelled without waiting for its round.
        drop(self.take_relay());
        Box::pin(std::future::ready(()))
    }
}

/// Locks `<path>.lock` for this spool: a file of its own, so the lock never meets SQLite's
/// locks on the database file.
fn lock(path: &Path) -> Result<File, Error> {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    let lock_path = PathBuf::from(name);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(|e| {
            Error::io(
                format!("opening the spool's lock file {}", lock_path.display()),
                e,
            )
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(TryLockError::WouldBlock) => Err(Error::in_use(format!(
            "the spool file {} is open in another spool (this process or another): \
             one process at a time may spool into a file",
            path.display()
        ))),
        Err(TryLockError::Error(e)) => Err(Error::io(
            format!("locking the spool's lock file {}", lock_path.display()),
            e,
        )),
    }
}

/// The writer: commits the rows waiting for it in one transaction, then answers each.
async fn write(pool: SqlitePool, mut keeps: mpsc::UnboundedReceiver<Keep>, committed: Arc<Notify>) {
    let mut rows = Vec::with_capacity(MAX_GROUP);
    let mut answers = Vec::with_capacity(MAX_GROUP);
    while let Some(first) = keeps.recv().await {
        let mut next = Some(first);
        while let Some(keep) = next {
            rows.push(keep.row);
            answers.push(keep.done);
            next = if rows.len() < MAX_GROUP {
                keeps.try_recv().ok()
            } else {
                None
            };
        }
        let outcome = commit(&pool, &rows).await.map_err(Arc::new);
        rows.clear();
        if outcome.is_ok() {
            committed.notify_one();
        }
        for answer in answers.drain(..) {
            // An emit that gave up waiting loses only the answer.
            let _ = answer.send(outcome.clone());
        }
    }
}

async fn commit(pool: &SqlitePool, rows: &[NewRow]) -> Result<(), sqlx::Error> {
    let mut tx = pool.begin().await?;
    Sqlite::insert(&mut *tx, rows).await?;
    tx.commit().await
}
