//! Ephemeral subscriptions, health, closing, connecting to the wrong place, and settling a
//! delivery whose channel is gone (the broker redelivers it on the new one).

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use mesh_amqp::{AmqpOptions, AmqpTransport};
use mesh_core::{
    Delivery, PublishOptions, QueueSpec, SubscriptionSpec, TopicPattern, Transport,
    TransportErrorKind,
};
use mesh_testkit::eventually;

fn spec(queue: QueueSpec, pattern: &str) -> SubscriptionSpec {
    SubscriptionSpec {
        queue,
        patterns: vec![TopicPattern::parse(pattern).unwrap()],
        prefetch: 16,
        retry_delays: vec![Duration::from_secs(1)],
    }
}

#[test]
fn handles_are_send_sync_and_usable_as_a_transport_object() {
    fn assert_send_sync<T: Send + Sync + Clone + 'static>() {}
    assert_send_sync::<AmqpTransport>();
    assert_send_sync::<AmqpOptions>();
    fn takes(_: &dyn Transport) {}
    let _ = takes;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ephemeral_queue_is_gone_after_cancel() {
    let vhost = common::vhost("ephemeral").await;
    let transport = common::connect(&vhost, "ephemeral").await;
    let mut tail = transport
        .subscribe(spec(QueueSpec::Ephemeral, "node.*.joined"))
        .await
        .unwrap();
    let name = tail.queue().to_owned();
    assert!(name.starts_with("amq.gen-"), "{name}");
    let queues = vhost.list_queues().await.unwrap();
    let queue = queues.iter().find(|q| q.name == name).unwrap();
    assert!(queue.exclusive && queue.auto_delete && !queue.durable);
    assert!(!transport.topology().queues().any(|q| q.name == name));

    common::publish_confirmed(&transport, common::event("node.anchor.joined", "{}")).await;
    let delivery = common::next(&mut tail).await;
    assert_eq!(delivery.message.routing_key, "node.anchor.joined");
    assert_eq!(delivery.delivery_count, None);
    // At-most-once: settling is a no-op.
    delivery.retry(common::event("x", "{}"), 0).await.unwrap();

    tail.cancel();
    assert!(tail.next().await.is_none());
    eventually(
        common::WAIT,
        "the ephemeral queue to be deleted",
        || async {
            let queues = vhost.list_queues().await.ok()?;
            (!queues.iter().any(|q| q.name == name)).then_some(())
        },
    )
    .await;
    transport.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_counts_consumers_and_close_stops_everything() {
    let vhost = common::vhost("health").await;
    let transport = common::connect(&vhost, "health").await;
    let health = transport.health();
    assert!(
        health.connected && !health.blocked && health.is_ready(),
        "{health:?}"
    );
    let mut first = transport
        .subscribe(spec(
            QueueSpec::Durable {
                name: "n.h1.events".into(),
            },
            "module.h.#",
        ))
        .await
        .unwrap();
    let second = transport
        .subscribe(spec(QueueSpec::Ephemeral, "module.h.#"))
        .await
        .unwrap();
    let health = transport.health();
    assert_eq!(
        (health.consumers_expected, health.consumers_attached),
        (2, 2)
    );

    drop(second);
    eventually(common::WAIT, "one consumer fewer", || async {
        let h = transport.health();
        (h.consumers_expected == 1 && h.consumers_attached == 1).then_some(())
    })
    .await;

    transport.close().await;
    let health = transport.health();
    assert!(!health.connected, "{health:?}");
    assert!(tokio::time::timeout(common::WAIT, first.next())
        .await
        .expect("the subscription ends")
        .is_none());
    let error = transport
        .publish(common::event("module.h.x", "{}"), PublishOptions::default())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::Closed);
    let error = transport
        .subscribe(spec(QueueSpec::Ephemeral, "#"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::Closed);
    eventually(common::WAIT, "both connections to be gone", || async {
        let connections = vhost.list_connections().await.ok()?;
        connections.is_empty().then_some(())
    })
    .await;
    vhost.delete().await.unwrap();
}

/// One event published to `queue` (bound as `module.<module>.#`) and taken, then the
/// consume connection of `transport` (named `<name>`) closed by force: the first copy, whose
/// channel is gone, and the same message delivered again on the new channel.
async fn taken_then_redelivered(
    vhost: &mesh_testkit::TestVhost,
    transport: &AmqpTransport,
    name: &str,
    queue: &str,
    module: &str,
) -> (mesh_core::Subscription, Delivery, Delivery) {
    let mut subscription = transport
        .subscribe(spec(
            QueueSpec::Durable { name: queue.into() },
            &format!("module.{module}.#"),
        ))
        .await
        .unwrap();
    let sent = common::event(&format!("module.{module}.x"), "{}");
    let id = sent.properties.message_id.clone();
    common::publish_confirmed(transport, sent).await;
    let delivery = common::next(&mut subscription).await;
    assert!(!delivery.redelivered);
    let closed = vhost
        .close_connections(Some(&format!("{name}.consume")), "test")
        .await
        .unwrap();
    assert_eq!(closed, 1);
    // The subscription is fed again from the new connection: the broker requeued the
    // unacked message and delivers it again, on the new channel.
    let again = common::next(&mut subscription).await;
    assert!(again.redelivered);
    assert_eq!(again.message.properties.message_id, id);
    (subscription, delivery, again)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_of_a_lost_channel_cannot_be_acked_and_comes_again_on_the_new_one() {
    let vhost = common::vhost("stale-ack").await;
    let transport = common::connect(&vhost, "stale-ack").await;
    let (subscription, delivery, again) =
        taken_then_redelivered(&vhost, &transport, "stale-ack", "n.stale.events", "stale").await;
    // The first copy's tag belongs to the lost channel: it is never sent on the new one.
    let error = delivery.ack().await.unwrap_err();
    assert!(error.is_connection_lost(), "{error}");
    again.ack().await.unwrap();
    let health = transport.health();
    assert!(health.is_ready(), "{health:?}");
    assert_eq!(
        (health.consumers_expected, health.consumers_attached),
        (1, 1)
    );
    let stats = transport.stats();
    assert_eq!(stats.unknown_delivery_tag_closes, 0, "{stats:?}");
    assert_eq!(stats.channel_closes, 0, "{stats:?}");
    // The subscription's consumer (its retry queue's forwarder is not counted).
    assert_eq!(
        (stats.consumer_cancels, stats.reattached),
        (1, 1),
        "{stats:?}"
    );
    eventually(common::WAIT, "the queue to be empty", || async {
        let queues = vhost.list_queues().await.ok()?;
        let q = queues.into_iter().find(|q| q.name == "n.stale.events")?;
        (q.messages == 0).then_some(())
    })
    .await;
    drop(subscription);
    eventually(
        common::WAIT,
        "the dropped subscription to be forgotten",
        || async { (transport.health().consumers_expected == 0).then_some(()) },
    )
    .await;
    transport.close().await;
    vhost.delete().await.unwrap();
}

/// Reports what an [`AckFailed`](mesh_core::AckFailed) hears.
fn reporter() -> (
    mesh_core::AckFailed,
    tokio::sync::mpsc::UnboundedReceiver<mesh_core::TransportError>,
) {
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let failed: mesh_core::AckFailed = std::sync::Arc::new(move |error| {
        let _ = tx.send(error);
    });
    (failed, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_detached_ack_is_sent_before_the_close_or_reported_when_its_channel_is_gone() {
    let vhost = common::vhost("detached-ack").await;
    let transport = common::connect(&vhost, "detached-ack").await;
    let (subscription, stale, again) = taken_then_redelivered(
        &vhost,
        &transport,
        "detached-ack",
        "n.detached.events",
        "detached",
    )
    .await;

    // The first copy's channel is gone: the tracker reports it, nobody waited for it.
    let (failed, mut reports) = reporter();
    stale.ack_detached(failed).await;
    let report = tokio::time::timeout(common::WAIT, reports.recv())
        .await
        .expect("the lost ack to be reported")
        .expect("a report");
    assert!(report.is_connection_lost(), "{report}");

    // The live one is handed on and the transport closed at once: the ack still reaches
    // the broker before the connection goes (else the message would be back in its queue).
    let (failed, mut reports) = reporter();
    again.ack_detached(failed).await;
    drop(subscription);
    transport.close().await;
    eventually(common::WAIT, "the acked message to be gone", || async {
        let queues = vhost.list_queues().await.ok()?;
        let q = queues.into_iter().find(|q| q.name == "n.detached.events")?;
        (q.messages == 0 && q.consumers == 0).then_some(())
    })
    .await;
    assert!(
        reports.try_recv().is_err(),
        "an ack that was sent is not reported"
    );
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_the_wrong_place_fails_with_a_kind() {
    let vhost = common::vhost("refused").await;
    let wrong_password = common::options(&vhost, "refused").credentials("guest", "wrong");
    let error = AmqpTransport::connect(wrong_password).await.unwrap_err();
    // A refused login is a refusal of its own, not a lost connection.
    assert_eq!(error.kind(), &TransportErrorKind::AccessRefused, "{error}");
    assert!(
        matches!(
            mesh_amqp::ConnectRefused::of(&error),
            Some(mesh_amqp::ConnectRefused::Login { user, .. }) if user == "guest"
        ),
        "{error:?}"
    );
    let no_vhost = common::options(&vhost, "refused").vhost("mesh-no-such-vhost");
    let error = AmqpTransport::connect(no_vhost).await.unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::AccessRefused, "{error}");
    assert!(
        matches!(
            mesh_amqp::ConnectRefused::of(&error),
            Some(mesh_amqp::ConnectRefused::Vhost { vhost, .. }) if vhost == "mesh-no-such-vhost"
        ),
        "{error:?}"
    );
    // Nothing listens on port 1.
    let nowhere = common::options(&vhost, "refused")
        .address("127.0.0.1", 1)
        .connect_timeout(Duration::from_secs(2));
    let error = AmqpTransport::connect(nowhere).await.unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::ConnectionLost, "{error}");
    // A cluster URL whose first node is down: the next one is used.
    let cluster: AmqpOptions = format!(
        "amqp://guest:guest@127.0.0.1:1,127.0.0.1:5672/{}",
        mesh_testkit::shared::percent_encode(vhost.name())
    )
    .parse()
    .unwrap();
    let transport = AmqpTransport::connect(cluster.connection_name("refused-cluster"))
        .await
        .unwrap();
    assert!(transport.health().connected);
    transport.close().await;
    vhost.delete().await.unwrap();
}

/// Dropping a subscription makes two tasks act on its channel at once: the pump cancels
/// the consumer while the ack tracker, its reader gone, closes the channel. A cancel sent
/// after the close is a method on a closed channel, which the broker answers by closing
/// the whole consume connection (`CHANNEL_ERROR - expected 'channel.open'`). Many
/// subscribe-and-drop rounds on one transport must cost no connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_subscriptions_never_costs_the_consume_connection() {
    let vhost = common::vhost("drop-subscriptions").await;
    let transport = common::connect(&vhost, "drop-subscriptions").await;
    let recorder = common::Recorder::start(&transport);
    for round in 0..150 {
        let queue = QueueSpec::Durable {
            name: format!("n.drop{}.events", round % 3),
        };
        let subscription = transport
            .subscribe(spec(queue, "module.a.#"))
            .await
            .unwrap_or_else(|e| panic!("subscribe in round {round}: {e}"));
        drop(subscription);
    }
    // A last round trip: the consume connection still carries subscriptions.
    let mut tail = transport
        .subscribe(spec(
            QueueSpec::Durable {
                name: "n.drop0.events".to_owned(),
            },
            "module.a.#",
        ))
        .await
        .unwrap();
    common::publish_confirmed(&transport, common::event("module.a.done", "{}")).await;
    let delivery = common::next(&mut tail).await;
    assert_eq!(delivery.message.routing_key, "module.a.done");
    delivery.ack().await.unwrap();
    assert_eq!(
        recorder.count(|event| matches!(event, mesh_amqp::Lifecycle::Disconnected { .. })),
        0,
        "connections were lost: {:?}",
        recorder.events()
    );
    drop(tail);
    transport.close().await;
    vhost.delete().await.unwrap();
}
