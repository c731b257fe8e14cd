//! Dead letters: set aside into `mesh.dead-letters` with headers and body intact, readable
//! through `QueueSpec::DeadLetters`, and re-driven straight into one queue.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use mesh_core::codec::{self, DeadLetter, DeadReason};
use mesh_core::{
    HeaderValue, PublishOptions, QueueSpec, SubscriptionSpec, Target, Timestamp, TopicPattern,
};
use mesh_testkit::eventually;

fn spec(queue: QueueSpec, pattern: &str) -> SubscriptionSpec {
    SubscriptionSpec {
        queue,
        patterns: vec![TopicPattern::parse(pattern).unwrap()],
        prefetch: 4,
        retry_delays: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_lands_in_the_dead_letter_queue_intact() {
    let vhost = common::vhost("dead-letter").await;
    let transport = common::connect(&vhost, "dead-letter").await;
    let queue = "n.dl.events";
    let mut subscription = transport
        .subscribe(spec(
            QueueSpec::Durable {
                name: queue.to_owned(),
            },
            "module.dl.#",
        ))
        .await
        .unwrap();
    let mut message = common::event("module.dl.failed", "{\"order\":42}");
    message
        .properties
        .headers
        .insert("x-custom".to_owned(), HeaderValue::Str("kept".to_owned()));
    transport
        .publish(message.clone(), PublishOptions::default())
        .await
        .unwrap()
        .await
        .unwrap();

    let delivery = common::next(&mut subscription).await;
    let mut copy = delivery.message.clone();
    codec::mark_dead(
        &mut copy,
        &DeadLetter {
            reason: DeadReason::Permanent,
            attempts: 1,
            last_error: Some("boom".to_owned()),
            queue: queue.to_owned(),
            time: Timestamp::now(),
        },
    );
    delivery.dead_letter(copy.clone()).await.unwrap();

    let mut dead = transport
        .subscribe(spec(QueueSpec::DeadLetters, "#"))
        .await
        .unwrap();
    assert_eq!(dead.queue(), "mesh.dead-letters");
    let letter = common::next(&mut dead).await;
    assert_eq!(letter.message, copy);
    assert_eq!(letter.message.body, message.body);
    assert_eq!(letter.message.routing_key, "module.dl.failed");
    assert_eq!(
        letter.message.header("x-custom"),
        message.header("x-custom")
    );
    let annotations = codec::read_dead_letter(&letter.message).unwrap();
    assert_eq!(annotations.reason, DeadReason::Permanent);
    assert_eq!(annotations.queue, queue);

    // Re-driven into the failing consumer's queue only, under its own routing key.
    transport
        .publish(
            letter.message.clone(),
            PublishOptions {
                target: Target::Queue(queue.to_owned()),
                mandatory: true,
                deadline: None,
            },
        )
        .await
        .unwrap()
        .await
        .unwrap();
    letter.ack().await.unwrap();
    let redriven = common::next(&mut subscription).await;
    assert_eq!(redriven.message, copy);
    redriven.ack().await.unwrap();

    // The original was acked once its dead letter was confirmed.
    eventually(common::WAIT, "both queues to be empty", || async {
        let queues = vhost.list_queues().await.ok()?;
        queues
            .iter()
            .filter(|q| q.name == queue || q.name == "mesh.dead-letters")
            .all(|q| q.messages == 0)
            .then_some(())
    })
    .await;
    transport.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quorum_delivery_limit_dead_letters_after_limit_plus_one_deliveries() {
    let vhost = common::vhost("delivery-limit").await;
    let options = common::options(&vhost, "delivery-limit").delivery_limit(2);
    let transport = mesh_amqp::AmqpTransport::connect(options).await.unwrap();
    let mut subscription = transport
        .subscribe(spec(
            QueueSpec::Durable {
                name: "n.poison.events".to_owned(),
            },
            "module.poison.#",
        ))
        .await
        .unwrap();
    transport
        .publish(
            common::event("module.poison.x", "{}"),
            PublishOptions::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    // Limit 2 on RabbitMQ 3.10: deliveries counted 0, 1 and 2, then the broker gives up.
    for expected in 0..3 {
        let delivery = common::next(&mut subscription).await;
        assert_eq!(delivery.delivery_count, Some(expected));
        delivery.release();
    }
    let mut dead = transport
        .subscribe(spec(QueueSpec::DeadLetters, "#"))
        .await
        .unwrap();
    let letter = common::next(&mut dead).await;
    assert_eq!(letter.message.routing_key, "module.poison.x");
    let annotations = codec::read_dead_letter(&letter.message).unwrap();
    assert_eq!(annotations.reason, DeadReason::DeliveryLimit);
    // What the broker's copy carries: one death (`count` is deaths, not deliveries) and no
    // count of the deliveries it had, so the attempts come from the queue's limit.
    let headers = &letter.message.properties.headers;
    let Some(HeaderValue::Array(deaths)) = headers.get(codec::BROKER_DEATH) else {
        panic!("no x-death: {headers:?}");
    };
    let Some(HeaderValue::Table(death)) = deaths.first() else {
        panic!("no x-death entry: {deaths:?}");
    };
    assert_eq!(death.get("count").and_then(HeaderValue::as_u64), Some(1));
    assert_eq!(annotations.attempts, 0, "unknown without the queue's limit");
    let counted = codec::read_dead_letter_with_limit(&letter.message, Some(2)).unwrap();
    assert_eq!(counted.attempts, 3, "limit 2: three deliveries");
    assert_eq!(counted.queue, "n.poison.events");
    letter.ack().await.unwrap();
    transport.close().await;
    vhost.delete().await.unwrap();
}
