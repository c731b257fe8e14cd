//! The shipper: a background task that holds a `mesh_amqp::PlainLink` and publishes what
//! the layer buffered to `mesh.logs`, without confirms.
//!
//! The buffer is the only place records wait. While the task is connecting, or the broker
//! is slow or blocks the connection (an alarm), the buffer fills and the layer drops; the
//! program never waits. There are no confirms to tell which record reached the broker.
//!
//! **Every record the layer takes ends in exactly one counter**, so that once [`Logs::shutdown`]
//! returned, `logged = published + dropped + lost`:
//!
//! - `dropped`: the layer could not put it in the buffer (full, or the shipper stopped);
//! - `published`: written to the connection;
//! - `lost`: taken from the buffer and never published (its publish failed with the
//!   connection, or the task was stopped in the middle of it: a [`Taken`] record counts
//!   itself lost when it is dropped unpublished), or still in the buffer when the task ended
//!   (`shutdown` timed out while the broker was unreachable, refused the connection or
//!   blocked it): `shutdown` aborts the task, takes the buffer back and counts what is left.
//!
//! The receiving end of the buffer is kept behind a mutex that the task holds for its whole
//! life, so an aborted task hands the buffer back intact rather than dropping it with the
//! records in it.
//!
//! The task never reconnects by itself: the link's owner in mesh-amqp does, on the broker
//! options' reconnect backoff; the task only waits for a publisher on the next connection.

use mesh_core::text::EscapedDisplay;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use mesh_amqp::{AmqpOptions, PlainLink, PlainPublisher};
use mesh_core::Name;
use tokio::sync::{mpsc, Mutex};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::level_filters::LevelFilter;
use tracing::{debug, warn};

use crate::connect;
use crate::error::{LogsError, LogsErrorKind};
use crate::layer::{Counters, LogsLayer};
use crate::record::LogRecord;

/// The default buffer: records waiting to be published, at most.
pub const DEFAULT_CAPACITY: usize = 10_000;

/// What to ship, where, and how much to buffer.
#[derive(Debug, Clone)]
pub struct LogsOptions {
    broker: AmqpOptions,
    node: String,
    source: String,
    capacity: usize,
    level: LevelFilter,
}

impl LogsOptions {
    /// Records of process `source` on node `node` (each one word, as mesh names are) to the
    /// broker at `url` (an `amqp://` URL, as for the transport); buffer
    /// [`DEFAULT_CAPACITY`], level `INFO` and above.
    pub fn new(url: &str, node: &str, source: &str) -> Result<LogsOptions, LogsError> {
        LogsOptions::with_broker(connect::parse(url)?, node, source)
    }

    /// As [`new`](LogsOptions::new), with broker options already parsed.
    pub fn with_broker(
        broker: AmqpOptions,
        node: &str,
        source: &str,
    ) -> Result<LogsOptions, LogsError> {
        for (what, name) in [("node", node), ("source", source)] {
            Name::parse(name).map_err(|e| {
                LogsError::new(
                    LogsErrorKind::InvalidOptions,
                    format!("{what} `{name}` is not a one-word name"),
                )
                .with_source(e)
            })?;
        }
        Ok(LogsOptions {
            broker,
            node: node.to_owned(),
            source: source.to_owned(),
            capacity: DEFAULT_CAPACITY,
            level: LevelFilter::INFO,
        })
    }

    /// Records buffered at most (at least 1); past it records are dropped.
    pub fn capacity(mut self, capacity: usize) -> Self {
        self.capacity = capacity.max(1);
        self
    }

    /// The most verbose level shipped (default `INFO`).
    pub fn level(mut self, level: LevelFilter) -> Self {
        self.level = level;
        self
    }
}

/// How the shipping goes.
///
/// Every record the layer took (`logged`) ends in exactly one of `published`, `dropped` and
/// `lost`; until then it is in the buffer, or the one record being published. So once
/// [`Logs::shutdown`] returned, `logged == published + dropped + lost` and `buffered == 0`,
/// whether the shutdown finished or timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LogsStats {
    /// The buffer's capacity.
    pub capacity: usize,
    /// Records in the buffer now (never above `capacity`).
    pub buffered: usize,
    /// Records the layer took: at or above the level, of a target that is shipped
    /// (`mesh_logs_logged_total`).
    pub logged: u64,
    /// Records dropped because the buffer was full or the shipper had stopped
    /// (`mesh_logs_dropped_total`).
    pub dropped: u64,
    /// Records published: written to the connection; without confirms, the broker may
    /// still have lost them with it (`mesh_logs_published_total`).
    pub published: u64,
    /// Records never published: taken from the buffer and lost with a connection (or with
    /// the task, stopped mid-publish), or left in the buffer when [`Logs::shutdown`] timed
    /// out, whether the shipper was connected or still failing to connect
    /// (`mesh_logs_lost_total`).
    pub lost: u64,
}

/// The running shipper: its layer, its numbers, and its shutdown.
#[derive(Debug, Clone)]
pub struct Logs {
    layer: LogsLayer,
    buffer: mpsc::WeakSender<LogRecord>,
    /// The buffer's receiving end: the task holds it while it runs, `shutdown` takes it
    /// back to count what the task left.
    records: Arc<Mutex<mpsc::Receiver<LogRecord>>>,
    capacity: usize,
    counters: Arc<Counters>,
    stop: CancellationToken,
    /// The task, until a shutdown ended it; held by a shutdown for its whole length, so a
    /// second one waits for the first and returns the same final numbers.
    task: Arc<Mutex<Option<JoinHandle<()>>>>,
}

/// Starts shipping: spawns the publishing task on the current tokio runtime (it connects
/// in the background, so this returns at once, even with the broker down) and returns the
/// handle whose [`layer`](Logs::layer) goes into the subscriber.
///
/// Fails with [`LogsErrorKind::NoRuntime`] outside a tokio runtime.
pub fn start(options: LogsOptions) -> Result<Logs, LogsError> {
    let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
        LogsError::new(LogsErrorKind::NoRuntime, "mesh_logs::start spawns a task").with_source(e)
    })?;
    let (buffer, records) = mpsc::channel(options.capacity);
    let counters = Arc::new(Counters::default());
    let layer = LogsLayer::new(
        buffer.clone(),
        options.node.clone(),
        options.source.clone(),
        options.level,
        Arc::clone(&counters),
    );
    let stop = CancellationToken::new();
    let capacity = options.capacity;
    let records = Arc::new(Mutex::new(records));
    let task = runtime.spawn(ship(
        options,
        Arc::clone(&records),
        Arc::clone(&counters),
        stop.clone(),
    ));
    Ok(Logs {
        layer,
        buffer: buffer.downgrade(),
        records,
        capacity,
        counters,
        stop,
        task: Arc::new(Mutex::new(Some(task))),
    })
}

impl Logs {
    /// The layer to add to the program's subscriber.
    pub fn layer(&self) -> LogsLayer {
        self.layer.clone()
    }

    /// The numbers now.
    pub fn stats(&self) -> LogsStats {
        let free = self
            .buffer
            .upgrade()
            .map_or(self.capacity, |buffer| buffer.capacity());
        LogsStats {
            capacity: self.capacity,
            buffered: self.capacity.saturating_sub(free),
            logged: self.counters.logged.load(Ordering::Relaxed),
            dropped: self.counters.dropped.load(Ordering::Relaxed),
            published: self.counters.published.load(Ordering::Relaxed),
            lost: self.counters.lost.load(Ordering::Relaxed),
        }
    }

    /// Stops shipping: publishes what is buffered (for up to `timeout`), closes the
    /// connection, and returns the final numbers. Records logged afterwards are dropped.
    ///
    /// When `timeout` passes first (the broker is unreachable, refuses the connection or
    /// blocks it), the task is aborted and what it had not published is counted in
    /// [`LogsStats::lost`]: the numbers returned add up
    /// (`logged == published + dropped + lost`) either way. A second call waits for the
    /// first and returns the same numbers.
    ///
    /// # Cancel safety
    ///
    /// Dropped before it returned, the shipper is stopped but its task may still run (or
    /// the buffer hold records not yet counted): call it again to finish.
    pub async fn shutdown(&self, timeout: Duration) -> LogsStats {
        self.stop.cancel();
        let mut task = self.task.lock().await;
        if let Some(handle) = task.as_mut() {
            if tokio::time::timeout(timeout, &mut *handle).await.is_err() {
                handle.abort();
                // Once the handle resolves, the task's future is dropped, and with it the
                // record it was publishing (counted lost) and its hold on the buffer.
                let _ = (&mut *handle).await;
            }
            self.count_left_behind().await;
            *task = None;
        }
        drop(task);
        self.stats()
    }

    /// Closes the buffer (records logged from now on are dropped) and counts what the task
    /// left in it as lost. The task has ended, so the lock is free at once.
    async fn count_left_behind(&self) {
        let mut records = self.records.lock().await;
        records.close();
        let mut left = 0;
        // `recv` rather than `try_recv`: after `close` it returns `None` only once every
        // record a logging thread was putting in at that moment is in and taken.
        while records.recv().await.is_some() {
            left += 1;
        }
        if left > 0 {
            debug!(records = left, "records left unpublished at shutdown");
            self.counters.lose(left);
        }
    }
}

/// The task: open the link (retrying until it is up), then publish until stopped, replacing
/// the publisher whenever the connection is lost (the link's owner reconnects it).
async fn ship(
    options: LogsOptions,
    records: Arc<Mutex<mpsc::Receiver<LogRecord>>>,
    counters: Arc<Counters>,
    stop: CancellationToken,
) {
    // Free: `shutdown` locks it only once this task has ended (or was aborted, perhaps
    // before its first poll, when it never held it).
    let mut records = records.lock_owned().await;
    let broker = connect::named(
        &options.broker,
        &format!("{}.{}.logs", options.node, options.source),
    );
    let opening = PlainLink::open_retrying(&broker, crate::names::LOGS_EXCHANGE);
    let Some(link) = unless_stopped_idle(opening, &mut records, &stop).await else {
        return;
    };
    debug!(exchange = %EscapedDisplay(&link.exchange()), "logs shipper connected");
    loop {
        let Some(publisher) =
            unless_stopped_idle(link.publisher_retrying(), &mut records, &stop).await
        else {
            link.close().await;
            return;
        };
        let ended = publish_until_lost(&publisher, &mut records, &counters, &stop).await;
        if let Ended::Stopped = ended {
            // Everything published so far precedes the close on the wire, so the broker has
            // it when the close is acknowledged.
            publisher.close().await;
            link.close().await;
            return;
        }
        warn!("logs shipper lost its channel or connection; waiting for the next one");
    }
}

/// Runs `future` to its end, unless the shipper is stopped with nothing buffered first
/// (`None`). Stopped with records buffered (logged just before a shutdown, say), it lets
/// `future` finish, since `shutdown` promised to publish them (its timeout bounds the
/// wait), and closes the buffer so that nothing logged later joins them.
async fn unless_stopped_idle<F: Future>(
    future: F,
    records: &mut mpsc::Receiver<LogRecord>,
    stop: &CancellationToken,
) -> Option<F::Output> {
    tokio::pin!(future);
    tokio::select! {
        output = &mut future => Some(output),
        () = stop.cancelled() => {
            records.close();
            if records.is_empty() {
                return None;
            }
            Some(future.await)
        }
    }
}

enum Ended {
    Stopped,
    Lost,
}

async fn publish_until_lost(
    publisher: &PlainPublisher,
    records: &mut mpsc::Receiver<LogRecord>,
    counters: &Counters,
    stop: &CancellationToken,
) -> Ended {
    loop {
        let record = tokio::select! {
            biased;
            record = records.recv() => record,
            () = stop.cancelled() => {
                // Flush: what is buffered now goes out, then the shipper ends.
                records.close();
                records.recv().await
            }
        };
        let Some(record) = record else {
            return Ended::Stopped;
        };
        let taken = Taken::new(counters);
        let body = serde_json::to_vec(&record).unwrap_or_default();
        if let Err(e) = publisher
            .publish(&record.routing_key(), "application/json", body)
            .await
        {
            debug!(error = %EscapedDisplay(&e), "publishing a record failed");
            // `taken` counts it lost as it goes.
            return Ended::Lost;
        }
        taken.published();
    }
}

/// A record out of the buffer, not yet published: counted lost when dropped unpublished,
/// whether its publish failed or the task was aborted in the middle of it.
struct Taken<'a> {
    counters: &'a Counters,
    published: bool,
}

impl<'a> Taken<'a> {
    fn new(counters: &'a Counters) -> Taken<'a> {
        Taken {
            counters,
            published: false,
        }
    }

    fn published(mut self) {
        self.published = true;
        self.counters.published.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(crate::names::PUBLISHED_METRIC).increment(1);
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if !self.published {
            self.counters.lose(1);
        }
    }
}
