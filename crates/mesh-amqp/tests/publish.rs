//! Publishing with confirms: pipelined publishes, unroutable mandatory publishes, the size
//! limit, and headers that survive the trip through the broker.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use mesh_amqp::AmqpTransport;
use mesh_core::{
    HeaderValue, Headers, PublishOptions, QueueSpec, SubscriptionSpec, Target, TopicPattern,
    TransportErrorKind,
};
use mesh_testkit::eventually;

fn durable(queue: &str, pattern: &str, prefetch: u16) -> SubscriptionSpec {
    SubscriptionSpec {
        queue: QueueSpec::Durable {
            name: queue.to_owned(),
        },
        patterns: vec![TopicPattern::parse(pattern).unwrap()],
        prefetch,
        retry_delays: vec![],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_pipelined_publishes_are_all_confirmed_and_consumed() {
    let vhost = common::vhost("pipelined").await;
    let transport = common::connect(&vhost, "pipelined").await;
    let queue = "n.pipe.events";
    let mut subscription = transport
        .subscribe(durable(queue, "module.pipe.#", 32))
        .await
        .unwrap();

    let started = Instant::now();
    let mut confirms = Vec::with_capacity(1000);
    for i in 0..1000 {
        let message = common::event("module.pipe.tick", &format!("{{\"i\":{i}}}"));
        confirms.push(
            transport
                .publish(message, PublishOptions::default())
                .await
                .unwrap(),
        );
    }
    for confirm in confirms {
        confirm.await.expect("confirmed");
    }
    eprintln!("1000 confirmed in {:?}", started.elapsed());

    // Consume them all; acks are coalesced, and the queue must end up empty.
    let mut seen = vec![false; 1000];
    for _ in 0..1000 {
        let delivery = common::next(&mut subscription).await;
        let body: serde_json::Value = serde_json::from_slice(&delivery.message.body).unwrap();
        let i = body["i"].as_u64().unwrap() as usize;
        assert!(!seen[i], "message {i} delivered twice");
        seen[i] = true;
        assert_eq!(delivery.delivery_count, Some(0));
        assert!(delivery.message.properties.persistent);
        delivery.ack().await.unwrap();
    }
    eventually(common::WAIT, "the queue to be empty", || async {
        let queues = vhost.list_queues().await.ok()?;
        let q = queues.into_iter().find(|q| q.name == queue)?;
        (q.messages == 0).then_some(())
    })
    .await;
    transport.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mandatory_publish_nobody_takes_is_unroutable() {
    let vhost = common::vhost("unroutable").await;
    let transport = common::connect(&vhost, "unroutable").await;
    let mandatory = PublishOptions {
        mandatory: true,
        ..PublishOptions::default()
    };
    let confirm = transport
        .publish(
            common::event("module.nobody.listens", "{}"),
            mandatory.clone(),
        )
        .await
        .unwrap();
    let error = confirm.await.unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::Unroutable, "{error}");

    // Also to a queue that does not exist, through the default exchange.
    let to_queue = PublishOptions {
        target: Target::Queue("no.such.queue".to_owned()),
        ..mandatory.clone()
    };
    let error = transport
        .publish(common::event("module.x.y", "{}"), to_queue)
        .await
        .unwrap()
        .await
        .unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::Unroutable);

    // Without mandatory, the broker just drops it and confirms.
    transport
        .publish(
            common::event("module.nobody.listens", "{}"),
            PublishOptions::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();

    // Returns are matched to the right publish amid routable ones.
    let _subscription = transport
        .subscribe(durable("n.some.events", "module.some.#", 8))
        .await
        .unwrap();
    let mut confirms = Vec::new();
    for i in 0..20 {
        let key = if i % 3 == 0 {
            "module.none.x"
        } else {
            "module.some.x"
        };
        let confirm = transport
            .publish(common::event(key, &i.to_string()), mandatory.clone())
            .await
            .unwrap();
        confirms.push((key, confirm));
    }
    for (key, confirm) in confirms {
        let outcome = confirm.await;
        if key == "module.none.x" {
            assert_eq!(outcome.unwrap_err().kind(), &TransportErrorKind::Unroutable);
        } else {
            outcome.unwrap();
        }
    }
    assert_eq!(transport.stats().unmatched_returns, 0);
    transport.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_size_limit_is_refused_without_publishing() {
    let vhost = common::vhost("too-large").await;
    let options = common::options(&vhost, "too-large").max_message_size(1024);
    let transport = AmqpTransport::connect(options).await.unwrap();
    let mut subscription = transport
        .subscribe(durable("n.big.events", "module.big.#", 8))
        .await
        .unwrap();
    let mut message = common::event("module.big.x", "");
    message.body = Bytes::from(vec![b'x'; 2048]);
    let error = transport
        .publish(message, PublishOptions::default())
        .await
        .unwrap_err();
    assert_eq!(
        error.kind(),
        &TransportErrorKind::TooLarge {
            size: 2048,
            max: Some(1024)
        }
    );
    // Nothing went out: the next message is the first one delivered.
    transport
        .publish(
            common::event("module.big.small", "{}"),
            PublishOptions::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    let delivery = common::next(&mut subscription).await;
    assert_eq!(delivery.message.routing_key, "module.big.small");
    delivery.ack().await.unwrap();
    transport.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn properties_and_every_header_type_survive_the_broker() {
    let vhost = common::vhost("headers").await;
    let transport = common::connect(&vhost, "headers").await;
    let mut subscription = transport
        .subscribe(durable("n.h.events", "module.h.#", 8))
        .await
        .unwrap();

    let mut nested = Headers::new();
    nested.insert("count".into(), HeaderValue::Int(2));
    nested.insert("reason".into(), HeaderValue::Str("expired".into()));
    let mut message = common::event("module.h.all", "{\"k\":1}");
    let headers = &mut message.properties.headers;
    headers.insert("str".into(), HeaderValue::Str("text ü".into()));
    headers.insert("bool".into(), HeaderValue::Bool(true));
    headers.insert("small".into(), HeaderValue::Int(-5));
    headers.insert("wide".into(), HeaderValue::Int(-5_000_000_000));
    headers.insert("unsigned".into(), HeaderValue::UInt(70_000));
    headers.insert("float".into(), HeaderValue::Float(0.25));
    headers.insert("bytes".into(), HeaderValue::Bytes(vec![0, 255, 10]));
    headers.insert("time".into(), HeaderValue::Timestamp(1_700_000_000));
    headers.insert("void".into(), HeaderValue::Void);
    headers.insert(
        "array".into(),
        HeaderValue::Array(vec![
            HeaderValue::Table(nested.clone()),
            HeaderValue::Int(1),
        ]),
    );
    headers.insert("table".into(), HeaderValue::Table(nested));
    message.properties.timestamp = Some(1_700_000_001);
    message.properties.correlation_id = Some("corr-1".into());
    message.properties.expiration = Some(Duration::from_secs(60));

    transport
        .publish(message.clone(), PublishOptions::default())
        .await
        .unwrap()
        .await
        .unwrap();
    let delivery = common::next(&mut subscription).await;
    // The publisher names itself: `user-id` is the connection's user, which the broker
    // checked.
    let mut message = message;
    message.properties.user_id = Some(common::options(&vhost, "headers").get_user().to_owned());
    assert_eq!(delivery.message, message);
    assert!(!delivery.redelivered);
    delivery.ack().await.unwrap();
    transport.close().await;
    vhost.delete().await.unwrap();
}
