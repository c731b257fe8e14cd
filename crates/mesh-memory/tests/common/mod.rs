//! Helpers shared by the memory transport's tests.
//!
//! Every test runs on a paused tokio clock: the broker's dispatch is synchronous, so what a
//! publish delivers is in the subscription's channel when `publish` returns, and "nothing
//! more arrives" is a `next()` that stays pending until the auto-advanced clock times it
//! out — never a real sleep.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use mesh_core::transport::{
    DeadQueue, Delivery, PublishOptions, QueueSpec, Subscription, SubscriptionSpec, Target,
    Transport,
};
use mesh_core::{TopicPattern, WireMessage};

/// How long a test waits for a delivery that must come.
pub const PATIENCE: Duration = Duration::from_secs(60);

pub fn message(key: &str, body: &str) -> WireMessage {
    WireMessage::new(key, format!("\"{body}\"").into_bytes())
}

pub fn body(delivery: &Delivery) -> String {
    String::from_utf8_lossy(&delivery.message.body)
        .trim_matches('"')
        .to_owned()
}

pub fn patterns(patterns: &[&str]) -> Vec<TopicPattern> {
    patterns
        .iter()
        .map(|p| TopicPattern::parse(p).expect("a valid pattern"))
        .collect()
}

pub fn durable(name: &str, bound: &[&str], prefetch: u16) -> SubscriptionSpec {
    SubscriptionSpec {
        queue: QueueSpec::Durable { name: name.into() },
        patterns: patterns(bound),
        prefetch,
        retry_delays: vec![Duration::from_secs(5)],
    }
}

pub fn ephemeral(bound: &[&str]) -> SubscriptionSpec {
    SubscriptionSpec {
        queue: QueueSpec::Ephemeral,
        patterns: patterns(bound),
        prefetch: 16,
        retry_delays: Vec::new(),
    }
}

/// The durable queue of dead letters [`dead_letters`] reads.
pub const DEAD: &str = "watch.audit-logger.dead";

/// A reader's own durable queue of dead letters, [`DEAD`].
pub fn dead_letters() -> SubscriptionSpec {
    SubscriptionSpec {
        queue: QueueSpec::DeadLetters(DeadQueue::Durable {
            name: DEAD.to_owned(),
        }),
        patterns: Vec::new(),
        prefetch: 16,
        retry_delays: Vec::new(),
    }
}

/// A tap of dead letters.
pub fn dead_tap() -> SubscriptionSpec {
    SubscriptionSpec {
        queue: QueueSpec::DeadLetters(DeadQueue::Tap),
        patterns: Vec::new(),
        prefetch: 16,
        retry_delays: Vec::new(),
    }
}

/// Publishes an event on `mesh.events` and checks the broker confirmed it.
pub async fn emit(transport: &impl Transport, key: &str, body: &str) {
    transport
        .publish(message(key, body), PublishOptions::default())
        .await
        .expect("publish")
        .await
        .expect("confirm");
}

/// Publishes straight into a queue.
pub async fn put(transport: &impl Transport, queue: &str, message: WireMessage) {
    let options = PublishOptions {
        target: Target::Queue(queue.into()),
        ..PublishOptions::default()
    };
    transport
        .publish(message, options)
        .await
        .expect("publish")
        .await
        .expect("confirm");
}

/// The next delivery, which must come.
pub async fn next(subscription: &mut Subscription) -> Delivery {
    tokio::time::timeout(PATIENCE, subscription.next())
        .await
        .expect("a delivery within the patience")
        .expect("the subscription is live")
}

/// The next delivery, acked; returns its body.
pub async fn take(subscription: &mut Subscription) -> String {
    let delivery = next(subscription).await;
    let text = body(&delivery);
    delivery.ack().await.expect("ack");
    text
}

/// Asserts nothing is delivered within `within` (on the paused clock: as soon as every
/// task is idle, the clock jumps).
pub async fn nothing_within(subscription: &mut Subscription, within: Duration) {
    if let Ok(delivery) = tokio::time::timeout(within, subscription.next()).await {
        panic!("expected no delivery, got {delivery:?}");
    }
}

/// Asserts nothing is delivered for an hour of the paused clock.
pub async fn nothing_more(subscription: &mut Subscription) {
    nothing_within(subscription, Duration::from_secs(3600)).await;
}
