//! Following `mesh.logs`: an exclusive, auto-delete, server-named queue bound to one
//! pattern, consumed with automatic acks.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use amqprs::channel::{BasicConsumeArguments, QueueBindArguments, QueueDeclareArguments};
use amqprs::{FieldTable, FieldValue};
use mesh_amqp::AmqpOptions;
use mesh_core::TopicPattern;
use tokio::sync::mpsc;

use crate::connect;
use crate::error::{LogsError, LogsErrorKind};
use crate::record::LogRecord;

/// Records a tail's queue holds at most on the broker; past it the oldest are dropped
/// (`x-max-length`, overflow `drop-head`).
pub const TAIL_QUEUE_MAX_LENGTH: i32 = 10_000;

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
    let connection = connect::connect(broker, "mesh.logs.tail").await?;
    let opened = async {
        let channel = connect::channel(&connection).await?;
        let refused = |what: String| {
            move |e: amqprs::error::Error| {
                LogsError::new(LogsErrorKind::Broker, what).with_source(e)
            }
        };
        let mut arguments = FieldTable::new();
        arguments.insert(
            "x-max-length"
                .try_into()
                .map_err(|_| LogsError::new(LogsErrorKind::Broker, "argument name"))?,
            FieldValue::I(TAIL_QUEUE_MAX_LENGTH),
        );
        let declared = channel
            .queue_declare(
                QueueDeclareArguments::new("")
                    .exclusive(true)
                    .auto_delete(true)
                    .durable(false)
                    .arguments(arguments)
                    .finish(),
            )
            .await
            .map_err(refused("declaring the tail's queue".to_owned()))?;
        let (queue, _, _) = declared.ok_or_else(|| {
            LogsError::new(LogsErrorKind::Broker, "no declare-ok for the tail's queue")
        })?;
        channel
            .queue_bind(QueueBindArguments::new(
                &queue,
                crate::LOGS_EXCHANGE,
                pattern.as_str(),
            ))
            .await
            .map_err(refused(format!("binding `{pattern}`")))?;
        let (_, deliveries) = channel
            .basic_consume_rx(
                BasicConsumeArguments::new(&queue, "")
                    .manual_ack(false)
                    .exclusive(true)
                    .finish(),
            )
            .await
            .map_err(refused(format!("consuming `{queue}`")))?;
        Ok::<_, LogsError>((channel, queue, deliveries))
    }
    .await;
    let (channel, queue, mut deliveries) = match opened {
        Ok(opened) => opened,
        Err(e) => {
            let _ = connection.close().await;
            return Err(e);
        }
    };

    let (sender, records) = mpsc::channel(TAIL_BUFFER);
    let dropped = Arc::new(AtomicU64::new(0));
    let counted = Arc::clone(&dropped);
    // Owns the connection: forwards deliveries into the bounded buffer until the reader
    // goes away (dropping the `Tail` closes the buffer) or the connection ends, then closes
    // it; the broker deletes the exclusive queue with it.
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = sender.closed() => break,
                delivery = deliveries.recv() => {
                    let Some(delivery) = delivery else { break };
                    let key = delivery
                        .deliver
                        .as_ref()
                        .map(|d| d.routing_key().as_str())
                        .unwrap_or_default();
                    let body = delivery.content.as_deref().unwrap_or_default();
                    let record = LogRecord::from_message(key, body);
                    if sender.try_send(record).is_err() {
                        counted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        let _ = channel.close().await;
        let _ = connection.close().await;
    });
    Ok(Tail {
        records,
        queue,
        dropped,
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
}

impl futures::Stream for Tail {
    type Item = LogRecord;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<LogRecord>> {
        self.records.poll_recv(cx)
    }
}
