//! Scheduled events through faults, on private nodes, every module as its own user under the
//! access plan:
//!
//! - 1,000 events scheduled 5–30 s ahead by `source`, forwarded by a child process
//!   (`faults-worker forward-scheduled`); the broker is killed and started again, then the
//!   forwarder is SIGKILLed and another started. Every event arrives (none lost), none
//!   before its due time; lateness p50/p99 printed (docs/BENCHMARKS.md).
//! - On a node whose consumer timeout is 10 s, events scheduled 40 s ahead (four timeouts)
//!   with the longest hop at 5 s arrive on time.
//! - On a private three-node cluster, 1,000 events scheduled 5–30 s ahead while the node
//!   leading the schedule queue (and its hops, the sink's queue, and the forwarder's
//!   connection) is SIGKILLed and started again: a new leader is elected, the forwarder
//!   reconnects to another node, and every event arrives, none early, none lost, none
//!   dead-lettered by the broker (the operator watches every dead letter).
//!
//! Faults are timed by progress (events delivered), not by the clock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mesh::amqp::QueueType;
use mesh::{Bus, Outgoing, Timestamp};
use mesh_faults::secs;
use mesh_faults::setup::{self, connect};
use mesh_faults::worker::Worker;
use mesh_testkit::{eventually, shared_cluster, ClusterHarness, NodeOptions, PrivateNode};

const EVENTS: usize = 1_000;
/// The schedule queue's delivery limit in the leader election (see there).
const DELIVERY_LIMIT: u32 = 5;
const WAIT: Duration = Duration::from_secs(60);
/// How long every event may take to arrive once scheduled: the latest due time (30 s), the
/// restart and the forwarder's kill, with room on 2 cores.
const DELIVER_TIMEOUT: Duration = Duration::from_secs(240);

/// What the sink saw of each event: its due time (`x-time`) and when it arrived, every time.
type Seen = Arc<Mutex<HashMap<String, Vec<(Timestamp, Timestamp)>>>>;

/// The sink: a module reading `module.source.#`, recording arrivals.
async fn sink(access: &setup::Access) -> (Bus, Seen) {
    let seen: Seen = Arc::default();
    let bus = {
        let seen = seen.clone();
        Bus::builder()
            .node(setup::NODE)
            .module("sink")
            .prefetch(256)
            .announce(false)
            .on_raw(["module.source.#"], move |e| {
                let seen = seen.clone();
                async move {
                    let now = Timestamp::now();
                    seen.lock()
                        .expect("the sink's map")
                        .entry(e.meta.id().to_string())
                        .or_default()
                        .push((e.meta.time(), now));
                    Ok(())
                }
            })
            .start(connect(access.options("sink", QueueType::Quorum)).await)
            .await
            .expect("the sink starts")
    };
    (bus, seen)
}

/// Schedules `n` events from `source`, the i-th `first + (last - first) * i / n` ahead;
/// returns each id with its due time.
async fn schedule(
    source: &Bus,
    n: usize,
    first: Duration,
    last: Duration,
) -> HashMap<String, Timestamp> {
    let began = Timestamp::now();
    let spread = last - first;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..n {
        let ahead = first + spread.mul_f64(i as f64 / n as f64);
        let due = began.checked_add(ahead).expect("in range");
        let source = source.clone();
        tasks.spawn(async move {
            let outgoing = Outgoing::json("reminder.due", &i).expect("an outgoing");
            let id = source
                .emit_outgoing_at(due, outgoing)
                .await
                .unwrap_or_else(|e| panic!("scheduling event {i}: {e:#}"));
            (id.to_string(), due)
        });
    }
    let mut scheduled = HashMap::with_capacity(n);
    while let Some(done) = tasks.join_next().await {
        let (id, due) = done.expect("a scheduling task");
        scheduled.insert(id, due);
    }
    scheduled
}

/// How many distinct scheduled events arrived.
fn arrived(seen: &Seen) -> usize {
    seen.lock().expect("the sink's map").len()
}

/// Checks every event arrived, none early, with `x-time` its due time; returns the lateness of
/// each first arrival, sorted, and the duplicates.
fn check(scheduled: &HashMap<String, Timestamp>, seen: &Seen) -> (Vec<Duration>, usize) {
    let seen = seen.lock().expect("the sink's map");
    let lost: Vec<&String> = scheduled
        .keys()
        .filter(|id| !seen.contains_key(*id))
        .collect();
    assert!(
        lost.is_empty(),
        "{} events lost, e.g. {:?}",
        lost.len(),
        lost.first()
    );
    let unexpected = seen
        .keys()
        .filter(|id| !scheduled.contains_key(*id))
        .count();
    assert_eq!(unexpected, 0, "events nobody scheduled arrived");
    let mut lateness = Vec::with_capacity(scheduled.len());
    let mut duplicates = 0;
    for (id, due) in scheduled {
        let arrivals = &seen[id];
        duplicates += arrivals.len() - 1;
        for (time, at) in arrivals {
            assert_eq!(time, due, "x-time of {id} is its due time");
            assert!(
                at >= due,
                "{id} arrived at {at}, before it was due at {due}"
            );
        }
        let first = arrivals
            .iter()
            .map(|(_, at)| *at)
            .min()
            .expect("an arrival");
        let late = first.unix_nanos() - due.unix_nanos();
        lateness.push(Duration::from_nanos(u64::try_from(late).unwrap_or(0)));
    }
    lateness.sort();
    (lateness, duplicates)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_events_arrive_through_a_broker_restart_and_a_killed_forwarder() {
    setup::init_tracing();
    let node = PrivateNode::start(NodeOptions::default())
        .await
        .expect("a private RabbitMQ node (is rabbitmq-server installed?)");
    let vhost = setup::vhost(&node, "schedule").await.unwrap();
    let access = setup::access(&node, &vhost).await.unwrap();
    let login = access.login("source");
    let args = ["forward-scheduled", login.url(), setup::NODE, "source"];
    let spawn = || {
        Worker::spawn_with_env(env!("CARGO_BIN_EXE_faults-worker"), &args, &login.env())
            .expect("the forwarder starts")
    };
    let mut forwarder = spawn();
    forwarder.ready(WAIT).await.unwrap();
    let (_sink, seen) = sink(&access).await;
    let source = Bus::builder()
        .node(setup::NODE)
        .module("source")
        .announce(false)
        .emit_deadline(Some(Duration::from_secs(30)))
        .start(connect(access.options("source", QueueType::Quorum)).await)
        .await
        .unwrap();

    let began = Instant::now();
    eprintln!(
        "[schedule] began at {} ms after the epoch",
        Timestamp::now().unix_nanos() / 1_000_000
    );
    let scheduled = schedule(
        &source,
        EVENTS,
        Duration::from_secs(5),
        Duration::from_secs(30),
    )
    .await;
    eprintln!("[schedule] {EVENTS} scheduled in {}", secs(began.elapsed()));

    // The broker goes away once the first events arrived, most still waiting on hops.
    eventually(WAIT, "the first events arrive", || async {
        (arrived(&seen) >= 50).then_some(())
    })
    .await;
    eprintln!(
        "[schedule] broker killed at {} ({} arrived)",
        secs(began.elapsed()),
        arrived(&seen)
    );
    node.kill().await.expect("killing the node");
    node.start_again().await.expect("starting the node again");
    eprintln!("[schedule] broker back at {}", secs(began.elapsed()));

    // Then the forwarder process, mid-stream.
    let before_kill = arrived(&seen) + 100;
    eventually(WAIT, "more events arrive after the restart", || async {
        (arrived(&seen) >= before_kill).then_some(())
    })
    .await;
    eprintln!(
        "[schedule] forwarder killed at {} ({} arrived)",
        secs(began.elapsed()),
        arrived(&seen)
    );
    forwarder.kill().await.expect("SIGKILL the forwarder");
    let mut forwarder = spawn();
    forwarder.ready(WAIT).await.unwrap();

    eventually(DELIVER_TIMEOUT, "every scheduled event arrives", || async {
        (arrived(&seen) >= EVENTS).then_some(())
    })
    .await;
    let (lateness, duplicates) = check(&scheduled, &seen);
    {
        // Where the duplicates come from: how many events, and when their extra copies came.
        let seen = seen.lock().expect("the sink's map");
        let twice = seen.values().filter(|a| a.len() > 1).count();
        let max = seen.values().map(Vec::len).max().unwrap_or(0);
        let mut extra: Vec<i128> = seen
            .values()
            .filter(|a| a.len() > 1)
            .flat_map(|a| a.iter().skip(1).map(|(_, at)| at.unix_nanos() / 1_000_000))
            .collect();
        extra.sort_unstable();
        eprintln!(
            "[schedule] {twice} events arrived more than once (at most {max} times); extra copies from {:?} to {:?} ms after the epoch",
            extra.first(),
            extra.last()
        );
    }
    eprintln!(
        "[schedule] all {EVENTS} arrived by {}: none early, none lost, {duplicates} duplicates; lateness p50 {:?} p99 {:?} max {:?}",
        secs(began.elapsed()),
        percentile(&lateness, 0.5),
        percentile(&lateness, 0.99),
        lateness.last().copied().unwrap_or_default(),
    );
    forwarder.finish(WAIT).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_longer_than_the_consumer_timeout_arrives_on_time() {
    setup::init_tracing();
    let consumer_timeout = Duration::from_secs(10);
    let node = PrivateNode::start(
        NodeOptions::default()
            .consumer_timeout_ms(consumer_timeout.as_millis() as u64)
            .channel_tick_interval_ms(1_000),
    )
    .await
    .expect("a private RabbitMQ node (is rabbitmq-server installed?)");
    let vhost = setup::vhost(&node, "schedule-timeout").await.unwrap();
    let access = setup::access(&node, &vhost).await.unwrap();
    let source = Bus::builder()
        .node(setup::NODE)
        .module("source")
        .announce(false)
        .longest_schedule_hop(Duration::from_secs(5))
        .start(connect(access.options("source", QueueType::Quorum)).await)
        .await
        .unwrap();
    let (_sink, seen) = sink(&access).await;
    let ahead = consumer_timeout * 4;
    let scheduled = schedule(&source, 20, ahead, ahead + Duration::from_secs(2)).await;
    eventually(ahead + WAIT, "every scheduled event arrives", || async {
        (arrived(&seen) >= scheduled.len()).then_some(())
    })
    .await;
    let (lateness, _) = check(&scheduled, &seen);
    let worst = lateness.last().copied().unwrap_or_default();
    eprintln!(
        "[schedule-timeout] 20 events {ahead:?} ahead: lateness p50 {:?} max {worst:?}",
        percentile(&lateness, 0.5)
    );
    // A copy held past the consumer timeout would be taken back and come back a timeout or
    // more late; on time is well under that (three times the usual lateness under load).
    assert!(worst < Duration::from_secs(5), "late by {worst:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_events_arrive_through_their_queues_leader_killed() {
    setup::init_tracing();
    let began = Instant::now();
    let cluster = shared_cluster("schedule", NodeOptions::default())
        .await
        .expect("a private RabbitMQ cluster (is rabbitmq-server installed?)");
    let rejoin = Duration::from_secs(120);
    cluster.heal(rejoin).await.unwrap();
    eprintln!(
        "[schedule-election] cluster ready after {}",
        secs(began.elapsed())
    );
    let vhost = "schedule-election";
    cluster.add_vhost(vhost).await.unwrap();
    let access = setup::cluster_access(&cluster, vhost).await.unwrap();
    // The forwarder (which also schedules) connects to node 0 first, and the operator
    // declares its schedule queue and hops connected the same way: their leaders are on
    // node 0, with the forwarder's connection. The schedule queue's delivery limit is low
    // (5, not 20): a forwarder that released due copies while their emits were nacked
    // through the election ran it down in a second and the broker dead-lettered them (the
    // watcher below counts them), which 20 showed only now and then.
    let options = access.cluster_options(&cluster, &[0, 1, 2], "source");
    let source = Bus::builder()
        .node(setup::NODE)
        .module("source")
        .announce(false)
        .forward_scheduled(true)
        .emit_deadline(Some(Duration::from_secs(30)))
        .start(connect(options.delivery_limit(DELIVERY_LIMIT)).await)
        .await
        .unwrap();
    let (sink, seen) = sink(&access).await;
    // The operator watches every dead letter (a module reads only its own queues'): a copy
    // the broker dead-lettered (the schedule queue's delivery limit) is a scheduled event
    // lost, said at once rather than as a stall.
    let watcher = Bus::builder()
        .node(setup::NODE)
        .module("watcher")
        .announce(false)
        .start(connect(setup::guest_cluster_options(&cluster, vhost)).await)
        .await
        .unwrap();
    let dead = Arc::new(AtomicUsize::new(0));
    let mut letters = watcher.all_dead_letters().await.unwrap();
    let watching = tokio::spawn({
        let dead = dead.clone();
        async move {
            while let Some(letter) = letters.next().await {
                dead.fetch_add(1, Ordering::SeqCst);
                let _ = letter.ack().await;
            }
        }
    });
    let queue = "scheduled.source.events";
    let leader = eventually(WAIT, "the schedule queue's leader", || async {
        cluster.leader_of(vhost, queue).await.ok()
    })
    .await;

    let started = Instant::now();
    let scheduled = schedule(
        &source,
        EVENTS,
        Duration::from_secs(5),
        Duration::from_secs(30),
    )
    .await;
    eprintln!(
        "[schedule-election] {EVENTS} scheduled in {}; the schedule queue's leader is node {leader}",
        secs(started.elapsed())
    );
    eventually(WAIT, "the first events arrive", || async {
        (arrived(&seen) >= 50).then_some(())
    })
    .await;
    let before = arrived(&seen);
    let killed = Instant::now();
    cluster.node(leader).kill().await.unwrap();
    let new_leader = eventually(WAIT, "a new leader of the schedule queue", || async {
        cluster
            .leader_of(vhost, queue)
            .await
            .ok()
            .filter(|n| *n != leader)
    })
    .await;
    eprintln!(
        "[schedule-election] node {leader} killed at {} ({before} arrived); node {new_leader} leads after {}",
        secs(started.elapsed()),
        secs(killed.elapsed())
    );
    cluster.start_again(&[leader]).await.unwrap();
    cluster.await_rejoined(leader, rejoin).await.unwrap();
    eprintln!(
        "[schedule-election] node {leader} back at {} ({} arrived)",
        secs(started.elapsed()),
        arrived(&seen)
    );

    // Not `eventually`: a failure says how many arrived, and how many the broker
    // dead-lettered (lost) rather than delayed.
    let all = async {
        while arrived(&seen) < EVENTS && dead.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let waited = tokio::time::timeout(DELIVER_TIMEOUT, all).await;
    let (got, lost) = (arrived(&seen), dead.load(Ordering::SeqCst));
    assert!(
        waited.is_ok() && lost == 0,
        "{got} of {EVENTS} arrived after {}; {lost} scheduled copies dead-lettered (lost)",
        secs(started.elapsed())
    );
    let (lateness, duplicates) = check(&scheduled, &seen);
    eprintln!(
        "[schedule-election] all {EVENTS} arrived by {}: none early, none lost, {duplicates} duplicates; lateness p50 {:?} p99 {:?} max {:?}; total {}",
        secs(started.elapsed()),
        percentile(&lateness, 0.5),
        percentile(&lateness, 0.99),
        lateness.last().copied().unwrap_or_default(),
        secs(began.elapsed()),
    );
    source.close().await;
    sink.close().await;
    watcher.close().await;
    watching.abort();
    assert_eq!(
        dead.load(Ordering::SeqCst),
        0,
        "scheduled copies dead-lettered"
    );
}
