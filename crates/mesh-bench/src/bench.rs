//! The order of things: per queue type a vhost of its own, each scenario's setup, then the
//! rounds — in each, every selected scenario runs raw then mesh (then the raw ceiling for
//! consume), so drift in the shared machine hits both sides alike. The scale scenario comes
//! last, on a private node of its own.

use std::time::Duration;

use crate::broker::{self, Broker};
use crate::cli::{Plan, QueueKind, Scenario};
use crate::report::Results;
use crate::scenarios::{
    audit, audit_baseline, audit_shared, audit_size, consume, declare, e2e, emit, latency, memory,
    outbox, rpc, scale, Ctx, Db, Run,
};

/// Runs the plan, adding every run to `results`; `notes` collects what the reader should
/// know (skipped scenarios, measurement caveats).
pub(crate) async fn run(
    plan: &Plan,
    broker: &Broker,
    results: &mut Results,
    notes: &mut Vec<String>,
) -> anyhow::Result<()> {
    if plan
        .scenarios
        .iter()
        .any(|s| !matches!(s, Scenario::Scale | Scenario::Declare))
    {
        compare(plan, broker, results, notes).await?;
    }
    if plan.scenarios.contains(&Scenario::Scale) {
        results.scale = Some(scale::run(plan, notes).await?);
    }
    if plan.scenarios.contains(&Scenario::Declare) {
        results.declare = Some(declare::run(plan, notes).await?);
    }
    Ok(())
}

/// The scenarios with a raw side, on the broker of `--url` (or `--tls`'s node).
async fn compare(
    plan: &Plan,
    broker: &Broker,
    results: &mut Results,
    notes: &mut Vec<String>,
) -> anyhow::Result<()> {
    if plan.scenarios.contains(&Scenario::Audit) {
        notes.push(format!(
            "audit ingest: mesh-audit's logger (mesh-audit: prefetch {}, batches of {}) into \
             a new SQLite file (audit ingest) and into a new database on the PostgreSQL server \
             of MESH_TEST_PG_URL, the local one by default (audit ingest postgres), against a \
             hand-written logger on amqprs and sqlx (baseline: the same prefetch, batches, \
             tables and indexes, commit then one multiple ack), run just before it each \
             round; and raw consume of the same queue acking each, writing nothing \
             (audit consume only)",
            mesh_audit::DEFAULT_PREFETCH,
            mesh_audit::DEFAULT_BATCH_SIZE
        ));
    }
    if plan.scenarios.contains(&Scenario::E2e) && plan.tls {
        notes.push(
            "end to end: skipped over --tls (the emitter child reaches the broker of --url only)"
                .to_owned(),
        );
    } else if plan.scenarios.contains(&Scenario::E2e) {
        notes.push(format!(
            "end to end: a child process emits {} events pipelined ({} in flight) while this \
             one consumes them (prefetch {}); the rate from the start signal to the last \
             delivery, the CPU both processes'; raw acks each delivery, the ceiling \
             (raw-multiple) with `multiple` every {}",
            plan.e2e_events, plan.in_flight, plan.prefetch, plan.coalesce
        ));
    }
    if plan.scenarios.contains(&Scenario::Outbox) {
        if plan.mesh {
            notes.push(format!(
                "outbox: each run on a new database (PostgreSQL, or a SQLite file in WAL mode, \
                 synchronous full) with a relay of default options (a poll every {}); \
                 throughput from the first transaction ({} events each, or one) until \
                 the relay marked every event sent after its confirm, against pipelined \
                 direct emits of as many events; lag at {}/s, one event per transaction, \
                 every connection of the pool opened first: the relay's \
                 mesh_outbox_relay_lag_seconds (x-time, set before the insert and the \
                 commit, to the confirm), and its own part (relay p50/p99 ms: the writer's \
                 commit return to the event's delivery from the sink, consumed during the \
                 run), against direct emits at the same rate timed from the call to the \
                 confirm",
                match plan.relay_poll {
                    Some(poll) => format!("{} ms", poll.as_millis()),
                    None => "10 ms, the library's default".to_owned(),
                },
                outbox::PER_TX,
                plan.outbox_rate
            ));
            if !crate::recorder::install() {
                anyhow::bail!("the outbox's lag recorder could not be installed");
            }
        } else {
            notes.push("outbox: skipped, it has no raw side".to_owned());
        }
    }
    if crate::measure::reset_peak_rss() {
        notes.push(
            "peak RSS is per run (VmHWM reset through /proc/self/clear_refs before each run), \
             but never below what the process still holds from earlier runs"
                .to_owned(),
        );
    } else {
        notes.push(
            "peak RSS could not be reset per run (/proc/self/clear_refs refused): each figure \
             is the process's peak so far"
                .to_owned(),
        );
    }
    for &kind in &plan.queue_kinds {
        let vhost = format!("mesh-bench-{}-{}", std::process::id(), kind.as_str());
        eprintln!("== {kind} queues, vhost `{vhost}`", kind = kind.as_str());
        broker.create_vhost(&vhost).await?;
        let outcome = run_kind(plan, broker, &vhost, kind, results).await;
        let deleted = broker.delete_vhost(&vhost).await;
        outcome?;
        deleted?;
    }
    Ok(())
}

async fn run_kind(
    plan: &Plan,
    broker: &Broker,
    vhost: &str,
    kind: QueueKind,
    results: &mut Results,
) -> anyhow::Result<()> {
    let admin = broker.raw(vhost, "admin").await?;
    let ctx = Ctx {
        broker: broker.clone(),
        vhost: vhost.to_owned(),
        kind,
        plan: plan.clone(),
        admin,
    };
    let outcome = rounds(&ctx, results).await;
    broker::close(ctx.admin).await;
    outcome
}

async fn rounds(ctx: &Ctx, results: &mut Results) -> anyhow::Result<()> {
    let plan = &ctx.plan;
    // mesh declares its exchanges at connect; the raw client publishes to them.
    let transport =
        mesh::amqp::connect(
            ctx.broker
                .mesh_options(&ctx.vhost, ctx.kind, plan.in_flight, "setup"),
        )
        .await?;
    transport.close().await;
    for scenario in &plan.scenarios {
        match scenario {
            Scenario::Emit => emit::setup(ctx).await?,
            Scenario::Consume => consume::setup(ctx).await?,
            Scenario::E2e if !plan.tls => e2e::setup(ctx).await?,
            Scenario::E2e => {}
            Scenario::Latency => latency::setup(ctx).await?,
            Scenario::Rpc => rpc::setup(ctx).await?,
            Scenario::Memory => memory::setup(ctx).await?,
            Scenario::Outbox => outbox::setup(ctx).await?,
            Scenario::Audit
            | Scenario::AuditRetain
            | Scenario::AuditShared
            | Scenario::AuditSize
            | Scenario::Scale
            | Scenario::Declare => {}
        }
    }
    let (raw, mesh) = (plan.raw, plan.mesh);
    for round in 1..=plan.rounds {
        for scenario in &plan.scenarios {
            let mut add = |name: &'static str, side: &'static str, run: Run| {
                record(ctx, results, round, name, side, run);
            };
            match scenario {
                Scenario::Emit => {
                    for (pipelined, name) in
                        [(true, "emit pipelined"), (false, "emit one at a time")]
                    {
                        if raw {
                            add(name, "raw", emit::raw(ctx, pipelined).await?);
                        }
                        if mesh {
                            add(name, "mesh", emit::mesh(ctx, pipelined).await?);
                        }
                    }
                }
                Scenario::Consume => {
                    let name = "consume ack each";
                    if raw {
                        add(name, "raw", consume::raw(ctx, None).await?);
                    }
                    if mesh {
                        add(name, "mesh", consume::mesh(ctx).await?);
                    }
                    if raw {
                        let ceiling = consume::raw(ctx, Some(plan.coalesce)).await?;
                        add(name, "raw-multiple", ceiling);
                    }
                }
                Scenario::E2e if plan.tls => {}
                Scenario::E2e => {
                    let name = "end to end";
                    if raw {
                        add(name, "raw", e2e::raw(ctx, None).await?);
                    }
                    if mesh {
                        add(name, "mesh", e2e::mesh(ctx).await?);
                    }
                    if raw {
                        add(
                            name,
                            "raw-multiple",
                            e2e::raw(ctx, Some(plan.coalesce)).await?,
                        );
                    }
                }
                Scenario::Latency => {
                    if raw {
                        add("latency", "raw", latency::raw(ctx).await?);
                    }
                    if mesh {
                        add("latency", "mesh", latency::mesh(ctx).await?);
                    }
                }
                Scenario::Rpc => {
                    for &callers in &plan.rpc_callers {
                        let name = if callers == 1 {
                            "rpc 1 caller"
                        } else {
                            "rpc 64 callers"
                        };
                        if raw {
                            add(name, "raw", rpc::raw(ctx, callers).await?);
                        }
                        if mesh {
                            add(name, "mesh", rpc::mesh(ctx, callers).await?);
                        }
                    }
                }
                Scenario::Memory if mesh => {
                    for run in [memory::idle(ctx).await?, memory::in_flight(ctx).await?] {
                        // A debug build's memory (`--short`, CI) is not what the budgets are for.
                        let over = if plan.short {
                            Ok(())
                        } else {
                            memory::check(&run)
                        };
                        add("memory", "mesh", run);
                        over?;
                    }
                }
                Scenario::Audit => {
                    if raw {
                        add("audit consume only", "raw", audit::raw(ctx).await?);
                    }
                    for (name, db) in [
                        ("audit ingest", Db::Sqlite),
                        ("audit ingest postgres", Db::Postgres),
                    ] {
                        if raw {
                            add(name, "baseline", audit_baseline::run(ctx, db).await?);
                        }
                        if mesh {
                            add(name, "mesh-audit", audit::mesh(ctx, db).await?);
                        }
                    }
                }
                Scenario::AuditSize if mesh && round == 1 => {
                    for db in [Db::Sqlite, Db::Postgres] {
                        let sizes = audit_size::run(ctx, db).await?;
                        eprint!("{}", audit_size::table(std::slice::from_ref(&sizes)));
                        results.audit_size.push(sizes);
                    }
                }
                Scenario::AuditRetain if mesh => {
                    for (name, db) in [
                        ("audit retention sqlite", Db::Sqlite),
                        ("audit retention postgres", Db::Postgres),
                    ] {
                        add(name, "mesh-audit", audit::retained(ctx, db, false).await?);
                        add(
                            name,
                            "mesh-audit-retain",
                            audit::retained(ctx, db, true).await?,
                        );
                    }
                }
                Scenario::Outbox if mesh => {
                    let side = "mesh-outbox";
                    add("outbox direct emit", "mesh", outbox::direct(ctx).await?);
                    for (name, db, per_tx) in [
                        ("outbox postgres 100/tx", Db::Postgres, outbox::PER_TX),
                        ("outbox postgres 1/tx", Db::Postgres, 1),
                        ("outbox sqlite 100/tx", Db::Sqlite, outbox::PER_TX),
                        ("outbox sqlite 1/tx", Db::Sqlite, 1),
                    ] {
                        add(name, side, outbox::throughput(ctx, db, per_tx).await?);
                    }
                    add("outbox direct lag", "mesh", outbox::direct_lag(ctx).await?);
                    add(
                        "outbox postgres lag",
                        side,
                        outbox::lag(ctx, Db::Postgres).await?,
                    );
                    add(
                        "outbox sqlite lag",
                        side,
                        outbox::lag(ctx, Db::Sqlite).await?,
                    );
                }
                Scenario::AuditShared if mesh => {
                    for (name, loggers) in [
                        ("audit shared 1 logger", 1),
                        ("audit shared 2 loggers", 2),
                        ("audit shared 3 loggers", 3),
                    ] {
                        add(
                            name,
                            "mesh-audit-pg",
                            audit_shared::mesh(ctx, loggers).await?,
                        );
                    }
                }
                Scenario::Outbox
                | Scenario::AuditRetain
                | Scenario::AuditShared
                | Scenario::AuditSize
                | Scenario::Memory => {}
                Scenario::Scale | Scenario::Declare => continue,
            }
            // Let the broker settle (fsyncs, GC of deleted segments) between scenarios.
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    // The vhost's deletion takes the rest (exchanges, delay queues).
    for queue in [
        emit::SINK,
        consume::QUEUE,
        e2e::QUEUE,
        latency::QUEUE,
        rpc::QUEUE,
        memory::QUEUE,
        outbox::SINK,
    ] {
        let _ = broker::delete(&ctx.admin, queue).await;
    }
    Ok(())
}

fn record(
    ctx: &Ctx,
    results: &mut Results,
    round: usize,
    scenario: &'static str,
    side: &'static str,
    run: Run,
) {
    let record = results.add(ctx.kind, scenario, side, round, run);
    let metrics: Vec<String> = record
        .metrics
        .iter()
        .map(|(name, value)| format!("{name} {value:.3}"))
        .collect();
    eprintln!(
        "{} round {round}/{}: {scenario} [{side}] {} | cpu {:.2} s/100k | peak rss {:.0} MB",
        record.queue,
        ctx.plan.rounds,
        metrics.join(", "),
        record.cpu_s_per_100k,
        record.peak_rss_mb,
    );
}
