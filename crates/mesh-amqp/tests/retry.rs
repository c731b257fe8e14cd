//! The retry ladder: a copy sent to a delay step comes back to its own queue, and only
//! there, after the step's delay; and the broker's delivery count on quorum queues.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use mesh_core::{codec, PublishOptions, QueueSpec, SubscriptionSpec, TopicPattern};

fn spec(queue: &str, delays: &[u64]) -> SubscriptionSpec {
    SubscriptionSpec {
        queue: QueueSpec::Durable {
            name: queue.to_owned(),
        },
        patterns: vec![TopicPattern::parse("module.ladder.#").unwrap()],
        prefetch: 8,
        retry_delays: delays.iter().map(|s| Duration::from_secs(*s)).collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_copies_come_back_after_their_step_to_their_queue_only() {
    let vhost = common::vhost("retry").await;
    let transport = common::connect(&vhost, "retry").await;
    let mut ours = transport
        .subscribe(spec("n.ours.events", &[1, 3]))
        .await
        .unwrap();
    // Another consumer bound to the same key must never see the retry copies.
    let mut other = transport
        .subscribe(spec("n.other.events", &[1, 3]))
        .await
        .unwrap();

    for name in ["slow", "fast"] {
        transport
            .publish(
                common::event(&format!("module.ladder.{name}"), "{}"),
                PublishOptions::default(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }
    for _ in 0..2 {
        common::next(&mut other).await.ack().await.unwrap();
    }
    let first = common::next(&mut ours).await;
    let second = common::next(&mut ours).await;
    let (slow, fast) = if first.message.routing_key.ends_with("slow") {
        (first, second)
    } else {
        (second, first)
    };

    // The slow one goes to step 1 (3 s) first, so the fast one's step 0 (1 s) must come back
    // while a longer delay is pending.
    let mut slow_copy = slow.message.clone();
    codec::set_attempts(&mut slow_copy, 2);
    let slow_sent = Instant::now();
    slow.retry(slow_copy, 1).await.unwrap();
    let mut fast_copy = fast.message.clone();
    codec::set_attempts(&mut fast_copy, 1);
    let fast_sent = Instant::now();
    fast.retry(fast_copy, 0).await.unwrap();

    let back = common::next(&mut ours).await;
    let fast_after = fast_sent.elapsed();
    assert_eq!(back.message.routing_key, "module.ladder.fast");
    assert_eq!(codec::attempts(&back.message), 1);
    assert!(
        fast_after >= Duration::from_millis(950) && fast_after <= Duration::from_secs(2),
        "step 0 came back after {fast_after:?}"
    );
    // A copy is a new message to the queue: its count starts again.
    assert_eq!(back.delivery_count, Some(0));
    back.ack().await.unwrap();

    let back = common::next(&mut ours).await;
    let slow_after = slow_sent.elapsed();
    assert_eq!(back.message.routing_key, "module.ladder.slow");
    assert_eq!(codec::attempts(&back.message), 2);
    assert!(
        slow_after >= Duration::from_millis(2950) && slow_after <= Duration::from_secs(4),
        "step 1 came back after {slow_after:?}"
    );
    back.ack().await.unwrap();

    // Past the last step, the last step repeats.
    transport
        .publish(
            common::event("module.ladder.clamped", "{}"),
            PublishOptions::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    common::next(&mut other).await.ack().await.unwrap();
    let clamped = common::next(&mut ours).await;
    let copy = clamped.message.clone();
    let sent = Instant::now();
    clamped.retry(copy, 7).await.unwrap();
    let back = common::next(&mut ours).await;
    let after = sent.elapsed();
    assert_eq!(back.message.routing_key, "module.ladder.clamped");
    assert!(
        after >= Duration::from_millis(2950),
        "clamped step came back after {after:?}"
    );
    back.ack().await.unwrap();

    // The other queue saw only the three originals: nothing is waiting for it, and nothing
    // arrives now that every copy is back.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), other.next())
            .await
            .is_err(),
        "a retry copy reached another queue"
    );
    transport.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorum_queues_count_deliveries_and_release_requeues() {
    let vhost = common::vhost("delivery-count").await;
    let transport = common::connect(&vhost, "delivery-count").await;
    let mut subscription = transport
        .subscribe(spec("n.count.events", &[1]))
        .await
        .unwrap();
    transport
        .publish(
            common::event("module.ladder.count", "{}"),
            PublishOptions::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let first = common::next(&mut subscription).await;
    assert_eq!((first.delivery_count, first.redelivered), (Some(0), false));
    first.release();
    let second = common::next(&mut subscription).await;
    assert_eq!((second.delivery_count, second.redelivered), (Some(1), true));
    // The broker's count header is not part of the message handed out.
    assert!(second.message.header("x-delivery-count").is_none());
    // Dropped without a decision: released too.
    drop(second);
    let third = common::next(&mut subscription).await;
    assert_eq!(third.delivery_count, Some(2));
    third.ack().await.unwrap();
    transport.close().await;
    vhost.delete().await.unwrap();
}

/// A copy held by a forwarder whose transport goes away is not lost and not dead-lettered
/// by the broker: it waits in its retry queue (which has no TTL) until the next forwarder
/// holds it for a whole step and brings it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_held_when_its_forwarder_goes_comes_back_through_the_next_one() {
    const QUEUE: &str = "n.handover.events";
    // Long enough for the copy to be seen held before the first transport goes.
    const STEP: u64 = 20;
    let vhost = common::vhost("forward-handover").await;
    let first = common::connect(&vhost, "handover-1").await;
    let mut subscription = first.subscribe(spec(QUEUE, &[STEP])).await.unwrap();
    common::publish_confirmed(&first, common::event("module.ladder.held", "{}")).await;
    let failed = common::next(&mut subscription).await;
    let mut copy = failed.message.clone();
    codec::set_attempts(&mut copy, 1);
    failed.retry(copy, 0).await.unwrap();
    // Held unacked by the first transport's forwarder, then released with its channel.
    mesh_testkit::eventually(common::WAIT, "the copy held in its retry queue", || async {
        let queues = vhost.list_queues().await.ok()?;
        let retry = queues
            .iter()
            .find(|q| q.name == format!("{QUEUE}.retry.{STEP}s"))?;
        (retry.messages == 1).then_some(())
    })
    .await;
    drop(subscription);
    first.close().await;

    let second = common::connect(&vhost, "handover-2").await;
    let attached = Instant::now();
    let mut subscription = second.subscribe(spec(QUEUE, &[STEP])).await.unwrap();
    let back = tokio::time::timeout(
        Duration::from_secs(STEP) + common::WAIT,
        subscription.next(),
    )
    .await
    .expect("the copy back in time")
    .expect("the subscription is open");
    let after = attached.elapsed();
    assert_eq!(back.message.routing_key, "module.ladder.held");
    assert_eq!(codec::attempts(&back.message), 1);
    // The new forwarder held it for its whole step.
    assert!(
        after >= Duration::from_secs(STEP) - Duration::from_millis(50),
        "came back {after:?} after the second forwarder attached"
    );
    back.ack().await.unwrap();
    common::measured("handed-over copy back after the second attach", after);
    second.close().await;
    vhost.delete().await.unwrap();
}

/// A retry queue declared by an earlier mesh (with a TTL and dead-lettering, which the
/// broker will not change on an existing queue) is kept as it is, and forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_queue_of_an_earlier_version_is_kept_and_forwarded() {
    use amqprs::channel::QueueDeclareArguments;
    use amqprs::{FieldTable, FieldValue};

    const QUEUE: &str = "n.legacy.events";
    let vhost = common::vhost("forward-legacy").await;
    let (connection, channel) = common::raw(&vhost).await;
    let mut arguments = FieldTable::new();
    for (name, value) in [
        ("x-queue-type", FieldValue::S("quorum".try_into().unwrap())),
        ("x-message-ttl", FieldValue::l(1000)),
        (
            "x-dead-letter-exchange",
            FieldValue::S("mesh.retry".try_into().unwrap()),
        ),
        (
            "x-dead-letter-routing-key",
            FieldValue::S(QUEUE.try_into().unwrap()),
        ),
        (
            "x-dead-letter-strategy",
            FieldValue::S("at-least-once".try_into().unwrap()),
        ),
        (
            "x-overflow",
            FieldValue::S("reject-publish".try_into().unwrap()),
        ),
    ] {
        arguments.insert(name.try_into().unwrap(), value);
    }
    channel
        .queue_declare(
            QueueDeclareArguments::durable_client_named(&format!("{QUEUE}.retry.1s"))
                .arguments(arguments)
                .finish(),
        )
        .await
        .unwrap();
    connection.close().await.unwrap();

    let transport = common::connect(&vhost, "legacy").await;
    let mut subscription = transport.subscribe(spec(QUEUE, &[1])).await.unwrap();
    common::publish_confirmed(&transport, common::event("module.ladder.old", "{}")).await;
    let failed = common::next(&mut subscription).await;
    let mut copy = failed.message.clone();
    codec::set_attempts(&mut copy, 1);
    failed.retry(copy, 0).await.unwrap();
    let back = common::next(&mut subscription).await;
    assert_eq!(back.message.routing_key, "module.ladder.old");
    assert_eq!(codec::attempts(&back.message), 1);
    back.ack().await.unwrap();
    let queues = vhost.list_queues().await.unwrap();
    let retry = queues
        .iter()
        .find(|q| q.name == format!("{QUEUE}.retry.1s"))
        .unwrap();
    assert_eq!(
        retry.arguments["x-message-ttl"], 1000,
        "{:?}",
        retry.arguments
    );
    transport.close().await;
    vhost.delete().await.unwrap();
}

/// A forwarder holds a copy unacked for its step, and the broker takes back a delivery
/// unacked for its consumer timeout: a step over 15 minutes is refused, and nothing is
/// declared for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_longer_than_fifteen_minutes_is_refused() {
    let vhost = common::vhost("long-step").await;
    let transport = common::connect(&vhost, "long-step").await;
    let error = transport
        .subscribe(spec("n.long.events", &[1, 15 * 60 + 1]))
        .await
        .unwrap_err();
    assert!(
        matches!(error.kind(), mesh_core::TransportErrorKind::InvalidOptions),
        "{error}"
    );
    assert!(error.to_string().contains("retry delay 1"), "{error}");
    let queues = vhost.list_queues().await.unwrap();
    assert!(
        queues.iter().all(|q| !q.name.starts_with("n.long.")),
        "{queues:?}"
    );
    // Fifteen minutes is allowed.
    drop(
        transport
            .subscribe(spec("n.long.events", &[1, 15 * 60]))
            .await
            .unwrap(),
    );
    transport.close().await;
    vhost.delete().await.unwrap();
}

/// A retry copy that cannot be published for a passing reason (here its retry queue was
/// deleted: unroutable until the queue's forwarder re-attaches and declares it again) is
/// sent again while its delivery is held, instead of releasing the delivery at once, which
/// would have the broker deliver it again at once and run down a quorum queue's delivery
/// limit in a burst of quick failures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_that_cannot_be_published_yet_is_sent_again_while_its_delivery_is_held() {
    use amqprs::channel::QueueDeleteArguments;

    const QUEUE: &str = "n.patient.events";
    let vhost = common::vhost("copy-patience").await;
    let transport = common::connect(&vhost, "copy-patience").await;
    let events = common::Recorder::start(&transport);
    let mut subscription = transport.subscribe(spec(QUEUE, &[1])).await.unwrap();
    common::publish_confirmed(&transport, common::event("module.ladder.patient", "{}")).await;
    let failed = common::next(&mut subscription).await;

    let (connection, channel) = common::raw(&vhost).await;
    channel
        .queue_delete(QueueDeleteArguments::new(&format!("{QUEUE}.retry.1s")))
        .await
        .unwrap();
    connection.close().await.unwrap();

    let mut copy = failed.message.clone();
    codec::set_attempts(&mut copy, 1);
    let sent = Instant::now();
    let retried = failed.retry(copy, 0).await;
    for (at, event) in events.events() {
        eprintln!("{:?} {event:?}", at.duration_since(sent));
    }
    retried.expect("the copy sent once its retry queue is back");
    common::measured("the copy confirmed after", sent.elapsed());
    let back = common::next(&mut subscription).await;
    assert_eq!(back.message.routing_key, "module.ladder.patient");
    assert_eq!(codec::attempts(&back.message), 1);
    assert!(!back.redelivered, "the original was released instead");
    back.ack().await.unwrap();
    transport.close().await;
    vhost.delete().await.unwrap();
}
