//! The emit spool: a bus whose emits are kept in a SQLite file and published from it.
//!
//! - Acceptance (`spool_ledger`): a child process emits 5,000 events through a spool while the
//!   broker (a private node: the shared one is never stopped) is down, every emit returning
//!   `Ok`; it is SIGKILLed; the broker comes back; a second child opens the same file and
//!   publishes. Every event must reach the consumer with the id its emit returned (lost 0);
//!   duplicates are reported. The child is this test binary again, running this same test
//!   with `CHILD_ENV` set; it talks to the parent over its stdin and stdout.
//! - One spool at a time has a file open: another, in the same process (here) or another
//!   (the ledger's parent while its child lives), is refused with `ErrorKind::InUse`; a
//!   dropped or killed holder lets the next open it.
//! - A full spool fails an emit with a typed error and keeps whole what it kept before; the
//!   bound is read back from the file.
//! - On the embedded broker: emits through a spool arrive in order with their ids, and
//!   `drain` publishes what the spool holds before the bus closes.

mod common;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::PATIENCE;
use futures::{StreamExt, TryStreamExt};
use mesh::{Bus, EmitSpool, ErrorKind, EventId, Incoming, MemoryBroker, Outgoing};
use mesh_outbox::{RelayOptions, Spool, SpoolOptions};
use mesh_testkit::{sdk, Ledger, NodeOptions, PrivateNode, TempDir};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::ChildStdout;

/// Set in a child: `<spool file> <broker URL> <emit|relay>`.
const CHILD_ENV: &str = "MESH_SPOOL_CHILD";
/// This test's name, for the child's filter.
const LEDGER_TEST: &str = "spool_ledger";
const EVENTS: usize = 5_000;
/// Emits in flight at once in the child, so the spool's writer groups them.
const IN_FLIGHT: usize = 64;

/// A relay that retries soon after the broker refused a round.
fn relay_options() -> RelayOptions {
    RelayOptions::default()
        .retry_delay(Duration::from_millis(200))
        .publish_deadline(Some(Duration::from_secs(2)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spool_ledger() -> anyhow::Result<()> {
    match std::env::var(CHILD_ENV) {
        Ok(config) => child(&config).await,
        Err(_) => parent().await,
    }
}

/// Marks the child's words on its stdout, which the test harness writes to as well (its
/// `test spool_ledger ... ` has no newline until the test ends).
const MARK: &str = "spool-child: ";

/// A line to the parent, straight to the process's stdout (not the test harness's capture).
fn say(line: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{MARK}{line}")?;
    out.flush()?;
    Ok(())
}

async fn child(config: &str) -> anyhow::Result<()> {
    let mut words = config.split(' ');
    let (Some(path), Some(amqp), Some(mode)) = (words.next(), words.next(), words.next()) else {
        anyhow::bail!("{CHILD_ENV} needs a spool file, a broker URL and a mode");
    };
    let spool = Spool::open(path, SpoolOptions::default().relay(relay_options())).await?;
    let bus = Bus::builder()
        .node("n1")
        .module("spooly")
        .spool(spool.clone())
        .start(sdk::transport(amqp).await?)
        .await?;
    if mode == "relay" {
        let emptied = || async { (spool.pending_bytes() == 0).then_some(()) };
        mesh_testkit::eventually(Duration::from_secs(180), "the spool to empty", emptied).await;
        bus.drain().await?;
        return Ok(());
    }
    say("ready")?;
    // The parent stops the broker, then says go.
    let go = tokio::task::spawn_blocking(|| {
        let mut go = String::new();
        std::io::stdin().read_line(&mut go).map(|_| go)
    })
    .await??;
    anyhow::ensure!(go.trim() == "go", "expected `go`, got {go:?}");
    let bus = &bus;
    let ids: Vec<EventId> = futures::stream::iter(0..EVENTS)
        .map(|n| async move {
            bus.emit_outgoing(Outgoing::json("written", &serde_json::json!({ "n": n }))?)
                .await
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect()
        .await?;
    for id in &ids {
        say(&format!("id {id}"))?;
    }
    say("done")?;
    // Killed here by the parent.
    std::future::pending::<()>().await;
    Ok(())
}

/// The child's next word on stdout (the harness's own output skipped).
async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>) -> anyhow::Result<String> {
    loop {
        match tokio::time::timeout(PATIENCE, lines.next_line()).await {
            Ok(Ok(Some(line))) => match line.rsplit_once(MARK) {
                Some((_, word)) => return Ok(word.to_owned()),
                None => continue,
            },
            Ok(Ok(None)) => anyhow::bail!("the emitting child ended early"),
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => anyhow::bail!("the emitting child said nothing for {PATIENCE:?}"),
        }
    }
}

fn spawn_child(path: &str, amqp: &str, mode: &str) -> anyhow::Result<tokio::process::Child> {
    Ok(tokio::process::Command::new(std::env::current_exe()?)
        .args([LEDGER_TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, format!("{path} {amqp} {mode}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?)
}

async fn parent() -> anyhow::Result<()> {
    let node = PrivateNode::start(NodeOptions::default().heartbeat(2)).await?;
    let dir = TempDir::new("spool-ledger")?;
    let file = dir.join("events.spool");
    let path = file
        .to_str()
        .ok_or_else(|| anyhow::anyhow!("a non-UTF-8 path"))?;
    let ledger = Ledger::new();
    let handled = ledger.clone();
    let sink = Bus::builder()
        .node("n1")
        .module("sink")
        .prefetch(256)
        .on_raw(["module.spooly.#"], move |e: Incoming<Bytes>| {
            handled.handled(e.meta.id().to_string());
            async { Ok(()) }
        })
        .start(sdk::transport(&node.url()).await?)
        .await?;

    let mut writer = spawn_child(path, &node.url(), "emit")?;
    let mut stdin = writer
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdin"))?;
    let mut lines = BufReader::new(
        writer
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?,
    )
    .lines();
    let ready = next_line(&mut lines).await?;
    anyhow::ensure!(ready == "ready", "expected `ready`, got {ready:?}");
    node.stop().await?;
    let go = Instant::now();
    stdin.write_all(b"go\n").await?;
    stdin.flush().await?;
    let mut kept = 0;
    loop {
        let line = next_line(&mut lines).await?;
        if line == "done" {
            break;
        }
        if let Some(id) = line.strip_prefix("id ") {
            // Kept by the spool: from now on it must arrive.
            ledger.attempted(id);
            ledger.confirmed(id);
            kept += 1;
        }
    }
    let emitted_in = go.elapsed();
    assert_eq!(
        kept, EVENTS,
        "every emit returned an id while the broker was down"
    );
    // The child holds the file: another process's spool is refused, and touches nothing.
    let refused = Spool::open(&file, SpoolOptions::default())
        .await
        .expect_err("the file is the living child's");
    assert_eq!(refused.kind(), &mesh_outbox::ErrorKind::InUse, "{refused}");
    writer.start_kill()?;
    writer.wait().await?;
    assert_eq!(
        ledger.report().handled_unique,
        0,
        "nothing can have been delivered while the broker was down"
    );

    node.start_again().await?;
    let restarted = Instant::now();
    let mut relay = spawn_child(path, &node.url(), "relay")?;
    let report = ledger.wait_all_handled(Duration::from_secs(180)).await;
    let delivered_in = restarted.elapsed();
    let status = tokio::time::timeout(Duration::from_secs(180), relay.wait()).await??;
    sink.drain().await?;
    eprintln!(
        "spool ledger: {kept} kept while the broker was down (in {emitted_in:.1?}), {} \
         delivered after the restart in {delivered_in:.1?} (from the second process's spawn, \
         the broker up again), {} duplicates",
        report.handled_unique, report.duplicates
    );
    report.assert_clean();
    assert_eq!(report.handled_unique, EVENTS);
    assert!(status.success(), "the relaying child failed: {status}");
    Ok(())
}

/// Every event a module `sink` on the embedded broker receives under `pattern`: ids in order.
async fn sink(
    broker: &MemoryBroker,
    pattern: &str,
) -> anyhow::Result<(Bus, Arc<Mutex<Vec<String>>>)> {
    let received = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&received);
    let bus = Bus::builder()
        .node("n1")
        .module("sink")
        .prefetch(1)
        .on_raw([pattern], move |e: Incoming<Bytes>| {
            let id = e.meta.id().to_string();
            record.lock().unwrap_or_else(|e| e.into_inner()).push(id);
            async { Ok(()) }
        })
        .start(Arc::new(broker.transport()))
        .await?;
    Ok((bus, received))
}

fn ids(received: &Mutex<Vec<String>>) -> Vec<String> {
    received.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

#[tokio::test]
async fn emits_through_a_spool_arrive_in_order_with_their_ids() -> anyhow::Result<()> {
    let broker = MemoryBroker::new();
    let (consumer, received) = sink(&broker, "module.shop.#").await?;
    let dir = TempDir::new("spool-happy")?;
    let spool = Spool::open(dir.join("shop.spool"), SpoolOptions::default()).await?;
    let shop = Bus::builder()
        .node("n1")
        .module("shop")
        .spool(spool.clone())
        .start(Arc::new(broker.transport()))
        .await?;

    let mut sent = Vec::new();
    for n in 0..30 {
        let outgoing = Outgoing::json("order.placed", &serde_json::json!({ "n": n }))?;
        let id = match n % 3 {
            0 => shop.emit_outgoing(outgoing).await?,
            // Resolves at once: the spool kept it when `emit_nowait` returned.
            1 => shop.emit_nowait(outgoing).await?.await?,
            _ => {
                let chosen = EventId::new();
                let id = shop.emit_outgoing(outgoing.id(chosen)).await?;
                assert_eq!(id, chosen);
                id
            }
        };
        sent.push(id.to_string());
    }
    mesh_testkit::eventually(PATIENCE, "the spooled events", || {
        let got = ids(&received);
        async move { (got.len() >= 30).then_some(()) }
    })
    .await;
    assert_eq!(ids(&received), sent, "in the order kept, with their ids");
    mesh_testkit::eventually(PATIENCE, "the spool to empty", || {
        let spool = spool.clone();
        async move {
            let counts = spool.counts().await.ok()?;
            (counts.pending == 0 && spool.pending_bytes() == 0).then_some(())
        }
    })
    .await;

    // Kept while the bus runs, published by its drain.
    let last = shop
        .emit_outgoing(Outgoing::json(
            "order.placed",
            &serde_json::json!({ "n": 30 }),
        )?)
        .await?;
    shop.drain().await?;
    assert_eq!(
        spool.counts().await?.pending,
        0,
        "drain published what was kept"
    );
    mesh_testkit::eventually(PATIENCE, "the event kept before the drain", || {
        let got = ids(&received);
        async move { got.contains(&last.to_string()).then_some(()) }
    })
    .await;
    let refused = shop
        .emit_outgoing(Outgoing::json("order.placed", &1)?)
        .await
        .expect_err("a drained bus takes no emit");
    assert_eq!(refused.kind(), &ErrorKind::Closed);
    consumer.drain().await?;
    Ok(())
}

#[tokio::test]
async fn a_full_spool_refuses_with_a_typed_error_and_keeps_what_it_kept() -> anyhow::Result<()> {
    let broker = MemoryBroker::new();
    let dir = TempDir::new("spool-full")?;
    let file = dir.join("shop.spool");
    const LIMIT: u64 = 4096;
    let options = || SpoolOptions::default().max_bytes(LIMIT);

    // Kept straight into a spool no bus started: nothing publishes them yet.
    let shop = Bus::builder()
        .node("n1")
        .module("shop")
        .start(Arc::new(broker.transport()))
        .await?;
    let spool = Spool::open(&file, options()).await?;
    let mut kept = Vec::new();
    let full = loop {
        let body = serde_json::json!({ "n": kept.len(), "pad": "x".repeat(300) });
        let prepared = shop.prepare_emit(Outgoing::json("order.placed", &body)?)?;
        let id = prepared.id();
        match spool.keep(prepared).await {
            Ok(()) => kept.push(id.to_string()),
            Err(e) => break e,
        }
        assert!(
            kept.len() < 100,
            "a 4 KiB spool took 100 events of 300 bytes"
        );
    };
    assert_eq!(full.kind(), &ErrorKind::SpoolFull { limit_bytes: LIMIT });
    assert!(full.is_retryable(), "a full spool may have room later");
    assert!(!kept.is_empty());
    let bytes = spool.pending_bytes();
    assert!(bytes <= LIMIT, "{bytes} bytes counted against {LIMIT}");
    assert_eq!(
        spool.counts().await?.pending,
        kept.len() as u64,
        "the refused one left no row"
    );
    shop.drain().await?;
    drop(spool);

    // Through a bus: the same typed error.
    let tiny = Spool::open(dir.join("tiny.spool"), SpoolOptions::default().max_bytes(1)).await?;
    let bus = Bus::builder()
        .node("n1")
        .module("shop")
        .spool(tiny)
        .start(Arc::new(broker.transport()))
        .await?;
    let refused = bus
        .emit_outgoing(Outgoing::json("order.placed", &1)?)
        .await
        .expect_err("an event does not fit in one byte");
    assert_eq!(refused.kind(), &ErrorKind::SpoolFull { limit_bytes: 1 });
    bus.close().await;

    // Opened again, the spool counts from the file what it holds, and is as full.
    let (consumer, received) = sink(&broker, "module.shop.#").await?;
    let again = Spool::open(&file, options()).await?;
    assert_eq!(
        again.pending_bytes(),
        bytes,
        "the bound's count is read from the file"
    );
    let shop = Bus::builder()
        .node("n1")
        .module("shop")
        .spool(again.clone())
        .start(Arc::new(broker.transport()))
        .await?;
    // Nothing of what was kept is lost: the relay publishes all of it, in order.
    mesh_testkit::eventually(PATIENCE, "the kept events", || {
        let got = ids(&received);
        let want = kept.len();
        async move { (got.len() >= want).then_some(()) }
    })
    .await;
    assert_eq!(ids(&received), kept);
    mesh_testkit::eventually(PATIENCE, "room in the spool", || {
        let again = again.clone();
        async move { (again.pending_bytes() == 0).then_some(()) }
    })
    .await;
    shop.emit_outgoing(Outgoing::json("order.placed", &"room again")?)
        .await?;
    shop.drain().await?;
    consumer.drain().await?;
    Ok(())
}

#[tokio::test]
async fn a_spool_serves_one_bus() -> anyhow::Result<()> {
    let broker = MemoryBroker::new();
    let dir = TempDir::new("spool-one-bus")?;
    let spool = Spool::open(dir.join("shop.spool"), SpoolOptions::default()).await?;
    let first = Bus::builder()
        .node("n1")
        .module("shop")
        .spool(spool.clone())
        .start(Arc::new(broker.transport()))
        .await?;
    let second = Bus::builder()
        .node("n1")
        .module("shop")
        .spool(spool.clone())
        .start(Arc::new(broker.transport()))
        .await
        .expect_err("a spool already serving a bus");
    assert_eq!(second.kind(), &ErrorKind::Spool);
    first.drain().await?;
    assert!(
        Spool::open(dir.join("zero.spool"), SpoolOptions::default().max_bytes(0))
            .await
            .is_err(),
        "a bound of 0 bytes"
    );
    Ok(())
}

#[tokio::test]
async fn a_spool_file_is_open_in_one_spool_at_a_time() -> anyhow::Result<()> {
    let dir = TempDir::new("spool-lock")?;
    let file = dir.join("shop.spool");
    let first = Spool::open(&file, SpoolOptions::default()).await?;
    let second = Spool::open(&file, SpoolOptions::default())
        .await
        .expect_err("the file is open in the first spool");
    assert_eq!(second.kind(), &mesh_outbox::ErrorKind::InUse);
    assert!(
        second.to_string().contains("shop.spool"),
        "the error names the file: {second}"
    );
    // Another file is not locked by it.
    let other = Spool::open(dir.join("other.spool"), SpoolOptions::default()).await?;
    drop(first);
    let again = Spool::open(&file, SpoolOptions::default()).await?;
    assert_eq!(again.pending_bytes(), 0);
    drop((other, again));
    Ok(())
}
