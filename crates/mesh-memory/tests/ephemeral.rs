//! Exclusive, auto-delete, server-named queues with automatic acks.

mod common;

use common::*;
use mesh_core::transport::Transport;
use mesh_memory::MemoryBroker;

#[tokio::test(start_paused = true)]
async fn an_ephemeral_queue_sees_only_what_comes_after_it_and_is_gone_after_cancel() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    emit(&transport, "module.a.before", "before").await;

    let mut tail = transport
        .subscribe(ephemeral(&["module.a.#"]))
        .await
        .unwrap();
    let name = tail.queue().to_owned();
    assert!(name.starts_with("amq.gen-"), "server-named: {name}");
    assert!(broker.queue_names().contains(&name));
    assert_eq!(broker.bindings(&name), vec!["module.a.#"]);

    emit(&transport, "module.a.after", "after").await;
    emit(&transport, "module.b.other", "other").await;
    let delivery = next(&mut tail).await;
    assert_eq!(body(&delivery), "after");
    assert!(!delivery.redelivered);
    // Automatic acks: the message left the queue when it was handed out.
    assert_eq!(broker.unacked(&name), Some(0));
    assert_eq!(broker.queue_depth(&name), Some(0));
    // Dropping it does not bring it back; settling is a no-op that succeeds.
    drop(delivery);
    nothing_more(&mut tail).await;

    tail.cancel();
    assert!(!broker.queue_names().contains(&name));
    assert!(broker.exchange_bindings("mesh.events").is_empty());
    assert_eq!(broker.queue_depth(&name), None);
}

#[tokio::test(start_paused = true)]
async fn an_ephemeral_queue_is_gone_when_its_subscription_is_dropped() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let tail = transport.subscribe(ephemeral(&["#"])).await.unwrap();
    let name = tail.queue().to_owned();
    emit(&transport, "module.a.e", "pending").await;
    drop(tail);
    assert!(broker.queue_names().is_empty());
    assert_eq!(transport.health().consumers_attached, 0);
    assert_eq!(broker.queue_depth(&name), None);
}

#[tokio::test(start_paused = true)]
async fn every_ephemeral_queue_gets_its_own_copy_and_settling_is_a_no_op() {
    let broker = MemoryBroker::new();
    let (one, two) = (broker.transport(), broker.transport());
    let _watch = one.subscribe(dead_letters()).await.unwrap();
    let mut a = one.subscribe(ephemeral(&["#"])).await.unwrap();
    let mut b = two.subscribe(ephemeral(&["#"])).await.unwrap();
    assert_ne!(a.queue(), b.queue());
    emit(&one, "module.a.e", "x").await;

    let delivery = next(&mut a).await;
    let copy = delivery.message.clone();
    delivery.retry(copy, 0).await.unwrap();
    let delivery = next(&mut b).await;
    let copy = delivery.message.clone();
    delivery.dead_letter(copy).await.unwrap();
    nothing_more(&mut a).await;
    nothing_more(&mut b).await;
    assert_eq!(broker.queue_depth(DEAD), Some(0));
}

#[tokio::test(start_paused = true)]
async fn an_ephemeral_queue_holds_what_its_subscriber_has_not_taken_yet() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut spec = ephemeral(&["#"]);
    spec.prefetch = 2;
    let mut tail = transport.subscribe(spec).await.unwrap();
    for n in 0..5 {
        emit(&transport, "module.a.e", &n.to_string()).await;
    }
    // Two in the subscription's channel, the rest ready in the queue.
    assert_eq!(broker.queue_depth(tail.queue()), Some(3));
    for n in 0..5 {
        assert_eq!(body(&next(&mut tail).await), n.to_string());
    }
    assert_eq!(broker.queue_depth(tail.queue()), Some(0));
}
