//! The `mesh-audit` binary with `--metrics-addr`: after known traffic (new events, a resent
//! one, a message that breaks the contract) its `/metrics` counts are exact, and `/livez`
//! and `/readyz` answer 200 while it consumes. PostgreSQL store.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use crate::common::{emitter, transport, TempStore};
use anyhow::Context;
use bytes::Bytes;
use mesh::Outgoing;
use mesh_core::{EventId, PublishOptions, Transport, WireMessage};
use mesh_testkit::http::get;
use mesh_testkit::prometheus::sample;
use mesh_testkit::{eventually, TestVhost};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::ChildStderr;
use tokio::task::JoinHandle;

const WAIT: Duration = Duration::from_secs(60);
/// New events emitted, besides the resent one.
const EVENTS: u64 = 30;

/// Reads stderr until the line `metrics on http://ADDR/metrics …` and returns ADDR; a task
/// drains the rest (so the process never blocks on a full pipe) and returns it at the end.
async fn metrics_addr(stderr: ChildStderr) -> anyhow::Result<(SocketAddr, JoinHandle<String>)> {
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = String::new();
    let addr = tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.next_line().await? {
            if let Some(rest) = line.strip_prefix("metrics on http://") {
                let addr = rest.split('/').next().unwrap_or_default();
                return Ok(Some(addr.parse::<SocketAddr>()?));
            }
            seen.push_str(&line);
            seen.push('\n');
        }
        anyhow::Ok(None)
    })
    .await
    .context("no metrics line in time")??
    .with_context(|| format!("mesh-audit printed no metrics address:\n{seen}"))?;
    let rest = tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            seen.push_str(&line);
            seen.push('\n');
        }
        seen
    });
    Ok((addr, rest))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_serves_exact_counts_and_health() -> anyhow::Result<()> {
    let vhost = TestVhost::create("audit-metrics").await?;
    let temp = TempStore::postgres().await?;
    let url = vhost.url();
    let mut logger = crate::common::mesh_audit()
        .args(["run", "--node", "n1", "--store", temp.url()])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .env("MESH_URL", &url)
        .env("RUST_LOG", "info")
        .env_remove("MESH_METRICS_ADDR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting mesh-audit")?;
    let (addr, stderr) = metrics_addr(logger.stderr.take().context("stderr piped")?).await?;

    let (status, body) = eventually(WAIT, "/readyz answering 200", || async {
        get(addr, "/readyz")
            .await
            .filter(|(status, _)| *status == 200)
    })
    .await;
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    assert_eq!(get(addr, "/livez").await, Some((200, "ok\n".to_owned())));
    // Ready means consuming both queues (the broker's own count may lag a little behind).
    eventually(WAIT, "the broker counting both consumers", || async {
        let queues = vhost.list_queues().await.ok()?;
        let consumed = |name: &str| queues.iter().any(|q| q.name == name && q.consumers == 1);
        (consumed("n1.audit-logger.events") && consumed("n1.audit-logger.dead")).then_some(())
    })
    .await;

    // Known traffic: EVENTS new events, one of them sent twice with the same id (a resend),
    // and one message without headers or a JSON body, which the logger dead-letters as
    // `undecodable` and then stores as a dead letter.
    let bus = emitter(&url, "n1", "shop").await?;
    let resent = EventId::new();
    for _ in 0..2 {
        bus.emit_outgoing(Outgoing::json("order.placed", &serde_json::json!({}))?.id(resent))
            .await?;
    }
    for n in 1..EVENTS {
        bus.emit_outgoing(mesh::Outgoing::json(
            "order.checked",
            &serde_json::json!({ "n": n }),
        )?)
        .await?;
    }
    let raw = transport(&url).await?;
    raw.publish(
        WireMessage::new(
            "module.rogue.thing.happened",
            Bytes::from_static(b"not json"),
        ),
        PublishOptions::default(),
    )
    .await?
    .await?;

    let text = eventually(WAIT, "the counters reaching the traffic", || async {
        let (status, text) = get(addr, "/metrics").await?;
        let stored = sample(&text, "mesh_audit_events_stored_total", &[])?;
        let duplicates = sample(&text, "mesh_audit_duplicates_total", &[])?;
        let dead = sample(&text, "mesh_audit_dead_letters_stored_total", &[])?;
        (status == 200 && stored >= EVENTS as f64 && duplicates >= 1.0 && dead >= 1.0)
            .then_some(text)
    })
    .await;
    let count = |name: &str, labels: &[(&str, &str)]| sample(&text, name, labels);
    assert_eq!(
        count("mesh_audit_events_stored_total", &[]),
        Some(EVENTS as f64),
        "{text}"
    );
    assert_eq!(
        count("mesh_audit_duplicates_total", &[]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        count("mesh_audit_id_conflicts_total", &[]),
        Some(0.0),
        "a resend is a duplicate, not a conflict: {text}"
    );
    assert_eq!(
        count("mesh_audit_dead_letters_stored_total", &[]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        count("mesh_audit_rejected_total", &[("reason", "undecodable")]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        count("mesh_audit_store_write_errors_total", &[]),
        None,
        "no write failed: {text}"
    );
    assert!(
        count("mesh_audit_batch_duration_seconds_count", &[]).is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert_eq!(get(addr, "/readyz").await.map(|r| r.0), Some(200));

    // SIGTERM: a graceful stop, exit code 0.
    let pid = Pid::from_raw(i32::try_from(logger.id().context("a running process")?)?);
    kill(pid, Signal::SIGTERM)?;
    let status = tokio::time::timeout(WAIT, logger.wait())
        .await
        .context("mesh-audit did not stop on SIGTERM")??;
    let log = tokio::time::timeout(WAIT, stderr).await??;
    assert!(status.success(), "exit status {status}; log:\n{log}");

    bus.drain().await?;
    Transport::close(raw.as_ref()).await;
    vhost.delete().await?;
    Ok(())
}

/// With the broker out of reach the process is live but not ready, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_broker_it_is_live_but_not_ready() -> anyhow::Result<()> {
    let temp = TempStore::sqlite();
    let mut logger = crate::common::mesh_audit()
        .args(["run", "--node", "n1", "--store", temp.url()])
        .args(["--metrics-addr", "127.0.0.1:0"])
        // Nothing listens on port 1.
        .env("MESH_URL", "amqp://guest:guest@127.0.0.1:1/%2F")
        .env("RUST_LOG", "info")
        .env_remove("MESH_METRICS_ADDR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .context("starting mesh-audit")?;
    let (addr, stderr) = metrics_addr(logger.stderr.take().context("stderr piped")?).await?;

    let (status, body) = eventually(WAIT, "/readyz naming the broker", || async {
        get(addr, "/readyz")
            .await
            .filter(|(_, body)| body.contains("connecting to the broker"))
    })
    .await;
    assert_eq!(status, 503, "{body}");
    assert!(body.starts_with("not ready\naudit logger: "), "{body}");
    assert_eq!(get(addr, "/livez").await, Some((200, "ok\n".to_owned())));

    let pid = Pid::from_raw(i32::try_from(logger.id().context("a running process")?)?);
    kill(pid, Signal::SIGTERM)?;
    let status = tokio::time::timeout(WAIT, logger.wait())
        .await
        .context("mesh-audit did not stop on SIGTERM")??;
    let log = tokio::time::timeout(WAIT, stderr).await??;
    assert!(status.success(), "exit status {status}; log:\n{log}");
    Ok(())
}
