//! Property: no query string on any page makes the console answer 500 (or panic).

mod common;

use common::{seeded, serve};
use mesh_console::{Console, Tokens};
use proptest::prelude::*;

const PATHS: [&str; 12] = [
    "/",
    "/live",
    "/map",
    "/modules/n1.billing.events",
    "/modules/x",
    "/replay",
    "/events",
    "/dead",
    "/dead/redrive",
    "/dead/purge",
    "/events/0190a1f2-0000-7000-8000-000000000001",
    "/dead/0190a1f2-0000-7000-8000-000000000001",
];

const NAMES: [&str; 12] = [
    "key", "source", "since", "until", "id", "after", "order", "limit", "queue", "reason", "rate",
    "x",
];

fn query() -> impl Strategy<Value = String> {
    let raw = "[ -~]{0,60}";
    let pairs = proptest::collection::vec(
        (
            proptest::sample::select(NAMES.to_vec()),
            prop_oneof![
                "[a-z#*.]{0,20}",
                "\\PC{0,30}",
                Just("2026-01-31T12:00:00Z".to_owned()),
                Just("0190a1f2-0000-7000-8000-000000000001".to_owned()),
                Just("n1.billing.events".to_owned()),
            ],
        ),
        0..5,
    )
    .prop_map(|pairs| {
        let mut query = form_urlencoded::Serializer::new(String::new());
        for (k, v) in pairs {
            query.append_pair(k, &v);
        }
        query.finish()
    });
    prop_oneof![raw.prop_map(|s| s), pairs]
}

#[test]
fn no_query_string_yields_a_500() {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let (served, _seed) = runtime.block_on(async {
        let seed = seeded().await.expect("a seeded store");
        let tokens = Tokens::single("alice", common::TOKEN).expect("a token");
        // A broker for the live page and the replay's plan (the live stream itself, which
        // stays open, is tried in tests/live.rs).
        let broker = mesh::MemoryBroker::new();
        let console = Console::new(seed.store.clone())
            .tokens(tokens)
            .transport(std::sync::Arc::new(broker.transport()));
        let served = serve(console).await.expect("served");
        (served, seed)
    });
    let client = common::client();
    proptest!(ProptestConfig::with_cases(96), |(path in proptest::sample::select(PATHS.to_vec()), query in query())| {
        let url = format!("{}{path}?{query}", served.base);
        let status = runtime.block_on(async {
            match client.get(&url).send().await {
                Ok(response) => Some(response.status().as_u16()),
                // A string the client refuses as a URL never reached the console.
                Err(e) if e.is_builder() => None,
                Err(e) => panic!("{url}: {e}"),
            }
        });
        if let Some(status) = status {
            prop_assert!(status < 500, "{} answered {}", url, status);
        }
    });
}
