//! A publish on its way from a handle to the task and through the window: what it carries
//! ([`Publication`], [`Payload`]), the room it holds in the unconfirmed window
//! ([`WindowRoom`]), how its content-header frame is measured against the connection's
//! `frame_max`, and what its caller is told once the window settled it.

use mesh_core::text::EscapedDisplay;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use amqprs::channel::{BasicPublishArguments, Channel};
use amqprs::BasicProperties;
use bytes::Bytes;
use mesh_core::{Envelope, TransportError, TransportErrorKind, WireMessage};
use tokio::sync::{oneshot, Notify, Semaphore};
use tokio::time::Instant;

use crate::convert::to_properties;
use crate::error::{from_close, publish_refusal, BrokerClose, PublishRefusal};

use super::window::{self, Outcome};

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
    pub(super) fn is_returned(&self, returned: &WireMessage) -> bool {
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
    pub(super) fn properties(
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
    pub(super) fn header_frame_bound(&self, user_id: &str) -> usize {
        match self {
            Payload::Message { message, .. } => crate::convert::header_frame_bound(message),
            Payload::Event(envelope) => crate::convert::event_frame_bound(envelope, user_id),
        }
    }
}

pub(super) type Responder = oneshot::Sender<Result<(), TransportError>>;

/// One publish on its way to, or in, the window.
pub(super) struct Pending {
    pub(super) outgoing: Publication,
    /// Built once it is taken in, and handed to the client library by the first send; a
    /// resend builds them again from `outgoing` (`None` then).
    pub(super) properties: Option<BasicProperties>,
    /// The size of its content-header frame (see [`header_frame_size`]), or a bound of it
    /// no larger than any broker's `frame_max`.
    pub(super) header_frame: usize,
    pub(super) responder: Responder,
    /// Its bytes' share of the window. Its room (one publish, and these bytes) was taken
    /// from the window's semaphores and is the task's from the hand-over on: the task gives
    /// it back when the message is settled ([`WindowRoom::give_back`]), before it answers.
    pub(super) charge: u32,
}

impl Pending {
    /// Gives its room back, then fails it: whoever saw the outcome sees the room free.
    pub(super) fn fail(self: Box<Self>, room: &WindowRoom, error: TransportError) {
        room.give_back(1, u64::from(self.charge));
        self.answer(Err(error));
    }

    /// Tells the caller; its room was given back already.
    pub(super) fn answer(self: Box<Self>, outcome: Result<(), TransportError>) {
        let Pending { responder, .. } = *self;
        let _ = responder.send(outcome);
    }
}

/// The size of the content-header frame that carries `properties`: AMQP sends all of a
/// message's properties and headers in that one frame, which may not exceed the
/// connection's `frame_max`. Measured by the client library's own encoding.
pub(super) fn header_frame_size(properties: &BasicProperties) -> Result<usize, TransportError> {
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
pub(super) fn frame_max(connection: &amqprs::connection::Connection) -> usize {
    match connection.frame_max() {
        0 => usize::MAX,
        max => usize::try_from(max).unwrap_or(usize::MAX),
    }
}

/// Refuses a content-header frame larger than the connection's `frame_max` (0: not known,
/// nothing to check yet). The broker would close the whole connection on it, with a close
/// that names no publish, and a resend would do the same forever: so it is never sent.
pub(super) fn check_header_frame(
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
    pub(super) fn outcome(
        &self,
        outcome: Outcome,
        close: Option<&BrokerClose>,
    ) -> Result<(), TransportError> {
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
            // A publish that is not resent (a request) lost with a channel the broker
            // closed because of it is refused, not lost: retrying would be refused again.
            Outcome::NotResent => match close.filter(|close| refuses(close, outgoing)) {
                Some(close) => Err(from_close(
                    close.clone(),
                    &format!("publishing to exchange `{}`", outgoing.exchange),
                )),
                None => Err(with_close(connection_lost())),
            },
            Outcome::TooLarge => {
                let size = outgoing.payload.body().len();
                let max = close.and_then(|close| match publish_refusal(close) {
                    PublishRefusal::TooLarge { max, .. } => Some(max),
                    _ => None,
                });
                tracing::warn!(
                    size,
                    max,
                    routing_key = %EscapedDisplay(&outgoing.payload.routing_key()),
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

impl Publication {
    /// The client's arguments of its `basic.publish`. Built whole: the client's chained
    /// builder copies both names once more.
    pub(super) fn publish_arguments(&self) -> BasicPublishArguments {
        BasicPublishArguments {
            exchange: self.exchange.to_owned(),
            routing_key: self.payload.routing_key().to_owned(),
            mandatory: self.mandatory,
            immediate: false,
        }
    }
}

/// What a handle asks of the task (a publish goes into the shared [`Core`] instead).
pub(super) enum Command {
    /// Answer once everything published before is settled.
    Flush(oneshot::Sender<()>),
    Close(oneshot::Sender<()>),
}

/// Now, as the window counts time (the tokio clock, so paused test time applies).
pub(super) fn now() -> std::time::Instant {
    Instant::now().into_std()
}

/// The channel a handle may publish on itself, while the task lets it: the task's current
/// confirm channel, its generation in the window, and its connection's frame size limit.
pub(super) struct Direct {
    pub(super) channel: Channel,
    pub(super) generation: u64,
    pub(super) frame_max: usize,
}

/// The unconfirmed window and the backlog, shared by the handles and the task under one
/// lock (never held across an await). A handle takes a publish in, and, while the task has
/// set [`direct`](Self::direct) (a confirm channel open, nothing waiting in the backlog),
/// publishes it itself under the lock, so that the window numbers publishes in the order
/// their frames go out. Everything else (the backlog after a loss, confirms, refusals,
/// timers) is the task's.
pub(super) struct Core {
    pub(super) window: window::Window<Box<Pending>>,
    pub(super) direct: Option<Direct>,
    /// The task is shutting down or gone: nothing more is taken in.
    pub(super) closed: bool,
}

impl Core {
    /// Publishes the one message waiting on the direct channel, if there is one and it may:
    /// whether the task must be woken (something is left for it to publish, or the window
    /// just started to fill, which starts its stall clock).
    fn publish_direct(&mut self) -> bool {
        let Core { window, direct, .. } = self;
        let Some(to) = direct.as_ref() else {
            return true;
        };
        if window.backlog() != 1 || !window.is_current(to.generation) || !to.channel.is_open() {
            *direct = None;
            return true;
        }
        let Some(mut queued) = window.pop_unsent() else {
            return true;
        };
        let pending = &mut queued.message;
        let fits = check_header_frame(
            pending.header_frame,
            to.frame_max,
            pending.outgoing.payload.routing_key(),
        )
        .is_ok();
        // Taken in just now, so its properties are there; the task fails what does not fit.
        let properties = match pending.properties.take() {
            Some(properties) if fits => properties,
            properties => {
                pending.properties = properties;
                window.unsent(queued);
                return true;
            }
        };
        let outgoing = &pending.outgoing;
        let sent = to.channel.try_basic_publish(
            properties,
            outgoing.payload.body().to_vec(),
            outgoing.publish_arguments(),
        );
        match sent {
            Ok(()) => {
                let started = window.in_flight() == 0;
                window.sent(queued, now());
                started
            }
            Err(_) => {
                // Nothing was queued (the client's queue is full, or the connection gone):
                // the task publishes it, waiting for room, or learns of the loss. A resend
                // builds its properties again.
                window.unsent(queued);
                *direct = None;
                true
            }
        }
    }
}

/// The room of the unconfirmed window, and the window itself ([`Core`]), shared by the
/// handles and the task.
pub(super) struct WindowRoom {
    pub(super) count: Arc<Semaphore>,
    pub(super) bytes: Arc<Semaphore>,
    pub(super) max_count: usize,
    pub(super) max_bytes: usize,
    /// The broker's message size limit, once a refusal told it (0: not known).
    pub(super) broker_max: AtomicUsize,
    /// The frame size limit of the last connection (0: none yet).
    pub(super) frame_max: AtomicUsize,
    pub(super) core: Mutex<Core>,
    /// Wakes the task: a publish waits in the backlog, or the window started to fill.
    pub(super) wake: Notify,
}

impl std::fmt::Debug for WindowRoom {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WindowRoom")
            .field("max_count", &self.max_count)
            .field("max_bytes", &self.max_bytes)
            .finish_non_exhaustive()
    }
}

impl WindowRoom {
    /// The window, locked. A panic while it was held leaves it as consistent as any
    /// step of the state machine does: the lock is taken again.
    pub(super) fn core(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes `pending` (whose room it holds) into the window and publishes it at once on
    /// the direct channel if the task lets handles publish; otherwise the task publishes
    /// it. Nothing here awaits: a caller cancelled after it returned has published whole,
    /// one cancelled before has published nothing. `Err` (the publish back) once the task
    /// is shutting down.
    pub(super) fn take(&self, pending: Box<Pending>) -> Result<(), Box<Pending>> {
        let mut core = self.core();
        if core.closed {
            return Err(pending);
        }
        core.window.push(pending);
        let wake = core.publish_direct();
        drop(core);
        if wake {
            self.wake.notify_one();
        }
        Ok(())
    }

    pub(super) fn close(&self) {
        self.count.close();
        self.bytes.close();
    }

    /// Gives back the room of `count` settled publishes whose bytes' shares add up to
    /// `bytes`: one release per semaphore, however many a confirm settled.
    pub(super) fn give_back(&self, count: usize, bytes: u64) {
        if count > 0 {
            self.count.add_permits(count);
        }
        if bytes > 0 {
            self.bytes
                .add_permits(usize::try_from(bytes).unwrap_or(usize::MAX));
        }
    }
}

/// Whether the broker's `close` refused `outgoing` itself: a topic it may not write under
/// its key, an exchange it may not write to, or the `user-id` every message carries.
fn refuses(close: &BrokerClose, outgoing: &Publication) -> bool {
    match publish_refusal(close) {
        PublishRefusal::Topic { exchange, key } => {
            exchange == outgoing.exchange && key == outgoing.payload.routing_key()
        }
        PublishRefusal::Exchange { code, exchange } => {
            code == crate::error::code::ACCESS_REFUSED
                && (exchange == outgoing.exchange
                    || (exchange == "amq.default" && outgoing.exchange.is_empty()))
        }
        PublishRefusal::UserId => true,
        PublishRefusal::TooLarge { .. } | PublishRefusal::Other => false,
    }
}

pub(super) fn closed() -> TransportError {
    TransportError::new(TransportErrorKind::Closed, "publishing")
}

pub(super) fn connection_lost() -> TransportError {
    TransportError::new(
        TransportErrorKind::ConnectionLost,
        "the publishing connection was lost; not resent",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(exchange: &'static str, key: &str) -> Publication {
        Publication {
            exchange,
            payload: Payload::Message {
                routing_key: key.to_owned(),
                message: WireMessage::new(key, "{}"),
            },
            mandatory: true,
            force_persistent: false,
            resend: false,
        }
    }

    fn close(code: u16, text: &str) -> BrokerClose {
        BrokerClose {
            code,
            text: text.to_owned(),
        }
    }

    #[test]
    fn a_close_refuses_the_publish_it_names_and_no_other() {
        let topic = close(
            403,
            "ACCESS_REFUSED - access to topic 'billing.quote' in exchange 'mesh.rpc' in vhost \
             '/' refused for user 'module.shop'",
        );
        assert!(refuses(&topic, &request("mesh.rpc", "billing.quote")));
        assert!(!refuses(&topic, &request("mesh.rpc", "billing.refund")));
        assert!(!refuses(&topic, &request("mesh.events", "billing.quote")));
        let exchange = close(
            403,
            "ACCESS_REFUSED - write access to exchange 'amq.default' in vhost '/' refused for \
             user 'u'",
        );
        assert!(refuses(&exchange, &request("", "q")));
        assert!(!refuses(&exchange, &request("mesh.rpc", "q")));
        let user_id = close(
            406,
            "PRECONDITION_FAILED - user_id property set to 'a' but authenticated user was 'b'",
        );
        assert!(refuses(&user_id, &request("mesh.rpc", "any.tool")));
        let other = close(406, "PRECONDITION_FAILED - unknown delivery tag 7");
        assert!(!refuses(&other, &request("mesh.rpc", "any.tool")));
    }
}
