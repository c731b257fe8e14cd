//! A durable subscription of a transport connected with the management API ends up bound on
//! `mesh.events` to exactly its patterns, bindings someone else made included.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;

use mesh::amqp::management_options;
use mesh_admin::management::ManagementClient;
use mesh_core::{QueueSpec, SubscriptionSpec, TopicPattern};
use mesh_testkit::TestVhost;

fn spec(queue: &str, patterns: &[&str]) -> SubscriptionSpec {
    SubscriptionSpec {
        queue: QueueSpec::Durable {
            name: queue.to_owned(),
        },
        patterns: patterns
            .iter()
            .map(|p| TopicPattern::parse(p).unwrap())
            .collect(),
        prefetch: 8,
        retry_delays: Vec::new(),
    }
}

/// Non-default bindings as (source, destination, key).
async fn bindings(vhost: &TestVhost) -> BTreeSet<(String, String, String)> {
    vhost
        .list_bindings()
        .await
        .unwrap()
        .into_iter()
        .filter(|b| !b.source.is_empty())
        .map(|b| (b.source, b.destination, b.routing_key))
        .collect()
}

fn binding(source: &str, queue: &str, key: &str) -> (String, String, String) {
    (source.to_owned(), queue.to_owned(), key.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_binding_made_by_someone_else_is_removed_through_the_management_api() {
    let vhost = common::vhost("foreign-binding").await;
    let transport = common::connect(&vhost, "foreign-binding").await;
    let queue = "n.m.events";
    drop(transport.subscribe(spec(queue, &["a.b.c"])).await.unwrap());

    // A binding this transport never made (an older deployment, an operator).
    let options = common::options(&vhost, "foreign-binding");
    let management = management_options(&options).expect("a loopback broker's API is used");
    ManagementClient::new(&management)
        .unwrap()
        .bind(vhost.name(), "mesh.events", queue, "old.pattern.#")
        .await
        .unwrap();

    drop(transport.subscribe(spec(queue, &["a.b.c"])).await.unwrap());
    let ours: Vec<_> = bindings(&vhost)
        .await
        .into_iter()
        .filter(|b| b.1 == queue)
        .collect();
    assert_eq!(ours, [binding("mesh.events", queue, "a.b.c")]);
    transport.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_management_api_leaves_the_recorded_bindings_to_remove() {
    let vhost = common::vhost("unreachable-mgmt").await;
    // Nothing listens on port 1: the API is unreachable.
    let options = common::options(&vhost, "unreachable-mgmt").management_url("http://127.0.0.1:1");
    let transport = mesh::amqp::connect(options).await.unwrap();
    let queue = "n.m.events";
    drop(
        transport
            .subscribe(spec(queue, &["a.#", "b.#"]))
            .await
            .unwrap(),
    );
    drop(transport.subscribe(spec(queue, &["a.#"])).await.unwrap());
    let ours: Vec<_> = bindings(&vhost)
        .await
        .into_iter()
        .filter(|b| b.1 == queue)
        .collect();
    assert_eq!(ours, [binding("mesh.events", queue, "a.#")]);
    transport.close().await;
    vhost.delete().await.unwrap();
}
