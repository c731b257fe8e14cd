//! The shipper: a background task that holds a `mesh_amqp::PlainLink` and publishes what
//! the layer buffered to `mesh.logs`, without confirms.
//!
//! The buffer is the only place records wait. While the task is connecting, or the broker
//! is slow or blocks the connection (an alarm), the buffer fills and the layer drops; the
//! program never waits. A record taken from the buffer when the connection dies is lost
//! (counted in [`LogsStats::lost`]); there are no confirms to tell which reached the broker.
//!
//! The task never reconnects by itself: the link's owner in mesh-amqp does, on the broker
//! options' reconnect backoff; the task only waits for a publisher on the next connection.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mesh_amqp::{AmqpOptions, PlainLink, PlainPublisher};
use mesh_core::Name;
use tokio::sync::mpsc;
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LogsStats {
    /// The buffer's capacity.
    pub capacity: usize,
    /// Records in the buffer now (never above `capacity`).
    pub buffered: usize,
    /// Records dropped because the buffer was full or the shipper had stopped.
    pub dropped: u64,
    /// Records published.
    pub published: u64,
    /// Records taken from the buffer but lost with a connection.
    pub lost: u64,
}

/// The running shipper: its layer, its numbers, and its shutdown.
#[derive(Debug, Clone)]
pub struct Logs {
    layer: LogsLayer,
    buffer: mpsc::WeakSender<LogRecord>,
    capacity: usize,
    counters: Arc<Counters>,
    stop: CancellationToken,
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
    let task = runtime.spawn(ship(options, records, Arc::clone(&counters), stop.clone()));
    Ok(Logs {
        layer,
        buffer: buffer.downgrade(),
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
            dropped: self.counters.dropped.load(Ordering::Relaxed),
            published: self.counters.published.load(Ordering::Relaxed),
            lost: self.counters.lost.load(Ordering::Relaxed),
        }
    }

    /// Stops shipping: publishes what is buffered (for up to `timeout`), closes the
    /// connection, and returns the final numbers. Records logged afterwards are dropped.
    pub async fn shutdown(&self, timeout: Duration) -> LogsStats {
        self.stop.cancel();
        let task = self.task.lock().ok().and_then(|mut task| task.take());
        if let Some(mut task) = task {
            if tokio::time::timeout(timeout, &mut task).await.is_err() {
                task.abort();
            }
        }
        self.stats()
    }
}

/// The task: open the link (retrying until it is up), then publish until stopped, replacing
/// the publisher whenever the connection is lost (the link's owner reconnects it).
async fn ship(
    options: LogsOptions,
    mut records: mpsc::Receiver<LogRecord>,
    counters: Arc<Counters>,
    stop: CancellationToken,
) {
    let broker = connect::named(
        &options.broker,
        &format!("{}.{}.logs", options.node, options.source),
    );
    let opening = PlainLink::open_retrying(&broker, crate::LOGS_EXCHANGE);
    let Some(link) = unless_stopped_idle(opening, &mut records, &stop).await else {
        return;
    };
    debug!(exchange = %link.exchange(), "logs shipper connected");
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
        let body = serde_json::to_vec(&record).unwrap_or_default();
        if let Err(e) = publisher
            .publish(&record.routing_key(), "application/json", body)
            .await
        {
            debug!(error = %e, "publishing a record failed");
            counters.lost.fetch_add(1, Ordering::Relaxed);
            return Ended::Lost;
        }
        counters.published.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(crate::PUBLISHED_METRIC).increment(1);
    }
}
