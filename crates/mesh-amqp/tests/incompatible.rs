//! A queue that exists with other arguments is reported as `Incompatible`, and the transport
//! stays usable.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use amqprs::channel::QueueDeclareArguments;
use amqprs::FieldTable;
use mesh_core::{PublishOptions, QueueSpec, SubscriptionSpec, TopicPattern, TransportErrorKind};

fn spec(queue: &str) -> SubscriptionSpec {
    SubscriptionSpec {
        queue: QueueSpec::Durable {
            name: queue.to_owned(),
        },
        patterns: vec![TopicPattern::parse("module.inc.#").unwrap()],
        prefetch: 4,
        retry_delays: vec![Duration::from_secs(1)],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_with_other_arguments_is_incompatible_and_the_transport_carries_on() {
    let vhost = common::vhost("incompatible").await;
    let queue = "n.inc.events";
    let (connection, channel) = common::raw(&vhost).await;
    let mut arguments = FieldTable::new();
    // Classic where mesh declares quorum; the broker reports the first argument that
    // differs, so the others match what mesh declares.
    arguments.insert("x-queue-type".try_into().unwrap(), "classic".into());
    arguments.insert(
        "x-dead-letter-exchange".try_into().unwrap(),
        "mesh.events.dead".into(),
    );
    channel
        .queue_declare(
            QueueDeclareArguments::durable_client_named(queue)
                .arguments(arguments)
                .finish(),
        )
        .await
        .unwrap();
    let _ = channel.close().await;
    let _ = connection.close().await;

    let transport = common::connect(&vhost, "incompatible").await;
    let error = transport.subscribe(spec(queue)).await.unwrap_err();
    assert_eq!(
        error.kind(),
        &TransportErrorKind::Incompatible {
            entity: queue.to_owned(),
            argument: "x-queue-type".to_owned(),
            ours: "quorum".to_owned(),
            theirs: "classic".to_owned(),
        },
        "{error}"
    );
    assert!(!error.is_retryable());
    assert!(std::error::Error::source(&error).is_some());

    // Only the declaring channel died: the same transport publishes and consumes.
    let mut subscription = transport.subscribe(spec("n.fine.events")).await.unwrap();
    transport
        .publish(
            common::event("module.inc.after", "{}"),
            PublishOptions::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let delivery = common::next(&mut subscription).await;
    assert_eq!(delivery.message.routing_key, "module.inc.after");
    delivery.ack().await.unwrap();
    assert!(transport.health().is_ready(), "{:?}", transport.health());
    transport.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_argument_is_reported_as_none() {
    let vhost = common::vhost("incompatible-none").await;
    let queue = "n.plain.events";
    let (connection, channel) = common::raw(&vhost).await;
    channel
        .queue_declare(QueueDeclareArguments::durable_client_named(queue))
        .await
        .unwrap();
    let _ = channel.close().await;
    let _ = connection.close().await;

    let transport = common::connect(&vhost, "incompatible-none").await;
    let error = transport.subscribe(spec(queue)).await.unwrap_err();
    // A queue declared without arguments: the first one the broker compares is absent.
    assert_eq!(
        error.kind(),
        &TransportErrorKind::Incompatible {
            entity: queue.to_owned(),
            argument: "x-dead-letter-exchange".to_owned(),
            ours: "mesh.events.dead".to_owned(),
            theirs: "none".to_owned(),
        },
        "{error}"
    );
    transport.close().await;
    vhost.delete().await.unwrap();
}
