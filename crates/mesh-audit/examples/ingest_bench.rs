//! Ingest rate of the audit logger: events per second from a RabbitMQ backlog into a store.
//!
//! Creates a throw-away vhost on the shared broker (127.0.0.1:5672, or `MESH_TEST_AMQP_URL`),
//! declares the audit queue, fills it with a backlog of events through the SDK (pipelined
//! emits), then starts the logger on a fresh store and times it until every event is
//! stored. The vhost and the SQLite file are removed afterwards.
//!
//! ```text
//! cargo run --release -p meshbus-audit --example ingest_bench -- [--events 100000]
//!     [--store sqlite://path?mode=rwc | postgres://…] [--batch-size 500] [--prefetch 1000]
//!     [--batch-wait-ms 50]
//! ```
//!
//! Under a profiler that slows the program down many times (Callgrind), batches close on
//! their wait before they fill, and each batch of another size is a statement SQLite
//! prepares anew; a long `--batch-wait-ms` keeps them full, as they are at full speed:
//!
//! ```text
//! valgrind --tool=callgrind ingest_bench --events 10000 --batch-wait-ms 60000
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use mesh::{Bus, Outgoing};
use mesh_amqp::AmqpOptions;
use mesh_audit::{AuditLogger, AuditOptions, Store, StoreOptions};
use mesh_core::{naming, Name, QueueSpec, SubscriptionSpec, TopicPattern};
use mesh_testkit::TestVhost;
use tokio_util::sync::CancellationToken;

struct Args {
    events: usize,
    store: Option<String>,
    batch_size: usize,
    batch_wait: Duration,
    prefetch: u16,
}

fn args() -> anyhow::Result<Args> {
    let mut args = Args {
        events: 100_000,
        store: None,
        batch_size: mesh_audit::DEFAULT_BATCH_SIZE,
        batch_wait: mesh_audit::DEFAULT_BATCH_WAIT,
        prefetch: mesh_audit::DEFAULT_PREFETCH,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--events" => args.events = value.parse()?,
            "--store" => args.store = Some(value),
            "--batch-size" => args.batch_size = value.parse()?,
            "--prefetch" => args.prefetch = value.parse()?,
            "--batch-wait-ms" => args.batch_wait = Duration::from_millis(value.parse()?),
            other => anyhow::bail!("unknown flag {other}"),
        }
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = args()?;
    let vhost = TestVhost::create("audit-bench").await?;
    let result = bench(&args, &vhost).await;
    vhost.delete().await?;
    result
}

async fn bench(args: &Args, vhost: &TestVhost) -> anyhow::Result<()> {
    let amqp: AmqpOptions = vhost.url().parse()?;
    let node = Name::parse("bench")?;

    // Declare the audit queue (bound to `#`) before the backlog is emitted.
    let declarer = mesh::amqp::connect(amqp.clone()).await?;
    let mut declared = declarer
        .subscribe(SubscriptionSpec {
            queue: QueueSpec::Durable {
                name: naming::audit_queue(&node),
            },
            patterns: vec![TopicPattern::all()],
            prefetch: 1,
            retry_delays: Vec::new(),
        })
        .await?;
    declared.cancel();
    drop(declared);
    declarer.close().await;

    let bus = Bus::builder()
        .node("bench")
        .module("shop")
        .start(Arc::new(mesh::amqp::connect(amqp.clone()).await?))
        .await?;
    let started = Instant::now();
    let mut pending = Vec::with_capacity(args.events);
    for n in 0..args.events {
        let payload = serde_json::json!({
            "order": n, "customer": "c-1042", "amount": 129.5, "currency": "EUR"
        });
        pending.push(
            bus.emit_nowait(Outgoing::json("order.placed", &payload)?)
                .await?,
        );
    }
    for emit in pending {
        emit.await?;
    }
    let emit_secs = started.elapsed().as_secs_f64();
    bus.drain().await?;
    println!(
        "backlog: {} events emitted and confirmed in {emit_secs:.1} s ({:.0}/s)",
        args.events,
        args.events as f64 / emit_secs
    );

    let temp_file = std::env::temp_dir().join(format!("{}.db", vhost.name()));
    let store_url = match &args.store {
        Some(url) => url.clone(),
        None => format!("sqlite://{}?mode=rwc", temp_file.display()),
    };
    let store = Store::open(StoreOptions::url(&store_url)?).await?;
    let logger = AuditLogger::new(
        store.clone(),
        AuditOptions::new()
            .node("bench")
            .batch_size(args.batch_size)
            .batch_wait(args.batch_wait)
            .prefetch(args.prefetch),
    );
    let transport = mesh::amqp::connect(amqp).await?;
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let run = {
        let (logger, shutdown) = (logger.clone(), shutdown.clone());
        tokio::spawn(async move { logger.run(&transport, &shutdown).await })
    };
    let target = args.events as u64;
    let deadline = Instant::now() + Duration::from_secs(1800);
    while logger.stats().events_stored < target {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the backlog was not stored in time"
        );
        anyhow::ensure!(!run.is_finished(), "the logger stopped early");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ingest_secs = started.elapsed().as_secs_f64();
    shutdown.cancel();
    run.await??;
    let stats = logger.stats();
    let rows = store.counts().await?.events;
    store.close().await;
    let _ = std::fs::remove_file(&temp_file);
    for suffix in ["-wal", "-shm"] {
        let mut path = temp_file.clone().into_os_string();
        path.push(suffix);
        let _ = std::fs::remove_file(path);
    }
    println!(
        "ingest: {rows} rows into {} in {ingest_secs:.1} s: {:.0} events/s ({} batches, batch size {}, prefetch {})",
        store.backend(),
        args.events as f64 / ingest_secs,
        stats.batches,
        args.batch_size,
        args.prefetch
    );
    Ok(())
}
