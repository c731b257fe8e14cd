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
//! - `clock`: what "now" is (the system's clock, or tokio's under the test harness);
//! - `plan`: what to do with a copy now (pure);
//! - `forward`: the forwarder's loop.

pub(crate) mod clock;
pub(crate) mod forward;
pub mod plan;

/// How many scheduled copies one forwarder holds at once (those due within the shortest hop,
/// and those on their way to a hop or to `mesh.events`); more wait in the queue.
pub const SCHEDULE_PREFETCH: u16 = 1000;
