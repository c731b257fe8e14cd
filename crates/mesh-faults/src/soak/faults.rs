//! The fault schedule: each planned fault injected at its time, taking its lane's turn, and
//! lifted ([`Schedule`]); what the fault tasks share ([`Stage`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use mesh_testkit::{Cluster, Relay};
use tokio::task::JoinHandle;

use super::children::Crew;
use super::plan::{FaultKind, Lane, PlannedFault};
use super::problems::Problems;
use super::report::Injected;
use super::settings::{REJOIN, WAIT};
use crate::secs;

/// What the fault tasks share: what they hit, the lanes' turns, and the load's start.
pub(super) struct Stage {
    cluster: Arc<Cluster>,
    relays: Vec<Relay>,
    crew: Crew,
    lanes: HashMap<Lane, tokio::sync::Mutex<()>>,
    origin: Instant,
}

impl Stage {
    /// A stage whose faults are timed from `origin`, the start of the load.
    pub(super) fn new(
        cluster: Arc<Cluster>,
        relays: Vec<Relay>,
        crew: Crew,
        origin: Instant,
    ) -> Stage {
        Stage {
            cluster,
            relays,
            crew,
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
        }
    }

    /// The child processes, to finish them once the faults are over.
    pub(super) fn crew(&self) -> &Crew {
        &self.crew
    }
}

/// The fault tasks, one per planned fault.
pub(super) struct Schedule {
    tasks: Vec<JoinHandle<Injected>>,
}

impl Schedule {
    /// Starts a task per fault of `plan`, each injecting its fault at its time.
    pub(super) fn start(stage: &Arc<Stage>, plan: &[PlannedFault]) -> Schedule {
        let tasks = plan
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
        Schedule { tasks }
    }

    /// Waits until every fault was lifted; a fault that failed, panicked or was not lifted
    /// in time is a problem.
    pub(super) async fn lifted(self, problems: &Problems) -> Vec<Injected> {
        let mut injected = Vec::new();
        for task in self.tasks {
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
        injected
    }
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
                        FaultKind::ConsumerKill => &self.crew.consumers[fault.target],
                        FaultKind::ServerKill => &self.crew.servers[fault.target],
                        _ => &self.crew.audit,
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
