//! Classic queues have no delivery limit (RabbitMQ 3.10), so nothing stops a message that
//! crashes its consumer every time: the transport says so once, with a warning, when it
//! first declares a classic consumer queue.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use mesh_amqp::{AmqpTransport, QueueType};
use mesh_core::{QueueSpec, SubscriptionSpec, TopicPattern};

/// What the transport logged, as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn durable(name: &str) -> SubscriptionSpec {
    SubscriptionSpec {
        queue: QueueSpec::Durable {
            name: name.to_owned(),
        },
        patterns: vec![TopicPattern::parse("module.poison.#").unwrap()],
        prefetch: 4,
        retry_delays: vec![],
    }
}

/// Declares two consumer queues of `queue_type` and returns what was logged meanwhile (the
/// test runtime has one thread, so the thread's subscriber sees every declare).
async fn declare_two(queue_type: QueueType) -> String {
    let vhost = common::vhost("classic-poison").await;
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::WARN)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let options = common::options(&vhost, "classic-poison").queue_type(queue_type);
    let transport = AmqpTransport::connect(options).await.unwrap();
    let first = transport
        .subscribe(durable("n.first.events"))
        .await
        .unwrap();
    let second = transport
        .subscribe(durable("n.second.events"))
        .await
        .unwrap();
    drop((first, second));
    transport.close().await;
    vhost.delete().await.unwrap();
    captured.text()
}

const WARNING: &str = "classic queues have no delivery limit";

#[tokio::test]
async fn declaring_classic_consumer_queues_warns_once_of_the_missing_poison_backstop() {
    let logged = declare_two(QueueType::Classic).await;
    assert_eq!(logged.matches(WARNING).count(), 1, "{logged}");
    assert!(logged.contains("WARN"), "{logged}");
    assert!(logged.contains("redelivered forever"), "{logged}");
    assert!(logged.contains("n.first.events"), "{logged}");
}

#[tokio::test]
async fn quorum_consumer_queues_do_not_warn() {
    let logged = declare_two(QueueType::Quorum).await;
    assert!(!logged.contains(WARNING), "{logged}");
}
