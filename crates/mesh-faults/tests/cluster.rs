//! Scenarios on a three-node cluster (j–m, o): failover when a quorum queue's leader and then
//! the client's node are SIGKILLed, the loss of quorum, RPC across killed servers and nodes,
//! poison events, and the audit logger's completeness through every fault.
//!
//! The cluster is formed once for this binary (~25 s) and shared; the scenarios kill its nodes,
//! so they take turns ([`SERIAL`]), each in a vhost of its own, and each starts by healing the
//! cluster (a failed scenario may have left a node down). Every client is given all three
//! addresses and declares quorum queues.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mesh::{Bus, HandlerError};
use mesh_faults::setup::{self, cluster_options, connect};
use mesh_faults::{secs, EmitPlan, Emitter, Timeline, Try, TryOutcome};
use mesh_testkit::{shared_cluster, Cluster, Ledger, NodeOptions};

/// One scenario at a time on the one cluster.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long a node may take to boot, rejoin and have its queue members back.
const REJOIN: Duration = Duration::from_secs(120);
/// Any single wait for progress of the load.
const WAIT: Duration = Duration::from_secs(60);
/// How long the consumer may take to handle every confirmed event after the last emit.
const HANDLE_TIMEOUT: Duration = Duration::from_secs(120);

/// The shared cluster, all three nodes up.
async fn cluster() -> Arc<Cluster> {
    let cluster = shared_cluster("faults", NodeOptions::default())
        .await
        .expect("a private RabbitMQ cluster (is rabbitmq-server installed?)");
    cluster
        .heal(REJOIN)
        .await
        .expect("restarting a node an earlier scenario left down");
    cluster
}

/// The longest emit as its caller saw it (first try to confirm, across retries) and the
/// longest single try.
fn longest_emits(tries: &[Try]) -> (Duration, Duration) {
    let mut first: BTreeMap<usize, Instant> = BTreeMap::new();
    let mut longest_emit = Duration::ZERO;
    let mut longest_try = Duration::ZERO;
    let mut sorted: Vec<&Try> = tries.iter().collect();
    sorted.sort_by_key(|t| t.started);
    for t in &sorted {
        first.entry(t.index).or_insert(t.started);
    }
    for t in sorted {
        longest_try = longest_try.max(t.waited());
        if t.outcome == TryOutcome::Confirmed {
            longest_emit = longest_emit.max(t.resolved - first[&t.index]);
        }
    }
    (longest_emit, longest_try)
}

/// A consumer bus recording every handle in `ledger` and `handles`.
async fn sink(
    cluster: &Cluster,
    order: &[usize],
    vhost: &str,
    ledger: &Ledger,
    handles: &Timeline,
) -> Bus {
    let (ledger, handles) = (ledger.clone(), handles.clone());
    Bus::builder()
        .node("faults")
        .module("sink")
        .prefetch(128)
        .on_raw(["module.source.#"], move |incoming| {
            ledger.handled(incoming.meta.id.to_string());
            handles.mark();
            async { Ok::<(), HandlerError>(()) }
        })
        .start(connect(cluster_options(cluster, order, vhost, "sink")).await)
        .await
        .expect("starting the consumer")
}

/// Events of the failover scenario.
const FAILOVER_EVENTS: usize = 10_000;
/// The failover scenario's stall target, and what it asserts (3× slack).
const STALL_TARGET: Duration = Duration::from_secs(5);
const STALL_LIMIT: Duration = Duration::from_secs(15);

/// j. 10,000 events while the leader of the consumer's quorum queue is SIGKILLed (and started
/// again), then the node the emitting client is connected to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_when_the_leader_then_the_clients_node_is_killed() {
    let _serial = SERIAL.lock().await;
    setup::init_tracing();
    let began = Instant::now();
    let cluster = cluster().await;
    eprintln!("[j] cluster ready after {}", secs(began.elapsed()));
    let vhost = "failover";
    cluster.add_vhost(vhost).await.unwrap();

    // The consumer starts on node 0, so its queue's leader is there; the emitter on node 1.
    let ledger = Ledger::new();
    let handles = Timeline::new();
    let sink = sink(&cluster, &[0, 1, 2], vhost, &ledger, &handles).await;
    let source = Bus::builder()
        .node("faults")
        .module("source")
        .start(connect(cluster_options(&cluster, &[1, 2, 0], vhost, "source")).await)
        .await
        .unwrap();
    let queue = "faults.sink.events";
    let leader = cluster.leader_of(vhost, queue).await.unwrap();
    let emitter = Emitter::start(
        source.clone(),
        ledger.clone(),
        EmitPlan::new(FAILOVER_EVENTS, "tick").limit(3_000),
    );

    // 1. The leader, with emits in flight.
    emitter.wait_confirmed(2_000, WAIT).await.unwrap();
    let kill1 = Instant::now();
    cluster.node(leader).kill().await.unwrap();
    let down1 = Instant::now();
    emitter.allow(6_000);
    emitter
        .wait_confirmed(5_000, WAIT)
        .await
        .unwrap_or_else(|e| panic!("emits did not go on after the leader's death: {e}"));
    let new_leader = cluster.leader_of(vhost, queue).await.unwrap();
    let restart1 = Instant::now();
    cluster.start_again(&[leader]).await.unwrap();
    cluster.await_rejoined(leader, REJOIN).await.unwrap();
    cluster.await_queues_in_sync(vhost, REJOIN).await.unwrap();
    let back1 = Instant::now();

    // 2. The node the emitting client is connected to now.
    let client_node = cluster
        .node_of_connection("source.publish")
        .await
        .unwrap()
        .expect("the emitter's publishing connection is open");
    emitter.allow(FAILOVER_EVENTS);
    emitter.wait_confirmed(7_000, WAIT).await.unwrap();
    let kill2 = Instant::now();
    cluster.node(client_node).kill().await.unwrap();
    let down2 = Instant::now();
    emitter
        .wait_confirmed(FAILOVER_EVENTS, WAIT)
        .await
        .unwrap_or_else(|e| panic!("emits did not go on after the client's node died: {e}"));
    let moved_to = cluster.node_of_connection("source.publish").await.unwrap();
    let restart2 = Instant::now();
    cluster.start_again(&[client_node]).await.unwrap();
    cluster.await_rejoined(client_node, REJOIN).await.unwrap();
    let report = ledger.wait_all_handled(HANDLE_TIMEOUT).await;
    cluster.await_queues_in_sync(vhost, REJOIN).await.unwrap();
    let back2 = Instant::now();
    let drain = cluster.await_drained(vhost, WAIT).await;

    let tries = emitter.tries();
    let (longest_emit, longest_try) = longest_emits(&tries);
    let confirms = emitter.confirms();
    eprintln!(
        "[j] leader node {leader} killed (took {}); first confirm {} after the kill, new leader node {new_leader}; \
         restarted: rejoined and in sync {} after its start",
        secs(down1 - kill1),
        confirms
            .first_after(kill1)
            .map_or_else(|| "-".to_owned(), |t| secs(t - kill1)),
        secs(back1 - restart1),
    );
    eprintln!(
        "[j] client's node {client_node} killed (took {}); first confirm {} after the kill, \
         publishing connection moved to node {moved_to:?}; restarted: rejoined, all handled and in sync {} after its start",
        secs(down2 - kill2),
        confirms
            .first_after(kill2)
            .map_or_else(|| "-".to_owned(), |t| secs(t - kill2)),
        secs(back2 - restart2),
    );
    eprintln!(
        "[j] longest emit (first try to confirm) {} (target {}), longest single try {}; \
         failures by kind {:?}; queues drained {}; {report}; total {}",
        secs(longest_emit),
        secs(STALL_TARGET),
        secs(longest_try),
        emitter.failures(),
        drain
            .as_ref()
            .map_or_else(|e| format!("NOT: {e:#}"), |d| format!("in {}", secs(*d))),
        secs(began.elapsed())
    );
    report.assert_clean();
    assert_eq!(report.confirmed, FAILOVER_EVENTS);
    assert!(emitter.fatal().is_empty(), "{:?}", emitter.fatal());
    assert!(
        longest_emit <= STALL_LIMIT,
        "an emit stalled {} (limit {})",
        secs(longest_emit),
        secs(STALL_LIMIT)
    );
    assert_ne!(moved_to, Some(client_node));
    drain.unwrap();
    source.close().await;
    sink.close().await;
}

/// Events of the quorum-loss scenario, and how many go before the fault.
const QUORUM_EVENTS: usize = 3_000;
const QUORUM_BEFORE: usize = 1_000;
/// How long two of the three nodes stay down.
const OUTAGE: Duration = Duration::from_secs(20);
/// The emit deadline while quorum is lost.
const QUORUM_DEADLINE: Duration = Duration::from_secs(5);

/// k. Two of three nodes down for 20 s: emits fail with an error (the broker nacks them, or
/// they time out; none is confirmed without a quorum), and after the nodes return nothing
/// confirmed is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emits_time_out_while_quorum_is_lost_and_nothing_confirmed_is_lost() {
    let _serial = SERIAL.lock().await;
    setup::init_tracing();
    let began = Instant::now();
    let cluster = cluster().await;
    let vhost = "quorum-lost";
    cluster.add_vhost(vhost).await.unwrap();
    let ledger = Ledger::new();
    let handles = Timeline::new();
    let sink = sink(&cluster, &[0, 1, 2], vhost, &ledger, &handles).await;
    let source = Bus::builder()
        .node("faults")
        .module("source")
        .emit_deadline(Some(QUORUM_DEADLINE))
        .start(connect(cluster_options(&cluster, &[0, 1, 2], vhost, "source")).await)
        .await
        .unwrap();
    let emitter = Emitter::start(
        source.clone(),
        ledger.clone(),
        EmitPlan::new(QUORUM_EVENTS, "tick").limit(QUORUM_BEFORE),
    );
    emitter.wait_confirmed(QUORUM_BEFORE, WAIT).await.unwrap();

    // Nodes 0 and 1 (the clients' node among them) die; node 2 alone has no quorum.
    let kill_at = Instant::now();
    let (a, b) = tokio::join!(cluster.node(0).kill(), cluster.node(1).kill());
    a.unwrap();
    b.unwrap();
    let down_at = Instant::now();
    emitter.allow(QUORUM_EVENTS);
    // The outage is the scenario: it lasts this long whatever the clients do.
    tokio::time::sleep(OUTAGE).await;
    let restart_at = Instant::now();
    let confirmed_in_outage = emitter.confirmed();
    let tries = emitter.tries();
    // A try that began with two nodes dead and was confirmed before they came back would be
    // a false success.
    let false_successes: Vec<&Try> = tries
        .iter()
        .filter(|t| {
            t.started >= down_at && t.resolved < restart_at && t.outcome == TryOutcome::Confirmed
        })
        .collect();
    let mut outage_failures: BTreeMap<String, usize> = BTreeMap::new();
    for t in tries
        .iter()
        .filter(|t| t.resolved >= down_at && t.resolved < restart_at)
    {
        if let TryOutcome::Failed { kind, .. } = &t.outcome {
            *outage_failures.entry(kind.clone()).or_default() += 1;
        }
    }
    let longest_outage_try = tries
        .iter()
        .filter(|t| t.started >= down_at && t.resolved < restart_at)
        .map(Try::waited)
        .max()
        .unwrap_or_default();

    cluster.start_again(&[0, 1]).await.unwrap();
    let booted_at = Instant::now();
    cluster.await_rejoined(0, REJOIN).await.unwrap();
    cluster.await_rejoined(1, REJOIN).await.unwrap();
    emitter
        .wait_confirmed(QUORUM_EVENTS, HANDLE_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("emits did not resume after quorum came back: {e}"));
    let all_confirmed_at = Instant::now();
    let report = ledger.wait_all_handled(HANDLE_TIMEOUT).await;
    let in_sync = cluster.await_queues_in_sync(vhost, REJOIN).await;

    eprintln!(
        "[k] nodes 0 and 1 killed in {}; {} s outage: {confirmed_in_outage} confirmed at its \
         end ({QUORUM_BEFORE} before it), failed tries {outage_failures:?}, longest try {} \
         (deadline {}), false successes {}",
        secs(down_at - kill_at),
        OUTAGE.as_secs(),
        secs(longest_outage_try),
        secs(QUORUM_DEADLINE),
        false_successes.len()
    );
    eprintln!(
        "[k] both booted {} after the restart began; first confirm {} after boot, all {QUORUM_EVENTS} \
         confirmed {} after boot; {report}; total {}",
        secs(booted_at - restart_at),
        emitter
            .confirms()
            .first_after(restart_at)
            .map_or_else(|| "-".to_owned(), |t| secs(t.saturating_duration_since(booted_at))),
        secs(all_confirmed_at - booted_at),
        secs(began.elapsed())
    );
    assert!(
        false_successes.is_empty(),
        "{} emits were confirmed without a quorum",
        false_successes.len()
    );
    // RabbitMQ 3.10 nacks a publish that a quorum queue without quorum cannot take, well
    // before the deadline; a broker that held it instead would fail it by the deadline.
    let failed_in_outage: usize = outage_failures.values().sum();
    assert!(
        failed_in_outage > 0,
        "no emit failed while quorum was lost (confirmed at its end: {confirmed_in_outage})"
    );
    assert!(
        outage_failures
            .keys()
            .all(|k| ["Nacked", "Timeout", "Backpressure", "ConnectionLost"].contains(&k.as_str())),
        "unexpected failures while quorum was lost: {outage_failures:?}"
    );
    assert!(
        longest_outage_try <= QUORUM_DEADLINE * 3,
        "a try waited {} with a {} deadline",
        secs(longest_outage_try),
        secs(QUORUM_DEADLINE)
    );
    report.assert_clean();
    assert_eq!(report.confirmed, QUORUM_EVENTS);
    assert!(emitter.fatal().is_empty(), "{:?}", emitter.fatal());
    in_sync.unwrap();
    source.close().await;
    sink.close().await;
}
