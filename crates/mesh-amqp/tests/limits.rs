//! The broker's limits close channels while the connection stays up: a message over
//! `max_message_size` closes the publishing channel, an unacked delivery past
//! `consumer_timeout` closes the consumer's. Both on one private node configured with a
//! 1 MiB message limit and a 3 s consumer timeout (checked every 500 ms); each test has its
//! own connections and queue.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mesh_amqp::{AmqpOptions, AmqpTransport, Lifecycle, Link};
use mesh_core::{PublishOptions, QueueSpec, SubscriptionSpec, TopicPattern, TransportErrorKind};
use mesh_testkit::{eventually, shared_node, NodeOptions, PrivateNode};

const MAX_MESSAGE: usize = 1 << 20;

async fn node() -> Arc<PrivateNode> {
    shared_node(
        "limits",
        NodeOptions::default()
            .max_message_size(MAX_MESSAGE as u64)
            .consumer_timeout_ms(3_000)
            .channel_tick_interval_ms(500),
    )
    .await
    .expect("a private RabbitMQ node")
}

fn options(node: &PrivateNode, name: &str) -> AmqpOptions {
    node.url()
        .parse::<AmqpOptions>()
        .unwrap()
        .connection_name(name)
        // No management API on private nodes; not the shared broker's either.
        .management_url("http://127.0.0.1:1")
}

fn durable(queue: &str, pattern: &str, prefetch: u16) -> SubscriptionSpec {
    SubscriptionSpec {
        queue: QueueSpec::Durable {
            name: queue.to_owned(),
        },
        patterns: vec![TopicPattern::parse(pattern).unwrap()],
        prefetch,
        retry_delays: vec![Duration::from_secs(1)],
    }
}

fn sized(key: &str, size: usize, fill: u8) -> mesh_core::WireMessage {
    let mut message = common::event(key, "");
    message.body = Bytes::from(vec![fill; size]);
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_brokers_limit_is_too_large_and_the_others_on_its_channel_are_resent() {
    let node = node().await;
    let transport = AmqpTransport::connect(options(&node, "too-large"))
        .await
        .unwrap();
    let events = common::Recorder::start(&transport);
    let mut subscription = transport
        .subscribe(durable("n.large.events", "module.large.#", 64))
        .await
        .unwrap();

    // Pipelined: small ones before and after the big one, all on the channel it closes.
    let big = MAX_MESSAGE + 1024;
    let mut confirms = Vec::new();
    for i in 0..20u8 {
        let message = if i == 10 {
            sized("module.large.big", big, i)
        } else {
            sized("module.large.small", 1000, i)
        };
        confirms.push((
            i,
            transport
                .publish(message, PublishOptions::default())
                .await
                .unwrap(),
        ));
    }
    for (i, confirm) in confirms {
        let outcome = tokio::time::timeout(common::WAIT, confirm)
            .await
            .expect("every confirm resolves");
        if i == 10 {
            let error = outcome.unwrap_err();
            assert_eq!(
                error.kind(),
                &TransportErrorKind::TooLarge {
                    size: big,
                    max: Some(MAX_MESSAGE)
                },
                "{error}"
            );
            assert!(!error.is_retryable());
        } else {
            outcome.unwrap_or_else(|e| panic!("message {i}: {e}"));
        }
    }
    // The broker closed the publishing channel, not the connection.
    let closes: Vec<_> = events
        .events()
        .into_iter()
        .filter_map(|(_, e)| match e {
            Lifecycle::ChannelClosed { link, code, reason } => Some((link, code, reason)),
            _ => None,
        })
        .collect();
    assert_eq!(closes.len(), 1, "{closes:?}");
    assert_eq!((closes[0].0, closes[0].1), (Link::Publish, 406));
    assert!(
        closes[0].2.contains("larger than configured max size"),
        "{closes:?}"
    );
    assert_eq!(transport.stats().reconnects, 0);

    // Every small one arrives, byte-exact, the big one never.
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < 19 {
        let delivery = common::next(&mut subscription).await;
        assert_eq!(delivery.message.routing_key, "module.large.small");
        let fill = delivery.message.body[0];
        assert_eq!(delivery.message.body, Bytes::from(vec![fill; 1000]));
        seen.insert(fill);
        delivery.ack().await.unwrap();
    }

    // The next publish succeeds; one over the limit learned now fails before it is sent,
    // without costing the channel.
    transport
        .publish(
            sized("module.large.after", 10, 0),
            PublishOptions::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let refused_at = Instant::now();
    let error = transport
        .publish(sized("module.large.big", big, 0), PublishOptions::default())
        .await
        .unwrap_err();
    assert!(refused_at.elapsed() < Duration::from_secs(1));
    assert!(
        matches!(error.kind(), TransportErrorKind::TooLarge { .. }),
        "{error}"
    );
    let stats = transport.stats();
    assert_eq!(stats.channel_closes, 1, "{stats:?}");
    common::measured("too large: resent after the channel close", stats.resent);
    common::next(&mut subscription).await.ack().await.unwrap();
    transport.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_timeout_closes_only_the_channel_and_the_consumer_is_reattached() {
    let node = node().await;
    let transport = AmqpTransport::connect(options(&node, "consumer-timeout"))
        .await
        .unwrap();
    let events = common::Recorder::start(&transport);
    let mut subscription = transport
        .subscribe(durable("n.slow.events", "module.slow.#", 4))
        .await
        .unwrap();
    let sent = common::event("module.slow.x", "{}");
    let id = sent.properties.message_id.clone();
    transport
        .publish(sent, PublishOptions::default())
        .await
        .unwrap()
        .await
        .unwrap();
    // Held, never settled, past the consumer timeout.
    let held = common::next(&mut subscription).await;
    let taken = Instant::now();
    let again = common::next(&mut subscription).await;
    let redelivered_after = taken.elapsed();
    assert!(again.redelivered);
    assert_eq!(again.message.properties.message_id, id);
    let error = held.ack().await.unwrap_err();
    assert!(error.is_connection_lost(), "{error}");
    again.ack().await.unwrap();

    eventually(common::WAIT, "the consumer to be back", || async {
        transport.health().is_ready().then_some(())
    })
    .await;
    // The recorder is a task of its own: the event may reach it a moment after the health.
    let log = eventually(common::WAIT, "the re-attach to be recorded", || async {
        let log = events.events();
        log.iter()
            .any(|(_, e)| matches!(e, Lifecycle::ConsumerReattached { .. }))
            .then_some(log)
    })
    .await;
    let close = log.iter().find_map(|(_, e)| match e {
        Lifecycle::ChannelClosed { link, code, reason } => Some((*link, *code, reason.clone())),
        _ => None,
    });
    let (link, code, reason) = close.expect("a channel close");
    assert_eq!((link, code), (Link::Consume, 406));
    assert!(reason.contains("timed out"), "{reason}");
    let stats = transport.stats();
    assert_eq!(stats.reconnects, 0, "{stats:?}");
    assert_eq!(stats.unknown_delivery_tag_closes, 0, "{stats:?}");
    assert_eq!(
        (stats.consumer_cancels, stats.reattached),
        (1, 1),
        "{stats:?}"
    );
    assert!(common::consumers(Some(node.name()), "/")
        .await
        .contains(&("n.slow.events".to_owned(), 4)));
    common::measured(
        "consumer timeout (3 s, tick 0.5 s): redelivered after",
        redelivered_after,
    );
    transport.close().await;
}

/// A retry step longer than the broker's consumer timeout: the forwarder holding the copy
/// loses it to the timeout twice, then sends it at once, so the retry still comes back
/// (without that rule it would be held and taken back forever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_step_longer_than_the_consumer_timeout_still_comes_back() {
    let node = node().await;
    let transport = AmqpTransport::connect(options(&node, "long-hold"))
        .await
        .unwrap();
    let mut spec = durable("n.hold.events", "module.hold.#", 4);
    spec.retry_delays = vec![Duration::from_secs(10)];
    let mut subscription = transport.subscribe(spec).await.unwrap();
    transport
        .publish(
            common::event("module.hold.x", "{}"),
            PublishOptions::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let failed = common::next(&mut subscription).await;
    let copy = failed.message.clone();
    let sent = Instant::now();
    failed.retry(copy, 0).await.unwrap();
    // Held for 10 s against a 3 s timeout: taken back at about 3 s and 6 s, then sent.
    let back = tokio::time::timeout(Duration::from_secs(60), subscription.next())
        .await
        .expect("the retry back within a minute")
        .expect("the subscription is open");
    let after = sent.elapsed();
    assert_eq!(back.message.routing_key, "module.hold.x");
    back.ack().await.unwrap();
    common::measured(
        "a 10 s retry step against a 3 s consumer timeout came back after",
        after,
    );
    transport.close().await;
}
