//! Events prepared for a store of the caller's (a transactional outbox): the final wire
//! message made without publishing it, and its publish, later and maybe by another process,
//! with the broker's confirm.
//!
//! [`Bus::prepare_emit`] does everything an emit does before the transport (the key under
//! the bus's prefix, a new event id, `x-source`, `x-node`, `x-time`, `x-schema`, the
//! causation id of the event being handled, trace context) and stops there;
//! [`Bus::publish_prepared`] publishes such a message, checked to be this bus's own, and
//! resolves on its confirm. The transport stamps the connection's user (`user-id`) when it
//! publishes, as on every emit: a stored message carries none.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use mesh_core::{codec, EventId, PublishOptions, Timestamp, WireMessage};

use crate::bus::{Bus, Outgoing};
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

    /// A message [`Bus::prepare`] just made, with its id.
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

/// The broker's answer to [`Bus::publish_prepared`]: resolves to the event's id once the
/// broker confirmed it.
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

impl Bus {
    /// Turns `outgoing` into the message an emit would publish, without publishing it: the
    /// key under this bus's prefix (a foreign key fails as on emit), its event id (a new one
    /// unless [`Outgoing::id`] chose it), `x-source`, `x-node`, `x-time`, `x-schema`, the
    /// causation id (the event being handled, unless [`Outgoing::causation_id`] chose one)
    /// and the trace context of the current span.
    ///
    /// A transactional outbox stores it and a relay publishes it later with
    /// [`Bus::publish_prepared`]; nothing is recorded in the emit metrics until then.
    pub fn prepare_emit(&self, outgoing: Outgoing) -> Result<Prepared, Error> {
        let span = tracing::info_span!(
            "mesh.emit",
            otel.kind = "producer",
            prepared = true,
            key = tracing::field::Empty,
            id = tracing::field::Empty,
            causation_id = tracing::field::Empty,
        );
        let _entered = span.enter();
        let (id, envelope, _) = self.prepare(outgoing, &span)?;
        Ok(Prepared::made(id, mesh_core::codec::encode(&envelope)))
    }

    /// Publishes a prepared event (made by [`Bus::prepare_emit`] of a bus with this identity,
    /// maybe in another process) as it is, waiting at most `deadline` for room in the
    /// transport's window and its confirm. Returns once the transport took it, with a
    /// future resolving on the confirm; emit metrics are recorded as for an emit.
    ///
    /// Only this bus's own events are published: a key outside its prefix, or an
    /// `x-source` other than its own, fails with [`ErrorKind::ForeignKey`]. A bus being
    /// drained publishes prepared events until its handlers finished and its spool (if any)
    /// was drained, then fails them with [`ErrorKind::Closed`], as a closed bus does.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe while it waits for room: dropped then, the event may or may not
    /// have been taken.
    pub async fn publish_prepared(
        &self,
        prepared: Prepared,
        deadline: Option<Duration>,
    ) -> Result<PreparedConfirm, Error> {
        let inner = &self.inner;
        if inner.closed.is_cancelled() {
            return Err(Error::new(ErrorKind::Closed));
        }
        let foreign = || {
            Error::new(ErrorKind::ForeignKey {
                key: prepared.message.routing_key.clone(),
                allowed: format!("{}…", inner.identity.prefix(&inner.node)),
            })
        };
        let key = mesh_core::RoutingKey::parse(&prepared.message.routing_key)?;
        let source = prepared
            .message
            .header(codec::SOURCE)
            .and_then(|v| v.as_str());
        if !inner.identity.owns(&inner.node, &key) || source != Some(inner.source.as_str()) {
            return Err(foreign());
        }
        let label = Source::new(&inner.source);
        let options = PublishOptions {
            deadline,
            ..PublishOptions::default()
        };
        match inner.transport.publish(prepared.message, options).await {
            Ok(confirm) => {
                record::emitted(&label);
                Ok(PreparedConfirm {
                    id: prepared.id,
                    since: Instant::now(),
                    source: label,
                    confirm: Some(confirm),
                })
            }
            Err(e) => {
                record::emit_refused(&label, &e);
                Err(e.into())
            }
        }
    }
}
