//! Scheduled events: an event emitted later, at its due time, through broker and process
//! restarts (see `docs/decisions/0023-scheduled-events-on-a-ladder.md`).
//!
//! [`Bus::emit_at`](crate::Bus::emit_at) makes the event as an emit would, sets `x-time` to
//! its due time and `x-mesh-due` likewise, and publishes it through `mesh.retry` into the
//! module's schedule queue `scheduled.<module>.events` (mandatory, confirmed). A bus built
//! with [`BusBuilder::forward_scheduled`](crate::BusBuilder::forward_scheduled) consumes that
//! queue and sends each copy down the queue's retry ladder, a hop at a time (`plan`), until
//! it is due, then emits it as its own (`forward`). Nothing here depends on the broker's TTL
//! or dead-lettering: each wait is a copy held by a retry forwarder, as retries are.
//!
//! - `plan`: what to do with a copy now (pure);
//! - `forward`: the forwarder's loop.

pub(crate) mod forward;
pub mod plan;

use std::sync::Arc;
use std::time::Duration;

use mesh_core::{naming, QueueSpec, SubscriptionSpec};
use tracing::info;

use crate::bus::Bus;
use crate::error::Error;
use crate::identity::Identity;

/// How many scheduled copies one forwarder holds at once (those due within the shortest hop,
/// and those on their way to a hop or to `mesh.events`); more wait in the queue.
pub const SCHEDULE_PREFETCH: u16 = 1000;

/// Declares the module's schedule queue with its ladder and starts its forwarder.
pub(crate) async fn start(bus: &Bus, hops: Vec<Duration>) -> Result<(), Error> {
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
    info!(queue, "forwarding scheduled events");
    let forwarder = Arc::new(forward::Forwarder {
        transport: Arc::clone(&bus.inner.transport),
        identity: bus.identity().clone(),
        node: bus.node().clone(),
        hops,
        deadline: bus.emit_deadline(),
    });
    let stop = bus.inner.stop.child_token();
    bus.spawn_loop(forwarder.run(copies, stop)).await;
    Ok(())
}
