//! The demo's numbered steps, written to a sink (the program prints them; a test keeps
//! them), on the in-memory transport or on RabbitMQ.
//!
//! On RabbitMQ the tour removes its durable queues before and after its steps (see
//! `cleanup.rs`), so every run starts from the same place and none leaves anything behind.
//! It waits for its own event only (by id): whatever else the vhost carries does not change
//! its steps.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use mesh::amqp::AmqpOptions;
use mesh::raw::Transport;
use mesh::{Bus, EventId};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::cleanup::Cleanup;
use crate::modules::{self, QuoteRequest, SiteCreated, QUOTE};

/// How long the tour waits for one thing (a handler, a dead letter, a reply).
const WAIT: Duration = Duration::from_secs(30);

/// Where the demo runs.
pub(crate) enum Place {
    /// The embedded in-memory transport.
    Memory,
    /// RabbitMQ, with the options of its `amqp://` URL.
    RabbitMq(Box<AmqpOptions>),
}

impl Place {
    /// `MESH_URL` (RabbitMQ, its management API at `MESH_MANAGEMENT_URL` if set), else the
    /// in-memory transport.
    pub(crate) fn from_env() -> anyhow::Result<Place> {
        match std::env::var("MESH_URL") {
            Ok(url) if !url.is_empty() => {
                let mut options: AmqpOptions = url.parse()?;
                if let Ok(management) = std::env::var("MESH_MANAGEMENT_URL") {
                    if !management.is_empty() {
                        options = options.management_url(management);
                    }
                }
                Ok(Place::RabbitMq(Box::new(options)))
            }
            _ => Ok(Place::Memory),
        }
    }
}

/// Runs the tour at `place`, giving each numbered step to `step` (what the modules print, and
/// the notes of the clean-up, go to stdout and stderr). On RabbitMQ, removes the demo's queues
/// first and last, the latter even when a step fails or the user interrupts it (Ctrl-C).
pub(crate) async fn run(place: &Place, step: &mut dyn FnMut(String)) -> anyhow::Result<()> {
    let Place::RabbitMq(options) = place else {
        let broker = mesh::MemoryBroker::new();
        let transports = (0..3)
            .map(|_| Arc::new(broker.transport()) as Arc<dyn Transport>)
            .collect();
        return steps(transports, "the in-memory transport", step).await;
    };
    let cleanup = Cleanup::new(options)?;
    // What something else running consumes stays (its retry queues too), first and last.
    let busy = cleanup.in_use().await.unwrap_or_default();
    if !busy.is_empty() {
        println!(
            "   keeping {} queue(s) something else consumes: {}",
            busy.len(),
            busy.join(", ")
        );
    }
    match cleanup.remove(&busy).await {
        Ok(left) if !left.is_empty() => println!(
            "   removed {} queue(s) an earlier run left behind",
            left.len()
        ),
        Ok(_) => {}
        Err(e) => eprintln!("{}", cleanup.hint(e)),
    }
    let mut transports: Vec<Arc<dyn Transport>> = Vec::new();
    for _ in 0..3 {
        transports.push(Arc::new(mesh::amqp::connect((**options).clone()).await?));
    }
    // Each transport is closed by its bus (or, for one never started, when dropped) before
    // the queues go, so no consumer of ours is left on them.
    // An interrupted tour is dropped where it stands: its connections close with it.
    let result = tokio::select! {
        result = steps(transports, "RabbitMQ", step) => result,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    match cleanup.remove(&busy).await {
        Ok(removed) => println!(
            "   removed the demo's {} queue(s) from the broker",
            removed.len()
        ),
        Err(e) => eprintln!("{}", cleanup.hint(e)),
    }
    result
}

/// The started modules, closed however the steps end.
struct Buses(Vec<Bus>);

impl Buses {
    async fn close(&self) {
        for bus in &self.0 {
            bus.close().await;
        }
    }
}

async fn steps(
    mut transports: Vec<Arc<dyn Transport>>,
    name: &str,
    step: &mut dyn FnMut(String),
) -> anyhow::Result<()> {
    step(format!("1. mesh demo on {name}"));
    let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut buses = Buses(Vec::new());
    let result = async {
        // Each module announces its contract as it starts (`module.<m>.contract.announced`).
        buses.0.push(
            modules::billing(done_tx.clone())
                .start(transports.remove(0))
                .await?,
        );
        buses.0.push(
            modules::mailer(done_tx.clone())?
                .start(transports.remove(0))
                .await?,
        );
        buses
            .0
            .push(modules::umami().start(transports.remove(0)).await?);
        tour(&buses.0, done_rx, step).await
    }
    .await;
    if result.is_err() {
        buses.close().await;
    }
    result
}

/// The steps after the modules started: `buses` are billing, mailer and umami.
async fn tour(
    buses: &[Bus],
    mut done_rx: UnboundedReceiver<String>,
    step: &mut dyn FnMut(String),
) -> anyhow::Result<()> {
    let [billing, mailer, umami] = buses else {
        anyhow::bail!("the tour needs billing, mailer and umami");
    };
    let mut dead = umami.all_dead_letters().await?;

    let id = umami
        .emit(&SiteCreated {
            site: "blog".into(),
            owner: "ada".into(),
        })
        .await?;
    step(format!(
        "2. umami emitted module.umami.site.created {id}; the broker confirmed it"
    ));
    step("3. billing and mailer each get it from their own queue:".to_owned());
    handled_by_both(&mut done_rx, id).await?;

    let letter = tokio::time::timeout(WAIT, async {
        // Only our event's dead letter: the tap sees every dead letter of the vhost.
        while let Some(letter) = dead.next().await {
            if letter.event_id == Some(id) {
                return Some(letter);
            }
        }
        None
    })
    .await?
    .ok_or_else(|| anyhow::anyhow!("dead-letter stream ended"))?;
    if let Some(info) = &letter.note {
        step(format!(
            "4. dead-lettered {} after {} attempts from {}: {} ({})",
            letter.event_id.map(|i| i.to_string()).unwrap_or_default(),
            info.attempts,
            info.queue,
            info.reason,
            info.last_error.as_deref().unwrap_or("")
        ));
    }
    letter.ack().await?;

    let cents: u64 = umami
        .call(QUOTE, &quote("basic"), Duration::from_secs(5))
        .await?;
    step(format!("5. umami called billing.quote: {cents} cents"));
    match umami
        .call::<_, u64>(QUOTE, &quote("gold"), Duration::from_secs(5))
        .await
    {
        Err(e) => step(format!(
            "6. a quote for `gold` failed as expected: {:#}",
            anyhow::Error::from(e)
        )),
        Ok(v) => anyhow::bail!("expected a remote error, got {v}"),
    }
    match umami
        .call::<_, u64>(
            "nobody.serves.this",
            &quote("basic"),
            Duration::from_secs(5),
        )
        .await
    {
        Err(e) if e.is_no_server() => step(format!(
            "7. calling an unserved tool fails at once: {:#}",
            anyhow::Error::from(e)
        )),
        other => anyhow::bail!("expected no server, got {other:?}"),
    }

    for bus in [umami, billing, mailer] {
        bus.drain().await?;
    }
    step("8. drained: every handler finished, every emit confirmed".to_owned());
    Ok(())
}

fn quote(plan: &str) -> QuoteRequest {
    QuoteRequest { plan: plan.into() }
}

/// Waits until billing handled event `id` and mailer gave up on it (reports of other events,
/// from what an earlier run left, are passed over).
async fn handled_by_both(done: &mut UnboundedReceiver<String>, id: EventId) -> anyhow::Result<()> {
    let mut waiting: BTreeSet<String> = ["billing", "mailer"]
        .iter()
        .map(|module| format!("{module} {id}"))
        .collect();
    tokio::time::timeout(WAIT, async {
        while !waiting.is_empty() {
            match done.recv().await {
                Some(report) => {
                    waiting.remove(&report);
                }
                None => anyhow::bail!("the modules stopped reporting"),
            }
        }
        Ok(())
    })
    .await?
}
