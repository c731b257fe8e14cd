//! The soak: minutes of continuous work on the private three-node cluster while a seeded
//! random schedule injects faults that overlap in time, and then books that must balance.
//!
//! This module owns the soak's plan ([`plan`]: a fault timeline drawn from a seed, so a failed
//! run is replayed with the same seed), its run ([`run`]) and its [`SoakReport`]. The test
//! `tests/soak.rs` runs it for three minutes with a fresh seed in the suite; the binary
//! `mesh-soak` is a thin shell around [`run`] for replays and long soaks by hand
//! (docs/RELIABILITY.md, "Soak").
//!
//! # The work
//!
//! Every client reaches the cluster through a TCP [`Relay`] in front of each node (so that
//! connections can be cut and blackholed), with all three relays given, in different orders:
//!
//! - three emitting modules (`source`, `press`, `mint`, in-process buses), each an
//!   [`Emitter`] that retries retryable failures with the same event id;
//! - two competing consumer processes of module `crowd` (`faults-worker soak-consume`) on one
//!   quorum queue with a retry ladder ([`retry_policy`]); each event meets the fate its
//!   sequence number gives it ([`fate`]): handled at once, failing its first one or two
//!   attempts (the retries are counted), or poison (failing every attempt, so it must end
//!   dead-lettered);
//! - an RPC caller (in-process) calling `server.answer` on two server processes
//!   (`faults-worker answer`), a bounded number of calls in flight;
//! - the audit logger (`faults-worker audit`, SQLite store).
//!
//! # The faults
//!
//! Drawn from the seed ([`plan`]): SIGKILL and restart of a node, graceful stop and start of a
//! node, a memory alarm on a node, a blackhole of a relay for some seconds, a TCP cut of a
//! relay's connections, a forced close of a node's client connections, and a SIGKILL of a
//! consumer process, of an RPC server process and of the audit logger (each started again).
//! Faults of one *lane* take turns, so that at most one node is down (or alarmed) at a time,
//! one relay is blackholed at a time and one process of each pair is dead at a time; faults of
//! different lanes overlap freely. A fault whose lane is busy at its planned time waits for
//! it (the timeline shows when it really began).
//!
//! # The books
//!
//! Once the load stopped and every fault was lifted: every confirmed event was handled (or,
//! for poison, dead-lettered), nothing was handled that nobody emitted, poison was never
//! handled and every confirmed poison was dead-lettered for `max-attempts`, events planned to
//! fail were handled only after their failing attempts; every RPC was answered with the right
//! answer or failed with one of the transport's retryable kinds; the queues drained; and the
//! audit store holds every confirmed event exactly once and nothing never emitted. Timings are
//! figures, never assertions.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use mesh::{Bus, DeadReason, RetryPolicy};
use mesh_testkit::{list_bindings, shared_cluster, Cluster, Ledger, NodeOptions, Relay, TempStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::setup::{self, NODE};
use crate::timeline::Timeline;
use crate::worker::{self, Worker};
use crate::{secs, EmitPlan, Emitter, TryOutcome};

/// The emitting modules.
pub const EMITTERS: [&str; 3] = ["source", "press", "mint"];
/// What the consumers bind: every emitter's events.
pub const PATTERNS: [&str; 3] = ["module.source.#", "module.press.#", "module.mint.#"];
/// The competing consumers' module.
pub const CONSUMER: &str = "crowd";
/// The RPC servers' module, and their tool.
pub const SERVER: &str = "server";
/// The tool the caller calls.
pub const TOOL: &str = "server.answer";
/// The caller's module.
pub const CALLER: &str = "caller";
/// The attempts of the consumers' retry ladder.
pub const ATTEMPTS: u32 = 3;
/// The fewest faults a plan holds, however short the soak.
pub const MIN_FAULTS: usize = 15;

/// The vhost the soak runs in.
const VHOST: &str = "soak";
/// The consumers' queue, `<node>.<module>.events`.
const CONSUMER_QUEUE: &str = "faults.crowd.events";
/// The audit logger's queue.
const AUDIT_QUEUE: &str = "faults.audit-logger.events";
/// Faults per minute of soak.
const FAULTS_PER_MINUTE: f64 = 7.0;
/// No fault in the first seconds (the load settles) nor in the last (faults end before the
/// load does, so the soak's tail shows recovery).
const QUIET_START: Duration = Duration::from_secs(10);
const QUIET_END: Duration = Duration::from_secs(30);
/// What the plan budgets for a node's boot and rejoin after it was killed or stopped (the
/// lane waits for the real rejoin anyway).
const REJOIN_BUDGET: Duration = Duration::from_secs(25);
/// The longest a node may take to boot and rejoin.
const REJOIN: Duration = Duration::from_secs(150);
/// The longest any single wait of the harness (a child ready, a drain, an RPC loop's end).
const WAIT: Duration = Duration::from_secs(90);
/// How long, once the load stopped and the faults were lifted, the queues may take to drain.
const SETTLE: Duration = Duration::from_secs(240);
/// How long, once the queues drained, the consumers' last lines may take to be read.
const LINES_AFTER_DRAIN: Duration = Duration::from_secs(30);
/// The pace of each emitter's fresh events, and of the RPC calls.
const EMIT_PACE: Duration = Duration::from_millis(40);
const CALL_PACE: Duration = Duration::from_millis(150);
/// RPC calls in flight at most, and each call's timeout.
const CALLS_IN_FLIGHT: usize = 8;
const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// The clients' AMQP heartbeat: short, so that a blackholed connection is noticed soon.
const HEARTBEAT_SECS: u64 = 5;
/// The consumers' prefetch.
const PREFETCH: u16 = 16;
/// The failure kinds an RPC call may end with under faults: the transport's, all retryable.
const RPC_FAILURE_KINDS: [&str; 6] = [
    "ConnectionLost",
    "Timeout",
    "Nacked",
    "Backpressure",
    "NoServer",
    "Unroutable",
];

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// What the consumers do with an event, by its sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fate {
    /// Handled at its first attempt.
    Handled,
    /// Its first `n` attempts fail (retryably); the next is handled.
    Fails(u32),
    /// Every attempt fails: it ends dead-lettered after [`ATTEMPTS`].
    Poison,
}

impl Fate {
    /// Whether the handler fails attempt `attempt` (1-based).
    pub fn fails(self, attempt: u32) -> bool {
        match self {
            Fate::Handled => false,
            Fate::Fails(n) => attempt <= n,
            Fate::Poison => true,
        }
    }
}

/// The fate of the event with sequence number `seq`: about 1 % poison, 20 % failing one or
/// two attempts, the rest handled at once.
pub fn fate(seq: u64) -> Fate {
    if seq % 97 == 13 {
        Fate::Poison
    } else if seq % 10 == 3 {
        Fate::Fails(1)
    } else if seq % 10 == 7 {
        Fate::Fails(2)
    } else {
        Fate::Handled
    }
}

/// The consumers' retry ladder: [`ATTEMPTS`] attempts, 300 ms then 600 ms apart.
pub fn retry_policy() -> RetryPolicy {
    RetryPolicy::new(
        ATTEMPTS,
        vec![Duration::from_millis(300), Duration::from_millis(600)],
    )
    .expect("the soak's retry policy is valid")
}

/// The RPC servers' answer to `n`.
pub fn answer(n: u64) -> u64 {
    n.wrapping_mul(2).wrapping_add(1)
}

/// A kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// SIGKILL of a node; started again after the hold.
    NodeKill,
    /// Graceful stop of a node (`rabbitmqctl stop`); started again after the hold.
    NodeStop,
    /// A memory alarm on a node for the hold (`set_vm_memory_high_watermark`).
    MemoryAlarm,
    /// A relay forwards nothing for the hold (sockets stay open).
    Blackhole,
    /// A relay closes every connection through it.
    Cut,
    /// `rabbitmqctl close_connection` on every client connection of a node.
    CloseConnections,
    /// SIGKILL of a consumer process; a new one is started.
    ConsumerKill,
    /// SIGKILL of an RPC server process; a new one is started.
    ServerKill,
    /// SIGKILL of the audit logger's process; a new one is started.
    AuditKill,
}

impl FaultKind {
    /// Every kind.
    pub const ALL: [FaultKind; 9] = [
        FaultKind::NodeKill,
        FaultKind::NodeStop,
        FaultKind::MemoryAlarm,
        FaultKind::Blackhole,
        FaultKind::Cut,
        FaultKind::CloseConnections,
        FaultKind::ConsumerKill,
        FaultKind::ServerKill,
        FaultKind::AuditKill,
    ];

    /// Its name in timelines and figures.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::NodeKill => "node-kill",
            FaultKind::NodeStop => "node-stop",
            FaultKind::MemoryAlarm => "memory-alarm",
            FaultKind::Blackhole => "blackhole",
            FaultKind::Cut => "tcp-cut",
            FaultKind::CloseConnections => "close-connections",
            FaultKind::ConsumerKill => "consumer-kill",
            FaultKind::ServerKill => "server-kill",
            FaultKind::AuditKill => "audit-kill",
        }
    }

    /// How often the plan draws it, relative to the others.
    fn weight(self) -> u32 {
        match self {
            FaultKind::NodeKill | FaultKind::ConsumerKill => 3,
            _ => 2,
        }
    }

    /// The lane whose faults take turns, if any.
    fn lane(self) -> Option<Lane> {
        match self {
            FaultKind::NodeKill | FaultKind::NodeStop | FaultKind::MemoryAlarm => Some(Lane::Node),
            FaultKind::Blackhole => Some(Lane::Net),
            FaultKind::ConsumerKill => Some(Lane::Consumer),
            FaultKind::ServerKill => Some(Lane::Server),
            FaultKind::AuditKill => Some(Lane::Audit),
            FaultKind::Cut | FaultKind::CloseConnections => None,
        }
    }

    /// What its target indexes.
    fn target_name(self, target: usize) -> String {
        match self {
            FaultKind::NodeKill
            | FaultKind::NodeStop
            | FaultKind::MemoryAlarm
            | FaultKind::CloseConnections => format!("node {target}"),
            FaultKind::Blackhole | FaultKind::Cut => format!("relay {target}"),
            FaultKind::ConsumerKill => format!("consumer {target}"),
            FaultKind::ServerKill => format!("server {target}"),
            FaultKind::AuditKill => "audit logger".to_owned(),
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Lane {
    Node,
    Net,
    Consumer,
    Server,
    Audit,
}

/// One fault of the plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFault {
    /// When, from the start of the load.
    pub at: Duration,
    /// What.
    pub kind: FaultKind,
    /// Which node, relay or process (see [`FaultKind`]).
    pub target: usize,
    /// How long it is held: a node down, an alarm raised, a relay blackholed; zero for the
    /// instant faults.
    pub hold: Duration,
}

impl fmt::Display for PlannedFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "+{:>6.1}s {:<17} {:<12} hold {}",
            self.at.as_secs_f64(),
            self.kind.name(),
            self.kind.target_name(self.target),
            secs(self.hold)
        )
    }
}

/// The fault timeline of a soak of `duration` drawn from `seed`: at least [`MIN_FAULTS`]
/// faults (about seven a minute) between the first 10 s and the last 30 s, every kind at
/// least once, node faults spaced so that each has time to rejoin before the next. The same
/// seed and duration give the same plan.
pub fn plan(seed: u64, duration: Duration) -> Vec<PlannedFault> {
    let mut rng = StdRng::seed_from_u64(seed);
    let count =
        ((duration.as_secs_f64() / 60.0 * FAULTS_PER_MINUTE).ceil() as usize).max(MIN_FAULTS);
    // A draw that misses a kind is drawn again (from the same generator: still a function
    // of the seed); a soak too short to hold every kind keeps its last draw.
    let mut last = Vec::new();
    for _ in 0..1_000 {
        last = draw(&mut rng, duration, count);
        let kinds: BTreeSet<FaultKind> = last.iter().map(|f| f.kind).collect();
        if kinds.len() == FaultKind::ALL.len() {
            break;
        }
    }
    last
}

fn draw(rng: &mut StdRng, duration: Duration, count: usize) -> Vec<PlannedFault> {
    let from = QUIET_START.as_secs_f64();
    let to = duration
        .saturating_sub(QUIET_END)
        .as_secs_f64()
        .max(from + 1.0);
    let mut times: Vec<f64> = (0..count).map(|_| rng.gen_range(from..to)).collect();
    times.sort_by(f64::total_cmp);
    let mut node_free = 0.0;
    let mut net_free = 0.0;
    let mut faults = Vec::with_capacity(count);
    for at in times {
        let candidates: Vec<FaultKind> = FaultKind::ALL
            .into_iter()
            .filter(|k| match k.lane() {
                Some(Lane::Node) => at >= node_free,
                Some(Lane::Net) => at >= net_free,
                _ => true,
            })
            .collect();
        let total: u32 = candidates.iter().map(|k| k.weight()).sum();
        let mut pick = rng.gen_range(0..total);
        let kind = candidates
            .iter()
            .copied()
            .find(|k| {
                if pick < k.weight() {
                    true
                } else {
                    pick -= k.weight();
                    false
                }
            })
            .unwrap_or(FaultKind::Cut);
        let (target, hold) = match kind {
            FaultKind::NodeKill | FaultKind::NodeStop => (
                rng.gen_range(0..3),
                Duration::from_secs(rng.gen_range(2..=8)),
            ),
            FaultKind::MemoryAlarm => (
                rng.gen_range(0..3),
                Duration::from_secs(rng.gen_range(4..=10)),
            ),
            FaultKind::Blackhole => (
                rng.gen_range(0..3),
                Duration::from_secs(rng.gen_range(4..=12)),
            ),
            FaultKind::Cut | FaultKind::CloseConnections => (rng.gen_range(0..3), Duration::ZERO),
            FaultKind::ConsumerKill | FaultKind::ServerKill => {
                (rng.gen_range(0..2), Duration::ZERO)
            }
            FaultKind::AuditKill => (0, Duration::ZERO),
        };
        match kind.lane() {
            Some(Lane::Node) => {
                let busy = if kind == FaultKind::MemoryAlarm {
                    hold + Duration::from_secs(3)
                } else {
                    hold + REJOIN_BUDGET
                };
                node_free = at + busy.as_secs_f64();
            }
            Some(Lane::Net) => net_free = at + hold.as_secs_f64() + 2.0,
            _ => {}
        }
        faults.push(PlannedFault {
            at: Duration::from_secs_f64(at),
            kind,
            target,
            hold,
        });
    }
    faults
}

/// How to run a soak.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// How long the load runs (faults are planned within it).
    pub duration: Duration,
    /// The seed of the fault plan.
    pub seed: u64,
    /// The `faults-worker` program (its path).
    pub worker: PathBuf,
    /// The fewest faults that must have been injected for the soak to count.
    pub min_faults: usize,
}

/// A fault as it happened.
#[derive(Debug, Clone)]
pub struct Injected {
    /// What was planned.
    pub planned: PlannedFault,
    /// What it hit (a close falls back to a running node, say).
    pub target: String,
    /// When it began and when it was lifted (a node rejoined, a process ready again), from
    /// the start of the load.
    pub began: Duration,
    /// See `began`.
    pub ended: Duration,
    /// What it did and what it measured.
    pub note: String,
    /// Whether the injection itself failed (the harness, not mesh): a failed soak.
    pub failed: bool,
    /// From `ended` to the first confirm and the first handle after it (both), if both came.
    pub recovery: Option<Duration>,
}

/// How an RPC call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum CallOutcome {
    /// Answered; whether with the right answer.
    Answered(bool),
    /// Failed with this kind.
    Failed(String),
}

/// The figures and the verdict of a soak.
#[derive(Debug, Clone, Default)]
pub struct SoakReport {
    /// The seed.
    pub seed: u64,
    /// The load's planned length, and the whole run (cluster start to books closed).
    pub duration: Duration,
    /// See `duration`.
    pub total: Duration,
    /// The timeline as it happened.
    pub faults: Vec<Injected>,
    /// Faults whose interval overlapped another's.
    pub overlapping: usize,
    /// The ledger of events.
    pub ledger: String,
    /// Distinct events attempted, confirmed, handled (poison: dead-lettered), and the extra
    /// handles.
    pub attempted: usize,
    /// See `attempted`.
    pub confirmed: usize,
    /// See `attempted`.
    pub handled: usize,
    /// See `attempted`.
    pub duplicates: usize,
    /// Confirmed but never handled nor dead-lettered, and handled but never emitted.
    pub lost: usize,
    /// See `lost`.
    pub unexpected: usize,
    /// Handler failures on purpose (each one a retry, or a poison's attempt).
    pub retries: u64,
    /// Confirmed poison events, and those dead-lettered for `max-attempts`.
    pub poison_confirmed: usize,
    /// See `poison_confirmed`.
    pub poison_dead: usize,
    /// Failed emit tries by kind.
    pub emit_failures: BTreeMap<String, usize>,
    /// The longest emit (first try to confirm) and the longest single try.
    pub longest_emit: Duration,
    /// See `longest_emit`.
    pub longest_try: Duration,
    /// RPC calls made, answered, failed by kind; requests served twice by the servers;
    /// replies that came after their call ended.
    pub calls: usize,
    /// See `calls`.
    pub answered: usize,
    /// See `calls`.
    pub call_failures: BTreeMap<String, usize>,
    /// See `calls`.
    pub served_twice: usize,
    /// See `calls`.
    pub late_replies: u64,
    /// Rows of the audit store holding soak events, and their distinct ids.
    pub audit_rows: usize,
    /// See `audit_rows`.
    pub audit_distinct: usize,
    /// How long the queues took to drain once the load stopped.
    pub drained_after: Option<Duration>,
    /// Everything that is wrong; empty for a green soak.
    pub problems: Vec<String>,
}

impl SoakReport {
    /// Whether the soak passed.
    pub fn is_green(&self) -> bool {
        self.problems.is_empty()
    }

    /// The faults by kind.
    pub fn faults_by_kind(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for f in &self.faults {
            *counts.entry(f.planned.kind.name()).or_insert(0) += 1;
        }
        counts
    }

    /// The timeline as it happened, one fault a line.
    pub fn timeline(&self) -> String {
        self.faults
            .iter()
            .map(|f| {
                format!(
                    "  +{:>6.1}s..+{:>6.1}s {:<17} {:<12} hold {:<7} recovery {:<7} {}{}",
                    f.began.as_secs_f64(),
                    f.ended.as_secs_f64(),
                    f.planned.kind.name(),
                    f.target,
                    secs(f.planned.hold),
                    crate::opt_secs(f.recovery),
                    if f.failed { "FAILED: " } else { "" },
                    f.note
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl fmt::Display for SoakReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let recoveries: Vec<Duration> = self.faults.iter().filter_map(|f| f.recovery).collect();
        let longest_recovery = recoveries.iter().max().copied();
        let mean_recovery = (!recoveries.is_empty())
            .then(|| recoveries.iter().sum::<Duration>() / recoveries.len() as u32);
        writeln!(
            f,
            "soak seed {} — load {}, total {}",
            self.seed,
            secs(self.duration),
            secs(self.total)
        )?;
        writeln!(
            f,
            "faults: {} injected ({} overlapping another), by kind {:?}",
            self.faults.len(),
            self.overlapping,
            self.faults_by_kind()
        )?;
        writeln!(f, "fault timeline:\n{}", self.timeline())?;
        writeln!(
            f,
            "events: attempted {}, confirmed {}, handled or dead-lettered {}, duplicates {}, \
             lost {}, unexpected {}; handler failures (retries) {}; poison confirmed {}, \
             dead-lettered {}",
            self.attempted,
            self.confirmed,
            self.handled,
            self.duplicates,
            self.lost,
            self.unexpected,
            self.retries,
            self.poison_confirmed,
            self.poison_dead
        )?;
        writeln!(
            f,
            "emits: longest {} (first try to confirm), longest single try {}, failed tries by \
             kind {:?}",
            secs(self.longest_emit),
            secs(self.longest_try),
            self.emit_failures
        )?;
        writeln!(
            f,
            "rpc: {} calls, {} answered, failed by kind {:?}, served twice {}, late replies {}",
            self.calls, self.answered, self.call_failures, self.served_twice, self.late_replies
        )?;
        writeln!(
            f,
            "audit store: {} rows, {} distinct ids; queues drained {} after the load",
            self.audit_rows,
            self.audit_distinct,
            crate::opt_secs(self.drained_after)
        )?;
        writeln!(
            f,
            "recovery (fault lifted → next confirm and handle): mean {}, longest {}",
            crate::opt_secs(mean_recovery),
            crate::opt_secs(longest_recovery)
        )?;
        writeln!(f, "ledger: {}", self.ledger)?;
        if self.problems.is_empty() {
            write!(f, "verdict: GREEN")
        } else {
            write!(
                f,
                "verdict: FAILED ({} problems)\n  {}",
                self.problems.len(),
                self.problems.join("\n  ")
            )
        }
    }
}

/// Problems found along the way, shared by the tasks that find them.
#[derive(Debug, Clone, Default)]
struct Problems(Arc<Mutex<Vec<String>>>);

impl Problems {
    fn push(&self, problem: impl Into<String>) {
        let problem = problem.into();
        eprintln!("[soak] problem: {problem}");
        lock(&self.0).push(problem);
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *lock(&self.0))
    }
}

/// What the consumers said, by event id.
#[derive(Debug, Default)]
struct Consumed {
    /// Attempts that failed on purpose.
    failed: HashMap<String, BTreeSet<u32>>,
    /// Attempts that were handled.
    handled: HashMap<String, Vec<u32>>,
}

type OnLine = Arc<dyn Fn(&str) + Send + Sync>;

/// How to start one child process, again and again.
#[derive(Clone)]
struct Spawner {
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl fmt::Debug for Spawner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The environment holds a password.
        f.debug_struct("Spawner")
            .field("program", &self.program)
            .field("args", &self.args)
            .finish_non_exhaustive()
    }
}

impl Spawner {
    fn new(program: &std::path::Path, args: &[&str], login: &setup::Login) -> Spawner {
        Spawner {
            program: program.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: login
                .env()
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    fn spawn(&self) -> anyhow::Result<Worker> {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        Worker::spawn_with_env(&self.program, &args, &env)
    }
}

/// Reads `worker`'s lines, handing each to `on_line`, until it says `ready`.
async fn until_ready(worker: &mut Worker, on_line: &OnLine) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match worker.next_line(left).await? {
            Some(line) if line == "ready" => return Ok(()),
            Some(line) => on_line(&line),
            None => anyhow::bail!("the child exited before it was ready"),
        }
    }
}

/// Reads what a dead or finishing child still has to say; returns its last line.
async fn drain_lines(worker: &mut Worker, on_line: &OnLine) -> Option<String> {
    let mut last = None;
    while let Ok(Some(line)) = worker.next_line(WAIT).await {
        on_line(&line);
        last = Some(line);
    }
    last
}

enum SlotCommand {
    /// SIGKILL, start a new one; answers how it died and how long until the new one was ready.
    Kill(oneshot::Sender<anyhow::Result<(String, Duration)>>),
    /// Close its stdin and wait for it; answers its last line.
    Finish(oneshot::Sender<anyhow::Result<Option<String>>>),
}

/// A child process kept running: one task owns it, reads its lines, and kills, restarts or
/// finishes it on command. A child that exits on its own is a problem, and is restarted.
#[derive(Debug)]
struct Slot {
    name: String,
    commands: mpsc::Sender<SlotCommand>,
}

impl Slot {
    async fn start(
        name: String,
        spawner: Spawner,
        on_line: OnLine,
        problems: Problems,
    ) -> anyhow::Result<Slot> {
        let mut worker = spawner.spawn()?;
        until_ready(&mut worker, &on_line)
            .await
            .with_context(|| format!("starting {name}"))?;
        let (commands, rx) = mpsc::channel(4);
        tokio::spawn(own(name.clone(), worker, spawner, on_line, rx, problems));
        Ok(Slot { name, commands })
    }

    async fn kill(&self) -> anyhow::Result<(String, Duration)> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(SlotCommand::Kill(tx))
            .await
            .map_err(|_| anyhow::anyhow!("{} is no longer kept", self.name))?;
        rx.await
            .map_err(|_| anyhow::anyhow!("{} is no longer kept", self.name))?
    }

    async fn finish(&self) -> anyhow::Result<Option<String>> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(SlotCommand::Finish(tx))
            .await
            .map_err(|_| anyhow::anyhow!("{} is no longer kept", self.name))?;
        rx.await
            .map_err(|_| anyhow::anyhow!("{} is no longer kept", self.name))?
    }
}

/// The task owning a slot's child.
async fn own(
    name: String,
    mut worker: Worker,
    spawner: Spawner,
    on_line: OnLine,
    mut commands: mpsc::Receiver<SlotCommand>,
    problems: Problems,
) {
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(SlotCommand::Kill(reply)) => {
                    let began = Instant::now();
                    let result = async {
                        let status = worker.kill().await?;
                        // What it said before it died still counts.
                        drain_lines(&mut worker, &on_line).await;
                        worker = spawner.spawn()?;
                        until_ready(&mut worker, &on_line).await?;
                        Ok((worker::describe(&status), began.elapsed()))
                    }
                    .await;
                    let _ = reply.send(result);
                }
                Some(SlotCommand::Finish(reply)) => {
                    let result = async {
                        let status = worker.finish(WAIT).await?;
                        let last = drain_lines(&mut worker, &on_line).await;
                        if !status.success() {
                            anyhow::bail!("{name} ended with {}", worker::describe(&status));
                        }
                        Ok(last)
                    }
                    .await;
                    let _ = reply.send(result);
                    return;
                }
                // The soak is gone: the child goes with the worker's drop.
                None => return,
            },
            line = worker.next_line(Duration::from_secs(3_600)) => match line {
                Ok(Some(line)) => on_line(&line),
                Ok(None) => {
                    let status = worker
                        .exited(WAIT)
                        .await
                        .map_or_else(|e| format!("{e:#}"), |s| worker::describe(&s));
                    problems.push(format!("{name} exited on its own ({status}); started again"));
                    match spawner.spawn() {
                        Ok(new) => {
                            worker = new;
                            if let Err(e) = until_ready(&mut worker, &on_line).await {
                                problems.push(format!("{name} did not start again: {e:#}"));
                                return;
                            }
                        }
                        Err(e) => {
                            problems.push(format!("{name} could not be started again: {e:#}"));
                            return;
                        }
                    }
                }
                // Quiet for an hour, or a read error: look again.
                Err(_) => {}
            },
        }
    }
}

/// What the fault tasks share.
struct Stage {
    cluster: Arc<Cluster>,
    relays: Vec<Relay>,
    consumers: Vec<Slot>,
    servers: Vec<Slot>,
    audit: Slot,
    lanes: HashMap<Lane, tokio::sync::Mutex<()>>,
    origin: Instant,
}

impl Stage {
    /// Injects `fault` (taking its lane's turn) and lifts it.
    async fn inject(&self, fault: &PlannedFault) -> Injected {
        let _turn = match fault.kind.lane() {
            Some(lane) => Some(self.lanes[&lane].lock().await),
            None => None,
        };
        let began = self.origin.elapsed();
        let mut target = fault.kind.target_name(fault.target);
        let outcome: anyhow::Result<String> = async {
            match fault.kind {
                FaultKind::NodeKill | FaultKind::NodeStop => {
                    let node = self.cluster.node(fault.target);
                    if fault.kind == FaultKind::NodeKill {
                        node.kill().await?;
                    } else {
                        node.stop().await?;
                    }
                    let down = self.origin.elapsed();
                    // The fault's own duration.
                    tokio::time::sleep(fault.hold).await;
                    let restart = Instant::now();
                    self.cluster.start_again(&[fault.target]).await?;
                    let booted = restart.elapsed();
                    self.cluster.await_rejoined(fault.target, REJOIN).await?;
                    Ok(format!(
                        "down in {}, booted in {}, rejoined {} after its start",
                        secs(down - began),
                        secs(booted),
                        secs(restart.elapsed())
                    ))
                }
                FaultKind::MemoryAlarm => {
                    let node = self.cluster.node(fault.target);
                    node.set_memory_alarm(true).await?;
                    // The fault's own duration.
                    tokio::time::sleep(fault.hold).await;
                    node.set_memory_alarm(false).await?;
                    Ok("alarm raised and cleared".to_owned())
                }
                FaultKind::Blackhole => {
                    let relay = &self.relays[fault.target];
                    let held = relay.active();
                    relay.blackhole();
                    // The fault's own duration.
                    tokio::time::sleep(fault.hold).await;
                    relay.pass();
                    Ok(format!("{held} connections held silent"))
                }
                FaultKind::Cut => {
                    let relay = &self.relays[fault.target];
                    let cut = relay.active();
                    relay.cut();
                    Ok(format!("{cut} connections cut"))
                }
                FaultKind::CloseConnections => {
                    // The planned node, or the next one that can: a node's process may run
                    // while its broker is not (booting after a kill, or stopping), and then
                    // cannot list its connections.
                    let mut refused = Vec::new();
                    let mut closed = None;
                    for node in (0..3).map(|i| (fault.target + i) % 3) {
                        if !self.cluster.node(node).is_running() {
                            continue;
                        }
                        match self.cluster.node(node).close_connections(None).await {
                            Ok(n) => {
                                closed = Some((node, n));
                                break;
                            }
                            Err(e) => refused.push(format!("node {node}: {e:#}")),
                        }
                    }
                    let (node, closed) = closed.ok_or_else(|| {
                        anyhow::anyhow!("no node could close its connections: {refused:?}")
                    })?;
                    target = format!("node {node}");
                    Ok(format!("{closed} connections closed"))
                }
                FaultKind::ConsumerKill | FaultKind::ServerKill | FaultKind::AuditKill => {
                    let slot = match fault.kind {
                        FaultKind::ConsumerKill => &self.consumers[fault.target],
                        FaultKind::ServerKill => &self.servers[fault.target],
                        _ => &self.audit,
                    };
                    let (status, ready) = slot.kill().await?;
                    Ok(format!(
                        "died of {status}; the new one ready in {}",
                        secs(ready)
                    ))
                }
            }
        }
        .await;
        let ended = self.origin.elapsed();
        let (note, failed) = match outcome {
            Ok(note) => (note, false),
            Err(e) => (format!("{e:#}"), true),
        };
        eprintln!(
            "[soak] +{:>6.1}s {} {target} lifted at +{:.1}s: {}{note}",
            began.as_secs_f64(),
            fault.kind,
            ended.as_secs_f64(),
            if failed { "FAILED: " } else { "" }
        );
        Injected {
            planned: fault.clone(),
            target,
            began,
            ended,
            note,
            failed,
            recovery: None,
        }
    }
}

/// The RPC load: a call every [`CALL_PACE`], at most [`CALLS_IN_FLIGHT`] pending, until
/// `stop`; then waits for the pending ones.
async fn call_load(caller: Bus, stop: CancellationToken, outcomes: Arc<Mutex<Vec<CallOutcome>>>) {
    let slots = Arc::new(Semaphore::new(CALLS_IN_FLIGHT));
    let mut calls = tokio::task::JoinSet::new();
    let mut n: u64 = 0;
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            // The pacing of the load, not a synchronisation.
            () = tokio::time::sleep(CALL_PACE) => {}
        }
        let permit = tokio::select! {
            () = stop.cancelled() => break,
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        n += 1;
        let (caller, outcomes) = (caller.clone(), outcomes.clone());
        calls.spawn(async move {
            let outcome = match caller.call::<u64, u64>(TOOL, &n, CALL_TIMEOUT).await {
                Ok(answer) => CallOutcome::Answered(answer == self::answer(n)),
                Err(e) => CallOutcome::Failed(match e.transport_kind() {
                    Some(kind) => short_kind(&format!("{kind:?}")),
                    None => short_kind(&format!("{:?}", e.kind())),
                }),
            };
            lock(&outcomes).push(outcome);
            drop(permit);
        });
        // Reap the finished ones as we go.
        while calls.try_join_next().is_some() {}
    }
    while calls.join_next().await.is_some() {}
}

/// `TooLarge { size: .. }` → `TooLarge`.
fn short_kind(kind: &str) -> String {
    kind.split([' ', '(', '{'])
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn relay_order(relays: &[Relay], order: [usize; 3]) -> Vec<std::net::SocketAddr> {
    order.iter().map(|&i| relays[i].addr()).collect()
}

/// A child's URL with the soak's short heartbeat.
fn with_heartbeat(url: &str) -> String {
    format!("{url}?heartbeat={HEARTBEAT_SECS}")
}

/// Runs a soak: forms (or reuses) the binary's private cluster, runs the load while the
/// plan's faults come, and closes the books. `Err` only when the harness could not set up;
/// everything found wrong afterwards is in [`SoakReport::problems`].
pub async fn run(options: SoakOptions) -> anyhow::Result<SoakReport> {
    let started = Instant::now();
    let plan = plan(options.seed, options.duration);
    eprintln!(
        "[soak] seed {} (replay: mesh-soak --minutes {} --seed {}), load {}, {} faults planned:\n{}",
        options.seed,
        options.duration.as_secs_f64() / 60.0,
        options.seed,
        secs(options.duration),
        plan.len(),
        plan.iter()
            .map(|f| format!("  {f}"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    let cluster = shared_cluster("soak", NodeOptions::default())
        .await
        .context("a private RabbitMQ cluster (is rabbitmq-server installed?)")?;
    cluster.heal(REJOIN).await.context("healing the cluster")?;
    eprintln!("[soak] cluster ready after {}", secs(started.elapsed()));
    cluster.add_vhost(VHOST).await?;
    let access = setup::cluster_access(&cluster, VHOST).await?;
    let mut relays = Vec::new();
    for addr in cluster.addrs() {
        relays.push(Relay::start(addr).await?);
    }
    let problems = Problems::default();
    let ledger = Ledger::new();
    let handles = Timeline::new();
    let consumed: Arc<Mutex<Consumed>> = Arc::default();
    let served: Arc<Mutex<HashMap<u64, u32>>> = Arc::default();
    let retries = Arc::new(AtomicU64::new(0));

    // The audit logger first, so that it is bound before the first event.
    let store = TempStore::sqlite();
    let store_url = store.url().to_owned();
    let audit_login = access.login_at(&relay_order(&relays, [2, 0, 1]), "audit-logger");
    let audit_url = with_heartbeat(audit_login.url());
    let audit = Slot::start(
        "the audit logger".to_owned(),
        Spawner::new(
            &options.worker,
            &["audit", &audit_url, NODE, &store_url],
            &audit_login,
        ),
        Arc::new(|_: &str| {}),
        problems.clone(),
    )
    .await?;
    let any_node = cluster.node(0).name().to_owned();
    await_bound(&any_node, AUDIT_QUEUE).await?;

    // Two competing consumers.
    let on_consumed: OnLine = {
        let (ledger, handles, consumed, retries) = (
            ledger.clone(),
            handles.clone(),
            consumed.clone(),
            retries.clone(),
        );
        Arc::new(move |line: &str| {
            let mut words = line.split(' ');
            let (what, id, attempt) = (words.next(), words.next(), words.next());
            let attempt = attempt.and_then(|a| a.parse::<u32>().ok());
            match (what, id, attempt) {
                (Some("handled"), Some(id), Some(attempt)) => {
                    ledger.handled(id);
                    handles.mark();
                    lock(&consumed)
                        .handled
                        .entry(id.to_owned())
                        .or_default()
                        .push(attempt);
                }
                (Some("failed"), Some(id), Some(attempt)) => {
                    retries.fetch_add(1, Ordering::Relaxed);
                    lock(&consumed)
                        .failed
                        .entry(id.to_owned())
                        .or_default()
                        .insert(attempt);
                }
                _ => eprintln!("[soak] a consumer said {line:?}"),
            }
        })
    };
    let prefetch = PREFETCH.to_string();
    let mut consumers = Vec::new();
    for (i, order) in [[0, 1, 2], [1, 2, 0]].into_iter().enumerate() {
        let login = access.login_at(&relay_order(&relays, order), CONSUMER);
        let url = with_heartbeat(login.url());
        consumers.push(
            Slot::start(
                format!("consumer {i}"),
                Spawner::new(
                    &options.worker,
                    &["soak-consume", &url, NODE, CONSUMER, &prefetch],
                    &login,
                ),
                on_consumed.clone(),
                problems.clone(),
            )
            .await?,
        );
    }
    await_bound(&any_node, CONSUMER_QUEUE).await?;

    // Two RPC servers and the caller.
    let on_served: OnLine = {
        let served = served.clone();
        Arc::new(move |line: &str| {
            match line
                .strip_prefix("served ")
                .and_then(|n| n.parse::<u64>().ok())
            {
                Some(n) => *lock(&served).entry(n).or_insert(0) += 1,
                None => eprintln!("[soak] a server said {line:?}"),
            }
        })
    };
    let mut servers = Vec::new();
    for (i, order) in [[1, 2, 0], [2, 0, 1]].into_iter().enumerate() {
        let login = access.login_at(&relay_order(&relays, order), SERVER);
        let url = with_heartbeat(login.url());
        servers.push(
            Slot::start(
                format!("server {i}"),
                Spawner::new(
                    &options.worker,
                    &["answer", &url, NODE, SERVER, TOOL],
                    &login,
                ),
                on_served.clone(),
                problems.clone(),
            )
            .await?,
        );
    }
    let client = |module: &str, order: [usize; 3]| {
        access
            .options_at(&relay_order(&relays, order), module)
            .heartbeat(Duration::from_secs(HEARTBEAT_SECS))
    };
    let caller = Bus::builder()
        .node(NODE)
        .module(CALLER)
        .start(setup::connect(client(CALLER, [0, 1, 2])).await)
        .await
        .context("starting the caller")?;

    // The emitters: far more events than the load will reach; it stops by the clock.
    let per_emitter = (options.duration.as_millis() / EMIT_PACE.as_millis()) as usize + 1_000;
    let mut emitters = Vec::new();
    let mut fates: HashMap<String, Fate> = HashMap::new();
    for (module, order) in EMITTERS.into_iter().zip([[0, 1, 2], [1, 2, 0], [2, 0, 1]]) {
        let bus = Bus::builder()
            .node(NODE)
            .module(module)
            .start(setup::connect(client(module, order)).await)
            .await
            .with_context(|| format!("starting emitter {module}"))?;
        let emitter = Emitter::start(
            bus.clone(),
            ledger.clone(),
            EmitPlan::new(per_emitter, "tick").paced(EMIT_PACE),
        );
        for (seq, id) in emitter.ids().iter().enumerate() {
            fates.insert(id.to_string(), fate(seq as u64));
        }
        emitters.push((bus, emitter));
    }

    // The faults, each at its time.
    let origin = Instant::now();
    eprintln!(
        "[soak] load started after {}; faults begin",
        secs(started.elapsed())
    );
    let stage = Arc::new(Stage {
        cluster: cluster.clone(),
        relays,
        consumers,
        servers,
        audit,
        lanes: [
            Lane::Node,
            Lane::Net,
            Lane::Consumer,
            Lane::Server,
            Lane::Audit,
        ]
        .into_iter()
        .map(|l| (l, tokio::sync::Mutex::new(())))
        .collect(),
        origin,
    });
    let fault_tasks: Vec<JoinHandle<Injected>> = plan
        .iter()
        .cloned()
        .map(|fault| {
            let stage = stage.clone();
            tokio::spawn(async move {
                // The schedule's own timer.
                tokio::time::sleep_until((stage.origin + fault.at).into()).await;
                stage.inject(&fault).await
            })
        })
        .collect();
    let stop_calls = CancellationToken::new();
    let call_outcomes: Arc<Mutex<Vec<CallOutcome>>> = Arc::default();
    let calls = tokio::spawn(call_load(
        caller.clone(),
        stop_calls.clone(),
        call_outcomes.clone(),
    ));

    // The load runs for the soak's duration, and on until the last fault was lifted.
    tokio::time::sleep_until((origin + options.duration).into()).await;
    let mut injected = Vec::new();
    for task in fault_tasks {
        match tokio::time::timeout(REJOIN + WAIT, task).await {
            Ok(Ok(fault)) => {
                if fault.failed {
                    problems.push(format!(
                        "injecting {} on {} failed: {}",
                        fault.planned.kind, fault.target, fault.note
                    ));
                }
                injected.push(fault);
            }
            Ok(Err(e)) => problems.push(format!("a fault task panicked: {e}")),
            Err(_) => problems.push("a fault was not lifted in time".to_owned()),
        }
    }
    let load_end = Instant::now();
    eprintln!(
        "[soak] load stops at +{:.1}s; {} confirmed so far",
        origin.elapsed().as_secs_f64(),
        emitters.iter().map(|(_, e)| e.confirmed()).sum::<usize>()
    );
    for (_, emitter) in &emitters {
        emitter.stop();
    }
    stop_calls.cancel();
    // Every emit still unconfirmed gets its outcome (a confirm, or a failure within the
    // deadline).
    for (bus, _) in &emitters {
        match tokio::time::timeout(WAIT, bus.drain()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => problems.push(format!("draining an emitter: {}", crate::chain(&e))),
            Err(_) => problems.push(format!("an emitter did not drain within {WAIT:?}")),
        }
    }
    if tokio::time::timeout(CALL_TIMEOUT + WAIT, calls)
        .await
        .is_err()
    {
        problems.push("the RPC calls did not end".to_owned());
    }
    if let Err(e) = cluster.heal(REJOIN).await {
        problems.push(format!("healing the cluster: {e:#}"));
    }

    // The queues drain first: then every delivery was settled, and what a consumer handled
    // it said before its ack, so what is still unhandled after a short read of their lines
    // is lost (a broken build fails here within a minute of the load, not at a long
    // timeout).
    let drained = cluster.await_drained(VHOST, SETTLE).await;
    let drained_after = match drained {
        Ok(_) => Some(load_end.elapsed()),
        Err(e) => {
            // Where the messages sit, for the report: leaders, members, counts.
            let queues = cluster.quorum_queues(VHOST).await.map_or_else(
                |e| format!("(no listing: {e:#})"),
                |queues| {
                    queues
                        .iter()
                        .filter(|q| q.messages > 0)
                        .map(|q| format!("{q:?}"))
                        .collect::<Vec<_>>()
                        .join("; ")
                },
            );
            problems.push(format!("{e:#}; quorum queues holding messages: {queues}"));
            None
        }
    };
    // Every confirmed event that is not poison handled.
    let poison: BTreeSet<String> = fates
        .iter()
        .filter(|(_, f)| **f == Fate::Poison)
        .map(|(id, _)| id.clone())
        .collect();
    let settle_by = Instant::now() + LINES_AFTER_DRAIN;
    let lost_good = loop {
        let lost: Vec<String> = ledger
            .report()
            .lost
            .into_iter()
            .filter(|id| !poison.contains(id))
            .collect();
        if lost.is_empty() || Instant::now() >= settle_by {
            break lost;
        }
        // Polling the books under a deadline; the handles come from the consumers' lines.
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    if !lost_good.is_empty() {
        problems.push(format!(
            "{} confirmed events were not handled, {} after the queues drained",
            lost_good.len(),
            secs(LINES_AFTER_DRAIN)
        ));
    }

    // The children finish (the audit logger stores what it holds and says so).
    for slot in stage.consumers.iter().chain(&stage.servers) {
        if let Err(e) = slot.finish().await {
            problems.push(format!("finishing {}: {e:#}", slot.name));
        }
    }
    match stage.audit.finish().await {
        Ok(line) => eprintln!("[soak] the audit logger said {line:?} at its end"),
        Err(e) => problems.push(format!("finishing the audit logger: {e:#}")),
    }
    caller.close().await;

    // The audit store against the books.
    let confirmed_total = ledger.report().confirmed;
    let audit_store = mesh_audit::Store::open(mesh_audit::StoreOptions::url(&store_url)?)
        .await
        .context("opening the audit store")?;
    let rows = audit_store
        .events(&mesh_audit::EventQuery::new().limit(confirmed_total * 2 + 10_000))
        .await
        .context("reading the audit store")?;
    let dead = audit_store
        .dead_letters(&mesh_audit::DeadLetterQuery::new().limit(confirmed_total + 10_000))
        .await
        .context("reading the dead letters")?;
    audit_store.close().await;
    drop(store);

    let soak_rows: Vec<String> = rows
        .iter()
        .filter(|r| {
            EMITTERS
                .iter()
                .any(|m| r.routing_key.starts_with(&format!("module.{m}.")))
        })
        .map(|r| r.id.to_string())
        .collect();
    let audit_distinct: BTreeSet<&String> = soak_rows.iter().collect();
    if audit_distinct.len() != soak_rows.len() {
        problems.push(format!(
            "the audit store holds {} rows of soak events but {} distinct ids",
            soak_rows.len(),
            audit_distinct.len()
        ));
    }
    let fates_of = |id: &str| fates.get(id).copied();
    let never_emitted: Vec<&&String> = audit_distinct
        .iter()
        .filter(|id| fates_of(id).is_none())
        .collect();
    if !never_emitted.is_empty() {
        problems.push(format!(
            "the audit store holds {} events nobody emitted: {:?}",
            never_emitted.len(),
            never_emitted.iter().take(10).collect::<Vec<_>>()
        ));
    }

    // Poison: dead-lettered (for max-attempts), never handled; nothing else dead-lettered.
    let mut dead_poison: BTreeSet<String> = BTreeSet::new();
    for letter in &dead {
        let Some(id) = letter.event_id.map(|id| id.to_string()) else {
            problems.push(format!(
                "a dead letter without an event id: {:?}",
                letter.id
            ));
            continue;
        };
        match fates_of(&id) {
            Some(Fate::Poison) if letter.reason == Some(DeadReason::MaxAttempts) => {
                dead_poison.insert(id);
            }
            Some(Fate::Poison) => problems.push(format!(
                "poison {id} dead-lettered for {:?}, not max-attempts",
                letter.reason
            )),
            _ => problems.push(format!(
                "event {id} ({:?}) dead-lettered ({:?} after {} attempts)",
                fates_of(&id),
                letter.reason,
                letter.attempts
            )),
        }
    }
    for id in &dead_poison {
        ledger.handled(id.clone());
    }
    let report = ledger.report();
    let poison_confirmed = emitters
        .iter()
        .flat_map(|(_, e)| {
            let confirmed: BTreeSet<usize> = e
                .tries()
                .into_iter()
                .filter(|t| t.outcome == TryOutcome::Confirmed)
                .map(|t| t.index)
                .collect();
            confirmed
                .into_iter()
                .filter(|i| fate(*i as u64) == Fate::Poison)
                .map(|i| e.ids()[i].to_string())
                .collect::<Vec<_>>()
        })
        .collect::<BTreeSet<String>>();
    let poison_undead: Vec<&String> = poison_confirmed
        .iter()
        .filter(|id| !dead_poison.contains(*id))
        .collect();
    if !poison_undead.is_empty() {
        problems.push(format!(
            "{} confirmed poison events were never dead-lettered: {:?}",
            poison_undead.len(),
            poison_undead.iter().take(10).collect::<Vec<_>>()
        ));
    }
    // Every confirmed event in the audit store (poison included: it was emitted).
    let all_confirmed: Vec<String> = emitters
        .iter()
        .flat_map(|(_, e)| {
            e.tries()
                .into_iter()
                .filter(|t| t.outcome == TryOutcome::Confirmed)
                .map(|t| e.ids()[t.index].to_string())
                .collect::<Vec<_>>()
        })
        .collect::<BTreeSet<String>>()
        .into_iter()
        .collect();
    let unaudited: Vec<&String> = all_confirmed
        .iter()
        .filter(|id| !audit_distinct.contains(id))
        .collect();
    if !unaudited.is_empty() {
        problems.push(format!(
            "{} confirmed events are missing from the audit store: {:?}",
            unaudited.len(),
            unaudited.iter().take(10).collect::<Vec<_>>()
        ));
    }

    // The handlers' attempts: poison never handled, planned failures before each handle.
    {
        let consumed = lock(&consumed);
        let mut wrong = Vec::new();
        for (id, attempts) in &consumed.handled {
            match fates_of(id) {
                Some(Fate::Poison) => wrong.push(format!("poison {id} handled")),
                Some(Fate::Fails(n)) => {
                    let failed = consumed.failed.get(id).cloned().unwrap_or_default();
                    let missing: Vec<u32> = (1..=n).filter(|a| !failed.contains(a)).collect();
                    if !missing.is_empty() || attempts.iter().any(|a| *a <= n) {
                        wrong.push(format!(
                            "{id} (fails {n}) handled at attempts {attempts:?}, failed at \
                             {failed:?}"
                        ));
                    }
                }
                Some(Fate::Handled) | None => {}
            }
        }
        if !wrong.is_empty() {
            problems.push(format!(
                "{} events handled against their fate: {:?}",
                wrong.len(),
                wrong.iter().take(10).collect::<Vec<_>>()
            ));
        }
    }

    // RPC.
    let outcomes = lock(&call_outcomes).clone();
    let mut call_failures: BTreeMap<String, usize> = BTreeMap::new();
    let mut answered = 0;
    let mut wrong_answers = 0;
    for outcome in &outcomes {
        match outcome {
            CallOutcome::Answered(true) => answered += 1,
            CallOutcome::Answered(false) => wrong_answers += 1,
            CallOutcome::Failed(kind) => *call_failures.entry(kind.clone()).or_default() += 1,
        }
    }
    if wrong_answers > 0 {
        problems.push(format!(
            "{wrong_answers} RPC calls got another call's answer"
        ));
    }
    let untyped: Vec<&String> = call_failures
        .keys()
        .filter(|k| !RPC_FAILURE_KINDS.contains(&k.as_str()))
        .collect();
    if !untyped.is_empty() {
        problems.push(format!(
            "RPC calls failed with unexpected kinds {untyped:?}"
        ));
    }
    if answered == 0 {
        problems.push("no RPC call was answered".to_owned());
    }
    let served_twice = lock(&served).values().filter(|n| **n > 1).count();

    // The ledger.
    if !report.is_clean() {
        problems.push(format!("the ledger does not balance: {report}"));
    }
    let retries = retries.load(Ordering::Relaxed);
    if retries == 0 {
        problems.push("no handler failed: the retries were not exercised".to_owned());
    }
    if poison_confirmed.is_empty() {
        problems.push("no poison event was confirmed".to_owned());
    }

    // The faults: enough, overlapping, each followed by progress.
    let confirms: Vec<Timeline> = emitters.iter().map(|(_, e)| e.confirms().clone()).collect();
    for fault in &mut injected {
        let lifted = origin + fault.ended;
        let confirm = confirms.iter().filter_map(|t| t.first_after(lifted)).min();
        let handle = handles.first_after(lifted);
        fault.recovery = match (confirm, handle) {
            (Some(c), Some(h)) => Some(c.max(h) - lifted),
            _ => None,
        };
    }
    let overlapping = injected
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            injected
                .iter()
                .enumerate()
                .any(|(j, b)| *i != j && a.began <= b.ended && b.began <= a.ended)
        })
        .count();
    if injected.len() < options.min_faults {
        problems.push(format!(
            "only {} faults injected (at least {} wanted)",
            injected.len(),
            options.min_faults
        ));
    }
    if overlapping < 2 {
        problems.push("no two faults overlapped".to_owned());
    }

    let mut tries = Vec::new();
    let mut emit_failures: BTreeMap<String, usize> = BTreeMap::new();
    let mut late_replies = caller.transport_stats().late_replies;
    for (bus, emitter) in &emitters {
        tries.push(emitter.tries());
        for (kind, n) in emitter.failures() {
            *emit_failures.entry(kind).or_default() += n;
        }
        late_replies += bus.transport_stats().late_replies;
        for fatal in emitter.fatal() {
            problems.push(format!("an emit failed for good: {fatal}"));
        }
    }
    let (longest_emit, longest_try) = tries
        .iter()
        .map(|t| crate::emitter::longest_emits(t))
        .fold((Duration::ZERO, Duration::ZERO), |(a, b), (c, d)| {
            (a.max(c), b.max(d))
        });

    let mut problems_found = problems.take();
    problems_found.dedup();
    Ok(SoakReport {
        seed: options.seed,
        duration: options.duration,
        total: started.elapsed(),
        overlapping,
        faults: injected,
        ledger: report.to_string(),
        attempted: report.attempted,
        confirmed: report.confirmed,
        handled: report.handled_unique,
        duplicates: report.duplicates,
        lost: report.lost.len(),
        unexpected: report.unexpected.len(),
        retries,
        poison_confirmed: poison_confirmed.len(),
        poison_dead: dead_poison.len(),
        emit_failures,
        longest_emit,
        longest_try,
        calls: outcomes.len(),
        answered,
        call_failures,
        served_twice,
        late_replies,
        audit_rows: soak_rows.len(),
        audit_distinct: audit_distinct.len(),
        drained_after,
        problems: problems_found,
    })
}

/// Waits until `queue` of the soak's vhost is bound to the events exchange.
async fn await_bound(node: &str, queue: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(bindings) = list_bindings(Some(node), VHOST).await {
            if bindings
                .iter()
                .any(|b| b.source == "mesh.events" && b.destination == queue)
            {
                return Ok(());
            }
        }
        if Instant::now() >= deadline {
            anyhow::bail!("{queue} was not bound within {WAIT:?}");
        }
        // Polling the broker's bindings.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_a_function_of_its_seed() {
        let d = Duration::from_secs(180);
        assert_eq!(plan(7, d), plan(7, d));
        assert_ne!(plan(7, d), plan(8, d));
    }

    #[test]
    fn a_short_plan_holds_enough_faults_of_every_kind_within_the_load() {
        for seed in 0..50 {
            let d = Duration::from_secs(180);
            let plan = plan(seed, d);
            assert!(plan.len() >= MIN_FAULTS, "seed {seed}: {}", plan.len());
            let kinds: BTreeSet<FaultKind> = plan.iter().map(|f| f.kind).collect();
            assert_eq!(kinds.len(), FaultKind::ALL.len(), "seed {seed}: {kinds:?}");
            assert!(plan.windows(2).all(|w| w[0].at <= w[1].at));
            assert!(plan
                .iter()
                .all(|f| f.at >= QUIET_START && f.at + QUIET_END <= d));
        }
    }

    #[test]
    fn node_faults_are_planned_one_at_a_time() {
        for seed in 0..50 {
            let plan = plan(seed, Duration::from_secs(1_800));
            let nodes: Vec<&PlannedFault> = plan
                .iter()
                .filter(|f| f.kind.lane() == Some(Lane::Node))
                .collect();
            for w in nodes.windows(2) {
                assert!(w[0].at + w[0].hold < w[1].at, "seed {seed}: {w:?}");
            }
        }
    }

    #[test]
    fn fates_fail_as_planned() {
        assert_eq!(fate(13), Fate::Poison);
        assert_eq!(fate(3), Fate::Fails(1));
        assert_eq!(fate(7), Fate::Fails(2));
        assert_eq!(fate(1), Fate::Handled);
        assert!(Fate::Fails(2).fails(2) && !Fate::Fails(2).fails(3));
        assert!((1..=ATTEMPTS).all(|a| Fate::Poison.fails(a)));
        // Every planned failure ends before the ladder does.
        assert!((0..1_000).all(|s| match fate(s) {
            Fate::Fails(n) => n < ATTEMPTS,
            _ => true,
        }));
        assert_eq!(answer(20), 41);
    }
}
