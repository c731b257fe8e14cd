//! Scenario h: a memory alarm for 10 s while events are emitted and consumed.
//!
//! RabbitMQ blocks publishing connections during an alarm. The emitter's publishes must
//! then wait, or fail with backpressure or a timeout, *within their deadline* (never hang);
//! the consumer, whose acks travel on a connection that does not publish, must keep
//! handling and acking its backlog; once the alarm clears, publishing resumes and every
//! confirmed event is handled.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mesh::amqp::QueueType;
use mesh::{Bus, HandlerError};
use mesh_faults::setup::{self, connect};
use mesh_faults::{opt_secs, secs, EmitPlan, Emitter, HealthLog, Timeline, TryOutcome};
use mesh_testkit::{Ledger, NodeOptions, PrivateNode};

/// Events emitted before the alarm, faster than the consumer handles them: its backlog.
const PRELOAD: usize = 7_000;
/// Events emitted at a steady pace across the alarm.
const LOAD: usize = 3_000;
const LOAD_PACE: Duration = Duration::from_millis(5);
/// The publish deadline (room in the window plus the confirm), on the bus and the transport.
const DEADLINE: Duration = Duration::from_secs(5);
/// What a try may take beyond its deadline: twice the deadline again, so the bound is 3×
/// the target (the slack docs/RELIABILITY.md promises every timing assertion).
const SLACK: Duration = Duration::from_secs(10);
/// How long the alarm lasts: longer than the deadline plus its slack, so an emit that
/// ignored its deadline (and waited for the alarm to clear) still fails the bound.
const ALARM: Duration = Duration::from_secs(20);
/// The consumer's work per event until the alarm clears, and its prefetch: about 200
/// events a second, so the backlog (at least 4,000 events, 20 s of work) outlasts the alarm.
const WORK: Duration = Duration::from_millis(20);
const PREFETCH: u16 = 4;
/// The smallest backlog at the alarm for the scenario to say anything about acks.
const MIN_BACKLOG: usize = 4_500;
/// Without acks a consumer handles at most `prefetch` deliveries; this many handles during
/// the alarm show it kept acking.
const MIN_HANDLED_DURING_ALARM: usize = 25 * PREFETCH as usize;
/// Any other wait of the scenario.
const WAIT: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_alarm_blocks_publishers_within_their_deadline_and_not_consumers() {
    setup::init_tracing();
    let began = Instant::now();
    let node = PrivateNode::start(NodeOptions::default())
        .await
        .expect("a private RabbitMQ node (is rabbitmq-server installed?)");
    eprintln!("[h] node {} up in {}", node.name(), secs(began.elapsed()));
    let vhost = setup::vhost(&node, "memory-alarm").await.unwrap();
    // Each module connects as its own user, with exactly the access plan's permissions.
    let access = setup::access(&node, &vhost).await.unwrap();

    let ledger = Ledger::new();
    let handles = Timeline::new();
    let slow = Arc::new(AtomicBool::new(true));
    let sink = {
        let (ledger, handles, slow) = (ledger.clone(), handles.clone(), slow.clone());
        Bus::builder()
            .node("faults")
            .module("sink")
            .prefetch(PREFETCH)
            .on_raw(["module.source.#"], move |incoming| {
                let (ledger, handles) = (ledger.clone(), handles.clone());
                let working = slow.load(Ordering::Relaxed);
                async move {
                    if working {
                        // The handler's work (a pacing of the consumer, not a
                        // synchronisation).
                        tokio::time::sleep(WORK).await;
                    }
                    ledger.handled(incoming.meta.id().to_string());
                    handles.mark();
                    Ok::<(), HandlerError>(())
                }
            })
            .start(connect(access.options("sink", QueueType::Quorum)).await)
            .await
            .unwrap()
    };
    let source = Bus::builder()
        .node("faults")
        .module("source")
        .emit_deadline(Some(DEADLINE))
        .start(
            connect(
                access
                    .options("source", QueueType::Quorum)
                    .publish_deadline(Some(DEADLINE))
                    .confirm_window(256),
            )
            .await,
        )
        .await
        .unwrap();
    let source_health = HealthLog::start(source.clone());
    let sink_health = HealthLog::start(sink.clone());

    // A backlog for the consumer.
    let preload = Emitter::start(
        source.clone(),
        ledger.clone(),
        EmitPlan::new(PRELOAD, "preload"),
    );
    preload.wait_confirmed(PRELOAD, WAIT).await.unwrap();
    // A steady load across the alarm.
    let load = Emitter::start(
        source.clone(),
        ledger.clone(),
        EmitPlan::new(LOAD, "tick").paced(LOAD_PACE),
    );
    load.wait_confirmed(100, WAIT).await.unwrap();
    let backlog = PRELOAD + load.confirmed() - handles.len();
    assert!(
        backlog >= MIN_BACKLOG,
        "the consumer's backlog at the alarm is {backlog}, below {MIN_BACKLOG}: it would run \
         dry during the alarm and say nothing about acks"
    );

    let alarm_at = Instant::now();
    node.set_memory_alarm(true).await.unwrap();
    let alarm_set = Instant::now();
    // The fault's duration.
    tokio::time::sleep(ALARM).await;
    let clear_at = Instant::now();
    node.set_memory_alarm(false).await.unwrap();
    let cleared = Instant::now();
    slow.store(false, Ordering::Relaxed);

    let resumed = load.wait_confirmed(LOAD, WAIT).await;
    let emitted_at = Instant::now();
    let report = ledger.wait_all_handled(WAIT).await;

    // What the emits saw.
    let tries: Vec<_> = preload.tries().into_iter().chain(load.tries()).collect();
    let longest = tries.iter().max_by_key(|t| t.waited()).cloned();
    let during: Vec<_> = tries
        .iter()
        .filter(|t| t.started >= alarm_set && t.started < clear_at)
        .collect();
    let mut during_outcomes: BTreeMap<String, usize> = BTreeMap::new();
    for t in &during {
        let key = match &t.outcome {
            TryOutcome::Confirmed if t.resolved >= cleared => "confirmed after the alarm",
            TryOutcome::Confirmed => "confirmed during the alarm",
            TryOutcome::Failed { kind, .. } => kind.as_str(),
        };
        *during_outcomes.entry(key.to_owned()).or_insert(0) += 1;
    }
    let held_up = during
        .iter()
        .filter(|t| t.outcome != TryOutcome::Confirmed || t.resolved >= cleared)
        .count();
    let handled_during = handles.count_between(alarm_set, clear_at);

    eprintln!(
        "[h] alarm on (rabbitmqctl {}) for {} (cleared in {}); consumer backlog at the alarm \
         {backlog}; source health reported blocked {} after the alarm (`-`: never); sink \
         health blocked during the alarm: {}",
        secs(alarm_set - alarm_at),
        secs(clear_at - alarm_set),
        secs(cleared - clear_at),
        opt_secs(
            source_health
                .first_after(alarm_at, |h| h.blocked)
                .filter(|t| *t < cleared)
                .map(|t| t - alarm_at)
        ),
        sink_health
            .first_after(alarm_at, |h| h.blocked)
            .is_some_and(|t| t < cleared),
    );
    eprintln!(
        "[h] tries started during the alarm: {} ({during_outcomes:?}); longest try {} \
         (deadline {}, slack {}); first confirm {} after the clear; handled during the alarm \
         {handled_during}",
        during.len(),
        opt_secs(longest.as_ref().map(|t| t.waited())),
        secs(DEADLINE),
        secs(SLACK),
        opt_secs(load.confirms().first_after(cleared).map(|t| t - cleared)),
    );
    eprintln!(
        "[h] {report}; failed tries by kind {:?}; all {LOAD} paced events confirmed {} after \
         the clear; total {}",
        load.failures(),
        secs(emitted_at - cleared),
        secs(began.elapsed())
    );

    report.assert_clean();
    assert!(
        resumed.is_ok(),
        "publishing did not resume after the alarm: {resumed:?}"
    );
    assert_eq!(report.confirmed, PRELOAD + LOAD);
    let fatal: Vec<_> = preload.fatal().into_iter().chain(load.fatal()).collect();
    assert!(fatal.is_empty(), "non-retryable emit failures: {fatal:?}");
    let longest = longest.unwrap();
    assert!(
        longest.waited() <= DEADLINE + SLACK,
        "an emit waited {} for its outcome ({:?}), beyond its deadline {} + {}",
        secs(longest.waited()),
        longest.outcome,
        secs(DEADLINE),
        secs(SLACK)
    );
    assert!(
        held_up > 0,
        "no emit started during the alarm was held up by it: the alarm had no effect"
    );
    assert!(
        handled_during >= MIN_HANDLED_DURING_ALARM,
        "the consumer handled only {handled_during} events during the alarm (prefetch \
         {PREFETCH}): its acks were blocked"
    );

    sink.close().await;
    source.close().await;
}
