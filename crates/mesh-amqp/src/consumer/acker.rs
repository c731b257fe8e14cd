//! The delivery acker: what a handler's decision does to one delivery. An ack goes to the
//! channel's ack tracker; a retry, a dead letter or a reply publishes a copy first, waits
//! for its confirm, and only then acks the original (holding the delivery through passing
//! failures of the copy), so a message is never lost between the two.

use mesh_core::text::EscapedDisplay;
use std::sync::Arc;
use std::time::Duration;

use mesh_core::naming::{
    is_legacy_reply_to, DEAD_EXCHANGE, REPLY_EXCHANGE, RETIRED_REPLY_EXCHANGE, RETRY_EXCHANGE,
};
use mesh_core::{
    AckBatch, AckFailed, Acker, BoxFuture, TransportError, TransportErrorKind, WireMessage,
};
use tokio::time::Instant;

use crate::publisher::{Payload, Publication, Publisher};

use super::settle::Settle;

/// How long a retry, dead-letter or forwarded copy that failed to publish for a passing
/// reason (nacked, timed out, unroutable while a topology is declared again, the publisher
/// reconnecting) is tried again, its delivery held, before the delivery is released.
/// Releasing at once has the broker deliver it again at once, so a burst of quick failures
/// (a queue electing its leader) would run a quorum queue's delivery limit down in a second
/// and dead-letter a message nothing was wrong with.
const COPY_PATIENCE: Duration = Duration::from_secs(30);

/// The first pause between tries of a copy, doubled up to [`COPY_PAUSE_MAX`].
const COPY_PAUSE: Duration = Duration::from_millis(100);
const COPY_PAUSE_MAX: Duration = Duration::from_secs(5);

/// What the ackers of one attachment share.
#[derive(Debug)]
pub(crate) struct SubscriptionCtx {
    /// The queue consumed.
    pub(crate) queue: String,
    /// The retry queues of the retry ladder, by step.
    pub(crate) delay_queues: Vec<String>,
    /// Whether the queue counts deliveries (`x-delivery-count`: quorum queues).
    pub(crate) counts_deliveries: bool,
    /// Where retry, dead-letter and reply copies are published.
    pub(crate) publisher: Publisher,
    /// Which paths its deliveries may come by.
    pub(crate) arrival: super::path::Arrival,
    /// The transport's counters (deliveries that came by a foreign path).
    pub(crate) shared: Arc<crate::lifecycle::TransportShared>,
}

/// Settles one delivery; see [`Acker`].
pub(super) struct AmqpAcker {
    pub(super) ctx: Arc<SubscriptionCtx>,
    /// `None` on a no-ack (ephemeral) subscription.
    pub(super) settle: Option<Settle>,
    pub(super) reply_to: Option<String>,
    pub(super) correlation_id: Option<String>,
}

impl AmqpAcker {
    /// Publishes `outgoing`, waits for its confirm, then acks; on any failure the delivery
    /// is released (dropping `settle` does it), so it is never lost.
    ///
    /// A copy whose headers no longer fit in a frame (the original did; mesh's annotations
    /// pushed it over) is trimmed ([`mesh_core::codec::trim_headers`]) and published so,
    /// rather than released to be redelivered, and fail the same way, forever.
    async fn publish_then_ack(
        ctx: Arc<SubscriptionCtx>,
        settle: Settle,
        outgoing: Publication,
    ) -> Result<(), TransportError> {
        let deadline = Instant::now() + COPY_PATIENCE;
        let mut pause = COPY_PAUSE;
        loop {
            // A delivery whose channel is gone is the broker's again (it delivers it anew):
            // a copy made now would be a second one, since the ack after it cannot be sent.
            // A retry forwarder holding copies through a lost connection made every one of
            // them twice so (seen: 943 of 1,000 scheduled events after a broker restart).
            if !settle.is_live() {
                return Err(TransportError::new(
                    TransportErrorKind::ConnectionLost,
                    "the delivery's channel is gone; the broker delivers it again, so no copy is made",
                ));
            }
            match Self::publish_copy(&ctx, outgoing.clone()).await {
                Ok(()) => return settle.ack().await,
                Err(error)
                    if passing(&error) && settle.is_live() && Instant::now() + pause < deadline =>
                {
                    tracing::warn!(
                        queue = %EscapedDisplay(&ctx.queue),
                        retry_in = ?pause,
                        error = %EscapedDisplay(&error),
                        "publishing a copy failed; the delivery is held and the copy sent again"
                    );
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(COPY_PAUSE_MAX);
                }
                Err(error) => return Err(error),
            }
        }
    }

    /// Publishes `outgoing` and waits for its confirm (trimmed once if its headers do not
    /// fit in a frame).
    async fn publish_copy(
        ctx: &SubscriptionCtx,
        outgoing: Publication,
    ) -> Result<(), TransportError> {
        // Headers within AMQP's smallest frame fit every connection: only a copy that may
        // not fit is kept for the trimmed attempt. (The allowance covers the routing-key
        // header the publisher may still add: its name and a key of at most 255 bytes.)
        const STAMP_ALLOWANCE: usize = 512;
        let fallback = match &outgoing.payload {
            Payload::Message { message, .. } => (crate::convert::header_frame_bound(message)
                + STAMP_ALLOWANCE
                > crate::convert::FRAME_MIN_SIZE)
                .then(|| outgoing.clone()),
            Payload::Event(_) => None,
        };
        let confirm = match (ctx.publisher.publish(outgoing, None).await, fallback) {
            (Err(error), Some(mut outgoing))
                if matches!(error.kind(), TransportErrorKind::HeadersTooLarge { .. }) =>
            {
                let trimmed = match &mut outgoing.payload {
                    Payload::Message { message, .. } => mesh_core::codec::trim_headers(message),
                    Payload::Event(_) => 0,
                };
                tracing::warn!(
                    queue = %EscapedDisplay(&ctx.queue),
                    trimmed,
                    error = %EscapedDisplay(&error),
                    "a copy's headers do not fit in a frame; publishing it trimmed"
                );
                ctx.publisher.publish(outgoing, None).await?
            }
            (other, _) => other?,
        };
        confirm.await
    }
}

/// Whether a copy's failure may pass if the copy is sent again a moment later.
fn passing(error: &TransportError) -> bool {
    error.is_retryable() || matches!(error.kind(), TransportErrorKind::Unroutable)
}

impl Acker for AmqpAcker {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async move {
            match self.settle {
                Some(settle) => settle.ack().await,
                None => Ok(()),
            }
        })
    }

    fn ack_detached(self: Box<Self>, failed: AckFailed) -> Option<BoxFuture<'static, ()>> {
        // A no-ack delivery has nothing to settle.
        if let Some(settle) = self.settle {
            settle.ack_detached(failed);
        }
        None
    }

    fn ack_into(self: Box<Self>, batch: &mut AckBatch) {
        // A no-ack delivery has nothing to settle.
        if let Some(settle) = self.settle {
            settle.ack_into(batch);
        }
    }

    fn retry(
        self: Box<Self>,
        copy: WireMessage,
        step: usize,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async move {
            let AmqpAcker { ctx, settle, .. } = *self;
            let Some(settle) = settle else {
                return Ok(());
            };
            // Past the last step, the last step repeats (as `RetryPolicy` defines).
            let Some(delay_queue) = ctx
                .delay_queues
                .get(step)
                .or_else(|| ctx.delay_queues.last())
                .cloned()
            else {
                return Err(TransportError::new(
                    TransportErrorKind::InvalidOptions,
                    format!("`{}` has no retry steps", ctx.queue),
                ));
            };
            // Mandatory: if the retry queue is gone, the copy must not vanish while the
            // original is acked.
            let outgoing = Publication {
                exchange: RETRY_EXCHANGE,
                payload: Payload::Message {
                    routing_key: delay_queue,
                    message: copy,
                },
                mandatory: true,
                force_persistent: true,
                resend: true,
            };
            Self::publish_then_ack(ctx.clone(), settle, outgoing).await
        })
    }

    fn dead_letter(
        self: Box<Self>,
        copy: WireMessage,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async move {
            let AmqpAcker { ctx, settle, .. } = *self;
            let Some(settle) = settle else {
                return Ok(());
            };
            // Under the queue's own name, which the access plan lets only its owner write
            // and read on `mesh.events.dead`; its own key travels in `x-mesh-routing-key`.
            let outgoing = Publication {
                exchange: DEAD_EXCHANGE,
                payload: Payload::Message {
                    routing_key: ctx.queue.clone(),
                    message: copy,
                },
                mandatory: true,
                force_persistent: true,
                resend: true,
            };
            Self::publish_then_ack(ctx.clone(), settle, outgoing).await
        })
    }

    fn reply(
        self: Box<Self>,
        reply: WireMessage,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async move {
            let AmqpAcker {
                ctx,
                settle,
                reply_to,
                correlation_id,
            } = *self;
            let Some(settle) = settle else {
                return Ok(());
            };
            let Some(reply_to) = reply_to else {
                // Nobody can ever receive an answer: settle the request rather than have
                // it redelivered forever.
                settle.ack().await?;
                return Err(TransportError::new(
                    TransportErrorKind::Protocol,
                    "the request has no reply_to; it was acked without a reply",
                ));
            };
            let mut reply = reply;
            reply.properties.correlation_id = correlation_id;
            // A caller of an earlier version names its reply queue, bound on the retired
            // `mesh.reply`: answered there, once, as long as that exchange exists (a failure
            // is not retried, so a deployment already migrated cannot make the request
            // come back for ever).
            let legacy = is_legacy_reply_to(&reply_to);
            // Not mandatory: a caller that gave up has no reply queue any more, and that is
            // not the server's failure.
            let outgoing = Publication {
                exchange: if legacy {
                    RETIRED_REPLY_EXCHANGE
                } else {
                    REPLY_EXCHANGE
                },
                payload: Payload::Message {
                    routing_key: reply_to,
                    message: reply,
                },
                mandatory: false,
                force_persistent: false,
                resend: true,
            };
            if legacy {
                let published = Self::publish_copy(&ctx, outgoing).await;
                settle.ack().await?;
                return published;
            }
            Self::publish_then_ack(ctx, settle, outgoing).await
        })
    }

    fn release(self: Box<Self>) {
        // Dropping the settle right releases the delivery.
    }
}
