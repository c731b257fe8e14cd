//! A handler's span ends when the handler is done, even when the handler's call is the
//! bus's first (which starts the transport's reply consumer): a span the transport creates
//! for a long-lived task must not take the caller's span as parent, or the caller's spans
//! never close and are never exported.
//!
//! The tracing subscriber is global: this file holds one test.

#[path = "support/broker.rs"]
mod broker;

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use mesh::{Bus, HandlerError, Incoming, RemoteError, RequestMeta};
use mesh_testkit::{eventually, TestVhost};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use tokio::sync::mpsc;
use tracing_subscriber::layer::SubscriberExt;

use broker::{transport, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_span_closes_after_the_buses_first_call() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    tracing::subscriber::set_global_default(
        tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("mesh-test"))),
    )
    .expect("the only global subscriber of this test binary");
    let vhost = TestVhost::create("obs").await.expect("a test vhost");

    let quotes = Bus::builder()
        .node("obs")
        .module("quotes")
        .serve("quotes.price", |_: String, _: RequestMeta| async {
            Ok::<u64, RemoteError>(900)
        })
        .start(transport(&vhost, "obs.quotes").await)
        .await
        .expect("quotes starts");
    let (to_test, mut done) = mpsc::unbounded_channel::<u64>();
    let bus_cell: Arc<OnceLock<Bus>> = Arc::new(OnceLock::new());
    let handle = Arc::clone(&bus_cell);
    let billing = Bus::builder()
        .node("obs")
        .module("billing")
        .on_raw(
            ["module.billing.quote.asked"],
            move |_e: Incoming<Bytes>| {
                let bus = handle.get().cloned();
                let to_test = to_test.clone();
                async move {
                    let bus = bus.ok_or("billing's bus is not set yet")?;
                    let cents: u64 = bus
                        .call("quotes.price", "basic", std::time::Duration::from_secs(10))
                        .await?;
                    let _ = to_test.send(cents);
                    Ok::<(), HandlerError>(())
                }
            },
        )
        .start(transport(&vhost, "obs.billing").await)
        .await
        .expect("billing starts");
    bus_cell.set(billing.clone()).expect("set once");

    let id = billing
        .emit_outgoing(
            mesh::Outgoing::json("quote.asked", &serde_json::json!({})).expect("a JSON payload"),
        )
        .await
        .expect("confirmed")
        .to_string();
    let cents = tokio::time::timeout(WAIT, done.recv())
        .await
        .expect("the handler's call returns in time")
        .expect("channel open");
    assert_eq!(cents, 900);

    eventually(
        WAIT,
        "the handler's and the call's spans are exported",
        || {
            let spans = exporter.get_finished_spans().expect("spans readable");
            let id = id.clone();
            async move {
                let handle = spans.iter().any(|s| {
                    s.name == "mesh.handle"
                        && s.attributes
                            .iter()
                            .any(|kv| kv.key.as_str() == "id" && kv.value.as_str() == id.as_str())
                });
                let call = spans.iter().any(|s| s.name == "mesh.call");
                (handle && call).then_some(())
            }
        },
    )
    .await;

    billing.drain().await.expect("drained");
    quotes.drain().await.expect("drained");
    vhost.delete().await.expect("vhost deleted");
}
