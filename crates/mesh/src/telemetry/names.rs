//! The names of the metrics mesh records, with their labels.
//!
//! Counters end in `_total`; durations are histograms in seconds.

/// Counter `{source}`: emits the transport took (published, confirm pending).
pub const EMITTED: &str = "mesh_emitted_total";
/// Counter `{source}`: emits the broker confirmed.
pub const CONFIRMED: &str = "mesh_confirmed_total";
/// Counter `{source}`: emits the broker nacked.
pub const NACKED: &str = "mesh_nacked_total";
/// Counter `{source, reason}`: emits that failed otherwise (`backpressure`, `timeout`,
/// `connection-lost`, `closed`, `too-large`, …), before or after the transport took them.
pub const EMIT_FAILED: &str = "mesh_emit_failed_total";
/// Histogram `{source}`: from the transport taking an emit to the broker's confirm.
pub const CONFIRM_LATENCY: &str = "mesh_confirm_latency_seconds";

/// Counter `{queue}`: deliveries handed to handlers (every attempt).
pub const HANDLED: &str = "mesh_handled_total";
/// Counter `{queue}`: deliveries on which a handler failed (retryable or permanent).
pub const FAILED: &str = "mesh_handler_failed_total";
/// Counter `{queue}`: retry copies scheduled down the ladder.
pub const RETRIED: &str = "mesh_retried_total";
/// Counter `{queue, reason}`: events dead-lettered by this consumer (`max-attempts`,
/// `permanent`, `undecodable`, `forged-source`, `unread-schema`, `schema-invalid`).
pub const DEAD_LETTERED: &str = "mesh_dead_lettered_total";
/// Counter `{queue}`: events no handler of the queue matches (a stale binding, a
/// forgery), acked without running a handler.
pub const UNMATCHED: &str = "mesh_unmatched_total";
/// Counter `{queue, action}`: acks, retries or dead-letterings that failed (the broker
/// redelivers the event).
pub const SETTLE_FAILED: &str = "mesh_settle_failed_total";
/// Histogram `{queue}`: time the matching handlers took on one delivery.
pub const HANDLER_DURATION: &str = "mesh_handler_duration_seconds";
/// Histogram `{queue}`: end-to-end lag, the delivery's arrival minus its `x-time`
/// (first attempts only).
pub const LAG: &str = "mesh_end_to_end_lag_seconds";

/// Counter `{tool, outcome}`: calls made (`ok`, `remote-error`, `timeout`, `no-server`,
/// …).
pub const CALLS: &str = "mesh_calls_total";
/// Histogram `{tool}`: a call's duration, whatever its outcome.
pub const CALL_DURATION: &str = "mesh_call_duration_seconds";
/// Counter `{tool, outcome}`: requests served (`ok` or `error`).
pub const SERVED: &str = "mesh_served_total";

/// Gauge `{node, bus}`: consumers the transport should have attached (set at scrape).
pub const CONSUMERS_EXPECTED: &str = "mesh_consumers_expected";
/// Gauge `{node, bus}`: consumers attached now (set at scrape).
pub const CONSUMERS_ATTACHED: &str = "mesh_consumers_attached";
/// Gauge `{node, bus}`: 1 while connected to the broker (set at scrape).
pub const CONNECTED: &str = "mesh_connected";
/// Gauge `{node, bus}`: 1 while the broker blocks publishing (set at scrape).
pub const BLOCKED: &str = "mesh_blocked";
/// Gauge `{node, bus}`: 1 while the bus is ready (set at scrape).
pub const READY: &str = "mesh_ready";
/// Gauge `{node, bus}`: publishes sent and not yet confirmed (set at scrape).
pub const UNCONFIRMED: &str = "mesh_unconfirmed";
/// Gauge `{node, bus}`: their bytes (set at scrape).
pub const UNCONFIRMED_BYTES: &str = "mesh_unconfirmed_bytes";
/// Counter `{node, bus}`: reconnects of the transport's connections.
pub const RECONNECTS: &str = "mesh_reconnects_total";
/// Counter `{node, bus}`: publishes resent after a lost channel or connection.
pub const RESENT: &str = "mesh_resent_total";
/// Counter `{node, bus}`: consumers re-attached after a loss.
pub const REATTACHED: &str = "mesh_consumers_reattached_total";
/// Counter `{node, bus}`: RPC replies that came after their call gave up.
pub const LATE_REPLIES: &str = "mesh_late_replies_total";
/// Gauge `{node, bus}`: seconds the broker blocked publishing, in all.
pub const BLOCKED_SECONDS: &str = "mesh_blocked_seconds_total";
