//! Consumers: a channel per subscription, a pump that feeds the [`Subscription`], and the
//! acker that settles each delivery.
//!
//! # Design
//!
//! Each subscription has a channel of its own on the consume connection, with
//! `basic.qos(prefetch, global = false)` (per consumer: global QoS on a quorum queue closes
//! the connection). Two tasks serve it:
//!
//! - the **pump** moves deliveries from the client library's stream into the subscription's
//!   buffer (an mpsc of capacity `prefetch`), and on cancel sends `basic.cancel`;
//! - the **ack tracker** owns every settlement sent on the channel. It knows which delivery
//!   tags are handed out and not yet decided, and coalesces acks: after draining whatever
//!   commands are waiting, it acks the decided tags below the oldest undecided one with one
//!   `basic.ack(multiple)` and the rest one by one. So a delivery is never acked before its
//!   handler finished, and a busy consumer sends few ack frames while an idle one acks at
//!   once (no timers). Releases are `basic.nack(requeue)`, sent before the acks of the same
//!   batch so a `multiple` ack never covers them.
//!
//! The tracker belongs to one channel: an acker can only reach the channel its delivery came
//! on, never a replacement, and once that channel is closed every settlement fails with
//! `ConnectionLost` (the broker has requeued the message already). The tracker closes the
//! channel when the pump and every acker are gone, so acks of deliveries still buffered after
//! a cancel keep working.
//!
//! Ephemeral subscriptions consume with `no_ack`: there is no tracker, and settling is a
//! no-op.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use amqprs::channel::{
    BasicAckArguments, BasicCancelArguments, BasicConsumeArguments, BasicNackArguments,
    BasicQosArguments, Channel, ConsumerMessage,
};
use mesh_core::naming::DEAD_EXCHANGE;
use mesh_core::{
    Acker, BoxFuture, Delivery, Subscription, TransportError, TransportErrorKind, WireMessage,
};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument;

use crate::declare::{take_close, within, CloseSlot};
use crate::error::{from_client, from_close};
use crate::publisher::{Outgoing, Publisher};

/// The header quorum queues count redeliveries in.
const DELIVERY_COUNT: &str = "x-delivery-count";

/// How many commands the ack tracker handles before it sends what they decided.
const ACK_BATCH: usize = 1024;

/// Consumers the transport should have, and has, attached.
#[derive(Debug, Default)]
pub(crate) struct ConsumerCounts {
    pub(crate) expected: AtomicUsize,
    pub(crate) attached: AtomicUsize,
}

/// What the ackers of one subscription share.
#[derive(Debug)]
pub(crate) struct SubscriptionCtx {
    /// The queue consumed.
    pub(crate) queue: String,
    /// The delay queues of the retry ladder, by step.
    pub(crate) delay_queues: Vec<String>,
    /// Whether the queue counts deliveries (`x-delivery-count`: quorum queues).
    pub(crate) counts_deliveries: bool,
    /// Where retry, dead-letter and reply copies are published.
    pub(crate) publisher: Publisher,
}

/// A channel consuming one queue.
pub(crate) struct Consumer {
    pub(crate) channel: Channel,
    pub(crate) closed: CloseSlot,
    pub(crate) consumer_tag: String,
    pub(crate) stream: mpsc::UnboundedReceiver<ConsumerMessage>,
    pub(crate) manual_ack: bool,
}

/// Sets the prefetch and starts consuming `queue` on `channel`.
pub(crate) async fn consume(
    channel: Channel,
    closed: CloseSlot,
    queue: &str,
    prefetch: u16,
    manual_ack: bool,
) -> Result<Consumer, TransportError> {
    let failed = |err: amqprs::error::Error, context: &str| match take_close(&closed) {
        Some(close) => from_close(close, context),
        None => from_client(err, context),
    };
    if manual_ack {
        // Never global: global QoS on a quorum queue closes the connection.
        within(
            channel.basic_qos(BasicQosArguments::new(0, prefetch, false)),
            "setting the prefetch",
        )
        .await?
        .map_err(|e| failed(e, "setting the prefetch"))?;
    }
    // An empty tag lets the broker choose one; the client library registers that one.
    let args = BasicConsumeArguments::new(queue, "")
        .manual_ack(manual_ack)
        .finish();
    let context = format!("consuming `{queue}`");
    let (consumer_tag, stream) = within(channel.basic_consume_rx(args), &context)
        .await?
        .map_err(|e| failed(e, &context))?;
    tracing::info!(queue, consumer = %consumer_tag, prefetch, manual_ack, "consumer attached");
    Ok(Consumer {
        channel,
        closed,
        consumer_tag,
        stream,
        manual_ack,
    })
}

/// Starts the pump (and tracker) of `consumer` and returns the subscription they feed.
pub(crate) fn start(
    consumer: Consumer,
    ctx: Arc<SubscriptionCtx>,
    prefetch: u16,
    counts: Arc<ConsumerCounts>,
    shutdown: watch::Receiver<bool>,
) -> Subscription {
    let (deliveries_tx, deliveries) = mpsc::channel(usize::from(prefetch.max(1)));
    let (cancel_tx, cancel) = oneshot::channel();
    counts.expected.fetch_add(1, Ordering::AcqRel);
    counts.attached.fetch_add(1, Ordering::AcqRel);
    let tracker = consumer.manual_ack.then(|| {
        let (tx, rx) = mpsc::unbounded_channel();
        let span = tracing::debug_span!("mesh_amqp.acks", queue = %ctx.queue);
        tokio::spawn(track(consumer.channel.clone(), consumer.closed.clone(), rx).instrument(span));
        tx
    });
    let queue = ctx.queue.clone();
    let pump = Pump {
        ctx,
        tracker,
        deliveries: Some(deliveries_tx),
        counts,
    };
    let span = tracing::info_span!("mesh_amqp.subscription", %queue);
    tokio::spawn(pump.run(consumer, cancel, shutdown).instrument(span));
    Subscription::new(queue, deliveries, cancel_tx)
}

struct Pump {
    ctx: Arc<SubscriptionCtx>,
    tracker: Option<mpsc::UnboundedSender<AckCommand>>,
    deliveries: Option<mpsc::Sender<Delivery>>,
    counts: Arc<ConsumerCounts>,
}

impl Pump {
    async fn run(
        mut self,
        mut consumer: Consumer,
        mut cancel: oneshot::Receiver<()>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let queue = self.ctx.queue.clone();
        let mut cancelled = false;
        loop {
            tokio::select! {
                biased;
                // Fires on `Subscription::cancel` and when the subscription is dropped.
                _ = &mut cancel, if !cancelled => {
                    cancelled = true;
                    self.cancel_consumer(&consumer).await;
                }
                () = closing(&mut shutdown), if !cancelled => {
                    cancelled = true;
                    self.cancel_consumer(&consumer).await;
                }
                message = consumer.stream.recv() => match message {
                    Some(message) => {
                        if let Some(delivery) = self.delivery(message) {
                            if cancelled {
                                // Arrived between our cancel and the broker's cancel-ok:
                                // dropping the delivery releases it.
                                drop(delivery);
                            } else {
                                self.hand_out(delivery, &mut cancel, &mut cancelled, &consumer).await;
                            }
                        }
                    }
                    // The stream ends after a cancel, when the broker cancels the consumer
                    // (its queue was deleted), or when the channel or connection is gone.
                    None => break,
                },
            }
        }
        self.counts.attached.fetch_sub(1, Ordering::AcqRel);
        // Buffered deliveries stay readable; then `next()` returns `None`.
        self.deliveries = None;
        if !cancelled {
            let reason = take_close(&consumer.closed)
                .map(|c| format!("{} {}", c.code, c.text))
                .unwrap_or_else(|| "the channel or connection is gone".to_owned());
            tracing::warn!(%queue, %reason, "consumer ended");
            // Recovery (next issue) re-attaches here and keeps the subscription fed. Until
            // then the subscription is over, but still expected: health reports it missing
            // until the application cancels or drops it.
            tokio::select! {
                _ = &mut cancel => {}
                () = closing(&mut shutdown) => {}
            }
        }
        self.counts.expected.fetch_sub(1, Ordering::AcqRel);
        if self.tracker.is_none() && consumer.channel.is_open() {
            // No tracker to close it: nothing can be settled on a no-ack channel.
            let _ = within(consumer.channel.close(), "closing a consumer channel").await;
        }
        tracing::debug!(%queue, "subscription ended");
    }

    /// Hands a delivery to the subscription, waiting for room in its buffer (which the
    /// prefetch bounds) but not past a cancel.
    async fn hand_out(
        &mut self,
        delivery: Delivery,
        cancel: &mut oneshot::Receiver<()>,
        cancelled: &mut bool,
        consumer: &Consumer,
    ) {
        let Some(deliveries) = &self.deliveries else {
            return;
        };
        let room = tokio::select! {
            room = deliveries.reserve() => room.ok(),
            _ = cancel => None,
        };
        match room {
            Some(room) => room.send(delivery),
            None => {
                // Cancelled, or the subscription's receiver was closed: stop the consumer;
                // the delivery is released as it drops.
                drop(delivery);
                if !*cancelled {
                    *cancelled = true;
                    self.cancel_consumer(consumer).await;
                }
            }
        }
    }

    async fn cancel_consumer(&self, consumer: &Consumer) {
        if !consumer.channel.is_open() {
            return;
        }
        let args = BasicCancelArguments::new(&consumer.consumer_tag);
        match within(consumer.channel.basic_cancel(args), "cancelling a consumer").await {
            Ok(Ok(_)) => tracing::info!(queue = %self.ctx.queue, "consumer cancelled"),
            Ok(Err(e)) => tracing::debug!(error = %e, "basic.cancel failed"),
            Err(e) => tracing::debug!(error = %e, "basic.cancel failed"),
        }
    }

    /// A delivery in mesh's types, registered with the tracker before anyone can settle it.
    fn delivery(&self, message: ConsumerMessage) -> Option<Delivery> {
        let ConsumerMessage {
            deliver,
            basic_properties,
            content,
            ..
        } = message;
        let deliver = deliver?;
        let tag = deliver.delivery_tag();
        let settle = self.tracker.as_ref().map(|tracker| {
            let _ = tracker.send(AckCommand::Delivered(tag));
            Settle {
                tracker: tracker.clone(),
                tag,
                done: false,
            }
        });
        let mut message = crate::convert::delivered(
            deliver.routing_key().clone(),
            &basic_properties.unwrap_or_default(),
            content.unwrap_or_default(),
        );
        // The broker's count belongs to this queue: a copy republished with it (a retry)
        // would carry a stale count into its next delivery, so it never stays in the message.
        let count = message.properties.headers.remove(DELIVERY_COUNT);
        let delivery_count = self.ctx.counts_deliveries.then(|| {
            count
                .and_then(|c| c.as_u64())
                .map_or(0, |c| u32::try_from(c).unwrap_or(u32::MAX))
        });
        let acker = AmqpAcker {
            ctx: self.ctx.clone(),
            settle,
            reply_to: message.properties.reply_to.clone(),
            correlation_id: message.properties.correlation_id.clone(),
        };
        Some(Delivery::new(
            message,
            deliver.redelivered(),
            delivery_count,
            self.ctx.queue.clone(),
            Box::new(acker),
        ))
    }
}

/// Resolves once the transport is closing (or gone).
pub(crate) async fn closing(shutdown: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns must not live across an await of the caller.
    let _ = shutdown.wait_for(|closing| *closing).await;
}

enum AckCommand {
    /// Handed out, not yet decided.
    Delivered(u64),
    /// Decided: ack.
    Ack {
        tag: u64,
        done: oneshot::Sender<Result<(), TransportError>>,
    },
    /// Decided: requeue.
    Release(u64),
}

/// The ack tracker of one channel; see the module docs.
async fn track(
    channel: Channel,
    closed: CloseSlot,
    mut commands: mpsc::UnboundedReceiver<AckCommand>,
) {
    let mut undecided = BTreeSet::new();
    let mut acks = Vec::new();
    let mut releases = Vec::new();
    while let Some(first) = commands.recv().await {
        let mut next = Some(first);
        let mut handled = 0;
        while let Some(command) = next {
            match command {
                AckCommand::Delivered(tag) => {
                    undecided.insert(tag);
                }
                AckCommand::Ack { tag, done } => {
                    undecided.remove(&tag);
                    acks.push((tag, done));
                }
                AckCommand::Release(tag) => {
                    undecided.remove(&tag);
                    releases.push(tag);
                }
            }
            handled += 1;
            next = if handled < ACK_BATCH {
                commands.try_recv().ok()
            } else {
                None
            };
        }
        flush(&channel, &closed, &undecided, &mut acks, &mut releases).await;
    }
    // Pump and ackers are gone: nothing more can be settled here.
    if channel.is_open() {
        let _ = within(channel.close(), "closing a consumer channel").await;
    }
}

/// Sends the settlements decided since the last flush.
async fn flush(
    channel: &Channel,
    closed: &CloseSlot,
    undecided: &BTreeSet<u64>,
    acks: &mut Vec<(u64, oneshot::Sender<Result<(), TransportError>>)>,
    releases: &mut Vec<u64>,
) {
    // A closed channel's tags died with it (the broker requeued them); sending on it would
    // reach whatever channel reuses its number, or close the connection.
    if !channel.is_open() {
        let close = take_close(closed);
        for (_, done) in acks.drain(..) {
            let error = TransportError::new(
                TransportErrorKind::ConnectionLost,
                "the delivery's channel is closed",
            );
            let error = match &close {
                Some(close) => error.with_source(close.clone()),
                None => error,
            };
            let _ = done.send(Err(error));
        }
        releases.clear();
        return;
    }
    for tag in releases.drain(..) {
        if let Err(e) = channel
            .basic_nack(BasicNackArguments::new(tag, false, true))
            .await
        {
            tracing::debug!(tag, error = %e, "releasing a delivery failed");
        }
    }
    if acks.is_empty() {
        return;
    }
    acks.sort_unstable_by_key(|(tag, _)| *tag);
    let tags: Vec<u64> = acks.iter().map(|(tag, _)| *tag).collect();
    let frames = ack_frames(&tags, undecided);
    let mut failure = None;
    for (tag, multiple) in frames {
        if let Err(e) = channel
            .basic_ack(BasicAckArguments::new(tag, multiple))
            .await
        {
            failure = Some(e.to_string());
            break;
        }
    }
    for (_, done) in acks.drain(..) {
        let outcome = match &failure {
            None => Ok(()),
            Some(e) => Err(TransportError::new(
                TransportErrorKind::ConnectionLost,
                format!("sending an ack failed: {e}"),
            )),
        };
        let _ = done.send(outcome);
    }
}

/// The `basic.ack` frames (tag, multiple) that settle `sorted` (decided tags, ascending)
/// while `undecided` tags are still with their handlers: one `multiple` ack for the run below
/// the oldest undecided tag (everything the broker still holds below it is decided: settled
/// earlier, released, or in this batch), then one ack per tag above it.
fn ack_frames(sorted: &[u64], undecided: &BTreeSet<u64>) -> Vec<(u64, bool)> {
    let oldest_undecided = undecided.first().copied().unwrap_or(u64::MAX);
    let below = sorted.partition_point(|tag| *tag < oldest_undecided);
    let mut frames = Vec::with_capacity(sorted.len() - below + 1);
    match below {
        0 => {}
        1 => frames.push((sorted[0], false)),
        n => frames.push((sorted[n - 1], true)),
    }
    frames.extend(sorted[below..].iter().map(|tag| (*tag, false)));
    frames
}

/// The right to settle one manual-ack delivery. Dropped undecided, it releases the
/// delivery (a requeue), so a message is never lost because a task died.
struct Settle {
    tracker: mpsc::UnboundedSender<AckCommand>,
    tag: u64,
    done: bool,
}

impl Settle {
    async fn ack(mut self) -> Result<(), TransportError> {
        self.done = true;
        let (done, outcome) = oneshot::channel();
        self.tracker
            .send(AckCommand::Ack {
                tag: self.tag,
                done,
            })
            .map_err(|_| lost())?;
        outcome.await.unwrap_or_else(|_| Err(lost()))
    }
}

impl Drop for Settle {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.tracker.send(AckCommand::Release(self.tag));
        }
    }
}

fn lost() -> TransportError {
    TransportError::new(
        TransportErrorKind::ConnectionLost,
        "the delivery's channel is gone",
    )
}

/// Settles one delivery; see [`Acker`].
struct AmqpAcker {
    ctx: Arc<SubscriptionCtx>,
    /// `None` on a no-ack (ephemeral) subscription.
    settle: Option<Settle>,
    reply_to: Option<String>,
    correlation_id: Option<String>,
}

impl AmqpAcker {
    /// Publishes `outgoing`, waits for its confirm, then acks; on any failure the delivery
    /// is released (dropping `settle` does it), so it is never lost.
    async fn publish_then_ack(
        ctx: Arc<SubscriptionCtx>,
        settle: Settle,
        outgoing: Outgoing,
    ) -> Result<(), TransportError> {
        let confirm = ctx.publisher.publish(outgoing, None).await?;
        confirm.await?;
        settle.ack().await
    }
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
            // Mandatory: if the delay queue is gone, the copy must not vanish while the
            // original is acked.
            let outgoing = Outgoing {
                exchange: String::new(),
                routing_key: delay_queue,
                message: copy,
                mandatory: true,
                force_persistent: true,
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
            let outgoing = Outgoing {
                exchange: DEAD_EXCHANGE.to_owned(),
                routing_key: copy.routing_key.clone(),
                message: copy,
                mandatory: true,
                force_persistent: true,
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
            // Not mandatory: a caller that gave up has no reply queue any more, and that is
            // not the server's failure.
            let outgoing = Outgoing {
                exchange: String::new(),
                routing_key: reply_to,
                message: reply,
                mandatory: false,
                force_persistent: false,
            };
            Self::publish_then_ack(ctx, settle, outgoing).await
        })
    }

    fn release(self: Box<Self>) {
        // Dropping the settle right releases the delivery.
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consecutive_decided_tags_are_acked_with_one_frame() {
        assert_eq!(ack_frames(&[1, 2, 3, 4], &BTreeSet::new()), [(4, true)]);
        assert_eq!(ack_frames(&[7], &BTreeSet::new()), [(7, false)]);
        assert!(ack_frames(&[], &BTreeSet::new()).is_empty());
    }

    #[test]
    fn an_undecided_tag_is_never_covered_by_a_multiple_ack() {
        // 3 is still with its handler: 1-2 go as one, 4 and 5 one by one.
        let undecided = BTreeSet::from([3]);
        assert_eq!(
            ack_frames(&[1, 2, 4, 5], &undecided),
            [(2, true), (4, false), (5, false)]
        );
        // Nothing below the oldest undecided: no multiple at all.
        let undecided = BTreeSet::from([1]);
        assert_eq!(ack_frames(&[2, 3], &undecided), [(2, false), (3, false)]);
        for frame in ack_frames(&[1, 2, 4, 5, 9], &BTreeSet::from([3, 6])) {
            if frame.1 {
                assert!(frame.0 < 3);
            }
        }
    }
}
