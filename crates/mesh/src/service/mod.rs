//! The skeleton of a long-running service (feature `service`): one call, [`run`], gives a
//! started [`Bus`] what every service otherwise wires by hand.
//!
//! - `/livez`, `/readyz` and `/metrics` on one address (the
//!   [`prometheus`](crate::telemetry::serve_prometheus) endpoint), readiness following the
//!   bus;
//! - a drain on SIGTERM or Ctrl-C (SIGINT): the bus stops taking work, lets its handlers
//!   finish and waits for every confirm, within a deadline; a second signal, or the deadline
//!   passing, closes it at once;
//! - logs on stderr, filtered by `RUST_LOG` (default `info`), as text (coloured only on a
//!   terminal, and not when `NO_COLOR` is set: [`LogColor`]) or JSON lines
//!   ([`ServiceOptions::install_logs`]).
//!
//! ```no_run
//! # async fn service(transport: std::sync::Arc<dyn mesh::raw::Transport>) -> Result<(), mesh::Error> {
//! // RUST_LOG, MESH_LOG_FORMAT (text or json) and MESH_METRICS_ADDR.
//! let options = mesh::service::ServiceOptions::from_env()?;
//! options.install_logs()?; // before the bus starts, so its start is logged
//! let bus = mesh::Bus::builder()
//!     .node("local")
//!     .module("billing")
//!     .serve("billing.quote", |plan: String, _meta| async move { Ok(900_u64) })
//!     .start(transport)
//!     .await?;
//! mesh::service::run(bus, options).await // until SIGTERM or Ctrl-C, then drained
//! # }
//! ```
//!
//! Libraries never call this: it installs process-wide things (a log subscriber, the metrics
//! recorder, signal handlers).

mod logs;
mod options;
mod signals;

use tracing::{info, warn};

use crate::bus::Bus;
use crate::error::{Error, ErrorKind};
use crate::telemetry::serve_prometheus;

pub use logs::{LogColor, LogFormat};
pub use options::{ServiceOptions, DEFAULT_DRAIN_DEADLINE, DEFAULT_METRICS_ADDR};
pub use signals::Stop;

/// Runs `bus` as a service until SIGTERM or Ctrl-C, then drains it: serves the endpoint (if
/// an address is set), installs the logs (if none are yet), waits for a stopping signal,
/// and drains the bus within the options' deadline.
///
/// Returns `Ok` once the bus drained: every handler finished and every emit confirmed, the
/// transport closed. Fails with [`ErrorKind::Service`] when the signals cannot be listened
/// for, when the drain passes its deadline or a second signal comes first (the bus is then
/// closed at once: what was unconfirmed stays unconfirmed), with [`ErrorKind::Telemetry`]
/// when the endpoint cannot start, and with the drain's own error.
///
/// The signals are listened for from this call on: a SIGTERM before it has the default
/// action (the process ends at once).
///
/// # Cancel safety
///
/// Not cancel safe: dropped while draining, the bus is left as a dropped
/// [`Bus::drain`] leaves it (call [`Bus::close`]).
pub async fn run(bus: Bus, options: ServiceOptions) -> Result<(), Error> {
    // Kept if the program installed its own subscriber before.
    let _ = options.install_logs();
    let mut signals = signals::Signals::register()?;
    let telemetry = match options.endpoint() {
        Some(addr) => {
            let telemetry = serve_prometheus(addr).await?;
            telemetry.watch(&bus);
            Some(telemetry)
        }
        None => None,
    };
    info!(
        node = %bus.node(),
        bus = %bus.identity().owner(bus.node()),
        "running until SIGTERM or Ctrl-C"
    );
    let stop = signals.recv().await;
    let deadline = options.deadline();
    info!(signal = %stop, ?deadline, "draining");
    // `/readyz` says 503 from now on (a draining bus is not ready), until the endpoint stops.
    let drained = tokio::select! {
        drained = tokio::time::timeout(deadline, bus.drain()) => match drained {
            Ok(drained) => drained,
            Err(_) => Err(Error::with_source(
                ErrorKind::Service,
                format!("the drain did not finish within its deadline of {deadline:?}"),
            )),
        },
        again = signals.recv() => Err(Error::with_source(
            ErrorKind::Service,
            format!("{again} while draining"),
        )),
    };
    if let Err(e) = &drained {
        warn!(error = %mesh_core::text::EscapedDisplay(e), "closing at once");
        bus.close().await;
    } else {
        info!("drained: every handler finished, every emit confirmed");
    }
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    drained
}
