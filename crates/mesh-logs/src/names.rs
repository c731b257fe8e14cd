//! The names the crate gives the world: the exchange it ships to and its metrics.

/// The logs exchange: topic, durable; its messages are transient
/// ([`mesh_core::naming::LOGS_EXCHANGE`]).
pub const LOGS_EXCHANGE: &str = mesh_core::naming::LOGS_EXCHANGE;

/// The name of the counter of records the layer took (at or above its level, of a target
/// that is shipped). Each ends in exactly one of the three counters below: once
/// [`Logs::shutdown`](crate::Logs::shutdown) returned, logged = published + dropped + lost.
pub const LOGGED_METRIC: &str = "mesh_logs_logged_total";
/// The name of the counter of records dropped because the buffer was full (or the shipper
/// had stopped).
pub const DROPPED_METRIC: &str = "mesh_logs_dropped_total";
/// The name of the counter of records published (written to the connection).
pub const PUBLISHED_METRIC: &str = "mesh_logs_published_total";
/// The name of the counter of records never published: lost with a connection, or left in
/// the buffer when [`Logs::shutdown`](crate::Logs::shutdown) timed out (the broker unreachable, refusing the
/// connection or blocking it).
pub const LOST_METRIC: &str = "mesh_logs_lost_total";
