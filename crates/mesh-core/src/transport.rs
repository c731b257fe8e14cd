//! The seam between the SDK and a transport (in-memory, RabbitMQ).
//!
//! The SDK decides *what* happens to an event (decode, dispatch, retry or give up, dedup);
//! a transport does the mechanics the broker offers: publish with confirms, declare and
//! consume queues with a prefetch, ack, send a copy down the retry ladder, set a message
//! aside as a dead letter, and request/reply. Every transport passes the same conformance
//! suite, so the SDK cannot tell them apart.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::key::ToolKey;
use crate::pattern::TopicPattern;
use crate::wire::WireMessage;

/// A boxed, sendable future.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The boxed cause of an error.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong in a transport.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TransportErrorKind {
    /// The connection or channel was lost; what was in flight may or may not have
    /// reached the broker.
    ConnectionLost,
    /// The transport was closed by its owner.
    Closed,
    /// The broker refused to take responsibility for the message (a publisher nack).
    Nacked,
    /// No queue is bound for a message published as mandatory.
    Unroutable,
    /// The message is larger than the broker accepts; resending cannot help.
    TooLarge {
        /// The message's size in bytes.
        size: usize,
        /// The limit, when known.
        max: Option<usize>,
    },
    /// The message's headers and properties do not fit in one frame of the connection
    /// (AMQP carries them in a single content-header frame, at most the negotiated
    /// `frame_max`); a broker closes the whole connection on such a frame, so it is never
    /// sent, and resending cannot help.
    HeadersTooLarge {
        /// The content-header frame's size in bytes.
        size: usize,
        /// The connection's frame size limit.
        max: usize,
    },
    /// A deadline passed (a confirm, or a call's reply).
    Timeout,
    /// The unconfirmed window is full (a long outage or a broker alarm) and stayed full
    /// until the deadline.
    Backpressure,
    /// No server serves the called tool.
    NoServer,
    /// The broker holds an entity with other arguments than mesh declares.
    Incompatible {
        /// The queue or exchange.
        entity: String,
        /// The argument that differs.
        argument: String,
        /// What mesh declares.
        ours: String,
        /// What the broker holds.
        theirs: String,
    },
    /// The broker refused access (credentials, vhost, permissions).
    AccessRefused,
    /// The broker refused this user one operation on one resource, by its permissions: a
    /// publish to an exchange or under a topic it may not write, a queue it may not declare
    /// or consume, a binding key it may not bind, a `user-id` that is not its own. Not a
    /// fault that passes: retrying cannot help, and the rest of what the transport does goes
    /// on (see `docs/SECURITY.md`).
    Forbidden {
        /// What was refused, in the broker's words (bounded): e.g. `write access to topic
        /// 'module.billing.x' in exchange 'mesh.events' in vhost 'prod' refused for user
        /// 'module.umami'`.
        refused: String,
    },
    /// The TLS session could not be set up: the server's certificate was refused, or the
    /// server refused the handshake or the client's certificate. The transport's own error in
    /// the source chain says which.
    Tls,
    /// The options given cannot work (a bad URL, an impossible setting).
    InvalidOptions,
    /// Anything else the broker or the client reported.
    Protocol,
}

/// An error of a transport: a kind, context, and the cause.
///
/// Boxed inside, so a `Result<_, TransportError>` stays one pointer wide.
#[derive(Debug)]
pub struct TransportError(Box<Inner>);

#[derive(Debug)]
struct Inner {
    kind: TransportErrorKind,
    context: String,
    source: Option<BoxError>,
}

impl TransportError {
    /// A new error of this kind, with a short lowercase context.
    pub fn new(kind: TransportErrorKind, context: impl Into<String>) -> TransportError {
        TransportError(Box::new(Inner {
            kind,
            context: context.into(),
            source: None,
        }))
    }

    /// Attaches the cause.
    pub fn with_source(mut self, source: impl Into<BoxError>) -> TransportError {
        self.0.source = Some(source.into());
        self
    }

    /// The kind.
    pub fn kind(&self) -> &TransportErrorKind {
        &self.0.kind
    }

    /// Whether trying the same thing again later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self.0.kind,
            TransportErrorKind::ConnectionLost
                | TransportErrorKind::Nacked
                | TransportErrorKind::Timeout
                | TransportErrorKind::Backpressure
                | TransportErrorKind::NoServer
        )
    }

    /// Whether the connection or channel was lost.
    pub fn is_connection_lost(&self) -> bool {
        self.0.kind == TransportErrorKind::ConnectionLost
    }

    /// Whether the TLS session could not be set up (see [`TransportErrorKind::Tls`]).
    pub fn is_tls(&self) -> bool {
        self.0.kind == TransportErrorKind::Tls
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0.kind {
            TransportErrorKind::ConnectionLost => f.write_str("connection lost")?,
            TransportErrorKind::Closed => f.write_str("transport closed")?,
            TransportErrorKind::Nacked => f.write_str("broker nacked the message")?,
            TransportErrorKind::Unroutable => f.write_str("message is unroutable")?,
            TransportErrorKind::TooLarge {
                size,
                max: Some(max),
            } => write!(
                f,
                "message of {size} bytes exceeds the broker's limit of {max}"
            )?,
            TransportErrorKind::TooLarge { size, max: None } => {
                write!(f, "message of {size} bytes is too large for the broker")?
            }
            TransportErrorKind::HeadersTooLarge { size, max } => write!(
                f,
                "message headers of {size} bytes exceed the connection's frame size of {max}"
            )?,
            TransportErrorKind::Timeout => f.write_str("timed out")?,
            TransportErrorKind::Backpressure => f.write_str("unconfirmed window is full")?,
            TransportErrorKind::NoServer => f.write_str("no server for the tool")?,
            TransportErrorKind::Incompatible {
                entity,
                argument,
                ours,
                theirs,
            } => write!(
                f,
                "`{entity}` exists with {argument} = {theirs}, mesh declares {argument} = {ours}"
            )?,
            TransportErrorKind::AccessRefused => f.write_str("access refused")?,
            TransportErrorKind::Forbidden { refused } => write!(f, "forbidden: {refused}")?,
            TransportErrorKind::Tls => f.write_str("tls failure")?,
            TransportErrorKind::InvalidOptions => f.write_str("invalid options")?,
            TransportErrorKind::Protocol => f.write_str("protocol error")?,
        }
        if !self.0.context.is_empty() {
            write!(f, " ({})", self.0.context)?;
        }
        Ok(())
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.0
            .source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// Where a message is published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// `mesh.events`, routed by the message's routing key.
    Events,
    /// Straight into one queue (the default exchange): a re-driven dead letter goes back
    /// to the failing consumer only.
    Queue(String),
}

/// How to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishOptions {
    /// Where to.
    pub target: Target,
    /// Fail with [`TransportErrorKind::Unroutable`] if no queue takes the message.
    pub mandatory: bool,
    /// How long the publish may wait for room in the unconfirmed window and then for its
    /// confirm, in all; `None` waits as long as it takes.
    pub deadline: Option<Duration>,
}

impl Default for PublishOptions {
    fn default() -> Self {
        PublishOptions {
            target: Target::Events,
            mandatory: false,
            deadline: None,
        }
    }
}

/// A broker's confirmation of one publish: a future resolving to `Ok` once the broker took
/// responsibility for the message.
///
/// Await it now, later or never: the message is published either way. Dropping it only
/// gives up on learning the outcome.
#[must_use = "a confirmation says whether the broker took the message"]
pub struct Confirm {
    inner: BoxFuture<'static, Result<(), TransportError>>,
}

impl Confirm {
    /// Wraps a future resolving to the outcome.
    pub fn new(
        inner: impl Future<Output = Result<(), TransportError>> + Send + 'static,
    ) -> Confirm {
        Confirm {
            inner: Box::pin(inner),
        }
    }

    /// An outcome already known.
    pub fn ready(result: Result<(), TransportError>) -> Confirm {
        Confirm::new(std::future::ready(result))
    }
}

impl fmt::Debug for Confirm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Confirm").finish_non_exhaustive()
    }
}

impl Future for Confirm {
    type Output = Result<(), TransportError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.inner.as_mut().poll(cx)
    }
}

/// The queue a subscription consumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueSpec {
    /// A durable consumer queue: persistent, dead-lettered, bound to exactly the
    /// subscription's patterns (bindings no longer asked for are removed), with manual
    /// acks.
    Durable {
        /// Its name (see [`crate::naming`]).
        name: String,
    },
    /// An exclusive, auto-delete, server-named queue with automatic acks: at-most-once,
    /// for notification listeners and tails. Nothing remains when it ends.
    Ephemeral,
    /// A queue of dead letters, bound to `mesh.events.dead` on `#` (the subscription's
    /// patterns are ignored).
    DeadLetters(DeadQueue),
}

/// Which queue of dead letters a subscription consumes. Every one is bound to
/// `mesh.events.dead` on `#`, so each sees every dead letter: none takes them from another.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeadQueue {
    /// A durable queue of one reader's own (the audit logger's `<node>.audit-logger.dead`):
    /// persistent, manual acks, dead letters wait there while the reader is down. It is not
    /// dead-lettered itself (a dead letter's dead letter would loop): a reader settles each
    /// delivery with an ack or a release, never [`Acker::dead_letter`].
    Durable {
        /// Its name (see [`crate::naming`]).
        name: String,
    },
    /// An exclusive, auto-delete, server-named queue with automatic acks: at-most-once,
    /// like a listener. It sees the dead letters made while it lives and takes nothing from
    /// anyone.
    Tap,
    /// The retired queue [`crate::naming::RETIRED_DEAD_QUEUE`], as it stands: consumed with
    /// manual acks, never declared (it fails if the queue is gone). Only for draining it; see
    /// [`Transport::unbind_retired_dead_queue`].
    Retired,
}

/// What to consume and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionSpec {
    /// The queue.
    pub queue: QueueSpec,
    /// The patterns its queue is bound to on `mesh.events` (ignored for dead letters, whose
    /// queues are bound to `mesh.events.dead` on `#`).
    pub patterns: Vec<TopicPattern>,
    /// Deliveries handed out but not yet settled, at most.
    pub prefetch: u16,
    /// The delay steps of the retry ladder (one delay queue each on a broker).
    pub retry_delays: Vec<Duration>,
}

/// What to serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServeSpec {
    /// The tool key; its queue is `serve.<key>`.
    pub tool: ToolKey,
    /// Requests handled at once, at most.
    pub prefetch: u16,
}

/// How a transport settles one delivery. Each method consumes the acker: a delivery is
/// settled once.
///
/// An acker dropped without a decision must release its message back to its queue (a
/// requeue), so a message is never lost because a task died.
pub trait Acker: Send + 'static {
    /// The handler succeeded: remove the message.
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>>;

    /// Publish `copy` to the retry ladder at delay step `step` (it comes back to this
    /// queue only, after the step's delay); once that publish is confirmed, remove the
    /// original. No prefetch slot is held while the copy waits.
    fn retry(
        self: Box<Self>,
        copy: WireMessage,
        step: usize,
    ) -> BoxFuture<'static, Result<(), TransportError>>;

    /// Publish `copy` (already annotated) to the dead-letter exchange; once confirmed,
    /// remove the original.
    fn dead_letter(
        self: Box<Self>,
        copy: WireMessage,
    ) -> BoxFuture<'static, Result<(), TransportError>>;

    /// Publish `reply` to the request's `reply_to` with its correlation id, then remove
    /// the request (serve deliveries only).
    fn reply(self: Box<Self>, reply: WireMessage)
        -> BoxFuture<'static, Result<(), TransportError>>;

    /// Put the message back in its queue for another delivery (a requeue).
    fn release(self: Box<Self>);

    /// Adds this delivery's ack to `batch`, to be sent together with the others'
    /// ([`Delivery::ack_all`]). A transport that can settle many deliveries in one command
    /// joins a group of its own ([`AckBatch::join`]); the default acks on its own.
    fn ack_into(self: Box<Self>, batch: &mut AckBatch) {
        batch.single(self.ack());
    }
}

/// The acks of many deliveries that one transport command can settle (those of one channel,
/// say), built up by [`Acker::ack_into`] and sent by [`Delivery::ack_all`].
pub trait AckGroup: Send + 'static {
    /// How many deliveries it settles.
    fn len(&self) -> usize;

    /// Whether it settles none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sends every ack of the group; resolves once the transport handed them on, or failed
    /// to (then none of the group counts as acked: the broker delivers them again).
    fn send(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>>;
}

/// A group of acks behind a trait object, told apart by its type.
trait AnyGroup: Send {
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;
    fn len(&self) -> usize;
    fn send(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>>;
}

impl<G: AckGroup> AnyGroup for G {
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn len(&self) -> usize {
        AckGroup::len(self)
    }

    fn send(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>> {
        AckGroup::send(self)
    }
}

/// Acks on their way to be sent together; see [`Delivery::ack_all`].
#[derive(Default)]
pub struct AckBatch {
    groups: Vec<Box<dyn AnyGroup>>,
    singles: Vec<BoxFuture<'static, Result<(), TransportError>>>,
}

impl AckBatch {
    /// Adds an ack to the group of type `G` that `same` picks, or to a new one made by
    /// `new` when none does.
    pub fn join<G: AckGroup>(
        &mut self,
        same: impl Fn(&G) -> bool,
        new: impl FnOnce() -> G,
        add: impl FnOnce(&mut G),
    ) {
        for group in &mut self.groups {
            if let Some(group) = group.as_any_mut().downcast_mut::<G>() {
                if same(group) {
                    add(group);
                    return;
                }
            }
        }
        let mut group = new();
        add(&mut group);
        self.groups.push(Box::new(group));
    }

    /// Adds an ack that is sent on its own.
    pub fn single(&mut self, ack: BoxFuture<'static, Result<(), TransportError>>) {
        self.singles.push(ack);
    }

    /// How many deliveries it settles.
    pub fn len(&self) -> usize {
        self.groups.iter().map(|g| g.len()).sum::<usize>() + self.singles.len()
    }

    /// Whether it settles none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sends every group and every single ack, all at once.
    pub async fn send(self) -> Result<(), BatchAckError> {
        let sends = self
            .groups
            .into_iter()
            .map(|group| (group.len(), group.send()))
            .chain(self.singles.into_iter().map(|ack| (1, ack)))
            .map(|(len, sent)| async move { (len, sent.await) });
        let mut failed = 0;
        let mut first = None;
        for (len, outcome) in futures::future::join_all(sends).await {
            if let Err(e) = outcome {
                failed += len;
                first.get_or_insert(e);
            }
        }
        match first {
            None => Ok(()),
            Some(error) => Err(BatchAckError { failed, error }),
        }
    }
}

impl fmt::Debug for AckBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AckBatch")
            .field("groups", &self.groups.len())
            .field("singles", &self.singles.len())
            .finish()
    }
}

/// Acks of [`Delivery::ack_all`] that failed: the broker delivers those messages again.
#[derive(Debug, thiserror::Error)]
#[error("{failed} ack(s) failed: {error}")]
pub struct BatchAckError {
    /// How many deliveries were not acked.
    pub failed: usize,
    /// The first failure.
    pub error: TransportError,
}

/// One message handed to a subscriber.
pub struct Delivery {
    /// The message, as published.
    pub message: WireMessage,
    /// Whether the broker delivered it before (the redelivered flag).
    pub redelivered: bool,
    /// How many times the broker delivered it before, when the queue counts (quorum
    /// queues and the memory transport do; classic queues do not).
    pub delivery_count: Option<u32>,
    /// The queue it came from.
    pub queue: String,
    acker: Box<dyn Acker>,
}

impl Delivery {
    /// A delivery settled through `acker`.
    pub fn new(
        message: WireMessage,
        redelivered: bool,
        delivery_count: Option<u32>,
        queue: String,
        acker: Box<dyn Acker>,
    ) -> Delivery {
        Delivery {
            message,
            redelivered,
            delivery_count,
            queue,
            acker,
        }
    }

    /// See [`Acker::ack`].
    pub async fn ack(self) -> Result<(), TransportError> {
        self.acker.ack().await
    }

    /// See [`Acker::retry`].
    pub async fn retry(self, copy: WireMessage, step: usize) -> Result<(), TransportError> {
        self.acker.retry(copy, step).await
    }

    /// See [`Acker::dead_letter`].
    pub async fn dead_letter(self, copy: WireMessage) -> Result<(), TransportError> {
        self.acker.dead_letter(copy).await
    }

    /// See [`Acker::reply`].
    pub async fn reply(self, reply: WireMessage) -> Result<(), TransportError> {
        self.acker.reply(reply).await
    }

    /// See [`Acker::release`].
    pub fn release(self) {
        self.acker.release();
    }

    /// Acks every delivery, sending the acks a transport can settle together in one
    /// command (those of one channel: one `multiple` ack where the tags allow) instead of a
    /// command per delivery; for a consumer that settles in batches, like one that commits
    /// a batch of rows and then acks it. Resolves once every ack was handed on; the error
    /// counts those that failed (their messages are delivered again).
    pub async fn ack_all(
        deliveries: impl IntoIterator<Item = Delivery>,
    ) -> Result<(), BatchAckError> {
        let mut batch = AckBatch::default();
        for delivery in deliveries {
            delivery.acker.ack_into(&mut batch);
        }
        batch.send().await
    }
}

impl fmt::Debug for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Delivery")
            .field("routing_key", &self.message.routing_key)
            .field("redelivered", &self.redelivered)
            .field("delivery_count", &self.delivery_count)
            .field("queue", &self.queue)
            .finish_non_exhaustive()
    }
}

/// A source of deliveries that a transport polls itself, for a [`Subscription`] that reads
/// straight from the transport's own stream instead of through a buffer another task feeds
/// (one task hand-off less per delivery).
pub trait DeliveryFeed: Send + 'static {
    /// The next delivery: `Ready(None)` once the subscription ended. Must be cancel safe:
    /// a delivery is either returned or still there for the next poll.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Delivery>>;
}

/// Where a subscription's deliveries come from.
enum Feed {
    /// A buffer the transport's task fills.
    Buffer(mpsc::Receiver<Delivery>),
    /// The transport's stream, polled by the reader.
    Direct(Box<dyn DeliveryFeed>),
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Feed::Buffer(buffer) => f.debug_tuple("Buffer").field(buffer).finish(),
            Feed::Direct(_) => f.write_str("Direct"),
        }
    }
}

/// A stream of deliveries from one queue.
///
/// The transport keeps it fed across reconnects. [`cancel`](Subscription::cancel) stops
/// new deliveries; those already buffered (for a broker: sent before it confirmed the
/// cancel) are still returned by [`next`](Subscription::next) and must be settled
/// (dropping them releases them).
#[derive(Debug)]
pub struct Subscription {
    queue: String,
    feed: Feed,
    cancel: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Subscription {
    /// A subscription reading from `deliveries`; the transport stops feeding it when
    /// `cancel` fires or is dropped.
    pub fn new(
        queue: String,
        deliveries: mpsc::Receiver<Delivery>,
        cancel: tokio::sync::oneshot::Sender<()>,
    ) -> Subscription {
        Subscription {
            queue,
            feed: Feed::Buffer(deliveries),
            cancel: Some(cancel),
        }
    }

    /// A subscription reading from the transport's own `feed`; the transport stops
    /// consuming when `cancel` fires or is dropped, and `feed` then ends once what was
    /// delivered before is returned.
    pub fn from_feed(
        queue: String,
        feed: impl DeliveryFeed,
        cancel: tokio::sync::oneshot::Sender<()>,
    ) -> Subscription {
        Subscription {
            queue,
            feed: Feed::Direct(Box::new(feed)),
            cancel: Some(cancel),
        }
    }

    /// The queue's name (server-named queues: the name the broker gave).
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The next delivery; `None` once the subscription ended (cancelled and drained, or
    /// the transport closed).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a delivery is never lost when this future is dropped before it
    /// completes.
    pub async fn next(&mut self) -> Option<Delivery> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// Polls for the next delivery; see [`next`](Subscription::next).
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        match &mut self.feed {
            Feed::Buffer(buffer) => buffer.poll_recv(cx),
            Feed::Direct(feed) => feed.poll_next(cx),
        }
    }

    /// Stops new deliveries (a consumer cancel on a broker).
    pub fn cancel(&mut self) {
        if let Some(cancel) = self.cancel.take() {
            let _ = cancel.send(());
        }
        if let Feed::Buffer(buffer) = &mut self.feed {
            buffer.close();
        }
    }
}

/// The health of a transport's connections, for readiness checks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Health {
    /// Connected to a broker (always, for the memory transport).
    pub connected: bool,
    /// The broker blocked publishing (a memory or disk alarm).
    pub blocked: bool,
    /// Consumers the transport should have attached.
    pub consumers_expected: usize,
    /// Consumers attached now.
    pub consumers_attached: usize,
}

impl Health {
    /// Connected, not blocked and every consumer attached.
    pub fn is_ready(&self) -> bool {
        self.connected && !self.blocked && self.consumers_attached >= self.consumers_expected
    }
}

/// Counters and gauges of a transport's connections, for metrics. Counters only grow over
/// the transport's life.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransportStats {
    /// Publishes sent and not yet confirmed (gauge).
    pub unconfirmed: u64,
    /// Their bytes (gauge).
    pub unconfirmed_bytes: u64,
    /// Reconnects of any of its connections (counter).
    pub reconnects: u64,
    /// Publishes sent again after a lost channel or connection (counter).
    pub resent: u64,
    /// Time spent blocked by the broker (counter).
    pub blocked_time: Duration,
    /// Consumers re-attached after a loss (counter).
    pub reattached: u64,
    /// RPC replies nobody waited for any more (counter).
    pub late_replies: u64,
}

/// A transport: the mechanics of a broker.
///
/// Implementations are cheap handles onto a task that owns the connection; all methods
/// take `&self`.
pub trait Transport: Send + Sync + fmt::Debug + 'static {
    /// Publishes a message. Resolves once the transport accepted it into its unconfirmed
    /// window (waiting for room there is the backpressure); the returned [`Confirm`]
    /// resolves once the broker confirmed it.
    fn publish(
        &self,
        message: WireMessage,
        options: PublishOptions,
    ) -> BoxFuture<'_, Result<Confirm, TransportError>>;

    /// Declares the subscription's queue and bindings and starts consuming.
    fn subscribe(
        &self,
        spec: SubscriptionSpec,
    ) -> BoxFuture<'_, Result<Subscription, TransportError>>;

    /// Sends a request to a tool and waits for its reply: the reply message, or
    /// [`TransportErrorKind::NoServer`] when no serve queue exists for the tool, or
    /// [`TransportErrorKind::Timeout`].
    fn call(
        &self,
        tool: &ToolKey,
        request: WireMessage,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<WireMessage, TransportError>>;

    /// Declares `serve.<key>` and starts consuming requests; settle each with
    /// [`Delivery::reply`].
    fn serve(&self, spec: ServeSpec) -> BoxFuture<'_, Result<Subscription, TransportError>>;

    /// The health of the transport now.
    fn health(&self) -> Health;

    /// Its counters and gauges now (all zero for a transport that keeps none).
    fn stats(&self) -> TransportStats {
        TransportStats::default()
    }

    /// Resolves once every publish accepted before the call is settled: confirmed, nacked,
    /// returned or failed (a publish waiting to be resent after a lost connection is not
    /// settled yet). Under a steady stream of other publishes it may wait for a moment with
    /// none in flight, so callers bound the wait. The SDK's drain waits for this, bounded by
    /// its emit deadline, before it closes the transport: an emit whose [`Confirm`] nobody
    /// awaits is confirmed all the same.
    fn flush(&self) -> BoxFuture<'_, ()>;

    /// Closes every connection; what is unconfirmed stays unconfirmed. The SDK's drain
    /// waits for confirms first.
    fn close(&self) -> BoxFuture<'_, ()>;

    /// The first step of retiring [`RETIRED_DEAD_QUEUE`](crate::naming::RETIRED_DEAD_QUEUE):
    /// if the queue exists, removes its binding to `mesh.events.dead` on `#`, so no new dead
    /// letter reaches it, and returns `true`; returns `false` when there is no such queue.
    /// Its messages stay; drain them with [`DeadQueue::Retired`], then
    /// [`delete_retired_dead_queue`](Transport::delete_retired_dead_queue).
    fn unbind_retired_dead_queue(&self) -> BoxFuture<'_, Result<bool, TransportError>>;

    /// Deletes [`RETIRED_DEAD_QUEUE`](crate::naming::RETIRED_DEAD_QUEUE) only if it holds no
    /// message and has no consumer (so none holds an unacked one): `true` once it is gone
    /// (deleted now, or absent), `false` when it still holds messages or another consumer
    /// reads it. Call it only once the queue is unbound and while a queue of dead letters of
    /// the caller's own is bound: then a dead letter that reached the retired queue between
    /// the check and the delete (an older mesh binding it again) reached that one too.
    fn delete_retired_dead_queue(&self) -> BoxFuture<'_, Result<bool, TransportError>>;
}
