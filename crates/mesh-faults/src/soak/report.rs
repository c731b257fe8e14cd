//! What a soak found: the faults as they happened ([`Injected`]), the figures and the
//! verdict ([`SoakReport`]), and how it prints.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use super::plan::PlannedFault;
use crate::secs;

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
