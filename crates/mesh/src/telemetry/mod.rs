//! Observability: the metrics the SDK records, trace context across the broker, and (for
//! binaries, behind features) a Prometheus endpoint with liveness and readiness, and an
//! OTLP span exporter.
//!
//! The SDK only *emits*: spans through `tracing` (`mesh.emit`, `mesh.handle`, `mesh.call`,
//! `mesh.serve`), metrics through the [`metrics`] facade (names in [`names`]). A binary
//! chooses where they go:
//!
//! - `prometheus` feature: `serve_prometheus` installs a Prometheus recorder and serves
//!   `/metrics`, `/livez` and `/readyz` on one address;
//! - `otel` feature: the context of the emitting span rides the message's `traceparent` and
//!   `tracestate` headers, and the consumer's `mesh.handle` (or `mesh.serve`) span is its
//!   child, once the binary installed a `tracing-opentelemetry` layer;
//! - `otlp` feature: `otlp_layer` builds that layer with an OTLP/HTTP exporter.
//!
//! Transport-level numbers (the unconfirmed window's depth, resends, reconnects, blocked
//! time) belong to the transport, which records them through the same facade; the SDK
//! reports what [`Transport::health`](mesh_core::Transport::health) says as gauges at each
//! scrape.

pub(crate) mod propagation;
pub(crate) mod record;

#[cfg(feature = "otlp")]
mod otlp;
#[cfg(feature = "prometheus")]
mod server;

#[cfg(feature = "otlp")]
pub use otlp::{otlp_layer, OtlpGuard};
#[cfg(feature = "prometheus")]
pub use server::{serve_prometheus, TelemetryServer};

use crate::bus::Bus;

/// The names of the metrics mesh records, with their labels.
///
/// Counters end in `_total`; durations are histograms in seconds.
pub mod names {
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
}

/// Sets the health gauges of `bus` from its transport's health now.
pub fn record_health(bus: &Bus) {
    let health = bus.health();
    let ready = bus.is_ready();
    let node = bus.node().to_string();
    let name = bus.identity().owner(bus.node()).to_string();
    let gauge = |metric: &'static str, value: f64| {
        metrics::gauge!(metric, "node" => node.clone(), "bus" => name.clone()).set(value);
    };
    gauge(names::CONSUMERS_EXPECTED, health.consumers_expected as f64);
    gauge(names::CONSUMERS_ATTACHED, health.consumers_attached as f64);
    gauge(names::CONNECTED, f64::from(u8::from(health.connected)));
    gauge(names::BLOCKED, f64::from(u8::from(health.blocked)));
    gauge(names::READY, f64::from(u8::from(ready)));
    let stats = bus.transport_stats();
    gauge(names::UNCONFIRMED, stats.unconfirmed as f64);
    gauge(names::UNCONFIRMED_BYTES, stats.unconfirmed_bytes as f64);
    let counter = |metric: &'static str, value: u64| {
        metrics::counter!(metric, "node" => node.clone(), "bus" => name.clone()).absolute(value);
    };
    counter(names::RECONNECTS, stats.reconnects);
    counter(names::RESENT, stats.resent);
    counter(names::REATTACHED, stats.reattached);
    counter(names::LATE_REPLIES, stats.late_replies);
    metrics::gauge!(names::BLOCKED_SECONDS, "node" => node.clone(), "bus" => name.clone())
        .set(stats.blocked_time.as_secs_f64());
}
