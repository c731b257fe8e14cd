//! Many publishers, competing consumers on several connections, releases and drops, on a
//! multi-threaded runtime: every message is acked exactly once and nothing is lost.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use mesh_core::transport::Transport;
use mesh_memory::MemoryBroker;
use tokio::sync::mpsc;

const MESSAGES: usize = 2000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_message_is_acked_once_under_contention() {
    let broker = MemoryBroker::new();
    let (acked_tx, mut acked_rx) = mpsc::unbounded_channel();
    let mut consumers = Vec::new();
    for n in 0..4 {
        let transport = broker.transport();
        let mut sub = transport
            .subscribe(durable("shared.work.events", &["module.work.#"], 3))
            .await
            .unwrap();
        let acked = acked_tx.clone();
        consumers.push(tokio::spawn(async move {
            while let Some(delivery) = sub.next().await {
                let text = body(&delivery);
                let value: usize = text.parse().unwrap();
                // Some first deliveries are given back, some dropped undecided: both come
                // back redelivered and are acked then.
                match (delivery.delivery_count, value % 7, n) {
                    (Some(0), 0, _) => delivery.release(),
                    (Some(0), 1, 0) => drop(delivery),
                    _ => {
                        delivery.ack().await.unwrap();
                        if acked.send(text).is_err() {
                            return;
                        }
                    }
                }
            }
        }));
    }
    drop(acked_tx);

    let mut publishers = Vec::new();
    for half in 0..2 {
        let transport = broker.transport();
        publishers.push(tokio::spawn(async move {
            for value in (half..MESSAGES).step_by(2) {
                emit(&transport, "module.work.item", &value.to_string()).await;
            }
        }));
    }
    for publisher in publishers {
        publisher.await.unwrap();
    }

    let mut seen = BTreeSet::new();
    let collect = async {
        while seen.len() < MESSAGES {
            let text = acked_rx.recv().await.expect("consumers are alive");
            assert!(seen.insert(text.clone()), "{text} was acked twice");
        }
    };
    tokio::time::timeout(Duration::from_secs(60), collect)
        .await
        .expect("every message acked within a minute");
    assert_eq!(broker.unacked("shared.work.events"), Some(0));
    assert_eq!(broker.queue_depth("shared.work.events"), Some(0));
    for consumer in consumers {
        consumer.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_slow_ephemeral_subscriber_gets_everything_in_order() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut spec = ephemeral(&["#"]);
    spec.prefetch = 1;
    let mut tail = transport.subscribe(spec).await.unwrap();
    let publisher = {
        let transport = transport.clone();
        tokio::spawn(async move {
            for value in 0..MESSAGES {
                emit(&transport, "module.a.e", &value.to_string()).await;
            }
        })
    };
    let receive = async {
        for value in 0..MESSAGES {
            let delivery = tail.next().await.expect("live");
            assert_eq!(body(&delivery), value.to_string());
        }
    };
    tokio::time::timeout(Duration::from_secs(60), receive)
        .await
        .expect("everything within a minute");
    publisher.await.unwrap();
}
