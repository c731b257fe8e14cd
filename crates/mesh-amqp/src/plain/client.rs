//! The client library's side of [`super`]: the channels a publisher and a follower hold, and
//! the frames they send. Private, so the public handles in `mod.rs` name no client type.

use amqprs::channel::{
    BasicConsumeArguments, BasicPublishArguments, Channel, ConsumerMessage, QueueBindArguments,
    QueueDeclareArguments,
};
use amqprs::BasicProperties;
use mesh_core::text::EscapedDisplay;
use mesh_core::{HeaderValue, Headers, TopicPattern, TransportError, TransportErrorKind};
use tokio::sync::mpsc;

use crate::convert::to_field_table;
use crate::declare::{take_close, within, CloseSlot};
use crate::error::{from_client, from_close};

/// The `tracing` target the client library logs under (with its sub-targets, `<target>::…`),
/// down to every frame at the debug and trace levels. A `tracing` layer that ships records
/// over a [`PlainLink`](super::PlainLink) must drop this target's records, or each record
/// shipped would log more to ship.
pub const CLIENT_LOG_TARGET: &str = "amqprs";

/// The error of a failed call on `channel`: what the broker said if it closed the channel,
/// else the client library's error.
fn failed(closed: &CloseSlot, error: amqprs::error::Error, context: &str) -> TransportError {
    match take_close(closed) {
        Some(close) => from_close(close, context),
        None => from_client(error, context),
    }
}

/// A channel that publishes without confirms.
pub(super) struct Publisher {
    channel: Channel,
    closed: CloseSlot,
}

impl Publisher {
    pub(super) fn new(channel: Channel, closed: CloseSlot) -> Publisher {
        Publisher { channel, closed }
    }

    pub(super) fn channel_id(&self) -> u16 {
        self.channel.channel_id()
    }

    /// Publishes `body` transient (delivery mode 1) with `content_type` and the current
    /// time as its timestamp.
    pub(super) async fn publish(
        &self,
        exchange: &str,
        routing_key: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> Result<(), TransportError> {
        let timestamp = u64::try_from(mesh_core::Timestamp::now().unix_seconds()).unwrap_or(0);
        let properties = BasicProperties::default()
            .with_content_type(content_type)
            .with_delivery_mode(1) // transient: never written to disk
            .with_timestamp(timestamp)
            .finish();
        let context = format!("publishing to `{exchange}`");
        within(
            self.channel.basic_publish(
                properties,
                body,
                BasicPublishArguments::new(exchange, routing_key),
            ),
            &context,
        )
        .await?
        .map_err(|e| failed(&self.closed, e, &context))
    }

    pub(super) async fn close(self) {
        close(self.channel, "closing a publishing channel timed out").await;
    }
}

/// A channel consuming a server-named queue with automatic acks.
pub(super) struct Follower {
    channel: Channel,
    deliveries: mpsc::UnboundedReceiver<ConsumerMessage>,
}

impl Follower {
    /// Declares an exclusive, auto-delete, server-named queue of at most `max_length`
    /// messages on `channel`, binds it to `exchange` on `pattern` and consumes it; returns
    /// the follower and the queue's name.
    pub(super) async fn start(
        channel: Channel,
        closed: CloseSlot,
        exchange: &str,
        pattern: &TopicPattern,
        max_length: u32,
    ) -> Result<(Follower, String), TransportError> {
        let mut arguments = Headers::new();
        arguments.insert(
            "x-max-length".to_owned(),
            HeaderValue::Int(i64::from(max_length)),
        );
        let declare = QueueDeclareArguments::new("")
            .exclusive(true)
            .auto_delete(true)
            .durable(false)
            .arguments(to_field_table(&arguments)?)
            .finish();
        let context = "declaring a follower's queue";
        let declared = within(channel.queue_declare(declare), context)
            .await?
            .map_err(|e| failed(&closed, e, context))?;
        let (queue, _, _) = declared.ok_or_else(|| {
            TransportError::new(TransportErrorKind::Protocol, "no declare-ok for a queue")
        })?;
        let context = format!("binding `{queue}` to `{exchange}` on `{pattern}`");
        within(
            channel.queue_bind(QueueBindArguments::new(&queue, exchange, pattern.as_str())),
            &context,
        )
        .await?
        .map_err(|e| failed(&closed, e, &context))?;
        let consume = BasicConsumeArguments::new(&queue, "")
            .manual_ack(false)
            .exclusive(true)
            .finish();
        let context = format!("consuming `{queue}`");
        let (_, deliveries) = within(channel.basic_consume_rx(consume), &context)
            .await?
            .map_err(|e| failed(&closed, e, &context))?;
        Ok((
            Follower {
                channel,
                deliveries,
            },
            queue,
        ))
    }

    pub(super) fn channel_id(&self) -> u16 {
        self.channel.channel_id()
    }

    /// The next message's routing key and body; `None` once the channel is gone.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only receives from a channel.
    pub(super) async fn next(&mut self) -> Option<(String, Vec<u8>)> {
        let delivery = self.deliveries.recv().await?;
        let routing_key = delivery
            .deliver
            .as_ref()
            .map(|d| d.routing_key().to_owned())
            .unwrap_or_default();
        Some((routing_key, delivery.content.unwrap_or_default()))
    }

    pub(super) async fn close(self) {
        close(self.channel, "closing a follower's channel timed out").await;
    }
}

async fn close(channel: Channel, timed_out: &str) {
    if channel.is_open() {
        if let Err(e) = within(channel.close(), "closing a channel").await {
            tracing::debug!(error = %EscapedDisplay(&e), "{timed_out}");
        }
    }
}
