//! Consume: a backlog of `--backlog` events pre-published (raw, pipelined, confirmed) into
//! the queue mesh declares for module `bench` on node `consume`, then drained with manual
//! acks and prefetch `--prefetch`.
//!
//! Raw acks each delivery; the ceiling acks with `multiple` every `--coalesce` deliveries;
//! mesh runs an `on_raw` handler that only counts. The rate is taken from the first delivery
//! to the last (the raw side's last ack, mesh's last handler call), so connecting and
//! declaring are not in it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use amqprs::channel::BasicAckArguments;
use anyhow::Context;
use mesh::HandlerError;
use tokio::sync::Notify;

use super::{patience, Ctx, Run, EVENTS};
use crate::broker;
use crate::measure::{now_ns, Cost, Meter};
use crate::payload;
use crate::raw::{self, ConfirmChannel, RawConsumer, Route};

const NODE: &str = "consume";
/// The queue mesh declares for module `bench` on node `consume`.
pub(crate) const QUEUE: &str = "consume.bench.events";
const KEY: &str = "module.bench.backlog";

/// Lets mesh declare the queue and its binding.
pub(crate) async fn setup(ctx: &Ctx) -> anyhow::Result<()> {
    let bus = ctx
        .start(
            ctx.bus(NODE, "bench").on_raw([KEY], |_| async { Ok(()) }),
            "consume-setup",
        )
        .await?;
    bus.drain().await?;
    Ok(())
}

/// Fills the queue with the backlog.
async fn prefill(ctx: &Ctx) -> anyhow::Result<()> {
    broker::purge(&ctx.admin, QUEUE).await?;
    let connection = ctx.raw("prefill").await?;
    let publisher = ConfirmChannel::open(&connection, ctx.plan.in_flight).await?;
    let route = Route {
        exchange: EVENTS,
        key: KEY,
        mandatory: false,
    };
    for seq in 0..ctx.plan.backlog {
        let (properties, body) = payload::raw_event(seq, now_ns())?;
        publisher.publish(route, properties, body, false).await?;
    }
    publisher.wait_all().await?;
    publisher.close().await;
    broker::close(connection).await;
    let depth = broker::depth(&ctx.admin, QUEUE).await?;
    anyhow::ensure!(
        depth == ctx.plan.backlog,
        "the backlog is {depth} events, not {}",
        ctx.plan.backlog
    );
    Ok(())
}

fn rate(events: u64, cost: Cost) -> Run {
    // From the first delivery to the last: `events - 1` intervals.
    Run::rate(
        "events/s",
        events.saturating_sub(1),
        cost.wall.as_secs_f64(),
        cost,
    )
}

/// Raw: ack each delivery, or (`coalesce`) one `multiple` ack every so many.
pub(crate) async fn raw(ctx: &Ctx, coalesce: Option<u64>) -> anyhow::Result<Run> {
    prefill(ctx).await?;
    let events = ctx.plan.backlog;
    let connection = ctx.raw("consume").await?;
    let mut consumer = raw::consume(&connection, QUEUE, Some(ctx.plan.prefetch)).await?;
    let mut meter = None;
    let drained = drain(&mut consumer, events, coalesce, &mut meter).await;
    let cost = meter.as_ref().map(Meter::finish);
    let _ = consumer.channel.close().await;
    broker::close(connection).await;
    drained?;
    broker::purge(&ctx.admin, QUEUE).await?;
    Ok(rate(events, cost.context("nothing was delivered")?))
}

/// The raw consumer's loop: takes `events` deliveries, acking each, or (`coalesce`) with
/// `multiple` every so many and at the last; starts `meter` at the first delivery unless it
/// runs already.
pub(crate) async fn drain(
    consumer: &mut RawConsumer,
    events: u64,
    coalesce: Option<u64>,
    meter: &mut Option<Meter>,
) -> anyhow::Result<()> {
    let mut received = 0_u64;
    let drained = tokio::time::timeout(patience(events), async {
        while let Some(message) = consumer.deliveries.recv().await {
            let Some(deliver) = message.deliver else {
                continue;
            };
            if meter.is_none() {
                *meter = Some(Meter::start());
            }
            received += 1;
            let tag = deliver.delivery_tag();
            let ack = match coalesce {
                None => Some(BasicAckArguments::new(tag, false)),
                Some(every) if received.is_multiple_of(every) || received == events => {
                    Some(BasicAckArguments::new(tag, true))
                }
                Some(_) => None,
            };
            if let Some(ack) = ack {
                consumer.channel.basic_ack(ack).await?;
            }
            if received == events {
                break;
            }
        }
        anyhow::Ok(())
    })
    .await;
    drained
        .with_context(|| format!("raw consume stalled after {received} of {events} events"))??;
    anyhow::ensure!(
        received == events,
        "the consumer ended after {received} events"
    );
    Ok(())
}

/// What the counting handler shares with the run: the meter starts at the first call
/// unless it was started before, and stops at the `events`-th.
#[derive(Debug)]
pub(crate) struct Count {
    events: u64,
    seen: AtomicU64,
    meter: OnceLock<Meter>,
    cost: OnceLock<Cost>,
    done: Notify,
}

impl Count {
    pub(crate) fn new(events: u64) -> Count {
        Count {
            events,
            seen: AtomicU64::new(0),
            meter: OnceLock::new(),
            cost: OnceLock::new(),
            done: Notify::new(),
        }
    }

    /// Starts the meter now rather than at the first call.
    pub(crate) fn start(&self) {
        let _ = self.meter.set(Meter::start());
    }

    pub(crate) fn hit(&self) {
        let meter = self.meter.get_or_init(Meter::start);
        if self.seen.fetch_add(1, Ordering::AcqRel) + 1 == self.events {
            let _ = self.cost.set(meter.finish());
            self.done.notify_one();
        }
    }

    pub(crate) fn seen(&self) -> u64 {
        self.seen.load(Ordering::Acquire)
    }

    /// Waits for the `events`-th call; its cost, or `None` when `patience` ran out first.
    pub(crate) async fn wait(&self) -> Option<Cost> {
        if tokio::time::timeout(patience(self.events), self.done.notified())
            .await
            .is_err()
        {
            return None;
        }
        self.cost.get().copied()
    }
}

/// mesh: an `on_raw` handler that does nothing but count.
pub(crate) async fn mesh(ctx: &Ctx) -> anyhow::Result<Run> {
    prefill(ctx).await?;
    let events = ctx.plan.backlog;
    let count = Arc::new(Count::new(events));
    let handler_count = count.clone();
    let builder = ctx.bus(NODE, "bench").on_raw([KEY], move |_event| {
        let count = handler_count.clone();
        async move {
            count.hit();
            Ok::<(), HandlerError>(())
        }
    });
    let bus = ctx.start(builder, "consume").await?;
    let cost = count.wait().await;
    bus.drain().await?;
    let seen = count.seen();
    let cost = cost
        .ok_or_else(|| anyhow::anyhow!("mesh consume stalled after {seen} of {events} events"))?;
    broker::purge(&ctx.admin, QUEUE).await?;
    Ok(rate(events, cost))
}
