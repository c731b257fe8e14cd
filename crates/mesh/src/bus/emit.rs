//! Emitting on a bus: [`Bus::emit`], [`Bus::emit_outgoing`], [`Bus::emit_nowait`], events
//! prepared for an outbox ([`Bus::prepare_emit`], [`Bus::publish_prepared`]) and the
//! announcement of the bus's contract. The bus's emitter (`crate::emitter`) makes and
//! publishes each event; this file chooses where it goes (the transport or the spool) and who
//! waits for its confirm.

use mesh_core::text::EscapedDisplay;
use std::time::Duration;

use mesh_core::contract::{ANNOUNCED_EVENT, CONTRACT_FORMAT};
use mesh_core::EventId;
use tracing::{debug, warn, Instrument};

use super::pending::PendingEmit;
use super::Bus;
use crate::emitter::emit_span;
use crate::error::Error;
use crate::event::Event;
use crate::outgoing::Outgoing;
use crate::prepared::{Prepared, PreparedConfirm};
use crate::telemetry::record;

impl Bus {
    /// Hands the announcement of its contract to the transport; its confirm is awaited on
    /// the side (and by [`Bus::drain`]). Never fails the bus: a failure is logged.
    pub(super) async fn announce(&self) {
        let body = match serde_json::to_vec(&self.inner.contract) {
            Ok(body) => body,
            Err(e) => {
                warn!(error = %EscapedDisplay(&e), "the contract could not be serialized, not announced");
                return;
            }
        };
        let outgoing = match Outgoing::json_bytes(ANNOUNCED_EVENT, body) {
            Ok(outgoing) => outgoing.schema(CONTRACT_FORMAT),
            Err(e) => {
                warn!(error = %EscapedDisplay(&e), "the contract could not be announced");
                return;
            }
        };
        let span = emit_span();
        let published = self
            .inner
            .emitter
            .publish(outgoing, &span)
            .instrument(span.clone())
            .await;
        let (id, confirm, since) = match published {
            Ok(published) => published,
            Err(e) => {
                warn!(error = %EscapedDisplay(&e), "the contract announcement was refused; the bus runs on");
                return;
            }
        };
        let source = self.inner.emitter.source_label().clone();
        self.inner.confirms.spawn(
            async move {
                let confirmed = confirm.await;
                record::confirmed(&source, since, &confirmed);
                match confirmed {
                    Ok(()) => debug!(%id, "contract announced"),
                    Err(e) => warn!(
                        %id,
                        error = %EscapedDisplay(&e),
                        "the contract announcement was not confirmed; the bus runs on"
                    ),
                }
            }
            .instrument(span),
        );
    }

    /// Emits a typed event and waits until the broker confirmed it (on a bus with a spool:
    /// until the spool kept it, see [`BusBuilder::spool`](crate::BusBuilder::spool)).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped before it resolves, the event may or may not have been
    /// published, and the caller cannot tell which. One that was published is still
    /// confirmed (and resent across reconnects) like any other, and [`Bus::drain`] waits for
    /// it. To try again without doubling it, emit an [`Outgoing`] with the same
    /// [`id`](Outgoing::id): consumers deduplicate by event id.
    pub async fn emit<E: Event>(&self, event: &E) -> Result<EventId, Error> {
        self.emit_outgoing(Outgoing::event(event)?).await
    }

    /// Emits an [`Outgoing`] and waits until the broker confirmed it (on a bus with a
    /// spool: until the spool kept it).
    ///
    /// # Cancel safety
    ///
    /// As [`Bus::emit`]: not cancel safe; a retry reuses the event's id.
    pub async fn emit_outgoing(&self, outgoing: Outgoing) -> Result<EventId, Error> {
        let span = emit_span();
        let emitter = &self.inner.emitter;
        async {
            if let Some(spool) = emitter.spool() {
                return emitter.keep(spool, outgoing, &span).await;
            }
            let (id, confirm, since) = emitter.publish(outgoing, &span).await?;
            let confirmed = confirm.await;
            record::confirmed(emitter.source_label(), since, &confirmed);
            confirmed?;
            Ok(id)
        }
        .instrument(span.clone())
        .await
    }

    /// Emits without waiting for the confirm: returns once the transport took the event
    /// (waiting only for room in its unconfirmed window), with a [`PendingEmit`] that
    /// resolves on the confirm. Many emits can be in flight this way. On a bus with a spool
    /// it returns once the spool kept the event, and the [`PendingEmit`] resolves at once.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe while it waits for room: dropped then, the event may or may not have
    /// been taken. Once it returned, dropping the [`PendingEmit`] cancels nothing: the
    /// event is confirmed all the same, and [`Bus::drain`] waits for it.
    pub async fn emit_nowait(&self, outgoing: Outgoing) -> Result<PendingEmit, Error> {
        let span = emit_span();
        let emitter = &self.inner.emitter;
        if let Some(spool) = emitter.spool() {
            let id = emitter
                .keep(spool, outgoing, &span)
                .instrument(span.clone())
                .await?;
            return Ok(PendingEmit::kept(id));
        }
        let (id, confirm, since) = emitter
            .publish(outgoing, &span)
            .instrument(span.clone())
            .await?;
        Ok(PendingEmit::waiting(
            id,
            confirm,
            since,
            emitter.source_label().clone(),
            self.inner.confirms.clone(),
        ))
    }

    /// Turns `outgoing` into the message an emit would publish, without publishing it: the
    /// key under this bus's prefix (a foreign key fails as on emit), its event id (a new one
    /// unless [`Outgoing::id`] chose it), `x-source`, `x-node`, `x-time`, `x-schema`, the
    /// causation id (the event being handled, unless [`Outgoing::causation_id`] chose one)
    /// and the trace context of the current span.
    ///
    /// A transactional outbox stores it and a relay publishes it later with
    /// [`Bus::publish_prepared`]; nothing is recorded in the emit metrics until then.
    pub fn prepare_emit(&self, outgoing: Outgoing) -> Result<Prepared, Error> {
        self.inner.emitter.prepare_emit(outgoing)
    }

    /// Publishes a prepared event (made by [`Bus::prepare_emit`] of a bus with this identity,
    /// maybe in another process) as it is, waiting at most `deadline` for room in the
    /// transport's window and its confirm. Returns once the transport took it, with a
    /// future resolving on the confirm; emit metrics are recorded as for an emit.
    ///
    /// Only this bus's own events are published: a key outside its prefix, or an
    /// `x-source` other than its own, fails with
    /// [`ErrorKind::ForeignKey`](crate::ErrorKind::ForeignKey). A bus being drained publishes
    /// prepared events until its handlers finished and its spool (if any) was drained, then
    /// fails them with [`ErrorKind::Closed`](crate::ErrorKind::Closed), as a closed bus does.
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
        self.inner
            .emitter
            .publish_prepared(prepared, deadline)
            .await
    }
}
