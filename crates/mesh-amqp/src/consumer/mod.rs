//! Consumers: a channel per subscription, read straight by the [`Subscription`]; a pump
//! that keeps it attached across failures; and the acker that settles each delivery.
//!
//! # Design
//!
//! Each subscription has a channel of its own on the consume connection, with
//! `basic.qos(prefetch, global = false)` (per consumer: global QoS on a quorum queue closes
//! the connection). The subscription's reader polls the client library's stream itself (a
//! [`DeliveryFeed`]) and turns each message into a [`Delivery`] there, so a delivery crosses
//! no task of ours on its way to a handler. Two tasks serve it:
//!
//! - the **pump** owns the consumer's lifecycle: it sends `basic.cancel` when the
//!   subscription is cancelled or dropped, and re-attaches when the consumer stops (see
//!   below), handing the new consumer's stream to the subscription;
//! - the **ack tracker** owns every settlement sent on the channel. It knows which delivery
//!   tags are handed out and not yet decided (the reader registers each in a set they share,
//!   without waking it), and coalesces acks: after draining whatever commands are waiting,
//!   it acks the decided tags below the oldest undecided one with one
//!   `basic.ack(multiple)` and the rest one by one. While fewer than half the prefetch is
//!   decided, and handlers still run on other deliveries of the channel or nobody awaits
//!   the acks decided (all handed on with [`Delivery::ack_detached`], as the SDK's consumer
//!   loop does), it first waits up to [`ACK_LINGER`] (1 ms) for more decisions to join: a
//!   quorum queue applies every ack frame as a command of its replicated log, so frames,
//!   not messages, are what an ack costs the broker. So a delivery is never acked before
//!   its handler finished, a busy consumer sends one ack frame per 16 to 32 deliveries
//!   (with the default prefetch of 32), and a consumer awaiting each ack while handling one
//!   delivery at a time acks at once. A detached ack waits at most the linger: it delays no
//!   caller, and the unacked messages it holds are far fewer than the prefetch at any rate
//!   the linger lets through. Releases are `basic.nack(requeue)`, sent at once and
//!   before the acks of the same batch so a `multiple` ack never covers them.
//!   [`Delivery::ack_all`] sends the acks of one channel's deliveries as a single command
//!   (one wake of the tracker and one answer, instead of one per delivery), at once: a
//!   batch is what the wait would gather, and its caller waits for it (the audit logger's
//!   next batch fills only as the broker's credit comes back). An ack handed on with
//!   [`Delivery::ack_detached`] (the SDK's consumer loop acks so) has no answer at all:
//!   nobody waits for it, and the tracker reports a failure to the [`AckFailed`] it came
//!   with. The tracker takes every command already queued before it
//!   closes its channel at the transport's close, so such an ack is sent (or reported)
//!   before the connection goes.
//!
//! # Re-attaching
//!
//! A consumer can stop without being asked to: the broker cancels it (`basic.cancel`, when
//! its queue is deleted), closes its channel (a consumer timeout), or the connection is lost.
//! The pump learns it from the channel's callbacks (a broker's cancel or close), from the
//! link (a lost connection) or from the reader (the stream ended), whichever comes first, so
//! health reports it even while nobody reads the subscription. It re-attaches: after a lost
//! connection it waits for the link's next connection (up once the topology is declared
//! again), otherwise for a backoff delay; then it opens a fresh channel, declares its queue,
//! the queue's retry queues and bindings again from the recorded [`Topology`] (a deleted
//! queue comes back; not on the first attempt after a lost connection, whose replay just
//! declared them all), sets the prefetch, consumes, and hands the new stream to the
//! subscription, which switches to it once the old one has nothing ready. Failed attempts
//! back off like reconnects; the backoff starts over once a consumer stayed attached for
//! [`STABLE_AFTER`], so a queue the broker keeps cancelling is not hammered. The
//! subscription's reader sees nothing but, perhaps, redeliveries. An ephemeral subscription
//! gets a new server-named queue, bound to its patterns (its old one died with its channel).
//!
//! # Fencing stale deliveries
//!
//! Delivery tags are numbers local to a channel: acking tag 5 of a lost channel on its
//! replacement would ack another message, or close the channel (`PRECONDITION_FAILED -
//! unknown delivery tag`). So each channel has its own tracker, and an acker holds the
//! tracker of the channel its delivery came on, never the current one: once that
//! channel is gone, every settlement fails with `ConnectionLost` (the broker has requeued
//! the message already and redelivers it on the new channel). Deliveries that were still in
//! the client library's buffer when their channel died are dropped, not handed out: nothing
//! could settle them. The tracker closes its channel when the reader and every acker are
//! gone, so acks of deliveries still buffered after a cancel keep working.
//!
//! Ephemeral subscriptions consume with `no_ack`: there is no tracker, and settling is a
//! no-op.
//!
//! # State and shell
//!
//! The tracker's bookkeeping — what is undecided, which frames settle what was decided, what
//! a lost channel does to them — is the [`ack::AckTracker`] state machine, which does no I/O
//! and is tested alone (unit and property tests). The tracker task is its shell: it feeds it
//! the handlers' decisions, sends the frames it returns and answers who waits for them; the
//! reader registers each delivery in it, under a lock held only for that.

// `pub(crate)`: the micro-benchmarks reach it through `crate::bench_internals`.
pub(crate) mod ack;
pub(crate) mod forward;
#[cfg(test)]
mod props;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use amqprs::channel::{
    BasicAckArguments, BasicCancelArguments, BasicConsumeArguments, BasicNackArguments,
    BasicQosArguments, Channel, ConsumerMessage,
};
use mesh_core::naming::{DEAD_EXCHANGE, REPLY_EXCHANGE, RETRY_EXCHANGE};
use mesh_core::{
    AckBatch, AckFailed, AckGroup, Acker, BoxFuture, Delivery, DeliveryFeed, Subscription,
    TransportError, TransportErrorKind, WireMessage,
};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::DropGuard;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::Instrument;

use crate::connection::backoff::Backoff;
use crate::connection::link::{ConsumeLink, LinkStatus};
use crate::declare::{take_close, within, CloseSlot, DeclareChannel};
use crate::error::{from_client, from_close};
use crate::lifecycle::{Counters, Lifecycle};
use crate::publisher::{Payload, Publication, Publisher};
use crate::topology::{BindingDecl, Topology};
use ack::{AckTracker, Flush, Frame};

/// The header quorum queues count redeliveries in.
const DELIVERY_COUNT: &str = "x-delivery-count";

/// How many commands the ack tracker handles before it sends what they decided.
const ACK_BATCH: usize = 1024;

/// How long the ack tracker holds decided acks back for more to join them in one frame,
/// at most: only while fewer than half the prefetch is decided, and handlers still run on
/// other deliveries of the channel or nobody awaits these acks (see
/// [`AckTracker::should_linger`]).
const ACK_LINGER: Duration = Duration::from_millis(1);

/// A consumer attached this long is stable: the next re-attach starts its backoff over.
const STABLE_AFTER: Duration = Duration::from_secs(5);

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

/// Consumers the transport should have, and has, attached.
#[derive(Debug, Default)]
pub(crate) struct ConsumerCounts {
    pub(crate) expected: AtomicUsize,
    pub(crate) attached: AtomicUsize,
}

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
}

/// What a subscription consumes.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// A named queue of the recorded topology (consumer, serve or dead-letter queue).
    Named(String),
    /// A server-named queue bound to these patterns on this exchange (`mesh.events`, or
    /// `mesh.events.dead` for a tap of dead letters), declared anew for each attachment.
    Ephemeral {
        exchange: &'static str,
        patterns: Vec<String>,
    },
}

/// How to attach one subscription, again and again.
#[derive(Debug, Clone)]
pub(crate) struct AttachSpec {
    pub(crate) source: Source,
    pub(crate) prefetch: u16,
    pub(crate) manual_ack: bool,
    pub(crate) delay_queues: Vec<String>,
    pub(crate) counts_deliveries: bool,
}

/// What attaching needs from the transport.
#[derive(Debug, Clone)]
pub(crate) struct Env {
    pub(crate) link: ConsumeLink,
    pub(crate) publisher: Publisher,
    pub(crate) topology: Arc<Mutex<Topology>>,
    pub(crate) counts: Arc<ConsumerCounts>,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) backoff: Backoff,
    /// Whether its consumers' stops and re-attaches count in the transport's stats (a
    /// subscription's do; retry forwarders' do not, like their health).
    pub(crate) in_stats: bool,
}

/// A channel consuming one queue.
pub(crate) struct Consumer {
    pub(crate) queue: String,
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
        queue: queue.to_owned(),
        channel,
        closed,
        consumer_tag,
        stream,
        manual_ack,
    })
}

/// Attaches `spec` on a new channel of the consume link. With `redeclare`, a named queue,
/// its retry queues and its bindings are declared again first, from the recorded topology.
async fn attach(
    env: &Env,
    spec: &AttachSpec,
    redeclare: bool,
) -> Result<(Consumer, Arc<SubscriptionCtx>), TransportError> {
    let (channel, closed) = env.link.channel("consume").await?;
    let declare = DeclareChannel::wrap(channel.clone(), closed.clone());
    let attached = async {
        let queue = match &spec.source {
            Source::Named(queue) => {
                if redeclare {
                    redeclare_queue(&declare, queue, &spec.delay_queues, &env.topology).await?;
                }
                queue.clone()
            }
            Source::Ephemeral { exchange, patterns } => {
                let name = declare.server_named().await?;
                for pattern in patterns {
                    declare
                        .bind(&BindingDecl::new(*exchange, &name, pattern))
                        .await?;
                }
                name
            }
        };
        consume(
            channel.clone(),
            closed.clone(),
            &queue,
            spec.prefetch,
            spec.manual_ack,
        )
        .await
    }
    .await;
    match attached {
        Ok(consumer) => {
            let ctx = Arc::new(SubscriptionCtx {
                queue: consumer.queue.clone(),
                delay_queues: spec.delay_queues.clone(),
                counts_deliveries: spec.counts_deliveries,
                publisher: env.publisher.clone(),
            });
            Ok((consumer, ctx))
        }
        Err(error) => {
            declare.close().await;
            Err(error)
        }
    }
}

/// Declares a named queue, its retry queues and its bindings as the topology records them.
async fn redeclare_queue(
    declare: &DeclareChannel,
    queue: &str,
    delay_queues: &[String],
    topology: &Mutex<Topology>,
) -> Result<(), TransportError> {
    let (queues, bindings) = match topology.lock() {
        Ok(topology) => (
            std::iter::once(queue)
                .chain(delay_queues.iter().map(String::as_str))
                .filter_map(|name| topology.queue(name).cloned())
                .collect::<Vec<_>>(),
            topology.bindings_of(queue).cloned().collect::<Vec<_>>(),
        ),
        Err(_) => return Ok(()),
    };
    for decl in &queues {
        declare.queue(decl).await?;
    }
    for binding in &bindings {
        declare.bind(binding).await?;
    }
    Ok(())
}

/// Attaches `spec` and starts the pump that keeps the returned subscription attached for as
/// long as it is not cancelled, re-attaching whenever the consumer stops. `declared` says the
/// queue was just declared (no need to again). `forwarders` stop its retry queues'
/// forwarders ([`forward`]) when the subscription is dropped.
pub(crate) async fn subscribe(
    env: Env,
    spec: AttachSpec,
    declared: bool,
    forwarders: Vec<DropGuard>,
) -> Result<Subscription, TransportError> {
    let generation = env.link.status().borrow().generation;
    let (consumer, ctx) = attach(&env, &spec, !declared).await?;
    // The pump hands over one attachment at a time, and only after the last one ended.
    let (readers_tx, readers) = mpsc::channel(1);
    let (cancel_tx, cancel) = oneshot::channel();
    env.counts.expected.fetch_add(1, Ordering::AcqRel);
    env.counts.attached.fetch_add(1, Ordering::AcqRel);
    let queue = ctx.queue.clone();
    let (attachment, reader) = Attachment::new(consumer, ctx, generation, spec.prefetch, &env);
    let span = tracing::info_span!(parent: None, "mesh_amqp.subscription", %queue);
    let pump = Pump {
        backoff: env.backoff.clone(),
        env,
        spec,
        readers: readers_tx,
    };
    // Tracked: the transport's close waits for the pump to have closed its channel.
    let tasks = pump.env.link.shared().channel_tasks.clone();
    tasks.spawn(pump.run(attachment, cancel).instrument(span));
    let feed = Feed {
        readers,
        current: Some(reader),
        _forwarders: forwarders,
    };
    Ok(Subscription::from_feed(queue, feed, cancel_tx))
}

/// Why serving one attachment ended.
enum End {
    /// Cancelled by the subscription (or the transport closing), or the subscription is
    /// gone: the pump stops.
    Stopped,
    /// The consumer stopped on its own: the pump re-attaches.
    Lost {
        reason: String,
        /// With its connection (not only its channel or consumer): re-attaching waits for
        /// the next connection.
        connection: bool,
    },
    /// Its channel is gone with no close from the broker while the link still looks up:
    /// either the connection is going and the link learns it a moment later, or the ack
    /// tracker closed the channel itself after a broker's cancel. The link tells which.
    Unsure,
}

/// How long a pump waits for the link to tell whether an [`End::Unsure`] was the
/// connection going.
const LINK_NEWS: Duration = Duration::from_secs(2);

/// The pump's side of one attached consumer: enough to cancel it and to tell why it ended.
struct Attachment {
    queue: String,
    channel: Channel,
    closed: CloseSlot,
    consumer_tag: String,
    manual_ack: bool,
    /// The link's generation when it attached (its connection's, or an older one).
    generation: u64,
    /// Resolves (with an error) once the attachment's [`Reader`] is gone: its stream ended,
    /// or the subscription was dropped.
    ended: oneshot::Receiver<()>,
    /// Held by whoever cancels the consumer or closes the channel; see [`ChannelControl`].
    control: ChannelControl,
}

/// Held while the pump cancels the consumer and while the ack tracker (or the pump) closes
/// the channel, so the two never cross.
///
/// They would otherwise race when a subscription is dropped: the pump's `basic.cancel` and
/// the tracker's `channel.close` leave at the same moment from two tasks, and the client
/// library sends a method on a channel whose close already left without checking. The
/// broker answers a method on a channel it has closed with a *connection* error (`504
/// CHANNEL_ERROR - expected 'channel.open'`), which costs every channel of the consume
/// connection. Under the lock each checks the channel is still open before sending.
type ChannelControl = Arc<tokio::sync::Mutex<()>>;

/// The subscription's side of one attached consumer: the client library's stream, read
/// straight by whoever reads the subscription, and what makes its messages deliveries.
struct Reader {
    stream: mpsc::UnboundedReceiver<ConsumerMessage>,
    channel: Channel,
    manual_ack: bool,
    ctx: Arc<SubscriptionCtx>,
    /// `None` on a no-ack subscription.
    tracker: Option<Tracker>,
    /// Dropped with the reader: tells the pump this attachment ended.
    _ended: oneshot::Sender<()>,
}

impl Attachment {
    /// Splits a fresh consumer into the pump's and the reader's halves, and starts its ack
    /// tracker.
    fn new(
        consumer: Consumer,
        ctx: Arc<SubscriptionCtx>,
        generation: u64,
        prefetch: u16,
        env: &Env,
    ) -> (Attachment, Reader) {
        let Consumer {
            queue,
            channel,
            closed,
            consumer_tag,
            stream,
            manual_ack,
        } = consumer;
        let control = ChannelControl::default();
        let tracker = manual_ack.then(|| {
            let (commands, rx) = mpsc::unbounded_channel();
            let state = Arc::new(Mutex::new(AckTracker::default()));
            let span = tracing::debug_span!(parent: None, "mesh_amqp.acks", queue = %ctx.queue);
            // Not tracked as a task (it lives as long as the reader and the ackers, which
            // may outlive the transport), but by a token it drops once its channel is
            // closed: the transport's close waits for that.
            let closing = Closing {
                shutdown: env.shutdown.clone(),
                token: env.link.shared().channel_tasks.token(),
            };
            tokio::spawn(
                track(
                    channel.clone(),
                    closed.clone(),
                    control.clone(),
                    state.clone(),
                    usize::from(prefetch / 2),
                    rx,
                    closing,
                )
                .instrument(span),
            );
            Tracker { commands, state }
        });
        let (ended_tx, ended) = oneshot::channel();
        let reader = Reader {
            stream,
            channel: channel.clone(),
            manual_ack,
            ctx,
            tracker,
            _ended: ended_tx,
        };
        let attachment = Attachment {
            queue,
            channel,
            closed,
            consumer_tag,
            manual_ack,
            generation,
            ended,
            control,
        };
        (attachment, reader)
    }
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
        let mut message = crate::convert::delivered(
            deliver.exchange(),
            deliver.routing_key().clone(),
            &basic_properties.unwrap_or_default(),
            content.unwrap_or_default(),
        );
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

/// What a [`Subscription`] of this transport reads: the current attachment's stream, then
/// the next one the pump hands over (once the current one has nothing ready: what it still
/// holds came on a channel that is gone or whose consumer the broker cancelled), until the
/// pump stops and the last stream ended.
struct Feed {
    /// Declared first, so dropped first: by the time the pump sees the current reader gone,
    /// it can tell the subscription went with it.
    readers: mpsc::Receiver<Reader>,
    current: Option<Reader>,
    /// Stop the forwarders of the queue's retry queues once the subscription is gone.
    _forwarders: Vec<DropGuard>,
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

struct Pump {
    env: Env,
    spec: AttachSpec,
    /// Where re-attached consumers go to the subscription; closed once it is dropped.
    readers: mpsc::Sender<Reader>,
    backoff: Backoff,
}

impl Pump {
    async fn run(mut self, mut attachment: Attachment, mut cancel: oneshot::Receiver<()>) {
        let mut shutdown = self.env.shutdown.clone();
        loop {
            let attached_at = Instant::now();
            let end = self
                .serve(&mut attachment, &mut cancel, &mut shutdown)
                .await;
            self.env.counts.attached.fetch_sub(1, Ordering::AcqRel);
            let (reason, connection_lost) = match end {
                End::Stopped => {
                    // A manual-ack channel is closed by its tracker once the reader and
                    // the ackers are gone; a no-ack one has none, and nothing can be
                    // settled on it.
                    if !attachment.manual_ack {
                        close_channel(&attachment.channel, &attachment.control).await;
                    }
                    break;
                }
                End::Lost { reason, connection } => (reason, connection),
                End::Unsure => {
                    // Taken for a cancel, a lost connection would have the pump back off
                    // (longer each time, until it stays attached a while) instead of
                    // re-attaching as soon as the next connection is up.
                    if self.connection_went(attachment.generation).await {
                        ("the connection was lost".to_owned(), true)
                    } else {
                        ("the broker cancelled the consumer".to_owned(), false)
                    }
                }
            };
            let queue = attachment.queue.clone();
            let generation = attachment.generation;
            if self.env.in_stats {
                Counters::bump(&self.env.link.shared().counters.consumer_cancels);
            }
            tracing::warn!(%queue, %reason, "consumer stopped; re-attaching");
            self.env
                .link
                .shared()
                .emit(Lifecycle::ConsumerCancelled { queue, reason });
            if attached_at.elapsed() >= STABLE_AFTER {
                self.backoff.reset();
            }
            // After a lost connection, the next one is what to wait for (the supervisor
            // spaces its attempts); otherwise the backoff spaces ours.
            let after = connection_lost.then_some(generation);
            match self.reattach(after, &mut cancel, &mut shutdown).await {
                Some((next, reader)) => {
                    attachment = next;
                    if self.env.in_stats {
                        Counters::bump(&self.env.link.shared().counters.reattached);
                    }
                    let queue = attachment.queue.clone();
                    tracing::info!(%queue, prefetch = self.spec.prefetch, "consumer re-attached");
                    self.env
                        .link
                        .shared()
                        .emit(Lifecycle::ConsumerReattached { queue });
                    // Counted last: whoever sees the consumers all attached (`health()`)
                    // finds the re-attach counted and reported.
                    self.env.counts.attached.fetch_add(1, Ordering::AcqRel);
                    // If the subscription is gone meanwhile, `serve` sees it at once.
                    let _ = self.readers.send(reader).await;
                }
                None => break,
            }
        }
        self.env.counts.expected.fetch_sub(1, Ordering::AcqRel);
        tracing::debug!("subscription ended");
    }

    /// Whether the link reports the connection of generation `generation` gone within
    /// [`LINK_NEWS`].
    async fn connection_went(&self, generation: u64) -> bool {
        let mut status = self.env.link.status();
        let went = async {
            status
                .wait_for(|s| !s.connected || s.generation > generation)
                .await
                .is_ok()
        };
        tokio::time::timeout(LINK_NEWS, went).await.unwrap_or(false)
    }

    /// Waits until one attachment is cancelled, its subscription is gone, or it stops on
    /// its own: the broker closed its channel or cancelled it, the connection was lost, or
    /// its stream ended.
    async fn serve(
        &mut self,
        attachment: &mut Attachment,
        cancel: &mut oneshot::Receiver<()>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> End {
        let generation = attachment.generation;
        let link = self.env.link.clone();
        let mut status = link.status();
        tokio::select! {
            biased;
            // Fires on `Subscription::cancel` and when the subscription is dropped.
            _ = &mut *cancel => {}
            () = self.readers.closed() => {}
            () = closing(shutdown) => {}
            () = attachment.closed.stopped() => return why_ended(attachment, &link.status()),
            up = status.wait_for(|s| !s.connected || s.generation > generation) => {
                if up.is_ok() {
                    return End::Lost {
                        reason: "the connection was lost".to_owned(),
                        connection: true,
                    };
                }
            }
            _ = &mut attachment.ended => {
                // The reader went with its subscription, not with its stream.
                if !self.readers.is_closed() {
                    return why_ended(attachment, &link.status());
                }
            }
        }
        cancel_consumer(attachment).await;
        End::Stopped
    }

    /// Attaches again once the link is up — first, with `after`, once a connection newer
    /// than generation `after` is — backing off between failed attempts; `None` if cancelled
    /// meanwhile.
    async fn reattach(
        &mut self,
        mut after: Option<u64>,
        cancel: &mut oneshot::Receiver<()>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<(Attachment, Reader)> {
        let mut status = self.env.link.status();
        // A new connection counts as up only once the link replayed the whole recorded
        // topology on it (this queue, its retry queues and bindings among it): the first
        // attempt after a lost connection consumes without declaring them a second time
        // (hundreds of subscriptions re-attaching at once would double the declarations).
        // Any later attempt declares them again, in case the queue went meanwhile.
        let mut replayed = after.is_some();
        loop {
            let delay = match after {
                Some(_) => Duration::ZERO,
                None => self.backoff.next_delay(),
            };
            let newer = after.take().unwrap_or(0);
            let ready = async {
                tokio::time::sleep(delay).await;
                status
                    .wait_for(|s| s.connected && s.generation > newer)
                    .await
                    .is_ok()
            };
            tokio::select! {
                ready = ready => if !ready { return None },
                _ = &mut *cancel => return None,
                () = self.readers.closed() => return None,
                () = closing(shutdown) => return None,
            }
            let generation = status.borrow().generation;
            let redeclare = !std::mem::take(&mut replayed);
            match attach(&self.env, &self.spec, redeclare).await {
                Ok((consumer, ctx)) => {
                    return Some(Attachment::new(
                        consumer,
                        ctx,
                        generation,
                        self.spec.prefetch,
                        &self.env,
                    ))
                }
                Err(error) => tracing::warn!(
                    error = %error,
                    failures = self.backoff.failures(),
                    "re-attaching a consumer failed; retrying"
                ),
            }
        }
    }
}

/// Why an attachment whose stream ended stopped. A channel found closed with no close
/// from the broker went with its connection only if the link says so: the ack tracker
/// closes the channel itself once the reader and every acker are gone, which is what
/// follows a broker's cancel on a consumer holding no delivery (a forwarder waiting for
/// copies, say), and waiting for a new connection then would wait for good. While the
/// link still looks up, the pump asks it again ([`End::Unsure`]): the stream of a lost
/// connection can end before the link has noticed.
fn why_ended(attachment: &Attachment, status: &watch::Receiver<LinkStatus>) -> End {
    let link_up = {
        let status = status.borrow();
        status.connected && status.generation == attachment.generation
    };
    let (reason, connection) = match take_close(&attachment.closed) {
        Some(close) => (close.to_string(), false),
        None if attachment.channel.is_open() => {
            ("the broker cancelled the consumer".to_owned(), false)
        }
        None if link_up => return End::Unsure,
        None => ("the connection was lost".to_owned(), true),
    };
    End::Lost { reason, connection }
}

async fn cancel_consumer(attachment: &Attachment) {
    let _control = attachment.control.lock().await;
    if !attachment.channel.is_open() {
        return;
    }
    let args = BasicCancelArguments::new(&attachment.consumer_tag);
    match within(
        attachment.channel.basic_cancel(args),
        "cancelling a consumer",
    )
    .await
    {
        Ok(Ok(_)) => tracing::info!(queue = %attachment.queue, "consumer cancelled"),
        Ok(Err(e)) => tracing::debug!(error = %e, "basic.cancel failed"),
        Err(e) => tracing::debug!(error = %e, "basic.cancel failed"),
    }
}

/// Resolves once the transport is closing (or gone).
pub(crate) async fn closing(shutdown: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns must not live across an await of the caller.
    let _ = shutdown.wait_for(|closing| *closing).await;
}

enum AckCommand {
    /// Decided: ack.
    Ack { tag: u64, done: Done },
    /// Decided together: ack them all ([`Delivery::ack_all`](mesh_core::Delivery::ack_all)).
    AckMany { tags: Vec<u64>, done: Done },
    /// Decided: requeue.
    Release(u64),
}

/// Who learns how an ack went.
enum Done {
    /// The acker's future waits for the outcome ([`Acker::ack`]).
    Answer(oneshot::Sender<Result<(), TransportError>>),
    /// Nobody waits; a failure is reported ([`Acker::ack_detached`]).
    Report(AckFailed),
}

impl Done {
    /// Whether a caller awaits the outcome.
    fn is_awaited(&self) -> bool {
        matches!(self, Done::Answer(_))
    }

    fn tell(self, outcome: Result<(), TransportError>) {
        match self {
            Done::Answer(answer) => {
                // The acker's future may be gone (dropped by its caller): nobody to tell.
                let _ = answer.send(outcome);
            }
            Done::Report(failed) => {
                if let Err(error) = outcome {
                    failed(error);
                }
            }
        }
    }
}

/// A channel's ack tracker state. Shared rather than owned by the tracker task: the reader
/// registers a delivery without waking the task. Locked only for a call into the state
/// machine, never across an await.
type TrackerState = Arc<Mutex<AckTracker<Done>>>;

fn lock(state: &TrackerState) -> std::sync::MutexGuard<'_, AckTracker<Done>> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The reader's handle on a channel's ack tracker.
struct Tracker {
    commands: mpsc::UnboundedSender<AckCommand>,
    state: TrackerState,
}

impl Tracker {
    /// Registers a delivery as handed out: the right to settle it.
    fn delivered(&self, tag: u64) -> Settle {
        lock(&self.state).delivered(tag);
        Settle {
            tracker: self.commands.clone(),
            tag,
            done: false,
        }
    }
}

/// How an ack tracker learns that the transport closes, and tells it when its channel is
/// closed (by dropping the token).
struct Closing {
    shutdown: watch::Receiver<bool>,
    token: TaskTrackerToken,
}

/// The ack tracker task of one channel; see the module docs.
///
/// It closes its channel once the reader and every acker are gone, or as soon as the
/// transport closes (the broker requeues what is unsettled; a later ack fails with
/// `ConnectionLost`), so that the close is acknowledged before the connection goes.
async fn track(
    channel: Channel,
    closed: CloseSlot,
    control: ChannelControl,
    state: TrackerState,
    linger_acks: usize,
    mut commands: mpsc::UnboundedReceiver<AckCommand>,
    transport: Closing,
) {
    let Closing {
        mut shutdown,
        token,
    } = transport;
    let mut token = Some(token);
    loop {
        let first = tokio::select! {
            biased;
            command = commands.recv() => match command {
                Some(command) => command,
                None => break,
            },
            () = closing(&mut shutdown), if token.is_some() => {
                close_channel(&channel, &control).await;
                token = None;
                continue;
            }
        };
        let mut next = Some(first);
        let mut linger_until = None;
        let mut ended = false;
        // Whether someone awaits an ack of this flush (else all were handed on detached).
        let mut awaited = false;
        let mut closing_now = false;
        let flush = loop {
            {
                let mut tracker = lock(&state);
                let mut handled = 0;
                while let Some(command) = next.take() {
                    match command {
                        AckCommand::Ack { tag, done } => {
                            awaited |= done.is_awaited();
                            tracker.ack(tag, done);
                        }
                        AckCommand::AckMany { tags, done } => {
                            awaited |= done.is_awaited();
                            tracker.ack_many(tags, done);
                        }
                        AckCommand::Release(tag) => tracker.release(tag),
                    }
                    handled += 1;
                    if handled < ACK_BATCH {
                        next = commands.try_recv().ok();
                    }
                }
                let lingered = linger_until.is_some_and(|at| Instant::now() >= at);
                if ended || lingered || closing_now || !tracker.should_linger(linger_acks, awaited)
                {
                    // A closed channel's tags died with it (the broker requeued them);
                    // sending on it would reach whatever channel reuses its number, or
                    // close the connection.
                    break tracker.flush(channel.is_open());
                }
            }
            // Handlers are still running on deliveries of this channel, or nobody waits for
            // these acks: more acks, due any moment, can join them in one frame.
            let at = *linger_until.get_or_insert_with(|| Instant::now() + ACK_LINGER);
            tokio::select! {
                biased;
                command = commands.recv() => match command {
                    Some(command) => next = Some(command),
                    None => ended = true,
                },
                // The transport closes: what is decided goes now, before the channel.
                () = closing(&mut shutdown), if token.is_some() => closing_now = true,
                () = tokio::time::sleep_until(at) => {}
            }
        };
        send(&channel, &closed, flush).await;
        if ended {
            break;
        }
    }
    // The reader and the ackers are gone: nothing more can be settled here.
    close_channel(&channel, &control).await;
    drop(token);
}

/// Closes a consumer channel unless it is closed already, never while the pump cancels its
/// consumer (see [`ChannelControl`]).
async fn close_channel(channel: &Channel, control: &ChannelControl) {
    let _control = control.lock().await;
    if channel.is_open() {
        let _ = within(channel.clone().close(), "closing a consumer channel").await;
    }
}

/// Sends what the tracker decided and answers who waits for it.
async fn send(channel: &Channel, closed: &CloseSlot, flush: Flush<Done>) {
    if flush.lost {
        let close = take_close(closed);
        for done in flush.waiters {
            let error = TransportError::new(
                TransportErrorKind::ConnectionLost,
                "the delivery's channel is closed",
            );
            let error = match &close {
                Some(close) => error.with_source(close.clone()),
                None => error,
            };
            done.tell(Err(error));
        }
        return;
    }
    let mut failure = None;
    for frame in flush.frames {
        match frame {
            Frame::Release(tag) => {
                if let Err(e) = channel
                    .basic_nack(BasicNackArguments::new(tag, false, true))
                    .await
                {
                    tracing::debug!(tag, error = %e, "releasing a delivery failed");
                }
            }
            Frame::Ack { tag, multiple } => {
                if let Err(e) = channel
                    .basic_ack(BasicAckArguments::new(tag, multiple))
                    .await
                {
                    failure = Some(e.to_string());
                    break;
                }
            }
        }
    }
    for done in flush.waiters {
        let outcome = match &failure {
            None => Ok(()),
            Some(e) => Err(TransportError::new(
                TransportErrorKind::ConnectionLost,
                format!("sending an ack failed: {e}"),
            )),
        };
        done.tell(outcome);
    }
}

/// The right to settle one manual-ack delivery. Dropped undecided, it releases the
/// delivery (a requeue), so a message is never lost because a task died.
struct Settle {
    tracker: mpsc::UnboundedSender<AckCommand>,
    tag: u64,
    done: bool,
}

impl Settle {
    /// Whether its channel may still be there: its ack tracker ends once the channel is gone.
    fn is_live(&self) -> bool {
        !self.tracker.is_closed()
    }

    async fn ack(mut self) -> Result<(), TransportError> {
        self.done = true;
        let (done, outcome) = oneshot::channel();
        self.tracker
            .send(AckCommand::Ack {
                tag: self.tag,
                done: Done::Answer(done),
            })
            .map_err(|_| lost())?;
        outcome.await.unwrap_or_else(|_| Err(lost()))
    }

    /// Hands the ack to the tracker, which reports a failure to `failed`.
    fn ack_detached(mut self, failed: AckFailed) {
        self.done = true;
        let command = AckCommand::Ack {
            tag: self.tag,
            done: Done::Report(failed),
        };
        if let Err(mpsc::error::SendError(AckCommand::Ack { done, .. })) =
            self.tracker.send(command)
        {
            // The tracker is gone with its channel.
            done.tell(Err(lost()));
        }
    }
}

impl Settle {
    /// Adds this delivery's ack to `batch`, in the group of its channel.
    fn ack_into(mut self, batch: &mut AckBatch) {
        let tag = self.tag;
        batch.join(
            |group: &ChannelAcks| group.tracker.same_channel(&self.tracker),
            || ChannelAcks {
                tracker: self.tracker.clone(),
                tags: Vec::new(),
            },
            |group| group.tags.push(tag),
        );
        // The group settles it now.
        self.done = true;
    }
}

/// The acks of one channel's deliveries, sent to its tracker as one command.
struct ChannelAcks {
    tracker: mpsc::UnboundedSender<AckCommand>,
    tags: Vec<u64>,
}

impl AckGroup for ChannelAcks {
    fn len(&self) -> usize {
        self.tags.len()
    }

    fn send(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async move {
            let ChannelAcks { tracker, tags } = *self;
            let (done, outcome) = oneshot::channel();
            tracker
                .send(AckCommand::AckMany {
                    tags,
                    done: Done::Answer(done),
                })
                .map_err(|_| lost())?;
            outcome.await.unwrap_or_else(|_| Err(lost()))
        })
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
            match Self::publish_copy(&ctx, outgoing.clone()).await {
                Ok(()) => return settle.ack().await,
                Err(error)
                    if passing(&error) && settle.is_live() && Instant::now() + pause < deadline =>
                {
                    tracing::warn!(
                        queue = %ctx.queue,
                        retry_in = ?pause,
                        "publishing a copy failed; the delivery is held and the copy sent again: {error}"
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
                    queue = %ctx.queue,
                    trimmed,
                    "a copy's headers do not fit in a frame; publishing it trimmed: {error}"
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
            let outgoing = Publication {
                exchange: DEAD_EXCHANGE,
                payload: Payload::Message {
                    routing_key: copy.routing_key.clone(),
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
            // Not mandatory: a caller that gave up has no reply queue any more, and that is
            // not the server's failure.
            let outgoing = Publication {
                exchange: REPLY_EXCHANGE,
                payload: Payload::Message {
                    routing_key: reply_to,
                    message: reply,
                },
                mandatory: false,
                force_persistent: false,
                resend: true,
            };
            Self::publish_then_ack(ctx, settle, outgoing).await
        })
    }

    fn release(self: Box<Self>) {
        // Dropping the settle right releases the delivery.
    }
}
