//! Differential test: RabbitMQ's topic exchange and `mesh_core::topic_matches` agree on
//! every pattern/key pair, edge cases included.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use amqprs::channel::{BasicGetArguments, QueueBindArguments, QueueDeclareArguments};
use mesh_core::naming::EVENTS_EXCHANGE;
use mesh_core::{topic_matches, PublishOptions};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Patterns the broker is known to treat specially.
const EDGE_PATTERNS: &[&str] = &[
    "#", "#.#", "*", "*.*", "a.#", "#.a", "a.#.b", "a.*.b", "a..b", "a.#.#.b", "#.*", "*.#",
    "#.*.#", "a.*.#", "", "a", "a.b", "*.b.*",
];

/// Keys chosen to hit the edges: empty, empty words, repeated words.
const EDGE_KEYS: &[&str] = &[
    "", "a", ".", "a.", ".a", "a..b", "a.b", "a.b.b", "a.x.b", "a.x.y.b", "b.a", "a.a.a", "x.a",
    "a.b.c", "..",
];

fn random_text(rng: &mut StdRng, words: &[&str]) -> String {
    let n = rng.gen_range(1..=4);
    (0..n)
        .map(|_| words[rng.gen_range(0..words.len())])
        .collect::<Vec<_>>()
        .join(".")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broker_and_matcher_agree_on_every_pair() {
    let vhost = common::vhost("topics").await;
    let transport = common::connect(&vhost, "topics").await;
    let (connection, channel) = common::raw(&vhost).await;

    let mut rng = StdRng::seed_from_u64(42);
    let mut patterns: BTreeSet<String> = EDGE_PATTERNS.iter().map(|p| p.to_string()).collect();
    while patterns.len() < 30 {
        patterns.insert(random_text(&mut rng, &["a", "b", "*", "#"]));
    }
    let mut keys: Vec<String> = EDGE_KEYS.iter().map(|k| k.to_string()).collect();
    while keys.len() < 25 {
        let key = random_text(&mut rng, &["a", "b", "c"]);
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let pairs = patterns.len() * keys.len();
    assert!(pairs >= 200, "only {pairs} pairs");

    // One queue per pattern, bound to mesh.events (declared by the transport).
    let mut queues = BTreeMap::new();
    for (i, pattern) in patterns.iter().enumerate() {
        let queue = format!("pattern-{i}");
        channel
            .queue_declare(QueueDeclareArguments::new(&queue))
            .await
            .expect("declare");
        channel
            .queue_bind(QueueBindArguments::new(&queue, EVENTS_EXCHANGE, pattern))
            .await
            .expect("bind");
        queues.insert(queue, pattern.clone());
    }

    // Every key once, through the transport, all confirmed: a confirm comes after routing.
    let mut confirms = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let message = mesh_core::WireMessage::new(key.clone(), i.to_string());
        confirms.push(
            transport
                .publish(message, PublishOptions::default())
                .await
                .expect("publish"),
        );
    }
    for confirm in confirms {
        confirm.await.expect("confirmed");
    }

    let mut disagreements = Vec::new();
    let mut routed = 0;
    for (queue, pattern) in &queues {
        let mut got = BTreeSet::new();
        while let Some((_, _, body)) = channel
            .basic_get(BasicGetArguments {
                queue: queue.clone(),
                no_ack: true,
            })
            .await
            .expect("get")
        {
            let index: usize = String::from_utf8(body).unwrap().parse().unwrap();
            got.insert(index);
        }
        for (i, key) in keys.iter().enumerate() {
            let broker = got.contains(&i);
            routed += usize::from(broker);
            let ours = topic_matches(pattern, key);
            if broker != ours {
                disagreements.push(format!(
                    "pattern {pattern:?} key {key:?}: broker {broker}, topic_matches {ours}"
                ));
            }
        }
    }
    // Neither side may be trivially empty or full.
    assert!(
        routed > 50 && routed < pairs - 50,
        "{routed} of {pairs} pairs routed"
    );
    assert!(
        disagreements.is_empty(),
        "{} of {pairs} pairs disagree:\n{}",
        disagreements.len(),
        disagreements.join("\n")
    );

    let _ = channel.close().await;
    let _ = connection.close().await;
    transport.close().await;
    vhost.delete().await.expect("delete vhost");
}
