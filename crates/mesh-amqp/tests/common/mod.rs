//! Helpers shared by the integration tests: a vhost of the test's own on the shared broker,
//! a transport connected to it, a raw client for what mesh itself would never do, and waits
//! bounded by timeouts.

#![allow(dead_code)]

pub(crate) mod traffic;

use std::time::Duration;

use amqprs::channel::Channel;
use amqprs::connection::{Connection, OpenConnectionArguments};
use mesh_amqp::{AmqpOptions, AmqpTransport, Lifecycle};
use mesh_core::{Delivery, HeaderValue, Subscription, WireMessage};
use mesh_testkit::TestVhost;

/// How long any single wait of a test may take.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// A vhost of the test's own (deleted on drop); fails with a hint when no broker is
/// reachable.
pub(crate) async fn vhost(prefix: &str) -> TestVhost {
    TestVhost::create(prefix)
        .await
        .expect("a RabbitMQ broker on 127.0.0.1:5672 (start one with `rabbitmq-server -detached`)")
}

/// The options for `vhost`, with connections named `<name>.publish` / `<name>.consume`.
pub(crate) fn options(vhost: &TestVhost, name: &str) -> AmqpOptions {
    vhost
        .url()
        .parse::<AmqpOptions>()
        .expect("the test vhost's URL parses")
        .connection_name(name)
}

/// A transport on `vhost`.
pub(crate) async fn connect(vhost: &TestVhost, name: &str) -> AmqpTransport {
    AmqpTransport::connect(options(vhost, name))
        .await
        .expect("connecting to the test vhost")
}

/// A raw client connection and channel on `vhost`, for what mesh would not do itself.
pub(crate) async fn raw(vhost: &TestVhost) -> (Connection, Channel) {
    let args = OpenConnectionArguments::new("127.0.0.1", 5672, "guest", "guest")
        .virtual_host(vhost.name())
        .connection_name("raw-test-client")
        .finish();
    let connection = Connection::open(&args).await.expect("raw connection");
    let channel = connection.open_channel(None).await.expect("raw channel");
    (connection, channel)
}

/// An event-shaped message.
pub(crate) fn event(key: &str, body: &str) -> WireMessage {
    let mut message = WireMessage::new(key, body.to_owned());
    message.properties.content_type = Some("application/json".to_owned());
    message.properties.persistent = true;
    message.properties.message_id = Some(uuid::Uuid::new_v4().to_string());
    message.properties.headers.insert(
        "x-event-id".to_owned(),
        HeaderValue::Str(uuid::Uuid::new_v4().to_string()),
    );
    message
}

/// Publishes `message` with default options and waits for its confirm; panics on a
/// refusal or a nack.
pub(crate) async fn publish_confirmed(transport: &AmqpTransport, message: WireMessage) {
    transport
        .publish(message, mesh_core::PublishOptions::default())
        .await
        .expect("the transport takes the publish")
        .await
        .expect("the broker confirms the publish");
}

/// The next delivery, within [`WAIT`].
pub(crate) async fn next(subscription: &mut Subscription) -> Delivery {
    tokio::time::timeout(WAIT, subscription.next())
        .await
        .expect("a delivery in time")
        .expect("the subscription is open")
}

/// Every [`Lifecycle`] event of a transport from now on, with when it came.
#[derive(Debug, Clone)]
pub(crate) struct Recorder {
    events: std::sync::Arc<std::sync::Mutex<Vec<(std::time::Instant, Lifecycle)>>>,
}

impl Recorder {
    pub(crate) fn start(transport: &AmqpTransport) -> Recorder {
        let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut receiver = transport.lifecycle();
        let sink = events.clone();
        tokio::spawn(async move {
            loop {
                match receiver.recv().await {
                    Ok(event) => sink
                        .lock()
                        .unwrap()
                        .push((std::time::Instant::now(), event)),
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        panic!("the lifecycle recorder lagged by {n} events")
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                }
            }
        });
        Recorder { events }
    }

    /// The events so far.
    pub(crate) fn events(&self) -> Vec<(std::time::Instant, Lifecycle)> {
        self.events.lock().unwrap().clone()
    }

    /// When the first event after `since` matching `pred` came, if one did.
    pub(crate) fn first_after(
        &self,
        since: std::time::Instant,
        pred: impl Fn(&Lifecycle) -> bool,
    ) -> Option<std::time::Instant> {
        self.events()
            .into_iter()
            .find(|(at, event)| *at >= since && pred(event))
            .map(|(at, _)| at)
    }

    /// How many events matching `pred` came.
    pub(crate) fn count(&self, pred: impl Fn(&Lifecycle) -> bool) -> usize {
        self.events().iter().filter(|(_, e)| pred(e)).count()
    }
}

/// The consumers of `vhost` on `node` (`None`: the shared broker), as
/// `(queue, prefetch_count)`.
pub(crate) async fn consumers(node: Option<&str>, vhost: &str) -> Vec<(String, u64)> {
    let out = mesh_testkit::rabbitmqctl(
        node,
        &[
            "list_consumers",
            "-p",
            vhost,
            "queue_name",
            "prefetch_count",
            "--formatter",
            "json",
            "--silent",
        ],
    )
    .await
    .expect("list_consumers");
    let start = out.find('[').expect("a JSON array");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&out[start..]).expect("JSON rows");
    rows.iter()
        .map(|r| {
            (
                r["queue_name"].as_str().unwrap_or_default().to_owned(),
                r["prefetch_count"].as_u64().unwrap_or_default(),
            )
        })
        .collect()
}

/// Prints a measured figure so it shows in `cargo test -- --nocapture` output and in a
/// failing test's captured output alike.
pub(crate) fn measured(what: &str, value: impl std::fmt::Debug) {
    eprintln!("MEASURED {what}: {value:?}");
}

/// `transport` holds no unconfirmed publish, nor its bytes: every room in the window came
/// back.
pub(crate) fn assert_window_empty(transport: &AmqpTransport) {
    let stats = transport.stats();
    assert_eq!(
        (stats.unconfirmed, stats.unconfirmed_bytes),
        (0, 0),
        "{stats:?}"
    );
}
