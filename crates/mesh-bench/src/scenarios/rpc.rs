//! RPC: round trips per second to an echo tool (`bench.echo`, a number in, the same number
//! out), with 1 and with 64 concurrent callers for `--rpc-seconds`; with one caller, also
//! the round trip's p50 and p99 (each call timed from before the request is built to the
//! reply read; the first tenth of the run's calls, at most 100, warm up and are not recorded).
//!
//! Both sides do what mesh's `call`/`serve` do on the wire, with four connections (caller
//! publish and consume, server consume and publish): the caller registers a correlation id,
//! publishes the request to `mesh.rpc` (mandatory, not persistent, `expiration` = the
//! timeout) on a confirm channel, waits for the confirm and then for the reply on its
//! exclusive, auto-delete, server-named reply queue (consumed no-ack). The server consumes
//! `serve.bench.echo` (declared by mesh, prefetch 32, manual ack), publishes each reply to
//! the default exchange on a confirm channel and acks the request once the reply is
//! confirmed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqprs::channel::{BasicAckArguments, QueueDeclareArguments};
use anyhow::Context;
use futures::stream::FuturesUnordered;
use futures::StreamExt;
use hdrhistogram::Histogram;
use mesh::RemoteError;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Ctx, Run, RPC};
use crate::broker;
use crate::measure::Meter;
use crate::payload;
use crate::raw::{self, ConfirmChannel, RawConsumer, Route};

const NODE: &str = "rpc";
const TOOL: &str = "bench.echo";
/// The queue mesh declares for the tool.
pub(crate) const QUEUE: &str = "serve.bench.echo";
const TIMEOUT: Duration = Duration::from_secs(10);

/// Lets mesh declare the serve queue and its binding.
pub(crate) async fn setup(ctx: &Ctx) -> anyhow::Result<()> {
    let bus = ctx
        .start(ctx.bus(NODE, "server").serve(TOOL, echo), "rpc-setup")
        .await?;
    bus.drain().await?;
    Ok(())
}

async fn echo(n: u64, _meta: mesh::RequestMeta) -> Result<u64, RemoteError> {
    Ok(n)
}

/// The calls of a run and, for one caller, their round trips.
struct Driven {
    calls: u64,
    /// Round trips in nanoseconds, the warm-up's left out; empty with several callers.
    round_trips: Histogram<u64>,
}

/// Calls a single caller makes before its round trips are recorded.
const WARMUP_CALLS: u64 = 100;

/// Runs `callers` loops of `call` until the deadline; returns the calls made (and, with one
/// caller, their round trips).
async fn drive<F, Fut>(callers: usize, time: Duration, call: F) -> anyhow::Result<Driven>
where
    F: Fn(u64) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let deadline = Instant::now() + time;
    let done = Arc::new(AtomicU64::new(0));
    // 1 µs to 60 s, 3 significant digits, as the latency scenario's.
    let round_trips = Arc::new(Mutex::new(Histogram::new_with_bounds(
        1_000,
        60_000_000_000,
        3,
    )?));
    let mut tasks = Vec::with_capacity(callers);
    for caller in 0..callers {
        let call = call.clone();
        let done = done.clone();
        let timed = (callers == 1).then(|| round_trips.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = (caller as u64) << 32;
            let mut own = 0;
            while Instant::now() < deadline {
                let started = Instant::now();
                call(n).await?;
                let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
                if let Some(histogram) = &timed {
                    if own >= WARMUP_CALLS {
                        if let Ok(mut histogram) = histogram.lock() {
                            let _ = histogram.record(took.max(1_000));
                        }
                    }
                }
                own += 1;
                n += 1;
                done.fetch_add(1, Ordering::Relaxed);
            }
            anyhow::Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let round_trips = round_trips
        .lock()
        .map_err(|_| anyhow::anyhow!("the histogram lock is poisoned"))?
        .clone();
    Ok(Driven {
        calls: done.load(Ordering::Relaxed),
        round_trips,
    })
}

/// A run's figures: calls per second, and with one caller the round trip's p50 and p99.
fn finish(driven: &Driven, cost: crate::measure::Cost) -> Run {
    let mut run = Run::rate("calls/s", driven.calls, cost.wall.as_secs_f64(), cost);
    if !driven.round_trips.is_empty() {
        let ms = |q: f64| driven.round_trips.value_at_quantile(q) as f64 / 1e6;
        run.metrics.insert("p50 ms", ms(0.5));
        run.metrics.insert("p99 ms", ms(0.99));
    }
    run
}

type Waiters = Arc<Mutex<HashMap<String, oneshot::Sender<Vec<u8>>>>>;

/// The raw caller: a confirm channel for requests and the reply queue's waiters.
struct Caller {
    requests: ConfirmChannel,
    reply_queue: String,
    waiters: Waiters,
}

impl Caller {
    async fn call(&self, n: u64) -> anyhow::Result<()> {
        let correlation_id = uuid::Uuid::new_v4().to_string();
        let (waiter, reply) = oneshot::channel();
        if let Ok(mut waiters) = self.waiters.lock() {
            waiters.insert(correlation_id.clone(), waiter);
        }
        let properties = payload::request_properties(
            TOOL,
            &self.reply_queue,
            &correlation_id,
            u64::try_from(TIMEOUT.as_millis()).unwrap_or(u64::MAX),
        )?;
        let route = Route {
            exchange: RPC,
            key: TOOL,
            mandatory: true,
        };
        let outcome = self
            .requests
            .publish(route, properties, serde_json::to_vec(&n)?, true)
            .await?;
        raw::confirmed(outcome).await?;
        let reply = tokio::time::timeout(TIMEOUT, reply)
            .await
            .context("no reply in time")?
            .context("the reply queue is gone")?;
        let echoed: u64 = serde_json::from_slice(&reply)?;
        anyhow::ensure!(echoed == n, "the echo of {n} came back as {echoed}");
        Ok(())
    }
}

/// Hands each reply to the call waiting under its correlation id.
async fn dispatch_replies(mut replies: RawConsumer, waiters: Waiters) {
    while let Some(message) = replies.deliveries.recv().await {
        let correlation_id = message
            .basic_properties
            .as_ref()
            .and_then(|p| p.correlation_id().cloned());
        let waiter =
            correlation_id.and_then(|id| waiters.lock().ok().and_then(|mut w| w.remove(&id)));
        if let Some(waiter) = waiter {
            let _ = waiter.send(message.content.unwrap_or_default());
        }
    }
}

/// The raw echo server.
async fn serve(
    mut requests: RawConsumer,
    replies: ConfirmChannel,
    mut stop: oneshot::Receiver<()>,
) -> anyhow::Result<()> {
    let mut unconfirmed = FuturesUnordered::new();
    loop {
        tokio::select! {
            _ = &mut stop => break,
            Some((tag, outcome)) = unconfirmed.next() => {
                raw::confirmed(outcome).await?;
                requests
                    .channel
                    .basic_ack(BasicAckArguments::new(tag, false))
                    .await?;
            }
            message = requests.deliveries.recv() => {
                let Some(message) = message else { break };
                let (Some(deliver), Some(properties), Some(body)) =
                    (message.deliver, message.basic_properties, message.content)
                else {
                    continue;
                };
                let (Some(reply_to), Some(correlation_id)) =
                    (properties.reply_to(), properties.correlation_id())
                else {
                    continue;
                };
                let request: u64 = serde_json::from_slice(&body)?;
                let route = Route { exchange: "", key: reply_to, mandatory: false };
                let outcome = replies
                    .publish(
                        route,
                        payload::reply_properties(correlation_id)?,
                        serde_json::to_vec(&request)?,
                        true,
                    )
                    .await?;
                let tag = deliver.delivery_tag();
                unconfirmed.push(async move { (tag, outcome) });
            }
        }
    }
    let _ = requests.channel.close().await;
    replies.close().await;
    Ok(())
}

pub(crate) async fn raw(ctx: &Ctx, callers: usize) -> anyhow::Result<Run> {
    broker::purge(&ctx.admin, QUEUE).await?;
    let server_in = ctx.raw("rpc-server-consume").await?;
    let server_out = ctx.raw("rpc-server-publish").await?;
    let caller_out = ctx.raw("rpc-caller-publish").await?;
    let caller_in = ctx.raw("rpc-caller-consume").await?;

    let requests = raw::consume(&server_in, QUEUE, Some(ctx.plan.prefetch)).await?;
    let replies = ConfirmChannel::open(&server_out, ctx.plan.in_flight).await?;
    let (stop, stopped) = oneshot::channel();
    let server = tokio::spawn(serve(requests, replies, stopped));

    let reply_channel = broker::channel(&caller_in).await?;
    let (reply_queue, _, _) = reply_channel
        .queue_declare(
            QueueDeclareArguments::exclusive_server_named()
                .auto_delete(true)
                .finish(),
        )
        .await?
        .context("no reply queue name")?;
    let _ = reply_channel.close().await;
    let reply_consumer = raw::consume(&caller_in, &reply_queue, None).await?;
    let reply_channel = reply_consumer.channel.clone();
    let waiters = Waiters::default();
    let dispatcher = tokio::spawn(dispatch_replies(reply_consumer, waiters.clone()));
    let caller = Arc::new(Caller {
        requests: ConfirmChannel::open(&caller_out, ctx.plan.in_flight).await?,
        reply_queue,
        waiters,
    });

    let meter = Meter::start();
    let calling = caller.clone();
    let calls = drive(callers, ctx.plan.rpc_time, move |n| {
        let caller = calling.clone();
        async move { caller.call(n).await }
    })
    .await;
    let cost = meter.finish();

    if let Ok(caller) = Arc::try_unwrap(caller) {
        caller.requests.close().await;
    }
    let _ = stop.send(());
    let served = server.await;
    let _ = reply_channel.close().await;
    dispatcher.abort();
    for connection in [caller_out, caller_in, server_out, server_in] {
        broker::close(connection).await;
    }
    let driven = calls?;
    served??;
    broker::purge(&ctx.admin, QUEUE).await?;
    Ok(finish(&driven, cost))
}

pub(crate) async fn mesh(ctx: &Ctx, callers: usize) -> anyhow::Result<Run> {
    broker::purge(&ctx.admin, QUEUE).await?;
    let server = ctx
        .start(ctx.bus(NODE, "server").serve(TOOL, echo), "rpc-server")
        .await?;
    let caller = ctx.start(ctx.bus(NODE, "caller"), "rpc-caller").await?;

    let meter = Meter::start();
    let bus = caller.clone();
    let calls = drive(callers, ctx.plan.rpc_time, move |n| {
        let bus = bus.clone();
        async move {
            let echoed: u64 = bus.call(TOOL, &n, TIMEOUT).await?;
            anyhow::ensure!(echoed == n, "the echo of {n} came back as {echoed}");
            Ok(())
        }
    })
    .await;
    let cost = meter.finish();

    caller.drain().await?;
    server.drain().await?;
    let driven = calls?;
    broker::purge(&ctx.admin, QUEUE).await?;
    Ok(finish(&driven, cost))
}
