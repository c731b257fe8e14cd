//! Acceptance: when the broker closes the shipper's connection, shipping resumes on the
//! connection mesh-amqp's link owner opens next, with no help from the program.

use std::time::Duration;

use mesh_logs::{LogsOptions, Tail};
use mesh_testkit::{eventually, TestVhost};
use tokio::time::Instant;
use tracing_subscriber::layer::SubscriberExt;

const WAIT: Duration = Duration::from_secs(30);

/// The next record whose message is `message`, skipping others; panics after `WAIT`.
async fn expect(tail: &mut Tail, message: &str) {
    tokio::time::timeout(WAIT, async {
        loop {
            let record = tail.next().await.expect("the tail is open");
            if record.message == message {
                return;
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("`{message}` in time"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shipping_resumes_after_the_broker_closes_the_connection() {
    let vhost = TestVhost::create("logs-mend").await.expect("a test vhost");
    let mut tail = mesh_logs::tail(&vhost.url(), "obs.mend.*")
        .await
        .expect("a tail");
    let logs = mesh_logs::start(LogsOptions::new(&vhost.url(), "obs", "mend").expect("options"))
        .expect("shipper started");
    let dispatch = tracing::Dispatch::new(tracing_subscriber::registry().with(logs.layer()));
    let log = |message: &str| {
        tracing::dispatcher::with_default(&dispatch, || tracing::info!("{message}"));
    };

    log("before");
    expect(&mut tail, "before").await;
    // The shipper's connection, named after its node and source.
    let shipper = |connections: Vec<mesh_testkit::ConnectionInfo>| {
        connections
            .into_iter()
            .filter(|c| c.connection_name.as_deref() == Some("obs.mend.logs.consume"))
            .count()
    };
    assert_eq!(
        shipper(vhost.list_connections().await.expect("connections")),
        1
    );
    let closed = vhost
        .close_connections(Some("obs.mend.logs"), "logs reconnect test")
        .await
        .expect("connection closed");
    assert_eq!(closed, 1);

    // Records logged while the connection is down are dropped, lost or shipped later; the
    // test logs until one arrives after the reconnect. Each round waits a moment for it.
    let deadline = Instant::now() + WAIT;
    let mut rounds = 0_u64;
    loop {
        assert!(Instant::now() < deadline, "nothing shipped after the close");
        rounds += 1;
        log("after");
        match tokio::time::timeout(Duration::from_millis(250), tail.next()).await {
            Ok(Some(record)) if record.message == "after" => break,
            Ok(Some(_)) | Err(_) => {}
            Ok(None) => panic!("the tail ended: its connection was not the one closed"),
        }
    }
    eventually(WAIT, "a new shipper connection", || async {
        let connections = vhost.list_connections().await.ok()?;
        (shipper(connections) == 1).then_some(())
    })
    .await;

    let stats = logs.shutdown(WAIT).await;
    assert_eq!(
        stats.published + stats.lost + stats.dropped,
        1 + rounds,
        "every record is accounted for: {stats:?}"
    );
    assert!(stats.published >= 2, "{stats:?}");
    drop(tail);
    vhost.delete().await.expect("vhost deleted");
}
