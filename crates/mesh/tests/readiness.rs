//! Acceptance: readiness turns false when the broker closes a consumer's connection, and
//! true again once the transport re-attached the consumer; `/readyz` follows.
//!
//! The endpoint installs the process's metrics recorder: this file holds one test.

#[path = "support/broker.rs"]
mod broker;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mesh::amqp::AmqpOptions;
use mesh::raw::Transport;
use mesh::{Bus, HandlerError, Incoming};
use mesh_testkit::http::must_get;
use mesh_testkit::{eventually, TestVhost};
use tokio::sync::mpsc;

use broker::{transport, WAIT};

/// Reconnecting includes a backoff; give it room.
const REATTACH: Duration = Duration::from_secs(60);

/// The watcher waits 3–6 s before it reconnects: long enough that polling its readiness
/// sees it false, whatever the machine's load (with the default 100 ms it could reconnect
/// between two polls).
const RECONNECT_AFTER: Duration = Duration::from_secs(6);

async fn slow_to_reconnect(vhost: &TestVhost, name: &str) -> Arc<dyn Transport> {
    let options: AmqpOptions = vhost.url().parse().expect("the vhost's URL parses");
    let options = options
        .connection_name(name)
        .reconnect_backoff(RECONNECT_AFTER, RECONNECT_AFTER);
    Arc::new(
        mesh::amqp::connect(options)
            .await
            .expect("connects to the test vhost"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_consumers_connection() {
    let server = mesh::telemetry::serve_prometheus("127.0.0.1:0".parse().expect("an address"))
        .await
        .expect("the endpoint starts");
    let addr = server.local_addr();
    let vhost = TestVhost::create("obs").await.expect("a test vhost");

    let (to_test, mut handled) = mpsc::unbounded_channel::<String>();
    let watcher = Bus::builder()
        .node("obs")
        .module("watcher")
        .on_raw(["module.pinger.#"], move |e: Incoming<Bytes>| {
            let to_test = to_test.clone();
            async move {
                let _ = to_test.send(e.meta.key().to_string());
                Ok::<(), HandlerError>(())
            }
        })
        .start(slow_to_reconnect(&vhost, "obs.watcher").await)
        .await
        .expect("watcher starts");
    server.watch(&watcher);
    let pinger = Bus::builder()
        .node("obs")
        .module("pinger")
        .start(transport(&vhost, "obs.pinger").await)
        .await
        .expect("pinger starts");

    eventually(WAIT, "the watcher is ready", || {
        let ready = watcher.is_ready();
        std::future::ready(ready.then_some(()))
    })
    .await;
    assert_eq!(must_get(addr, "/readyz").await.0, 200);

    // The broker closes the watcher's consuming connection (a forced close, as an operator
    // or a node shutdown would).
    let closed = vhost
        .close_connections(Some("obs.watcher.consume"), "readiness test")
        .await
        .expect("connections closed");
    assert_eq!(closed, 1, "the watcher's consume connection");

    eventually(WAIT, "the watcher is not ready", || {
        let ready = watcher.is_ready();
        std::future::ready((!ready).then_some(()))
    })
    .await;
    let (status, body) = must_get(addr, "/readyz").await;
    assert_eq!(status, 503, "{body}");

    eventually(REATTACH, "the watcher is ready again", || {
        let ready = watcher.is_ready();
        std::future::ready(ready.then_some(()))
    })
    .await;
    assert_eq!(must_get(addr, "/readyz").await.0, 200);

    // Re-attached for real: an event emitted now is handled.
    pinger
        .emit_outgoing(
            mesh::Outgoing::json("ping.sent", &serde_json::json!({})).expect("a JSON payload"),
        )
        .await
        .expect("confirmed");
    let key = tokio::time::timeout(WAIT, handled.recv())
        .await
        .expect("handled after the re-attach")
        .expect("channel open");
    assert_eq!(key, "module.pinger.ping.sent");
    // The transport counted what happened.
    let stats = watcher.transport_stats();
    assert_eq!(stats.reconnects, 1, "{stats:?}");
    assert_eq!(stats.reattached, 1, "{stats:?}");

    watcher.drain().await.expect("drained");
    pinger.drain().await.expect("drained");
    server.shutdown();
    vhost.delete().await.expect("vhost deleted");
}
