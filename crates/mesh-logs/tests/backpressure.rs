//! Acceptance: with `mesh.logs` unread, a program logging 100,000 records neither blocks
//! nor buffers more than its capacity; the surplus is dropped and counted.

use std::time::{Duration, Instant};

use mesh_logs::{LogsOptions, LogsStats};
use mesh_testkit::{eventually, TestVhost};
use tracing_subscriber::layer::SubscriberExt;

const RECORDS: u64 = 100_000;
const CAPACITY: usize = 1_000;
/// Generous: logging 100,000 records takes well under a second; this only catches a hang.
const PROMPTLY: Duration = Duration::from_secs(60);

/// Logs `RECORDS` records through `logs`'s layer on this thread and returns the largest
/// number of records it saw held by the shipper at once.
///
/// Held is counted from what this thread logged, less what was dropped, published or lost,
/// not from `LogsStats::buffered`: that one is the channel's capacity less its free room, at
/// most the capacity by construction, so a bound checked on it would hold whatever the
/// buffer did. Held counts the buffer and the one record the shipper may be publishing (it
/// takes one at a time, and counts it published before it takes the next).
fn log_many(logs: &mesh_logs::Logs) -> u64 {
    let subscriber = tracing_subscriber::registry().with(logs.layer());
    tracing::subscriber::with_default(subscriber, || {
        let mut most = 0;
        for i in 0..RECORDS {
            tracing::info!(i, "record {i}");
            let stats = logs.stats();
            let held = (i + 1)
                .checked_sub(stats.dropped + stats.published + stats.lost)
                .expect("no more records accounted for than were logged");
            most = most.max(held);
        }
        most
    })
}

/// The most records the shipper may hold: the buffer and the one being published.
const MOST_HELD: u64 = CAPACITY as u64 + 1;

/// The shipper cannot run while the only runtime thread logs: the buffer fills to its
/// capacity and everything past it is dropped, exactly. Logging must not wait for room
/// (if it did, this would never return: the shipper it waits for runs on this thread).
#[tokio::test]
async fn a_program_that_outlogs_the_broker_drops_rather_than_blocks() {
    let vhost = TestVhost::create("logs").await.expect("a test vhost");
    let logs = mesh_logs::start(
        LogsOptions::new(&vhost.url(), "obs", "flood")
            .expect("options")
            .capacity(CAPACITY),
    )
    .expect("shipper started");

    let started = Instant::now();
    let most = log_many(&logs);
    let took = started.elapsed();
    assert!(took < PROMPTLY, "logging 100,000 records took {took:?}");

    let stats = logs.stats();
    // The shipper never ran: all it holds is in the buffer.
    assert_eq!(most, CAPACITY as u64, "records held at most");
    assert_eq!(stats.buffered, CAPACITY);
    assert_eq!(stats.dropped, RECORDS - CAPACITY as u64);
    assert_eq!(stats.published, 0);

    // Given the thread, the shipper publishes the buffer into the unread exchange.
    let drained = eventually(Duration::from_secs(30), "the buffer is published", || {
        let stats = logs.stats();
        std::future::ready((stats.published == CAPACITY as u64).then_some(stats))
    })
    .await;
    assert_eq!(drained.buffered, 0);
    assert_eq!(drained.dropped + drained.published, RECORDS);

    // Nothing waits on the broker: no queue is bound, so it kept nothing.
    let queues = vhost.list_queues().await.expect("queues listed");
    assert!(queues.is_empty(), "{queues:?}");
    let exchange = vhost
        .list_exchanges()
        .await
        .expect("exchanges listed")
        .into_iter()
        .find(|e| e.name == mesh_logs::LOGS_EXCHANGE)
        .expect("mesh.logs declared");
    assert_eq!((exchange.kind.as_str(), exchange.durable), ("topic", true));

    logs.shutdown(Duration::from_secs(10)).await;
    vhost.delete().await.expect("vhost deleted");
}

/// The same with the shipper running beside the program on another thread: whatever the
/// race, the buffer never exceeds its capacity and every record is accounted for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logging_beside_a_running_shipper_stays_within_the_buffer() {
    let vhost = TestVhost::create("logs").await.expect("a test vhost");
    let logs = mesh_logs::start(
        LogsOptions::new(&vhost.url(), "obs", "flood")
            .expect("options")
            .capacity(CAPACITY),
    )
    .expect("shipper started");

    let logger = logs.clone();
    let logging = tokio::task::spawn_blocking(move || {
        let started = Instant::now();
        let most = log_many(&logger);
        (most, started.elapsed())
    });
    let (most, took) = tokio::time::timeout(PROMPTLY, logging)
        .await
        .expect("logging 100,000 records returns promptly")
        .expect("the logging thread did not panic");
    assert!(most <= MOST_HELD, "{most} records held at once");
    assert!(took < PROMPTLY, "logging took {took:?}");

    let final_stats: LogsStats = logs.shutdown(Duration::from_secs(30)).await;
    assert_eq!(final_stats.buffered, 0, "shutdown flushed the buffer");
    assert_eq!(
        final_stats.dropped + final_stats.published + final_stats.lost,
        RECORDS,
        "every record was published, dropped or lost: {final_stats:?}"
    );
    assert_eq!(final_stats.lost, 0);
    vhost.delete().await.expect("vhost deleted");
}
