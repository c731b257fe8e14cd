//! The endpoint binaries serve for scrapers and orchestrators: `/metrics` (Prometheus text),
//! `/livez` and `/readyz`, on one address, as a small `axum` router.
//!
//! Liveness says the process still answers; readiness says every watched bus is ready
//! (connected, not blocked, every consumer attached, not draining). They differ on purpose:
//! a broker outage makes a service unready (take it out of rotation) but not dead
//! (restarting it would not bring the broker back).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::bus::{Bus, Inner};
use crate::error::{Error, ErrorKind};

/// Histogram buckets, in seconds: from a fast local confirm (under a millisecond) to a
/// retry's minutes of lag.
const BUCKETS: [f64; 16] = [
    0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
    10.0, 60.0,
];

/// How often histograms are folded when nobody scrapes, so they do not grow.
const UPKEEP: Duration = Duration::from_secs(5);

/// The process's Prometheus recorder: the `metrics` recorder is global, so it is installed
/// once and shared by every server.
static RECORDER: OnceLock<PrometheusHandle> = OnceLock::new();

fn recorder() -> Result<PrometheusHandle, Error> {
    if let Some(handle) = RECORDER.get() {
        return Ok(handle.clone());
    }
    let builder = PrometheusBuilder::new()
        .set_buckets(&BUCKETS)
        .map_err(|e| Error::with_source(ErrorKind::Telemetry, e))?;
    let recorder = builder.build_recorder();
    let handle = recorder.handle();
    // Two racing first calls: the loser's recorder is refused by `metrics` and dropped,
    // and both use the winner's handle.
    match metrics::set_global_recorder(recorder) {
        Ok(()) => {
            let _ = RECORDER.set(handle);
            describe();
        }
        Err(e) => {
            if RECORDER.get().is_none() {
                return Err(Error::with_source(
                    ErrorKind::Telemetry,
                    format!("another metrics recorder is installed in this process: {e}"),
                ));
            }
        }
    }
    RECORDER
        .get()
        .cloned()
        .ok_or_else(|| Error::with_source(ErrorKind::Telemetry, "no metrics recorder"))
}

/// Starts the endpoint on `addr`: installs the process's Prometheus recorder (once; later
/// calls share it) and serves `GET /metrics`, `/livez` and `/readyz` until
/// [`TelemetryServer::shutdown`]. Bind to port 0 to get a free one
/// ([`TelemetryServer::local_addr`]).
///
/// ```no_run
/// # async fn run(bus: mesh::Bus) -> Result<(), mesh::Error> {
/// let telemetry = mesh::telemetry::serve_prometheus("127.0.0.1:9464".parse().unwrap()).await?;
/// telemetry.watch(&bus); // `/readyz` and the health gauges follow this bus
/// # Ok(()) }
/// ```
///
/// Fails with [`ErrorKind::Telemetry`] when the address cannot be bound or another
/// `metrics` recorder is installed.
pub async fn serve_prometheus(addr: SocketAddr) -> Result<TelemetryServer, Error> {
    let handle = recorder()?;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| Error::with_source(ErrorKind::Telemetry, BindError { addr, source: e }))?;
    let local_addr = listener
        .local_addr()
        .map_err(|e| Error::with_source(ErrorKind::Telemetry, e))?;
    let state = Arc::new(Shared {
        handle,
        buses: Mutex::new(Vec::new()),
        checks: Mutex::new(Vec::new()),
    });
    let stop = CancellationToken::new();
    let app = router(Arc::clone(&state));
    let stopped = stop.clone().cancelled_owned();
    tokio::spawn(async move {
        // axum's loop backs off when accepting fails (out of file descriptors) rather than
        // spin; it ends only on the stop.
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(stopped)
            .await
        {
            warn!(error = %mesh_core::text::EscapedDisplay(&e), "telemetry endpoint stopped");
        }
    });
    tokio::spawn(upkeep(Arc::clone(&state), stop.clone()));
    info!(addr = %local_addr, "serving /metrics, /livez and /readyz");
    Ok(TelemetryServer {
        local_addr,
        state,
        stop,
    })
}

#[derive(Debug, thiserror::Error)]
#[error("cannot listen on {addr}")]
struct BindError {
    addr: SocketAddr,
    #[source]
    source: std::io::Error,
}

/// A running `/metrics`, `/livez`, `/readyz` endpoint.
///
/// It runs until [`shutdown`](TelemetryServer::shutdown) (or the runtime ends); dropping
/// the handle does not stop it.
#[derive(Debug)]
pub struct TelemetryServer {
    local_addr: SocketAddr,
    state: Arc<Shared>,
    stop: CancellationToken,
}

/// What the endpoint's handlers share.
struct Shared {
    handle: PrometheusHandle,
    /// Buses readiness and the health gauges follow; a dropped bus drops out.
    buses: Mutex<Vec<Weak<Inner>>>,
    /// Readiness checks of services that run no bus, by name.
    checks: Mutex<Vec<(String, Check)>>,
}

/// A readiness check: `Ok(())` when ready, else why not.
type Check = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").finish_non_exhaustive()
    }
}

impl Shared {
    fn buses(&self) -> Vec<Bus> {
        let mut buses = self.buses.lock().unwrap_or_else(|e| e.into_inner());
        buses.retain(|weak| weak.strong_count() > 0);
        buses
            .iter()
            .filter_map(Weak::upgrade)
            .map(|inner| Bus { inner })
            .collect()
    }

    fn render(&self) -> String {
        for bus in self.buses() {
            super::health::record_health(&bus);
        }
        self.handle.run_upkeep();
        self.handle.render()
    }

    /// `None` when ready, else why not.
    fn unready(&self) -> Option<String> {
        let mut reasons: Vec<String> = self
            .buses()
            .iter()
            .filter(|bus| !bus.is_ready())
            .map(|bus| {
                let health = bus.health();
                format!(
                    "{} on {}: connected={} blocked={} consumers {}/{}{}",
                    bus.identity().owner(bus.node()),
                    bus.node(),
                    health.connected,
                    health.blocked,
                    health.consumers_attached,
                    health.consumers_expected,
                    if bus.inner.stop.is_cancelled() {
                        " (closing)"
                    } else {
                        ""
                    }
                )
            })
            .collect();
        let checks: Vec<(String, Check)> = self
            .checks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        // Run outside the lock: a check may take locks of its own.
        reasons.extend(
            checks
                .iter()
                .filter_map(|(name, check)| check().err().map(|why| format!("{name}: {why}"))),
        );
        (!reasons.is_empty()).then(|| reasons.join("\n"))
    }
}

impl TelemetryServer {
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Makes `/readyz` and the health gauges follow `bus` too (until the bus is dropped).
    /// With no bus (and no [`watch_check`](TelemetryServer::watch_check)) watched, `/readyz`
    /// answers ready.
    pub fn watch(&self, bus: &Bus) {
        let mut buses = self.state.buses.lock().unwrap_or_else(|e| e.into_inner());
        buses.push(Arc::downgrade(&bus.inner));
    }

    /// Makes `/readyz` also ask `check`, until the server stops: for a service that consumes
    /// through a transport rather than a [`Bus`] (the audit logger does). `check` answers
    /// `Ok(())` when ready, else why not (shown after `name` in the 503 body); it runs on
    /// every `/readyz` request, so it must be cheap and never block.
    pub fn watch_check(
        &self,
        name: impl Into<String>,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) {
        let mut checks = self.state.checks.lock().unwrap_or_else(|e| e.into_inner());
        checks.push((name.into(), Arc::new(check)));
    }

    /// What `/metrics` would answer now.
    pub fn render(&self) -> String {
        self.state.render()
    }

    /// Stops accepting connections; requests in progress finish.
    pub fn shutdown(&self) {
        self.stop.cancel();
    }
}

/// The endpoint's routes: `GET` (and `HEAD`) only, anything else is 405, any other path
/// 404.
fn router(state: Arc<Shared>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/livez", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .fallback(|| async { (StatusCode::NOT_FOUND, "try /metrics, /livez or /readyz\n") })
        .with_state(state)
}

async fn metrics(State(state): State<Arc<Shared>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.render(),
    )
}

async fn readyz(State(state): State<Arc<Shared>>) -> (StatusCode, String) {
    match state.unready() {
        None => (StatusCode::OK, "ready\n".to_owned()),
        Some(why) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready\n{why}\n"),
        ),
    }
}

async fn upkeep(state: Arc<Shared>, stop: CancellationToken) {
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(UPKEEP) => state.handle.run_upkeep(),
        }
    }
}

/// Help text for every metric the SDK records.
fn describe() {
    use super::names::*;
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};

    describe_counter!(
        EMITTED,
        "Emits the transport took (published, confirm pending)."
    );
    describe_counter!(CONFIRMED, "Emits the broker confirmed.");
    describe_counter!(NACKED, "Emits the broker nacked.");
    describe_counter!(EMIT_FAILED, "Emits that failed otherwise, by reason.");
    describe_histogram!(
        CONFIRM_LATENCY,
        Unit::Seconds,
        "From the transport taking an emit to the broker's confirm."
    );
    describe_counter!(HANDLED, "Deliveries handed to handlers, every attempt.");
    describe_counter!(FAILED, "Deliveries on which a handler failed.");
    describe_counter!(RETRIED, "Retry copies scheduled down the ladder.");
    describe_counter!(DEAD_LETTERED, "Events dead-lettered, by reason.");
    describe_counter!(
        SETTLE_FAILED,
        "Acks, retries or dead-letterings that failed."
    );
    describe_histogram!(
        HANDLER_DURATION,
        Unit::Seconds,
        "Time the matching handlers took on one delivery."
    );
    describe_histogram!(
        LAG,
        Unit::Seconds,
        "Arrival minus the event's x-time, first attempts only."
    );
    describe_counter!(CALLS, "Calls made, by outcome.");
    describe_histogram!(CALL_DURATION, Unit::Seconds, "Duration of a call.");
    describe_counter!(SERVED, "Requests served, by outcome.");
    describe_gauge!(
        CONSUMERS_EXPECTED,
        "Consumers the transport should have attached."
    );
    describe_gauge!(CONSUMERS_ATTACHED, "Consumers attached now.");
    describe_gauge!(CONNECTED, "1 while connected to the broker.");
    describe_gauge!(BLOCKED, "1 while the broker blocks publishing.");
    describe_gauge!(READY, "1 while the bus is ready.");
}
