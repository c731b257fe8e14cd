//! Declarations: a first start that declares everything, against a raw client declaring the
//! same objects with the same concurrency, and the re-attach after a forced close, which
//! declares the whole topology again. On a private RabbitMQ node started for the run (with
//! its management API, through which the connections are closed), never the shared broker.
//!
//! Each round, alternating raw then mesh, each in a fresh vhost of its own (deleted after,
//! untimed), so every queue is new:
//!
//! - **raw**: one connection; [`LANES`] channels declare mesh's six exchanges, then the
//!   queues of `--declare-subscriptions` subscriptions (200: each a quorum queue with mesh's
//!   arguments and four retry queues, 1,000 queues), then their bindings (one pattern on
//!   `mesh.events` and five on `mesh.retry` each, 1,200), each phase with [`LANES`]
//!   declarations in flight together; then every queue is consumed, each on a channel of
//!   its own with a prefetch, all at once. Timed until the last `consume-ok`.
//! - **mesh**: a transport and as many buses as subscriptions, started at once (each with
//!   the default retry policy: the same queues, bindings and consumers), timed from
//!   connecting until every `start` returned and the health counts every subscription
//!   consuming. mesh's declarations are bounded by its own lanes, [`LANES`] in flight.
//!   Then both its connections are closed by force through the management API and the
//!   re-attach is timed until every subscription consumes again (health ready) and until
//!   every consumer, forwarders included, re-attached (followed through the lifecycle
//!   events); the declarations the replay sent are counted from the transport's stats.

use std::sync::Arc;
use std::time::Duration;

use amqprs::channel::{
    BasicConsumeArguments, BasicQosArguments, Channel, ExchangeDeclareArguments,
    QueueBindArguments, QueueDeclareArguments,
};
use amqprs::{FieldTable, FieldValue};
use anyhow::Context;
use mesh::amqp::{AmqpOptions, AmqpTransport};
use mesh::raw::Transport;
use mesh::{Bus, RetryPolicy};
use mesh_testkit::{NodeOptions, PrivateNode};
use serde::Serialize;
use tokio::time::Instant;

use super::scale::{follow, subscriber, until};
use crate::broker::{self, Broker, Ctl};
use crate::cli::Plan;
use crate::management::Api;
use crate::payload;
use crate::target::Target;

/// Declarations in flight together on each side (mesh's own bound, `DECLARE_LANES` in
/// `mesh-amqp`).
pub(crate) const LANES: usize = 16;
/// The subscriptions the targets are set for (1,000 queues and consumers).
pub(crate) const SUBSCRIPTIONS: usize = 200;
/// The re-attach bound, seconds.
const REATTACH_S: f64 = 1.0;
/// mesh's first start over raw's, at most.
const START_RATIO: f64 = 1.1;
/// The node every bus runs on.
const NODE: &str = "scale";
/// mesh's delivery limit by default, which its consumer queues carry.
const DELIVERY_LIMIT: i64 = 20;
/// How long deleting a round's vhost may take.
const VHOST_DELETE_PATIENCE: Duration = Duration::from_secs(300);
/// How long the forwarders' re-attach is followed once every subscription consumes again.
const FORWARDERS_PATIENCE: Duration = Duration::from_secs(120);

/// One round's figures.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Round {
    pub(crate) raw_start_s: f64,
    pub(crate) mesh_start_s: f64,
    /// Until every subscription consumed again.
    pub(crate) reattach_s: f64,
    /// Until every consumer, forwarders included, did.
    pub(crate) reattach_all_s: Option<f64>,
    /// Declarations mesh sent from the forced close until every consumer re-attached.
    pub(crate) replay_declarations: u64,
    /// Declarations mesh sent in its first start.
    pub(crate) start_declarations: u64,
}

/// Every figure of the scenario.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Figures {
    pub(crate) subscriptions: usize,
    pub(crate) queues: usize,
    pub(crate) bindings: usize,
    pub(crate) lanes: usize,
    pub(crate) rounds: Vec<Round>,
}

impl Figures {
    fn median(&self, pick: impl Fn(&Round) -> Option<f64>) -> Option<f64> {
        let mut values: Vec<f64> = self.rounds.iter().filter_map(pick).collect();
        values.sort_by(f64::total_cmp);
        values.get(values.len() / 2).copied()
    }
}

/// Runs the rounds on a private node, stopped and removed afterwards.
pub(crate) async fn run(plan: &Plan, notes: &mut Vec<String>) -> anyhow::Result<Figures> {
    let n = plan.declare_subscriptions;
    let delays = RetryPolicy::default().delays().len();
    eprintln!("== declare: starting a private RabbitMQ node with the management plugin");
    let node = Arc::new(
        PrivateNode::start(NodeOptions::default().management(true))
            .await
            .context("starting a private RabbitMQ node for the declare scenario")?,
    );
    let port = node
        .management_port()
        .context("the private node reports no management port")?;
    let api = Api::new(&format!("http://127.0.0.1:{port}"), "guest", "guest")?;
    api.await_up(Duration::from_secs(60)).await?;
    let broker = Broker::new(&node.url(), Ctl::Node(node.clone()), None)?;
    let mut figures = Figures {
        subscriptions: n,
        queues: n * (1 + delays),
        bindings: n * (2 + delays),
        lanes: LANES,
        rounds: Vec::new(),
    };
    notes.push(format!(
        "declare: on a private RabbitMQ node the bench started (not the shared broker); {n} \
         subscriptions ({} quorum queues, {} bindings, {} consumers), raw and mesh each in a \
         new vhost per round, {LANES} declarations in flight on both sides; mesh without the \
         management API (as `mesh::amqp::connect` with default options)",
        figures.queues, figures.bindings, figures.queues
    ));
    for round in 0..plan.rounds {
        let raw_vhost = format!("declare-raw-{round}");
        let mesh_vhost = format!("declare-mesh-{round}");
        api.add_vhost(&raw_vhost).await?;
        let raw = raw_start(&broker, &raw_vhost, n, delays).await;
        delete_vhost(&api, &raw_vhost, notes).await;
        let raw_start_s = raw?.as_secs_f64();
        api.add_vhost(&mesh_vhost).await?;
        let mesh = mesh_round(&node, &api, &mesh_vhost, n, figures.queues).await;
        delete_vhost(&api, &mesh_vhost, notes).await;
        let mut mesh = mesh?;
        mesh.raw_start_s = raw_start_s;
        eprintln!(
            "declare: round {round}: first start raw {:.2} s, mesh {:.2} s; re-attach {:.2} s \
             (every consumer {}), {} declarations replayed",
            mesh.raw_start_s,
            mesh.mesh_start_s,
            mesh.reattach_s,
            mesh.reattach_all_s
                .map_or_else(|| "not followed".to_owned(), |s| format!("{s:.2} s")),
            mesh.replay_declarations
        );
        figures.rounds.push(mesh);
    }
    Ok(figures)
}

async fn delete_vhost(api: &Api, vhost: &str, notes: &mut Vec<String>) {
    if let Err(e) = api.delete_vhost(vhost, VHOST_DELETE_PATIENCE).await {
        eprintln!("declare: {e:#}");
        notes.push(format!(
            "declare: vhost `{vhost}` could not be deleted after its round: {e:#}"
        ));
    }
}

/// The queue of subscription `i` and its retry queues, with their arguments.
fn queues_of(i: usize, delays: &[Duration]) -> anyhow::Result<Vec<(String, FieldTable)>> {
    let queue = format!("{NODE}.m{i:04}.events");
    let mut main = FieldTable::new();
    payload::insert(&mut main, "x-queue-type", "quorum")?;
    payload::insert(&mut main, "x-dead-letter-exchange", "mesh.events.dead")?;
    main.insert(
        "x-delivery-limit"
            .try_into()
            .map_err(|_| anyhow::anyhow!("bad name"))?,
        FieldValue::l(DELIVERY_LIMIT),
    );
    let mut retry = FieldTable::new();
    payload::insert(&mut retry, "x-queue-type", "quorum")?;
    let mut queues = vec![(queue.clone(), main)];
    for delay in delays {
        queues.push((format!("{queue}.retry.{}s", delay.as_secs()), retry.clone()));
    }
    Ok(queues)
}

/// Runs `work` on every item, [`LANES`] at once, each lane on one of `channels`.
async fn in_lanes<T, F, Fut>(channels: &[Channel], items: Vec<T>, work: F) -> anyhow::Result<()>
where
    F: Fn(Channel, T) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let queue = std::sync::Mutex::new(items.into_iter().collect::<std::collections::VecDeque<_>>());
    let next = || queue.lock().ok().and_then(|mut q| q.pop_front());
    let lanes = channels.iter().map(|channel| async {
        while let Some(item) = next() {
            work(channel.clone(), item).await?;
        }
        anyhow::Ok(())
    });
    for outcome in futures::future::join_all(lanes).await {
        outcome?;
    }
    Ok(())
}

/// The raw side's first start (see the module docs).
async fn raw_start(
    broker: &Broker,
    vhost: &str,
    n: usize,
    delays: usize,
) -> anyhow::Result<Duration> {
    let steps = RetryPolicy::default().delays().to_vec();
    anyhow::ensure!(steps.len() == delays, "the retry policy changed underfoot");
    let mut queues = Vec::new();
    let mut bindings = Vec::new();
    for i in 0..n {
        let of = queues_of(i, &steps)?;
        let main = of[0].0.clone();
        bindings.push(("mesh.events", main.clone(), format!("module.src{i:04}.#")));
        for (name, _) in &of {
            bindings.push(("mesh.retry", name.clone(), name.clone()));
        }
        queues.extend(of);
    }
    // Timed from connecting, as mesh's start is.
    let began = Instant::now();
    let connection = broker.raw(vhost, "declare-raw").await?;
    let timed = async {
        let mut channels = Vec::with_capacity(LANES);
        for _ in 0..LANES {
            channels.push(broker::channel(&connection).await?);
        }
        let exchanges = [
            ("mesh.events", "topic"),
            ("mesh.rpc", "topic"),
            ("mesh.events.dead", "topic"),
            ("mesh.retry", "topic"),
            ("mesh.logs", "topic"),
            ("mesh.reply", "direct"),
        ];
        in_lanes(
            &channels,
            exchanges.to_vec(),
            |ch, (name, kind)| async move {
                let mut args = ExchangeDeclareArguments::new(name, kind);
                args.durable = true;
                ch.exchange_declare(args).await?;
                Ok(())
            },
        )
        .await?;
        let names: Vec<String> = queues.iter().map(|(name, _)| name.clone()).collect();
        in_lanes(&channels, queues, |ch, (name, arguments)| async move {
            ch.queue_declare(
                QueueDeclareArguments::durable_client_named(&name)
                    .arguments(arguments)
                    .finish(),
            )
            .await
            .with_context(|| format!("declaring `{name}`"))?;
            Ok(())
        })
        .await?;
        in_lanes(
            &channels,
            bindings,
            |ch, (exchange, queue, key)| async move {
                ch.queue_bind(QueueBindArguments::new(&queue, exchange, &key))
                    .await?;
                Ok(())
            },
        )
        .await?;
        for channel in channels {
            let _ = channel.close().await;
        }
        // Every queue consumed, each on a channel of its own, all at once.
        let consumers = names.iter().map(|name| async {
            let channel = broker::channel(&connection).await?;
            channel
                .basic_qos(BasicQosArguments::new(0, 32, false))
                .await?;
            let (_, deliveries) = channel
                .basic_consume_rx(BasicConsumeArguments::new(name, "").finish())
                .await?;
            anyhow::Ok((channel, deliveries))
        });
        let consumers = futures::future::join_all(consumers).await;
        let took = began.elapsed();
        let mut failure = None;
        for consumer in consumers {
            match consumer {
                Ok((channel, _deliveries)) => {
                    let _ = channel.close().await;
                }
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(took),
        }
    }
    .await;
    broker::close(connection).await;
    timed
}

/// mesh's side of a round: the first start, then the forced close and the re-attach.
async fn mesh_round(
    node: &PrivateNode,
    api: &Api,
    vhost: &str,
    n: usize,
    consumers: usize,
) -> anyhow::Result<Round> {
    let options: AmqpOptions = node.url().parse().context("the node's URL")?;
    let options = options.vhost(vhost).connection_name("bench.mesh.declare");
    let began = Instant::now();
    let transport = mesh::amqp::connect(options)
        .await
        .context("connecting mesh to the private node")?;
    let shared: Arc<dyn Transport> = Arc::new(transport.clone());
    let mut buses = Vec::with_capacity(n);
    let mut failure = None;
    for outcome in
        futures::future::join_all((0..n).map(|i| subscriber(i).start(shared.clone()))).await
    {
        match outcome {
            Ok(bus) => buses.push(bus),
            Err(e) => {
                failure.get_or_insert(e);
            }
        }
    }
    let measured = async {
        if let Some(e) = failure {
            return Err(anyhow::Error::new(e).context("starting a subscriber"));
        }
        until("every subscription consuming", || {
            let health = transport.health();
            health.is_ready() && health.consumers_attached >= n
        })
        .await?;
        let mesh_start = began.elapsed();
        let start_declarations = transport.stats().declarations;
        let (reattach, reattach_all, replay_declarations) =
            force_close(api, vhost, &transport, n, consumers).await?;
        anyhow::Ok(Round {
            raw_start_s: 0.0,
            mesh_start_s: mesh_start.as_secs_f64(),
            reattach_s: reattach.as_secs_f64(),
            reattach_all_s: reattach_all.map(|d| d.as_secs_f64()),
            replay_declarations,
            start_declarations,
        })
    }
    .await;
    close(buses, &transport).await;
    measured
}

/// Closes the transport's connections by force; times until every subscription and every
/// consumer re-attached, and counts the declarations sent meanwhile.
async fn force_close(
    api: &Api,
    vhost: &str,
    transport: &AmqpTransport,
    n: usize,
    consumers: usize,
) -> anyhow::Result<(Duration, Option<Duration>, u64)> {
    let names = api
        .await_connections(vhost, "bench.mesh.declare.", 2, Duration::from_secs(30))
        .await?;
    let stats = transport.stats();
    let mut follower = tokio::spawn(follow(transport.lifecycle(), consumers));
    let began = Instant::now();
    for closed in
        futures::future::join_all(names.iter().map(|name| api.close_connection(name))).await
    {
        closed?;
    }
    until("every subscription consuming again", || {
        transport.stats().reattached >= stats.reattached + n as u64 && transport.health().is_ready()
    })
    .await?;
    let subscriptions = began.elapsed();
    let all = match tokio::time::timeout(FORWARDERS_PATIENCE, &mut follower).await {
        Ok(Ok(Ok(at))) => Some(at.saturating_duration_since(began)),
        _ => {
            follower.abort();
            None
        }
    };
    let declarations = transport.stats().declarations - stats.declarations;
    Ok((subscriptions, all, declarations))
}

async fn close(buses: Vec<Bus>, transport: &AmqpTransport) {
    for bus in &buses {
        bus.close().await;
    }
    transport.close().await;
}

/// The scenario's verdicts: the re-attach (every consumer, forwarders included, when it
/// could be followed) and the first start against raw's, medians of the rounds; judged at
/// [`SUBSCRIPTIONS`] subscriptions or more.
pub(crate) fn targets(f: &Figures) -> Vec<Target> {
    let judged = f.subscriptions >= SUBSCRIPTIONS;
    let mut targets = Vec::new();
    let reattach = f.median(|r| r.reattach_all_s.or(Some(r.reattach_s)));
    if let Some(s) = reattach {
        targets.push(Target {
            name: format!(
                "declare re-attach of {} consumers ({} subscriptions) after a forced close",
                f.queues, f.subscriptions
            ),
            wanted: format!("< {REATTACH_S:.0} s with {SUBSCRIPTIONS} subscriptions"),
            actual: format!(
                "{s:.3} s (median of {}; every subscription consuming: {:.3} s)",
                f.rounds.len(),
                f.median(|r| Some(r.reattach_s)).unwrap_or(0.0)
            ),
            met: s < REATTACH_S,
            judged,
            bound: true,
        });
    }
    if let (Some(mesh), Some(raw)) = (
        f.median(|r| Some(r.mesh_start_s)),
        f.median(|r| Some(r.raw_start_s)),
    ) {
        let ratio = if raw > 0.0 { mesh / raw } else { f64::INFINITY };
        targets.push(Target {
            name: format!(
                "declare first start with {} quorum queues, mesh/raw",
                f.queues
            ),
            wanted: format!("≤ {START_RATIO:.1}× raw with {LANES} in flight"),
            actual: format!("{ratio:.2} (mesh {mesh:.2} s, raw {raw:.2} s)"),
            met: ratio <= START_RATIO,
            judged,
            bound: true,
        });
    }
    targets
}

/// The rounds, as Markdown.
pub(crate) fn table(f: &Figures) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| round | raw first start | mesh first start | mesh/raw | re-attach (subscriptions) \
         | re-attach (every consumer) | declarations at start | declarations replayed |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|");
    for (i, r) in f.rounds.iter().enumerate() {
        let _ = writeln!(
            out,
            "| {i} | {:.2} s | {:.2} s | {:.2} | {:.3} s | {} | {} | {} |",
            r.raw_start_s,
            r.mesh_start_s,
            r.mesh_start_s / r.raw_start_s.max(f64::MIN_POSITIVE),
            r.reattach_s,
            r.reattach_all_s
                .map_or_else(|| "not followed".to_owned(), |s| format!("{s:.3} s")),
            r.start_declarations,
            r.replay_declarations
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(raw: f64, mesh: f64, reattach: f64) -> Round {
        Round {
            raw_start_s: raw,
            mesh_start_s: mesh,
            reattach_s: reattach,
            reattach_all_s: Some(reattach + 0.1),
            replay_declarations: 2206,
            start_declarations: 2206,
        }
    }

    #[test]
    fn the_targets_can_fail() {
        let figures = |rounds| Figures {
            subscriptions: SUBSCRIPTIONS,
            queues: 1000,
            bindings: 1200,
            lanes: LANES,
            rounds,
        };
        let met = targets(&figures(vec![round(4.0, 4.2, 0.5), round(4.0, 4.3, 0.6)]));
        assert!(met.iter().all(|t| t.met && t.judged), "{met:?}");
        let missed = targets(&figures(vec![round(4.0, 4.5, 0.95), round(4.0, 4.6, 1.2)]));
        assert!(missed.iter().all(|t| !t.met), "{missed:?}");
    }

    #[test]
    fn a_subscription_has_its_queue_and_one_retry_queue_per_step() {
        let steps = RetryPolicy::default().delays().to_vec();
        let queues = queues_of(7, &steps).unwrap();
        assert_eq!(queues.len(), 1 + steps.len());
        assert_eq!(queues[0].0, "scale.m0007.events");
        assert_eq!(queues[1].0, "scale.m0007.events.retry.1s");
    }
}
