//! End-to-end latency at a fixed rate (`--rate`, 2,000/s): events published persistent and
//! confirmed through `mesh.events` (a topic exchange) into the queue mesh declares for module
//! `bench` on node `latency`, consumed with manual acks.
//!
//! The body carries the send time (a monotonic clock of this process, read before the event
//! is built); the consumer subtracts it on receipt: the raw consumer when the delivery comes
//! off the channel, mesh when its handler is called. The first tenth of the events (at most
//! 1,000) warm up and are not recorded. Both sides publish on one connection and consume on
//! another, as mesh's transport does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use amqprs::channel::BasicAckArguments;
use anyhow::Context;
use bytes::Bytes;
use hdrhistogram::Histogram;
use mesh::{HandlerError, Incoming, Outgoing};
use tokio::sync::Notify;

use super::{patience, Ctx, Pacer, Run, EVENTS};
use crate::broker;
use crate::measure::{now_ns, Meter};
use crate::payload::{self, Body, Probe};
use crate::raw::{self, ConfirmChannel, Route};

const NODE: &str = "latency";
/// The queue mesh declares for module `bench` on node `latency`.
pub(crate) const QUEUE: &str = "latency.bench.events";
const NAME: &str = "latency";
const KEY: &str = "module.bench.latency";

/// Lets mesh declare the queue and its binding.
pub(crate) async fn setup(ctx: &Ctx) -> anyhow::Result<()> {
    let bus = ctx
        .start(
            ctx.bus(NODE, "bench").on_raw([KEY], |_| async { Ok(()) }),
            "latency-setup",
        )
        .await?;
    bus.drain().await?;
    Ok(())
}

fn histogram() -> anyhow::Result<Histogram<u64>> {
    // 1 µs to 60 s, 3 significant digits; recorded in nanoseconds.
    Ok(Histogram::new_with_bounds(1_000, 60_000_000_000, 3)?)
}

fn warmup(events: u64) -> u64 {
    (events / 10).min(1_000)
}

/// Records one receipt.
fn record(histogram: &mut Histogram<u64>, body: &[u8], received_ns: u64, warmup: u64) {
    if let Ok(probe) = Probe::read(body) {
        if probe.seq >= warmup {
            let _ = histogram.record(received_ns.saturating_sub(probe.sent_ns).max(1_000));
        }
    }
}

fn run(events: u64, histogram: &Histogram<u64>, cost: crate::measure::Cost) -> Run {
    let ms = |q: f64| histogram.value_at_quantile(q) as f64 / 1e6;
    Run {
        metrics: [
            ("p50 ms", ms(0.5)),
            ("p99 ms", ms(0.99)),
            ("p99.9 ms", ms(0.999)),
        ]
        .into_iter()
        .collect(),
        events,
        cost,
    }
}

pub(crate) async fn raw(ctx: &Ctx) -> anyhow::Result<Run> {
    let events = ctx.plan.latency_events;
    let skip = warmup(events);
    broker::purge(&ctx.admin, QUEUE).await?;
    let consume = ctx.raw("latency-consume").await?;
    let mut consumer = raw::consume(&consume, QUEUE, Some(ctx.plan.prefetch)).await?;
    let publish = ctx.raw("latency-publish").await?;
    let publisher = ConfirmChannel::open(&publish, ctx.plan.in_flight).await?;
    let mut histogram = histogram()?;

    let meter = Meter::start();
    let receiver = tokio::spawn(async move {
        let mut received = 0;
        while let Some(message) = consumer.deliveries.recv().await {
            let now = now_ns();
            let (Some(deliver), Some(body)) = (message.deliver, message.content) else {
                continue;
            };
            record(&mut histogram, &body, now, skip);
            consumer
                .channel
                .basic_ack(BasicAckArguments::new(deliver.delivery_tag(), false))
                .await?;
            received += 1;
            if received == events {
                break;
            }
        }
        let _ = consumer.channel.close().await;
        anyhow::ensure!(
            received == events,
            "the consumer ended after {received} events"
        );
        Ok(histogram)
    });
    let route = Route {
        exchange: EVENTS,
        key: KEY,
        mandatory: false,
    };
    let mut pacer = Pacer::new(events, ctx.plan.rate);
    while let Some(seq) = pacer.next().await {
        let (properties, body) = payload::raw_event(seq, now_ns())?;
        publisher.publish(route, properties, body, false).await?;
    }
    publisher.wait_all().await?;
    let histogram = tokio::time::timeout(patience(events), receiver)
        .await
        .context("the raw latency consumer stalled")???;
    let cost = meter.finish();
    publisher.close().await;
    broker::close(publish).await;
    broker::close(consume).await;
    Ok(run(events, &histogram, cost))
}

/// What the recording handler shares with the run.
#[derive(Debug)]
struct Recorder {
    events: u64,
    warmup: u64,
    seen: AtomicU64,
    histogram: Mutex<Histogram<u64>>,
    done: Notify,
}

impl Recorder {
    fn receive(&self, event: &Incoming<Bytes>) {
        let now = now_ns();
        if let Ok(mut histogram) = self.histogram.lock() {
            record(&mut histogram, &event.event, now, self.warmup);
        }
        if self.seen.fetch_add(1, Ordering::AcqRel) + 1 == self.events {
            self.done.notify_one();
        }
    }
}

pub(crate) async fn mesh(ctx: &Ctx) -> anyhow::Result<Run> {
    let events = ctx.plan.latency_events;
    broker::purge(&ctx.admin, QUEUE).await?;
    let recorder = Arc::new(Recorder {
        events,
        warmup: warmup(events),
        seen: AtomicU64::new(0),
        histogram: Mutex::new(histogram()?),
        done: Notify::new(),
    });
    let handler_recorder = recorder.clone();
    let builder = ctx.bus(NODE, "bench").on_raw([KEY], move |event| {
        handler_recorder.receive(&event);
        async { Ok::<(), HandlerError>(()) }
    });
    let bus = ctx.start(builder, "latency").await?;

    let meter = Meter::start();
    let mut pending = Vec::new();
    let mut pacer = Pacer::new(events, ctx.plan.rate);
    while let Some(seq) = pacer.next().await {
        let outgoing = Outgoing::json(NAME, &Body::new(seq, now_ns()))?;
        pending.push(bus.emit_nowait(outgoing).await?);
    }
    for emit in pending {
        emit.await.context("an emit failed")?;
    }
    let arrived = tokio::time::timeout(patience(events), recorder.done.notified()).await;
    let cost = meter.finish();
    bus.drain().await?;
    let seen = recorder.seen.load(Ordering::Acquire);
    arrived.map_err(|_| anyhow::anyhow!("mesh latency run stalled after {seen} of {events}"))?;
    broker::purge(&ctx.admin, QUEUE).await?;
    let histogram = recorder
        .histogram
        .lock()
        .map_err(|_| anyhow::anyhow!("the histogram lock is poisoned"))?;
    Ok(run(events, &histogram, cost))
}
