//! Scenario q: the broker closes a consumer's channel under load, 100 times.
//!
//! A consumer handles a steady stream of events (prefetch 32, so deliveries and acks are
//! always in flight). 100 times, the node itself makes the consumer's channel ack a delivery
//! tag it never sent (`rabbit_channel:do/2` with `basic.ack` 999999999, through
//! `rabbitmqctl eval`): the broker closes that channel with `406 PRECONDITION_FAILED -
//! unknown delivery tag`, a channel-level close begun by the server while mesh's ack
//! tracker is flushing acks on it. Each round waits until the consumer is attached again on
//! a new channel that holds unacknowledged deliveries.
//!
//! Asserted: every round found a loaded channel to close, the node's log holds the 100
//! channel errors and no connection error (no `Error on AMQP connection`, no `client
//! unexpectedly closed TCP connection`, no `closing AMQP connection` at all while the
//! rounds ran), the consume connection never dropped, and lost = 0, unexpected = 0.

use std::time::{Duration, Instant};

use mesh::amqp::QueueType;
use mesh::{Bus, HandlerError};
use mesh_faults::setup::{self, connect};
use mesh_faults::timeline::consuming;
use mesh_faults::{secs, EmitPlan, Emitter, HealthLog};
use mesh_testkit::{eventually, Ledger, NodeOptions, PrivateNode};

const ROUNDS: usize = 100;
/// Rounds per `rabbitmqctl eval` (each run of the tool costs about a second of start-up).
const BATCH: usize = 10;
/// How long one round may wait for the consumer's next loaded channel, in the node: the
/// re-attach takes about 0.1 s (scenario i), so this is 50× that.
const ROUND_WAIT_MS: u64 = 5_000;
/// Any other wait.
const WAIT: Duration = Duration::from_secs(60);
/// The delivery tag no channel ever sent.
const UNKNOWN_TAG: u64 = 999_999_999;

/// Log lines of a connection-level failure.
const CONNECTION_ERRORS: &[&str] = &[
    "Error on AMQP connection",
    "client unexpectedly closed TCP connection",
    "missed heartbeats",
    "closing AMQP connection",
];

/// The Erlang run in the node: `BATCH` rounds, each waiting (polling every 2 ms) for a
/// channel of `vhost` that is not closing, has a consumer and unacknowledged deliveries,
/// and is not one this batch closed already, then making each such channel ack an unknown
/// tag. Prints `{closed,N}`, or `{timeout,N}` when a round found none in time.
fn batch(vhost: &str) -> String {
    format!(
        "V = <<\"{vhost}\">>, \
         Info = fun(P) -> try rabbit_channel:info(P, [vhost, state, consumer_count, \
             messages_unacknowledged]) catch _:_ -> [] end end, \
         Loaded = fun(Seen) -> [P || P <- rabbit_channel:list(), not lists:member(P, Seen), \
             case Info(P) of [{{vhost, V}}, {{state, S}}, {{consumer_count, C}}, \
                 {{messages_unacknowledged, U}}] -> S =/= closing andalso C > 0 andalso U > 0; \
             _ -> false end] end, \
         Wait = fun W(Seen, Until) -> case Loaded(Seen) of \
             [] -> case erlang:monotonic_time(millisecond) > Until of \
                 true -> []; false -> timer:sleep(2), W(Seen, Until) end; \
             Ps -> Ps end end, \
         Go = fun G(Done, _) when Done >= {BATCH} -> {{closed, Done}}; \
             G(Done, Seen) -> case Wait(Seen, erlang:monotonic_time(millisecond) + {ROUND_WAIT_MS}) of \
                 [] -> {{timeout, Done}}; \
                 Ps -> [rabbit_channel:do(P, {{'basic.ack', {UNKNOWN_TAG}, false}}) || P <- Ps], \
                     G(Done + 1, Ps ++ Seen) end end, \
         Go(0, [])."
    )
}

/// Lines of the node's log after byte `from` that contain `needle`.
fn count_in_log(node: &PrivateNode, from: usize, needle: &str) -> usize {
    let log = std::fs::read(node.log_file()).unwrap_or_default();
    String::from_utf8_lossy(log.get(from..).unwrap_or_default())
        .lines()
        .filter(|line| line.contains(needle))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_channel_closes_by_the_broker_under_load_cost_no_connection() {
    setup::init_tracing();
    let began = Instant::now();
    let node = PrivateNode::start(NodeOptions::default())
        .await
        .expect("a private RabbitMQ node (is rabbitmq-server installed?)");
    let vhost = setup::vhost(&node, "forced-close").await.unwrap();
    let access = setup::access(&node, &vhost).await.unwrap();

    // Each round closes the consumer's channel sooner than the transport calls a consumer
    // stable (5 s), so the re-attach backs off as a queue the broker keeps cancelling would;
    // a short backoff keeps the rounds at the pace of the re-attach itself.
    let sink_options = access
        .options("sink", QueueType::Quorum)
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200));
    let ledger = Ledger::new();
    let consumer = {
        let ledger = ledger.clone();
        Bus::builder()
            .node("faults")
            .module("sink")
            .prefetch(32)
            .on_raw(["module.source.#"], move |incoming| {
                ledger.handled(incoming.meta.id().to_string());
                async { Ok::<(), HandlerError>(()) }
            })
            .start(connect(sink_options).await)
            .await
            .unwrap()
    };
    let health = HealthLog::start(consumer.clone());
    let source = Bus::builder()
        .node("faults")
        .module("source")
        .start(connect(access.options("source", QueueType::Quorum)).await)
        .await
        .unwrap();

    // A steady load, about 1,000 events a second, for longer than the rounds take.
    let load = Emitter::start(
        source.clone(),
        ledger.clone(),
        EmitPlan::new(300_000, "job").paced(Duration::from_millis(1)),
    );
    load.wait_confirmed(1_000, WAIT).await.unwrap();
    eventually(WAIT, "the consumer attached", || {
        let attached = health.current().is_some_and(|h| consuming(1)(&h));
        async move { attached.then_some(()) }
    })
    .await;

    let log_from = std::fs::metadata(node.log_file()).map_or(0, |m| m.len() as usize);
    let rounds_began = Instant::now();
    let mut closed = 0;
    while closed < ROUNDS {
        let out = node
            .rabbitmqctl(&["eval", &batch(&vhost)])
            .await
            .unwrap_or_else(|e| panic!("rabbitmqctl eval after {closed} rounds: {e:#}"));
        let out = out.trim();
        let done: usize = out
            .strip_prefix("{closed,")
            .or_else(|| out.strip_prefix("{timeout,"))
            .and_then(|rest| rest.strip_suffix('}'))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("unexpected answer from the node: {out}"));
        closed += done;
        assert!(
            out.starts_with("{closed,"),
            "after {closed} rounds, no loaded consumer channel within {ROUND_WAIT_MS} ms: \
             the consumer did not come back (health:\n{})",
            health.describe(began)
        );
    }
    let rounds_took = rounds_began.elapsed();
    // The log is written asynchronously: wait until it shows every close.
    let channel_errors = eventually(WAIT, "the channel errors in the node's log", || {
        let n = count_in_log(
            &node,
            log_from,
            &format!("unknown delivery tag {UNKNOWN_TAG}"),
        );
        async move { (n >= closed).then_some(n) }
    })
    .await;
    let connection_errors: Vec<(&str, usize)> = CONNECTION_ERRORS
        .iter()
        .map(|needle| (*needle, count_in_log(&node, log_from, needle)))
        .collect();
    let disconnects = health.disconnects_between(rounds_began, Instant::now());

    load.stop();
    let report = ledger.wait_all_handled(WAIT).await;
    eprintln!(
        "[q] {closed} channels closed by the broker in {} ({ROUNDS} rounds); the log holds \
         {channel_errors} channel errors and these connection-level lines: \
         {connection_errors:?}; the consumer's bus disconnected {disconnects} times; {} \
         events confirmed; {report}; total {}",
        secs(rounds_took),
        load.confirmed(),
        secs(began.elapsed())
    );

    assert!(closed >= ROUNDS);
    assert!(
        connection_errors.iter().all(|(_, n)| *n == 0),
        "connection errors in the node's log while the rounds ran: {connection_errors:?}"
    );
    assert_eq!(disconnects, 0, "the consumer's connection dropped");
    report.assert_clean();
    assert!(report.confirmed > 0);

    consumer.close().await;
    source.close().await;
}
