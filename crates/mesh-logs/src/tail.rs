//! Following `mesh.logs`: an exclusive, auto-delete, server-named queue bound to one
//! pattern, consumed with automatic acks, through a `mesh_amqp::PlainLink` and its
//! follower.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use mesh_amqp::{AmqpOptions, PlainLink};
use mesh_core::TopicPattern;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::connect;
use crate::error::{LogsError, LogsErrorKind};
use crate::record::LogRecord;

/// Records a tail's queue holds at most on the broker; past it the oldest are dropped
/// (`x-max-length`, overflow `drop-head`).
pub const TAIL_QUEUE_MAX_LENGTH: i32 = 10_000;

/// The prefix of a tail's connection name (`mesh.logs.tail.consume`).
const TAIL_CONNECTION: &str = "mesh.logs.tail";

/// Records a [`Tail`] buffers for its reader at most; past it they are dropped and counted
/// ([`Tail::dropped`]).
pub const TAIL_BUFFER: usize = 1_024;

/// A stream of the records published to `mesh.logs` under a pattern, from the moment
/// [`tail`] returned. At most once: nothing is redelivered, and nothing remains on the
/// broker once it is dropped.
///
/// Read it with [`next`](Tail::next) or as a [`futures::Stream`]. It ends when the
/// connection is lost.
#[derive(Debug)]
pub struct Tail {
    records: mpsc::Receiver<LogRecord>,
    queue: String,
    dropped: Arc<AtomicU64>,
    /// The task holding the connection; [`Tail::close`] waits for it.
    forwarder: JoinHandle<()>,
}

/// Follows the records whose routing key `<node>.<source>.<level>` matches `pattern` (a
/// topic pattern: `#` everything, `anchor.#` one node, `*.billing.*` one source,
/// `#.error` errors only), on the broker at `url` (an `amqp://` URL).
pub async fn tail(url: &str, pattern: &str) -> Result<Tail, LogsError> {
    tail_with(&connect::parse(url)?, pattern).await
}

/// As [`tail`], with broker options already parsed.
pub async fn tail_with(broker: &AmqpOptions, pattern: &str) -> Result<Tail, LogsError> {
    let pattern = TopicPattern::parse(pattern).map_err(|e| {
        LogsError::new(
            LogsErrorKind::InvalidOptions,
            format!("`{pattern}` is not a topic pattern"),
        )
        .with_source(e)
    })?;
    let link = PlainLink::open(
        &connect::named(broker, TAIL_CONNECTION),
        crate::names::LOGS_EXCHANGE,
    )
    .await
    .map_err(connect::opening)?;
    let mut follower = match link
        .follow(&pattern, TAIL_QUEUE_MAX_LENGTH.unsigned_abs())
        .await
    {
        Ok(follower) => follower,
        Err(e) => {
            link.close().await;
            return Err(connect::refused(e, &format!("following `{pattern}`")));
        }
    };
    let queue = follower.queue().to_owned();

    let (sender, records) = mpsc::channel(TAIL_BUFFER);
    let dropped = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&dropped);
    // Holds the link: forwards messages into the bounded buffer until the reader goes away
    // (dropping the `Tail` closes the buffer) or the connection ends, then closes it; the
    // broker deletes the exclusive queue with it. A tail does not outlive its connection,
    // so the link's reconnects are not waited for.
    let forwarder = tokio::spawn(async move {
        loop {
            tokio::select! {
                () = sender.closed() => break,
                message = follower.next() => {
                    let Some(message) = message else { break };
                    let record = LogRecord::from_message(&message.routing_key, &message.body);
                    if sender.try_send(record).is_err() {
                        counted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        follower.close().await;
        link.close().await;
    });
    Ok(Tail {
        records,
        queue,
        dropped,
        forwarder,
    })
}

impl Tail {
    /// The next record; `None` once the connection ended.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: no record is lost when this future is dropped before it completes.
    pub async fn next(&mut self) -> Option<LogRecord> {
        self.records.recv().await
    }

    /// The broker-named queue it reads.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Records dropped because the reader fell more than [`TAIL_BUFFER`] behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Stops following and returns once the queue's channel and the connection are closed
    /// (the broker deletes the queue with them). Dropping a `Tail` does the same in the
    /// background; a program about to exit (and drop its runtime) closes it instead, so that
    /// no close is still in flight when the runtime goes.
    pub async fn close(self) {
        let Tail {
            records, forwarder, ..
        } = self;
        // Closing the buffer is what tells the forwarder to stop.
        drop(records);
        let _ = forwarder.await;
    }
}

impl futures::Stream for Tail {
    type Item = LogRecord;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<LogRecord>> {
        self.records.poll_recv(cx)
    }
}
