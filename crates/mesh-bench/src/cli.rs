//! The command line, and the plan it resolves to (counts filled in for `--short` or not).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, ValueEnum};

/// Runs the raw amqprs client and mesh doing the same work against one broker, alternating
/// rounds (raw, mesh, raw, mesh, …), and prints medians, spread and the mesh/raw ratio.
///
/// Every run happens in a vhost of its own (one per queue type), created with `rabbitmqctl`
/// and deleted at the end, on error and on Ctrl-C.
#[derive(Debug, Parser)]
#[command(name = "mesh-bench", version)]
pub(crate) struct Args {
    /// The broker (scheme, credentials, host and port are used; the vhost is the bench's own).
    #[arg(long, default_value = "amqp://guest:guest@127.0.0.1:5672")]
    pub(crate) url: String,

    /// Alternating rounds per scenario (default 3; 1 with --short).
    #[arg(long)]
    pub(crate) rounds: Option<usize>,

    /// Events per emit run (pipelined; default 50,000; 2,000 with --short).
    #[arg(long)]
    pub(crate) events: Option<u64>,

    /// Events per one-at-a-time emit run (default 1,000; 200 with --short).
    #[arg(long)]
    pub(crate) sync_events: Option<u64>,

    /// Events pre-published into the queue for each consume run (default 200,000; 2,000
    /// with --short).
    #[arg(long)]
    pub(crate) backlog: Option<u64>,

    /// Events per latency run at --rate (default 10,000, i.e. 5 s at 2,000/s; 1,000 with
    /// --short).
    #[arg(long)]
    pub(crate) latency_events: Option<u64>,

    /// Events pre-published for each audit ingest run (default 50,000; 2,000 with --short).
    #[arg(long)]
    pub(crate) audit_backlog: Option<u64>,

    /// Events the audit-size scenario stores in each store before measuring its bytes on
    /// disk (default 200,000; 2,000 with --short).
    #[arg(long)]
    pub(crate) audit_size_events: Option<u64>,

    /// Events per outbox throughput run with 100 events per transaction, and per pipelined
    /// direct emit run it is compared with (default 20,000; 1,000 with --short).
    #[arg(long)]
    pub(crate) outbox_events: Option<u64>,

    /// Events per outbox throughput run with one event per transaction (default 5,000; 100
    /// with --short).
    #[arg(long)]
    pub(crate) outbox_single_events: Option<u64>,

    /// Events per outbox lag run at --outbox-rate (default 5,000, i.e. 5 s at 1,000/s; 500
    /// with --short).
    #[arg(long)]
    pub(crate) outbox_lag_events: Option<u64>,

    /// Events per end-to-end run, emitted by a child process while this one consumes
    /// (default 100,000; 2,000 with --short).
    #[arg(long)]
    pub(crate) e2e_events: Option<u64>,

    /// The end-to-end scenario's emitter role, run by the bench in a child process (the
    /// broker's URL comes from the environment).
    #[arg(long, value_enum, hide = true, requires = "e2e_vhost")]
    pub(crate) e2e_emitter: Option<EmitterSide>,

    /// The vhost of the emitter role.
    #[arg(long, hide = true, requires = "e2e_emitter")]
    pub(crate) e2e_vhost: Option<String>,

    /// The steady rate of the outbox lag runs, transactions (of one event) per second.
    #[arg(long, default_value_t = 1_000)]
    pub(crate) outbox_rate: u64,

    /// The relays' poll interval in milliseconds, 1 to 60,000, on both databases (default:
    /// the library's, 10).
    #[arg(long)]
    pub(crate) relay_poll_ms: Option<u64>,

    /// The fixed rate of the latency scenario, events per second.
    #[arg(long, default_value_t = 2_000)]
    pub(crate) rate: u64,

    /// Seconds each RPC run lasts (default 2; 0.5 with --short).
    #[arg(long)]
    pub(crate) rpc_seconds: Option<f64>,

    /// Publishes in flight for pipelined emits (raw window and mesh's confirm window).
    #[arg(long, default_value_t = 1_000)]
    pub(crate) in_flight: usize,

    /// Consumer prefetch.
    #[arg(long, default_value_t = 32)]
    pub(crate) prefetch: u16,

    /// The raw consume ceiling acks with `multiple` every this many deliveries.
    #[arg(long, default_value_t = 32)]
    pub(crate) coalesce: u64,

    /// Subscriptions of the scale scenario's attach (default 200; 10 with --short).
    #[arg(long)]
    pub(crate) scale_subscriptions: Option<usize>,

    /// Waiting 1 KiB events the scale scenario consumes (default 1,000,000; 20,000 with
    /// --short).
    #[arg(long)]
    pub(crate) scale_events: Option<u64>,

    /// Subscriptions of the declare scenario (default 200, five queues and consumers each;
    /// 10 with --short).
    #[arg(long)]
    pub(crate) declare_subscriptions: Option<usize>,

    /// Modules of the scale scenario's `mesh topology` spec (default 500; 20 with --short).
    #[arg(long)]
    pub(crate) scale_modules: Option<usize>,

    /// The `mesh` program the scale scenario times `mesh topology` with (default: `mesh`
    /// beside this program, as `cargo build -p meshbus-cli` leaves it in the same target
    /// directory and profile).
    #[arg(long, value_name = "PATH")]
    pub(crate) mesh_bin: Option<PathBuf>,

    /// Scenarios to run, comma-separated (`scale` is not among the default ones: it takes
    /// minutes, and runs on a private node of its own).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "emit,consume,e2e,latency,rpc,memory,audit,outbox"
    )]
    pub(crate) scenarios: Vec<Scenario>,

    /// Queue type of the queues the events land in.
    #[arg(long, value_enum, default_value = "both")]
    pub(crate) queue_type: QueueTypeArg,

    /// Also write the results as JSON to this file.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,

    /// Small counts and one round, so CI can keep the benchmark working; never asserts
    /// timings.
    #[arg(long)]
    pub(crate) short: bool,

    /// Which sides to run: both (the comparison), or one alone (for profiling).
    #[arg(long, value_enum, default_value = "both")]
    pub(crate) sides: Sides,

    /// The `rabbitmqctl` used to create and delete the bench's vhosts.
    #[arg(long, default_value = "rabbitmqctl")]
    pub(crate) rabbitmqctl: String,

    /// Both sides over TLS: start a private RabbitMQ node (its own ports and data directory)
    /// with a TLS listener and a certificate authority made for the run, and connect to it
    /// with `amqps://` (mesh through its URL's `cacertfile`, raw amqprs through the same CA);
    /// `--url` and `--rabbitmqctl` are not used.
    #[arg(long, conflicts_with_all = ["url", "rabbitmqctl"])]
    pub(crate) tls: bool,
}

/// A scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub(crate) enum Scenario {
    /// Persistent, confirmed emits: 1,000 in flight, and one at a time.
    Emit,
    /// Consuming a pre-published backlog with manual acks.
    Consume,
    /// Emit and consume at the same time, one process each (not over `--tls`).
    E2e,
    /// End-to-end latency at a fixed rate.
    Latency,
    /// Request/reply round trips, 1 and 64 callers.
    Rpc,
    /// mesh's RSS per 1,000 idle subscriptions and per 1,000 deliveries in flight, against
    /// budgets (mesh alone).
    Memory,
    /// The audit logger's ingest into SQLite and into PostgreSQL, against a hand-written
    /// logger doing the same durable work (and raw consume, writing nothing).
    Audit,
    /// The audit logger's ingest into a store holding as many events past `--retain 3d`,
    /// removing them meanwhile, against the same without retention (SQLite and PostgreSQL).
    AuditRetain,
    /// 1, 2 and 3 shared audit loggers ingesting one backlog into one PostgreSQL database.
    AuditShared,
    /// Bytes on disk per million events in each store (table, indexes, rollups), after the
    /// audit logger stored `--audit-size-events` events (mesh alone; the first round).
    AuditSize,
    /// The transactional outbox on PostgreSQL and SQLite (throughput to the confirm, the
    /// relay's lag), against mesh's direct emit.
    Outbox,
    /// The scale targets, on a private node: attaching and re-attaching many
    /// subscriptions, consuming a large backlog with flat memory, `mesh topology` on many
    /// modules. mesh alone (no raw side).
    Scale,
    /// Declarations, on a private node: the first start of many subscriptions against a raw
    /// client declaring the same objects with the same concurrency, and their re-attach
    /// after a forced close.
    Declare,
}

/// Which client the end-to-end emitter child runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum EmitterSide {
    Raw,
    Mesh,
}

impl EmitterSide {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            EmitterSide::Raw => "raw",
            EmitterSide::Mesh => "mesh",
        }
    }
}

/// `--sides`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Sides {
    Raw,
    Mesh,
    Both,
}

/// `--queue-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum QueueTypeArg {
    Classic,
    Quorum,
    Both,
}

/// The queue type of one pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum QueueKind {
    Quorum,
    Classic,
}

impl QueueKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            QueueKind::Quorum => "quorum",
            QueueKind::Classic => "classic",
        }
    }

    pub(crate) fn mesh(self) -> mesh::amqp::QueueType {
        match self {
            QueueKind::Quorum => mesh::amqp::QueueType::Quorum,
            QueueKind::Classic => mesh::amqp::QueueType::Classic,
        }
    }
}

/// What to run, with every count decided.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) url: String,
    pub(crate) rounds: usize,
    pub(crate) events: u64,
    pub(crate) sync_events: u64,
    pub(crate) backlog: u64,
    pub(crate) e2e_events: u64,
    pub(crate) audit_backlog: u64,
    pub(crate) audit_size_events: u64,
    pub(crate) latency_events: u64,
    pub(crate) outbox_events: u64,
    pub(crate) outbox_single_events: u64,
    pub(crate) outbox_lag_events: u64,
    pub(crate) outbox_rate: u64,
    pub(crate) relay_poll: Option<Duration>,
    pub(crate) rate: u64,
    pub(crate) rpc_time: Duration,
    pub(crate) rpc_callers: Vec<usize>,
    pub(crate) in_flight: usize,
    pub(crate) prefetch: u16,
    pub(crate) coalesce: u64,
    pub(crate) scenarios: Vec<Scenario>,
    pub(crate) queue_kinds: Vec<QueueKind>,
    pub(crate) short: bool,
    pub(crate) raw: bool,
    pub(crate) mesh: bool,
    pub(crate) rabbitmqctl: String,
    pub(crate) tls: bool,
    pub(crate) scale_subscriptions: usize,
    pub(crate) scale_events: u64,
    pub(crate) scale_modules: usize,
    pub(crate) declare_subscriptions: usize,
    pub(crate) mesh_bin: Option<PathBuf>,
}

impl Args {
    /// The plan: explicit flags win, then `--short`'s small counts, then the defaults.
    pub(crate) fn plan(&self) -> anyhow::Result<Plan> {
        let pick = |given: Option<u64>, short: u64, full: u64| {
            given.unwrap_or(if self.short { short } else { full })
        };
        let rounds = self.rounds.unwrap_or(if self.short { 1 } else { 3 });
        anyhow::ensure!(rounds >= 1, "--rounds must be at least 1");
        anyhow::ensure!(self.in_flight >= 1, "--in-flight must be at least 1");
        anyhow::ensure!(self.prefetch >= 1, "--prefetch must be at least 1");
        anyhow::ensure!(self.coalesce >= 1, "--coalesce must be at least 1");
        anyhow::ensure!(self.rate >= 1, "--rate must be at least 1");
        anyhow::ensure!(self.outbox_rate >= 1, "--outbox-rate must be at least 1");
        anyhow::ensure!(
            self.relay_poll_ms
                .is_none_or(|ms| (1..=60_000).contains(&ms)),
            "--relay-poll-ms must be from 1 to 60000"
        );
        let rpc_seconds = self
            .rpc_seconds
            .unwrap_or(if self.short { 0.5 } else { 2.0 });
        anyhow::ensure!(
            rpc_seconds.is_finite() && rpc_seconds > 0.0,
            "--rpc-seconds must be positive"
        );
        let mut scenarios = self.scenarios.clone();
        scenarios.sort();
        scenarios.dedup();
        anyhow::ensure!(
            !(self.tls
                && (scenarios.contains(&Scenario::Scale)
                    || scenarios.contains(&Scenario::Declare))),
            "--tls does not apply to the scale scenario (it starts a plain node of its own): \
             run it without --tls"
        );
        let size = |given: Option<usize>, short: usize, full: usize| {
            given.unwrap_or(if self.short { short } else { full })
        };
        let plan = Plan {
            url: self.url.clone(),
            rounds,
            events: pick(self.events, 2_000, 50_000),
            sync_events: pick(self.sync_events, 200, 1_000),
            backlog: pick(self.backlog, 2_000, 200_000),
            e2e_events: pick(self.e2e_events, 2_000, 100_000),
            audit_backlog: pick(self.audit_backlog, 2_000, 50_000),
            audit_size_events: pick(self.audit_size_events, 2_000, 200_000),
            latency_events: pick(self.latency_events, 1_000, 10_000),
            outbox_events: pick(self.outbox_events, 1_000, 20_000),
            outbox_single_events: pick(self.outbox_single_events, 100, 5_000),
            outbox_lag_events: pick(self.outbox_lag_events, 500, 5_000),
            outbox_rate: self.outbox_rate,
            relay_poll: self.relay_poll_ms.map(Duration::from_millis),
            rate: self.rate,
            rpc_time: Duration::from_secs_f64(rpc_seconds),
            rpc_callers: vec![1, 64],
            in_flight: self.in_flight,
            prefetch: self.prefetch,
            coalesce: self.coalesce,
            scenarios,
            queue_kinds: match self.queue_type {
                QueueTypeArg::Classic => vec![QueueKind::Classic],
                QueueTypeArg::Quorum => vec![QueueKind::Quorum],
                QueueTypeArg::Both => vec![QueueKind::Quorum, QueueKind::Classic],
            },
            short: self.short,
            raw: self.sides != Sides::Mesh,
            mesh: self.sides != Sides::Raw,
            rabbitmqctl: self.rabbitmqctl.clone(),
            tls: self.tls,
            scale_subscriptions: size(self.scale_subscriptions, 10, 200),
            scale_events: pick(self.scale_events, 20_000, 1_000_000),
            scale_modules: size(self.scale_modules, 20, 500),
            declare_subscriptions: size(self.declare_subscriptions, 10, 200),
            mesh_bin: self.mesh_bin.clone(),
        };
        for (name, count) in [
            ("--events", plan.events),
            ("--sync-events", plan.sync_events),
            ("--backlog", plan.backlog),
            ("--e2e-events", plan.e2e_events),
            ("--audit-backlog", plan.audit_backlog),
            ("--audit-size-events", plan.audit_size_events),
            ("--latency-events", plan.latency_events),
            ("--outbox-events", plan.outbox_events),
            ("--outbox-single-events", plan.outbox_single_events),
            ("--outbox-lag-events", plan.outbox_lag_events),
        ] {
            anyhow::ensure!(count >= 2, "{name} must be at least 2");
        }
        anyhow::ensure!(
            plan.scale_events >= 10,
            "--scale-events must be at least 10"
        );
        // Each subscription takes five channels of the consume connection (its consumer and
        // four retry forwarders) and one more while it declares; RabbitMQ allows 2,047.
        anyhow::ensure!(
            (1..=300).contains(&plan.scale_subscriptions),
            "--scale-subscriptions must be from 1 to 300"
        );
        anyhow::ensure!(
            (1..=300).contains(&plan.declare_subscriptions),
            "--declare-subscriptions must be from 1 to 300"
        );
        anyhow::ensure!(
            (1..=10_000).contains(&plan.scale_modules),
            "--scale-modules must be from 1 to 10000"
        );
        Ok(plan)
    }
}
