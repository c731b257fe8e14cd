//! The `mesh-audit` binary as a process: killed with SIGKILL in the middle of ingesting, it
//! loses nothing and stores nothing twice once restarted; SIGTERM stops it gracefully with
//! exit code 0.

use std::collections::HashSet;
use std::process::Stdio;
use std::time::Duration;

use crate::common::{emitter, TempStore};
use anyhow::Context;
use mesh::Outgoing;
use mesh_audit::{EventQuery, Order, Store};
use mesh_core::EventId;
use mesh_testkit::{eventually, TestVhost};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::Child;

const TOTAL: usize = 6_000;
const WAIT: Duration = Duration::from_secs(120);

fn spawn_logger(url: &str, store: &str, log: &std::path::Path) -> anyhow::Result<Child> {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .context("opening the log file")?;
    crate::common::mesh_audit()
        .args(["run", "--node", "n1", "--store", store])
        .args(["--batch-size", "200", "--batch-wait", "50ms"])
        .env("MESH_URL", url)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .context("starting mesh-audit")
}

/// Waits until the process consumes both queues.
async fn wait_consuming(vhost: &TestVhost) {
    eventually(WAIT, "mesh-audit consuming both queues", || async {
        let queues = vhost.list_queues().await.ok()?;
        let consuming = |name: &str| queues.iter().any(|q| q.name == name && q.consumers == 1);
        (consuming("n1.audit-logger.events") && consuming("n1.audit-logger.dead")).then_some(())
    })
    .await;
}

async fn stored(store: &Store) -> u64 {
    store.counts().await.map(|c| c.events).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_logger_killed_mid_batch_loses_nothing() -> anyhow::Result<()> {
    let vhost = TestVhost::create("audit-sigkill").await?;
    let temp = TempStore::sqlite();
    let log = std::env::temp_dir().join(format!("{}.log", vhost.name()));
    let url = vhost.url();
    let mut logger = spawn_logger(&url, temp.url(), &log)?;
    wait_consuming(&vhost).await;
    // Opened once the process has migrated the schema.
    let store = Store::open(temp.url().parse()?).await?;

    let bus = emitter(&url, "n1", "load").await?;
    let emitting = {
        let bus = bus.clone();
        tokio::spawn(async move {
            let mut pending = Vec::with_capacity(TOTAL);
            for n in 0..TOTAL {
                let outgoing = Outgoing::json("tick.happened", &serde_json::json!({ "n": n }))?;
                pending.push(bus.emit_nowait(outgoing).await?);
            }
            let mut confirmed = HashSet::with_capacity(TOTAL);
            for emit in pending {
                confirmed.insert(emit.await?);
            }
            anyhow::Ok(confirmed)
        })
    };

    // Kill it once it has committed some batches, while events are still arriving.
    eventually(WAIT, "the first batches committed", || {
        let store = store.clone();
        async move { (stored(&store).await >= 500).then_some(()) }
    })
    .await;
    logger.start_kill().context("SIGKILL")?;
    let status = logger.wait().await?;
    assert!(!status.success(), "killed, not exited: {status}");
    let at_kill = stored(&store).await;
    assert!(
        (at_kill as usize) < TOTAL,
        "the logger must die before it has everything ({at_kill} stored)"
    );

    let confirmed: HashSet<EventId> = emitting.await??;
    assert_eq!(confirmed.len(), TOTAL);

    let mut logger = spawn_logger(&url, temp.url(), &log)?;
    eventually(WAIT, "every confirmed event stored", || {
        let store = store.clone();
        async move { (stored(&store).await >= TOTAL as u64).then_some(()) }
    })
    .await;
    eventually(WAIT, "the audit queue empty", || async {
        let queues = vhost.list_queues().await.ok()?;
        let queue = queues.iter().find(|q| q.name == "n1.audit-logger.events")?;
        (queue.messages == 0).then_some(())
    })
    .await;

    let rows = store
        .events(&EventQuery::new().limit(2 * TOTAL).order(Order::Asc))
        .await?;
    let ids: HashSet<EventId> = rows.iter().map(|r| r.id).collect();
    assert_eq!(rows.len(), TOTAL, "each confirmed event once");
    assert_eq!(ids, confirmed, "nothing acked without being stored");

    // SIGTERM: a graceful stop, exit code 0.
    let pid = Pid::from_raw(i32::try_from(logger.id().context("a running process")?)?);
    kill(pid, Signal::SIGTERM)?;
    let status = tokio::time::timeout(WAIT, logger.wait())
        .await
        .context("mesh-audit did not stop on SIGTERM")??;
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.success(), "exit status {status}; log:\n{output}");
    assert!(output.contains("SIGTERM"), "log:\n{output}");

    bus.drain().await?;
    store.close().await;
    let _ = std::fs::remove_file(&log);
    vhost.delete().await?;
    Ok(())
}

#[tokio::test]
async fn bad_arguments_fail_with_a_message() -> anyhow::Result<()> {
    let output = crate::common::mesh_audit()
        .args(["run", "--url", "amqp://127.0.0.1/", "--node", "a.b"])
        .env_remove("MESH_NODE")
        .output()
        .await?;
    assert_eq!(
        output.status.code(),
        Some(2),
        "an invalid node name is a usage error"
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("node name `a.b`"), "{stderr}");

    let output = crate::common::mesh_audit()
        .args(["run", "--node", "n1", "--url", "http://not-a-broker"])
        .env_remove("MESH_URL")
        .env("XDG_CONFIG_HOME", crate::common::no_config())
        .output()
        .await?;
    assert_eq!(output.status.code(), Some(2), "a usage error");
    Ok(())
}

#[tokio::test]
async fn numbers_at_their_limits_are_usage_errors() -> anyhow::Result<()> {
    const MAX: &str = "18446744073709551615";
    for (option, value, expected) in [
        ("--batch-size", MAX, "from 1 to 100000"),
        ("--batch-size", "0", "from 1 to 100000"),
        ("--batch-size", "100001", "from 1 to 100000"),
        ("--batch-wait", "3601s", "from 0ms to 1h"),
        ("--batch-wait", MAX, "e.g. 500ms"),
        ("--batch-wait", "18446744073709551616s", "e.g. 500ms"),
        ("--prefetch", "0", "from 1 to 65535"),
        ("--prefetch", "65536", "from 1 to 65535"),
        ("--metrics-addr", "127.0.0.1:65536", "invalid value"),
    ] {
        // Nothing listens on port 1: a usage error is found before connecting.
        let output = crate::common::mesh_audit()
            .args(["run", "--url", "amqp://127.0.0.1:1/", "--node", "n1"])
            .args([option, value])
            .env_remove("MESH_URL")
            .env_remove("MESH_NODE")
            .env_remove("RUST_BACKTRACE")
            .output()
            .await?;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{option} {value}: {stderr}");
        assert!(stderr.contains(expected), "{option} {value}: {stderr}");
        assert!(!stderr.contains("panicked"), "{option} {value}: {stderr}");
    }
    Ok(())
}
