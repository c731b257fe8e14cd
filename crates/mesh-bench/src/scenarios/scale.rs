//! Scale: the scale targets, on a private RabbitMQ node started for the run (its own
//! ports, data directory and management API; stopped and removed at the end whatever
//! happens), never on the shared broker. mesh alone: there is no raw side to compare with.
//!
//! - **Attach**: one process with `--scale-subscriptions` module buses (200) on one
//!   transport, each subscription with the default retry policy, so its quorum queue, four
//!   retry queues and a retry forwarder on each (1,000 queues and consumers for 200). Timed
//!   from connecting until the transport's health counts every subscription consuming: a
//!   first start that declares everything (reported), a second start whose queues exist,
//!   and, after both of the transport's connections are closed by force through the
//!   management API, until every subscription has re-attached and the health is ready
//!   again (and, followed through the lifecycle events, every forwarder too).
//! - **Backlog**: `--scale-events` persistent 1 KiB events (1,000,000) published raw into a
//!   module's queue, then consumed by a bus of default settings whose handler only counts;
//!   the process's RSS is sampled every 100 ms, and taken when the first 50,000 (a tenth of
//!   a smaller backlog) are consumed, at the peak after that (the kernel's high-water mark,
//!   reset then) and at the end.
//! - **Topology**: `mesh topology plan` and `apply` (the `mesh` program, run as an
//!   operator would) for a spec of `--scale-modules` modules (500) with two patterns each,
//!   on an empty vhost; then `apply` again and `plan --check` once everything exists.
//!
//! Each measurement runs in a vhost of its own, deleted afterwards, so one's queues do not
//! weigh on the next; the backlog comes first (see [`run`]).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use anyhow::Context;
use mesh::amqp::{AmqpOptions, AmqpTransport, Lifecycle};
use mesh::raw::Transport;
use mesh::{Bus, BusBuilder, HandlerError, RetryPolicy};
use mesh_testkit::{NodeOptions, PrivateNode};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::{broadcast, Notify};
use tokio::time::Instant;

use super::EVENTS;
use crate::broker::{self, Broker, Ctl};
use crate::cli::Plan;
use crate::management::Api;
use crate::measure::{self, Cost, Meter};
use crate::payload;
use crate::raw::{ConfirmChannel, Route};

/// The node every bus of the scenario runs on.
const NODE: &str = "scale";
/// The module that consumes the backlog, and its queue (`<node>.<module>.events`).
const SINK: &str = "sink";
const SINK_QUEUE: &str = "scale.sink.events";
/// The key the backlog is published under (the sink's one pattern), owned by the raw
/// publisher's `x-source`, `bench`.
const SINK_KEY: &str = "module.bench.backlog";
/// The size of each backlog event's body.
pub(crate) const BODY_BYTES: usize = 1024;
/// Backlog events consumed before the RSS the growth is measured from, at most.
const WARM_EVENTS: u64 = 50_000;
/// Publishes in flight while the backlog is filled.
const FILL_WINDOW: usize = 1_000;
/// How often the RSS is sampled while the backlog is consumed.
const SAMPLE_EVERY: Duration = Duration::from_millis(100);
/// How often a transport's health is looked at while waiting for it.
const POLL: Duration = Duration::from_millis(5);
/// The longest wait for a start, a re-attach or a `mesh` run: it only bounds a hang (the
/// targets are seconds).
const PATIENCE: Duration = Duration::from_secs(600);
/// How long the forwarders' re-attach is followed once every subscription consumes again.
const FORWARDERS_PATIENCE: Duration = Duration::from_secs(120);
/// How long deleting a measurement's vhost may take.
const VHOST_DELETE_PATIENCE: Duration = Duration::from_secs(180);
/// Vhosts of the three measurements.
const ATTACH_VHOST: &str = "scale-attach";
const BACKLOG_VHOST: &str = "scale-backlog";
const TOPOLOGY_VHOST: &str = "scale-topology";

/// Every figure of the scenario.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Figures {
    pub(crate) attach: Attach,
    pub(crate) backlog: Backlog,
    pub(crate) topology: Topology,
}

/// Attaching many subscriptions, and re-attaching them after a forced close.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Attach {
    pub(crate) subscriptions: usize,
    /// Quorum queues: each subscription's own and its retry queues.
    pub(crate) queues: usize,
    /// Consumers: one per subscription and one retry forwarder per retry queue.
    pub(crate) consumers: usize,
    /// From connecting until every subscription consumed, declaring everything.
    pub(crate) first_start_s: f64,
    /// The same, with every queue there already.
    pub(crate) second_start_s: f64,
    /// The transport's connections the management API closed.
    pub(crate) connections_closed: usize,
    /// From the forced close until every subscription consumed again (health ready).
    pub(crate) reattach_s: f64,
    /// Until every retry forwarder consumed again too, when it could be followed.
    pub(crate) reattach_forwarders_s: Option<f64>,
    /// Why the forwarders' re-attach is not given, if it is not.
    pub(crate) forwarders_note: Option<String>,
}

/// Consuming a large backlog with flat memory.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Backlog {
    pub(crate) events: u64,
    pub(crate) body_bytes: usize,
    /// Publishing the backlog (raw, persistent, confirmed).
    pub(crate) fill_s: f64,
    pub(crate) fill_events_per_s: f64,
    /// From the first delivery to the last handler call.
    pub(crate) consume_s: f64,
    pub(crate) events_per_s: f64,
    pub(crate) cpu_s_per_100k: f64,
    /// Events consumed when the RSS the growth is measured from was taken.
    pub(crate) warm_events: u64,
    /// Before the consuming bus started.
    pub(crate) rss_start_mb: f64,
    pub(crate) rss_warm_mb: f64,
    /// The largest RSS after the warm-up: the kernel's high-water mark (reset at the
    /// warm-up) or the largest sample, whichever is larger.
    pub(crate) rss_peak_mb: f64,
    pub(crate) rss_end_mb: f64,
    pub(crate) growth_peak_mb: f64,
    pub(crate) growth_end_mb: f64,
    /// The RSS at every twentieth of the backlog (the first sample at or after it).
    pub(crate) samples: Vec<RssSample>,
}

/// One RSS sample.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct RssSample {
    pub(crate) events: u64,
    pub(crate) seconds: f64,
    pub(crate) rss_mb: f64,
}

/// `mesh topology` on a spec of many modules.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Topology {
    pub(crate) modules: usize,
    pub(crate) bindings: usize,
    /// `plan` on the empty vhost, and the differences it listed.
    pub(crate) plan_s: f64,
    pub(crate) differences: usize,
    /// `apply`, and the changes it made.
    pub(crate) apply_s: f64,
    pub(crate) applied: usize,
    /// `apply` again, everything there (no change).
    pub(crate) apply_again_s: f64,
    /// `plan --check` after that (no difference).
    pub(crate) check_s: f64,
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Runs the three measurements on a private node, which is stopped and removed afterwards
/// (its `Drop`, also when this future is dropped on Ctrl-C; its watchdog if the process is
/// killed).
pub(crate) async fn run(plan: &Plan, notes: &mut Vec<String>) -> anyhow::Result<Figures> {
    let mesh_bin = mesh_program(plan)?;
    eprintln!("== scale: starting a private RabbitMQ node with the management plugin");
    let node = PrivateNode::start(NodeOptions::default().management(true))
        .await
        .context("starting a private RabbitMQ node for the scale scenario")?;
    let node = Arc::new(node);
    let port = node
        .management_port()
        .context("the private node reports no management port")?;
    let api = Api::new(&format!("http://127.0.0.1:{port}"), "guest", "guest")?;
    api.await_up(Duration::from_secs(60)).await?;
    let scale = Scale {
        plan,
        broker: Broker::new(&node.url(), Ctl::Node(node.clone()), None)?,
        node,
        api,
    };
    notes.push(format!(
        "scale: on a private RabbitMQ node the bench started (not the shared broker), quorum \
         queues, mesh's default options; `mesh topology` timed as the program {}",
        mesh_bin.display()
    ));
    // The backlog first: the RSS it watches is then least padded by pages the attach's
    // 200 buses touched and freed (an allocator keeps them, so a later growth would fill
    // them unseen).
    let backlog = scale.backlog(notes).await?;
    let attach = scale.attach(notes).await?;
    let topology = scale.topology(&mesh_bin, notes).await?;
    Ok(Figures {
        attach,
        backlog,
        topology,
    })
}

/// The `mesh` program: `--mesh-bin`, else the one beside this program.
fn mesh_program(plan: &Plan) -> anyhow::Result<PathBuf> {
    let path = match &plan.mesh_bin {
        Some(path) => path.clone(),
        None => std::env::current_exe()
            .context("finding this program's path")?
            .with_file_name("mesh"),
    };
    anyhow::ensure!(
        path.is_file(),
        "the scale scenario runs `mesh topology`, and there is no `mesh` program at {}: build \
         it into the same target directory and profile first (`cargo build -p meshbus-cli \
         --bin mesh`, with --release for a release bench), or pass --mesh-bin",
        path.display()
    );
    Ok(path)
}

/// What the measurements share.
struct Scale<'a> {
    plan: &'a Plan,
    node: Arc<PrivateNode>,
    api: Api,
    /// The node as the raw client reaches it.
    broker: Broker,
}

impl Scale<'_> {
    /// mesh's options for `vhost` on the node: its defaults, the node's management API, and
    /// connections named `bench.mesh.<name>.publish|consume`.
    fn options(&self, vhost: &str, name: &str) -> anyhow::Result<AmqpOptions> {
        let options: AmqpOptions = self.node.url().parse().context("the node's URL")?;
        Ok(options
            .vhost(vhost)
            .management_url(self.api.base())
            .connection_name(format!("bench.mesh.{name}")))
    }

    /// Runs `measure` in vhost `vhost`, created for it and deleted after it (a vhost that
    /// cannot be deleted is noted, not fatal: the node goes at the end anyway).
    async fn in_vhost<T>(
        &self,
        vhost: &str,
        notes: &mut Vec<String>,
        measure: impl std::future::Future<Output = anyhow::Result<T>>,
    ) -> anyhow::Result<T> {
        self.api.add_vhost(vhost).await?;
        let outcome = measure.await;
        if let Err(e) = self.api.delete_vhost(vhost, VHOST_DELETE_PATIENCE).await {
            eprintln!("scale: {e:#}");
            notes.push(format!(
                "scale: vhost `{vhost}` could not be deleted after its measurement, so it \
                 stayed on the node for the next ones: {e:#}"
            ));
        }
        outcome
    }

    async fn attach(&self, notes: &mut Vec<String>) -> anyhow::Result<Attach> {
        let attach = self
            .in_vhost(ATTACH_VHOST, notes, self.attach_in(ATTACH_VHOST))
            .await?;
        eprintln!(
            "scale: attach: first start {:.2} s, second {:.2} s, re-attach {:.2} s",
            attach.first_start_s, attach.second_start_s, attach.reattach_s
        );
        Ok(attach)
    }

    async fn attach_in(&self, vhost: &str) -> anyhow::Result<Attach> {
        let n = self.plan.scale_subscriptions;
        let queues = n * (1 + RetryPolicy::default().delays().len());
        eprintln!(
            "scale: first start of {n} subscriptions on one transport, declaring {queues} \
             quorum queues"
        );
        let first = Started::start(self.options(vhost, "scale-first")?, n).await?;
        let first_start = first.took;
        first.close().await;
        eprintln!("scale: second start, every queue there already");
        let second = Started::start(self.options(vhost, "scale-second")?, n).await?;
        eprintln!(
            "scale: closing its connections by force through the management API (each \
             consumer warns that it re-attaches)"
        );
        let reattached = self
            .force_close(vhost, "bench.mesh.scale-second.", &second, queues)
            .await;
        let second_start = second.took;
        second.close().await;
        let reattached = reattached?;
        Ok(Attach {
            subscriptions: n,
            queues,
            consumers: queues,
            first_start_s: first_start.as_secs_f64(),
            second_start_s: second_start.as_secs_f64(),
            connections_closed: reattached.closed,
            reattach_s: reattached.subscriptions.as_secs_f64(),
            reattach_forwarders_s: reattached
                .forwarders
                .as_ref()
                .ok()
                .map(Duration::as_secs_f64),
            forwarders_note: reattached.forwarders.err(),
        })
    }

    /// Closes `started`'s connections (named `prefix…`) through the management API, and
    /// times until every subscription consumes again, and every consumer (`consumers`,
    /// forwarders included) re-attached.
    async fn force_close(
        &self,
        vhost: &str,
        prefix: &str,
        started: &Started,
        consumers: usize,
    ) -> anyhow::Result<Reattached> {
        let n = started.buses.len() as u64;
        let transport = &started.transport;
        let names = self
            .api
            .await_connections(vhost, prefix, 2, Duration::from_secs(30))
            .await?;
        let before = transport.stats().reattached;
        let mut follower = tokio::spawn(follow(transport.lifecycle(), consumers));
        let began = Instant::now();
        let closes =
            futures::future::join_all(names.iter().map(|name| self.api.close_connection(name)))
                .await;
        let waited = async {
            for closed in closes {
                closed?;
            }
            until("every subscription consuming again", || {
                // Each subscription's consumer counts its re-attach before it counts as
                // attached, so the health is ready only once all of them re-attached.
                transport.stats().reattached >= before + n && transport.health().is_ready()
            })
            .await?;
            let subscriptions = began.elapsed();
            let forwarders = match tokio::time::timeout(FORWARDERS_PATIENCE, &mut follower).await {
                Ok(Ok(Ok(at))) => Ok(at.saturating_duration_since(began)),
                Ok(Ok(Err(why))) => Err(why),
                Ok(Err(e)) => Err(format!("following the lifecycle events failed: {e}")),
                Err(_) => Err(format!(
                    "not every forwarder re-attached within {FORWARDERS_PATIENCE:?} of the \
                     subscriptions"
                )),
            };
            anyhow::Ok(Reattached {
                closed: names.len(),
                subscriptions,
                forwarders,
            })
        }
        .await;
        follower.abort();
        waited
    }

    async fn backlog(&self, notes: &mut Vec<String>) -> anyhow::Result<Backlog> {
        let backlog = self
            .in_vhost(BACKLOG_VHOST, notes, self.backlog_in(BACKLOG_VHOST))
            .await?;
        eprintln!(
            "scale: backlog: {:.0} events/s; RSS {:.1} MB after {} events, peak {:.1}, end {:.1}",
            backlog.events_per_s,
            backlog.rss_warm_mb,
            backlog.warm_events,
            backlog.rss_peak_mb,
            backlog.rss_end_mb
        );
        Ok(backlog)
    }

    async fn backlog_in(&self, vhost: &str) -> anyhow::Result<Backlog> {
        let events = self.plan.scale_events;
        // mesh declares the queue (with exactly its arguments) and its bindings, then stops.
        let setup = mesh::amqp::connect(self.options(vhost, "scale-sink-setup")?).await?;
        let bus = sink(None).start(Arc::new(setup.clone())).await;
        match bus {
            Ok(bus) => bus.drain().await?,
            Err(e) => {
                setup.close().await;
                return Err(e).context("declaring the sink's queue");
            }
        }
        eprintln!("scale: publishing {events} persistent {BODY_BYTES}-byte events (raw)");
        let fill = self.fill(vhost, events).await?;
        let admin = self.broker.raw(vhost, "scale-admin").await?;
        let outcome = self.consume(vhost, events, fill, &admin).await;
        broker::close(admin).await;
        outcome
    }

    /// Publishes the backlog; returns how long it took.
    async fn fill(&self, vhost: &str, events: u64) -> anyhow::Result<Duration> {
        let connection = self.broker.raw(vhost, "scale-fill").await?;
        let filled = async {
            let publisher = ConfirmChannel::open(&connection, FILL_WINDOW).await?;
            let route = Route {
                exchange: EVENTS,
                key: SINK_KEY,
                mandatory: false,
            };
            let body = body();
            let began = Instant::now();
            for _ in 0..events {
                let properties = payload::event_properties()?;
                publisher
                    .publish(route, properties, body.clone(), false)
                    .await?;
            }
            publisher.wait_all().await?;
            let took = began.elapsed();
            publisher.close().await;
            anyhow::Ok(took)
        }
        .await;
        broker::close(connection).await;
        filled
    }

    /// Consumes the backlog with a bus of default settings, sampling the RSS.
    async fn consume(
        &self,
        vhost: &str,
        events: u64,
        fill: Duration,
        admin: &amqprs::connection::Connection,
    ) -> anyhow::Result<Backlog> {
        let depth = broker::depth(admin, SINK_QUEUE).await?;
        anyhow::ensure!(
            depth == events,
            "the backlog is {depth} events, not {events}"
        );
        let warm = WARM_EVENTS.min(events / 10);
        let count = Arc::new(Count::new(events, warm));
        eprintln!("scale: consuming them with a bus of default settings");
        let rss_start = measure::rss();
        let transport = mesh::amqp::connect(self.options(vhost, "scale-sink")?).await?;
        let bus = match sink(Some(count.clone()))
            .start(Arc::new(transport.clone()))
            .await
        {
            Ok(bus) => bus,
            Err(e) => {
                transport.close().await;
                return Err(e).context("starting the sink's bus");
            }
        };
        let began = Instant::now();
        let deadline = began + super::patience(events);
        let mut samples = Vec::new();
        let mut ticker = tokio::time::interval(SAMPLE_EVERY);
        let drained = loop {
            tokio::select! {
                () = count.done.notified() => break Ok(()),
                _ = ticker.tick() => {
                    samples.push(RssSample {
                        events: count.seen.load(Ordering::Acquire),
                        seconds: began.elapsed().as_secs_f64(),
                        rss_mb: mb(measure::rss()),
                    });
                    if Instant::now() >= deadline {
                        break Err(anyhow::anyhow!(
                            "the sink stalled after {} of {events} events",
                            count.seen.load(Ordering::Acquire)
                        ));
                    }
                }
            }
        };
        let rss_end = measure::rss();
        let high_water = measure::peak_rss();
        samples.push(RssSample {
            events: count.seen.load(Ordering::Acquire),
            seconds: began.elapsed().as_secs_f64(),
            rss_mb: mb(rss_end),
        });
        let drain = bus.drain().await;
        drained?;
        drain.context("draining the sink's bus")?;
        let left = broker::depth(admin, SINK_QUEUE).await?;
        anyhow::ensure!(left == 0, "{left} events are left in the queue");
        let cost = *count.cost.get().context("no cost recorded")?;
        let (rss_warm, reset) = *count.warm_rss.get().context("no RSS at the warm-up")?;
        let sampled_peak = samples
            .iter()
            .filter(|s| s.events >= warm)
            .map(|s| s.rss_mb)
            .fold(mb(rss_end), f64::max);
        let rss_peak = if reset {
            sampled_peak.max(mb(high_water))
        } else {
            sampled_peak
        };
        let rss_warm = mb(rss_warm);
        let consume_s = cost.wall.as_secs_f64();
        Ok(Backlog {
            events,
            body_bytes: BODY_BYTES,
            fill_s: fill.as_secs_f64(),
            fill_events_per_s: events as f64 / fill.as_secs_f64().max(f64::MIN_POSITIVE),
            consume_s,
            // From the first delivery to the last: `events - 1` intervals.
            events_per_s: (events - 1) as f64 / consume_s.max(f64::MIN_POSITIVE),
            cpu_s_per_100k: cost.cpu.as_secs_f64() * 100_000.0 / events as f64,
            warm_events: warm,
            rss_start_mb: mb(rss_start),
            rss_warm_mb: rss_warm,
            rss_peak_mb: rss_peak,
            rss_end_mb: mb(rss_end),
            growth_peak_mb: rss_peak - rss_warm,
            growth_end_mb: mb(rss_end) - rss_warm,
            samples: milestones(&samples, events),
        })
    }

    async fn topology(&self, mesh_bin: &Path, notes: &mut Vec<String>) -> anyhow::Result<Topology> {
        self.in_vhost(
            TOPOLOGY_VHOST,
            notes,
            self.topology_in(TOPOLOGY_VHOST, mesh_bin),
        )
        .await
    }

    async fn topology_in(&self, vhost: &str, mesh_bin: &Path) -> anyhow::Result<Topology> {
        let modules = self.plan.scale_modules;
        // In the node's directory, which goes with the node.
        let spec = self.node.dir().join("scale-topology.toml");
        std::fs::write(&spec, spec_text(modules))
            .with_context(|| format!("writing {}", spec.display()))?;
        let spec = spec.to_string_lossy().into_owned();
        let cli = MeshCli {
            program: mesh_bin,
            url: format!("amqp://guest:guest@127.0.0.1:{}/{vhost}", self.node.port()),
            management: self.api.base().to_owned(),
            home: self.node.dir(),
        };
        eprintln!("scale: mesh topology plan and apply, {modules} modules");
        let (plan_time, planned) = cli.run(&["topology", "plan", "-f", &spec]).await?;
        let (apply_time, applied) = cli.run(&["topology", "apply", "-f", &spec]).await?;
        let (again_time, again) = cli.run(&["topology", "apply", "-f", &spec]).await?;
        let (check_time, checked) = cli
            .run(&["topology", "plan", "--check", "-f", &spec])
            .await?;
        let count = |value: &Value, field: &str| value[field].as_array().map_or(0, Vec::len);
        let (differences, changes) = (count(&planned, "differences"), count(&applied, "applied"));
        // Six exchanges, a queue and two bindings per module, all missing at first.
        let expected = 6 + 3 * modules;
        anyhow::ensure!(
            differences == expected && changes == expected,
            "`mesh topology` planned {differences} and applied {changes} differences, not \
             {expected}"
        );
        anyhow::ensure!(
            count(&again, "applied") == 0 && count(&checked, "differences") == 0,
            "the vhost does not agree with the spec after `mesh topology apply`"
        );
        Ok(Topology {
            modules,
            bindings: 2 * modules,
            plan_s: plan_time.as_secs_f64(),
            differences,
            apply_s: apply_time.as_secs_f64(),
            applied: changes,
            apply_again_s: again_time.as_secs_f64(),
            check_s: check_time.as_secs_f64(),
        })
    }
}

/// Subscriber `i` of the attach measurement: module `mNNNN`, one pattern, a handler that
/// does nothing (nothing is published to it), everything else default.
pub(crate) fn subscriber(i: usize) -> BusBuilder {
    Bus::builder()
        .node(NODE)
        .module(format!("m{i:04}"))
        .on_raw([format!("module.src{i:04}.#")], |_| async {
            Ok::<(), HandlerError>(())
        })
}

/// The backlog's consumer: default settings; its handler counts into `count`, if any.
fn sink(count: Option<Arc<Count>>) -> BusBuilder {
    Bus::builder()
        .node(NODE)
        .module(SINK)
        .on_raw([SINK_KEY], move |_| {
            let count = count.clone();
            async move {
                if let Some(count) = count {
                    count.hit();
                }
                Ok::<(), HandlerError>(())
            }
        })
}

/// A JSON body of exactly [`BODY_BYTES`] bytes.
fn body() -> Vec<u8> {
    const FRAME: usize = r#"{"pad":""}"#.len();
    format!(r#"{{"pad":"{}"}}"#, "x".repeat(BODY_BYTES - FRAME)).into_bytes()
}

/// The spec of `modules` modules: `tNNNN` binds the events of the next module and one kind
/// of event of a source of its own, as a module listening to two others would.
fn spec_text(modules: usize) -> String {
    let mut text = format!("node = \"{NODE}\"\nqueue_type = \"quorum\"\n");
    for i in 0..modules {
        let next = (i + 1) % modules;
        text.push_str(&format!(
            "\n[[modules]]\nname = \"t{i:04}\"\npatterns = [\"module.t{next:04}.#\", \
             \"module.src{i:04}.*.created\"]\n"
        ));
    }
    text
}

/// The first sample at or after each twentieth of `events`, and the last.
fn milestones(samples: &[RssSample], events: u64) -> Vec<RssSample> {
    let step = (events / 20).max(1);
    let mut kept: Vec<RssSample> = Vec::new();
    let mut next = 0;
    for sample in samples {
        if sample.events >= next {
            kept.push(*sample);
            next = (sample.events / step + 1) * step;
        }
    }
    if let (Some(last), Some(kept_last)) = (samples.last(), kept.last()) {
        if last.events != kept_last.events || last.seconds != kept_last.seconds {
            kept.push(*last);
        }
    }
    kept
}

/// Waits until `ready()`, looking every [`POLL`], for at most [`PATIENCE`].
pub(crate) async fn until(what: &str, mut ready: impl FnMut() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + PATIENCE;
    while !ready() {
        anyhow::ensure!(Instant::now() < deadline, "{what}: not after {PATIENCE:?}");
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// Resolves, with the instant it saw the last, once consumers of `consumers` distinct
/// queues re-attached (subscriptions and forwarders alike report `ConsumerReattached` under
/// their queue's name); fails if the events cannot be followed (the receiver fell behind,
/// or the transport closed).
pub(crate) async fn follow(
    mut events: broadcast::Receiver<Lifecycle>,
    consumers: usize,
) -> Result<Instant, String> {
    let mut queues = HashSet::new();
    while queues.len() < consumers {
        match events.recv().await {
            Ok(Lifecycle::ConsumerReattached { queue }) => {
                queues.insert(queue);
            }
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(lost)) => {
                return Err(format!(
                    "the lifecycle events could not be followed ({lost} lost)"
                ))
            }
            Err(broadcast::error::RecvError::Closed) => {
                return Err("the transport closed".to_owned())
            }
        }
    }
    Ok(Instant::now())
}

/// The outcome of a forced close.
struct Reattached {
    closed: usize,
    subscriptions: Duration,
    forwarders: Result<Duration, String>,
}

/// `n` subscriber buses started on one transport.
struct Started {
    transport: AmqpTransport,
    buses: Vec<Bus>,
    /// From connecting until every subscription consumed.
    took: Duration,
}

impl Started {
    /// Connects and starts `n` subscribers at once; times until the transport's health
    /// counts every one consuming.
    async fn start(options: AmqpOptions, n: usize) -> anyhow::Result<Started> {
        let began = Instant::now();
        let transport = mesh::amqp::connect(options)
            .await
            .context("connecting mesh to the private node")?;
        let shared: Arc<dyn Transport> = Arc::new(transport.clone());
        let starts = (0..n).map(|i| subscriber(i).start(shared.clone()));
        let mut started = Started {
            transport,
            buses: Vec::with_capacity(n),
            took: Duration::ZERO,
        };
        let mut failure = None;
        for outcome in futures::future::join_all(starts).await {
            match outcome {
                Ok(bus) => started.buses.push(bus),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        let ready = match failure {
            Some(e) => Err(anyhow::Error::new(e).context("starting a subscriber")),
            None => {
                let transport = &started.transport;
                until("every subscription consuming", || {
                    let health = transport.health();
                    health.is_ready() && health.consumers_attached >= n
                })
                .await
            }
        };
        started.took = began.elapsed();
        match ready {
            Ok(()) => Ok(started),
            Err(e) => {
                started.close().await;
                Err(e)
            }
        }
    }

    /// Closes every bus and the transport they share.
    async fn close(self) {
        for bus in &self.buses {
            bus.close().await;
        }
        self.transport.close().await;
    }
}

/// What the backlog's handler shares with the run.
#[derive(Debug)]
struct Count {
    events: u64,
    warm: u64,
    seen: AtomicU64,
    /// Started at the first delivery.
    meter: OnceLock<Meter>,
    /// The RSS once `warm` events were handled, and whether the kernel's high-water mark
    /// was reset then.
    warm_rss: OnceLock<(u64, bool)>,
    cost: OnceLock<Cost>,
    done: Notify,
}

impl Count {
    fn new(events: u64, warm: u64) -> Count {
        Count {
            events,
            warm,
            seen: AtomicU64::new(0),
            meter: OnceLock::new(),
            warm_rss: OnceLock::new(),
            cost: OnceLock::new(),
            done: Notify::new(),
        }
    }

    fn hit(&self) {
        let meter = self.meter.get_or_init(Meter::start);
        let seen = self.seen.fetch_add(1, Ordering::AcqRel) + 1;
        if seen == self.warm {
            let _ = self
                .warm_rss
                .set((measure::rss(), measure::reset_peak_rss()));
        }
        if seen == self.events {
            let _ = self.cost.set(meter.finish());
            self.done.notify_one();
        }
    }
}

/// The `mesh` program, run as an operator would against the node.
struct MeshCli<'a> {
    program: &'a Path,
    url: String,
    management: String,
    /// `XDG_CONFIG_HOME` for it: a directory without `mesh/config.toml`, so no context of
    /// the machine's applies.
    home: &'a Path,
}

impl MeshCli<'_> {
    /// Runs `mesh --json … ARGS`; returns how long it took and its JSON output. Fails on a
    /// non-zero exit.
    async fn run(&self, args: &[&str]) -> anyhow::Result<(Duration, Value)> {
        let mut command = tokio::process::Command::new(self.program);
        // The machine's settings must not leak into the run.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("MESH_") {
                command.env_remove(key);
            }
        }
        command
            .env("XDG_CONFIG_HOME", self.home)
            .args(["--url", &self.url, "--management-url", &self.management])
            .args(["--json", "--color", "never"])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let shown = format!("mesh {}", args.join(" "));
        let began = Instant::now();
        let output = tokio::time::timeout(PATIENCE, command.output())
            .await
            .with_context(|| format!("`{shown}` took more than {PATIENCE:?}"))?
            .with_context(|| format!("running {}", self.program.display()))?;
        let took = began.elapsed();
        anyhow::ensure!(
            output.status.success(),
            "`{shown}` failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
        let json = serde_json::from_slice(&output.stdout)
            .with_context(|| format!("reading the JSON `{shown}` printed"))?;
        Ok((took, json))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_one_kib_of_json() {
        let body = body();
        assert_eq!(body.len(), BODY_BYTES);
        assert!(serde_json::from_slice::<Value>(&body).is_ok());
    }

    #[test]
    fn the_spec_lists_every_module_with_two_patterns() {
        let text = spec_text(3);
        assert_eq!(text.matches("[[modules]]").count(), 3);
        assert!(text.contains("name = \"t0002\"\npatterns = [\"module.t0000.#\""));
        assert!(text.starts_with("node = \"scale\""));
    }

    #[test]
    fn milestones_keep_a_sample_per_twentieth_and_the_last() {
        let samples: Vec<RssSample> = (0..=100)
            .map(|i| RssSample {
                events: i * 10,
                seconds: i as f64,
                rss_mb: 1.0,
            })
            .collect();
        let kept = milestones(&samples, 1_000);
        let events: Vec<u64> = kept.iter().map(|s| s.events).collect();
        assert_eq!(events, (0..=20).map(|i| i * 50).collect::<Vec<_>>());
        let kept = milestones(&samples[..=57], 1_000);
        assert_eq!(kept.last().map(|s| s.events), Some(570));
    }
}
