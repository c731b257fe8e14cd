//! The seam of an emit spool: a durable store between a bus's emits and the broker, so that
//! an emit made while the broker is unreachable survives a crash or a restart of the process
//! and is published after it, with its id.
//!
//! A bus given a spool ([`BusBuilder::spool`](crate::BusBuilder::spool)) makes each event
//! exactly as an emit makes it, hands it to [`EmitSpool::keep`], and resolves the emit once
//! the spool kept it durably, not on the broker's confirm. The spool publishes what it keeps
//! through the bus ([`Bus::publish_prepared`], with confirms) and forgets an event only once
//! the broker confirmed it. The bus drives the spool's life: [`EmitSpool::start`] at the end
//! of [`BusBuilder::start`](crate::BusBuilder::start), [`EmitSpool::drain`] from
//! [`Bus::drain`], [`EmitSpool::stop`] from [`Bus::close`].
//!
//! The SDK holds no store: `mesh_outbox::Spool` (a SQLite file) implements this trait.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use crate::bus::Bus;
use crate::emitter::HeldSpool;
use crate::error::Error;
use crate::prepared::Prepared;

/// A boxed future of a spool's method.
pub type SpoolFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A durable store a bus's emits go through, so that an emit made while the broker is
/// unreachable survives a crash or a restart of the process and is published after it, with
/// its id.
///
/// A bus given a spool ([`BusBuilder::spool`](crate::BusBuilder::spool)) makes each event
/// exactly as an emit makes it, hands it to [`EmitSpool::keep`], and resolves the emit once
/// the spool kept it durably, not on the broker's confirm. The spool publishes what it keeps
/// through the bus ([`Bus::publish_prepared`], with confirms) and forgets an event only once
/// the broker confirmed it. The bus drives the spool's life: [`EmitSpool::start`] at the end
/// of [`BusBuilder::start`](crate::BusBuilder::start), [`EmitSpool::drain`] from
/// [`Bus::drain`], [`EmitSpool::stop`] from [`Bus::close`]. `mesh_outbox::Spool` (a SQLite
/// file) implements it.
///
/// A spool holds the bus once started ([`EmitSpool::start`]) and the bus holds the spool:
/// [`EmitSpool::drain`] and [`EmitSpool::stop`] must let the bus go, so a bus with a spool is
/// ended with [`Bus::drain`] or [`Bus::close`].
pub trait EmitSpool: Send + Sync + 'static {
    /// Keeps `event` durably (it survives a crash of the process once this resolved to
    /// `Ok`), to be published later through the bus.
    ///
    /// Fails with [`ErrorKind::SpoolFull`](crate::ErrorKind::SpoolFull) when keeping it would
    /// exceed the spool's bound, and [`ErrorKind::Spool`](crate::ErrorKind::Spool) when the
    /// store failed; either way nothing of the event is kept.
    ///
    /// # Cancel safety
    ///
    /// Need not be cancel safe: dropped before it resolves, the event may or may not be
    /// kept (and then published).
    fn keep(&self, event: Prepared) -> SpoolFuture<'_, Result<(), Error>>;

    /// The bus started: publish what the spool holds, and what it will keep, through `bus`.
    /// Called once, at the end of [`BusBuilder::start`](crate::BusBuilder::start); an error
    /// closes the bus and fails the start.
    fn start(&self, bus: Bus) -> SpoolFuture<'_, Result<(), Error>>;

    /// The bus is draining and takes no more emits: publish what can be within `deadline`
    /// (`None`: until nothing is left), then stop publishing and let the bus go. What is
    /// left stays kept, for the next start.
    fn drain(&self, deadline: Option<Duration>) -> SpoolFuture<'_, ()>;

    /// The bus is closing: stop publishing now and let the bus go. What is kept stays kept.
    fn stop(&self) -> SpoolFuture<'_, ()>;
}

/// Every spool is one the emitter can hold, without the `start` that names the bus.
impl<S: EmitSpool> HeldSpool for S {
    fn keep(&self, event: Prepared) -> SpoolFuture<'_, Result<(), Error>> {
        EmitSpool::keep(self, event)
    }

    fn drain(&self, deadline: Option<Duration>) -> SpoolFuture<'_, ()> {
        EmitSpool::drain(self, deadline)
    }

    fn stop(&self) -> SpoolFuture<'_, ()> {
        EmitSpool::stop(self)
    }
}
