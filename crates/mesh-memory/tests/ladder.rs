//! The retry ladder and the dead-letter queue.

mod common;

use std::time::Duration;

use common::*;
use mesh_core::codec::{self, DeadLetterNote, DeadReason};
use mesh_core::transport::{DeadQueue, QueueSpec, SubscriptionSpec, Transport};
use mesh_core::Timestamp;
use mesh_memory::MemoryBroker;
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn a_retry_comes_back_to_its_own_queue_only_after_the_delay() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut a = transport
        .subscribe(durable("n.a.events", &["module.x.#"], 4))
        .await
        .unwrap();
    let mut b = transport
        .subscribe(durable("n.b.events", &["module.x.#"], 4))
        .await
        .unwrap();
    emit(&transport, "module.x.happened", "x").await;
    assert_eq!(take(&mut b).await, "x");

    let failed = next(&mut a).await;
    let mut copy = failed.message.clone();
    codec::set_attempts(&mut copy, 1);
    let sent = Instant::now();
    failed.retry(copy, 0).await.unwrap();

    // The original is gone and holds no prefetch slot while the copy waits.
    assert_eq!(broker.unacked("n.a.events"), Some(0));
    assert_eq!(broker.queue_depth("n.a.events"), Some(0));
    assert_eq!(broker.delayed("n.a.events"), Some(1));
    nothing_within(&mut a, Duration::from_millis(4999)).await;

    let again = next(&mut a).await;
    assert!(sent.elapsed() >= Duration::from_secs(5));
    assert_eq!(body(&again), "x");
    assert_eq!(again.message.routing_key, "module.x.happened");
    assert_eq!(codec::attempts(&again.message), 1);
    assert!(!again.redelivered, "the copy is a fresh message");
    assert_eq!(again.delivery_count, Some(0));
    assert_eq!(broker.delayed("n.a.events"), Some(0));
    again.ack().await.unwrap();

    // The other queue bound to the same key never sees the copy.
    nothing_more(&mut b).await;
    assert_eq!(broker.queue_depth("n.b.events"), Some(0));
}

#[tokio::test(start_paused = true)]
async fn a_retry_past_the_ladder_uses_its_last_step_and_joins_the_tail() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let spec = SubscriptionSpec {
        queue: QueueSpec::Durable { name: "q".into() },
        patterns: patterns(&["#"]),
        prefetch: 1,
        retry_delays: vec![Duration::from_secs(1), Duration::from_secs(3)],
    };
    let mut sub = transport.subscribe(spec).await.unwrap();
    emit(&transport, "module.a.e", "retried").await;
    let failed = next(&mut sub).await;
    let sent = Instant::now();
    let copy = failed.message.clone();
    failed.retry(copy, 7).await.unwrap();

    // Meanwhile the queue moves on.
    emit(&transport, "module.a.e", "later").await;
    assert_eq!(take(&mut sub).await, "later");
    nothing_within(&mut sub, Duration::from_millis(2999)).await;
    assert_eq!(take(&mut sub).await, "retried");
    assert!(sent.elapsed() >= Duration::from_secs(3));
}

#[tokio::test(start_paused = true)]
async fn a_retry_with_no_ladder_comes_back_at_once() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let spec = SubscriptionSpec {
        retry_delays: Vec::new(),
        ..durable("q", &["#"], 1)
    };
    let mut sub = transport.subscribe(spec).await.unwrap();
    emit(&transport, "module.a.e", "x").await;
    let failed = next(&mut sub).await;
    let copy = failed.message.clone();
    failed.retry(copy, 0).await.unwrap();
    let sent = Instant::now();
    assert_eq!(take(&mut sub).await, "x");
    assert_eq!(sent.elapsed(), Duration::ZERO);
}

/// Dead-letters the next delivery of `sub` with reason `permanent`, from queue `n.a.events`.
async fn dead_letter_next(sub: &mut mesh_core::Subscription) {
    let failed = next(sub).await;
    let mut copy = failed.message.clone();
    codec::mark_dead(
        &mut copy,
        &DeadLetterNote {
            reason: DeadReason::Permanent,
            attempts: 1,
            last_error: Some("boom".into()),
            queue: "n.a.events".into(),
            time: Timestamp::now(),
        },
    );
    failed.dead_letter(copy).await.expect("dead-lettered");
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_lands_in_every_queue_of_dead_letters() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut sub = transport
        .subscribe(durable("n.a.events", &["module.x.#"], 4))
        .await
        .unwrap();
    // Two readers' own durable queues and a tap: none takes from another.
    let mut dead = transport.subscribe(dead_letters()).await.unwrap();
    assert_eq!(dead.queue(), DEAD);
    let other = "other.audit-logger.dead";
    let mut second = transport
        .subscribe(SubscriptionSpec {
            queue: QueueSpec::DeadLetters(DeadQueue::Durable {
                name: other.to_owned(),
            }),
            ..dead_letters()
        })
        .await
        .unwrap();
    let mut tap = transport.subscribe(dead_tap()).await.unwrap();
    assert!(tap.queue().starts_with("amq.gen-"));
    for queue in [DEAD, other, tap.queue()] {
        assert_eq!(broker.bindings(queue), vec!["#".to_owned()]);
    }

    emit(&transport, "module.x.poison", "poison").await;
    dead_letter_next(&mut sub).await;
    assert_eq!(broker.unacked("n.a.events"), Some(0));
    assert_eq!(broker.queue_depth("n.a.events"), Some(0));
    nothing_more(&mut sub).await;

    for reader in [&mut dead, &mut second, &mut tap] {
        let letter = next(reader).await;
        assert_eq!(letter.message.routing_key, "module.x.poison");
        assert_eq!(body(&letter), "poison");
        let annotations = codec::read_dead_letter(&letter.message).expect("annotated");
        assert_eq!(annotations.reason, DeadReason::Permanent);
        assert_eq!(annotations.queue, "n.a.events");
        letter.ack().await.unwrap();
    }
    assert_eq!(broker.queue_depth(DEAD), Some(0));
    assert_eq!(broker.unacked(DEAD), Some(0));
}

#[tokio::test(start_paused = true)]
async fn a_modules_tap_reads_the_dead_letters_of_its_own_queues_only() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut sub = transport
        .subscribe(durable("n.a.events", &["module.x.#"], 4))
        .await
        .unwrap();
    // Bound on their modules' queue names, as `Bus::dead_letters` binds them.
    let tap_of = |module: &str| SubscriptionSpec {
        patterns: patterns(&[&format!("*.{module}.events"), &format!("serve.{module}.#")]),
        ..dead_tap()
    };
    let mut own = transport.subscribe(tap_of("a")).await.unwrap();
    let mut other = transport.subscribe(tap_of("b")).await.unwrap();

    emit(&transport, "module.x.poison", "poison").await;
    dead_letter_next(&mut sub).await;
    // Under its queue's name, with its event's own key.
    let letter = next(&mut own).await;
    assert_eq!(letter.message.routing_key, "module.x.poison");
    assert_eq!(body(&letter), "poison");
    nothing_more(&mut other).await;
}

#[tokio::test(start_paused = true)]
async fn a_durable_queue_of_dead_letters_keeps_them_for_a_reader_that_is_away() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut sub = transport
        .subscribe(durable("n.a.events", &["#"], 4))
        .await
        .unwrap();
    // Declared once, then the reader goes away.
    drop(transport.subscribe(dead_letters()).await.unwrap());
    emit(&transport, "module.x.poison", "poison").await;
    dead_letter_next(&mut sub).await;
    assert_eq!(broker.queue_depth(DEAD), Some(1));

    let mut dead = transport.subscribe(dead_letters()).await.unwrap();
    let letter = next(&mut dead).await;
    assert_eq!(body(&letter), "poison");
    // Manual acks: until acked it is only handed out.
    assert_eq!(broker.unacked(DEAD), Some(1));
    letter.ack().await.unwrap();
    assert_eq!(broker.unacked(DEAD), Some(0));
    assert_eq!(broker.queue_depth(DEAD), Some(0));
}

#[tokio::test(start_paused = true)]
async fn a_tap_sees_only_what_dies_while_it_lives_and_leaves_nothing() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut sub = transport
        .subscribe(durable("n.a.events", &["#"], 4))
        .await
        .unwrap();
    let mut dead = transport.subscribe(dead_letters()).await.unwrap();
    emit(&transport, "module.x.before", "before").await;
    dead_letter_next(&mut sub).await;

    let mut tap = transport.subscribe(dead_tap()).await.unwrap();
    let name = tap.queue().to_owned();
    emit(&transport, "module.x.after", "after").await;
    dead_letter_next(&mut sub).await;
    let seen = next(&mut tap).await;
    assert_eq!(body(&seen), "after");
    // Automatic acks: released or not, it is gone from the tap, and never requeued.
    seen.release();
    nothing_more(&mut tap).await;
    assert_eq!(broker.unacked(&name), Some(0));
    drop(tap);
    assert_eq!(broker.queue_depth(&name), None);

    // The durable reader has both.
    assert_eq!(body(&next(&mut dead).await), "before");
    assert_eq!(body(&next(&mut dead).await), "after");
}

#[tokio::test(start_paused = true)]
async fn a_dead_letter_released_stays_in_its_queue_of_dead_letters() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut sub = transport.subscribe(durable("q", &["#"], 4)).await.unwrap();
    let mut dead = transport.subscribe(dead_letters()).await.unwrap();
    emit(&transport, "module.x.poison", "poison").await;
    let failed = next(&mut sub).await;
    let copy = failed.message.clone();
    failed.dead_letter(copy).await.unwrap();

    drop(next(&mut dead).await);
    let again = next(&mut dead).await;
    assert!(again.redelivered);
    assert_eq!(again.delivery_count, Some(1));
    again.ack().await.unwrap();
}
