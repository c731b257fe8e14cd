//! Scenario f: events waiting in the retry ladder while the node is SIGKILLed and restarted.
//!
//! Every event's first attempt fails with a retryable error, so each one waits in the first
//! retry queue (30 s), held there by the consumer's retry forwarder, when the node is killed.
//! After the restart the re-attached forwarder holds the copies for the step again and sends
//! them back through `mesh.retry` to the consumer queue, the second attempt succeeds for
//! ordinary events, and *poison* events (every tenth) fail again until
//! the policy gives up and dead-letters them. Every event must end handled or
//! dead-lettered, none lost, and each in the right one of the two.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mesh::amqp::QueueType;
use mesh::{Bus, DeadReason, HandlerError, RetryPolicy};
use mesh_faults::setup::{self, connect};
use mesh_faults::timeline::{consuming, disconnected};
use mesh_faults::{opt_secs, secs, EmitPlan, Emitter, HealthLog, Timeline};
use mesh_testkit::{eventually, Ledger, NodeOptions, PrivateNode};

/// Events emitted.
const EVENTS: usize = 1_000;
/// Every `POISON_EVERY`th event (by sequence number) fails on every attempt.
const POISON_EVERY: u64 = 10;
/// The ladder: 3 attempts, waiting 30 s then 2 s between them. The first step is long
/// enough for every copy to be seen in its retry queue before the node is killed, even with
/// other test binaries loading the machine (10 s was not: listing the queues timed out).
const MAX_ATTEMPTS: u32 = 3;
const FIRST_DELAY: Duration = Duration::from_secs(30);
const SECOND_DELAY: Duration = Duration::from_secs(2);
/// The consumer queue, `<node>.<module>.events`, whose retry queues are
/// `<queue>.retry.<step>`.
const QUEUE: &str = "faults.ladder.events";
/// Any single wait of the scenario before the fault.
const WAIT: Duration = Duration::from_secs(30);
/// How long after the restart every event may take to be handled or dead-lettered: the
/// reconnect, the rest of the first delay, the second one, and the work.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Why and after how many attempts an event was dead-lettered, as its annotations say.
type Dead = (Option<DeadReason>, Option<u32>);

fn seq_of(body: &[u8]) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()?
        .get("seq")?
        .as_u64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_in_the_retry_ladder_survive_a_broker_crash() {
    setup::init_tracing();
    let began = Instant::now();
    let node = PrivateNode::start(NodeOptions::default())
        .await
        .expect("a private RabbitMQ node (is rabbitmq-server installed?)");
    eprintln!("[f] node {} up in {}", node.name(), secs(began.elapsed()));
    let vhost = setup::vhost(&node, "retry-ladder").await.unwrap();
    // Each module connects as its own user, with exactly the access plan's permissions.
    let access = setup::access(&node, &vhost).await.unwrap();

    // The final outcome of each event (handled, or dead-lettered) goes in the ledger.
    let ledger = Ledger::new();
    let outcomes = Timeline::new();
    let first_attempts: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let handled_ok: Arc<Mutex<BTreeMap<String, (u64, u32)>>> = Arc::default();
    let calls = Arc::new(AtomicUsize::new(0));
    let policy = RetryPolicy::new(MAX_ATTEMPTS, vec![FIRST_DELAY, SECOND_DELAY]).unwrap();
    let consumer = {
        let (ledger, outcomes) = (ledger.clone(), outcomes.clone());
        let (first_attempts, handled_ok, calls) =
            (first_attempts.clone(), handled_ok.clone(), calls.clone());
        Bus::builder()
            .node("faults")
            .module("ladder")
            .prefetch(64)
            .retry(policy)
            .on_raw(["module.source.#"], move |incoming| {
                calls.fetch_add(1, Ordering::Relaxed);
                let id = incoming.meta.id().to_string();
                let attempt = incoming.meta.attempt();
                let seq = seq_of(&incoming.event);
                let outcome = match seq {
                    None => Err(HandlerError::permanent("no `seq` in the body")),
                    Some(seq) if seq % POISON_EVERY == 0 => {
                        if attempt == 1 {
                            first_attempts.lock().unwrap().insert(id);
                        }
                        Err(HandlerError::retry(format!("poison event {seq}")))
                    }
                    Some(_) if attempt == 1 => {
                        first_attempts.lock().unwrap().insert(id);
                        Err(HandlerError::retry("the first attempt always fails"))
                    }
                    Some(seq) => {
                        handled_ok
                            .lock()
                            .unwrap()
                            .insert(id.clone(), (seq, attempt));
                        ledger.handled(id);
                        outcomes.mark();
                        Ok(())
                    }
                };
                async move { outcome }
            })
            .start(connect(access.options("ladder", QueueType::Quorum)).await)
            .await
            .unwrap()
    };
    // Dead letters are the other final outcome.
    let dead: Arc<Mutex<BTreeMap<String, Dead>>> = Arc::default();
    // Watched by the operator: under the plan a module reads only its own queues' dead
    // letters, and the broker's own (the delivery limit) only the operator and the logger.
    let watcher = Bus::builder()
        .node("faults")
        .module("watcher")
        .start(connect(setup::guest_options(&node, &vhost)).await)
        .await
        .unwrap();
    let mut dead_letters = watcher.all_dead_letters().await.unwrap();
    let dead_task = {
        let (ledger, outcomes, dead) = (ledger.clone(), outcomes.clone(), dead.clone());
        tokio::spawn(async move {
            while let Some(letter) = dead_letters.next().await {
                let id = letter
                    .event_id
                    .map_or_else(|| "<no id>".to_owned(), |id| id.to_string());
                let info = letter.note.as_ref().map(|d| (d.reason, d.attempts));
                dead.lock()
                    .unwrap()
                    .insert(id.clone(), (info.map(|i| i.0), info.map(|i| i.1)));
                ledger.handled(id);
                outcomes.mark();
                let _ = letter.ack().await;
            }
        })
    };
    let health = HealthLog::start(consumer.clone());

    let source = Bus::builder()
        .node("faults")
        .module("source")
        .start(connect(access.options("source", QueueType::Quorum)).await)
        .await
        .unwrap();
    let emitter = Emitter::start(source.clone(), ledger.clone(), EmitPlan::new(EVENTS, "job"));
    emitter.wait_confirmed(EVENTS, WAIT).await.unwrap();
    let poison: BTreeSet<String> = emitter
        .ids()
        .iter()
        .enumerate()
        .filter(|(seq, _)| (*seq as u64).is_multiple_of(POISON_EVERY))
        .map(|(_, id)| id.to_string())
        .collect();

    // Every event failed its first attempt, and its copy waits in the first retry queue.
    eventually(WAIT, "a first attempt of every event", || {
        let seen = first_attempts.lock().unwrap().len();
        async move { (seen >= EVENTS).then_some(()) }
    })
    .await;
    let waiting = eventually(
        FIRST_DELAY - Duration::from_secs(2),
        "every retry copy in the first retry queue",
        || async {
            let queues = node.list_queues(&vhost).await.ok()?;
            let waiting: u64 = queues
                .iter()
                .filter(|q| q.name.starts_with(&format!("{QUEUE}.retry.")))
                .map(|q| q.messages)
                .sum();
            (waiting >= EVENTS as u64).then_some(waiting)
        },
    )
    .await;

    // The crash, with everything in the ladder.
    let fault_at = Instant::now();
    node.kill().await.unwrap();
    let down_at = Instant::now();
    node.start_again().await.unwrap();
    let up_at = Instant::now();

    let report = ledger.wait_all_handled(SETTLE_TIMEOUT).await;
    let settled_at = Instant::now();
    let dead = dead.lock().unwrap().clone();
    let handled_ok = handled_ok.lock().unwrap().clone();
    eprintln!(
        "[f] {waiting} retry copies waiting in the ladder at the kill; kill took {}, boot {}; \
         consumer noticed {} after the kill, both its consumers (events, dead letters) attached {} after boot; first final outcome {} after \
         boot, all settled {} after boot",
        secs(down_at - fault_at),
        secs(up_at - down_at),
        opt_secs(
            health
                .first_after(fault_at, disconnected)
                .map(|t| t - fault_at)
        ),
        opt_secs(health.first_after(up_at, consuming(2)).map(|t| t - up_at)),
        opt_secs(outcomes.first_after(up_at).map(|t| t - up_at)),
        secs(settled_at - up_at),
    );
    eprintln!(
        "[f] {report}; handled {} (poison {}), dead-lettered {}; handler calls {}; total {}",
        handled_ok.len(),
        poison.len(),
        dead.len(),
        calls.load(Ordering::Relaxed),
        secs(began.elapsed())
    );
    if !report.is_clean() {
        eprintln!("[f] consumer health:\n{}", health.describe(began));
        // Where the lost events are: still on the broker, or gone.
        if let Ok(queues) = node.list_queues(&vhost).await {
            for q in queues {
                eprintln!(
                    "[f] queue {}: {} messages, {} consumers",
                    q.name, q.messages, q.consumers
                );
            }
        }
    }

    report.assert_clean();
    assert_eq!(report.confirmed, EVENTS);
    // Each event in the right bin: ordinary ones handled on a retry, poison ones
    // dead-lettered for running out of attempts.
    let poison_handled: Vec<_> = handled_ok
        .keys()
        .filter(|id| poison.contains(*id))
        .collect();
    assert!(
        poison_handled.is_empty(),
        "poison events handled: {poison_handled:?}"
    );
    let wrongly_dead: Vec<_> = dead
        .iter()
        .filter(|(id, (reason, attempts))| {
            !poison.contains(*id)
                || *reason != Some(DeadReason::MaxAttempts)
                || *attempts != Some(MAX_ATTEMPTS)
        })
        .collect();
    assert!(
        wrongly_dead.is_empty(),
        "dead letters other than poison events after {MAX_ATTEMPTS} attempts: {wrongly_dead:?}"
    );
    assert!(
        handled_ok.values().all(|(_, attempt)| *attempt >= 2),
        "an ordinary event was handled without going through the ladder"
    );
    assert_eq!(dead.len(), poison.len());
    assert_eq!(handled_ok.len(), EVENTS - poison.len());

    dead_task.abort();
    consumer.close().await;
    watcher.close().await;
    source.close().await;
}
