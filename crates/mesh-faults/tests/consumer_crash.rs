//! Scenario e: a consumer process is SIGKILLed while its handler runs; the events it held
//! unacknowledged are redelivered to a new consumer and handled.
//!
//! The consumer is the `faults-consumer` binary of this crate, in a process of its own: it
//! announces `handling <id>` on stdout as each handler starts and then blocks, so the test
//! kills it at a moment when deliveries are certainly in flight.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mesh::amqp::QueueType;
use mesh::Bus;
use mesh_faults::setup::{self, connect, Login};
use mesh_faults::{opt_secs, secs, EmitPlan, Emitter, Timeline};
use mesh_testkit::{Ledger, NodeOptions, PrivateNode};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// Events emitted; more than the child's prefetch, so some wait in the queue while it holds
/// the others.
const EVENTS: usize = 50;
/// The child's prefetch: how many deliveries it holds when it dies.
const CHILD_PREFETCH: u16 = 8;
/// Any single wait of the scenario.
const WAIT: Duration = Duration::from_secs(30);

/// The next line of the child's stdout, within [`WAIT`].
async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>, what: &str) -> String {
    match tokio::time::timeout(WAIT, lines.next_line()).await {
        Ok(Ok(Some(line))) => line,
        Ok(Ok(None)) => panic!("the consumer process closed stdout while waiting for {what}"),
        Ok(Err(e)) => panic!("reading the consumer's stdout while waiting for {what}: {e}"),
        Err(_) => panic!("timed out after {WAIT:?} waiting for {what} from the consumer"),
    }
}

fn spawn_consumer(login: &Login) -> Child {
    Command::new(env!("CARGO_BIN_EXE_faults-consumer"))
        .args([
            login.url(),
            "quorum",
            "faults",
            "worker",
            "module.source.#",
            &CHILD_PREFETCH.to_string(),
        ])
        .envs(login.env())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawning faults-consumer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_killed_mid_handler_has_its_events_redelivered() {
    setup::init_tracing();
    let began = Instant::now();
    let node = PrivateNode::start(NodeOptions::default())
        .await
        .expect("a private RabbitMQ node (is rabbitmq-server installed?)");
    eprintln!("[e] node {} up in {}", node.name(), secs(began.elapsed()));
    let vhost = setup::vhost(&node, "consumer-crash").await.unwrap();
    // Each module connects as its own user, with exactly the access plan's permissions; the
    // child process too.
    let access = setup::access(&node, &vhost).await.unwrap();

    // 1. The doomed consumer: its handler blocks on every event.
    let mut child = spawn_consumer(&access.login("worker"));
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert_eq!(next_line(&mut lines, "`ready`").await, "ready");

    // 2. Emit while it consumes.
    let ledger = Ledger::new();
    let source = Bus::builder()
        .node("faults")
        .module("source")
        .start(connect(access.options("source", QueueType::Quorum)).await)
        .await
        .unwrap();
    let emitter = Emitter::start(source.clone(), ledger.clone(), EmitPlan::new(EVENTS, "job"));
    emitter.wait_confirmed(EVENTS, WAIT).await.unwrap();

    // 3. Once a handler started, SIGKILL the process.
    let first = next_line(&mut lines, "a `handling <id>` line").await;
    assert!(first.starts_with("handling "), "unexpected line {first:?}");
    let killed_at = Instant::now();
    child.start_kill().expect("sending SIGKILL to the consumer");
    let status = tokio::time::timeout(WAIT, child.wait())
        .await
        .expect("the consumer died in time")
        .unwrap();
    assert_eq!(
        status.signal(),
        Some(9),
        "the consumer should have died of SIGKILL, not {status:?}"
    );
    // Everything it said before it died: the events whose handlers had started.
    let mut in_flight: BTreeSet<String> = BTreeSet::new();
    in_flight.insert(first["handling ".len()..].to_owned());
    while let Ok(Ok(Some(line))) = tokio::time::timeout(WAIT, lines.next_line()).await {
        if let Some(id) = line.strip_prefix("handling ") {
            in_flight.insert(id.to_owned());
        }
    }
    assert!(
        !in_flight.is_empty() && in_flight.len() <= usize::from(CHILD_PREFETCH),
        "the dead consumer held {} deliveries, expected 1..={CHILD_PREFETCH}",
        in_flight.len()
    );

    // 4. A new consumer on the same queue handles everything, the held events redelivered.
    let handles = Timeline::new();
    let replacement_at = Instant::now();
    let redelivered: Arc<Mutex<BTreeMap<String, bool>>> = Arc::default();
    let worker = {
        let (ledger, handles, redelivered) = (ledger.clone(), handles.clone(), redelivered.clone());
        Bus::builder()
            .node("faults")
            .module("worker")
            .on_raw(["module.source.#"], move |incoming| {
                let id = incoming.meta.id().to_string();
                redelivered
                    .lock()
                    .unwrap()
                    .entry(id.clone())
                    .or_insert(incoming.meta.redelivered());
                ledger.handled(id);
                handles.mark();
                async { Ok(()) }
            })
            .start(connect(access.options("worker", QueueType::Quorum)).await)
            .await
            .unwrap()
    };
    let report = ledger.wait_all_handled(WAIT).await;
    let redelivered = redelivered.lock().unwrap().clone();
    let not_redelivered: Vec<&String> = in_flight
        .iter()
        .filter(|id| redelivered.get(*id) != Some(&true))
        .collect();

    eprintln!(
        "[e] consumer SIGKILLed holding {} deliveries (prefetch {CHILD_PREFETCH}); {report}",
        in_flight.len()
    );
    eprintln!(
        "[e] kill → process reaped and its stdout read: {}; new consumer started → first \
         handle: {}; kill → all {EVENTS} handled: {}; duplicates {}; total {}",
        secs(replacement_at - killed_at),
        opt_secs(
            handles
                .first_after(replacement_at)
                .map(|t| t - replacement_at)
        ),
        secs(killed_at.elapsed()),
        report.duplicates,
        secs(began.elapsed())
    );
    report.assert_clean();
    assert_eq!(report.confirmed, EVENTS);
    assert_eq!(report.handled_unique, EVENTS);
    assert!(
        not_redelivered.is_empty(),
        "events the dead consumer held came back without the redelivered flag (or not at \
         all): {not_redelivered:?}"
    );
    worker.close().await;
    source.close().await;
}
