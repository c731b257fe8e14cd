//! Acceptance: every record logged ends in exactly one counter — published, dropped or lost —
//! even when `shutdown` times out with records unpublished: on a connection the broker
//! stopped reading (a blackholed relay), while the broker refuses the connection, and while
//! the connection's handshake hangs.

use std::time::Duration;

use mesh_logs::{Logs, LogsOptions, LogsStats};
use mesh_testkit::relay::Relay;
use mesh_testkit::{eventually, TestVhost};
use tracing::Dispatch;
use tracing_subscriber::layer::SubscriberExt;

const WAIT: Duration = Duration::from_secs(30);
/// Short, so that it passes while the shipper still holds records.
const SHUTDOWN: Duration = Duration::from_millis(300);

fn dispatch(logs: &Logs) -> Dispatch {
    Dispatch::new(tracing_subscriber::registry().with(logs.layer()))
}

fn log(dispatch: &Dispatch, message: &str, padding: &str) {
    tracing::dispatcher::with_default(dispatch, || tracing::info!(padding, "{message}"));
}

/// The numbers add up: every record logged is published, dropped or lost, none is left in
/// the buffer.
fn assert_accounted(stats: &LogsStats, logged: u64) {
    assert_eq!(stats.logged, logged, "{stats:?}");
    assert_eq!(
        stats.published + stats.dropped + stats.lost,
        logged,
        "published + dropped + lost = logged: {stats:?}"
    );
    assert_eq!(stats.buffered, 0, "{stats:?}");
}

/// A record logged after the shutdown is dropped, and the numbers still add up.
fn assert_later_records_dropped(logs: &Logs, dispatch: &Dispatch, before: &LogsStats) {
    log(dispatch, "after the shutdown", "");
    let after = logs.stats();
    assert_eq!(after.dropped, before.dropped + 1, "{after:?}");
    assert_accounted(&after, before.logged + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_timing_out_on_a_connection_the_broker_stopped_reading_counts_every_record() {
    // More bytes than the client library's outgoing queue (8,192 frames, three a record)
    // and the sockets can hold, so the shipper is stuck writing when the shutdown comes.
    const RECORDS: u64 = 20_000;
    let vhost = TestVhost::create("logs-stuck")
        .await
        .expect("a test vhost on the shared RabbitMQ (see mesh-testkit)");
    let relay = Relay::start(vhost.broker_addr()).await.expect("a relay");
    let url = vhost.url_via(relay.addr());
    let logs = mesh_logs::start(
        LogsOptions::new(&url, "obs", "stuck")
            .expect("options")
            .capacity(RECORDS as usize),
    )
    .expect("shipper started");
    let dispatch = dispatch(&logs);

    log(&dispatch, "ready", "");
    eventually(WAIT, "the first record published", || {
        std::future::ready((logs.stats().published == 1).then_some(()))
    })
    .await;
    relay.blackhole();
    let padding = "x".repeat(1024);
    for i in 0..RECORDS {
        log(&dispatch, &format!("record {i}"), &padding);
    }

    let stats = logs.shutdown(SHUTDOWN).await;
    assert_accounted(&stats, RECORDS + 1);
    assert!(
        stats.lost > 0,
        "the shutdown timed out with records unpublished: {stats:?}"
    );
    assert_later_records_dropped(&logs, &dispatch, &stats);
    // A second shutdown finds nothing more to do and says the same.
    assert_eq!(logs.shutdown(SHUTDOWN).await.lost, stats.lost);

    drop(relay);
    vhost.delete().await.expect("vhost deleted");
}

/// Logs `records` into a shipper of `capacity` that cannot connect, shuts it down, and
/// checks the numbers: what did not fit was dropped, what was buffered is lost.
async fn refused_or_hanging(url: &str, records: u64, capacity: usize) {
    let logs = mesh_logs::start(
        LogsOptions::new(url, "obs", "unreachable")
            .expect("options")
            .capacity(capacity),
    )
    .expect("shipper started");
    let dispatch = dispatch(&logs);
    for i in 0..records {
        log(&dispatch, &format!("record {i}"), "");
    }
    let stats = logs.shutdown(SHUTDOWN).await;
    let capacity = capacity as u64;
    assert_accounted(&stats, records);
    assert_eq!(stats.published, 0, "{stats:?}");
    assert_eq!(stats.dropped, records - capacity, "{stats:?}");
    assert_eq!(stats.lost, capacity, "{stats:?}");
    assert_later_records_dropped(&logs, &dispatch, &stats);
}

#[tokio::test]
async fn a_shutdown_timing_out_while_the_broker_refuses_the_connection_counts_every_record() {
    // A port nothing listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    refused_or_hanging(&format!("amqp://guest:guest@127.0.0.1:{port}/%2F"), 100, 60).await;
}

#[tokio::test]
async fn a_shutdown_timing_out_while_the_connection_handshake_hangs_counts_every_record() {
    // The relay accepts the connection and never answers: the handshake waits.
    let vhost = TestVhost::create("logs-hang")
        .await
        .expect("a test vhost on the shared RabbitMQ (see mesh-testkit)");
    let relay = Relay::start(vhost.broker_addr()).await.expect("a relay");
    relay.blackhole();
    refused_or_hanging(&vhost.url_via(relay.addr()), 100, 60).await;
    drop(relay);
    vhost.delete().await.expect("vhost deleted");
}
