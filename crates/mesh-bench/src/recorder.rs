//! A metrics recorder that keeps one metric: the outbox relay's lag histogram
//! (`mesh_outbox_relay_lag_seconds`, from an event's `x-time` to the broker's confirm of its
//! publish, as the relay records it). Every other metric of the process gets the facade's
//! no-op handles, which is what it gets without a recorder.
//!
//! Installed once per process, only when the outbox scenario runs; the lag runs reset it
//! before they start and read it after their relay stopped.

use std::sync::{Arc, Mutex, OnceLock};

use hdrhistogram::Histogram;
use mesh_outbox::telemetry::names::RELAY_LAG;
use metrics::{Counter, Gauge, HistogramFn, Key, KeyName, Metadata, Recorder, SharedString, Unit};

/// The lags recorded since the last [`take`], in nanoseconds (1 µs to 60 s, 3 significant
/// digits).
#[derive(Debug)]
struct Lags(Mutex<Histogram<u64>>);

impl HistogramFn for Lags {
    fn record(&self, seconds: f64) {
        let nanos = (seconds * 1e9).clamp(1_000.0, 60e9) as u64;
        let mut histogram = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let _ = histogram.record(nanos);
    }
}

#[derive(Debug)]
struct LagRecorder(Arc<Lags>);

impl Recorder for LagRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, _: &Key, _: &Metadata<'_>) -> Counter {
        Counter::noop()
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> metrics::Histogram {
        if key.name() == RELAY_LAG {
            metrics::Histogram::from_arc(Arc::clone(&self.0))
        } else {
            metrics::Histogram::noop()
        }
    }
}

static LAGS: OnceLock<Option<Arc<Lags>>> = OnceLock::new();

/// Installs the recorder (once); `false` when another recorder was installed first, so the
/// relay's lag cannot be read.
pub(crate) fn install() -> bool {
    LAGS.get_or_init(|| {
        let histogram = Histogram::new_with_bounds(1_000, 60_000_000_000, 3).ok()?;
        let lags = Arc::new(Lags(Mutex::new(histogram)));
        metrics::set_global_recorder(LagRecorder(Arc::clone(&lags)))
            .ok()
            .map(|()| lags)
    })
    .is_some()
}

/// The lags recorded since the last call (`None` without the recorder), and a fresh start.
pub(crate) fn take() -> Option<Histogram<u64>> {
    let lags = LAGS.get()?.as_ref()?;
    let mut histogram = lags.0.lock().unwrap_or_else(|e| e.into_inner());
    let taken = histogram.clone();
    histogram.reset();
    Some(taken)
}
