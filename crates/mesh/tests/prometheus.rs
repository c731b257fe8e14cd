//! Acceptance: after known traffic (three events handled, one retried then handled, one
//! dead-lettered), the Prometheus endpoint reports exact counts.
//!
//! The `metrics` recorder is global to the process: this file holds one test.

#[path = "support/broker.rs"]
mod broker;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mesh::telemetry::names;
use mesh::{Bus, HandlerError, Incoming, RetryPolicy};
use mesh_testkit::http::must_get;
use mesh_testkit::prometheus::sample;
use mesh_testkit::{eventually, TestVhost};
use tokio::sync::mpsc;

use broker::{transport, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_counts_known_traffic_exactly() {
    let server = mesh::telemetry::serve_prometheus("127.0.0.1:0".parse().expect("an address"))
        .await
        .expect("the endpoint starts");
    let addr = server.local_addr();
    let vhost = TestVhost::create("obs").await.expect("a test vhost");

    // counter: `ok` succeeds, `flaky` fails its first attempt, `bad` fails for good.
    let (to_test, mut calls) = mpsc::unbounded_channel::<(String, u32)>();
    let failed_once = Arc::new(AtomicBool::new(false));
    let counter = Bus::builder()
        .node("obs")
        .module("counter")
        .retry(RetryPolicy::new(3, vec![Duration::from_millis(200)]).expect("a policy"))
        .on_raw(["module.shop.#"], move |e: Incoming<Bytes>| {
            let to_test = to_test.clone();
            let failed_once = Arc::clone(&failed_once);
            async move {
                let name = e.meta.key().as_str().rsplit('.').next().unwrap_or_default();
                let _ = to_test.send((name.to_owned(), e.meta.attempt()));
                match name {
                    "flaky" if !failed_once.swap(true, Ordering::SeqCst) => {
                        Err(HandlerError::retry("not yet"))
                    }
                    "bad" => Err(HandlerError::permanent("never")),
                    _ => Ok(()),
                }
            }
        })
        .start(transport(&vhost, "obs.counter").await)
        .await
        .expect("counter starts");
    server.watch(&counter);
    let shop = Bus::builder()
        .node("obs")
        .module("shop")
        .start(transport(&vhost, "obs.shop").await)
        .await
        .expect("shop starts");
    // The counter's dead letter: another module's, so every dead letter is watched.
    let mut dead = shop.all_dead_letters().await.expect("dead letters");

    for name in ["ok", "ok", "ok", "flaky", "bad"] {
        shop.emit_outgoing(
            mesh::Outgoing::json(&format!("order.{name}"), &serde_json::json!({}))
                .expect("a JSON payload"),
        )
        .await
        .expect("confirmed");
    }

    // Wait on what the test can see by itself: six handler calls and one dead letter.
    let mut seen = Vec::new();
    while seen.len() < 6 {
        let call = tokio::time::timeout(WAIT, calls.recv())
            .await
            .expect("handler calls in time")
            .expect("channel open");
        seen.push(call);
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            ("bad".to_owned(), 1),
            ("flaky".to_owned(), 1),
            ("flaky".to_owned(), 2),
            ("ok".to_owned(), 1),
            ("ok".to_owned(), 1),
            ("ok".to_owned(), 1)
        ]
    );
    let letter = tokio::time::timeout(WAIT, dead.next())
        .await
        .expect("a dead letter in time")
        .expect("the stream is open");
    letter.ack().await.expect("dead letter acked");

    // The last handler's outcome is counted as it returns: wait for it, then every count
    // must be exact. The second call of `flaky` can run before the forwarder that brought
    // its copy back has its publish confirmed (the confirm comes on the other connection),
    // so the window is waited for to be empty too.
    let queue = "obs.counter.events";
    let text = eventually(
        WAIT,
        "the endpoint reports six deliveries handled and nothing unconfirmed",
        || async move {
            let (status, text) = must_get(addr, "/metrics").await;
            assert_eq!(status, 200);
            let bus = [("node", "obs"), ("bus", "counter")];
            (sample(&text, names::HANDLED, &[("queue", queue)]) == Some(6.0)
                && sample(&text, names::UNCONFIRMED, &bus) == Some(0.0))
            .then_some(text)
        },
    )
    .await;
    let count = |name: &str, labels: &[(&str, &str)]| sample(&text, name, labels);

    assert_eq!(count(names::EMITTED, &[("source", "shop")]), Some(5.0));
    assert_eq!(count(names::CONFIRMED, &[("source", "shop")]), Some(5.0));
    assert_eq!(count(names::NACKED, &[]), None, "nothing was nacked");
    assert_eq!(count(names::EMIT_FAILED, &[]), None, "no emit failed");
    assert_eq!(
        count(
            &format!("{}_count", names::CONFIRM_LATENCY),
            &[("source", "shop")]
        ),
        Some(5.0)
    );
    assert_eq!(count(names::HANDLED, &[("queue", queue)]), Some(6.0));
    assert_eq!(count(names::FAILED, &[("queue", queue)]), Some(2.0));
    assert_eq!(count(names::RETRIED, &[("queue", queue)]), Some(1.0));
    assert_eq!(
        count(
            names::DEAD_LETTERED,
            &[("queue", queue), ("reason", "permanent")]
        ),
        Some(1.0)
    );
    assert_eq!(count(names::SETTLE_FAILED, &[]), None);
    assert_eq!(
        count(
            &format!("{}_count", names::HANDLER_DURATION),
            &[("queue", queue)]
        ),
        Some(6.0)
    );
    // Lag is measured on first attempts only: the five emitted events.
    assert_eq!(
        count(&format!("{}_count", names::LAG), &[("queue", queue)]),
        Some(5.0)
    );
    // Health, read at the scrape.
    let bus = [("node", "obs"), ("bus", "counter")];
    assert_eq!(count(names::CONSUMERS_EXPECTED, &bus), Some(1.0));
    assert_eq!(count(names::CONSUMERS_ATTACHED, &bus), Some(1.0));
    assert_eq!(count(names::CONNECTED, &bus), Some(1.0));
    assert_eq!(count(names::BLOCKED, &bus), Some(0.0));
    assert_eq!(count(names::READY, &bus), Some(1.0));
    // The transport's own numbers: nothing pending, nothing lost, so nothing resent.
    assert_eq!(count(names::UNCONFIRMED, &bus), Some(0.0));
    assert_eq!(count(names::UNCONFIRMED_BYTES, &bus), Some(0.0));
    assert_eq!(count(names::RECONNECTS, &bus), Some(0.0));
    assert_eq!(count(names::RESENT, &bus), Some(0.0));
    assert_eq!(count(names::REATTACHED, &bus), Some(0.0));

    assert_eq!(must_get(addr, "/livez").await.0, 200);
    assert_eq!(must_get(addr, "/readyz").await.0, 200);
    assert_eq!(must_get(addr, "/nope").await.0, 404);

    // A drained bus is not ready any more.
    counter.drain().await.expect("drained");
    let (status, body) = must_get(addr, "/readyz").await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("counter on obs"), "{body}");

    shop.drain().await.expect("drained");
    server.shutdown();
    vhost.delete().await.expect("vhost deleted");
}
