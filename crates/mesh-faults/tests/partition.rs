//! Network partitions: a three-node cluster whose nodes each run in a network
//! namespace of their own (`mesh_testkit::netns`), with `cluster_partition_handling =
//! pause_minority` and `net_ticktime` 5 s. A *cut* takes one node's inter-node link down while
//! its client link stays up: the node hears nothing from the other two, clients still reach it.
//!
//! 1. The node the emitting client is connected to is cut into the minority: nothing is confirmed through it while it is cut off, it pauses, the
//!    client moves to the majority and carries on, and after the heal nothing confirmed is lost.
//! 2. The node the audit logger consumes on is cut while the logger holds a batch: the store
//!    ends up with every confirmed event exactly once.
//! 3. A flapping partition: the node is cut and healed every few seconds for a minute (cuts
//!    shorter and longer than the tick time); afterwards the cluster is whole and the ledger
//!    balances.
//! 4. The node that leads the consumer's quorum queue, and holds the emitting client's
//!    connection, is cut: every try of the client ends, confirmed or failed, within 3× its
//!    publish deadline and a failed one is tried again (bounded); nothing is lost.
//!
//! Each scenario forms a cluster of its own (~30 s) and removes it at its end; they take turns
//! ([`SERIAL`]), as three clusters at once would not fit two cores.
//!
//! *No confirm during the isolation* is checked on a second emitting client, *pinned* to the
//! isolated node (its only address): every one of its tries went through that node, so a try
//! that began after the cut and was confirmed before the heal would be a confirm the minority
//! gave alone, which quorum queues must never do. The check counts the pinned client's tries
//! begun during the isolation and fails if there were none (it would prove nothing). Scenario 1
//! runs it too on a classic queue on the isolated node, which must fail it (a classic queue
//! confirms alone): the control that shows the check can fail.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use mesh::{Bus, HandlerError};
use mesh_faults::emitter::{bounded_tries, longest_emits};
use mesh_faults::setup::{self, connect, Access};
use mesh_faults::{
    secs, timeline, worker, EmitPlan, Emitter, HealthLog, Timeline, Try, TryOutcome, Worker,
};
use mesh_testkit::netns::{NetnsCluster, NetnsOptions};
use mesh_testkit::ClusterHarness;
use mesh_testkit::{eventually, Ledger};

/// One scenario (one cluster) at a time.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The nodes' `net_ticktime`: a cut node sees the others down 5–6.25 s after the cut.
const NET_TICKTIME: u32 = 5;
/// How long a cut node may take to pause: 3× the worst detection (6.25 s), rounded up.
const PAUSE_LIMIT: Duration = Duration::from_secs(20);
/// How long a healed node may take to resume and the cluster to be whole again.
const WHOLE: Duration = Duration::from_secs(180);
/// Any single wait for progress of the load.
const WAIT: Duration = Duration::from_secs(90);
/// How long the consumers may take to handle every confirmed event after the heal.
const HANDLE_TIMEOUT: Duration = Duration::from_secs(180);
/// How long a cut lasts in scenarios 1 and 2 (the fault itself, not a synchronisation): well
/// past the pause, so the clients work on the majority for a while.
const ISOLATION: Duration = Duration::from_secs(20);
/// The pinned client's emit deadline: its tries through a paused node end, and are retried.
const PINNED_DEADLINE: Duration = Duration::from_secs(5);
/// The queue of the consumer module `sink` (`<node>.<module>.events`).
const SINK_QUEUE: &str = "faults.sink.events";
/// The audit logger's queue.
const AUDIT_QUEUE: &str = "faults.audit-logger.events";

async fn cluster(tag: &str) -> NetnsCluster {
    let began = Instant::now();
    let cluster = NetnsCluster::start(NetnsOptions::default().net_ticktime(NET_TICKTIME))
        .await
        .expect("a network-namespace RabbitMQ cluster (root, iproute2 and rabbitmq-server needed)");
    eprintln!(
        "[{tag}] cluster {} formed in {}",
        cluster.base_name(),
        secs(began.elapsed())
    );
    cluster
}

/// A consumer bus of module `sink` (quorum queue, prefetch 128) on the nodes in `order`,
/// recording every handle.
async fn sink(cluster: &NetnsCluster, order: &[usize], access: &Access, ledger: &Ledger) -> Bus {
    let ledger = ledger.clone();
    Bus::builder()
        .node(setup::NODE)
        .module("sink")
        .prefetch(128)
        .on_raw(["module.source.#"], move |incoming| {
            ledger.handled(incoming.meta.id().to_string());
            async { Ok::<(), HandlerError>(()) }
        })
        .start(connect(access.options_at(&cluster.addrs_in_order(order), "sink")).await)
        .await
        .expect("starting the consumer")
}

/// An emitting bus of module `module` on the nodes in `order`, its connections named
/// `<name>.publish`/`<name>.consume`.
async fn emitter_bus(
    cluster: &NetnsCluster,
    order: &[usize],
    access: &Access,
    module: &str,
    name: &str,
    deadline: Option<Duration>,
) -> Bus {
    let options = access
        .options_at(&cluster.addrs_in_order(order), module)
        .connection_name(name);
    let mut builder = Bus::builder().node(setup::NODE).module(module);
    if deadline.is_some() {
        builder = builder.emit_deadline(deadline);
    }
    builder
        .start(connect(options).await)
        .await
        .expect("starting an emitting bus")
}

/// How long a healed node may take to resume before it is looked at for RabbitMQ's stuck
/// resume.
const RESUME: Duration = Duration::from_secs(60);

/// What RabbitMQ 3.10.8 on Erlang 25.1 and later logs when a paused node's resume hangs in
/// `global` after the heal (rabbitmq-server#6034, fixed after 3.10.8 by pull request #6046).
const STUCK_RESUME: &str = "The global_name_server received an unexpected message";

/// Waits until node `victim` listens again after the heal; fails with what it says.
///
/// A node that has not resumed within [`RESUME`] and whose log shows RabbitMQ's stuck
/// resume ([`STUCK_RESUME`]) is restarted, as an operator would, once, and the test says
/// so: the bug is the broker's, and the scenario's books (lost, unexpected, confirms during
/// the isolation, the store) are checked all the same. Any other failure to resume fails.
async fn resumed(cluster: &NetnsCluster, victim: usize) -> Instant {
    let e = match cluster.await_listening(victim, RESUME).await {
        Ok(at) => return at,
        Err(e) => e,
    };
    let log = std::fs::read_to_string(cluster.log_file(victim)).unwrap_or_default();
    if !log.contains(STUCK_RESUME) {
        panic!(
            "{e:#}\n{}\n{}",
            cluster.diagnostics(victim, 40).await,
            cluster.diagnostics((victim + 1) % 3, 15).await
        );
    }
    eprintln!(
        "[partition] node {victim} did not resume within {} and its log shows RabbitMQ's stuck \
         resume (rabbitmq-server#6034): restarting it",
        secs(RESUME)
    );
    cluster
        .restart(victim)
        .await
        .unwrap_or_else(|e| panic!("restarting node {victim}: {e:#}"));
    match cluster.await_listening(victim, WHOLE).await {
        Ok(at) => at,
        Err(e) => panic!(
            "{e:#}\n{}\n{}",
            cluster.diagnostics(victim, 40).await,
            cluster.diagnostics((victim + 1) % 3, 15).await
        ),
    }
}

/// Waits until the cluster is whole again; fails with what the nodes say.
async fn whole(cluster: &NetnsCluster, victim: usize) {
    if let Err(e) = cluster.await_whole(WHOLE).await {
        panic!(
            "{e:#}\n{}\n{}",
            cluster.diagnostics(victim, 40).await,
            cluster.diagnostics((victim + 1) % 3, 15).await
        );
    }
}

/// The tries that began at or after `from` and were confirmed before `to`.
fn confirmed_within(tries: &[Try], from: Instant, to: Instant) -> Vec<&Try> {
    tries
        .iter()
        .filter(|t| t.started >= from && t.resolved < to && t.outcome == TryOutcome::Confirmed)
        .collect()
}

/// How many tries began in `[from, to)`.
fn begun_within(tries: &[Try], from: Instant, to: Instant) -> usize {
    tries
        .iter()
        .filter(|t| t.started >= from && t.started < to)
        .count()
}

/// The node the connection named `name` is on, as the majority lists it.
async fn node_of(cluster: &NetnsCluster, name: &str) -> usize {
    eventually(WAIT, &format!("the connection {name}"), || async {
        cluster.node_of_connection(name).await.ok().flatten()
    })
    .await
}

/// Waits until the connection named `name` is listed on another node than `from`; returns
/// that node.
async fn moved_off(cluster: &NetnsCluster, name: &str, from: usize) -> usize {
    eventually(
        WAIT,
        &format!("the connection {name} on another node than {from}"),
        || async {
            let on = cluster.node_of_connection(name).await.ok()??;
            (on != from).then_some(on)
        },
    )
    .await
}

/// Waits until node `observer` is no longer connected to node `gone` (Erlang's `nodes()`, read
/// with `rabbitmqctl eval`: `cluster_status` would wait on the unreachable node); returns when
/// that was seen.
async fn seen_down_by(cluster: &NetnsCluster, observer: usize, gone: usize) -> Instant {
    let gone = format!("'{}'", cluster.name(gone));
    eventually(
        PAUSE_LIMIT * 2,
        "the majority seeing the cut node down",
        || async {
            let out = cluster
                .rabbitmqctl(observer, &["eval", "nodes()."])
                .await
                .ok()?;
            (!out.contains(&gone)).then(Instant::now)
        },
    )
    .await
}

/// Events of the roaming client in scenario 1, and its pace.
const MINORITY_EVENTS: usize = 4_000;
const MINORITY_PACE: Duration = Duration::from_millis(10);
/// Events of the pinned client (through the isolated node only), and its pace.
const PINNED_EVENTS: usize = 1_200;
const PINNED_PACE: Duration = Duration::from_millis(25);
/// The pinned client's events tried before the cut: it holds the rest back until the cut
/// (`Emitter::allow`), so it still tries through the isolation however long the wait for the
/// cut's moment takes (the rest, 900 at its pace, outlasts the isolation).
const PINNED_BEFORE_CUT: usize = 300;
/// Events of the control (a classic queue on the isolated node), and its pace.
const CONTROL_EVENTS: usize = 1_200;

/// 1. The node the emitting clients are connected to is cut into the minority for 20 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_clients_node_cut_into_the_minority_confirms_nothing_and_the_client_moves() {
    let _serial = SERIAL.lock().await;
    setup::init_tracing();
    let began = Instant::now();
    let cluster = cluster("p1").await;
    let vhost = "minority";
    cluster.add_vhost(vhost).await.unwrap();
    let access = setup::netns_access(&cluster, vhost).await.unwrap();
    let victim = 0;

    // The emitting clients start on the victim: the roaming one is given every node with the
    // victim first, the pinned one the victim only. The consumer starts on node 1, so its quorum
    // queue's leader is on the majority (see "Network partitions" in docs/RELIABILITY.md on a
    // leader on the cut node). The control: a classic queue on the victim, fed by a pinned client of
    // module `press`.
    let ledger = Ledger::new();
    let sink = sink(&cluster, &[1, 2, 0], &access, &ledger).await;
    let control_ledger = Ledger::new();
    let control_sink = {
        let ledger = control_ledger.clone();
        let options = access
            .options_at(&cluster.addrs_in_order(&[victim]), "crowd")
            .queue_type(mesh::amqp::QueueType::Classic);
        Bus::builder()
            .node(setup::NODE)
            .module("crowd")
            .on_raw(["module.press.#"], move |incoming| {
                ledger.handled(incoming.meta.id().to_string());
                async { Ok::<(), HandlerError>(()) }
            })
            .start(connect(options).await)
            .await
            .unwrap()
    };
    let roaming_bus = emitter_bus(&cluster, &[0, 1, 2], &access, "source", "source", None).await;
    let pinned_bus = emitter_bus(
        &cluster,
        &[victim],
        &access,
        "source",
        "pinned",
        Some(PINNED_DEADLINE),
    )
    .await;
    let control_bus = emitter_bus(
        &cluster,
        &[victim],
        &access,
        "press",
        "control",
        Some(PINNED_DEADLINE),
    )
    .await;
    let roaming_health = HealthLog::start(roaming_bus.clone());
    let leader = cluster.quorum_queues(vhost).await.unwrap();
    let leader = leader
        .iter()
        .find(|q| q.name == SINK_QUEUE)
        .and_then(|q| q.leader);
    let roaming = Emitter::start(
        roaming_bus.clone(),
        ledger.clone(),
        EmitPlan::new(MINORITY_EVENTS, "tick").paced(MINORITY_PACE),
    );
    let pinned = Emitter::start(
        pinned_bus.clone(),
        ledger.clone(),
        EmitPlan::new(PINNED_EVENTS, "pinned")
            .paced(PINNED_PACE)
            .limit(PINNED_BEFORE_CUT),
    );
    let control = Emitter::start(
        control_bus.clone(),
        control_ledger.clone(),
        EmitPlan::new(CONTROL_EVENTS, "control").paced(PINNED_PACE),
    );
    roaming.wait_confirmed(300, WAIT).await.unwrap();
    pinned.wait_confirmed(100, WAIT).await.unwrap();
    control.wait_confirmed(100, WAIT).await.unwrap();
    let roaming_on = node_of(&cluster, "source.publish").await;
    assert_eq!(
        roaming_on, victim,
        "the roaming client starts on the victim"
    );

    // The cut. The majority's view is read through node 1 (about one `rabbitmqctl` a second).
    let confirmed_at_cut = roaming.confirmed();
    cluster.cut(victim).unwrap();
    // From here on the link is down: a try begun later cannot reach the majority.
    let cut_at = Instant::now();
    pinned.allow(PINNED_EVENTS);
    let (paused_at, seen_down_at) = tokio::join!(
        cluster.await_paused(victim, PAUSE_LIMIT),
        seen_down_by(&cluster, 1, victim)
    );
    let paused_at = paused_at.unwrap();
    let moved_to = moved_off(&cluster, "source.publish", victim).await;
    let moved_seen_at = Instant::now();
    let confirmed_at_pause = roaming.confirmed();
    if let Err(e) = roaming.wait_confirmed(confirmed_at_pause + 100, WAIT).await {
        panic!(
            "the roaming client did not go on on the majority: {e}\nqueues: {:?}\nmembers of \
             {SINK_QUEUE}: {:?}",
            cluster.quorum_queues(vhost).await,
            cluster.quorum_status(vhost, SINK_QUEUE).await
        );
    }
    // The partition lasts ISOLATION, whatever the clients do.
    tokio::time::sleep(ISOLATION.saturating_sub(cut_at.elapsed())).await;
    let heal_at = Instant::now();
    cluster.heal(victim).unwrap();
    let resumed_at = resumed(&cluster, victim).await;
    whole(&cluster, victim).await;
    let whole_at = Instant::now();

    for (what, emitter) in [
        ("roaming", &roaming),
        ("pinned", &pinned),
        ("control", &control),
    ] {
        emitter
            .wait_confirmed(emitter.count(), HANDLE_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("the {what} client did not finish: {e}"));
    }
    let report = ledger.wait_all_handled(HANDLE_TIMEOUT).await;
    // The control is not asserted on (a classic queue gives no guarantee here): a short wait.
    let control_report = control_ledger
        .wait_all_handled(Duration::from_secs(30))
        .await;
    cluster.await_queues_in_sync(vhost, WHOLE).await.unwrap();
    let drained = cluster.await_drained(vhost, WAIT).await;

    let pinned_tries = pinned.tries();
    let pinned_false = confirmed_within(&pinned_tries, cut_at, heal_at);
    let pinned_begun = begun_within(&pinned_tries, cut_at, heal_at);
    let control_tries = control.tries();
    let control_false = confirmed_within(&control_tries, cut_at, heal_at);
    let control_begun = begun_within(&control_tries, cut_at, heal_at);
    // The roaming client was on the victim until its first disconnect after the cut.
    let left_at = roaming_health
        .first_after(cut_at, timeline::disconnected)
        .expect("the roaming client was disconnected after the cut");
    let roaming_tries = roaming.tries();
    let roaming_false = confirmed_within(&roaming_tries, cut_at, left_at);
    let roaming_on_majority = roaming.confirms().count_between(paused_at, heal_at);
    let first_after_pause = roaming.confirms().first_after(paused_at);
    let (longest_emit, longest_try) = longest_emits(&roaming_tries);
    eprintln!(
        "[p1] queue {SINK_QUEUE} led by node {leader:?}; cut node {victim} at {confirmed_at_cut} confirmed: it \
         paused {} after the cut (node 1 saw it down {} after), the roaming client was \
         disconnected {} after the cut and listed on node {moved_to} {} after; its first confirm \
         after the pause came {} later, {roaming_on_majority} confirms on the majority during \
         the isolation",
        secs(paused_at - cut_at),
        secs(seen_down_at - cut_at),
        secs(left_at - cut_at),
        secs(moved_seen_at - cut_at),
        first_after_pause.map_or_else(
            || "-".to_owned(),
            |t| secs(t.saturating_duration_since(paused_at))
        ),
    );
    eprintln!(
        "[p1] healed {} after the cut: node {victim} resumed {} after the heal (paused {}), the \
         cluster whole {} after the heal",
        secs(heal_at - cut_at),
        secs(resumed_at - heal_at),
        secs(resumed_at - paused_at),
        secs(whole_at - heal_at),
    );
    eprintln!(
        "[p1] confirms through the isolated node during the isolation: pinned {} of {pinned_begun} \
         tries begun, roaming {} (before it left); control on a classic queue there: {} of \
         {control_begun} (expected > 0: the check can fail)",
        pinned_false.len(),
        roaming_false.len(),
        control_false.len(),
    );
    eprintln!(
        "[p1] longest emit {} (longest try {}); failures roaming {:?}, pinned {:?}; queues \
         drained {}; {report}; control {control_report}; total {}",
        secs(longest_emit),
        secs(longest_try),
        roaming.failures(),
        pinned.failures(),
        drained
            .as_ref()
            .map_or_else(|e| format!("NOT: {e:#}"), |d| format!("in {}", secs(*d))),
        secs(began.elapsed())
    );
    report.assert_clean();
    assert_eq!(report.confirmed, MINORITY_EVENTS + PINNED_EVENTS);
    assert!(roaming.fatal().is_empty(), "{:?}", roaming.fatal());
    assert!(pinned.fatal().is_empty(), "{:?}", pinned.fatal());
    assert!(
        pinned_begun > 0,
        "the pinned client tried nothing during the isolation"
    );
    assert!(
        pinned_false.is_empty(),
        "{} tries through the isolated node were confirmed during its isolation: {:?}",
        pinned_false.len(),
        pinned_false.first()
    );
    assert!(
        roaming_false.is_empty(),
        "{} tries of the roaming client were confirmed on the isolated node",
        roaming_false.len()
    );
    assert!(
        !control_false.is_empty(),
        "the control (a classic queue on the isolated node) got no confirm during the isolation: \
         the check may be blind ({control_begun} tries begun)"
    );
    assert!(paused_at - cut_at <= PAUSE_LIMIT);
    assert_ne!(moved_to, victim);
    assert!(roaming_on_majority > 0);
    drained.unwrap();
    for bus in [roaming_bus, pinned_bus, control_bus, sink, control_sink] {
        bus.close().await;
    }
}

/// Events of the audit scenario, and their pace.
const AUDIT_EVENTS: usize = 4_000;
const AUDIT_PACE: Duration = Duration::from_millis(5);

/// 2. The node the audit logger (a process of its own, SQLite store) consumes on is cut while
/// the logger holds a batch (deliveries it has not acknowledged yet).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_during_the_audit_loggers_batch_loses_and_doubles_nothing() {
    let _serial = SERIAL.lock().await;
    setup::init_tracing();
    let began = Instant::now();
    let cluster = cluster("p2").await;
    let vhost = "audit";
    cluster.add_vhost(vhost).await.unwrap();
    let access = setup::netns_access(&cluster, vhost).await.unwrap();
    let victim = 0;

    let login = access.login_at(
        &cluster.addrs_in_order(&[0, 1, 2]),
        mesh::raw::naming::AUDIT_MODULE,
    );
    let temp = mesh_testkit::TempStore::sqlite();
    let store_url = temp.url().to_owned();
    let args = ["audit", login.url(), setup::NODE, store_url.as_str()];
    let mut logger =
        Worker::spawn_with_env(env!("CARGO_BIN_EXE_faults-worker"), &args, &login.env()).unwrap();
    logger.ready(WAIT).await.unwrap();
    let logger_on = node_of(&cluster, "mesh-audit.consume").await;
    assert_eq!(logger_on, victim, "the logger starts on the victim");
    eventually(WAIT, "the audit logger's queue", || async {
        let queues = cluster.quorum_queues(vhost).await.ok()?;
        queues.iter().any(|q| q.name == AUDIT_QUEUE).then_some(())
    })
    .await;

    let ledger = Ledger::new();
    let roaming_bus = emitter_bus(&cluster, &[1, 2, 0], &access, "source", "source", None).await;
    let pinned_bus = emitter_bus(
        &cluster,
        &[victim],
        &access,
        "source",
        "pinned",
        Some(PINNED_DEADLINE),
    )
    .await;
    let roaming = Emitter::start(
        roaming_bus.clone(),
        ledger.clone(),
        EmitPlan::new(AUDIT_EVENTS, "audited").paced(AUDIT_PACE),
    );
    let pinned = Emitter::start(
        pinned_bus.clone(),
        ledger.clone(),
        EmitPlan::new(PINNED_EVENTS, "pinned")
            .paced(PINNED_PACE)
            .limit(PINNED_BEFORE_CUT),
    );
    roaming.wait_confirmed(500, WAIT).await.unwrap();
    pinned.wait_confirmed(100, WAIT).await.unwrap();

    // The cut comes while the logger holds deliveries it has not stored and acknowledged yet.
    let held = eventually(WAIT, "the audit logger holding a batch", || async {
        let n = cluster.unacked(vhost, AUDIT_QUEUE).await.ok()?;
        (n > 0).then_some(n)
    })
    .await;
    cluster.cut(victim).unwrap();
    // From here on the link is down: a try begun later cannot reach the majority.
    let cut_at = Instant::now();
    pinned.allow(PINNED_EVENTS);
    let paused_at = cluster.await_paused(victim, PAUSE_LIMIT).await.unwrap();
    let logger_moved_to = moved_off(&cluster, "mesh-audit.consume", victim).await;
    let logger_moved_seen = Instant::now();
    tokio::time::sleep(ISOLATION.saturating_sub(cut_at.elapsed())).await;
    let heal_at = Instant::now();
    cluster.heal(victim).unwrap();
    let resumed_at = resumed(&cluster, victim).await;
    whole(&cluster, victim).await;
    let whole_at = Instant::now();
    for (what, emitter) in [("roaming", &roaming), ("pinned", &pinned)] {
        emitter
            .wait_confirmed(emitter.count(), HANDLE_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("the {what} client did not finish: {e}"));
    }
    cluster.await_queues_in_sync(vhost, WHOLE).await.unwrap();
    let drained = cluster.await_drained(vhost, HANDLE_TIMEOUT).await;
    let status = logger.finish(WAIT).await.unwrap();
    let stopped_line = logger.next_line(WAIT).await.ok().flatten();

    let store = mesh_audit::Store::open(mesh_audit::StoreOptions::url(&store_url).unwrap())
        .await
        .unwrap();
    let total = AUDIT_EVENTS + PINNED_EVENTS;
    let rows = store
        .events(&mesh_audit::EventQuery::new().limit(total * 2))
        .await
        .unwrap();
    let counted = store
        .count_events(&mesh_audit::EventQuery::new())
        .await
        .unwrap();
    store.close().await;
    let ids: BTreeSet<String> = rows.iter().map(|r| r.id.to_string()).collect();
    for id in &ids {
        ledger.handled(id.clone());
    }
    let report = ledger.report();
    let pinned_tries = pinned.tries();
    let pinned_false = confirmed_within(&pinned_tries, cut_at, heal_at);
    let pinned_begun = begun_within(&pinned_tries, cut_at, heal_at);
    eprintln!(
        "[p2] cut node {victim} while the logger held {held} unacknowledged deliveries: it paused \
         {} after the cut; the logger consumed on node {logger_moved_to} {} after the cut; healed \
         {} after the cut, node {victim} resumed {} later (paused {}), whole {} after the heal",
        secs(paused_at - cut_at),
        secs(logger_moved_seen - cut_at),
        secs(heal_at - cut_at),
        secs(resumed_at - heal_at),
        secs(resumed_at - paused_at),
        secs(whole_at - heal_at),
    );
    eprintln!(
        "[p2] pinned confirms during the isolation: {} of {pinned_begun} tries begun; drained {}; \
         logger {} ({stopped_line:?}); store: {} rows, {} distinct ids, count {counted}; against \
         the ledger: {report}; total {}",
        pinned_false.len(),
        drained
            .as_ref()
            .map_or_else(|e| format!("NOT: {e:#}"), |d| format!("in {}", secs(*d))),
        worker::describe(&status),
        rows.len(),
        ids.len(),
        secs(began.elapsed())
    );
    report.assert_clean();
    assert_eq!(report.confirmed, total);
    assert_eq!(rows.len(), ids.len(), "an event is stored twice");
    assert_eq!(counted, rows.len() as u64);
    assert!(roaming.fatal().is_empty(), "{:?}", roaming.fatal());
    assert!(pinned.fatal().is_empty(), "{:?}", pinned.fatal());
    assert!(
        pinned_begun > 0,
        "the pinned client tried nothing during the isolation"
    );
    assert!(
        pinned_false.is_empty(),
        "{} tries through the isolated node were confirmed during its isolation",
        pinned_false.len()
    );
    assert_ne!(logger_moved_to, victim);
    drained.unwrap();
    roaming_bus.close().await;
    pinned_bus.close().await;
}

/// The flapping schedule: (cut, heal) durations, repeated for [`FLAPPING_FOR`]. The short cut
/// is under the tick time (the nodes only see a stall), the long one over its worst detection
/// (6.25 s: the node pauses, then resumes after the heal).
const FLAPS: [(Duration, Duration); 2] = [
    (Duration::from_secs(2), Duration::from_secs(3)),
    (Duration::from_secs(9), Duration::from_secs(3)),
];
const FLAPPING_FOR: Duration = Duration::from_secs(60);
/// Events of the roaming client in the flapping scenario, and their pace.
const FLAPPING_EVENTS: usize = 6_000;
const FLAPPING_PACE: Duration = Duration::from_millis(10);

/// 3. A flapping partition: the node the clients start on is cut and healed every few seconds
/// for a minute.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flapping_partition_for_a_minute_then_the_ledger_balances() {
    let _serial = SERIAL.lock().await;
    setup::init_tracing();
    let began = Instant::now();
    let cluster = cluster("p3").await;
    let vhost = "flapping";
    cluster.add_vhost(vhost).await.unwrap();
    let access = setup::netns_access(&cluster, vhost).await.unwrap();
    let victim = 0;

    let ledger = Ledger::new();
    let sink = sink(&cluster, &[1, 2, 0], &access, &ledger).await;
    let roaming_bus = emitter_bus(&cluster, &[0, 1, 2], &access, "source", "source", None).await;
    let pinned_bus = emitter_bus(
        &cluster,
        &[victim],
        &access,
        "source",
        "pinned",
        Some(PINNED_DEADLINE),
    )
    .await;
    let roaming = Emitter::start(
        roaming_bus.clone(),
        ledger.clone(),
        EmitPlan::new(FLAPPING_EVENTS, "tick").paced(FLAPPING_PACE),
    );
    let pinned = Emitter::start(
        pinned_bus.clone(),
        ledger.clone(),
        EmitPlan::new(PINNED_EVENTS * 2, "pinned").paced(PINNED_PACE),
    );
    roaming.wait_confirmed(300, WAIT).await.unwrap();
    pinned.wait_confirmed(100, WAIT).await.unwrap();

    // Watch the victim's listener every 50 ms: its pauses.
    let pauses = Timeline::new();
    let resumes = Timeline::new();
    let watch = {
        let (pauses, resumes) = (pauses.clone(), resumes.clone());
        let addr = cluster.addr(victim);
        tokio::spawn(async move {
            let mut listening = true;
            loop {
                let now = matches!(
                    tokio::time::timeout(
                        Duration::from_secs(1),
                        tokio::net::TcpStream::connect(addr)
                    )
                    .await,
                    Ok(Ok(_))
                );
                if now != listening {
                    if now {
                        resumes.mark();
                    } else {
                        pauses.mark();
                    }
                    listening = now;
                }
                // The watcher's sampling interval.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    // The flapping: a fixed schedule, the fault itself.
    let flapping_began = Instant::now();
    let mut windows: Vec<(Instant, Instant)> = Vec::new();
    'flap: loop {
        for (cut_for, heal_for) in FLAPS {
            if flapping_began.elapsed() >= FLAPPING_FOR {
                break 'flap;
            }
            cluster.cut(victim).unwrap();
            let cut_at = Instant::now();
            tokio::time::sleep(cut_for).await;
            let heal_at = Instant::now();
            cluster.heal(victim).unwrap();
            windows.push((cut_at, heal_at));
            tokio::time::sleep(heal_for).await;
        }
    }
    let flapping_ended = Instant::now();
    let resumed_at = resumed(&cluster, victim).await;
    whole(&cluster, victim).await;
    let whole_at = Instant::now();
    for (what, emitter) in [("roaming", &roaming), ("pinned", &pinned)] {
        emitter
            .wait_confirmed(emitter.count(), HANDLE_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("the {what} client did not finish: {e}"));
    }
    let report = ledger.wait_all_handled(HANDLE_TIMEOUT).await;
    cluster.await_queues_in_sync(vhost, WHOLE).await.unwrap();
    let drained = cluster.await_drained(vhost, WAIT).await;
    watch.abort();

    let pinned_tries = pinned.tries();
    let mut pinned_false = 0;
    let mut pinned_begun = 0;
    for &(from, to) in &windows {
        pinned_false += confirmed_within(&pinned_tries, from, to).len();
        pinned_begun += begun_within(&pinned_tries, from, to);
    }
    let roaming_tries = roaming.tries();
    let (longest_emit, longest_try) = longest_emits(&roaming_tries);
    let cut_total: Duration = windows.iter().map(|(a, b)| *b - *a).sum();
    // Each cut the victim paused in: how long after the cut, and how long after the heal it
    // listened again.
    let mut detected = Vec::new();
    let mut resumed = Vec::new();
    for &(cut_at, heal_at) in &windows {
        if let Some(paused) = pauses.first_after(cut_at).filter(|p| *p < heal_at) {
            detected.push(secs(paused - cut_at));
            if let Some(back) = resumes.first_after(paused) {
                resumed.push(secs(back.saturating_duration_since(heal_at)));
            }
        }
    }
    eprintln!(
        "[p3] {} cuts in {} (cut {} in all; schedule {FLAPS:?}); the victim paused {} times \
         ({detected:?} after the cut), resumed {} times ({resumed:?} after the heal); after the \
         last heal: listening {} later, whole {} later",
        windows.len(),
        secs(flapping_ended - flapping_began),
        secs(cut_total),
        pauses.len(),
        resumes.len(),
        secs(resumed_at.saturating_duration_since(flapping_ended)),
        secs(whole_at - flapping_ended),
    );
    eprintln!(
        "[p3] pinned confirms during the cuts: {pinned_false} of {pinned_begun} tries begun; \
         roaming: longest emit {} (longest try {}), failures {:?}; pinned failures {:?}; \
         drained {}; {report}; total {}",
        secs(longest_emit),
        secs(longest_try),
        roaming.failures(),
        pinned.failures(),
        drained
            .as_ref()
            .map_or_else(|e| format!("NOT: {e:#}"), |d| format!("in {}", secs(*d))),
        secs(began.elapsed())
    );
    report.assert_clean();
    assert_eq!(report.confirmed, FLAPPING_EVENTS + PINNED_EVENTS * 2);
    assert!(roaming.fatal().is_empty(), "{:?}", roaming.fatal());
    assert!(pinned.fatal().is_empty(), "{:?}", pinned.fatal());
    assert!(
        pinned_begun > 0,
        "the pinned client tried nothing during the cuts"
    );
    assert_eq!(
        pinned_false, 0,
        "tries through the isolated node were confirmed during its isolation"
    );
    assert!(
        !pauses.is_empty(),
        "the victim never paused: no cut was long enough to be seen"
    );
    drained.unwrap();
    for bus in [roaming_bus, pinned_bus, sink] {
        bus.close().await;
    }
}

/// Events of scenario 4, their pace and the emitting client's publish deadline.
const LEADER_EVENTS: usize = 3_000;
const LEADER_PACE: Duration = Duration::from_millis(10);
const LEADER_DEADLINE: Duration = Duration::from_secs(5);
/// How long the roaming client of scenario 4 may go without a confirm on the majority after
/// it left the cut node: 3× the transport's 10 s limit for a stuck publishing channel (7.4 s
/// measured, docs/RELIABILITY.md, p4).
const LEADER_RECOVERY: Duration = Duration::from_secs(30);

/// What each channel on a node holds of its quorum queue clients (`rabbit_fifo_client`
/// states: leader, queue status, slow, pending commands, a timer set), or, for a channel too
/// busy to tell, where it is (its stack), for scenario 4's probe.
const QUEUE_CLIENTS: &str = "W = fun W(T) when is_tuple(T), tuple_size(T) =:= 11, \
    element(1, T) =:= state, is_tuple(element(2, T)), element(1, element(2, T)) =:= cfg -> \
    [{element(3, T), element(4, T), element(7, T), maps:size(element(9, T)), \
    element(11, T) =/= undefined}]; W(T) when is_tuple(T) -> W(tuple_to_list(T)); \
    W(M) when is_map(M) -> W(maps:values(M)); W([H | R]) -> W(H) ++ W(R); W(_) -> [] end, \
    [case catch sys:get_state(P, 1000) of {'EXIT', _} -> \
    {P, busy, erlang:process_info(P, current_stacktrace)}; S -> {P, W(S)} end \
    || P <- rabbit_channel:list_local()].";

/// 4. The node that leads the consumer's quorum queue, and holds the emitting client's
/// connection, is cut into the minority: nothing is lost, everything is confirmed in the end,
/// and every try (those on the majority during the cut included) ends, confirmed or failed,
/// within 3× its deadline, a failed one tried again; when the client's publishes are
/// confirmed on the majority again is reported against [`LEADER_RECOVERY`] (the broker's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_queue_leader_loses_nothing_and_the_publisher_resumes() {
    let _serial = SERIAL.lock().await;
    setup::init_tracing();
    let began = Instant::now();
    let cluster = cluster("p4").await;
    let vhost = "leader";
    cluster.add_vhost(vhost).await.unwrap();
    let access = setup::netns_access(&cluster, vhost).await.unwrap();
    let victim = 0;

    // The consumer declares its quorum queue through the victim, so the victim leads it
    // (`client-local` leader placement); checked.
    let ledger = Ledger::new();
    let sink = sink(&cluster, &[victim, 1, 2], &access, &ledger).await;
    let leader = eventually(WAIT, "the sink queue's leader", || async {
        let queues = cluster.quorum_queues(vhost).await.ok()?;
        queues.iter().find(|q| q.name == SINK_QUEUE)?.leader
    })
    .await;
    assert_eq!(leader, victim, "the victim leads the consumer's queue");
    let bus = emitter_bus(
        &cluster,
        &[victim, 1, 2],
        &access,
        "source",
        "source",
        Some(LEADER_DEADLINE),
    )
    .await;
    let health = HealthLog::start(bus.clone());
    let roaming = Emitter::start(
        bus.clone(),
        ledger.clone(),
        EmitPlan::new(LEADER_EVENTS, "led").paced(LEADER_PACE),
    );
    roaming.wait_confirmed(300, WAIT).await.unwrap();
    assert_eq!(node_of(&cluster, "source.publish").await, victim);

    cluster.cut(victim).unwrap();
    let cut_at = Instant::now();
    let paused_at = cluster.await_paused(victim, PAUSE_LIMIT).await.unwrap();
    let moved_to = moved_off(&cluster, "source.publish", victim).await;
    let left_at = health
        .first_after(cut_at, timeline::disconnected)
        .expect("the client was disconnected after the cut");
    // While no confirm came on the majority, what the node the client moved to holds of its
    // channel's queue client, about every 3 s (for the figures: why it waits).
    let at_move = roaming.confirmed();
    let mut probes = 0;
    while roaming.confirms().first_after(left_at).is_none() && probes < 8 {
        probes += 1;
        let probe = cluster
            .rabbitmqctl(moved_to, &["eval", QUEUE_CLIENTS])
            .await;
        let connections = cluster
            .rabbitmqctl(moved_to, &["list_connections", "name", "state"])
            .await;
        eprintln!(
            "[p4] {} after the client left, no confirm on the majority yet; its channels' queue \
             clients {{leader, status, slow, pending, timer}} or stacks: {probe:?}; connections: \
             {connections:?}",
            secs(left_at.elapsed())
        );
        let _ = roaming
            .wait_confirmed(at_move + 1, Duration::from_secs(3))
            .await;
    }
    // The partition lasts until the client got 100 confirms on the majority, or gave up
    // waiting for them, and at least ISOLATION.
    let mut on_majority = roaming
        .wait_confirmed(at_move + 100, LEADER_RECOVERY / 2)
        .await;
    if on_majority.is_err() {
        let connections = cluster
            .rabbitmqctl(moved_to, &["list_connections", "name", "state"])
            .await;
        let channels = cluster
            .rabbitmqctl(
                moved_to,
                &["list_channels", "name", "state", "messages_unconfirmed"],
            )
            .await;
        eprintln!(
            "[p4] no confirm on the majority {} after the move; connections: {connections:?}; \
             channels: {channels:?}; queues: {:?}",
            secs(left_at.elapsed()),
            cluster.quorum_queues(vhost).await
        );
        on_majority = roaming.wait_confirmed(at_move + 100, WAIT).await;
    }
    tokio::time::sleep(ISOLATION.saturating_sub(cut_at.elapsed())).await;
    let heal_at = Instant::now();
    cluster.heal(victim).unwrap();
    let resumed_at = resumed(&cluster, victim).await;
    whole(&cluster, victim).await;
    roaming
        .wait_confirmed(LEADER_EVENTS, HANDLE_TIMEOUT)
        .await
        .unwrap_or_else(|e| panic!("the client did not finish: {e}"));
    let report = ledger.wait_all_handled(HANDLE_TIMEOUT).await;
    cluster.await_queues_in_sync(vhost, WHOLE).await.unwrap();
    let drained = cluster.await_drained(vhost, WAIT).await;

    let first_on_majority = roaming.confirms().first_after(left_at);
    let recovery = first_on_majority.map(|t| t.saturating_duration_since(left_at));
    let (longest_emit, longest_try) = longest_emits(&roaming.tries());
    let stats = bus.transport_stats();
    eprintln!(
        "[p4] queue {SINK_QUEUE} led by node {leader}; cut: the node paused {} after, the client \
         left it {} after and was listed on node {moved_to}; first confirm on the majority {} \
         after it left ({on_majority:?}); healed {} after the cut, resumed {} later, whole {} \
         after the heal",
        secs(paused_at - cut_at),
        secs(left_at - cut_at),
        mesh_faults::opt_secs(recovery),
        secs(heal_at - cut_at),
        secs(resumed_at - heal_at),
        secs(Instant::now() - heal_at),
    );
    eprintln!(
        "[p4] longest emit {} (longest try {}, deadline {}); failures {:?}; stats {stats:?}; \
         drained {}; {report}; total {}",
        secs(longest_emit),
        secs(longest_try),
        secs(LEADER_DEADLINE),
        roaming.failures(),
        drained
            .as_ref()
            .map_or_else(|e| format!("NOT: {e:#}"), |d| format!("in {}", secs(*d))),
        secs(began.elapsed())
    );
    report.assert_clean();
    assert_eq!(report.confirmed, LEADER_EVENTS);
    assert!(roaming.fatal().is_empty(), "{:?}", roaming.fatal());
    // Bounded: each try, those made on the majority while the queue's leader was cut off
    // included, ended as a confirm or a retryable failure within 3× its deadline, and each
    // failed one was tried again until confirmed (a try is recorded once it ends; all are).
    let tries = roaming.tries();
    let bounds = bounded_tries(&tries, LEADER_DEADLINE * 3)
        .unwrap_or_else(|e| panic!("a try was not bounded by its deadline: {e}"));
    let on_majority_cut: Vec<&Try> = tries
        .iter()
        .filter(|t| t.started >= left_at && t.started < heal_at)
        .collect();
    let cut_confirmed = on_majority_cut
        .iter()
        .filter(|t| t.outcome == TryOutcome::Confirmed);
    eprintln!(
        "[p4] bounded: {bounds:?}; begun on the majority during the cut: {}, {} confirmed",
        on_majority_cut.len(),
        cut_confirmed.count()
    );
    assert!(
        !on_majority_cut.is_empty(),
        "no try during the cut: it proves nothing"
    );
    // Not asserted: when the first confirm on the majority comes is the broker's. RabbitMQ
    // 3.10 holds a channel's first publish to a quorum queue in a call to the leader its
    // queue record names, and a replacement channel's first publish in the same call, until
    // the record names the new leader: 7.4 s in two runs, 186.5 s (the whole cut) in a CI
    // run. Meanwhile each try fails at its deadline and is retried (asserted above).
    if recovery.is_none_or(|r| r > LEADER_RECOVERY) {
        eprintln!(
            "[p4] NOTE: the first confirm on the majority came {} after the client left the \
             cut node (wanted {})",
            mesh_faults::opt_secs(recovery),
            secs(LEADER_RECOVERY)
        );
    }
    drained.unwrap();
    bus.close().await;
    sink.close().await;
}
