//! Scenario n: a backlog of 200,000 events of 1 KiB consumed with prefetch 32 by a process of
//! its own (`faults-worker consume`), whose resident memory the test reads from the OS
//! (`VmRSS` in `/proc/<pid>/status`) while it works: the prefetch, not the backlog, must bound
//! what the consumer holds.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mesh::amqp::QueueType;
use mesh::Bus;
use mesh_faults::setup::{self, connect};
use mesh_faults::worker::{self, rss_bytes};
use mesh_faults::{secs, EmitPlan, Emitter, Worker};
use mesh_testkit::{eventually, Ledger, NodeOptions, PrivateNode};

/// Events in the backlog.
const EVENTS: usize = 200_000;
/// Padding that makes each body 1 KiB (`{"seq":123456,"pad":"…"}`).
const PADDING: usize = 1_000;
/// The consumer's prefetch.
const PREFETCH: &str = "32";
/// The most the consumer's resident memory may grow while it works through the backlog.
const RSS_GROWTH_LIMIT: u64 = 50 * 1024 * 1024;
/// How long emitting, and then consuming, the backlog may take.
const EMIT_TIMEOUT: Duration = Duration::from_secs(300);
const CONSUME_TIMEOUT: Duration = Duration::from_secs(300);
/// How often the consumer's memory is sampled.
const SAMPLE: Duration = Duration::from_millis(50);
const WAIT: Duration = Duration::from_secs(30);

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_backlog_is_consumed_in_bounded_memory() {
    setup::init_tracing();
    let began = Instant::now();
    let node = PrivateNode::start(NodeOptions::default())
        .await
        .expect("a private RabbitMQ node (is rabbitmq-server installed?)");
    let vhost = setup::vhost(&node, "backlog").await.unwrap();
    // Each module connects as its own user, with exactly the access plan's permissions; the
    // consumer process too.
    let access = setup::access(&node, &vhost).await.unwrap();
    let login = access.login("backlog");
    let args = [
        "consume",
        login.url(),
        "quorum",
        "faults",
        "backlog",
        "module.source.#",
        PREFETCH,
    ];

    // A first consumer declares and binds the queue, and goes: the backlog builds up.
    let mut first =
        Worker::spawn_with_env(env!("CARGO_BIN_EXE_faults-worker"), &args, &login.env()).unwrap();
    first.ready(WAIT).await.unwrap();
    first.finish(WAIT).await.unwrap();
    let ledger = Ledger::new();
    let source = Bus::builder()
        .node("faults")
        .module("source")
        .start(connect(access.options("source", QueueType::Quorum)).await)
        .await
        .unwrap();
    let emit_began = Instant::now();
    let emitter = Emitter::start(
        source.clone(),
        ledger.clone(),
        EmitPlan::new(EVENTS, "bulk").padding(PADDING),
    );
    emitter.wait_confirmed(EVENTS, EMIT_TIMEOUT).await.unwrap();
    let emitted_in = emit_began.elapsed();
    // A quorum queue refreshes its count every 5 s.
    let queued = eventually(WAIT, "the whole backlog counted in the queue", || async {
        let queues = node.list_queues(&vhost).await.ok()?;
        let n = queues
            .into_iter()
            .find(|q| q.name == "faults.backlog.events")?
            .messages;
        (n == EVENTS as u64).then_some(n)
    })
    .await;

    // The consumer under test, sampled from outside while it works.
    let consume_began = Instant::now();
    let mut consumer =
        Worker::spawn_with_env(env!("CARGO_BIN_EXE_faults-worker"), &args, &login.env()).unwrap();
    let pid = consumer.pid().expect("the consumer's pid");
    // On a backlog its handlers may report events before it says `ready`.
    let early = consumer.ready_after_lines(WAIT).await.unwrap();
    let at_ready = rss_bytes(pid).expect("the consumer is alive");
    let peak = Arc::new(AtomicU64::new(at_ready));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        tokio::spawn(async move {
            while sampling.load(Ordering::Relaxed) {
                if let Some(rss) = rss_bytes(pid) {
                    peak.fetch_max(rss, Ordering::Relaxed);
                }
                // The sampling interval of a measurement, not a synchronisation.
                tokio::time::sleep(SAMPLE).await;
            }
        })
    };
    let deadline = Instant::now() + CONSUME_TIMEOUT;
    let mut handled = 0usize;
    let mut halfway_rss = None;
    let mut early = early.into_iter();
    while handled < EVENTS {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = match early.next() {
            Some(line) => Ok(Some(line)),
            None => consumer.next_line(left.min(WAIT)).await,
        };
        match line {
            Ok(Some(line)) => match line.strip_prefix("handled ") {
                Some(id) => {
                    ledger.handled(id);
                    handled += 1;
                    if handled == EVENTS / 2 {
                        halfway_rss = rss_bytes(pid);
                    }
                }
                None => panic!("unexpected line from the consumer: {line:?}"),
            },
            Ok(None) => panic!(
                "the consumer exited after {handled} events: {:?}",
                consumer.exited(WAIT).await.map(|s| worker::describe(&s))
            ),
            Err(e) => panic!("after {handled} of {EVENTS} handled: {e:#}"),
        }
    }
    let consumed_in = consume_began.elapsed();
    let at_end = rss_bytes(pid).unwrap_or(0);
    sampling.store(false, Ordering::Relaxed);
    sampler.await.unwrap();
    let peak = peak.load(Ordering::Relaxed).max(at_end);
    let report = ledger.wait_all_handled(WAIT).await;
    consumer.finish(WAIT).await.unwrap();
    let growth = peak.saturating_sub(at_ready);
    eprintln!(
        "[n] {EVENTS} events of ~1 KiB emitted in {} ({queued} queued); consumed with \
         prefetch {PREFETCH} in {} ({:.0}/s)",
        secs(emitted_in),
        secs(consumed_in),
        EVENTS as f64 / consumed_in.as_secs_f64()
    );
    eprintln!(
        "[n] consumer RSS: {} when ready, {} halfway, {} at the end, peak {}: growth {} \
         (limit {}); {report}; total {}",
        mib(at_ready),
        halfway_rss.map_or_else(|| "-".to_owned(), mib),
        mib(at_end),
        mib(peak),
        mib(growth),
        mib(RSS_GROWTH_LIMIT),
        secs(began.elapsed())
    );
    report.assert_clean();
    assert_eq!(report.confirmed, EVENTS);
    assert!(
        growth <= RSS_GROWTH_LIMIT,
        "the consumer's RSS grew by {} (limit {})",
        mib(growth),
        mib(RSS_GROWTH_LIMIT)
    );
    source.close().await;
}
