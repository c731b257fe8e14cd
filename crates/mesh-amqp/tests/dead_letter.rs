//! Dead letters: set aside with headers and body intact into every queue of dead letters (a
//! reader's own durable queue, a tap), readable through `QueueSpec::DeadLetters`, and
//! re-driven straight into one queue; the retired `mesh.dead-letters` unbound, drained and
//! deleted only once empty.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use mesh_core::codec::{self, DeadLetterNote, DeadReason};
use mesh_core::{
    DeadQueue, HeaderValue, PublishOptions, QueueSpec, SubscriptionSpec, Target, Timestamp,
    TopicPattern,
};
use mesh_testkit::eventually;

const DEAD: &str = "n.audit-logger.dead";

fn dead(name: &str) -> QueueSpec {
    QueueSpec::DeadLetters(DeadQueue::Durable {
        name: name.to_owned(),
    })
}

fn spec(queue: QueueSpec, pattern: &str) -> SubscriptionSpec {
    SubscriptionSpec {
        queue,
        patterns: vec![TopicPattern::parse(pattern).unwrap()],
        prefetch: 4,
        retry_delays: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_lands_in_every_queue_of_dead_letters_intact() {
    let vhost = common::vhost("dead-letter").await;
    let transport = common::connect(&vhost, "dead-letter").await;
    let queue = "n.dl.events";
    let mut dead = transport.subscribe(spec(dead(DEAD), "#")).await.unwrap();
    assert_eq!(dead.queue(), DEAD);
    let mut tap = transport
        .subscribe(spec(QueueSpec::DeadLetters(DeadQueue::Tap), "#"))
        .await
        .unwrap();
    assert!(tap.queue().starts_with("amq.gen-"));
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
    // Stamped by the publisher: this transport's user.
    let user = delivery.message.properties.user_id.clone();
    assert!(user.is_some());
    let mut copy = delivery.message.clone();
    codec::mark_dead(
        &mut copy,
        &DeadLetterNote {
            reason: DeadReason::Permanent,
            attempts: 1,
            last_error: Some("boom".to_owned()),
            queue: queue.to_owned(),
            time: Timestamp::now(),
        },
    );
    delivery.dead_letter(copy.clone()).await.unwrap();
    // The dead letter is published by this consumer's user, which the broker validates; the
    // original publisher's user rides in `x-mesh-user`.
    assert_eq!(
        copy.header(codec::USER).and_then(|v| v.as_str()),
        user.as_deref()
    );
    assert_eq!(copy.properties.user_id, None);
    copy.properties.user_id = user;
    // Published under the queue's name (the event's key restored from `x-mesh-routing-key`),
    // which the receiving transport records for provenance.
    copy.properties.headers.insert(
        codec::DEAD_KEY.into(),
        mesh_core::HeaderValue::Str("n.dl.events".into()),
    );

    // The tap has its copy too: it takes nothing from the durable reader.
    let tapped = common::next(&mut tap).await;
    assert_eq!(tapped.message, copy);
    tapped.ack().await.unwrap();
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
            .filter(|q| q.name == queue || q.name == DEAD)
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
    let mut dead_letters = transport.subscribe(spec(dead(DEAD), "#")).await.unwrap();
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
    let letter = common::next(&mut dead_letters).await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_of_dead_letters_is_durable_never_dead_lettered_and_bound_on_everything() {
    let vhost = common::vhost("dead-queue").await;
    let transport = common::connect(&vhost, "dead-queue").await;
    drop(transport.subscribe(spec(dead(DEAD), "#")).await.unwrap());
    let queues = vhost.list_queues().await.unwrap();
    let queue = queues.iter().find(|q| q.name == DEAD).expect("declared");
    assert!(queue.durable && !queue.exclusive && !queue.auto_delete);
    assert_eq!(
        queue.arguments,
        serde_json::json!({"x-queue-type": "quorum"})
    );
    let bindings: Vec<_> = vhost
        .list_bindings()
        .await
        .unwrap()
        .into_iter()
        .filter(|b| b.destination == DEAD && !b.source.is_empty())
        .map(|b| (b.source, b.routing_key))
        .collect();
    assert_eq!(bindings, [("mesh.events.dead".to_owned(), "#".to_owned())]);
    // No base queue: `mesh.dead-letters` is retired.
    assert!(!queues.iter().any(|q| q.name == "mesh.dead-letters"));
    transport.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retired_queue_is_unbound_drained_and_deleted_only_once_empty() {
    use amqprs::channel::{BasicPublishArguments, QueueBindArguments, QueueDeclareArguments};
    let vhost = common::vhost("retired").await;
    let transport = common::connect(&vhost, "retired").await;
    assert!(!transport.unbind_retired_dead_queue().await.unwrap());
    assert!(transport.delete_retired_dead_queue().await.unwrap());

    // As an older mesh left it: bound to `mesh.events.dead` on `#`, holding a dead letter.
    let (connection, channel) = common::raw(&vhost).await;
    let mut arguments = amqprs::FieldTable::new();
    arguments.insert(
        "x-queue-type".try_into().unwrap(),
        amqprs::FieldValue::S("quorum".try_into().unwrap()),
    );
    channel
        .queue_declare(
            QueueDeclareArguments::durable_client_named("mesh.dead-letters")
                .arguments(arguments)
                .finish(),
        )
        .await
        .unwrap();
    channel
        .queue_bind(QueueBindArguments::new(
            "mesh.dead-letters",
            "mesh.events.dead",
            "#",
        ))
        .await
        .unwrap();
    channel
        .basic_publish(
            amqprs::BasicProperties::default(),
            b"old".to_vec(),
            BasicPublishArguments::new("mesh.events.dead", "module.x.old"),
        )
        .await
        .unwrap();
    let depth = || async {
        vhost
            .list_queues()
            .await
            .ok()?
            .into_iter()
            .find(|q| q.name == "mesh.dead-letters")
            .map(|q| q.messages)
    };
    eventually(
        common::WAIT,
        "the old dead letter in the retired queue",
        || async { (depth().await == Some(1)).then_some(()) },
    )
    .await;

    assert!(transport.unbind_retired_dead_queue().await.unwrap());
    assert!(!vhost
        .list_bindings()
        .await
        .unwrap()
        .iter()
        .any(|b| b.destination == "mesh.dead-letters" && b.source == "mesh.events.dead"));
    // Not empty: kept.
    assert!(!transport.delete_retired_dead_queue().await.unwrap());
    let mut retired = transport
        .subscribe(spec(QueueSpec::DeadLetters(DeadQueue::Retired), "#"))
        .await
        .unwrap();
    let old = common::next(&mut retired).await;
    assert_eq!(&old.message.body[..], b"old");
    // Read by a consumer: kept.
    assert!(!transport.delete_retired_dead_queue().await.unwrap());
    old.ack().await.unwrap();
    retired.cancel();
    while retired.next().await.is_some() {}
    drop(retired);
    eventually(
        common::WAIT,
        "the retired queue deleted once empty and unused",
        || async {
            transport
                .delete_retired_dead_queue()
                .await
                .ok()?
                .then_some(())
        },
    )
    .await;
    assert_eq!(depth().await, None);
    assert!(transport
        .subscribe(spec(QueueSpec::DeadLetters(DeadQueue::Retired), "#"))
        .await
        .is_err());
    connection.close().await.ok();
    transport.close().await;
    vhost.delete().await.unwrap();
}
