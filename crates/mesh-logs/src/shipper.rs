//! The shipper: a background task that owns a connection and publishes what the layer
//! buffered to `mesh.logs`, without confirms.
//!
//! The buffer is the only place records wait. While the task is connecting, or the broker
//! is slow or blocks the connection (an alarm), the buffer fills and the layer drops; the
//! program never waits. A record taken from the buffer when the connection dies is lost
//! (counted in [`LogsStats::lost`]); there are no confirms to tell which reached the broker.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqprs::channel::{BasicPublishArguments, Channel};
use amqprs::connection::Connection;
use amqprs::BasicProperties;
use mesh_amqp::AmqpOptions;
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

/// The first and the longest wait between connection attempts.
const BACKOFF: (Duration, Duration) = (Duration::from_millis(100), Duration::from_secs(5));

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

/// The task: connect, publish until the connection fails, reconnect; until stopped.
async fn ship(
    options: LogsOptions,
    mut records: mpsc::Receiver<LogRecord>,
    counters: Arc<Counters>,
    stop: CancellationToken,
) {
    let name = format!("{}.{}.logs", options.node, options.source);
    let mut backoff = BACKOFF.0;
    loop {
        let connecting = open(&options.broker, &name);
        tokio::pin!(connecting);
        let opened = tokio::select! {
            () = stop.cancelled() => {
                if records.is_empty() {
                    return;
                }
                // Stopped while connecting, with records buffered (logged just before a
                // shutdown, say): `shutdown` promised to publish them, so the connection is
                // finished; its timeout bounds the wait.
                connecting.await
            }
            opened = &mut connecting => opened,
        };
        let (connection, channel) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                // Logged, but never shipped (the target is silent), and at most once per
                // attempt: the backoff bounds the rate.
                warn!("logs shipper cannot connect, retrying in {backoff:?}: {e}");
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(backoff) => {}
                }
                backoff = (backoff * 2).min(BACKOFF.1);
                continue;
            }
        };
        backoff = BACKOFF.0;
        debug!(connection = %name, "logs shipper connected");
        let ended = publish_until_lost(&channel, &mut records, &counters, &stop).await;
        if let Ended::Stopped = ended {
            // Everything published so far precedes the close on the wire, so the broker has
            // it when the close is acknowledged.
            let _ = channel.close().await;
            let _ = connection.close().await;
            return;
        }
        warn!("logs shipper lost its connection; reconnecting");
    }
}

async fn open(options: &AmqpOptions, name: &str) -> Result<(Connection, Channel), LogsError> {
    let connection = connect::connect(options, name).await?;
    match connect::channel(&connection).await {
        Ok(channel) => Ok((connection, channel)),
        Err(e) => {
            let _ = connection.close().await;
            Err(e)
        }
    }
}

enum Ended {
    Stopped,
    Lost,
}

async fn publish_until_lost(
    channel: &Channel,
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
        if publish(channel, &record).await.is_err() {
            counters.lost.fetch_add(1, Ordering::Relaxed);
            return Ended::Lost;
        }
        counters.published.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(crate::PUBLISHED_METRIC).increment(1);
    }
}

async fn publish(channel: &Channel, record: &LogRecord) -> Result<(), amqprs::error::Error> {
    let body = serde_json::to_vec(record).unwrap_or_default();
    let timestamp = u64::try_from(mesh_core::Timestamp::now().unix_seconds()).unwrap_or(0);
    let properties = BasicProperties::default()
        .with_content_type("application/json")
        .with_delivery_mode(1) // transient: never written to disk
        .with_timestamp(timestamp)
        .finish();
    channel
        .basic_publish(
            properties,
            body,
            BasicPublishArguments::new(crate::LOGS_EXCHANGE, &record.routing_key()),
        )
        .await
}
