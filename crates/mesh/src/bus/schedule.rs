//! Scheduling on a bus: [`Bus::emit_at`], [`Bus::emit_after`] and their [`Outgoing`] forms,
//! and the start of the module's schedule forwarder (`crate::schedule`), which emits them when
//! due.

use std::sync::Arc;
use std::time::Duration;

use mesh_core::{
    codec, naming, EventId, HeaderValue, PublishOptions, QueueSpec, SubscriptionSpec, Target,
    Timestamp, TransportError, TransportErrorKind,
};

use super::Bus;
use crate::error::{Error, ErrorKind};
use crate::event::Event;
use crate::identity::Identity;
use crate::outgoing::Outgoing;
use crate::schedule::forward::Forwarder;
use crate::schedule::SCHEDULE_PREFETCH;

impl Bus {
    /// Schedules a typed event for `at`: it is emitted, as this module's, no earlier than
    /// `at` (by the clock of the bus that forwards it), by a bus of this module built with
    /// [`BusBuilder::forward_scheduled`](crate::BusBuilder::forward_scheduled). Resolves
    /// once the broker confirmed the scheduled copy; it survives broker and process restarts
    /// from then on. Its `x-time` is `at`. A time already past is emitted at once.
    ///
    /// Fails with [`ErrorKind::ForeignKey`] for a key of another owner (as an emit does),
    /// with [`ErrorKind::InvalidOptions`] on a bus that is not a module, and with
    /// [`TransportErrorKind::Unroutable`] while no bus of the module ever forwarded scheduled
    /// events (its schedule queue does not exist). A bus with a spool does not spool it.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped before it resolves, the event may or may not have been
    /// scheduled. Scheduling again an [`Outgoing`] with the same [`id`](Outgoing::id) may
    /// emit it twice; consumers deduplicate by event id.
    pub async fn emit_at<E: Event>(&self, at: Timestamp, event: &E) -> Result<EventId, Error> {
        self.emit_outgoing_at(at, Outgoing::event(event)?).await
    }

    /// Schedules a typed event for `after` from now; see [`Bus::emit_at`].
    pub async fn emit_after<E: Event>(&self, after: Duration, event: &E) -> Result<EventId, Error> {
        self.emit_at(self.due_after(after)?, event).await
    }

    /// Schedules an [`Outgoing`] for `after` from now; see [`Bus::emit_at`].
    pub async fn emit_outgoing_after(
        &self,
        after: Duration,
        outgoing: Outgoing,
    ) -> Result<EventId, Error> {
        self.emit_outgoing_at(self.due_after(after)?, outgoing)
            .await
    }

    /// Schedules an [`Outgoing`] for `at`; see [`Bus::emit_at`].
    ///
    /// # Cancel safety
    ///
    /// As [`Bus::emit_at`].
    pub async fn emit_outgoing_at(
        &self,
        at: Timestamp,
        outgoing: Outgoing,
    ) -> Result<EventId, Error> {
        if self.inner.stop.is_cancelled() {
            return Err(Error::new(ErrorKind::Closed));
        }
        let Identity::Module(module) = self.identity() else {
            return Err(Error::options(
                "only a module schedules events: a schedule queue is a module's",
            ));
        };
        let queue = naming::schedule_queue(module);
        // The key under this bus's prefix (a foreign key fails here), its id and headers.
        let prepared = self.inner.emitter.prepare_emit(outgoing)?;
        let id = prepared.id();
        let mut message = prepared.into_message();
        let due = at.text();
        let headers = &mut message.properties.headers;
        headers.insert(codec::TIME.to_owned(), HeaderValue::Str(due.clone()));
        headers.insert(codec::DUE.to_owned(), HeaderValue::Str(due));
        message.properties.persistent = true;
        let options = PublishOptions {
            target: Target::Retry(queue.clone()),
            mandatory: true,
            deadline: self.inner.emitter.emit_deadline(),
        };
        let confirmed = match self.inner.transport.publish(message, options).await {
            Ok(confirm) => confirm.await,
            Err(e) => Err(e),
        };
        match confirmed {
            Ok(()) => Ok(id),
            Err(e) if *e.kind() == TransportErrorKind::Unroutable => Err(TransportError::new(
                TransportErrorKind::Unroutable,
                format!(
                    "no schedule queue `{queue}`: no bus of this module forwards scheduled events yet"
                ),
            )
            .into()),
            Err(e) => Err(e.into()),
        }
    }

    /// The time now by the bus's clock: the one [`Bus::emit_after`] counts from and its
    /// schedule forwarder compares due times with. The system's clock, except on the test
    /// harness's in-memory broker, where it follows tokio's (so a paused test clock, or the
    /// harness's `Harness::advance` in `mesh::testing`, the `testing` feature, moves it). A
    /// library that schedules on a module's behalf (the outbox's scheduled events, a saga's
    /// timeouts) takes its time from here, so that the harness moves it too.
    pub fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// Whether the bus's clock is the system's ([`Bus::now`] is [`Timestamp::now`]); `false`
    /// on the test harness's in-memory broker. A component with a clock of its own (an
    /// outbox relay comparing due times on the database's clock) keeps it when this holds,
    /// and takes [`Bus::now`] otherwise.
    pub fn on_system_clock(&self) -> bool {
        matches!(self.inner.clock, crate::schedule::clock::Clock::System)
    }

    /// Now plus `after` by the bus's clock, within the range of a [`Timestamp`].
    fn due_after(&self, after: Duration) -> Result<Timestamp, Error> {
        self.now()
            .checked_add(after)
            .ok_or_else(|| Error::options(format!("{after:?} from now is past 9999-12-31")))
    }

    /// The bus's emit deadline (for its schedule forwarder's emits).
    pub(crate) fn emit_deadline(&self) -> Option<Duration> {
        self.inner.emitter.emit_deadline()
    }
}

/// Declares the module's schedule queue with its ladder of `hops` and starts its forwarder.
pub(super) async fn start_forwarding(bus: &Bus, hops: Vec<Duration>) -> Result<(), Error> {
    let Identity::Module(module) = bus.identity() else {
        return Err(Error::options(
            "only a module forwards scheduled events; give the bus a module identity",
        ));
    };
    let queue = naming::schedule_queue(module);
    let spec = SubscriptionSpec {
        queue: QueueSpec::Durable {
            name: queue.clone(),
        },
        // Bound to nothing on `mesh.events`: copies come only through `mesh.retry`.
        patterns: Vec::new(),
        prefetch: SCHEDULE_PREFETCH,
        retry_delays: hops.clone(),
    };
    let copies = bus.inner.transport.subscribe(spec).await?;
    tracing::info!(queue, "forwarding scheduled events");
    let forwarder = Arc::new(Forwarder {
        transport: Arc::clone(&bus.inner.transport),
        identity: bus.identity().clone(),
        node: bus.node().clone(),
        hops,
        deadline: bus.emit_deadline(),
        clock: bus.inner.clock,
    });
    let stop = bus.inner.stop.child_token();
    bus.spawn_loop(forwarder.run(copies, stop)).await;
    Ok(())
}
