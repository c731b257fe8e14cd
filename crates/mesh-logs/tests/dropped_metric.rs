//! The dropped records are also counted as the metric `mesh_logs_dropped_total`.
//!
//! The `metrics` recorder is global to the process: this file holds one test.

use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use tracing_subscriber::layer::SubscriberExt;

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
    let dropped = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .find(|(key, ..)| {
            key.kind() == MetricKind::Counter && key.key().name() == mesh_logs::DROPPED_METRIC
        })
        .map(|(.., value)| value);
    assert_eq!(dropped, Some(DebugValue::Counter(990)));

    logs.shutdown(Duration::from_secs(1)).await;
}
