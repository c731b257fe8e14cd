//! The counters are also metrics: `mesh_logs_logged_total`, `mesh_logs_dropped_total` for
//! the records the full buffer turned away, and `mesh_logs_lost_total` for those left in it
//! when the shutdown timed out, the broker still unreachable.
//!
//! The `metrics` recorder is global to the process: this file holds one test.

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::{CompositeKey, MetricKind};
use tracing_subscriber::layer::SubscriberExt;

type Snapshot = Vec<(
    CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

/// The counter `name` in `snapshot`.
fn counter(snapshot: &Snapshot, name: &str) -> Option<u64> {
    snapshot
        .iter()
        .find(|(key, ..)| key.kind() == MetricKind::Counter && key.key().name() == name)
        .and_then(|(.., value)| match value {
            DebugValue::Counter(n) => Some(*n),
            _ => None,
        })
}

#[tokio::test]
async fn dropped_records_are_counted_as_a_metric() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this test binary");

    // Nothing listens on port 1: the shipper keeps trying to connect and never drains, which
    // is as full as a buffer gets.
    let logs = mesh_logs::start(
        mesh_logs::LogsOptions::new("amqp://guest:guest@127.0.0.1:1/%2F", "obs", "down")
            .expect("options")
            .capacity(10),
    )
    .expect("shipper started");
    let subscriber = tracing_subscriber::registry().with(logs.layer());
    tracing::subscriber::with_default(subscriber, || {
        for i in 0..1_000 {
            tracing::warn!(i, "broker down, record {i}");
        }
    });

    let stats = logs.stats();
    assert_eq!((stats.buffered, stats.dropped), (10, 990));
    // A snapshot takes the counters' increments since the last one.
    let snapshot = || -> Snapshot { snapshotter.snapshot().into_vec() };
    let logged = snapshot();
    assert_eq!(counter(&logged, mesh_logs::LOGGED_METRIC), Some(1_000));
    assert_eq!(counter(&logged, mesh_logs::DROPPED_METRIC), Some(990));

    // The shipper never connects: the shutdown times out and the ten buffered are lost.
    let stats = logs.shutdown(Duration::from_millis(300)).await;
    assert_eq!((stats.buffered, stats.lost, stats.published), (0, 10, 0));
    let shut = snapshot();
    assert_eq!(counter(&shut, mesh_logs::LOST_METRIC), Some(10));
    assert!(
        counter(&shut, mesh_logs::PUBLISHED_METRIC).is_none_or(|published| published == 0),
        "nothing was published"
    );
}
