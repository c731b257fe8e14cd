//! Events prepared for a store of the caller's (a transactional outbox): the final wire
//! message made without publishing it, and its publish, later and maybe by another process,
//! with the broker's confirm.
//!
//! [`Bus::prepare_emit`](crate::Bus::prepare_emit) does everything an emit does before the
//! transport (the key under the bus's prefix, a new event id, `x-source`, `x-node`,
//! `x-time`, `x-schema`, the causation id of the event being handled, trace context) and
//! stops there; [`Bus::publish_prepared`](crate::Bus::publish_prepared) publishes such a
//! message, checked to be this bus's own, and resolves on its confirm. The transport stamps
//! the connection's user (`user-id`) when it publishes, as on every emit: a stored message
//! carries none.
//!
//! This file holds the two values, [`Prepared`] and [`PreparedConfirm`]; the bus's emitter
//! (`crate::emitter`) makes and publishes them.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use mesh_core::{codec, EventId, Timestamp, WireMessage};

use crate::error::{Error, ErrorKind};
use crate::telemetry::record::{self, Source};

/// An event in its final wire form, not published: what an outbox stores.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    id: EventId,
    time: Timestamp,
    message: WireMessage,
}

impl Prepared {
    /// A message read back from a store: it must be an event of the contract (its headers
    /// decode), so a row altered in the store is refused here rather than published.
    pub fn from_message(message: WireMessage) -> Result<Prepared, Error> {
        let envelope = codec::decode(&message)?;
        Ok(Prepared {
            id: envelope.id,
            time: envelope.time,
            message,
        })
    }

    /// A message the emitter just made, with its id.
    pub(crate) fn made(id: EventId, message: WireMessage) -> Prepared {
        let time = message
            .header(codec::TIME)
            .and_then(|v| v.as_str())
            .and_then(|t| Timestamp::parse(t).ok())
            .unwrap_or_else(Timestamp::now);
        Prepared { id, time, message }
    }

    /// The event's id (`x-event-id`).
    pub fn id(&self) -> EventId {
        self.id
    }

    /// When it was emitted (`x-time`): when it was prepared.
    pub fn time(&self) -> Timestamp {
        self.time
    }

    /// The wire message.
    pub fn message(&self) -> &WireMessage {
        &self.message
    }

    /// The wire message, taken.
    pub fn into_message(self) -> WireMessage {
        self.message
    }
}

/// The broker's answer to [`Bus::publish_prepared`](crate::Bus::publish_prepared): resolves
/// to the event's id once the broker confirmed it.
///
/// # Cancel safety
///
/// Cancel safe: dropping it only gives up learning the outcome; the message is published
/// (and resent across reconnects) all the same.
#[must_use = "a prepared event is confirmed only when this resolves to Ok"]
pub struct PreparedConfirm {
    id: EventId,
    since: Instant,
    source: Source,
    confirm: Option<mesh_core::Confirm>,
}

impl PreparedConfirm {
    /// The confirm of prepared event `id`, pending since `since`, recorded under `source`.
    pub(crate) fn new(
        id: EventId,
        since: Instant,
        source: Source,
        confirm: mesh_core::Confirm,
    ) -> PreparedConfirm {
        PreparedConfirm {
            id,
            since,
            source,
            confirm: Some(confirm),
        }
    }
}

impl std::fmt::Debug for PreparedConfirm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PreparedConfirm")
            .field("id", &self.id)
            .field("resolved", &self.confirm.is_none())
            .finish()
    }
}

impl Future for PreparedConfirm {
    type Output = Result<EventId, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(confirm) = self.confirm.as_mut() else {
            return Poll::Ready(Err(Error::new(ErrorKind::Closed)));
        };
        let confirmed = std::task::ready!(Pin::new(confirm).poll(cx));
        self.confirm = None;
        record::confirmed(&self.source, self.since, &confirmed);
        Poll::Ready(confirmed.map(|()| self.id).map_err(Error::from))
    }
}
