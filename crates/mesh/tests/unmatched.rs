//! An event no handler of the queue matches (a stale binding, a message sent straight to the
//! queue) is acked and counted in `mesh_unmatched_total{queue}`.
//!
//! The `metrics` recorder is global to the process: this file holds one test.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mesh::raw::codec;
use mesh::raw::{PublishOptions, Target, Transport, WireMessage};
use mesh::telemetry::names;
use mesh::{Bus, Incoming, MemoryBroker};
use mesh_testkit::eventually;
use mesh_testkit::http::must_get;
use mesh_testkit::prometheus::sample;
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(10);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmatched_delivery_is_acked_and_counted() {
    let server = mesh::telemetry::serve_prometheus("127.0.0.1:0".parse().expect("an address"))
        .await
        .expect("the endpoint starts");
    let addr = server.local_addr();
    let broker = MemoryBroker::new();
    let (seen, mut handled) = mpsc::unbounded_channel::<String>();
    let watcher = Bus::builder()
        .node("anchor")
        .module("watcher")
        .on_raw(["module.billing.#"], move |e: Incoming<Bytes>| {
            let seen = seen.clone();
            async move {
                let _ = seen.send(e.meta.key().to_string());
                Ok(())
            }
        })
        .start(Arc::new(broker.transport()))
        .await
        .expect("watcher starts");
    let queue = "anchor.watcher.events";
    let raw = broker.transport();
    for n in 0..3 {
        let mut message = WireMessage::new("module.shop.order.placed", Bytes::from_static(b"{}"));
        message.properties.content_type = Some(codec::CONTENT_TYPE_JSON.into());
        let headers = &mut message.properties.headers;
        headers.insert(
            codec::EVENT_ID.into(),
            mesh::raw::EventId::new().to_string().into(),
        );
        headers.insert(codec::SOURCE.into(), "shop".into());
        headers.insert(codec::NODE.into(), "anchor".into());
        headers.insert(codec::TIME.into(), format!("2026-09-03T12:00:0{n}Z").into());
        let confirm = raw
            .publish(
                message,
                PublishOptions {
                    target: Target::Queue(queue.into()),
                    ..PublishOptions::default()
                },
            )
            .await
            .expect("published");
        tokio::time::timeout(WAIT, confirm)
            .await
            .expect("confirm in time")
            .expect("confirmed");
    }
    let counted = eventually(WAIT, "three unmatched deliveries counted", || async {
        let (_, text) = must_get(addr, "/metrics").await;
        sample(&text, names::UNMATCHED, &[("queue", queue)]).filter(|n| *n >= 3.0)
    })
    .await;
    assert_eq!(counted, 3.0);
    // Acked, not left in the queue nor handed to a handler.
    eventually(WAIT, "the queue is empty and nothing unacked", || async {
        (broker.queue_depth(queue) == Some(0) && broker.unacked(queue) == Some(0)).then_some(())
    })
    .await;
    watcher.close().await;
    assert!(handled.try_recv().is_err());
    server.shutdown();
}
