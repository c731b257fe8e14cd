//! Acceptance: W3C trace context and causation cross a real broker.
//!
//! A request span emits event A; billing handles A and, inside its handler, emits event B and
//! calls a tool; mailer handles B, and the tool's server answers. Every span of the chain is
//! captured by an in-memory OpenTelemetry exporter: they share the request's trace id, and
//! each consumer's span is the child of the producer's span that sent the message. B's
//! causation id is A's id, and so is the call's.
//!
//! The tracing subscriber is global (handlers run on the runtime's worker threads), so this
//! file holds one test.

#[path = "support/broker.rs"]
mod broker;

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use mesh::{Bus, HandlerError, Incoming, RemoteError, RequestMeta};
use mesh_testkit::{eventually, TestVhost};
use opentelemetry::trace::{SpanId, TracerProvider as _};
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tokio::sync::mpsc;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

use broker::{transport, WAIT};

fn exporter() -> InMemorySpanExporter {
    static EXPORTER: OnceLock<InMemorySpanExporter> = OnceLock::new();
    EXPORTER
        .get_or_init(|| {
            let exporter = InMemorySpanExporter::default();
            let provider = SdkTracerProvider::builder()
                .with_simple_exporter(exporter.clone())
                .build();
            let subscriber = tracing_subscriber::registry()
                .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("mesh-test")));
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in this test binary");
            exporter
        })
        .clone()
}

fn attribute(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| match &kv.value {
            Value::String(s) => s.as_str().to_owned(),
            other => other.to_string(),
        })
}

/// The one finished span named `name` whose attribute `key` is `value`.
fn span<'a>(spans: &'a [SpanData], name: &str, key: &str, value: &str) -> &'a SpanData {
    let found: Vec<&SpanData> = spans
        .iter()
        .filter(|s| s.name == name && attribute(s, key).as_deref() == Some(value))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one `{name}` span with {key}={value}, among {:#?}",
        spans
            .iter()
            .map(|s| (s.name.to_string(), s.attributes.clone()))
            .collect::<Vec<_>>()
    );
    found[0]
}

fn assert_child(child: &SpanData, parent: &SpanData) {
    assert_eq!(
        child.span_context.trace_id(),
        parent.span_context.trace_id(),
        "`{}` is in the trace of `{}`",
        child.name,
        parent.name
    );
    assert_eq!(
        child.parent_span_id,
        parent.span_context.span_id(),
        "`{}` is the child of `{}`",
        child.name,
        parent.name
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handlers_span_is_the_child_of_the_emitters_across_the_broker() {
    let exporter = exporter();
    let vhost = TestVhost::create("obs").await.expect("a test vhost");

    // mailer: handles B, reports its metadata.
    let (to_test, mut b_seen) = mpsc::unbounded_channel::<mesh::Meta>();
    let mailer = Bus::builder()
        .node("obs")
        .module("mailer")
        .on_raw(
            ["module.billing.invoice.opened"],
            move |e: Incoming<Bytes>| {
                let to_test = to_test.clone();
                async move {
                    let _ = to_test.send(e.meta);
                    Ok::<(), HandlerError>(())
                }
            },
        )
        .start(transport(&vhost, "obs.mailer").await)
        .await
        .expect("mailer starts");

    // quotes: serves a tool, reports the request's metadata.
    let (to_test, mut call_seen) = mpsc::unbounded_channel::<RequestMeta>();
    let quotes = Bus::builder()
        .node("obs")
        .module("quotes")
        .serve("quotes.price", move |plan: String, meta: RequestMeta| {
            let to_test = to_test.clone();
            async move {
                let _ = to_test.send(meta);
                Ok::<u64, RemoteError>(if plan == "basic" { 900 } else { 0 })
            }
        })
        .start(transport(&vhost, "obs.quotes").await)
        .await
        .expect("quotes starts");

    // billing: handles A by emitting B and calling the tool, from inside the handler.
    let billing_bus: Arc<OnceLock<Bus>> = Arc::new(OnceLock::new());
    let handle = Arc::clone(&billing_bus);
    let billing = Bus::builder()
        .node("obs")
        .module("billing")
        .on_raw(["module.umami.site.created"], move |_e: Incoming<Bytes>| {
            let bus = handle.get().cloned();
            async move {
                let bus = bus.ok_or("billing's bus is not set yet")?;
                bus.emit_outgoing(mesh::Outgoing::json(
                    "invoice.opened",
                    &serde_json::json!({"site": "blog"}),
                )?)
                .await?;
                let _cents: u64 = bus
                    .call("quotes.price", "basic", std::time::Duration::from_secs(10))
                    .await?;
                Ok::<(), HandlerError>(())
            }
        })
        .start(transport(&vhost, "obs.billing").await)
        .await
        .expect("billing starts");
    billing_bus
        .set(billing.clone())
        .expect("billing's bus is set once");

    let umami = Bus::builder()
        .node("obs")
        .module("umami")
        .start(transport(&vhost, "obs.umami").await)
        .await
        .expect("umami starts");

    // The transport starts its reply consumer on a bus's first call, under a span that must
    // not outlive the call; `span_lifetimes.rs` checks that. Here the first call is made
    // outside any span, so this test checks propagation alone.
    let _: u64 = billing
        .call("quotes.price", "basic", std::time::Duration::from_secs(10))
        .await
        .expect("a first call");
    tokio::time::timeout(WAIT, call_seen.recv())
        .await
        .expect("quotes gets the first call in time")
        .expect("quotes' channel is open");

    let request = tracing::info_span!("test.request");
    let a_id = umami
        .emit_outgoing(
            mesh::Outgoing::json("site.created", &serde_json::json!({"site": "blog"}))
                .expect("a JSON payload"),
        )
        .instrument(request.clone())
        .await
        .expect("A is confirmed");
    drop(request);

    let b = tokio::time::timeout(WAIT, b_seen.recv())
        .await
        .expect("mailer gets B in time")
        .expect("mailer's channel is open");
    let call = tokio::time::timeout(WAIT, call_seen.recv())
        .await
        .expect("quotes gets the call in time")
        .expect("quotes' channel is open");
    // Causation, set by the runtime with no help from the handler.
    assert_eq!(
        b.causation_id(),
        Some(a_id.to_string().as_str()),
        "B names A as its cause"
    );
    assert_eq!(
        call.causation_id,
        Some(a_id.to_string()),
        "the call names A as its cause"
    );
    let b_id = b.id().to_string();
    let call_id = call.id.to_string();

    // A span is exported when it closes: the consumers' spans close once they settled.
    let spans = eventually(WAIT, "every span of the chain is exported", || {
        let exporter = exporter.clone();
        let (a_id, b_id, call_id) = (a_id.to_string(), b_id.clone(), call_id.clone());
        async move {
            let spans = exporter.get_finished_spans().expect("spans readable");
            let has = |name: &str, key: &str, value: &str| {
                spans
                    .iter()
                    .any(|s| s.name == name && attribute(s, key).as_deref() == Some(value))
            };
            (spans.iter().any(|s| s.name == "test.request")
                && has("mesh.handle", "id", &a_id)
                && has("mesh.handle", "id", &b_id)
                && has("mesh.serve", "id", &call_id)
                && has("mesh.call", "id", &call_id))
            .then_some(spans)
        }
    })
    .await;

    let a_id = a_id.to_string();
    let root = spans
        .iter()
        .find(|s| s.name == "test.request")
        .expect("the request span");
    assert_eq!(
        root.parent_span_id,
        SpanId::INVALID,
        "the request is the root"
    );
    let emit_a = span(&spans, "mesh.emit", "id", &a_id);
    let handle_a = span(&spans, "mesh.handle", "id", &a_id);
    let emit_b = span(&spans, "mesh.emit", "id", &b_id);
    let handle_b = span(&spans, "mesh.handle", "id", &b_id);
    let call_span = span(&spans, "mesh.call", "id", &call_id);
    let serve_span = span(&spans, "mesh.serve", "id", &call_id);

    assert_child(emit_a, root);
    assert_child(handle_a, emit_a); // across the broker
    assert!(
        handle_a.parent_span_is_remote,
        "A's handler's parent came over the wire"
    );
    assert_child(emit_b, handle_a);
    assert_child(handle_b, emit_b); // across the broker again
    assert_child(call_span, handle_a);
    assert_child(serve_span, call_span); // over request/reply
    assert_eq!(
        attribute(handle_b, "causation_id").as_deref(),
        Some(a_id.as_str())
    );
    assert_eq!(
        attribute(handle_a, "queue").as_deref(),
        Some("obs.billing.events")
    );
    assert_eq!(attribute(handle_a, "outcome").as_deref(), Some("ack"));

    for bus in [umami, billing, mailer, quotes] {
        bus.drain().await.expect("drained");
    }
    vhost.delete().await.expect("vhost deleted");
}
