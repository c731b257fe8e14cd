//! The scenarios. Each has a raw and a mesh side doing the same work on the same queues, a
//! `setup` run once per vhost, and returns a [`Run`] per side and round.
//!
//! The queues the sides share are declared by mesh (so they carry exactly the arguments mesh
//! gives them) and consumed by the raw client directly when it is the raw side's turn; the
//! emit sink is declared by the bench. Every run empties what it filled.
//!
//! [`scale`] is apart: mesh alone, on a private node of its own; so is [`declare`], which
//! compares mesh's declarations with a raw client's on a private node of its own.

pub(crate) mod audit;
pub(crate) mod audit_baseline;
pub(crate) mod audit_db;
pub(crate) mod audit_shared;
pub(crate) mod audit_size;
pub(crate) mod consume;
pub(crate) mod declare;
pub(crate) mod e2e;
pub(crate) mod emit;
pub(crate) mod latency;
pub(crate) mod memory;
pub(crate) mod outbox;
pub(crate) mod rpc;
pub(crate) mod scale;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use amqprs::connection::Connection;
use anyhow::Context;
use mesh::{Bus, BusBuilder};
use mesh_testkit::TempStore;
use tokio::time::Instant;

use crate::broker::Broker;
use crate::cli::{Plan, QueueKind};
use crate::measure::Cost;

/// The exchange events ride.
pub(crate) const EVENTS: &str = "mesh.events";
/// The exchange requests ride.
pub(crate) const RPC: &str = "mesh.rpc";

/// What every run needs.
pub(crate) struct Ctx {
    pub(crate) broker: Broker,
    pub(crate) vhost: String,
    pub(crate) kind: QueueKind,
    pub(crate) plan: Plan,
    /// A raw connection for chores (declare, purge, depth) outside the measured work.
    pub(crate) admin: Connection,
}

impl std::fmt::Debug for Ctx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ctx")
            .field("vhost", &self.vhost)
            .field("kind", &self.kind)
            .finish_non_exhaustive()
    }
}

impl Ctx {
    /// A mesh bus builder on node `node` as module `module`.
    pub(crate) fn bus(&self, node: &str, module: &str) -> BusBuilder {
        Bus::builder()
            .node(node)
            .module(module)
            .prefetch(self.plan.prefetch)
    }

    /// Starts `builder` on a fresh mesh transport.
    pub(crate) async fn start(&self, builder: BusBuilder, name: &str) -> anyhow::Result<Bus> {
        let options = self
            .broker
            .mesh_options(&self.vhost, self.kind, self.plan.in_flight, name);
        let transport = mesh::amqp::connect(options).await?;
        Ok(builder.start(Arc::new(transport)).await?)
    }

    /// A raw connection.
    pub(crate) async fn raw(&self, name: &str) -> anyhow::Result<Connection> {
        self.broker.raw(&self.vhost, name).await
    }
}

/// The outcome of one run of one side.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    /// Metric name → value (`events/s`, `calls/s`, `p50 ms`, …).
    pub(crate) metrics: BTreeMap<&'static str, f64>,
    /// Events (or calls) the cost covers.
    pub(crate) events: u64,
    pub(crate) cost: Cost,
}

impl Run {
    /// A throughput run: `events` over `seconds`.
    pub(crate) fn rate(metric: &'static str, events: u64, seconds: f64, cost: Cost) -> Run {
        let rate = if seconds > 0.0 {
            events as f64 / seconds
        } else {
            0.0
        };
        Run {
            metrics: BTreeMap::from([(metric, rate)]),
            events,
            cost,
        }
    }
}

/// The database of an outbox or audit run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Db {
    Postgres,
    Sqlite,
}

impl Db {
    /// A database of the run's own: a new database on the PostgreSQL server of
    /// `MESH_TEST_PG_URL` (default the local one), or a SQLite file in a new temporary
    /// directory; gone when the `TempStore` drops.
    pub(crate) async fn store(self) -> anyhow::Result<TempStore> {
        match self {
            Db::Postgres => TempStore::postgres()
                .await
                .context("this scenario needs a PostgreSQL server (see MESH_TEST_PG_URL)"),
            Db::Sqlite => Ok(TempStore::sqlite()),
        }
    }
}

/// A generous bound on waiting for `events` to arrive: nothing here is slower than 500/s.
pub(crate) fn patience(events: u64) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(events.saturating_mul(2))
}

/// Hands out sequence numbers at a fixed rate: the `n`-th is due `n / rate` seconds after the
/// start, and is returned no earlier (timers tick per millisecond, so at 2,000/s events
/// leave in pairs).
#[derive(Debug)]
pub(crate) struct Pacer {
    start: Instant,
    rate: f64,
    next: u64,
    count: u64,
}

impl Pacer {
    pub(crate) fn new(count: u64, rate: u64) -> Pacer {
        Pacer {
            start: Instant::now(),
            rate: rate as f64,
            next: 0,
            count,
        }
    }

    pub(crate) async fn next(&mut self) -> Option<u64> {
        if self.next >= self.count {
            return None;
        }
        let due = self.start + Duration::from_secs_f64(self.next as f64 / self.rate);
        if due > Instant::now() {
            tokio::time::sleep_until(due).await;
        }
        let seq = self.next;
        self.next += 1;
        Some(seq)
    }
}
