//! A publish on its way from a handle to the task and through the window: what it carries
//! ([`Publication`], [`Payload`]), the room it holds in the unconfirmed window
//! ([`WindowRoom`]), how its content-header frame is measured against the connection's
//! `frame_max`, and what its caller is told once the window settled it.

use mesh_core::text::EscapedDisplay;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use amqprs::BasicProperties;
use bytes::Bytes;
use mesh_core::{Envelope, TransportError, TransportErrorKind, WireMessage};
use tokio::sync::{oneshot, Semaphore};

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

/// What a handle asks of the task.
pub(super) enum Command {
    Publish(Box<Pending>),
    /// Answer once everything published before is settled.
    Flush(oneshot::Sender<()>),
    Close(oneshot::Sender<()>),
}

/// The room of the unconfirmed window, shared by the handles and the task.
#[derive(Debug)]
pub(super) struct WindowRoom {
    pub(super) count: Arc<Semaphore>,
    pub(super) bytes: Arc<Semaphore>,
    pub(super) max_count: usize,
    pub(super) max_bytes: usize,
    /// The broker's message size limit, once a refusal told it (0: not known).
    pub(super) broker_max: AtomicUsize,
    /// The frame size limit of the last connection (0: none yet).
    pub(super) frame_max: AtomicUsize,
}

impl WindowRoom {
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
