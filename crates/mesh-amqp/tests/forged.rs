//! mesh's own headers are believed only where mesh can have set them: a publisher to
//! `mesh.events` that writes `x-mesh-routing-key`, `x-mesh-attempts` or `x-mesh-dead-*`
//! changes neither the key a consumer sees, nor its retries, nor its dead letter; the same
//! headers on a retry copy that came back from the queue's own delay step are mesh's.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use mesh::{Bus, HandlerError, Incoming};
use mesh_core::codec::{self, DeadReason};
use mesh_core::{
    HeaderValue, PublishOptions, QueueSpec, RetryPolicy, SubscriptionSpec, TopicPattern, Transport,
    WireMessage,
};

const REAL_KEY: &str = "module.umami.site.created";
const FORGED_KEY: &str = "module.billing.invoice.paid";

/// An event of `umami` whose publisher wrote mesh's headers itself.
fn forged_event() -> WireMessage {
    let mut message = common::event(REAL_KEY, "{}");
    let headers = &mut message.properties.headers;
    headers.insert(
        codec::EVENT_ID.to_owned(),
        mesh_core::EventId::new().to_string().into(),
    );
    headers.insert(codec::SOURCE.to_owned(), "umami".into());
    headers.insert(codec::NODE.to_owned(), "n1".into());
    headers.insert(codec::TIME.to_owned(), "2026-12-01T12:00:00Z".into());
    headers.insert(codec::ROUTING_KEY.to_owned(), FORGED_KEY.into());
    headers.insert(codec::ATTEMPTS.to_owned(), HeaderValue::UInt(99));
    headers.insert(codec::DEAD_QUEUE.to_owned(), "serve.x".into());
    headers.insert(codec::DEAD_REASON.to_owned(), "permanent".into());
    // A look-alike in other letters is not believed either.
    headers.insert("X-Mesh-Attempts".to_owned(), HeaderValue::UInt(99));
    message
}

/// Publishes as any client could: the transport's raw publish checks no header.
async fn publish(transport: &dyn Transport, message: WireMessage) {
    transport
        .publish(message, PublishOptions::default())
        .await
        .unwrap()
        .await
        .unwrap();
}

fn mesh_headers(message: &WireMessage) -> Vec<String> {
    message
        .properties
        .headers
        .keys()
        .filter(|name| codec::is_mesh_header(name))
        .cloned()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_mesh_headers_are_dropped_and_a_retry_copy_keeps_its_own() {
    let vhost = common::vhost("forged-transport").await;
    let transport = common::connect(&vhost, "forged").await;
    let mut subscription = transport
        .subscribe(SubscriptionSpec {
            queue: QueueSpec::Durable {
                name: "n1.umami.events".to_owned(),
            },
            patterns: vec![TopicPattern::parse("module.umami.#").unwrap()],
            prefetch: 8,
            retry_delays: vec![Duration::from_secs(1)],
        })
        .await
        .unwrap();
    publish(&transport, forged_event()).await;

    let delivery = common::next(&mut subscription).await;
    assert_eq!(delivery.message.routing_key, REAL_KEY);
    assert!(
        mesh_headers(&delivery.message).is_empty(),
        "forged headers reached the consumer: {:?}",
        mesh_headers(&delivery.message)
    );
    assert_eq!(codec::attempts(&delivery.message), 0);

    // mesh's own retry copy travels under the retry queue's name and comes back through
    // `mesh.retry`: its key and counter are mesh's, and believed.
    let mut copy = delivery.message.clone();
    codec::set_attempts(&mut copy, 1);
    delivery.retry(copy, 0).await.unwrap();
    let back = common::next(&mut subscription).await;
    assert_eq!(back.message.routing_key, REAL_KEY);
    assert_eq!(codec::attempts(&back.message), 1);
    back.ack().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_counter_skips_no_retry_and_a_forged_key_changes_no_handler() {
    let vhost = common::vhost("forged-sdk").await;
    let transport = common::connect(&vhost, "forged-sdk").await;
    let calls = Arc::new(Mutex::new(Vec::<(String, u32)>::new()));
    let bus = {
        let calls = calls.clone();
        Bus::builder()
            .node("n1")
            .module("umami")
            // Its handler takes its own prefix: the contract announcement would be one more
            // event there, which this test does not expect.
            .announce(false)
            .retry(RetryPolicy::new(3, vec![Duration::from_secs(1)]).unwrap())
            .on_raw(["module.umami.#"], move |incoming: Incoming<Bytes>| {
                let calls = calls.clone();
                async move {
                    calls
                        .lock()
                        .unwrap()
                        .push((incoming.meta.key().to_string(), incoming.meta.attempt()));
                    Err(HandlerError::retry(std::io::Error::other("always fails")))
                }
            })
            .start(Arc::new(transport.clone()))
            .await
            .unwrap()
    };
    let mut dead = bus.all_dead_letters().await.unwrap();
    publish(&transport, forged_event()).await;

    let letter = tokio::time::timeout(common::WAIT, dead.next())
        .await
        .expect("a dead letter in time")
        .expect("the dead letters stream is open");
    let annotations = letter.note.clone().expect("mesh's annotations");
    assert_eq!(letter.message.routing_key, REAL_KEY);
    assert_eq!(annotations.reason, DeadReason::MaxAttempts);
    assert_eq!(annotations.attempts, 3);
    assert_eq!(annotations.queue, "n1.umami.events");
    assert!(!letter
        .message
        .properties
        .headers
        .contains_key("X-Mesh-Attempts"));
    letter.ack().await.unwrap();
    assert_eq!(
        *calls.lock().unwrap(),
        [
            (REAL_KEY.to_owned(), 1),
            (REAL_KEY.to_owned(), 2),
            (REAL_KEY.to_owned(), 3)
        ]
    );
    bus.close().await;
}
