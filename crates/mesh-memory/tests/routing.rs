//! Topic routing on `mesh.events`, the default exchange, mandatory publishes, expiration.

mod common;

use std::time::Duration;

use common::*;
use mesh_core::transport::{PublishOptions, Target, Transport, TransportErrorKind};
use mesh_memory::MemoryBroker;

#[tokio::test(start_paused = true)]
async fn a_queue_bound_by_two_matching_patterns_gets_one_copy_and_every_queue_gets_its_own() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut a = transport
        .subscribe(durable(
            "n.a.events",
            &["module.umami.#", "module.*.site.created"],
            8,
        ))
        .await
        .unwrap();
    let mut b = transport
        .subscribe(durable("n.b.events", &["#"], 8))
        .await
        .unwrap();

    emit(&transport, "module.umami.site.created", "one").await;

    let first = next(&mut a).await;
    assert_eq!(body(&first), "one");
    assert_eq!(first.queue, "n.a.events");
    assert_eq!(first.message.routing_key, "module.umami.site.created");
    assert_eq!(take(&mut b).await, "one");
    assert_eq!(broker.unacked("n.a.events"), Some(1));
    assert_eq!(broker.queue_depth("n.a.events"), Some(0));
    nothing_more(&mut a).await;
    nothing_more(&mut b).await;
    first.ack().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_key_no_pattern_matches_reaches_no_queue() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut a = transport
        .subscribe(durable("n.a.events", &["node.*.joined"], 8))
        .await
        .unwrap();

    emit(&transport, "node.anchor.left", "left").await;
    emit(&transport, "node.anchor.sub.joined", "too deep").await;
    emit(&transport, "node.anchor.joined", "joined").await;

    assert_eq!(take(&mut a).await, "joined");
    nothing_more(&mut a).await;
}

#[tokio::test(start_paused = true)]
async fn a_mandatory_message_no_queue_takes_fails_its_confirm() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let _a = transport
        .subscribe(durable("n.a.events", &["module.a.#"], 8))
        .await
        .unwrap();

    let mandatory = |target| PublishOptions {
        target,
        mandatory: true,
        deadline: None,
    };
    let confirm = transport
        .publish(message("module.b.thing", "x"), mandatory(Target::Events))
        .await
        .expect("publish itself succeeds");
    let error = confirm.await.expect_err("nobody is bound for module.b");
    assert_eq!(error.kind(), &TransportErrorKind::Unroutable);

    let error = transport
        .publish(
            message("module.a.thing", "x"),
            mandatory(Target::Queue("no.such.queue".into())),
        )
        .await
        .unwrap()
        .await
        .expect_err("no such queue");
    assert_eq!(error.kind(), &TransportErrorKind::Unroutable);

    // Routed, or not mandatory: confirmed.
    transport
        .publish(message("module.a.thing", "x"), mandatory(Target::Events))
        .await
        .unwrap()
        .await
        .expect("routed");
    transport
        .publish(message("module.b.thing", "x"), PublishOptions::default())
        .await
        .unwrap()
        .await
        .expect("a non-mandatory message nobody takes is confirmed, and dropped");
    assert_eq!(broker.unacked("n.a.events"), Some(1));
}

#[tokio::test(start_paused = true)]
async fn a_queue_target_reaches_that_queue_only() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut a = transport
        .subscribe(durable("n.a.events", &["module.x.#"], 8))
        .await
        .unwrap();
    let mut b = transport
        .subscribe(durable("n.b.events", &["module.x.#"], 8))
        .await
        .unwrap();

    put(
        &transport,
        "n.b.events",
        message("module.x.redriven", "again"),
    )
    .await;

    assert_eq!(take(&mut b).await, "again");
    nothing_more(&mut a).await;
}

#[tokio::test(start_paused = true)]
async fn a_message_that_waited_past_its_expiration_is_dropped_not_delivered() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut sub = transport
        .subscribe(durable("n.a.events", &["#"], 8))
        .await
        .unwrap();
    sub.cancel();
    assert_eq!(broker.consumer_count("n.a.events"), Some(0));

    let mut short = message("module.a.short", "short");
    short.properties.expiration = Some(Duration::from_secs(1));
    let mut long = message("module.a.long", "long");
    long.properties.expiration = Some(Duration::from_secs(10));
    for m in [short, long] {
        transport
            .publish(m, PublishOptions::default())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    assert_eq!(broker.queue_depth("n.a.events"), Some(2));

    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(broker.queue_depth("n.a.events"), Some(1));

    let mut sub = transport
        .subscribe(durable("n.a.events", &["#"], 8))
        .await
        .unwrap();
    assert_eq!(take(&mut sub).await, "long");
    nothing_more(&mut sub).await;
}

#[tokio::test(start_paused = true)]
async fn a_zero_expiration_is_delivered_at_once_or_never() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut sub = transport
        .subscribe(durable("n.a.events", &["#"], 1))
        .await
        .unwrap();

    let now_or_never = |body| {
        let mut m = message("module.a.now", body);
        m.properties.expiration = Some(Duration::ZERO);
        m
    };
    // The consumer has room: delivered.
    transport
        .publish(now_or_never("taken"), PublishOptions::default())
        .await
        .unwrap()
        .await
        .unwrap();
    // Its one prefetch slot is taken now: dropped.
    transport
        .publish(now_or_never("dropped"), PublishOptions::default())
        .await
        .unwrap()
        .await
        .unwrap();
    assert_eq!(broker.queue_depth("n.a.events"), Some(0));

    let taken = next(&mut sub).await;
    assert_eq!(body(&taken), "taken");
    taken.ack().await.unwrap();
    nothing_more(&mut sub).await;
}

#[tokio::test(start_paused = true)]
async fn the_broker_starts_with_no_queue_and_nothing_bound() {
    let broker = MemoryBroker::new();
    // The shared `mesh.dead-letters` is retired: readers of dead letters bind their own.
    assert!(broker.queue_names().is_empty());
    assert!(broker.exchange_bindings("mesh.events.dead").is_empty());
    assert!(broker.exchange_bindings("mesh.events").is_empty());
    assert_eq!(broker.queue_depth("mesh.dead-letters"), None);
    assert_eq!(broker.queue_depth("nope"), None);
}
