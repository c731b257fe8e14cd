//! The subscription's side of a consumer: the client library's stream, read straight by
//! whoever reads the [`Subscription`](mesh_core::Subscription), each message turned into a
//! [`Delivery`] there and registered with its channel's ack tracker; and the feed that
//! switches to the next attachment's stream after a re-attach.

use std::sync::Arc;
use std::task::{Context, Poll};

use amqprs::channel::{Channel, ConsumerMessage};
use mesh_core::{Delivery, DeliveryFeed};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::DropGuard;

use super::acker::{AmqpAcker, SubscriptionCtx};
use super::tracker::Tracker;

/// The header quorum queues count redeliveries in.
const DELIVERY_COUNT: &str = "x-delivery-count";

/// The subscription's side of one attached consumer: the client library's stream, read
/// straight by whoever reads the subscription, and what makes its messages deliveries.
pub(super) struct Reader {
    pub(super) stream: mpsc::UnboundedReceiver<ConsumerMessage>,
    pub(super) channel: Channel,
    pub(super) manual_ack: bool,
    pub(super) ctx: Arc<SubscriptionCtx>,
    /// `None` on a no-ack subscription.
    pub(super) tracker: Option<Tracker>,
    /// Dropped with the reader: tells the pump this attachment ended.
    pub(super) _ended: oneshot::Sender<()>,
}

impl Reader {
    /// A delivery in mesh's types, registered with the tracker before anyone can settle
    /// it; `None` for a manual-ack delivery whose channel is gone already (nothing could
    /// settle it, and the broker redelivers it).
    fn delivery(&self, message: ConsumerMessage) -> Option<Delivery> {
        let ConsumerMessage {
            deliver,
            basic_properties,
            content,
            ..
        } = message;
        let deliver = deliver?;
        if self.manual_ack && !self.channel.is_open() {
            tracing::debug!("dropped a delivery of a closed channel");
            return None;
        }
        let ctx = &self.ctx;
        let settle = self
            .tracker
            .as_ref()
            .map(|tracker| tracker.delivered(deliver.delivery_tag()));
        let foreign = super::path::foreign(
            ctx.arrival,
            &ctx.queue,
            deliver.exchange(),
            deliver.routing_key(),
        );
        let mut message = crate::convert::delivered(
            deliver.exchange(),
            deliver.routing_key().clone(),
            &mut basic_properties.unwrap_or_default(),
            content.unwrap_or_default(),
        );
        if let Some(why) = foreign {
            let acker = AmqpAcker {
                ctx: ctx.clone(),
                settle,
                reply_to: None,
                correlation_id: None,
            };
            set_aside(
                acker,
                message,
                deliver.exchange(),
                deliver.routing_key(),
                why,
            );
            return None;
        }
        // The broker's count belongs to this queue: a copy republished with it (a retry)
        // would carry a stale count into its next delivery, so it never stays in the message.
        let count = message.properties.headers.remove(DELIVERY_COUNT);
        let delivery_count = ctx.counts_deliveries.then(|| {
            count
                .and_then(|c| c.as_u64())
                .map_or(0, |c| u32::try_from(c).unwrap_or(u32::MAX))
        });
        let acker = AmqpAcker {
            ctx: ctx.clone(),
            settle,
            reply_to: message.properties.reply_to.clone(),
            correlation_id: message.properties.correlation_id.clone(),
        };
        Some(Delivery::new(
            message,
            deliver.redelivered(),
            delivery_count,
            ctx.queue.clone(),
            Box::new(acker),
        ))
    }
}

/// Dead-letters a delivery that came by a foreign path (`foreign-path`, with `why`), its
/// `x-mesh-*` headers and the key they may have restored dropped first (nothing on that path
/// can be mesh's), and counts it; on a no-ack subscription, only drops and counts it. It is
/// never handed on. The copy is published, confirmed, and the original acked on a task of
/// its own (the reader goes on); a failure releases the original, as any dead letter's does.
///
/// One published to `mesh.events.dead` (and routed on by an exchange-to-exchange binding) is
/// only acked: every reader of dead letters has it already, and its dead-letter copy would
/// take the same binding back here, forever.
fn set_aside(
    acker: AmqpAcker,
    mut message: mesh_core::WireMessage,
    exchange: &str,
    key: &str,
    why: String,
) {
    use mesh_core::codec::{self, DeadLetterNote, DeadReason};
    use mesh_core::text::EscapedDisplay;
    use mesh_core::{Acker, Timestamp};

    crate::lifecycle::Counters::bump(&acker.ctx.shared.counters.foreign_deliveries);
    message
        .properties
        .headers
        .retain(|name, _| !codec::is_mesh_header(name));
    key.clone_into(&mut message.routing_key);
    let queue = acker.ctx.queue.clone();
    tracing::warn!(
        queue = %EscapedDisplay(&queue),
        why = %EscapedDisplay(&why),
        "a delivery came by a foreign path: dead-lettered `foreign-path`, never handled"
    );
    if acker.settle.is_none() {
        return;
    }
    if exchange == mesh_core::naming::DEAD_EXCHANGE {
        let acked = Box::new(acker).ack();
        tokio::spawn(async move {
            if let Err(error) = acked.await {
                tracing::warn!(error = %EscapedDisplay(&error), "acking a delivery of a foreign path failed");
            }
        });
        return;
    }
    codec::mark_dead(
        &mut message,
        &DeadLetterNote {
            reason: DeadReason::ForeignPath,
            attempts: 0,
            last_error: Some(why),
            queue,
            time: Timestamp::now(),
        },
    );
    let dead = Box::new(acker).dead_letter(message);
    tokio::spawn(async move {
        if let Err(error) = dead.await {
            tracing::warn!(
                error = %EscapedDisplay(&error),
                "dead-lettering a delivery of a foreign path failed; it is delivered again"
            );
        }
    });
}

/// What a [`Subscription`](mesh_core::Subscription) of this transport reads: the current
/// attachment's stream, then the next one the pump hands over (once the current one has
/// nothing ready: what it still holds came on a channel that is gone or whose consumer the
/// broker cancelled), until the pump stops and the last stream ended.
pub(super) struct Feed {
    /// Declared first, so dropped first: by the time the pump sees the current reader gone,
    /// it can tell the subscription went with it.
    pub(super) readers: mpsc::Receiver<Reader>,
    pub(super) current: Option<Reader>,
    /// Stop the forwarders of the queue's retry queues once the subscription is gone.
    pub(super) _forwarders: Vec<DropGuard>,
}

impl DeliveryFeed for Feed {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        loop {
            if let Some(reader) = &mut self.current {
                match reader.stream.poll_recv(cx) {
                    Poll::Ready(Some(message)) => {
                        if let Some(delivery) = reader.delivery(message) {
                            return Poll::Ready(Some(delivery));
                        }
                        continue;
                    }
                    // The stream ends after a cancel, when the broker cancels the consumer
                    // (its queue was deleted), or when the channel or connection is gone;
                    // dropping the reader tells the pump.
                    Poll::Ready(None) => self.current = None,
                    Poll::Pending => {}
                }
            }
            // The pump hands over an attachment only once the current one was lost.
            return match self.readers.poll_recv(cx) {
                Poll::Ready(Some(reader)) => {
                    self.current = Some(reader);
                    continue;
                }
                Poll::Ready(None) if self.current.is_none() => Poll::Ready(None),
                Poll::Ready(None) | Poll::Pending => Poll::Pending,
            };
        }
    }
}
