//! The publish side: one task owns the publishing connection, its confirm channel and the
//! unconfirmed window, and carries the window through every failure.
//!
//! # Design
//!
//! [`Publisher`] is a cheap handle. A publish first takes room in the *unconfirmed window*:
//! one permit of a semaphore of `confirm_window` permits, and as many permits of a second
//! semaphore as its body has bytes (`max_unconfirmed_bytes` in all). Waiting for room is the
//! backpressure, bounded by the publish deadline
//! ([`Backpressure`](TransportErrorKind::Backpressure)); so memory stays bounded through an
//! outage or a broker alarm however fast callers publish. The message then goes, with its
//! permits, through a queue to the [`PublishTask`], and the caller gets a [`Confirm`] to await
//! now, later or never. The permits are released when the broker settles the message: the
//! task owns them from the hand-over on, and gives back those of everything one confirm
//! settled in one call per semaphore, before it tells any of their callers.
//! A publish that finds room and a free slot in that queue is handed over without
//! awaiting anything ([`Publisher::try_publish`]); only one that must wait builds, and boxes
//! apart, the future that waits ([`Publisher::publish_waiting`]). So a publish's own future
//! stays small, and boxing it (as `Transport::publish` does) stays cheap: the waiting
//! future's state (a timer, two semaphore waits, the queue's) made every publish a large
//! allocation before.
//!
//! The task owns the connection (through its [`ConnectionOwner`]; `<prefix>.publish`, its
//! own connection because RabbitMQ blocks publishing connections during alarms, which must
//! not stall consumers) and one channel in confirm mode. It keeps two queues of whole messages:
//!
//! - the **window**, *sequence number → message*, of what was published on the current
//!   channel and not yet settled. It numbers each `basic.publish` as the broker does (1, 2, …
//!   from `confirm.select`);
//! - the **backlog**, in order, of what is waiting to be published: new messages while the
//!   connection is down, and every unsettled message of a lost channel.
//!
//! The broker settles a message with `basic.ack` (with `multiple`, everything up to the tag):
//! `Ok`, or [`Unroutable`](TransportErrorKind::Unroutable) if a `basic.return` for it came
//! first (the broker returns before it acks); or with `basic.nack`:
//! [`Nacked`](TransportErrorKind::Nacked). A channel on which the broker has nacked every
//! publish for [`NACK_RUN_REOPEN`] is replaced (with the channel backoff): RabbitMQ 3.10 can
//! tie a channel to a quorum queue's dead leader for as long as that node is down, and nacks
//! everything sent there, while a new channel reaches the new leader.
//!
//! # Recovery
//!
//! When the channel or the connection is lost, whatever was unsettled on it may or may not
//! have reached a queue. The window goes back to the front of the backlog, in publish order,
//! and is published again, with the same message (so the same event id), on the next
//! channel, where it is numbered anew: at-least-once, so a consumer may see a resent message
//! twice, and dedups by event id. What is *not* sent again:
//!
//! - an RPC request (`resend = false`): its reply queue died with the consume connection, or
//!   will, so it fails at once with `ConnectionLost` and the caller decides;
//! - a message the broker refused as too large (`406 PRECONDITION_FAILED - message size N is
//!   larger than configured max size M`, which closes the *channel*): the message of that size
//!   fails with [`TooLarge`](TransportErrorKind::TooLarge) and the rest is resent; the limit is
//!   remembered, so a later message over it fails before it is sent;
//! - a message whose properties and headers do not fit in one frame of the connection
//!   (AMQP's content-header frame, at most the negotiated `frame_max`): a broker would close
//!   the whole *connection* on it, with nothing to tell which publish it was, so it is
//!   measured (with the client library's encoding) as it is accepted and again on the
//!   connection it would go out on, and fails with
//!   [`HeadersTooLarge`](TransportErrorKind::HeadersTooLarge), never sent;
//! - a message to an exchange the broker says is gone (`404`) and that this transport never
//!   declared, or may not write to (`403`): it fails, the rest is resent. An exchange of the
//!   recorded topology is declared again before the next channel instead;
//! - a message under a topic this user may not write (`403`, a topic permission: the close
//!   names the exchange and the key): every waiting message to that exchange under that key
//!   fails with [`Forbidden`](TransportErrorKind::Forbidden), the rest is resent;
//! - every message, when the broker refuses the `user-id` the publisher stamps on each
//!   (`406`, it is not the connection's user): each fails with `Forbidden`.
//!
//! A lost connection is reconnected by the task's [`ConnectionOwner`] (shared with the
//! consume link) with backoff (100 ms doubling to 5 s by default, with jitter), trying the
//! addresses in turn from the one after the lost one; the task only reacts (the window back
//! to the backlog, the broker's size limit forgotten). A channel the
//! broker closed while the connection stayed up is reopened with the same backoff, reset by
//! the next confirm, so a broker that keeps closing channels is not hammered.
//!
//! A [`Confirm`] waits through all of this until its message is confirmed or its deadline
//! passes ([`Timeout`](TransportErrorKind::Timeout)). A timed-out message stays in the window
//! and may still be delivered: the caller only gave up learning the outcome.
//!
//! # Blocked
//!
//! During a memory or disk alarm RabbitMQ stops reading from publishing connections. It
//! says so with `connection.blocked` only to clients that announce that capability, and
//! amqprs 2.1 does not; the connection just goes quiet (heartbeats still flow, so it is not
//! lost). So the task infers the block: when messages wait in the window and no confirm came
//! for [`STALL_AFTER`] while the connection is up, the link is reported blocked (in `health()`,
//! a [`Lifecycle::Blocked`] event, the blocked time) until the next confirm. An overloaded
//! broker that confirms nothing for that long is reported the same way, which is what a
//! readiness check wants to know.
//!
//! Channel callbacks of the client library run on its own tasks; they only forward
//! [`Event`]s, tagged with the channel's generation so that late events of a replaced channel
//! are ignored.
//!
//! # State and shell
//!
//! What decides correctness — numbering, settling, returns, what a lost or refused channel
//! sends again and in which order, the nack run, the stall — is the [`window::Window`] state
//! machine, which does no I/O and is tested alone (unit and property tests). The task is its
//! shell: it feeds it the connection's and the channel's events and performs what it says
//! (publish, answer a caller, replace the channel, report blocked).

#[cfg(test)]
mod props;
// `pub(crate)`: the micro-benchmarks reach it through `crate::bench_internals`.
pub(crate) mod window;

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use amqprs::callbacks::ChannelCallback;
use amqprs::channel::{BasicPublishArguments, Channel, ConfirmSelectArguments};
use amqprs::connection::Connection;
use amqprs::{Ack, BasicProperties, Cancel, CloseChannel, Nack, Return};
use bytes::Bytes;
use mesh_core::{Confirm, Envelope, TransportError, TransportErrorKind, WireMessage};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio::time::Instant;
use tracing::Instrument;

use crate::connection::backoff::Backoff;
use crate::connection::owner::{ConnectionOwner, LinkEvent};
use crate::connection::state::{sleep_opt, LinkState};
use crate::convert::{check_short, from_delivery, to_properties};
use crate::declare::{open_channel, within, DeclareChannel};
use crate::error::{code, from_client, from_close, publish_refusal, BrokerClose, PublishRefusal};
use crate::lifecycle::{Counters, Lifecycle, Link, TransportShared};
use crate::options::AmqpOptions;
use crate::topology::Topology;
use window::{Outcome, Progress, Returned, NACK_RUN_REOPEN, STALL_AFTER};

/// How many queued publishes the task takes in before it publishes them.
const COMMAND_BATCH: usize = 256;

/// A message to publish, with where to.
#[derive(Debug, Clone)]
pub(crate) struct Publication {
    /// The exchange (`""` is the default exchange).
    pub(crate) exchange: &'static str,
    /// What it carries, and under which routing key.
    pub(crate) payload: Payload,
    /// Whether an unroutable message is returned.
    pub(crate) mandatory: bool,
    /// Send it persistent whatever it says (retry and dead-letter copies).
    pub(crate) force_persistent: bool,
    /// Publish it again after a lost channel or connection (events, copies, replies); if
    /// `false`, fail it with `ConnectionLost` instead (RPC requests).
    pub(crate) resend: bool,
}

/// What a publish carries.
#[derive(Debug, Clone)]
pub(crate) enum Payload {
    /// A message, published under `routing_key` (its own key, or a queue's name: a retry
    /// queue, a reply queue).
    Message {
        routing_key: String,
        message: WireMessage,
    },
    /// An event, published under its own key. The client's properties are built from the
    /// envelope directly (as its encoding would give them, see
    /// [`convert::event_properties`](crate::convert::event_properties)), and the envelope,
    /// lighter than its encoding, is what is kept for a resend.
    Event(Envelope),
}

impl Payload {
    /// The routing key it is published under.
    pub(crate) fn routing_key(&self) -> &str {
        match self {
            Payload::Message { routing_key, .. } => routing_key,
            Payload::Event(envelope) => envelope.key.as_str(),
        }
    }

    /// The body.
    pub(crate) fn body(&self) -> &Bytes {
        match self {
            Payload::Message { message, .. } => &message.body,
            Payload::Event(envelope) => &envelope.body,
        }
    }

    /// Whether a returned message is this one, by message id, correlation id and body.
    fn is_returned(&self, returned: &WireMessage) -> bool {
        let p = &returned.properties;
        match self {
            Payload::Message { message, .. } => {
                message.properties.message_id == p.message_id
                    && message.properties.correlation_id == p.correlation_id
                    && message.body == returned.body
            }
            Payload::Event(envelope) => {
                p.message_id.as_deref() == Some(envelope.id.text().as_str())
                    && p.correlation_id.is_none()
                    && envelope.body == returned.body
            }
        }
    }

    /// The client's properties, `user_id` named as the publisher.
    fn properties(
        &self,
        force_persistent: bool,
        user_id: &str,
    ) -> Result<BasicProperties, TransportError> {
        match self {
            Payload::Message { message, .. } => to_properties(message, force_persistent),
            Payload::Event(envelope) => crate::convert::event_properties(envelope, user_id),
        }
    }

    /// A bound of its content-header frame (see [`crate::convert::header_frame_bound`]).
    fn header_frame_bound(&self, user_id: &str) -> usize {
        match self {
            Payload::Message { message, .. } => crate::convert::header_frame_bound(message),
            Payload::Event(envelope) => crate::convert::event_frame_bound(envelope, user_id),
        }
    }
}

type Responder = oneshot::Sender<Result<(), TransportError>>;

/// Room in the window: one publish, and its bytes.
type Room = (OwnedSemaphorePermit, Option<OwnedSemaphorePermit>);

/// One publish on its way to, or in, the window.
struct Pending {
    outgoing: Publication,
    /// Built once it is taken in, and handed to the client library by the first send; a
    /// resend builds them again from `outgoing` (`None` then).
    properties: Option<BasicProperties>,
    /// The size of its content-header frame (see [`header_frame_size`]), or a bound of it
    /// no larger than any broker's `frame_max`.
    header_frame: usize,
    responder: Responder,
    /// Its bytes' share of the window. Its room (one publish, and these bytes) was taken
    /// from the window's semaphores and is the task's from the hand-over on: the task gives
    /// it back when the message is settled ([`WindowRoom::give_back`]), before it answers.
    charge: u32,
}

impl Pending {
    /// Gives its room back, then fails it: whoever saw the outcome sees the room free.
    fn fail(self: Box<Self>, room: &WindowRoom, error: TransportError) {
        room.give_back(1, u64::from(self.charge));
        self.answer(Err(error));
    }

    /// Tells the caller; its room was given back already.
    fn answer(self: Box<Self>, outcome: Result<(), TransportError>) {
        let Pending { responder, .. } = *self;
        let _ = responder.send(outcome);
    }
}

/// A checked publish that did not find room at once (see [`Publisher::try_publish`]).
pub(crate) struct Waiting {
    outgoing: Publication,
    properties: BasicProperties,
    /// The size of its content-header frame.
    header_frame: usize,
    /// Its bytes' share of the window.
    charge: u32,
    deadline: Option<Instant>,
    /// Its room, when only the queue to the task was full.
    room: Option<Room>,
}

impl Waiting {
    /// Hands the publish to the task through `slot`, with the `Confirm` of its outcome.
    fn hand_over(self, room: Room, slot: mpsc::Permit<'_, Command>) -> Confirm {
        let (responder, outcome) = oneshot::channel();
        // The room is the task's now: it gives it back when the message is settled, all of
        // one confirm's at once.
        let (count, bytes) = room;
        count.forget();
        if let Some(bytes) = bytes {
            bytes.forget();
        }
        slot.send(Command::Publish(Box::new(Pending {
            outgoing: self.outgoing,
            properties: Some(self.properties),
            header_frame: self.header_frame,
            responder,
            charge: self.charge,
        })));
        Confirm::new(ConfirmWait {
            outcome,
            deadline: self.deadline,
            timer: None,
        })
    }
}

/// The wait for a publish's outcome, until its deadline. The timer is set only once the
/// outcome is not there at a poll: a caller with many publishes in flight mostly finds it
/// there already when it gets to one.
struct ConfirmWait {
    outcome: oneshot::Receiver<Result<(), TransportError>>,
    deadline: Option<Instant>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Future for ConfirmWait {
    type Output = Result<(), TransportError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Poll::Ready(outcome) = Pin::new(&mut this.outcome).poll(cx) {
            return Poll::Ready(outcome.unwrap_or_else(|_| Err(closed())));
        }
        let Some(at) = this.deadline else {
            return Poll::Pending;
        };
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(TransportError::new(
                TransportErrorKind::Timeout,
                "no confirm from the broker before the deadline; the message may still be \
                 delivered",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The size of the content-header frame that carries `properties`: AMQP sends all of a
/// message's properties and headers in that one frame, which may not exceed the
/// connection's `frame_max`. Measured by the client library's own encoding.
fn header_frame_size(properties: &BasicProperties) -> Result<usize, TransportError> {
    let encoded = amqp_serde::to_bytes(properties).map_err(|error| {
        TransportError::new(
            TransportErrorKind::InvalidOptions,
            "the message's properties cannot be encoded",
        )
        .with_source(error.to_string())
    })?;
    Ok(crate::convert::HEADER_FRAME_OVERHEAD + encoded.len())
}

/// A connection's frame size limit; a broker that sets none (0) has AMQP's largest.
fn frame_max(connection: &amqprs::connection::Connection) -> usize {
    match connection.frame_max() {
        0 => usize::MAX,
        max => usize::try_from(max).unwrap_or(usize::MAX),
    }
}

/// Refuses a content-header frame larger than the connection's `frame_max` (0: not known,
/// nothing to check yet). The broker would close the whole connection on it, with a close
/// that names no publish, and a resend would do the same forever: so it is never sent.
fn check_header_frame(
    size: usize,
    frame_max: usize,
    routing_key: &str,
) -> Result<(), TransportError> {
    if frame_max == 0 || size <= frame_max {
        return Ok(());
    }
    Err(TransportError::new(
        TransportErrorKind::HeadersTooLarge {
            size,
            max: frame_max,
        },
        format!("publishing to `{routing_key}`"),
    ))
}

/// What [`Publisher::try_publish`] did.
pub(crate) enum Attempt {
    /// The publish is the task's now; its confirm.
    Taken(Confirm),
    /// It must wait (boxed: a rare path, so the common one stays small).
    Wait(Box<Waiting>),
}

impl window::Message for Box<Pending> {
    fn resend(&self) -> bool {
        self.outgoing.resend
    }

    fn mandatory(&self) -> bool {
        self.outgoing.mandatory
    }

    fn exchange(&self) -> &str {
        self.outgoing.exchange
    }

    fn routing_key(&self) -> &str {
        self.outgoing.payload.routing_key()
    }

    fn size(&self) -> usize {
        self.outgoing.payload.body().len()
    }
}

impl Pending {
    /// What its caller is told of how the window settled it. `close` is the broker's close
    /// that ended its channel, when that is what settled it.
    fn outcome(&self, outcome: Outcome, close: Option<&BrokerClose>) -> Result<(), TransportError> {
        let outgoing = &self.outgoing;
        let with_close = |error: TransportError| match close {
            Some(close) => error.with_source(close.clone()),
            None => error,
        };
        match outcome {
            Outcome::Acked => Ok(()),
            Outcome::Unroutable(close) => Err(TransportError::new(
                TransportErrorKind::Unroutable,
                format!(
                    "no queue took `{}` on `{}`",
                    outgoing.payload.routing_key(),
                    outgoing.exchange
                ),
            )
            .with_source(close)),
            Outcome::Nacked => Err(TransportError::new(
                TransportErrorKind::Nacked,
                format!("publishing `{}`", outgoing.payload.routing_key()),
            )),
            Outcome::NotResent => Err(with_close(connection_lost())),
            Outcome::TooLarge => {
                let size = outgoing.payload.body().len();
                let max = close.and_then(|close| match publish_refusal(close) {
                    PublishRefusal::TooLarge { max, .. } => Some(max),
                    _ => None,
                });
                tracing::warn!(
                    size,
                    max,
                    routing_key = %outgoing.payload.routing_key(),
                    "the broker refused a message as too large; not resent"
                );
                Err(with_close(TransportError::new(
                    TransportErrorKind::TooLarge { size, max },
                    format!("publishing to `{}`", outgoing.payload.routing_key()),
                )))
            }
            Outcome::Refused => {
                let context = format!("publishing to exchange `{}`", outgoing.exchange);
                // 403 (and 406 for a `user-id`) is `Forbidden`, 404 `Protocol`; the broker's
                // text is the source either way.
                Err(match close {
                    Some(close) => from_close(close.clone(), &context),
                    None => TransportError::new(TransportErrorKind::Protocol, context),
                })
            }
            Outcome::Closed => Err(closed()),
        }
    }
}

enum Command {
    Publish(Box<Pending>),
    /// Answer once everything published before is settled.
    Flush(oneshot::Sender<()>),
    Close(oneshot::Sender<()>),
}

/// What the channel callbacks report.
enum Event {
    Ack {
        generation: u64,
        tag: u64,
        multiple: bool,
    },
    Nack {
        generation: u64,
        tag: u64,
        multiple: bool,
    },
    Return {
        generation: u64,
        exchange: String,
        code: u16,
        text: String,
        message: Box<WireMessage>,
    },
    Closed {
        generation: u64,
        close: BrokerClose,
    },
}

/// The room of the unconfirmed window, shared by the handles and the task.
#[derive(Debug)]
struct WindowRoom {
    count: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    max_count: usize,
    max_bytes: usize,
    /// The broker's message size limit, once a refusal told it (0: not known).
    broker_max: AtomicUsize,
    /// The frame size limit of the last connection (0: none yet).
    frame_max: AtomicUsize,
}

impl WindowRoom {
    fn close(&self) {
        self.count.close();
        self.bytes.close();
    }

    /// Gives back the room of `count` settled publishes whose bytes' shares add up to
    /// `bytes`: one release per semaphore, however many a confirm settled.
    fn give_back(&self, count: usize, bytes: u64) {
        if count > 0 {
            self.count.add_permits(count);
        }
        if bytes > 0 {
            self.bytes
                .add_permits(usize::try_from(bytes).unwrap_or(usize::MAX));
        }
    }
}

/// The handle to the publish task.
#[derive(Clone)]
pub(crate) struct Publisher {
    commands: mpsc::Sender<Command>,
    /// The connection's user, stamped as `user-id` on every message.
    user_id: Arc<str>,
    window: Arc<WindowRoom>,
    max_message_size: usize,
    default_deadline: Option<Duration>,
    state: Arc<LinkState>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("unconfirmed", &self.unconfirmed())
            .field("connected", &self.state.connected())
            .finish_non_exhaustive()
    }
}

impl Publisher {
    /// Opens the publishing connection and starts its task.
    pub(crate) async fn start(
        options: &AmqpOptions,
        shared: Arc<TransportShared>,
        topology: Arc<Mutex<Topology>>,
    ) -> Result<Publisher, TransportError> {
        let state = Arc::new(LinkState::new(Link::Publish, shared.clone()));
        let owner = ConnectionOwner::open(options, state.clone(), shared.clone(), None).await?;
        let window = Arc::new(WindowRoom {
            count: Arc::new(Semaphore::new(options.get_confirm_window())),
            bytes: Arc::new(Semaphore::new(options.get_max_unconfirmed_bytes())),
            max_count: options.get_confirm_window(),
            max_bytes: options.get_max_unconfirmed_bytes(),
            broker_max: AtomicUsize::new(0),
            frame_max: AtomicUsize::new(owner.connection().map_or(0, frame_max)),
        });
        // Every queued publish holds a permit, so the queue never holds more than the
        // window; the extra room is for `Close`.
        let (commands_tx, commands) = mpsc::channel(options.get_confirm_window() + 4);
        let (events_tx, events) = mpsc::unbounded_channel();
        let user_id: Arc<str> = Arc::from(options.get_user());
        let task = PublishTask {
            state: state.clone(),
            shared,
            topology,
            room: window.clone(),
            commands,
            events_tx,
            events,
            owner,
            channel: None,
            channel_backoff: Backoff::from_options(options),
            channel_retry_at: None,
            redeclare: BTreeSet::new(),
            generation: 0,
            window: window::Window::new(now()),
            flushes: Vec::new(),
            settled: Vec::new(),
            user_id: user_id.clone(),
        };
        let span = tracing::info_span!(
            parent: None,
            "mesh_amqp.publisher",
            connection = %format!("{}.publish", options.get_connection_name())
        );
        tokio::spawn(task.run().instrument(span));
        Ok(Publisher {
            commands: commands_tx,
            user_id,
            window,
            max_message_size: options.get_max_message_size(),
            default_deadline: options.get_publish_deadline(),
            state,
        })
    }

    /// The connection's state.
    pub(crate) fn state(&self) -> &LinkState {
        &self.state
    }

    /// Publishes accepted and not yet settled (in the window, the backlog, or on their way).
    pub(crate) fn unconfirmed(&self) -> usize {
        self.window
            .max_count
            .saturating_sub(self.window.count.available_permits())
    }

    /// The body bytes of those publishes (a message larger than the bound counts as the
    /// bound).
    pub(crate) fn unconfirmed_bytes(&self) -> usize {
        self.window
            .max_bytes
            .saturating_sub(self.window.bytes.available_permits())
    }

    /// Publishes `outgoing`: resolves once it is in the unconfirmed window, with the
    /// [`Confirm`] of the broker's answer. `deadline` (or else the default; one too far to
    /// represent waits without bound) bounds the wait
    /// for room plus the wait for the confirm.
    ///
    /// # Cancel safety
    ///
    /// Dropped while waiting for room, nothing is published. Once it resolved, the message
    /// is published (and resent after failures) whatever happens to the `Confirm`.
    pub(crate) async fn publish(
        &self,
        outgoing: Publication,
        deadline: Option<Duration>,
    ) -> Result<Confirm, TransportError> {
        match self.try_publish(outgoing, deadline)? {
            Attempt::Taken(confirm) => Ok(confirm),
            Attempt::Wait(waiting) => Box::pin(self.publish_waiting(waiting)).await,
        }
    }

    /// The part of [`publish`](Self::publish) that needs no waiting: checks `outgoing`,
    /// builds its properties and, when the window has room and the queue to the task a free
    /// slot, hands it over (`Taken`). Otherwise the caller waits with
    /// [`publish_waiting`](Self::publish_waiting), which holds only what a wait needs: a
    /// publish that finds room, the common case, never builds (nor boxes) a waiting future.
    pub(crate) fn try_publish(
        &self,
        outgoing: Publication,
        deadline: Option<Duration>,
    ) -> Result<Attempt, TransportError> {
        let deadline = deadline
            .or(self.default_deadline)
            .and_then(|d| Instant::now().checked_add(d));
        // RabbitMQ counts the body against `max_message_size`; refuse here rather than have
        // the broker close the channel (which costs a resend of everything in flight).
        let size = outgoing.payload.body().len();
        let broker_max = self.window.broker_max.load(Ordering::Relaxed);
        let max = match broker_max {
            0 => self.max_message_size,
            known => known.min(self.max_message_size),
        };
        if size > max {
            return Err(TransportError::new(
                TransportErrorKind::TooLarge {
                    size,
                    max: Some(max),
                },
                format!("publishing to `{}`", outgoing.payload.routing_key()),
            ));
        }
        let mut outgoing = outgoing;
        if let Payload::Message {
            routing_key,
            message,
        } = &mut outgoing.payload
        {
            crate::convert::stamp_routing_key(message, routing_key);
            // Every message names its publisher, which the broker validates: a consumer
            // enforcing identity believes the key's owner only from its own user. (An
            // event's properties are built with it.)
            message.properties.user_id = Some(self.user_id.to_string());
        }
        check_short("an exchange name", outgoing.exchange)?;
        check_short("a routing key", outgoing.payload.routing_key())?;
        let properties = outgoing
            .payload
            .properties(outgoing.force_persistent, &self.user_id)?;
        // Every broker takes a frame of AMQP's minimum size: only a message whose bound is
        // above it needs measuring (an encoding of its properties, which costs about a tenth
        // of an emit).
        let header_frame = match outgoing.payload.header_frame_bound(&self.user_id) {
            bound if bound <= crate::convert::FRAME_MIN_SIZE => bound,
            _ => header_frame_size(&properties)?,
        };
        check_header_frame(
            header_frame,
            self.window.frame_max.load(Ordering::Relaxed),
            outgoing.payload.routing_key(),
        )?;
        // A message larger than the byte bound takes all of it rather than never fitting.
        let charge = u32::try_from(size.min(self.window.max_bytes)).unwrap_or(u32::MAX);
        let waiting = Waiting {
            outgoing,
            properties,
            header_frame,
            charge,
            deadline,
            room: None,
        };
        let room = match self.try_room(charge) {
            Ok(Some(room)) => room,
            Ok(None) => return Ok(Attempt::Wait(Box::new(waiting))),
            Err(_) => return Err(closed()),
        };
        match self.commands.try_reserve() {
            Ok(slot) => Ok(Attempt::Taken(waiting.hand_over(room, slot))),
            Err(TrySendError::Full(())) => Ok(Attempt::Wait(Box::new(Waiting {
                room: Some(room),
                ..waiting
            }))),
            Err(TrySendError::Closed(())) => Err(closed()),
        }
    }

    /// Waits for room in the window (unless `waiting` holds it) and for a slot in the queue
    /// to the task, until the deadline, then hands the publish over.
    pub(crate) async fn publish_waiting(
        &self,
        mut waiting: Box<Waiting>,
    ) -> Result<Confirm, TransportError> {
        let room = match waiting.room.take() {
            Some(room) => room,
            None => self.wait_for_room(waiting.charge, waiting.deadline).await?,
        };
        let slot = self.commands.reserve().await.map_err(|_| closed())?;
        Ok(waiting.hand_over(room, slot))
    }

    /// Room in the window now, if there is (`Ok(None)` if not); a semaphore never makes a
    /// waiter lose its turn to this, as its permits go to waiters first.
    fn try_room(&self, charge: u32) -> Result<Option<Room>, TryAcquireError> {
        let count = match self.window.count.clone().try_acquire_owned() {
            Ok(count) => count,
            Err(TryAcquireError::NoPermits) => return Ok(None),
            Err(closed) => return Err(closed),
        };
        let bytes = match charge {
            0 => None,
            n => match self.window.bytes.clone().try_acquire_many_owned(n) {
                Ok(bytes) => Some(bytes),
                Err(TryAcquireError::NoPermits) => return Ok(None),
                Err(closed) => return Err(closed),
            },
        };
        Ok(Some((count, bytes)))
    }

    /// Waits for room in the window until `deadline`.
    async fn wait_for_room(
        &self,
        charge: u32,
        deadline: Option<Instant>,
    ) -> Result<Room, TransportError> {
        let room = async {
            let count = self.window.count.clone().acquire_owned().await?;
            let bytes = match charge {
                0 => None,
                n => Some(self.window.bytes.clone().acquire_many_owned(n).await?),
            };
            Ok::<_, tokio::sync::AcquireError>((count, bytes))
        };
        match deadline {
            Some(at) => tokio::time::timeout_at(at, room).await.map_err(|_| {
                TransportError::new(
                    TransportErrorKind::Backpressure,
                    format!(
                        "no room in the unconfirmed window (at most {} publishes, {} bytes) \
                         before the deadline",
                        self.window.max_count, self.window.max_bytes
                    ),
                )
            })?,
            None => room.await,
        }
        .map_err(|_| closed())
    }

    /// Resolves once everything published before is settled (or the task is gone).
    pub(crate) async fn flush(&self) {
        let (done, settled) = oneshot::channel();
        if self.commands.send(Command::Flush(done)).await.is_ok() {
            let _ = settled.await;
        }
    }

    /// Stops the task: what is unsettled fails with `Closed`, the channel and the connection
    /// are closed.
    pub(crate) async fn close(&self) {
        // Waiters for room learn at once; the task fails what it holds.
        self.window.close();
        let (done, finished) = oneshot::channel();
        if self.commands.send(Command::Close(done)).await.is_ok() {
            let _ = finished.await;
        }
    }
}

/// How the broker names the default exchange (`""`) in its refusals.
const DEFAULT_EXCHANGE_NAME: &str = "amq.default";

fn closed() -> TransportError {
    TransportError::new(TransportErrorKind::Closed, "publishing")
}

fn connection_lost() -> TransportError {
    TransportError::new(
        TransportErrorKind::ConnectionLost,
        "the publishing connection was lost; not resent",
    )
}

/// The publish channel's callbacks: forward everything to the task.
struct PublishCallback {
    generation: u64,
    events: mpsc::UnboundedSender<Event>,
}

#[async_trait::async_trait]
impl ChannelCallback for PublishCallback {
    async fn close(
        &mut self,
        _channel: &Channel,
        close: CloseChannel,
    ) -> Result<(), amqprs::error::Error> {
        let _ = self.events.send(Event::Closed {
            generation: self.generation,
            close: BrokerClose {
                code: close.reply_code(),
                text: close.reply_text().clone(),
            },
        });
        Ok(())
    }

    async fn cancel(
        &mut self,
        _channel: &Channel,
        _cancel: Cancel,
    ) -> Result<(), amqprs::error::Error> {
        Ok(())
    }

    async fn flow(
        &mut self,
        _channel: &Channel,
        active: bool,
    ) -> Result<bool, amqprs::error::Error> {
        Ok(active)
    }

    async fn publish_ack(&mut self, _channel: &Channel, ack: Ack) {
        let _ = self.events.send(Event::Ack {
            generation: self.generation,
            tag: ack.delivery_tag(),
            multiple: ack.mutiple(),
        });
    }

    async fn publish_nack(&mut self, _channel: &Channel, nack: Nack) {
        let _ = self.events.send(Event::Nack {
            generation: self.generation,
            tag: nack.delivery_tag(),
            multiple: nack.multiple(),
        });
    }

    async fn publish_return(
        &mut self,
        _channel: &Channel,
        ret: Return,
        properties: BasicProperties,
        content: Vec<u8>,
    ) {
        let _ = self.events.send(Event::Return {
            generation: self.generation,
            exchange: ret.exchange().clone(),
            code: ret.reply_code(),
            text: ret.reply_text().clone(),
            message: Box::new(from_delivery(
                ret.routing_key().clone(),
                &properties,
                content,
            )),
        });
    }
}

/// The task that owns the publishing connection; see the module docs.
struct PublishTask {
    state: Arc<LinkState>,
    shared: Arc<TransportShared>,
    topology: Arc<Mutex<Topology>>,
    room: Arc<WindowRoom>,
    commands: mpsc::Receiver<Command>,
    events_tx: mpsc::UnboundedSender<Event>,
    events: mpsc::UnboundedReceiver<Event>,
    /// The connection, and its replacement after a loss.
    owner: ConnectionOwner,
    /// The confirm channel the window numbers publishes on (as generation
    /// [`generation`](Self::generation)).
    channel: Option<Channel>,
    /// Backoff for reopening a channel the broker closed; reset by a confirm.
    channel_backoff: Backoff,
    /// No channel is opened before this.
    channel_retry_at: Option<Instant>,
    /// Exchanges of the topology to declare again before the next channel.
    redeclare: BTreeSet<String>,
    /// The generation of the newest channel; events of older ones are stale.
    generation: u64,
    /// The unconfirmed window and the backlog: the bookkeeping this task is the shell of.
    window: window::Window<Box<Pending>>,
    /// Flushes waiting for the window and the backlog to empty.
    flushes: Vec<oneshot::Sender<()>>,
    /// What [`answer_settled`](Self::answer_settled) is answering: kept empty between
    /// calls, for its buffer.
    settled: Vec<(Box<Pending>, Result<(), TransportError>)>,
    /// The connection's user, named as the publisher of every event (a resend builds an
    /// event's properties again).
    user_id: Arc<str>,
}

enum Step {
    Event(Event),
    Link(LinkEvent),
    ChannelRetry,
    Stalled,
    Command(Option<Command>),
}

/// Now, as the window counts time (the tokio clock, so paused test time applies).
fn now() -> std::time::Instant {
    Instant::now().into_std()
}

impl PublishTask {
    async fn run(mut self) {
        loop {
            self.flush().await;
            self.answer_flushes();
            let stall_at = self
                .window
                .stall_at(self.owner.connection().is_some())
                .map(Instant::from_std);
            let step = tokio::select! {
                biased;
                Some(event) = self.events.recv() => Step::Event(event),
                event = self.owner.event() => Step::Link(event),
                () = sleep_opt(self.channel_retry_at) => Step::ChannelRetry,
                () = sleep_opt(stall_at) => Step::Stalled,
                command = self.commands.recv() => Step::Command(command),
            };
            match step {
                Step::Event(event) => self.on_event(event),
                Step::Link(event) => self.on_link(event),
                Step::ChannelRetry => self.channel_retry_at = None,
                Step::Stalled => self.on_stalled(),
                Step::Command(Some(Command::Publish(pending))) => {
                    self.window.push(pending);
                    // Take in what else is queued, so it goes out in one go.
                    for _ in 1..COMMAND_BATCH {
                        match self.commands.try_recv() {
                            Ok(Command::Publish(pending)) => self.window.push(pending),
                            Ok(Command::Flush(done)) => self.flushes.push(done),
                            Ok(Command::Close(done)) => {
                                self.shutdown().await;
                                let _ = done.send(());
                                return;
                            }
                            Err(_) => break,
                        }
                    }
                }
                Step::Command(Some(Command::Flush(done))) => self.flushes.push(done),
                Step::Command(Some(Command::Close(done))) => {
                    self.shutdown().await;
                    let _ = done.send(());
                    return;
                }
                // Every handle is gone: nobody can publish or learn an outcome.
                Step::Command(None) => {
                    self.shutdown().await;
                    return;
                }
            }
        }
    }

    /// Answers the flushes once nothing is unsettled: a flush waits for every publish
    /// queued before it, and, under a steady stream of publishes, for a moment with none in
    /// flight (its callers bound the wait).
    fn answer_flushes(&mut self) {
        if self.flushes.is_empty() || !self.window.is_idle() {
            return;
        }
        for done in self.flushes.drain(..) {
            let _ = done.send(());
        }
    }

    /// Answers the callers of what the window settled; `close` is the broker's close that
    /// settled them, if that is what did.
    fn answer_settled(&mut self, close: Option<&BrokerClose>) {
        let mut settled = std::mem::take(&mut self.settled);
        let mut bytes = 0u64;
        while let Some((pending, outcome)) = self.window.poll_settled() {
            bytes += u64::from(pending.charge);
            let result = pending.outcome(outcome, close);
            settled.push((pending, result));
        }
        // Room first: whoever is told an outcome sees the room of everything settled with
        // it free.
        self.room.give_back(settled.len(), bytes);
        for (pending, result) in settled.drain(..) {
            pending.answer(result);
        }
        self.settled = settled;
    }

    /// Publishes the backlog, in order, if there is a connection and a channel may be
    /// opened.
    async fn flush(&mut self) {
        if self.window.backlog() == 0
            || self.owner.connection().is_none()
            || self.channel_retry_at.is_some()
        {
            return;
        }
        let channel = match self.ensure_channel().await {
            Ok(channel) => channel,
            Err(error) => {
                tracing::warn!(error = %error, "opening the publish channel failed");
                self.retry_channel_later();
                return;
            }
        };
        let frame_max = self.owner.connection().map_or(0, frame_max);
        let mut resent = 0u64;
        // The window reads the time only for a send into an empty window (its stall clock
        // starts then), which only the first send of a flush can be.
        let mut sent_at = None;
        while let Some(mut queued) = self.window.pop_unsent() {
            // Checked again on the connection it goes out on: a resend may meet a broker
            // with a smaller frame size than the one the publish was accepted under.
            if let Err(error) = check_header_frame(
                queued.message.header_frame,
                frame_max,
                queued.message.outgoing.payload.routing_key(),
            ) {
                tracing::warn!(error = %error, "a message's headers do not fit in a frame; not sent");
                queued.message.fail(&self.room, error);
                continue;
            }
            let pending = &mut queued.message;
            let properties = match pending.properties.take() {
                Some(properties) => properties,
                // Sent before: the same message gives the same properties it gave then.
                None => match pending
                    .outgoing
                    .payload
                    .properties(pending.outgoing.force_persistent, &self.user_id)
                {
                    Ok(properties) => properties,
                    Err(error) => {
                        queued.message.fail(&self.room, error);
                        continue;
                    }
                },
            };
            let outgoing = &pending.outgoing;
            // Built whole: the client's chained builder copies both names once more.
            let args = BasicPublishArguments {
                exchange: outgoing.exchange.to_owned(),
                routing_key: outgoing.payload.routing_key().to_owned(),
                mandatory: outgoing.mandatory,
                immediate: false,
            };
            let sent = within(
                channel.basic_publish(properties, outgoing.payload.body().to_vec(), args),
                "publishing",
            )
            .await
            .and_then(|r| r.map_err(|e| from_client(e, "publishing")));
            match sent {
                Ok(()) => {
                    if queued.sent > 0 {
                        resent += 1;
                    }
                    self.window.sent(queued, *sent_at.get_or_insert_with(now));
                }
                Err(error) => {
                    // The frame never left: the channel (or the connection) is unusable, and
                    // the broker's numbering of what did leave is ours no more to trust.
                    tracing::warn!(error = %error, "publish failed; replacing the channel");
                    self.window.unsent(queued);
                    self.drop_channel(None);
                    self.retry_channel_later();
                    break;
                }
            }
        }
        if resent > 0 {
            self.shared
                .counters
                .resent
                .fetch_add(resent, Ordering::Relaxed);
            tracing::info!(resent, "resent unconfirmed publishes on a new channel");
        }
    }

    /// The open confirm channel, opening one if needed (after declaring again the exchanges
    /// the broker said are gone).
    async fn ensure_channel(&mut self) -> Result<Channel, TransportError> {
        if let Some(current) = &self.channel {
            if current.is_open() {
                return Ok(current.clone());
            }
            self.drop_channel(None);
        }
        let connection = match self.owner.connection() {
            Some(connection) => connection.clone(),
            None => return Err(connection_lost()),
        };
        if !self.redeclare.is_empty() {
            self.redeclare_exchanges(&connection).await?;
        }
        self.generation += 1;
        let generation = self.generation;
        let channel = within(connection.open_channel(None), "opening the publish channel")
            .await?
            .map_err(|e| from_client(e, "opening the publish channel"))?;
        channel
            .register_callback(PublishCallback {
                generation,
                events: self.events_tx.clone(),
            })
            .await
            .map_err(|e| from_client(e, "registering the publish channel callbacks"))?;
        within(
            channel.confirm_select(ConfirmSelectArguments::default()),
            "selecting confirms",
        )
        .await?
        .map_err(|e| from_client(e, "selecting confirms"))?;
        tracing::debug!(
            channel = channel.channel_id(),
            generation,
            "publish channel open, confirms selected"
        );
        self.window.channel_opened(generation);
        self.channel = Some(channel.clone());
        Ok(channel)
    }

    async fn redeclare_exchanges(&mut self, connection: &Connection) -> Result<(), TransportError> {
        let decls: Vec<_> = match self.topology.lock() {
            Ok(topology) => topology
                .exchanges()
                .filter(|e| self.redeclare.contains(&e.name))
                .cloned()
                .collect(),
            Err(_) => Vec::new(),
        };
        let (channel, slot) = open_channel(connection, "redeclare", self.shared.clone()).await?;
        let declare = DeclareChannel::wrap(channel, slot);
        for decl in &decls {
            if let Err(error) = declare.exchange(decl).await {
                tracing::error!(error = %error, "declaring a lost exchange again failed");
                break;
            }
            tracing::info!(exchange = %decl.name, "declared a lost exchange again");
        }
        declare.close().await;
        self.redeclare.clear();
        Ok(())
    }

    fn on_stalled(&mut self) {
        self.window.stall();
        self.state.block(format!(
            "no publish confirm for {STALL_AFTER:?} with {} unconfirmed while connected: \
             the broker is blocking publishers (a memory or disk alarm) or is overloaded",
            self.window.in_flight()
        ));
    }

    /// What a confirm did: unblock, and replace a channel the broker nacks everything on.
    fn on_progress(&mut self, progress: Progress) {
        if progress.unblocked {
            self.state.unblock();
        }
        self.answer_settled(None);
        if progress.reopen {
            // The window gave the channel up: what is still unsettled on it is resent on the
            // next one.
            Counters::bump(&self.shared.counters.nack_run_reopens);
            tracing::warn!(
                for_ = ?NACK_RUN_REOPEN,
                "the broker nacked every publish on the channel; opening a new one"
            );
            self.channel = None;
            self.retry_channel_later();
        }
    }

    fn on_event(&mut self, event: Event) {
        let stale = match event {
            Event::Ack {
                generation,
                tag,
                multiple,
            } => {
                let progress = self.window.on_ack(generation, tag, multiple, now());
                if !progress.stale {
                    // Progress: a channel the broker closes next is reopened at once.
                    self.channel_backoff.reset();
                    self.on_progress(progress);
                }
                progress.stale
            }
            Event::Nack {
                generation,
                tag,
                multiple,
            } => {
                let progress = self.window.on_nack(generation, tag, multiple, now());
                if !progress.stale {
                    self.on_progress(progress);
                }
                progress.stale
            }
            Event::Return {
                generation,
                exchange,
                code,
                text,
                message,
            } => self.on_return(generation, &exchange, BrokerClose { code, text }, &message),
            Event::Closed { generation, close } if self.window.is_current(generation) => {
                self.on_channel_closed(&close);
                false
            }
            Event::Closed { .. } => true,
        };
        if stale {
            tracing::debug!("dropped an event of a replaced publish channel");
        }
    }

    /// Matches a `basic.return` to what it returns (see [`window::Window::on_return`]): same
    /// exchange, routing key, message id, correlation id and body. Whether it was stale.
    fn on_return(
        &mut self,
        generation: u64,
        exchange: &str,
        close: BrokerClose,
        returned: &WireMessage,
    ) -> bool {
        let matches = |pending: &Pending| {
            let outgoing = &pending.outgoing;
            outgoing.exchange == exchange
                && outgoing.payload.routing_key() == returned.routing_key
                && outgoing.payload.is_returned(returned)
        };
        match self
            .window
            .on_return(generation, |pending| matches(pending), close)
        {
            Returned::Matched => false,
            Returned::Unmatched => {
                Counters::bump(&self.shared.counters.unmatched_returns);
                tracing::warn!(
                    exchange,
                    routing_key = %returned.routing_key,
                    "a basic.return matched no unsettled publish"
                );
                false
            }
            Returned::Stale => true,
        }
    }

    /// The broker closed the channel; the connection is still up. Fails what the close is
    /// about (see the module docs), queues the rest again and reopens a channel later.
    fn on_channel_closed(&mut self, close: &BrokerClose) {
        Counters::bump(&self.shared.counters.channel_closes);
        tracing::warn!(code = close.code, text = %close.text, "broker closed the publish channel");
        self.shared.emit(Lifecycle::ChannelClosed {
            link: Link::Publish,
            code: close.code,
            reason: close.text.clone(),
        });
        self.drop_channel(Some(close));
        match publish_refusal(close) {
            PublishRefusal::TooLarge { size, max } => {
                self.room.broker_max.store(max, Ordering::Relaxed);
                // The refused message is logged as it is answered (`Pending::settle`).
                if !self.window.refuse_too_large(size) {
                    tracing::warn!(size, "no unsettled message has the refused size");
                }
            }
            PublishRefusal::Exchange { code, exchange } => {
                let known = code == code::NOT_FOUND
                    && self
                        .topology
                        .lock()
                        .is_ok_and(|t| t.exchanges().any(|e| e.name == exchange));
                if known {
                    // Ours, and gone (deleted, or a broker that lost its data): declare it
                    // again and resend.
                    self.redeclare.insert(exchange);
                } else {
                    // The broker names the default exchange `amq.default`; mesh publishes
                    // to it as `""`.
                    let refused = self.window.refuse_exchange(&exchange)
                        + if exchange == DEFAULT_EXCHANGE_NAME {
                            self.window.refuse_exchange("")
                        } else {
                            0
                        };
                    tracing::warn!(
                        %exchange,
                        refused,
                        "the broker refused publishes to an exchange; not resent"
                    );
                }
            }
            PublishRefusal::Topic { exchange, key } => {
                let refused = self.window.refuse_topic(&exchange, &key);
                tracing::warn!(
                    %exchange,
                    routing_key = %key,
                    refused,
                    "the broker refused publishes under a topic this user may not write; \
                     not resent"
                );
            }
            PublishRefusal::UserId => {
                let refused = self.window.refuse_all();
                tracing::error!(
                    refused,
                    "the broker refused the user-id stamped on every message (it is not the \
                     connection's user); not resent"
                );
            }
            PublishRefusal::Other => {}
        }
        self.answer_settled(Some(close));
        self.retry_channel_later();
    }

    /// Forgets the channel: its unsettled messages go back to the front of the backlog, in
    /// order, except those that are not resent, which fail with `ConnectionLost`.
    fn drop_channel(&mut self, close: Option<&BrokerClose>) {
        self.channel = None;
        self.window.channel_lost();
        self.answer_settled(close);
        // A channel the broker closed is gone already; one we gave up on is closed by the
        // client library when its last handle drops.
    }

    fn retry_channel_later(&mut self) {
        let delay = self.channel_backoff.next_delay();
        self.channel_retry_at = Some(Instant::now() + delay);
    }

    /// The publish task's reactions to the connection going down (the window goes back to
    /// the backlog, what is not resent fails) or up (the broker's size limit is learnt
    /// again); the owner did the rest.
    fn on_link(&mut self, event: LinkEvent) {
        match &event {
            LinkEvent::Lost { reason } => {
                // The owner marked the link down, which ends a block (reported); the stall
                // clock starts over on the next connection.
                self.channel = None;
                self.window.connection_lost();
                self.answer_settled(None);
                self.channel_retry_at = None;
                self.channel_backoff.reset();
                tracing::warn!(
                    %reason,
                    unconfirmed = self.window.backlog(),
                    "publishing connection lost; unconfirmed publishes will be resent"
                );
            }
            LinkEvent::Up { address } => {
                // Perhaps another node, perhaps reconfigured: learn its limits again.
                self.room.broker_max.store(0, Ordering::Relaxed);
                self.room.frame_max.store(
                    self.owner.connection().map_or(0, frame_max),
                    Ordering::Relaxed,
                );
                tracing::info!(
                    %address,
                    to_resend = self.window.backlog(),
                    "publishing connection re-established"
                );
            }
        }
        self.owner.report(event);
    }

    async fn shutdown(&mut self) {
        self.room.close();
        for done in self.flushes.drain(..) {
            let _ = done.send(());
        }
        self.window.close();
        self.answer_settled(None);
        self.commands.close();
        while let Ok(command) = self.commands.try_recv() {
            match command {
                Command::Publish(pending) => pending.fail(&self.room, closed()),
                Command::Flush(done) | Command::Close(done) => {
                    let _ = done.send(());
                }
            }
        }
        if let Some(channel) = self.channel.take() {
            if channel.is_open() {
                let _ = within(channel.close(), "closing the publish channel").await;
            }
        }
        self.owner.close().await;
        tracing::info!("publishing connection closed");
    }
}
