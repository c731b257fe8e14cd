//! What the broker holds after subscribing: exactly the contract's exchanges, queues (with
//! their arguments) and bindings; and bindings no longer asked for are removed.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use mesh_amqp::{AmqpTransport, BindingDecl, QueueType};
use mesh_core::{QueueSpec, SubscriptionSpec, TopicPattern};
use mesh_testkit::TestVhost;
use serde_json::json;

fn spec(queue: &str, patterns: &[&str], delays: &[u64]) -> SubscriptionSpec {
    SubscriptionSpec {
        queue: QueueSpec::Durable {
            name: queue.to_owned(),
        },
        patterns: patterns
            .iter()
            .map(|p| TopicPattern::parse(p).unwrap())
            .collect(),
        prefetch: 8,
        retry_delays: delays.iter().map(|s| Duration::from_secs(*s)).collect(),
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
async fn durable_subscription_declares_exactly_the_contract() {
    let vhost = common::vhost("topology").await;
    let transport = common::connect(&vhost, "topology").await;
    let queue = "anchor.umami.events";
    let mut subscription = transport
        .subscribe(spec(
            queue,
            &["module.a.#", "node.*.joined", "mesh.x.y"],
            &[1, 3],
        ))
        .await
        .unwrap();

    let exchanges: BTreeSet<_> = vhost
        .list_exchanges()
        .await
        .unwrap()
        .into_iter()
        .filter(|e| !e.is_builtin())
        .map(|e| (e.name, e.kind, e.durable, e.auto_delete, e.internal))
        .collect();
    let expected: BTreeSet<_> = [
        ("mesh.events", "topic"),
        ("mesh.events.dead", "topic"),
        ("mesh.logs", "topic"),
        ("mesh.retry", "topic"),
        ("mesh.replies", "topic"),
        ("mesh.rpc", "topic"),
    ]
    .into_iter()
    .map(|(n, kind)| (n.to_owned(), kind.to_owned(), true, false, false))
    .collect();
    assert_eq!(exchanges, expected);

    let queues = vhost.list_queues().await.unwrap();
    let names: BTreeSet<_> = queues.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(
        names,
        BTreeSet::from([
            queue,
            "anchor.umami.events.retry.1s",
            "anchor.umami.events.retry.3s"
        ])
    );
    assert!(queues
        .iter()
        .all(|q| q.durable && !q.exclusive && !q.auto_delete));
    let arguments = |name: &str| {
        queues
            .iter()
            .find(|q| q.name == name)
            .map(|q| q.arguments.clone())
            .unwrap()
    };
    assert_eq!(
        arguments(queue),
        json!({
            "x-queue-type": "quorum",
            "x-dead-letter-exchange": "mesh.events.dead",
            "x-delivery-limit": 20
        })
    );
    // No TTL and no dead-lettering: the queue's forwarders bring the copies back.
    for step in ["1s", "3s"] {
        assert_eq!(
            arguments(&format!("{queue}.retry.{step}")),
            json!({"x-queue-type": "quorum"})
        );
    }

    // The retry ladder rides `mesh.retry`: each retry queue on its own name, and the queue on
    // its own name for the copies coming back.
    let retries = [
        binding("mesh.retry", queue, queue),
        binding(
            "mesh.retry",
            "anchor.umami.events.retry.1s",
            "anchor.umami.events.retry.1s",
        ),
        binding(
            "mesh.retry",
            "anchor.umami.events.retry.3s",
            "anchor.umami.events.retry.3s",
        ),
    ];
    assert_eq!(
        bindings(&vhost).await,
        BTreeSet::from([
            binding("mesh.events", queue, "module.a.#"),
            binding("mesh.events", queue, "node.*.joined"),
            binding("mesh.events", queue, "mesh.x.y"),
        ])
        .into_iter()
        .chain(retries.clone())
        .collect()
    );
    // The transport's own record says the same.
    let recorded: BTreeSet<_> = transport
        .topology()
        .bindings()
        .map(|b| binding(&b.exchange, &b.queue, &b.routing_key))
        .collect();
    assert_eq!(recorded, bindings(&vhost).await);
    assert_eq!(transport.topology().queues().count(), 3);
    subscription.cancel();

    // One pattern fewer: that binding goes, on the broker and in the record.
    let _again = transport
        .subscribe(spec(queue, &["module.a.#", "node.*.joined"], &[1, 3]))
        .await
        .unwrap();
    assert_eq!(
        bindings(&vhost).await,
        BTreeSet::from([
            binding("mesh.events", queue, "module.a.#"),
            binding("mesh.events", queue, "node.*.joined"),
        ])
        .into_iter()
        .chain(retries)
        .collect()
    );
    assert!(!transport
        .topology()
        .bindings()
        .any(|b| b == &BindingDecl::new("mesh.events", queue, "mesh.x.y")));

    transport.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_management_api_recorded_bindings_are_still_removed() {
    let vhost = common::vhost("no-management").await;
    // Nothing listens on port 1: the API is unreachable.
    let options = common::options(&vhost, "no-management").management_url("http://127.0.0.1:1");
    let transport = AmqpTransport::connect(options).await.unwrap();
    let queue = "n.m.events";
    drop(
        transport
            .subscribe(spec(queue, &["a.#", "b.#"], &[]))
            .await
            .unwrap(),
    );
    drop(
        transport
            .subscribe(spec(queue, &["a.#"], &[]))
            .await
            .unwrap(),
    );
    let ours: Vec<_> = bindings(&vhost)
        .await
        .into_iter()
        .filter(|b| b.1 == queue)
        .collect();
    assert_eq!(ours, [binding("mesh.events", queue, "a.#")]);
    transport.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_queues_carry_no_quorum_arguments() {
    let vhost = common::vhost("classic").await;
    let options = common::options(&vhost, "classic").queue_type(QueueType::Classic);
    let transport = AmqpTransport::connect(options).await.unwrap();
    let queue = "n.c.events";
    drop(
        transport
            .subscribe(spec(queue, &["#"], &[2]))
            .await
            .unwrap(),
    );
    let queues = vhost.list_queues().await.unwrap();
    let arguments = |name: &str| {
        queues
            .iter()
            .find(|q| q.name == name)
            .map(|q| q.arguments.clone())
            .unwrap()
    };
    assert_eq!(
        arguments(queue),
        json!({"x-queue-type": "classic", "x-dead-letter-exchange": "mesh.events.dead"})
    );
    assert_eq!(
        arguments("n.c.events.retry.2s"),
        json!({"x-queue-type": "classic"})
    );
    transport.close().await;
    vhost.delete().await.unwrap();
}
