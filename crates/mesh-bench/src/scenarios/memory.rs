//! Memory: what mesh holds, in resident memory (`VmRSS`), per 1,000 idle subscriptions and
//! per 1,000 deliveries in flight, each checked against a budget. mesh alone (there is no raw
//! side to compare with).
//!
//! - **Idle subscriptions**: a bus with no handlers opens [`SUBSCRIPTIONS`] listeners
//!   ([`mesh::Bus::listen`]: an exclusive, server-named queue, a binding and a consumer
//!   each) that receive nothing; the figure is the process's RSS after them less before
//!   them (ten opened first warm up and are not counted), scaled to 1,000.
//! - **Deliveries in flight**: a bus consuming `memory.bench.events` with a prefetch of
//!   [`DELIVERIES`] and a handler that holds each delivery until released; the raw client
//!   publishes that many 256-byte events (the contract's headers) and the figure is the RSS
//!   once every one of them is with a handler, less before they were published (ten
//!   delivered and released first warm up), scaled to 1,000.
//!
//! RSS counts pages, so a figure moves by a few pages between runs; the allocator keeps what
//! was freed, so each figure is growth into memory not used before, which is why neither
//! warm-up is as large as the measured step. A figure above [`BUDGET_FACTOR`] × its budget
//! fails the bench ([`check`]); `--short` (CI's debug build) measures 100 of each and checks
//! nothing, as a debug build's memory is not the release build's the budgets are set for.

use std::sync::Arc;

use anyhow::Context;
use mesh::HandlerError;
use tokio::sync::{watch, Semaphore};

use super::{patience, Ctx, Run, EVENTS};
use crate::broker;
use crate::measure::{rss, Meter};
use crate::payload;
use crate::raw::{ConfirmChannel, Route};

const NODE: &str = "memory";
/// The queue mesh declares for module `bench` on node `memory`.
pub(crate) const QUEUE: &str = "memory.bench.events";
const KEY: &str = "module.bench.memory";

/// Idle subscriptions measured.
pub(crate) const SUBSCRIPTIONS: usize = 1_000;
/// Deliveries held in flight at once.
pub(crate) const DELIVERIES: u16 = 1_000;
/// Each of them with `--short`.
const SHORT: usize = 100;
/// What warms each measurement up first, not counted.
const WARMUP: usize = 10;

/// The metric of idle subscriptions: MiB of RSS per 1,000.
pub(crate) const IDLE: &str = "MiB per 1000 idle subscriptions";
/// The metric of deliveries in flight: MiB of RSS per 1,000.
pub(crate) const IN_FLIGHT: &str = "MiB per 1000 deliveries in flight";

/// The budgets, MiB per 1,000: the figures of the first round of a release run
/// (docs/BENCHMARKS.md, "Memory": 24.1 and 0.96 on 2026-12-07, twice for the idle one). The
/// first round is the one that grows into memory never used before; later rounds of the same
/// process reuse what the allocator kept and read lower. A figure may exceed its budget by
/// up to [`BUDGET_FACTOR`].
pub(crate) const IDLE_BUDGET_MIB: f64 = 24.1;
/// See [`IDLE_BUDGET_MIB`].
pub(crate) const IN_FLIGHT_BUDGET_MIB: f64 = 0.96;
/// How far above its budget a figure may go before the bench fails.
pub(crate) const BUDGET_FACTOR: f64 = 1.25;

/// Lets mesh declare the queue and its binding.
pub(crate) async fn setup(ctx: &Ctx) -> anyhow::Result<()> {
    let bus = ctx
        .start(
            ctx.bus(NODE, "bench").on_raw([KEY], |_| async { Ok(()) }),
            "memory-setup",
        )
        .await?;
    bus.drain().await?;
    Ok(())
}

fn mib_per_1000(before: u64, after: u64, count: usize) -> f64 {
    after.saturating_sub(before) as f64 / (1024.0 * 1024.0) * 1_000.0 / count as f64
}

/// RSS per 1,000 idle subscriptions.
pub(crate) async fn idle(ctx: &Ctx) -> anyhow::Result<Run> {
    let subscriptions = if ctx.plan.short { SHORT } else { SUBSCRIPTIONS };
    let bus = ctx.start(ctx.bus(NODE, "idle"), "memory-idle").await?;
    let mut listeners = Vec::with_capacity(subscriptions + WARMUP);
    for n in 0..WARMUP {
        listeners.push(bus.listen([format!("module.idle{n}.#")]).await?);
    }
    let meter = Meter::start();
    let before = rss();
    for n in 0..subscriptions {
        listeners.push(bus.listen([format!("module.idle{n}.#")]).await?);
    }
    let after = rss();
    let cost = meter.finish();
    drop(listeners);
    bus.drain().await?;
    Ok(Run {
        metrics: [(IDLE, mib_per_1000(before, after, subscriptions))].into(),
        events: subscriptions as u64,
        cost,
    })
}

/// What the holding handler shares with the run.
struct Hold {
    /// Deliveries with a handler so far.
    held: watch::Sender<usize>,
    /// Handlers that finished so far.
    done: watch::Sender<usize>,
    /// One permit lets one handler finish.
    release: Semaphore,
}

async fn wait(counter: &watch::Sender<usize>, target: usize, what: &str) -> anyhow::Result<()> {
    let mut seen = counter.subscribe();
    tokio::time::timeout(
        patience(target as u64),
        seen.wait_for(|count| *count >= target),
    )
    .await
    .with_context(|| format!("{what}: stalled at {} of {target}", *counter.borrow()))?
    .context("the counter is gone")?;
    Ok(())
}

/// RSS per 1,000 deliveries held by handlers at once.
pub(crate) async fn in_flight(ctx: &Ctx) -> anyhow::Result<Run> {
    broker::purge(&ctx.admin, QUEUE).await?;
    let hold = Arc::new(Hold {
        held: watch::Sender::new(0),
        done: watch::Sender::new(0),
        release: Semaphore::new(0),
    });
    let handler_hold = hold.clone();
    let builder = ctx
        .bus(NODE, "bench")
        .prefetch(DELIVERIES)
        .on_raw([KEY], move |_event| {
            let hold = handler_hold.clone();
            async move {
                hold.held.send_modify(|n| *n += 1);
                if let Ok(permit) = hold.release.acquire().await {
                    permit.forget();
                }
                hold.done.send_modify(|n| *n += 1);
                Ok::<(), HandlerError>(())
            }
        });
    let bus = ctx.start(builder, "memory-in-flight").await?;
    let publish = ctx.raw("memory-publish").await?;
    let publisher = ConfirmChannel::open(&publish, ctx.plan.in_flight).await?;
    let route = Route {
        exchange: EVENTS,
        key: KEY,
        mandatory: false,
    };
    let send = |count: usize| {
        let publisher = &publisher;
        async move {
            for seq in 0..count {
                let (properties, body) = payload::raw_event(seq as u64, 0)?;
                publisher.publish(route, properties, body, false).await?;
            }
            publisher.wait_all().await
        }
    };

    send(WARMUP).await?;
    wait(&hold.held, WARMUP, "the warm-up's deliveries").await?;
    hold.release.add_permits(WARMUP);
    wait(&hold.done, WARMUP, "the warm-up's handlers").await?;

    let count = if ctx.plan.short {
        SHORT
    } else {
        usize::from(DELIVERIES)
    };
    let meter = Meter::start();
    let before = rss();
    send(count).await?;
    let outcome = wait(&hold.held, WARMUP + count, "deliveries in flight").await;
    let after = rss();
    let cost = meter.finish();
    // Whatever happened, the handlers go.
    hold.release.close();
    outcome?;
    wait(&hold.done, WARMUP + count, "the held handlers").await?;
    publisher.close().await;
    broker::close(publish).await;
    bus.drain().await?;
    broker::purge(&ctx.admin, QUEUE).await?;
    Ok(Run {
        metrics: [(IN_FLIGHT, mib_per_1000(before, after, count))].into(),
        events: count as u64,
        cost,
    })
}

/// Fails when a run's figure is above [`BUDGET_FACTOR`] × its budget.
pub(crate) fn check(run: &Run) -> anyhow::Result<()> {
    for (metric, budget) in [(IDLE, IDLE_BUDGET_MIB), (IN_FLIGHT, IN_FLIGHT_BUDGET_MIB)] {
        if let Some(&figure) = run.metrics.get(metric) {
            anyhow::ensure!(
                figure <= budget * BUDGET_FACTOR,
                "memory over budget: {figure:.3} {metric}, above {BUDGET_FACTOR} × the budget \
                 of {budget:.3} (crates/mesh-bench/src/scenarios/memory.rs)"
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::measure::Cost;

    fn run(metric: &'static str, figure: f64) -> Run {
        Run {
            metrics: [(metric, figure)].into(),
            events: 1,
            cost: Cost {
                wall: std::time::Duration::ZERO,
                cpu: std::time::Duration::ZERO,
                peak_rss: 0,
                rss_per_run: false,
            },
        }
    }

    #[test]
    fn a_figure_above_its_budget_by_more_than_the_factor_fails() {
        for (metric, budget) in [(IDLE, IDLE_BUDGET_MIB), (IN_FLIGHT, IN_FLIGHT_BUDGET_MIB)] {
            assert!(check(&run(metric, budget)).is_ok());
            assert!(check(&run(metric, budget * BUDGET_FACTOR)).is_ok());
            let error = check(&run(metric, budget * BUDGET_FACTOR * 1.01)).unwrap_err();
            assert!(error.to_string().contains(metric), "{error}");
        }
    }

    #[test]
    fn growth_is_scaled_to_a_thousand() {
        let mib = 1024 * 1024;
        assert!((mib_per_1000(10 * mib, 12 * mib, 500) - 4.0).abs() < 1e-9);
        assert_eq!(mib_per_1000(12 * mib, 10 * mib, 1_000), 0.0);
    }
}
