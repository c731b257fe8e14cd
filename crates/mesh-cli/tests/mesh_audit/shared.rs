//! Shared audit loggers (`mesh-audit run --shared`) on a private RabbitMQ node: two logger
//! processes compete on `shared.audit-logger.events` and write into one PostgreSQL store
//! (a database of the test's own); one of them is SIGKILLed mid-run while events keep
//! arriving, and started again. Every confirmed event is stored exactly once, checked
//! against a ledger of the confirmed ids: as many rows as confirmed events, and the same
//! set of ids.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{emitter, TempStore};
use anyhow::Context;
use mesh::Outgoing;
use mesh_audit::{EventQuery, Order, Store};
use mesh_testkit::{eventually, Ledger, NodeOptions, PrivateNode};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::Child;
use tokio::sync::watch;

/// Events published, continuously, across the kill and the restart.
const TOTAL: usize = 20_000;
/// The emitter holds back past this many until the kill happened, so events are published
/// before, during and after the outage.
const BEFORE_KILL: usize = TOTAL / 2;
/// Events per burst; each burst's confirms are awaited before the next.
const BURST: usize = 250;
/// Any single wait of the scenario (a loaded two-core machine: generous).
const WAIT: Duration = Duration::from_secs(240);
/// Nothing listens there: the loggers do without the management API on the private node.
const NO_MANAGEMENT: &str = "http://127.0.0.1:1";

const EVENTS_QUEUE: &str = "shared.audit-logger.events";
const DEAD_QUEUE: &str = "shared.audit-logger.dead";

fn spawn_logger(url: &str, node: &str, store: &str, log: &std::path::Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("the log file");
    crate::common::mesh_audit()
        .args(["run", "--shared", "--node", node, "--store", store])
        .args(["--batch-size", "200", "--batch-wait", "50ms"])
        .args(["--management-url", NO_MANAGEMENT])
        .env("MESH_URL", url)
        .env_remove("MESH_MANAGEMENT_URL")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("starting mesh-audit")
}

/// Waits until `n` loggers consume both shared queues.
async fn wait_consumers(node: &PrivateNode, n: u64) {
    eventually(WAIT, "the shared loggers consuming both queues", || async {
        let queues = node.list_queues("/").await.ok()?;
        let consumers = |name: &str| {
            queues
                .iter()
                .find(|q| q.name == name)
                .map_or(0, |q| q.consumers)
        };
        (consumers(EVENTS_QUEUE) == n && consumers(DEAD_QUEUE) == n).then_some(())
    })
    .await;
}

async fn stored(store: &Store) -> u64 {
    store.counts().await.map(|c| c.events).unwrap_or(0)
}

/// Stops a logger with SIGTERM and returns the events it stored, from its last
/// `mesh-audit stopped` line (`LoggerStats { events_stored: N, … }`).
async fn stop(child: Child, log: &std::path::Path) -> u64 {
    let pid = Pid::from_raw(i32::try_from(child.id().expect("running")).expect("a pid"));
    kill(pid, Signal::SIGTERM).expect("SIGTERM");
    let output = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("stopped in time")
        .expect("an exit status");
    let text = std::fs::read_to_string(log).unwrap_or_default();
    assert_eq!(output.status.code(), Some(0), "log:\n{text}");
    let line = text
        .lines()
        .rfind(|l| l.contains("mesh-audit stopped"))
        .unwrap_or_else(|| panic!("no `mesh-audit stopped` line in:\n{text}"));
    let (_, rest) = line
        .split_once("events_stored: ")
        .unwrap_or_else(|| panic!("no events_stored in `{line}`"));
    rest.split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in `{line}`"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_shared_loggers_one_killed_store_each_event_exactly_once() -> anyhow::Result<()> {
    let began = Instant::now();
    let node = PrivateNode::start(NodeOptions::default())
        .await
        .context("a private RabbitMQ node (is rabbitmq-server installed?)")?;
    let url = node.url();
    let temp = TempStore::postgres().await?;
    let dir = mesh_testkit::TempDir::new("shared-loggers")?;
    let (log_a, log_b) = (dir.join("a.log"), dir.join("b.log"));

    let mut a = spawn_logger(&url, "n1", temp.url(), &log_a);
    let b = spawn_logger(&url, "n2", temp.url(), &log_b);
    wait_consumers(&node, 2).await;
    eprintln!(
        "[shared] node up, two loggers consuming in {:?}",
        began.elapsed()
    );
    // Opened once the loggers have migrated the schema.
    let store = Store::open(temp.url().parse()?).await?;

    let ledger = Ledger::new();
    let (killed_tx, mut killed) = watch::channel(false);
    let bus = emitter(&url, "n3", "load").await?;
    let emitting = {
        let (bus, ledger) = (bus.clone(), ledger.clone());
        tokio::spawn(async move {
            for start in (0..TOTAL).step_by(BURST) {
                if start >= BEFORE_KILL {
                    killed.wait_for(|k| *k).await.context("the test stopped")?;
                }
                let mut pending = Vec::with_capacity(BURST);
                for n in start..(start + BURST).min(TOTAL) {
                    let outgoing = Outgoing::json("tick.happened", &serde_json::json!({ "n": n }))?;
                    pending.push(bus.emit_nowait(outgoing).await?);
                }
                for emit in pending {
                    let id = emit.await?.to_string();
                    ledger.attempted(id.clone());
                    ledger.confirmed(id);
                }
            }
            anyhow::Ok(())
        })
    };

    // Kill one logger once the store holds some batches, while events keep arriving.
    eventually(WAIT, "the first batches committed", || {
        let store = store.clone();
        async move { (stored(&store).await >= 2_000).then_some(()) }
    })
    .await;
    a.start_kill().context("SIGKILL")?;
    let status = a.wait().await?;
    assert!(!status.success(), "killed, not exited: {status}");
    let at_kill = stored(&store).await;
    assert!(
        (at_kill as usize) < TOTAL,
        "the logger must die mid-run ({at_kill} stored)"
    );
    eprintln!("[shared] logger n1 SIGKILLed with {at_kill} events stored");
    killed_tx.send_replace(true);
    // The other logger carries on alone, then the killed one comes back.
    let a = spawn_logger(&url, "n1", temp.url(), &log_a);
    wait_consumers(&node, 2).await;

    emitting.await??;
    assert_eq!(ledger.report().confirmed, TOTAL, "every event confirmed");
    eventually(WAIT, "every confirmed event stored", || {
        let store = store.clone();
        async move { (stored(&store).await >= TOTAL as u64).then_some(()) }
    })
    .await;
    eventually(WAIT, "both shared queues empty", || async {
        let queues = node.list_queues("/").await.ok()?;
        let empty = |name: &str| queues.iter().any(|q| q.name == name && q.messages == 0);
        (empty(EVENTS_QUEUE) && empty(DEAD_QUEUE)).then_some(())
    })
    .await;

    // The ledger: each stored row is one handling of its id.
    let rows = store
        .events(&EventQuery::new().limit(2 * TOTAL).order(Order::Asc))
        .await?;
    for row in &rows {
        ledger.handled(row.id.to_string());
    }
    let report = ledger.report();
    report.assert_clean();
    assert_eq!(rows.len(), TOTAL, "as many rows as confirmed events");
    assert_eq!(report.handled_unique, TOTAL, "the same set of ids");
    assert_eq!(report.duplicates, 0, "no id stored twice");
    assert_eq!(stored(&store).await, TOTAL as u64);

    // Both loggers took a share after the restart (each process counts what it stored).
    let by_b = stop(b, &log_b).await;
    let by_a = stop(a, &log_a).await;
    eprintln!(
        "[shared] stored by n2 {by_b}, by n1 after its restart {by_a}, by n1 before the kill \
         the rest; total {:?}",
        began.elapsed()
    );
    assert!(by_a > 0 && by_b > 0, "n1 {by_a}, n2 {by_b}");
    assert!(by_a + by_b <= TOTAL as u64, "n1 {by_a}, n2 {by_b}");

    bus.drain().await?;
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn a_logger_on_a_node_named_shared_is_a_usage_error() -> anyhow::Result<()> {
    for extra in [&[][..], &["--shared"][..]] {
        // Nothing listens on port 1: the usage error comes before connecting.
        let output = crate::common::mesh_audit()
            .args(["run", "--url", "amqp://127.0.0.1:1/", "--node", "shared"])
            .args(extra)
            .env_remove("MESH_URL")
            .env_remove("MESH_NODE")
            .output()
            .await?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(
            stderr.contains("node name `shared` is reserved for shared queues"),
            "{extra:?}: {stderr}"
        );
    }
    Ok(())
}
