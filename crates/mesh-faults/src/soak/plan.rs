//! The fault plan: a timeline of faults drawn from a seed ([`plan`]), so that a failed soak
//! is replayed with the same seed; the kinds of fault and the lanes whose faults take turns.

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::secs;

/// The fewest faults a plan holds, however short the soak.
pub const MIN_FAULTS: usize = 15;
/// Faults per minute of soak.
const FAULTS_PER_MINUTE: f64 = 7.0;
/// No fault in the first seconds (the load settles) nor in the last (faults end before the
/// load does, so the soak's tail shows recovery).
const QUIET_START: Duration = Duration::from_secs(10);
const QUIET_END: Duration = Duration::from_secs(30);
/// What the plan budgets for a node's boot and rejoin after it was killed or stopped (the
/// lane waits for the real rejoin anyway).
const REJOIN_BUDGET: Duration = Duration::from_secs(25);

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
    pub(super) fn lane(self) -> Option<Lane> {
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
    pub(super) fn target_name(self, target: usize) -> String {
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

/// A lane of faults that take turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Lane {
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
}
