//! `--metrics-addr`: the SDK's Prometheus endpoint (`/metrics`, `/livez`, `/readyz`) for the
//! commands that run until stopped, with readiness following their bus.
//!
//! Once it listens, the command prints `metrics on http://ADDR/metrics (also /livez and
//! /readyz)` on stderr (the same line for `tail`, `outbox relay` and `mesh audit run`, whose
//! endpoint `mesh-audit` serves), so a port 0 can be found out.

use std::net::SocketAddr;

use mesh::telemetry::TelemetryServer;
use mesh::Bus;

use crate::exit::{Code, WithCode};
use crate::output;

/// Serves the endpoint on `addr`, readiness following `bus`.
pub(crate) async fn serve(addr: SocketAddr, bus: &Bus) -> anyhow::Result<TelemetryServer> {
    serve_watching(addr, |telemetry| telemetry.watch(bus)).await
}

/// Serves the endpoint on `addr`; `watch` ties its readiness to what the command runs before
/// the address is printed, so whoever reads the line finds readiness already wired.
pub(crate) async fn serve_watching(
    addr: SocketAddr,
    watch: impl FnOnce(&TelemetryServer),
) -> anyhow::Result<TelemetryServer> {
    let telemetry = mesh::telemetry::serve_prometheus(addr)
        .await
        .coded(Code::Error, || format!("cannot serve metrics on {addr}"))?;
    watch(&telemetry);
    output::note(format_args!(
        "metrics on http://{}/metrics (also /livez and /readyz)",
        telemetry.local_addr()
    ));
    Ok(telemetry)
}
