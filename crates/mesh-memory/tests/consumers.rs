//! Competing consumers, prefetch, requeues, cancel.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use mesh_core::transport::Transport;
use mesh_memory::MemoryBroker;

#[tokio::test(start_paused = true)]
async fn competing_consumers_each_get_a_share_and_each_message_once() {
    let broker = MemoryBroker::new();
    // Two nodes of one module: two connections, one shared queue.
    let (one, two) = (broker.transport(), broker.transport());
    let mut a = one
        .subscribe(durable("shared.umami.events", &["module.#"], 32))
        .await
        .unwrap();
    let mut b = two
        .subscribe(durable("shared.umami.events", &["module.#"], 32))
        .await
        .unwrap();
    assert_eq!(broker.consumer_count("shared.umami.events"), Some(2));

    for n in 0..10 {
        emit(&one, "module.umami.site.created", &n.to_string()).await;
    }
    assert_eq!(broker.unacked("shared.umami.events"), Some(10));

    // Round robin among consumers with room: five each.
    let mut seen = BTreeSet::new();
    for _ in 0..5 {
        assert!(seen.insert(take(&mut a).await));
        assert!(seen.insert(take(&mut b).await));
    }
    let all: BTreeSet<String> = (0..10).map(|n| n.to_string()).collect();
    assert_eq!(seen, all);
    nothing_more(&mut a).await;
    nothing_more(&mut b).await;
    assert_eq!(broker.unacked("shared.umami.events"), Some(0));
    assert_eq!(broker.queue_depth("shared.umami.events"), Some(0));
}

#[tokio::test(start_paused = true)]
async fn a_consumer_without_room_is_skipped_for_one_with_room() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut slow = transport.subscribe(durable("q", &["#"], 1)).await.unwrap();
    let mut fast = transport.subscribe(durable("q", &["#"], 10)).await.unwrap();
    for n in 0..4 {
        emit(&transport, "module.a.e", &n.to_string()).await;
    }
    let held = next(&mut slow).await;
    assert_eq!(body(&held), "0");
    for expected in ["1", "2", "3"] {
        assert_eq!(take(&mut fast).await, expected);
    }
    nothing_within(&mut slow, Duration::from_secs(1)).await;
    held.ack().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn prefetch_bounds_the_unsettled_deliveries() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut sub = transport.subscribe(durable("q", &["#"], 2)).await.unwrap();
    for n in 0..3 {
        emit(&transport, "module.a.e", &n.to_string()).await;
    }

    let first = next(&mut sub).await;
    let second = next(&mut sub).await;
    assert_eq!((body(&first), body(&second)), ("0".into(), "1".into()));
    nothing_within(&mut sub, Duration::from_secs(60)).await;
    assert_eq!(broker.unacked("q"), Some(2));
    assert_eq!(broker.queue_depth("q"), Some(1));

    // Settling one frees a slot: the third comes.
    first.ack().await.unwrap();
    let third = next(&mut sub).await;
    assert_eq!(body(&third), "2");
    assert_eq!(broker.unacked("q"), Some(2));
    assert_eq!(broker.queue_depth("q"), Some(0));
    second.ack().await.unwrap();
    third.ack().await.unwrap();
    assert_eq!(broker.unacked("q"), Some(0));
}

#[tokio::test(start_paused = true)]
async fn prefetch_zero_is_unlimited_as_in_amqp() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut sub = transport.subscribe(durable("q", &["#"], 0)).await.unwrap();
    // More than the subscription's channel holds: the rest waits ready in the queue and
    // follows as the subscriber takes deliveries out.
    let total = 1500;
    for n in 0..total {
        emit(&transport, "module.a.e", &n.to_string()).await;
    }
    let mut held = Vec::new();
    for n in 0..total {
        let delivery = next(&mut sub).await;
        assert_eq!(body(&delivery), n.to_string());
        held.push(delivery);
    }
    assert_eq!(broker.unacked("q"), Some(total));
    for delivery in held {
        delivery.ack().await.unwrap();
    }
    assert_eq!(broker.unacked("q"), Some(0));
}

#[tokio::test(start_paused = true)]
async fn release_and_drop_requeue_at_the_front_as_redelivered() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut sub = transport.subscribe(durable("q", &["#"], 1)).await.unwrap();
    emit(&transport, "module.a.e", "first").await;
    emit(&transport, "module.a.e", "second").await;

    let delivery = next(&mut sub).await;
    assert_eq!(body(&delivery), "first");
    assert!(!delivery.redelivered);
    assert_eq!(delivery.delivery_count, Some(0));
    delivery.release();

    let delivery = next(&mut sub).await;
    assert_eq!(body(&delivery), "first", "a release goes to the front");
    assert!(delivery.redelivered);
    assert_eq!(delivery.delivery_count, Some(1));
    drop(delivery);

    let delivery = next(&mut sub).await;
    assert_eq!(
        body(&delivery),
        "first",
        "a drop without decision is a release"
    );
    assert!(delivery.redelivered);
    assert_eq!(delivery.delivery_count, Some(2));
    delivery.ack().await.unwrap();

    let delivery = next(&mut sub).await;
    assert_eq!(body(&delivery), "second");
    assert!(!delivery.redelivered);
    assert_eq!(delivery.delivery_count, Some(0));
    delivery.ack().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_released_message_may_go_to_another_consumer() {
    let broker = MemoryBroker::new();
    let (one, two) = (broker.transport(), broker.transport());
    let mut a = one.subscribe(durable("q", &["#"], 1)).await.unwrap();
    emit(&one, "module.a.e", "x").await;
    let delivery = next(&mut a).await;
    let mut b = two.subscribe(durable("q", &["#"], 1)).await.unwrap();
    nothing_within(&mut b, Duration::from_secs(1)).await;

    // `a` stops consuming and gives its delivery back: `b` gets it.
    a.cancel();
    delivery.release();
    let again = next(&mut b).await;
    assert_eq!(body(&again), "x");
    assert!(again.redelivered);
    assert_eq!(again.delivery_count, Some(1));
    again.ack().await.unwrap();
    assert!(a.next().await.is_none(), "a cancelled subscription ends");
}

#[tokio::test(start_paused = true)]
async fn an_unpolled_settle_future_dropped_releases() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut sub = transport.subscribe(durable("q", &["#"], 1)).await.unwrap();
    emit(&transport, "module.a.e", "x").await;
    let delivery = next(&mut sub).await;
    drop(delivery.ack());
    let again = next(&mut sub).await;
    assert!(again.redelivered);
    again.ack().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn cancel_stops_new_deliveries_and_keeps_those_buffered_settleable() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut sub = transport.subscribe(durable("q", &["#"], 4)).await.unwrap();
    emit(&transport, "module.a.e", "buffered").await;
    sub.cancel();
    assert_eq!(broker.consumer_count("q"), Some(0));
    assert_eq!(transport.health().consumers_attached, 0);

    emit(&transport, "module.a.e", "after").await;
    let buffered = next(&mut sub).await;
    assert_eq!(body(&buffered), "buffered");
    buffered.ack().await.unwrap();
    assert!(sub.next().await.is_none());
    assert_eq!(
        broker.queue_depth("q"),
        Some(1),
        "the queue keeps what came after"
    );
    assert_eq!(broker.unacked("q"), Some(0));
}

#[tokio::test(start_paused = true)]
async fn dropping_a_subscription_releases_what_it_had_not_received() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let sub = transport.subscribe(durable("q", &["#"], 4)).await.unwrap();
    emit(&transport, "module.a.e", "one").await;
    emit(&transport, "module.a.e", "two").await;
    assert_eq!(broker.unacked("q"), Some(2));
    drop(sub);
    assert_eq!(broker.unacked("q"), Some(0));
    assert_eq!(broker.queue_depth("q"), Some(2));
    assert_eq!(broker.consumer_count("q"), Some(0));

    let mut sub = transport.subscribe(durable("q", &["#"], 4)).await.unwrap();
    for expected in ["one", "two"] {
        let delivery = next(&mut sub).await;
        assert_eq!(body(&delivery), expected);
        assert!(delivery.redelivered);
        delivery.ack().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_durable_queue_outlives_its_consumers_and_keeps_collecting() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    drop(
        transport
            .subscribe(durable("q", &["module.a.#"], 4))
            .await
            .unwrap(),
    );
    emit(&transport, "module.a.e", "while away").await;
    assert_eq!(broker.queue_depth("q"), Some(1));
    let mut sub = transport
        .subscribe(durable("q", &["module.a.#"], 4))
        .await
        .unwrap();
    assert_eq!(take(&mut sub).await, "while away");
}

#[tokio::test(start_paused = true)]
async fn resubscribing_with_fewer_patterns_removes_the_stale_binding() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let sub = transport
        .subscribe(durable("q", &["module.a.#", "module.b.#"], 4))
        .await
        .unwrap();
    assert_eq!(broker.bindings("q"), vec!["module.a.#", "module.b.#"]);
    drop(sub);

    let mut sub = transport
        .subscribe(durable("q", &["module.a.#"], 4))
        .await
        .unwrap();
    assert_eq!(broker.bindings("q"), vec!["module.a.#"]);
    emit(&transport, "module.b.e", "stale").await;
    emit(&transport, "module.a.e", "wanted").await;
    assert_eq!(take(&mut sub).await, "wanted");
    nothing_more(&mut sub).await;
}

#[tokio::test(start_paused = true)]
async fn bad_queue_names_are_refused() {
    use mesh_core::transport::TransportErrorKind;
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let error = transport
        .subscribe(durable("", &["#"], 1))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::InvalidOptions);
    let error = transport
        .subscribe(durable(&"q".repeat(256), &["#"], 1))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::InvalidOptions);
    let error = transport
        .subscribe(durable("amq.gen-stolen", &["#"], 1))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::AccessRefused);
    assert!(broker.queue_names().is_empty());
}
