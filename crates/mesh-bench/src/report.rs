//! Collecting runs, and the table and JSON they become: per scenario and metric, the median
//! and spread (min–max) of each side over the rounds, the mesh/raw ratio of the medians, the
//! added latency, CPU seconds per 100,000 events and peak RSS, and the acceptance targets.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::cli::{Plan, QueueKind};
use crate::scenarios::Run;

/// One run of one side, as recorded.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Record {
    pub(crate) queue: &'static str,
    pub(crate) scenario: &'static str,
    pub(crate) side: &'static str,
    pub(crate) round: usize,
    pub(crate) metrics: BTreeMap<&'static str, f64>,
    pub(crate) events: u64,
    pub(crate) wall_s: f64,
    pub(crate) cpu_s: f64,
    pub(crate) cpu_s_per_100k: f64,
    pub(crate) peak_rss_mb: f64,
    pub(crate) peak_rss_per_run: bool,
}

/// Every run so far.
#[derive(Debug, Default)]
pub(crate) struct Results {
    pub(crate) records: Vec<Record>,
}

impl Results {
    pub(crate) fn add(
        &mut self,
        kind: QueueKind,
        scenario: &'static str,
        side: &'static str,
        round: usize,
        run: Run,
    ) -> &Record {
        let cpu = run.cost.cpu.as_secs_f64();
        self.records.push(Record {
            queue: kind.as_str(),
            scenario,
            side,
            round,
            metrics: run.metrics,
            events: run.events,
            wall_s: run.cost.wall.as_secs_f64(),
            cpu_s: cpu,
            cpu_s_per_100k: if run.events == 0 {
                0.0
            } else {
                cpu * 100_000.0 / run.events as f64
            },
            peak_rss_mb: run.cost.peak_rss as f64 / (1024.0 * 1024.0),
            peak_rss_per_run: run.cost.rss_per_run,
        });
        &self.records[self.records.len() - 1]
    }

    fn of<'a>(
        &'a self,
        queue: &'a str,
        scenario: &'a str,
        side: &'a str,
    ) -> impl Iterator<Item = &'a Record> + 'a {
        self.records
            .iter()
            .filter(move |r| r.queue == queue && r.scenario == scenario && r.side == side)
    }
}

/// Median and spread of a sample.
#[derive(Debug, Clone, Copy, Serialize)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
    pub(crate) n: usize,
}

impl Spread {
    fn of(values: impl IntoIterator<Item = f64>) -> Option<Spread> {
        let mut values: Vec<f64> = values.into_iter().filter(|v| v.is_finite()).collect();
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let n = values.len();
        let median = if n % 2 == 1 {
            values[n / 2]
        } else {
            (values[n / 2 - 1] + values[n / 2]) / 2.0
        };
        Some(Spread {
            median,
            min: values[0],
            max: values[n - 1],
            n,
        })
    }
}

/// One line of the comparison.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Row {
    pub(crate) queue: &'static str,
    pub(crate) scenario: &'static str,
    pub(crate) metric: &'static str,
    /// The side compared against (`raw`, `raw-multiple` for the consume ceiling, `direct
    /// emit` for the outbox), whose figures are in `raw`.
    pub(crate) baseline: &'static str,
    pub(crate) higher_is_better: bool,
    pub(crate) raw: Spread,
    pub(crate) mesh: Spread,
    /// mesh median / raw median.
    pub(crate) ratio: f64,
    /// mesh median − raw median (latency rows).
    pub(crate) added: Option<f64>,
    pub(crate) raw_cpu_s_per_100k: Option<Spread>,
    pub(crate) mesh_cpu_s_per_100k: Option<Spread>,
    pub(crate) raw_peak_rss_mb: f64,
    pub(crate) mesh_peak_rss_mb: f64,
}

/// One comparison: a row per metric of the baseline's runs, named `name`, comparing the
/// candidate's runs (scenario, side) with the baseline's.
struct Comparison {
    name: &'static str,
    /// The baseline's label in the table and the JSON.
    label: &'static str,
    baseline: (&'static str, &'static str),
    candidate: (&'static str, &'static str),
}

/// A comparison of two sides of one scenario.
const fn sides(
    scenario: &'static str,
    baseline: &'static str,
    candidate: &'static str,
) -> Comparison {
    Comparison {
        name: scenario,
        label: baseline,
        baseline: (scenario, baseline),
        candidate: (scenario, candidate),
    }
}

/// An outbox run against mesh's direct emit (`reference`, a scenario of its own).
const fn outbox(scenario: &'static str, reference: &'static str) -> Comparison {
    Comparison {
        name: scenario,
        label: "direct emit",
        baseline: (reference, "mesh"),
        candidate: (scenario, "mesh-outbox"),
    }
}

const COMPARISONS: [Comparison; 16] = [
    sides("emit pipelined", "raw", "mesh"),
    sides("emit one at a time", "raw", "mesh"),
    sides("consume ack each", "raw", "mesh"),
    Comparison {
        name: "consume vs ceiling",
        label: "raw-multiple",
        baseline: ("consume ack each", "raw-multiple"),
        candidate: ("consume ack each", "mesh"),
    },
    sides("end to end", "raw", "mesh"),
    Comparison {
        name: "end to end vs ceiling",
        label: "raw-multiple",
        baseline: ("end to end", "raw-multiple"),
        candidate: ("end to end", "mesh"),
    },
    sides("latency", "raw", "mesh"),
    sides("rpc 1 caller", "raw", "mesh"),
    sides("rpc 64 callers", "raw", "mesh"),
    sides("audit ingest", "raw", "mesh-audit"),
    outbox("outbox postgres 100/tx", "outbox direct emit"),
    outbox("outbox postgres 1/tx", "outbox direct emit"),
    outbox("outbox sqlite 100/tx", "outbox direct emit"),
    outbox("outbox sqlite 1/tx", "outbox direct emit"),
    outbox("outbox postgres lag", "outbox direct lag"),
    outbox("outbox sqlite lag", "outbox direct lag"),
];

pub(crate) fn rows(results: &Results) -> Vec<Row> {
    let mut queues: Vec<&'static str> = results.records.iter().map(|r| r.queue).collect();
    queues.dedup();
    let mut rows = Vec::new();
    for queue in queues {
        for comparison in &COMPARISONS {
            let raw: Vec<&Record> = results
                .of(queue, comparison.baseline.0, comparison.baseline.1)
                .collect();
            let mesh: Vec<&Record> = results
                .of(queue, comparison.candidate.0, comparison.candidate.1)
                .collect();
            let (Some(first_raw), false) = (raw.first(), mesh.is_empty()) else {
                continue;
            };
            for &metric in first_raw.metrics.keys() {
                let values = |side: &[&Record]| {
                    Spread::of(side.iter().filter_map(|r| r.metrics.get(metric).copied()))
                };
                let (Some(raw_spread), Some(mesh_spread)) = (values(&raw), values(&mesh)) else {
                    continue;
                };
                let latency = metric.ends_with(" ms");
                rows.push(Row {
                    queue,
                    scenario: comparison.name,
                    metric,
                    baseline: comparison.label,
                    higher_is_better: !latency,
                    raw: raw_spread,
                    mesh: mesh_spread,
                    ratio: mesh_spread.median / raw_spread.median,
                    added: latency.then_some(mesh_spread.median - raw_spread.median),
                    raw_cpu_s_per_100k: Spread::of(raw.iter().map(|r| r.cpu_s_per_100k)),
                    mesh_cpu_s_per_100k: Spread::of(mesh.iter().map(|r| r.cpu_s_per_100k)),
                    raw_peak_rss_mb: raw.iter().map(|r| r.peak_rss_mb).fold(0.0, f64::max),
                    mesh_peak_rss_mb: mesh.iter().map(|r| r.peak_rss_mb).fold(0.0, f64::max),
                });
            }
        }
    }
    rows
}

/// One acceptance target and how the run fared.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Target {
    pub(crate) name: String,
    pub(crate) wanted: String,
    pub(crate) actual: String,
    pub(crate) met: bool,
}

pub(crate) fn targets(rows: &[Row], results: &Results) -> Vec<Target> {
    let mut targets = Vec::new();
    for row in rows {
        let ratio = |min: f64| Target {
            name: format!("{} {} ({})", row.queue, row.scenario, row.metric),
            wanted: format!("mesh/raw >= {min:.2}"),
            actual: format!("{:.3}", row.ratio),
            met: row.ratio >= min,
        };
        match (row.scenario, row.baseline, row.metric) {
            ("emit pipelined", "raw", _) if row.queue == "quorum" => {
                targets.push(ratio(0.95));
            }
            ("emit pipelined" | "emit one at a time", "raw", _) => targets.push(ratio(0.9)),
            ("consume ack each", "raw", _) => targets.push(ratio(0.9)),
            // The broker's own limit: the raw client acking with `multiple` once per prefetch.
            ("consume vs ceiling", _, _) => targets.push(Target {
                wanted: "mesh/raw acking with multiple >= 0.90".to_owned(),
                ..ratio(0.9)
            }),
            ("end to end", "raw", _) => targets.push(ratio(0.9)),
            ("end to end vs ceiling", _, _) => targets.push(Target {
                wanted: "mesh/raw acking with multiple >= 0.90".to_owned(),
                ..ratio(0.9)
            }),
            ("audit ingest", "raw", _) => targets.push(ratio(0.8)),
            ("outbox postgres 100/tx", _, "events/s") => targets.push(Target {
                wanted: "outbox/direct emit >= 0.50".to_owned(),
                ..ratio(0.5)
            }),
            ("outbox postgres lag", _, "p99 ms") => targets.push(Target {
                name: format!("{} outbox relay lag at p99 (PostgreSQL)", row.queue),
                wanted: "< 50 ms".to_owned(),
                actual: format!("{:.3} ms", row.mesh.median),
                met: row.mesh.median < 50.0,
            }),
            ("latency", "raw", metric @ ("p50 ms" | "p99 ms")) => {
                let limit = if metric == "p50 ms" { 0.1 } else { 0.3 };
                let added = row.added.unwrap_or(f64::INFINITY);
                targets.push(Target {
                    name: format!("{} latency added at {}", row.queue, &metric[..3]),
                    wanted: format!("<= {limit} ms"),
                    actual: format!("{added:+.3} ms"),
                    met: added <= limit,
                });
            }
            _ => {}
        }
    }
    // The audit logger and the outbox's relay are mesh clients too.
    let mesh_rss = results
        .records
        .iter()
        .filter(|r| matches!(r.side, "mesh" | "mesh-audit" | "mesh-outbox"))
        .map(|r| r.peak_rss_mb)
        .fold(None, |acc: Option<f64>, v| {
            Some(acc.map_or(v, |a| a.max(v)))
        });
    if let Some(rss) = mesh_rss {
        targets.push(Target {
            name: "client peak RSS (mesh runs)".to_owned(),
            wanted: "< 100 MB".to_owned(),
            actual: format!("{rss:.1} MB"),
            met: rss < 100.0,
        });
    }
    targets
}

fn number(value: f64, latency: bool) -> String {
    if latency {
        return format!("{value:.3}");
    }
    let whole = value.round() as u64;
    let text = whole.to_string();
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i > 0 && (text.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn spread(s: &Spread, latency: bool) -> String {
    format!(
        "{} [{}–{}]",
        number(s.median, latency),
        number(s.min, latency),
        number(s.max, latency)
    )
}

/// The table, as Markdown.
pub(crate) fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| queue | scenario | metric | baseline | baseline median [min–max] | mesh median [min–max] | mesh/baseline | CPU s/100k baseline → mesh | peak RSS MB baseline / mesh |"
    );
    let _ = writeln!(out, "|---|---|---|---|---:|---:|---:|---:|---:|");
    for row in rows {
        let latency = !row.higher_is_better;
        let ratio = match row.added {
            Some(added) => format!("{:.2} ({added:+.3} ms)", row.ratio),
            None => format!("{:.2}", row.ratio),
        };
        let cpu = |s: &Option<Spread>| s.map_or("–".to_owned(), |s| format!("{:.2}", s.median));
        let candidate = match row.baseline {
            "raw-multiple" => "raw multiple",
            other => other,
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} → {} | {:.0} / {:.0} |",
            row.queue,
            row.scenario,
            row.metric,
            candidate,
            spread(&row.raw, latency),
            spread(&row.mesh, latency),
            ratio,
            cpu(&row.raw_cpu_s_per_100k),
            cpu(&row.mesh_cpu_s_per_100k),
            row.raw_peak_rss_mb,
            row.mesh_peak_rss_mb,
        );
    }
    out
}

pub(crate) fn targets_text(targets: &[Target]) -> String {
    let mut out = String::new();
    for t in targets {
        let _ = writeln!(
            out,
            "{} {}: {} (wanted {})",
            if t.met { "MET    " } else { "NOT MET" },
            t.name,
            t.actual,
            t.wanted
        );
    }
    out
}

/// The JSON document.
#[derive(Debug, Serialize)]
pub(crate) struct Document<'a> {
    pub(crate) command: Vec<String>,
    pub(crate) plan: PlanSummary,
    pub(crate) notes: &'a [String],
    pub(crate) rows: &'a [Row],
    pub(crate) targets: &'a [Target],
    pub(crate) runs: &'a [Record],
}

/// The plan as the JSON shows it.
#[derive(Debug, Serialize)]
pub(crate) struct PlanSummary {
    pub(crate) rounds: usize,
    pub(crate) events: u64,
    pub(crate) sync_events: u64,
    pub(crate) backlog: u64,
    pub(crate) audit_backlog: u64,
    pub(crate) latency_events: u64,
    pub(crate) rate: u64,
    pub(crate) rpc_seconds: f64,
    pub(crate) in_flight: usize,
    pub(crate) prefetch: u16,
    pub(crate) coalesce: u64,
    pub(crate) body_bytes: usize,
    pub(crate) short: bool,
}

impl PlanSummary {
    pub(crate) fn of(plan: &Plan) -> PlanSummary {
        PlanSummary {
            rounds: plan.rounds,
            events: plan.events,
            sync_events: plan.sync_events,
            backlog: plan.backlog,
            audit_backlog: plan.audit_backlog,
            latency_events: plan.latency_events,
            rate: plan.rate,
            rpc_seconds: plan.rpc_time.as_secs_f64(),
            in_flight: plan.in_flight,
            prefetch: plan.prefetch,
            coalesce: plan.coalesce,
            body_bytes: crate::payload::BODY_SIZE,
            short: plan.short,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_spread() {
        let s = Spread::of([3.0, 1.0, 2.0]).unwrap();
        assert_eq!((s.median, s.min, s.max, s.n), (2.0, 1.0, 3.0, 3));
        let s = Spread::of([4.0, 1.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert!(Spread::of([]).is_none());
    }

    fn record(scenario: &'static str, side: &'static str, rate: f64, rss: f64) -> Record {
        Record {
            queue: "quorum",
            scenario,
            side,
            round: 1,
            metrics: BTreeMap::from([("events/s", rate)]),
            events: 1_000,
            wall_s: 1.0,
            cpu_s: 0.1,
            cpu_s_per_100k: 10.0,
            peak_rss_mb: rss,
            peak_rss_per_run: true,
        }
    }

    #[test]
    fn audit_ingest_is_held_to_its_target_and_its_rss_counts() {
        let verdict = |mesh_rate: f64, audit_rss: f64| {
            let results = Results {
                records: vec![
                    record("audit ingest", "raw", 1_000.0, 20.0),
                    record("audit ingest", "mesh-audit", mesh_rate, audit_rss),
                ],
            };
            let targets = targets(&rows(&results), &results);
            let met = |name: &str| {
                targets
                    .iter()
                    .find(|t| t.name.contains(name))
                    .map(|t| (t.met, t.wanted.clone()))
            };
            (met("audit ingest"), met("RSS"))
        };
        let wanted = "mesh/raw >= 0.80".to_owned();
        assert_eq!(
            verdict(810.0, 30.0),
            (
                Some((true, wanted.clone())),
                Some((true, "< 100 MB".to_owned()))
            )
        );
        assert_eq!(
            verdict(790.0, 130.0),
            (Some((false, wanted)), Some((false, "< 100 MB".to_owned())))
        );
    }

    #[test]
    fn consume_and_end_to_end_are_held_to_the_ceiling_as_well_as_to_acking_each() {
        for (scenario, ceiling) in [
            ("consume ack each", "consume vs ceiling"),
            ("end to end", "end to end vs ceiling"),
        ] {
            let verdict = |mesh_rate: f64| {
                let results = Results {
                    records: vec![
                        record(scenario, "raw", 500.0, 20.0),
                        record(scenario, "raw-multiple", 1_000.0, 20.0),
                        record(scenario, "mesh", mesh_rate, 20.0),
                    ],
                };
                let targets = targets(&rows(&results), &results);
                let met = |name: &str| {
                    targets
                        .iter()
                        .find(|t| t.name.contains(&format!(" {name} (")))
                        .map(|t| t.met)
                };
                (met(scenario), met(ceiling))
            };
            assert_eq!(verdict(950.0), (Some(true), Some(true)), "{scenario}");
            assert_eq!(verdict(850.0), (Some(true), Some(false)), "{scenario}");
            assert_eq!(verdict(400.0), (Some(false), Some(false)), "{scenario}");
        }
    }

    #[test]
    fn the_outbox_is_held_to_half_the_direct_emit_and_a_50_ms_p99() {
        let verdict = |outbox_rate: f64, p99: f64| {
            let lag = |scenario, side, p99| Record {
                metrics: BTreeMap::from([("p50 ms", 1.0), ("p99 ms", p99)]),
                ..record(scenario, side, 0.0, 20.0)
            };
            let results = Results {
                records: vec![
                    record("outbox direct emit", "mesh", 1_000.0, 20.0),
                    record("outbox postgres 100/tx", "mesh-outbox", outbox_rate, 20.0),
                    record("outbox sqlite 100/tx", "mesh-outbox", 1.0, 20.0),
                    lag("outbox direct lag", "mesh", 2.0),
                    lag("outbox postgres lag", "mesh-outbox", p99),
                ],
            };
            let rows = rows(&results);
            assert!(rows
                .iter()
                .any(|r| r.scenario == "outbox sqlite 100/tx" && r.baseline == "direct emit"));
            let targets = targets(&rows, &results);
            let met = |name: &str| {
                targets
                    .iter()
                    .find(|t| t.name.contains(name))
                    .map(|t| t.met)
            };
            (
                met("outbox postgres 100/tx"),
                met("relay lag"),
                met("sqlite"),
            )
        };
        assert_eq!(verdict(500.0, 49.9), (Some(true), Some(true), None));
        assert_eq!(verdict(499.0, 50.0), (Some(false), Some(false), None));
    }

    #[test]
    fn numbers_get_thousands_separators() {
        assert_eq!(number(1_234_567.4, false), "1,234,567");
        assert_eq!(number(999.0, false), "999");
        assert_eq!(number(0.12345, true), "0.123");
    }
}
