//! The soak: minutes of continuous work on the private three-node cluster while a seeded
//! random schedule injects faults that overlap in time, and then books that must balance.
//!
//! This module owns the soak's plan ([`plan`]: a fault timeline drawn from a seed, so a failed
//! run is replayed with the same seed), its run ([`run`]) and its [`SoakReport`]. The test
//! `tests/soak.rs` runs it for three minutes with a fixed seed ([`CI_SEED`]) in the suite
//! (`MESH_SOAK_SEED=random` for a fresh one); the binary
//! `mesh-soak` is a thin shell around [`run`] for replays and long soaks by hand
//! (docs/RELIABILITY.md, "Soak").
//!
//! # The work
//!
//! Every client reaches the cluster through a TCP [`Relay`] in front of each node (so that
//! connections can be cut and blackholed), with all three relays given, in different orders:
//!
//! - three emitting modules (`source`, `press`, `mint`, in-process buses), each an
//!   [`Emitter`](crate::Emitter) that retries retryable failures with the same event id;
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

mod books;
mod children;
mod drain;
mod faults;
mod load;
mod plan;
mod problems;
mod report;
mod settings;
mod work;

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use mesh_testkit::{shared_cluster, ClusterHarness, NodeOptions, Relay, TempStore};

pub use self::plan::{plan, FaultKind, PlannedFault, MIN_FAULTS};
pub use self::report::{Injected, SoakReport};
pub use self::settings::{parse_seed, SoakOptions, CI_SEED};
pub use self::work::{
    answer, fate, retry_policy, Fate, ATTEMPTS, CALLER, CONSUMER, EMITTERS, PATTERNS, SERVER, TOOL,
};

use self::books::Times;
use self::faults::{Schedule, Stage};
use self::load::{Calls, Tally};
use self::settings::{REJOIN, VHOST};
use crate::secs;
use crate::setup;

/// Runs a soak: forms (or reuses) the binary's private cluster, runs the load while the
/// plan's faults come, and closes the books. `Err` only when the harness could not set up;
/// everything found wrong afterwards is in [`SoakReport::problems`].
///
/// Its phases: set-up (the cluster, the soak's users, a relay in front of each node), the load
/// (child processes, then in-process clients), the fault schedule running beside the load,
/// the drain, the children's finish, and the books.
pub async fn run(options: SoakOptions) -> anyhow::Result<SoakReport> {
    let started = Instant::now();
    let plan = plan(options.seed, options.duration);
    announce(&options, &plan);

    // Set-up.
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

    // The load.
    let tally = Tally::new();
    let store = TempStore::sqlite();
    let crew = load::start_crew(
        &cluster,
        &access,
        &relays,
        &options.worker,
        store.url(),
        &tally,
    )
    .await?;
    let clients = load::start_clients(&access, &relays, options.duration, &tally).await?;

    // The faults, each at its time, while the load runs for the soak's duration, and on
    // until the last fault was lifted.
    let origin = Instant::now();
    eprintln!(
        "[soak] load started after {}; faults begin",
        secs(started.elapsed())
    );
    let stage = Arc::new(Stage::new(cluster.clone(), relays, crew, origin));
    let schedule = Schedule::start(&stage, &plan);
    let calls = Calls::start(clients.caller.clone(), &tally);
    tokio::time::sleep_until((origin + options.duration).into()).await;
    let injected = schedule.lifted(&tally.problems).await;

    let drained_after = drain::drain(&cluster, &clients, calls, &tally, origin).await;

    // The children finish (the audit logger stores what it holds and says so).
    stage.crew().finish(&tally.problems).await;
    clients.caller.close().await;

    let times = Times {
        started,
        origin,
        drained_after,
    };
    books::close(&options, store, &clients, &tally, injected, times).await
}

/// Prints the seed, how to replay it, and the plan.
fn announce(options: &SoakOptions, plan: &[PlannedFault]) {
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
}
