//! Declarations in flight together (the start of many subscriptions, and the replay of the
//! whole topology after a forced close), on the shared broker in a vhost of each test's own:
//! each distinct object is declared once (counted by the transport's stats, not timed),
//! every subscription consumes after the re-attach, and a refused declaration among many is
//! still the typed error it is alone.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use amqprs::channel::QueueDeclareArguments;
use amqprs::FieldTable;
use mesh_amqp::AmqpTransport;
use mesh_core::{QueueSpec, Subscription, SubscriptionSpec, TopicPattern, TransportErrorKind};
use mesh_testkit::eventually;

/// Subscriptions started at once: more than the transport's lanes (16), so lanes are
/// reused and several subscriptions' declarations share them.
const SUBSCRIPTIONS: usize = 40;

fn spec(i: usize) -> SubscriptionSpec {
    SubscriptionSpec {
        queue: QueueSpec::Durable {
            name: format!("n.l{i:02}.events"),
        },
        patterns: vec![
            TopicPattern::parse(&format!("module.l{i:02}.#")).unwrap(),
            TopicPattern::parse(&format!("module.shared{i:02}.*.created")).unwrap(),
        ],
        prefetch: 4,
        retry_delays: vec![Duration::from_secs(1), Duration::from_secs(5)],
    }
}

/// Every object the transport recorded: exchanges, queues, bindings.
fn objects(transport: &AmqpTransport) -> u64 {
    let topology = transport.topology();
    (topology.exchanges().count() + topology.queues().count() + topology.bindings().count()) as u64
}

/// Publishes one event to each subscription and reads it from each.
async fn each_consumes(transport: &AmqpTransport, subscriptions: &mut [Subscription], tag: &str) {
    for i in 0..subscriptions.len() {
        let key = format!("module.l{i:02}.{tag}");
        common::publish_confirmed(transport, common::event(&key, "{}")).await;
    }
    for (i, subscription) in subscriptions.iter_mut().enumerate() {
        let delivery = common::next(subscription).await;
        assert_eq!(
            delivery.message.routing_key,
            format!("module.l{i:02}.{tag}"),
            "subscription {i}"
        );
        delivery.ack().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_subscriptions_declare_each_object_once_and_consume_again_after_a_forced_close() {
    let vhost = common::vhost("lanes-reattach").await;
    let transport = common::connect(&vhost, "lanes").await;
    // Connecting looks for each of the six exchanges once (a passive declare) and, none
    // being there in a new vhost, declares each once.
    let exchanges = transport.topology().exchanges().count() as u64;
    assert_eq!(exchanges, 6);
    assert_eq!(transport.stats().declarations, 2 * exchanges);

    let starts = (0..SUBSCRIPTIONS).map(|i| transport.subscribe(spec(i)));
    let mut subscriptions: Vec<Subscription> = futures::future::join_all(starts)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    // Each queue (its own and two retry queues) and each binding (two patterns on
    // `mesh.events`, three on `mesh.retry`) once: 6 + 40 × (3 + 5).
    let declared = objects(&transport);
    assert_eq!(declared, 6 + SUBSCRIPTIONS as u64 * 8);
    assert_eq!(transport.stats().declarations, exchanges + declared);
    each_consumes(&transport, &mut subscriptions, "before").await;

    let before = transport.stats();
    let closed = vhost
        .close_connections(Some("lanes."), "lanes test")
        .await
        .unwrap();
    assert_eq!(closed, 2);
    eventually(
        common::WAIT,
        "every subscription re-attached and the transport ready",
        || async {
            (transport.stats().reattached >= before.reattached + SUBSCRIPTIONS as u64
                && transport.health().is_ready())
            .then_some(())
        },
    )
    .await;
    // The replay declared the whole recorded topology once (the exchanges, there now, only
    // looked for), and the subscriptions' first re-attach declared nothing more.
    assert_eq!(
        transport.stats().declarations - before.declarations,
        declared,
        "one declaration per distinct object in the replay"
    );
    each_consumes(&transport, &mut subscriptions, "after").await;
    transport.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_retry_queue_among_many_fails_its_subscription_with_its_typed_error() {
    let vhost = common::vhost("lanes-refused").await;
    // One retry queue of subscription 7 exists as a classic queue: not what mesh declares,
    // nor what an earlier mesh did.
    let refused = "n.l07.events.retry.5s";
    let (connection, channel) = common::raw(&vhost).await;
    let mut arguments = FieldTable::new();
    arguments.insert("x-queue-type".try_into().unwrap(), "classic".into());
    channel
        .queue_declare(
            QueueDeclareArguments::durable_client_named(refused)
                .arguments(arguments)
                .finish(),
        )
        .await
        .unwrap();
    let _ = channel.close().await;
    let _ = connection.close().await;

    let transport = common::connect(&vhost, "lanes-refused").await;
    let starts = (0..SUBSCRIPTIONS).map(|i| transport.subscribe(spec(i)));
    let outcomes = futures::future::join_all(starts).await;
    for (i, outcome) in outcomes.into_iter().enumerate() {
        match (i, outcome) {
            (7, Err(error)) => assert_eq!(
                error.kind(),
                &TransportErrorKind::Incompatible {
                    entity: refused.to_owned(),
                    argument: "x-queue-type".to_owned(),
                    ours: "quorum".to_owned(),
                    theirs: "classic".to_owned(),
                },
                "{error}"
            ),
            (7, Ok(_)) => panic!("subscription 7 started over a refused retry queue"),
            (i, Err(error)) => panic!("subscription {i} failed: {error}"),
            (_, Ok(_)) => {}
        }
    }
    // The others consume, and the transport is healthy.
    let mut subscription = transport.subscribe(spec(8)).await.unwrap();
    common::publish_confirmed(&transport, common::event("module.l08.after", "{}")).await;
    let delivery = common::next(&mut subscription).await;
    delivery.ack().await.unwrap();
    transport.close().await;
}
