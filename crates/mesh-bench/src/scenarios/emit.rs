//! Emit: persistent, confirmed 256-byte events with the contract's headers, into a durable
//! sink queue of the pass's type, pipelined (a window of `--in-flight`) and one at a time.
//!
//! Raw: a confirm channel and a window of unconfirmed publishes. mesh: `emit_nowait`
//! pipelined (awaiting the oldest `PendingEmit` once `--in-flight` are out, with mesh's own
//! confirm window set to the same size), and `emit_outgoing` awaited one by one.

use std::collections::VecDeque;

use anyhow::Context;
use mesh::{Bus, Outgoing, PendingEmit};

use super::{Ctx, Run, EVENTS};
use crate::broker;
use crate::measure::{now_ns, Meter};
use crate::payload::{self, Body};
use crate::raw::{ConfirmChannel, Route};

/// The sink every emitted event lands in.
pub(crate) const SINK: &str = "bench.sink";
/// The event name mesh emits under (module `bench`), and the raw client's key.
const NAME: &str = "emitted";
const KEY: &str = "module.bench.emitted";
const ROUTE: Route<'static> = Route {
    exchange: EVENTS,
    key: KEY,
    mandatory: false,
};

/// Declares the sink (`mesh.events` exists: setup connected mesh first).
pub(crate) async fn setup(ctx: &Ctx) -> anyhow::Result<()> {
    broker::declare_bound(&ctx.admin, SINK, ctx.kind, EVENTS, KEY).await
}

/// Empties the sink, checking every event arrived.
async fn empty_sink(ctx: &Ctx, expected: u64) -> anyhow::Result<()> {
    let purged = broker::purge(&ctx.admin, SINK).await?;
    anyhow::ensure!(
        purged == expected,
        "the sink held {purged} events, {expected} were emitted"
    );
    Ok(())
}

pub(crate) async fn raw(ctx: &Ctx, pipelined: bool) -> anyhow::Result<Run> {
    let events = if pipelined {
        ctx.plan.events
    } else {
        ctx.plan.sync_events
    };
    let connection = ctx.raw("emit").await?;
    let publisher = ConfirmChannel::open(&connection, ctx.plan.in_flight).await?;
    let meter = Meter::start();
    if pipelined {
        raw_pipelined(&publisher, ROUTE, events).await?;
    } else {
        for seq in 0..events {
            let (properties, body) = payload::raw_event(seq, now_ns())?;
            publisher.publish_confirmed(ROUTE, properties, body).await?;
        }
    }
    let cost = meter.finish();
    publisher.close().await;
    broker::close(connection).await;
    empty_sink(ctx, events).await?;
    Ok(Run::rate("events/s", events, cost.wall.as_secs_f64(), cost))
}

/// The raw client's pipelined emits: `events` publishes under the channel's window, then
/// every confirm.
pub(crate) async fn raw_pipelined(
    publisher: &ConfirmChannel,
    route: Route<'_>,
    events: u64,
) -> anyhow::Result<()> {
    for seq in 0..events {
        let (properties, body) = payload::raw_event(seq, now_ns())?;
        publisher.publish(route, properties, body, false).await?;
    }
    publisher.wait_all().await
}

pub(crate) async fn mesh(ctx: &Ctx, pipelined: bool) -> anyhow::Result<Run> {
    let events = if pipelined {
        ctx.plan.events
    } else {
        ctx.plan.sync_events
    };
    let bus = ctx.start(ctx.bus("emit", "bench"), "emit").await?;
    let meter = Meter::start();
    if pipelined {
        mesh_pipelined(&bus, NAME, events, ctx.plan.in_flight).await?;
    } else {
        for seq in 0..events {
            let outgoing = Outgoing::json(NAME, &Body::new(seq, now_ns()))?;
            bus.emit_outgoing(outgoing).await?;
        }
    }
    let cost = meter.finish();
    bus.drain().await?;
    empty_sink(ctx, events).await?;
    Ok(Run::rate("events/s", events, cost.wall.as_secs_f64(), cost))
}

/// mesh's pipelined emits: `emit_nowait`, awaiting the oldest `PendingEmit` once `window`
/// are out, then the rest.
pub(crate) async fn mesh_pipelined(
    bus: &Bus,
    name: &str,
    events: u64,
    window: usize,
) -> anyhow::Result<()> {
    let mut pending: VecDeque<PendingEmit> = VecDeque::with_capacity(window);
    for seq in 0..events {
        if pending.len() >= window {
            if let Some(oldest) = pending.pop_front() {
                oldest.await.context("an emit failed")?;
            }
        }
        let outgoing = Outgoing::json(name, &Body::new(seq, now_ns()))?;
        pending.push_back(bus.emit_nowait(outgoing).await?);
    }
    for emit in pending {
        emit.await.context("an emit failed")?;
    }
    Ok(())
}
