//! The report's comparisons and targets, judged on made-up records.

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
fn audit_ingest_is_held_to_its_targets_and_its_rss_counts() {
    let verdict = |sqlite_rate: f64, postgres_rate: f64, postgres_rss: f64| {
        let results = Results {
            records: vec![
                record("audit consume only", "raw", 5_000.0, 20.0),
                record("audit ingest", "baseline", 1_000.0, 20.0),
                record("audit ingest", "mesh-audit", sqlite_rate, 30.0),
                record("audit ingest postgres", "baseline", 1_000.0, 20.0),
                record(
                    "audit ingest postgres",
                    "mesh-audit",
                    postgres_rate,
                    postgres_rss,
                ),
            ],
            ..Results::default()
        };
        let targets = targets(&rows(&results), &results);
        let met = |name: &str| {
            targets
                .iter()
                .find(|t| t.name.ends_with(name))
                .map(|t| (t.met, t.wanted.clone()))
        };
        [
            met("audit ingest (events/s)"),
            met("audit ingest postgres (events/s)"),
            met("RSS (mesh runs)"),
        ]
    };
    let sqlite = |met: bool| Some((met, "mesh/baseline >= 0.90".to_owned()));
    let postgres = sqlite;
    let rss = |met: bool| Some((met, "< 100 MB".to_owned()));
    assert_eq!(
        verdict(910.0, 900.0, 30.0),
        [sqlite(true), postgres(true), rss(true)]
    );
    assert_eq!(
        verdict(890.0, 899.0, 130.0),
        [sqlite(false), postgres(false), rss(false)]
    );
    assert_eq!(
        verdict(890.0, 1_200.0, 30.0),
        [sqlite(false), postgres(true), rss(true)]
    );
}

#[test]
fn a_second_shared_logger_must_cost_no_throughput_and_a_third_is_reported() {
    let verdict = |two: f64, three: f64| {
        let results = Results {
            records: vec![
                record("audit shared 1 logger", "mesh-audit-pg", 1_000.0, 20.0),
                record("audit shared 2 loggers", "mesh-audit-pg", two, 20.0),
                record("audit shared 3 loggers", "mesh-audit-pg", three, 20.0),
            ],
            ..Results::default()
        };
        let rows = rows(&results);
        let judged: Vec<(String, bool)> = targets(&rows, &results)
            .into_iter()
            .filter(|t| t.name.contains("shared"))
            .map(|t| (t.name, t.met))
            .collect();
        let three_row = rows
            .iter()
            .find(|r| r.scenario == "audit shared 3 loggers")
            .map(|r| r.ratio);
        (judged, three_row)
    };
    let name = "quorum audit shared 2 loggers (events/s)".to_owned();
    assert_eq!(
        verdict(1_000.0, 500.0),
        (vec![(name.clone(), true)], Some(0.5))
    );
    assert_eq!(verdict(990.0, 2_000.0), (vec![(name, false)], Some(2.0)));
}

#[test]
fn latency_and_the_rpc_round_trip_are_held_at_p50_and_reported_at_p99() {
    for scenario in ["latency", "rpc 1 caller"] {
        let lines = |mesh_p50: f64, mesh_p99: f64| {
            let latency = |side, p50, p99| Record {
                metrics: BTreeMap::from([("p50 ms", p50), ("p99 ms", p99)]),
                ..record(scenario, side, 0.0, 20.0)
            };
            let results = Results {
                scale: None,
                declare: None,
                audit_size: Vec::new(),
                records: vec![
                    latency("raw", 1.0, 2.0),
                    latency("mesh", mesh_p50, mesh_p99),
                ],
            };
            targets_text(&targets(&rows(&results), &results))
        };
        let text = lines(1.05, 9.0);
        let met = format!("MET     quorum {scenario} added at p50: +0.050 ms (wanted <= 0.1 ms)");
        assert!(text.contains(&met), "{text}");
        let reported = format!(
            "REPORT  quorum {scenario} added at p99: +7.000 ms (mesh 9.000 [9.000–9.000] ms, \
             raw 2.000 [2.000–2.000] ms) (wanted no bound: reported with its spread)"
        );
        assert!(text.contains(&reported), "{text}");
        let text = lines(1.2, 2.0);
        let missed = format!("NOT MET quorum {scenario} added at p50: +0.200 ms");
        assert!(text.contains(&missed), "{text}");
        let p99 = format!("NOT MET quorum {scenario} added at p99");
        assert!(!text.contains(&p99), "{text}");
    }
}

#[test]
fn consume_and_end_to_end_are_held_to_the_ceiling_as_well_as_to_acking_each() {
    for (scenario, ceiling) in [
        ("consume ack each", "consume vs ceiling"),
        ("end to end", "end to end vs ceiling"),
    ] {
        let verdict = |mesh_rate: f64| {
            let results = Results {
                scale: None,
                declare: None,
                audit_size: Vec::new(),
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
            scale: None,
            declare: None,
            audit_size: Vec::new(),
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

fn scale_figures(subscriptions: usize, attach_s: f64, growth_mb: f64, apply_s: f64) -> Figures {
    use crate::scenarios::scale::{Attach, Backlog, Topology};
    Figures {
        attach: Attach {
            subscriptions,
            queues: subscriptions * 5,
            consumers: subscriptions * 5,
            first_start_s: 60.0,
            second_start_s: attach_s,
            connections_closed: 2,
            reattach_s: 1.0,
            reattach_forwarders_s: Some(2.0),
            forwarders_note: None,
        },
        backlog: Backlog {
            events: SCALE_EVENTS,
            body_bytes: scale::BODY_BYTES,
            fill_s: 50.0,
            fill_events_per_s: 20_000.0,
            consume_s: 100.0,
            events_per_s: 10_000.0,
            cpu_s_per_100k: 3.0,
            warm_events: 50_000,
            rss_start_mb: 20.0,
            rss_warm_mb: 30.0,
            rss_peak_mb: 30.0 + growth_mb,
            rss_end_mb: 31.0,
            growth_peak_mb: growth_mb,
            growth_end_mb: 1.0,
            samples: Vec::new(),
        },
        topology: Topology {
            modules: SCALE_MODULES,
            bindings: 2 * SCALE_MODULES,
            plan_s: 1.0,
            differences: 1_506,
            apply_s,
            applied: 1_506,
            apply_again_s: 1.0,
            check_s: 1.0,
        },
    }
}

#[test]
fn scale_targets_can_fail_and_are_judged_at_the_full_counts_only() {
    let verdicts = |figures: Figures| {
        let results = Results {
            records: Vec::new(),
            scale: Some(figures),
            declare: None,
            audit_size: Vec::new(),
        };
        targets(&rows(&results), &results)
            .into_iter()
            .map(|t| (t.met, t.judged))
            .collect::<Vec<_>>()
    };
    // Attach, re-attach, RSS growth, topology plan, topology apply.
    assert_eq!(
        verdicts(scale_figures(200, 4.9, 49.9, 29.9)),
        vec![(true, true); 5]
    );
    assert_eq!(
        verdicts(scale_figures(200, 5.0, 50.0, 30.0)),
        vec![
            (false, true),
            (true, true),
            (false, true),
            (true, true),
            (false, true)
        ]
    );
    // A smaller run (`--short`) gives its figures, and no verdict on them.
    let short = verdicts(scale_figures(10, 9.0, 1.0, 1.0));
    assert_eq!(&short[..2], &[(false, false), (true, false)]);
    assert!(short[2..].iter().all(|&(_, judged)| judged));
    let text = targets_text(&targets(
        &[],
        &Results {
            records: Vec::new(),
            scale: Some(scale_figures(10, 9.0, 1.0, 1.0)),
            declare: None,
            audit_size: Vec::new(),
        },
    ));
    assert!(
        text.starts_with("n/a     scale attach of 10 subscriptions"),
        "{text}"
    );
    assert!(text.contains("the verdict is for the full counts"));
    assert!(scale_table(&scale_figures(200, 1.0, 1.0, 1.0)).contains("| 2.00 s |"));
}

#[test]
fn numbers_get_thousands_separators() {
    assert_eq!(number(1_234_567.4, false), "1,234,567");
    assert_eq!(number(999.0, false), "999");
    assert_eq!(number(0.12345, true), "0.123");
}
