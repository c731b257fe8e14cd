//! `mesh-bench`: mesh side by side with the raw amqprs client, in one invocation against one
//! broker, alternating rounds (raw, mesh, raw, mesh, …) and reporting medians, spread and the
//! mesh/raw ratio per scenario.
//!
//! ```text
//! cargo run --release -p mesh-bench -- --json bench.json
//! cargo run --release -p mesh-bench -- --short          # CI: small counts, one round
//! cargo run --release -p mesh-bench -- --scenarios scale # the scale targets
//! ```
//!
//! Exit codes: 0 done (timings are reported, never asserted), 1 the benchmark failed,
//! 2 bad arguments, 130 interrupted (Ctrl-C). The bench's vhosts are deleted in every case, and
//! the private nodes it starts (`--tls`, the scale scenario) stopped and removed.

mod bench;
mod broker;
mod cli;
mod management;
mod measure;
mod payload;
mod raw;
mod recorder;
mod report;
mod scenarios;
mod target;
mod tls;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;

use crate::broker::{Broker, Ctl};
use crate::report::{Document, PlanSummary, Results};

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(error) => {
            if is_broken_pipe(&error) {
                return ExitCode::SUCCESS;
            }
            eprintln!("mesh-bench: {error:#}");
            ExitCode::from(1)
        }
    }
}

fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn run() -> anyhow::Result<ExitCode> {
    let args = cli::Args::parse();
    let plan = args.plan()?;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the runtime")?;
    if let (Some(side), Some(vhost)) = (args.e2e_emitter, &args.e2e_vhost) {
        let kind = plan
            .queue_kinds
            .first()
            .copied()
            .context("the emitter role needs one --queue-type")?;
        runtime.block_on(scenarios::e2e::emitter(
            side,
            vhost,
            kind,
            plan.e2e_events,
            plan.in_flight,
        ))?;
        return Ok(ExitCode::SUCCESS);
    }
    runtime.block_on(bench_main(plan, args.json))
}

async fn bench_main(plan: cli::Plan, json: Option<std::path::PathBuf>) -> anyhow::Result<ExitCode> {
    // Kept until the end of the run: dropping it stops the node and removes its files.
    let tls_node = match plan.tls {
        true => Some(tls::TlsNode::start().await?),
        false => None,
    };
    let broker = match &tls_node {
        Some(node) => Broker::new(&node.url(), Ctl::Node(node.node()), Some(node.raw_tls()?))?,
        None => Broker::new(&plan.url, Ctl::Command(plan.rabbitmqctl.clone()), None)?,
    };
    let mut results = Results::default();
    let mut notes = Vec::new();
    if plan.tls {
        notes.push(
            "both sides over TLS (amqps) to a private node the bench started, not the shared \
             broker"
                .to_owned(),
        );
    }
    let load_before = measure::load_average();
    let outcome = tokio::select! {
        outcome = bench::run(&plan, &broker, &mut results, &mut notes) => Some(outcome),
        _ = tokio::signal::ctrl_c() => None,
    };
    // Whatever happened, the vhosts go (and with them every queue the bench filled).
    broker.delete_all().await;
    let Some(outcome) = outcome else {
        eprintln!("mesh-bench: interrupted; vhosts deleted, private nodes stopped and removed");
        return Ok(ExitCode::from(130));
    };
    outcome?;
    if let (Some(before), Some(after)) = (load_before, measure::load_average()) {
        notes.push(format!(
            "1-minute load average {before:.2} at the start, {after:.2} at the end, on {} \
             cores shared with the broker (and with whatever else ran)",
            std::thread::available_parallelism().map_or(0, usize::from)
        ));
    }

    let rows = report::rows(&results);
    let targets = report::targets(&rows, &results);
    let mut out = std::io::stdout().lock();
    if !results.records.is_empty() {
        writeln!(
            out,
            "mesh vs raw amqprs: {} round(s) alternating, 256-byte persistent JSON events \
             with the contract headers, pipelined emits {} in flight, prefetch {}, backlog \
             {}, latency at {}/s; medians [min–max]\n",
            plan.rounds, plan.in_flight, plan.prefetch, plan.backlog, plan.rate
        )?;
        write!(out, "{}", report::table(&rows))?;
        writeln!(out)?;
    }
    if let Some(scale) = &results.scale {
        writeln!(
            out,
            "scale: mesh alone, on a private node the bench started; each target \
             gets a verdict only at the counts it is set for\n"
        )?;
        write!(out, "{}", report::scale_table(scale))?;
        writeln!(out)?;
    }
    if let Some(declare) = &results.declare {
        writeln!(
            out,
            "declare: raw then mesh each round, on a private node the bench started\n"
        )?;
        write!(out, "{}", scenarios::declare::table(declare))?;
        writeln!(out)?;
    }
    if !results.audit_size.is_empty() {
        writeln!(
            out,
            "audit size: the audit logger's stores after the backlog, measured by the bench\n"
        )?;
        write!(out, "{}", scenarios::audit_size::table(&results.audit_size))?;
        writeln!(out)?;
    }
    write!(out, "{}", report::targets_text(&targets))?;
    for note in &notes {
        writeln!(out, "note: {note}")?;
    }
    out.flush()?;
    if let Some(path) = json {
        let document = Document {
            command: std::env::args().collect(),
            plan: PlanSummary::of(&plan),
            notes: &notes,
            rows: &rows,
            targets: &targets,
            runs: &results.records,
            scale: results.scale.as_ref(),
            declare: results.declare.as_ref(),
            audit_size: &results.audit_size,
        };
        let text = serde_json::to_string_pretty(&document)?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(ExitCode::SUCCESS)
}
