//! Acceptance: with a tail running, it sees the shipped records, by pattern, in order; and
//! its queue leaves nothing behind.

use std::time::Duration;

use mesh_logs::{LogRecord, LogsErrorKind, LogsOptions, Tail};
use mesh_testkit::{eventually, TestVhost};
use tracing_subscriber::layer::SubscriberExt;

const WAIT: Duration = Duration::from_secs(30);

async fn next(tail: &mut Tail) -> LogRecord {
    tokio::time::timeout(WAIT, tail.next())
        .await
        .expect("a record in time")
        .expect("the tail is open")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tail_sees_the_records_its_pattern_matches() {
    let vhost = TestVhost::create("logs").await.expect("a test vhost");
    let mut billing = mesh_logs::tail(&vhost.url(), "obs.billing.*")
        .await
        .expect("tail of billing");
    let mut errors = mesh_logs::tail(&vhost.url(), "#.error")
        .await
        .expect("tail of errors");

    let queues = vhost.list_queues().await.expect("queues listed");
    assert_eq!(queues.len(), 2);
    for queue in &queues {
        assert!(
            queue.exclusive && queue.auto_delete && !queue.durable,
            "{queue:?}"
        );
        assert_eq!(queue.arguments["x-max-length"], 10_000, "{queue:?}");
    }

    let logs = mesh_logs::start(LogsOptions::new(&vhost.url(), "obs", "billing").expect("options"))
        .expect("shipper started");
    let subscriber = tracing_subscriber::registry().with(logs.layer());
    tracing::subscriber::with_default(subscriber, || {
        let span = tracing::info_span!("quote", plan = "gold");
        let _entered = span.enter();
        for i in 0..50_u64 {
            tracing::info!(i, "record {i}");
        }
        tracing::debug!("below the level: not shipped");
        // Never shipped, whatever their level: the client library's chatter and the
        // shipper's own.
        tracing::error!(target: mesh_amqp::CLIENT_LOG_TARGET, "a frame went out");
        tracing::error!(target: "mesh_logs::shipper", "the shipper speaks");
        tracing::error!(code = 7, "it broke");
        tracing::info!("done");
    });

    for i in 0..50_u64 {
        let record = next(&mut billing).await;
        assert_eq!(record.message, format!("record {i}"));
        assert_eq!(record.level, "info");
        assert_eq!(
            (record.node.as_str(), record.source.as_str()),
            ("obs", "billing")
        );
        assert_eq!(record.fields["i"], i);
        assert_eq!(record.spans.len(), 1);
        assert_eq!(record.spans[0].name, "quote");
        assert_eq!(record.spans[0].fields["plan"], "gold");
        assert_eq!(record.target, "tail");
    }
    let error = next(&mut billing).await;
    assert_eq!(
        (error.level.as_str(), error.message.as_str()),
        ("error", "it broke")
    );
    assert_eq!(error.fields["code"], 7);
    // The debug record and the silent targets' errors, logged between, were never shipped:
    // `done` comes next.
    assert_eq!(next(&mut billing).await.message, "done");

    let only_error = next(&mut errors).await;
    assert_eq!(only_error, error);

    let stats = logs.shutdown(Duration::from_secs(10)).await;
    assert_eq!((stats.published, stats.dropped), (52, 0));
    assert_eq!(billing.dropped(), 0);
    // Nothing else reached the errors tail.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), errors.next())
            .await
            .is_err(),
        "the errors tail saw only the error"
    );

    // One closed (it returns once its channel and connection are closed), one dropped
    // (closed in the background): neither leaves a queue.
    tokio::time::timeout(WAIT, billing.close())
        .await
        .expect("the tail closes");
    drop(errors);
    eventually(WAIT, "the tails' queues are gone", || async {
        vhost
            .list_queues()
            .await
            .expect("queues listed")
            .is_empty()
            .then_some(())
    })
    .await;
    vhost.delete().await.expect("vhost deleted");
}

#[tokio::test]
async fn bad_options_are_refused_before_connecting() {
    let url = "amqp://guest:guest@127.0.0.1:1/%2F";
    let refused = |result: Result<LogsOptions, mesh_logs::LogsError>| {
        result.expect_err("refused").kind().clone()
    };
    assert_eq!(
        refused(LogsOptions::new(url, "an.node", "billing")),
        LogsErrorKind::InvalidOptions
    );
    assert_eq!(
        refused(LogsOptions::new(url, "obs", "")),
        LogsErrorKind::InvalidOptions
    );
    assert_eq!(
        refused(LogsOptions::new("http://nope", "obs", "billing")),
        LogsErrorKind::InvalidOptions
    );
    let tail = mesh_logs::tail(url, "site*").await;
    assert_eq!(
        tail.expect_err("a pattern with a glued wildcard is refused")
            .kind(),
        &LogsErrorKind::InvalidOptions
    );
    let tail = mesh_logs::tail(url, "#").await;
    assert!(tail.expect_err("nothing listens on port 1").is_retryable());
}

/// A short-lived program: it logs and shuts down at once, before the shipper's connection
/// is up. `shutdown` still publishes what was buffered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_logged_before_the_shipper_connected_are_flushed_on_shutdown() {
    let vhost = TestVhost::create("logs-flush").await.expect("a test vhost");
    let mut tail = mesh_logs::tail(&vhost.url(), "obs.brief.*")
        .await
        .expect("a tail");

    let logs = mesh_logs::start(LogsOptions::new(&vhost.url(), "obs", "brief").expect("options"))
        .expect("shipper started");
    let subscriber = tracing_subscriber::registry().with(logs.layer());
    tracing::subscriber::with_default(subscriber, || {
        for i in 0..3_u64 {
            tracing::warn!(i, "brief {i}");
        }
    });
    let stats = logs.shutdown(WAIT).await;
    assert_eq!((stats.published, stats.dropped), (3, 0), "{stats:?}");

    for i in 0..3_u64 {
        let record = next(&mut tail).await;
        assert_eq!(
            (record.level.as_str(), record.message),
            ("warn", format!("brief {i}"))
        );
    }
    drop(tail);
    vhost.delete().await.expect("vhost deleted");
}
