//! Scenario a: 20,000 events emitted and consumed while the broker goes away three times,
//! stopped gracefully (`rabbitmqctl stop`) or crashed (SIGKILL), on classic and on quorum
//! queues. Every confirmed event must be handled (lost = 0), nothing else may be
//! (unexpected = 0); duplicates are allowed and reported.
//!
//! The four runs share one private node, one after another (a static lock serialises them,
//! whatever the test harness's parallelism), each in a vhost of its own. Faults are timed by
//! progress, not by the clock: restart *i* begins once `i/4` of the events are confirmed, and
//! emits must resume after each restart for the run to get to the next one. The load is held
//! [`LEAD`] events ahead of the next fault until the node is down, so that a slow graceful
//! stop cannot let the whole load through before the broker goes away.

use std::time::{Duration, Instant};

use mesh::amqp::QueueType;
use mesh::{Bus, HandlerError};
use mesh_faults::setup::{self, connect};
use mesh_faults::timeline::{consuming, disconnected, ready};
use mesh_faults::{opt_secs, secs, EmitPlan, Emitter, HealthLog, Timeline};
use mesh_testkit::{shared_node, Ledger, NodeOptions};

/// Events per run.
const EVENTS: usize = 20_000;
/// Faults per run.
const RESTARTS: usize = 3;
/// How long emits may take to reach the next progress mark once the node is back up: the
/// transport's reconnect backoff plus its resend of what was unconfirmed.
const RESUME_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the consumer may take to handle every confirmed event after the last emit.
const HANDLE_TIMEOUT: Duration = Duration::from_secs(120);
/// The emit deadline (room in the window plus the confirm): longer than a restart, so a
/// publish in flight across one can still be confirmed.
const EMIT_DEADLINE: Duration = Duration::from_secs(20);
/// How far the load may run ahead of the next fault's mark before the node is down.
const LEAD: usize = EVENTS / 8;
/// The consumer's prefetch.
const PREFETCH: u16 = 128;

/// One run at a time on the one node.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[derive(Debug, Clone, Copy)]
enum Fault {
    /// `rabbitmqctl stop`: connections are closed by the broker, queues shut down cleanly.
    Stop,
    /// SIGKILL of the Erlang VM: sockets reset, nothing is flushed.
    Kill,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::Stop => "stop",
            Fault::Kill => "kill",
        }
    }
}

/// When one restart's steps happened.
#[derive(Debug)]
struct Restart {
    /// Confirmed events when it began.
    at_confirmed: usize,
    /// Confirmed events not handled yet when it began (0 if handling was ahead of the
    /// confirms the emitter had seen).
    backlog: usize,
    /// The stop or kill was called.
    fault_at: Instant,
    /// The node's processes were gone and its port closed.
    down_at: Instant,
    /// The node accepted AMQP connections again.
    up_at: Instant,
}

async fn run(fault: Fault, queue_type: QueueType) {
    let _serial = SERIAL.lock().await;
    setup::init_tracing();
    let label = format!("[a {}/{}]", fault.name(), queue_type);
    let began = Instant::now();
    let node = shared_node("restarts", NodeOptions::default())
        .await
        .expect("a private RabbitMQ node (is rabbitmq-server installed?)");
    if !node.is_running() {
        // An earlier run of this binary failed between a stop and its start.
        node.start_again()
            .await
            .expect("starting the node left down by an earlier run");
    }
    eprintln!(
        "{label} node {} ready after {}",
        node.name(),
        secs(began.elapsed())
    );
    let vhost = setup::vhost(&node, &format!("restart-{}-{}", fault.name(), queue_type))
        .await
        .expect("a vhost for the run");
    // Each module connects as its own user, with exactly the access plan's permissions.
    let access = setup::access(&node, &vhost)
        .await
        .expect("the scenarios' users on the vhost");

    // The consumer first: its queue must exist before the first event is routed.
    let ledger = Ledger::new();
    let handles = Timeline::new();
    let sink = {
        let (ledger, handles) = (ledger.clone(), handles.clone());
        Bus::builder()
            .node("faults")
            .module("sink")
            .prefetch(PREFETCH)
            .on_raw(["module.source.#"], move |incoming| {
                ledger.handled(incoming.meta.id().to_string());
                handles.mark();
                async { Ok::<(), HandlerError>(()) }
            })
            .start(connect(access.options("sink", queue_type)).await)
            .await
            .expect("starting the consumer")
    };
    let source = Bus::builder()
        .node("faults")
        .module("source")
        .emit_deadline(Some(EMIT_DEADLINE))
        .start(connect(access.options("source", queue_type)).await)
        .await
        .expect("starting the emitter's bus");
    let sink_health = HealthLog::start(sink.clone());
    let source_health = HealthLog::start(source.clone());

    let load_began = Instant::now();
    let mark = |i: usize| EVENTS * (i + 1) / (RESTARTS + 1);
    let emitter = Emitter::start(
        source.clone(),
        ledger.clone(),
        EmitPlan::new(EVENTS, "tick").limit(mark(0) + LEAD),
    );
    let mut problems: Vec<String> = Vec::new();
    let mut restarts: Vec<Restart> = Vec::new();
    for i in 0..RESTARTS {
        let mark = mark(i);
        // The first mark needs no recovery; the next ones need emits to resume after the
        // previous restart.
        if let Err(e) = emitter.wait_confirmed(mark, RESUME_TIMEOUT).await {
            problems.push(match restarts.last() {
                Some(_) => format!("emits did not resume after restart {i}: {e}"),
                None => format!("the load did not get going before the first restart: {e}"),
            });
            break;
        }
        let at_confirmed = emitter.confirmed();
        let before = ledger.report();
        let fault_at = Instant::now();
        match fault {
            Fault::Stop => node.stop().await.expect("stopping the node"),
            Fault::Kill => node.kill().await.expect("killing the node"),
        }
        let down_at = Instant::now();
        // Emits go on while the node is down, up to the next fault's mark and a lead.
        emitter.allow(if i + 1 < RESTARTS {
            EVENTS * (i + 2) / (RESTARTS + 1) + LEAD
        } else {
            EVENTS
        });
        node.start_again().await.expect("starting the node again");
        let up_at = Instant::now();
        restarts.push(Restart {
            at_confirmed,
            // An event can be handled before its emitter has seen the confirm (the broker
            // delivers while the confirm is on its way), so handled may be ahead.
            backlog: before.confirmed.saturating_sub(before.handled_unique),
            fault_at,
            down_at,
            up_at,
        });
    }
    if problems.is_empty() {
        if let Err(e) = emitter.wait_confirmed(EVENTS, RESUME_TIMEOUT).await {
            problems.push(format!(
                "emits did not all get confirmed after restart {RESTARTS}: {e}"
            ));
        }
    }
    let emitted_at = Instant::now();
    // Once something already failed, waiting the full time for handles tells nothing more.
    let handle_timeout = if problems.is_empty() {
        HANDLE_TIMEOUT
    } else {
        Duration::from_secs(15)
    };
    let report = ledger.wait_all_handled(handle_timeout).await;
    let handled_at = Instant::now();
    emitter.stop();

    let tries = emitter.tries();
    // A bus already disconnected when a fault began is odd (the load was flowing): show the
    // health logs then too.
    let mut odd_health = false;
    for (i, r) in restarts.iter().enumerate() {
        odd_health |= source_health.first_after(r.fault_at, disconnected) == Some(r.fault_at)
            || sink_health.first_after(r.fault_at, disconnected) == Some(r.fault_at);
        let since =
            |t: Option<Instant>, from: Instant| t.map(|t| t.saturating_duration_since(from));
        // Emits the broker had not confirmed when the fault began, and tries made while the
        // node was down: what the transport had to carry across the restart.
        let unconfirmed = tries
            .iter()
            .filter(|t| t.started < r.fault_at && t.resolved > r.fault_at)
            .count();
        let tried_while_down = tries
            .iter()
            .filter(|t| t.started >= r.down_at && t.started < r.up_at)
            .count();
        let next = restarts.get(i + 1).map_or(handled_at, |n| n.fault_at);
        eprintln!(
            "{label} restart {}/{RESTARTS} at {} confirmed ({unconfirmed} emits unconfirmed, \
             {} events not yet handled): {} took {}, boot {}\n\
             {label}   detected by source {} / sink {} after the fault began; \
             {tried_while_down} emit tries while down\n\
             {label}   after boot: source ready {}, sink consuming {}, first confirm {}, \
             first handle {}; connection losses before the next fault: source {} / sink {}",
            i + 1,
            r.at_confirmed,
            r.backlog,
            fault.name(),
            secs(r.down_at - r.fault_at),
            secs(r.up_at - r.down_at),
            opt_secs(since(
                source_health.first_after(r.fault_at, disconnected),
                r.fault_at
            )),
            opt_secs(since(
                sink_health.first_after(r.fault_at, disconnected),
                r.fault_at
            )),
            opt_secs(since(source_health.first_after(r.up_at, ready), r.up_at)),
            opt_secs(since(
                sink_health.first_after(r.up_at, consuming(1)),
                r.up_at
            )),
            opt_secs(since(emitter.confirms().first_after(r.up_at), r.up_at)),
            opt_secs(since(handles.first_after(r.up_at), r.up_at)),
            source_health.disconnects_between(r.fault_at, next),
            sink_health.disconnects_between(r.fault_at, next),
        );
        if unconfirmed + r.backlog == 0 {
            problems.push(format!(
                "restart {} found nothing in flight (no unconfirmed emit, no unhandled event): \
                 the scenario did not test anything",
                i + 1
            ));
        }
    }
    let longest = tries.iter().map(|t| t.waited()).max();
    eprintln!(
        "{label} {report}; {} tries for {EVENTS} events, the longest waited {} (deadline {}), \
         failed tries by kind {:?}; \
         emitting took {}, handling the rest {}; total {}",
        tries.len(),
        opt_secs(longest),
        secs(EMIT_DEADLINE),
        emitter.failures(),
        secs(emitted_at - load_began),
        secs(handled_at - emitted_at),
        secs(began.elapsed())
    );
    if !problems.is_empty() || odd_health || std::env::var_os("MESH_FAULTS_HEALTH").is_some() {
        eprintln!(
            "{label} source health:\n{}\n{label} sink health:\n{}",
            source_health.describe(load_began),
            sink_health.describe(load_began)
        );
    }
    if !report.is_clean() {
        // Where the lost events are: still on the broker, or gone.
        if let Ok(queues) = node.list_queues(&vhost).await {
            for q in queues.iter().filter(|q| !q.name.starts_with("amq.")) {
                eprintln!(
                    "{label} queue {}: {} messages, {} consumers",
                    q.name, q.messages, q.consumers
                );
            }
        }
    }

    let fatal = emitter.fatal();
    if !fatal.is_empty() {
        problems.push(format!(
            "{} emits failed with a non-retryable error, e.g. {}",
            fatal.len(),
            fatal[0]
        ));
    }
    if !report.is_clean() {
        problems.push(format!("the ledger is not clean: {report}"));
    }
    if report.confirmed != EVENTS {
        problems.push(format!("{} of {EVENTS} events confirmed", report.confirmed));
    }
    for bus in [&sink, &source] {
        let _ = tokio::time::timeout(Duration::from_secs(10), bus.close()).await;
    }
    assert!(problems.is_empty(), "{label}\n{}", problems.join("\n"));
    report.assert_clean();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_and_start_three_times_on_classic_queues() {
    run(Fault::Stop, QueueType::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stop_and_start_three_times_on_quorum_queues() {
    run(Fault::Stop, QueueType::Quorum).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_and_start_three_times_on_classic_queues() {
    run(Fault::Kill, QueueType::Classic).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_and_start_three_times_on_quorum_queues() {
    run(Fault::Kill, QueueType::Quorum).await;
}
