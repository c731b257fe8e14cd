//! Tool requests checked against the served schema: with validation on, a request that
//! breaks the tool's request schema is refused to its caller with the typed remote error
//! `schema-invalid` (never a dead letter, never a timeout) and the tool never runs; a valid
//! one is served. The same scenario on the memory transport and on RabbitMQ; without
//! validation the same bad request reaches the tool's own deserializer.

#[path = "support/broker.rs"]
mod broker;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mesh::raw::Transport;
use mesh::{Bus, ErrorKind, RemoteError, RequestMeta};
use mesh_testkit::TestVhost;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use broker::{transport, WAIT};

const TOOL: &str = "billing.quote";

#[derive(Debug, Serialize, Deserialize, JsonSchema)]
struct QuoteRequest {
    plan: String,
    #[schemars(range(min = 1, max = 100))]
    seats: u32,
}

#[derive(Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
struct Quote {
    cents: u64,
}

/// Starts billing serving `billing.quote` (validating or not) and umami calling it; the
/// counter counts the tool's runs.
async fn start(
    server: Arc<dyn Transport>,
    caller: Arc<dyn Transport>,
    validate: bool,
) -> anyhow::Result<(Bus, Bus, Arc<AtomicUsize>)> {
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    let billing = Bus::builder()
        .node("n1")
        .module("billing")
        .validate_schemas(validate)
        .serve_with_schemas(TOOL, move |request: QuoteRequest, _meta: RequestMeta| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                Ok(Quote {
                    cents: 900 * u64::from(request.seats),
                })
            }
        })
        .start(server)
        .await?;
    let umami = Bus::builder()
        .node("n1")
        .module("umami")
        .start(caller)
        .await?;
    Ok((billing, umami, runs))
}

/// The scenario: bad requests refused with `schema-invalid` before the tool runs, a valid
/// one served.
async fn refuses_bad_requests_and_serves_good_ones(
    server: Arc<dyn Transport>,
    caller: Arc<dyn Transport>,
) -> anyhow::Result<()> {
    let (billing, umami, runs) = start(server, caller, true).await?;

    // A required field missing: serde would refuse it too, but the schema does first.
    let missing = serde_json::json!({"plan": "basic"});
    let refused = umami
        .call::<_, Quote>(TOOL, &missing, WAIT)
        .await
        .expect_err("a request without `seats` is refused");
    assert!(refused.is_schema_invalid(), "{refused}");
    let remote = refused.remote().expect("a remote error");
    assert_eq!(remote.code, RemoteError::SCHEMA_INVALID);
    assert!(
        remote.message.contains("\"seats\" is a required property"),
        "{}",
        remote.message
    );
    assert!(
        remote
            .message
            .contains("the request of tool `billing.quote`"),
        "{}",
        remote.message
    );

    // Well-typed for serde but out of the schema's range: only the schema refuses it, and
    // the message quotes the path, never the value.
    let out_of_range = serde_json::json!({"plan": "basic", "seats": 4242});
    let refused = umami
        .call::<_, Quote>(TOOL, &out_of_range, WAIT)
        .await
        .expect_err("a request with 4242 seats is refused");
    assert!(
        matches!(refused.kind(), ErrorKind::Remote { code, .. } if code == "schema-invalid"),
        "{refused}"
    );
    let message = refused.remote().expect("a remote error").message;
    assert!(message.contains("/seats"), "{message}");
    assert!(!message.contains("4242"), "the value leaked: {message}");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        0,
        "a refused request ran the tool"
    );

    // A valid request is served.
    let quote: Quote = umami
        .call(
            TOOL,
            &QuoteRequest {
                plan: "basic".into(),
                seats: 3,
            },
            WAIT,
        )
        .await?;
    assert_eq!(quote, Quote { cents: 2700 });
    assert_eq!(runs.load(Ordering::SeqCst), 1);

    billing.drain().await?;
    umami.drain().await?;
    Ok(())
}

#[tokio::test]
async fn tool_requests_are_validated_on_the_memory_transport() -> anyhow::Result<()> {
    let broker = mesh::MemoryBroker::new();
    refuses_bad_requests_and_serves_good_ones(
        Arc::new(broker.transport()),
        Arc::new(broker.transport()),
    )
    .await
}

#[tokio::test]
async fn tool_requests_are_validated_over_rabbitmq() -> anyhow::Result<()> {
    let vhost = TestVhost::create("tool-validation").await?;
    refuses_bad_requests_and_serves_good_ones(
        transport(&vhost, "tool-validation.billing").await,
        transport(&vhost, "tool-validation.umami").await,
    )
    .await
}

#[tokio::test]
async fn without_validation_the_tool_s_deserializer_judges() -> anyhow::Result<()> {
    let broker = mesh::MemoryBroker::new();
    let (billing, umami, runs) = start(
        Arc::new(broker.transport()),
        Arc::new(broker.transport()),
        false,
    )
    .await?;
    // Out of the schema's range, but serde reads it: served, the schema unchecked.
    let quote: Quote = umami
        .call(
            TOOL,
            &serde_json::json!({"plan": "basic", "seats": 200}),
            WAIT,
        )
        .await?;
    assert_eq!(quote, Quote { cents: 180_000 });
    // Missing a field: the deserializer refuses it (`invalid-request`), not the schema.
    let refused = umami
        .call::<_, Quote>(TOOL, &serde_json::json!({"plan": "basic"}), WAIT)
        .await
        .expect_err("serde refuses a request without `seats`");
    assert!(!refused.is_schema_invalid(), "{refused}");
    assert_eq!(
        refused.remote().map(|r| r.code).as_deref(),
        Some(RemoteError::INVALID_REQUEST)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    billing.drain().await?;
    umami.drain().await?;
    Ok(())
}
