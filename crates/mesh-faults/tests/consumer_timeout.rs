//! Scenario i: a handler outlives the broker's consumer timeout.
//!
//! On a node with `consumer_timeout = 15 s` (checked every second), the first attempt at one
//! event takes 20 s. The broker then closes the consumer's channel and requeues the event;
//! the transport must notice the closed channel, attach the consumer again on a new one,
//! and the event must be redelivered and handled. The late first attempt's ack must not
//! land anywhere (its channel is gone), and the consumer must go on consuming afterwards.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mesh::amqp::QueueType;
use mesh::{Bus, HandlerError};
use mesh_faults::setup::{self, connect};
use mesh_faults::timeline::consuming;
use mesh_faults::{opt_secs, secs, EmitPlan, Emitter, HealthLog};
use mesh_testkit::{eventually, Ledger, NodeOptions, PrivateNode};

const CONSUMER_TIMEOUT: Duration = Duration::from_secs(15);
const TICK: Duration = Duration::from_secs(1);
/// The slow first attempt.
const SLOW: Duration = Duration::from_secs(20);
/// Events before and after the timeout; the first of the first batch is the slow one.
const BATCH: usize = 20;
/// How long the slow event may take to be handled: the timeout, a tick, the re-attach and
/// the redelivery, with room to spare on 2 cores.
const REDELIVERY_TIMEOUT: Duration = Duration::from_secs(60);
/// Any other wait.
const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Clone, Copy)]
struct Handled {
    at: Instant,
    redelivered: bool,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_timed_out_by_the_broker_is_reattached_and_the_event_redelivered() {
    setup::init_tracing();
    let began = Instant::now();
    let node = PrivateNode::start(
        NodeOptions::default()
            .consumer_timeout_ms(CONSUMER_TIMEOUT.as_millis() as u64)
            .channel_tick_interval_ms(TICK.as_millis() as u64),
    )
    .await
    .expect("a private RabbitMQ node (is rabbitmq-server installed?)");
    eprintln!("[i] node {} up in {}", node.name(), secs(began.elapsed()));
    let vhost = setup::vhost(&node, "consumer-timeout").await.unwrap();
    // Each module connects as its own user, with exactly the access plan's permissions.
    let access = setup::access(&node, &vhost).await.unwrap();

    let ledger = Ledger::new();
    let slow_taken = Arc::new(AtomicBool::new(false));
    let slow_started: Arc<Mutex<Option<(String, Instant)>>> = Arc::default();
    let slow_finished: Arc<Mutex<Option<Instant>>> = Arc::default();
    let handled: Arc<Mutex<BTreeMap<String, Handled>>> = Arc::default();
    let consumer = {
        let ledger = ledger.clone();
        let (slow_taken, slow_started, slow_finished, handled) = (
            slow_taken.clone(),
            slow_started.clone(),
            slow_finished.clone(),
            handled.clone(),
        );
        Bus::builder()
            .node("faults")
            .module("slow")
            .prefetch(8)
            .on_raw(["module.source.#"], move |incoming| {
                let id = incoming.meta.id().to_string();
                let first_of_all = !slow_taken.swap(true, Ordering::SeqCst);
                let (ledger, slow_started, slow_finished, handled) = (
                    ledger.clone(),
                    slow_started.clone(),
                    slow_finished.clone(),
                    handled.clone(),
                );
                async move {
                    if first_of_all {
                        // The fault: this attempt overruns the consumer timeout. It is not
                        // recorded as handled, since its ack cannot reach the broker.
                        *slow_started.lock().unwrap() = Some((id, Instant::now()));
                        tokio::time::sleep(SLOW).await;
                        *slow_finished.lock().unwrap() = Some(Instant::now());
                        return Ok::<(), HandlerError>(());
                    }
                    handled
                        .lock()
                        .unwrap()
                        .entry(id.clone())
                        .or_insert(Handled {
                            at: Instant::now(),
                            redelivered: incoming.meta.redelivered(),
                        });
                    ledger.handled(id);
                    Ok(())
                }
            })
            .start(connect(access.options("slow", QueueType::Quorum)).await)
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

    let first = Emitter::start(source.clone(), ledger.clone(), EmitPlan::new(BATCH, "job"));
    first.wait_confirmed(BATCH, WAIT).await.unwrap();
    let report = ledger.wait_all_handled(REDELIVERY_TIMEOUT).await;
    let slow = slow_started.lock().unwrap().clone();
    let (slow_id, slow_at) = slow.expect("the slow attempt started");
    let redelivery = handled.lock().unwrap().get(&slow_id).copied();

    // The late first attempt ends after the re-attach; its ack must not reach the new
    // channel (a stale delivery tag would make the broker close that one too), and the
    // consumer must go on consuming.
    let slow_ended = eventually(SLOW + WAIT, "the end of the slow attempt", || {
        let ended = *slow_finished.lock().unwrap();
        async move { ended }
    })
    .await;
    let second = Emitter::start(source.clone(), ledger.clone(), EmitPlan::new(BATCH, "job"));
    let second_confirmed = second.wait_confirmed(BATCH, WAIT).await;
    let final_report = ledger.wait_all_handled(WAIT).await;
    let ended_at = Instant::now();

    // The bus has one consumer: detached when none is attached (whatever the transport then
    // says it expects), back when one is.
    let missing_at = health.first_after(slow_at, |h| h.consumers_attached == 0);
    let reattached_at = missing_at.and_then(|t| health.first_after(t, consuming(1)));
    let detaches_later = reattached_at.map_or(0, |t| health.detaches_between(t, ended_at));
    eprintln!(
        "[i] slow attempt began; consumer seen detached {} later (timeout {} + tick {}), \
         re-attached {} after that; event redelivered {} after the slow attempt began \
         (redelivered flag {}); the slow attempt ended {} after it began; consumer detached \
         {detaches_later} more times after the re-attach",
        opt_secs(missing_at.map(|t| t - slow_at)),
        secs(CONSUMER_TIMEOUT),
        secs(TICK),
        opt_secs(
            missing_at
                .zip(reattached_at)
                .map(|(missing, back)| back - missing)
        ),
        opt_secs(redelivery.map(|h| h.at - slow_at)),
        redelivery.is_some_and(|h| h.redelivered),
        secs(slow_ended.saturating_duration_since(slow_at)),
    );
    eprintln!(
        "[i] after the first batch: {report}; after the second: {final_report}; total {}",
        secs(began.elapsed())
    );
    if !final_report.is_clean() {
        eprintln!("[i] consumer health:\n{}", health.describe(began));
    }

    report.assert_clean();
    let redelivery = redelivery.expect("the slow event handled");
    assert!(
        redelivery.redelivered,
        "the slow event was handled again without the redelivered flag"
    );
    assert!(
        redelivery.at - slow_at >= CONSUMER_TIMEOUT,
        "the slow event came back after {} only, before the consumer timeout",
        secs(redelivery.at - slow_at)
    );
    assert!(
        second_confirmed.is_ok(),
        "emits after the timeout: {second_confirmed:?}"
    );
    assert_eq!(
        detaches_later, 0,
        "the consumer was detached again after its re-attach (the late ack of the timed-out \
         delivery reached the new channel?)"
    );
    final_report.assert_clean();
    assert_eq!(final_report.confirmed, 2 * BATCH);
    assert_eq!(final_report.handled_unique, 2 * BATCH);

    consumer.close().await;
    source.close().await;
}
