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

mod health;
pub mod names;
pub(crate) mod propagation;
pub(crate) mod record;

#[cfg(feature = "otlp")]
mod otlp;
#[cfg(feature = "prometheus")]
mod server;

pub use health::record_health;
#[cfg(feature = "otlp")]
pub use otlp::{otlp_layer, OtlpGuard};
#[cfg(feature = "prometheus")]
pub use server::{serve_prometheus, TelemetryServer};
