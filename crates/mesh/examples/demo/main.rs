//! The main job of mesh in one program: two modules exchange events with `emit`/`on`, a
//! failing handler is retried and then dead-lettered, and a tool is called over RPC. The
//! modules are defined in `modules.rs`, with the schemas of their events and tools.
//!
//! Runs on the embedded in-memory transport by default; with `MESH_URL=amqp://…` it runs
//! on RabbitMQ.
//!
//! ```text
//! cargo run -p meshbus --example demo
//! MESH_URL=amqp://guest:guest@127.0.0.1:5672/%2F cargo run -p meshbus --example demo
//! ```

mod modules;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use mesh::raw::Transport;

use modules::{QuoteRequest, SiteCreated, QUOTE};

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn transport() -> anyhow::Result<(Vec<Arc<dyn Transport>>, &'static str)> {
    match std::env::var("MESH_URL") {
        Ok(url) if !url.is_empty() => {
            let options: mesh::amqp::AmqpOptions = url.parse()?;
            let mut transports: Vec<Arc<dyn Transport>> = Vec::new();
            for _ in 0..4 {
                transports.push(Arc::new(mesh::amqp::connect(options.clone()).await?));
            }
            Ok((transports, "RabbitMQ"))
        }
        _ => {
            let broker = mesh::MemoryBroker::new();
            let transports = (0..4)
                .map(|_| Arc::new(broker.transport()) as Arc<dyn Transport>)
                .collect();
            Ok((transports, "the in-memory transport"))
        }
    }
}

async fn run() -> anyhow::Result<()> {
    let (mut transports, name) = transport().await?;
    println!("1. mesh demo on {name}");
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel::<String>();

    // Each module announces its contract as it starts (`module.<m>.contract.announced`).
    let billing = modules::billing(done_tx.clone())
        .start(transports.remove(0))
        .await?;
    let mailer = modules::mailer(done_tx.clone())?
        .start(transports.remove(0))
        .await?;
    let umami = modules::umami().start(transports.remove(0)).await?;
    let mut dead = umami.dead_letters().await?;

    let id = umami
        .emit(&SiteCreated {
            site: "blog".into(),
            owner: "ada".into(),
        })
        .await?;
    println!("2. umami emitted module.umami.site.created {id}; the broker confirmed it");
    println!("3. billing and mailer each get it from their own queue:");

    for _ in 0..2 {
        done_rx.recv().await;
    }
    let letter = tokio::time::timeout(Duration::from_secs(30), dead.next())
        .await?
        .ok_or_else(|| anyhow::anyhow!("dead-letter stream ended"))?;
    if let Some(info) = &letter.note {
        println!(
            "4. dead-lettered {} after {} attempts from {}: {} ({})",
            letter.event_id.map(|i| i.to_string()).unwrap_or_default(),
            info.attempts,
            info.queue,
            info.reason,
            info.last_error.as_deref().unwrap_or("")
        );
    }
    letter.ack().await?;

    let cents: u64 = umami
        .call(
            QUOTE,
            &QuoteRequest {
                plan: "basic".into(),
            },
            Duration::from_secs(5),
        )
        .await?;
    println!("5. umami called billing.quote: {cents} cents");
    match umami
        .call::<_, u64>(
            QUOTE,
            &QuoteRequest {
                plan: "gold".into(),
            },
            Duration::from_secs(5),
        )
        .await
    {
        Err(e) => println!(
            "6. a quote for `gold` failed as expected: {:#}",
            anyhow::Error::from(e)
        ),
        Ok(v) => anyhow::bail!("expected a remote error, got {v}"),
    }
    match umami
        .call::<_, u64>(
            "nobody.serves.this",
            &QuoteRequest {
                plan: "basic".into(),
            },
            Duration::from_secs(5),
        )
        .await
    {
        Err(e) if e.is_no_server() => println!(
            "7. calling an unserved tool fails at once: {:#}",
            anyhow::Error::from(e)
        ),
        other => anyhow::bail!("expected no server, got {other:?}"),
    }

    for bus in [&umami, &billing, &mailer] {
        bus.drain().await?;
    }
    println!("8. drained: every handler finished, every emit confirmed");
    Ok(())
}
