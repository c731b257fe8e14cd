//! The outbox's metrics: what the relay relayed, its lag, and the table's size before and
//! after the cleanup, read back from a Prometheus recorder installed for this test binary.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::PATIENCE;
use mesh::{Bus, MemoryBroker, Outgoing};
use mesh_outbox::telemetry::names;
use mesh_outbox::{EmitIn, Outbox, RelayOptions};
use mesh_testkit::eventually;
use mesh_testkit::prometheus::sample;
use metrics_exporter_prometheus::PrometheusBuilder;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_records_what_it_relayed_its_lag_and_the_tables_size() -> anyhow::Result<()> {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    metrics::set_global_recorder(recorder)?;

    let (_store, pool) = common::sqlite().await?;
    let outbox = Outbox::new(pool.clone()).await?;
    let broker = MemoryBroker::new();
    let shop = Bus::builder()
        .node("n1")
        .module("shop")
        .start(Arc::new(broker.transport()))
        .await?;
    let mut tx = pool.begin().await?;
    shop.emit_all_in(
        &mut tx,
        (0..10)
            .map(|n| Outgoing::json("counted", &n))
            .collect::<Result<Vec<_>, _>>()?,
    )
    .await?;
    tx.commit().await?;
    assert_eq!(outbox.counts().await?.pending, 10);

    // Sent rows are deleted at once (retention zero), at the relay's next cleanup round.
    let relay = outbox
        .start_relay(
            [shop.clone()],
            RelayOptions::default()
                .poll_interval(Duration::from_millis(20))
                .cleanup_interval(Duration::from_millis(50))
                .retention(Duration::ZERO),
        )
        .await?;
    let text = eventually(PATIENCE, "the rows relayed and cleaned up", || async {
        let text = handle.render();
        let cleaned = sample(&text, names::CLEANED, &[])?;
        (cleaned >= 10.0).then_some(text)
    })
    .await;
    relay.stop().await;
    shop.drain().await?;
    let shop_label = [("source", "module.shop")];
    assert_eq!(
        sample(&text, names::RELAYED, &shop_label),
        Some(10.0),
        "{text}"
    );
    let lag_count = format!("{}_count", names::RELAY_LAG);
    assert_eq!(sample(&text, &lag_count, &shop_label), Some(10.0), "{text}");
    assert_eq!(sample(&text, names::CLEANED, &[]), Some(10.0), "{text}");
    assert_eq!(sample(&text, names::PENDING, &[]), Some(0.0), "{text}");
    assert_eq!(
        sample(&text, names::OLDEST_PENDING, &[]),
        Some(0.0),
        "{text}"
    );
    assert_eq!(outbox.counts().await?, mesh_outbox::Counts::default());
    Ok(())
}
