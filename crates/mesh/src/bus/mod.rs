//! The bus: a module's handle onto the mesh.
//!
//! This file holds the handle itself ([`Bus`], cheap to clone, and what it shares: its
//! transport, its emitter, its consumer loops and the confirms it waits for) and its life
//! (readiness, [`Bus::drain`], [`Bus::close`]). Each other concern has a room of its own:
//!
//! - `builder`: [`BusBuilder`](crate::BusBuilder), the options and the start;
//! - `contract`: what a bus declares, checked and gathered into its contract;
//! - `emit`: emits, prepared events and the announcement, through the bus's emitter
//!   (`crate::emitter`);
//! - `pending`: [`PendingEmit`](crate::PendingEmit), an emit whose confirm is awaited
//!   later;
//! - `schedule`: scheduled emits ([`Bus::emit_at`], [`Bus::emit_after`]), through the
//!   module's schedule queue and its forwarder (`crate::schedule`);
//! - `tools`: calling and serving tools.
//!
//! The handle names none of them: they add to it (`impl Bus`) from below.

pub(crate) mod builder;
mod contract;
mod emit;
pub(crate) mod pending;
pub(crate) mod schedule;
mod tools;

use std::future::Future;
use std::sync::Arc;

use mesh_core::contract::ModuleContract;
use mesh_core::{Health, Name, RetryPolicy, Transport};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::emitter::Emitter;
use crate::error::Error;
use crate::identity::Identity;
use crate::layer::BusLayer;

/// The default prefetch: deliveries in flight per consumer (the wire contract's 32).
pub const DEFAULT_PREFETCH: u16 = 32;

/// What every clone of a [`Bus`] shares.
pub(crate) struct Inner {
    /// The bus's transport: its consumers, health and close. (Its emitter holds it too.)
    pub(crate) transport: Arc<dyn Transport>,
    /// What its emits, prepared events and calls need: its identity, and where emits go.
    emitter: Emitter,
    prefetch: u16,
    retry: RetryPolicy,
    /// With identity enforced, the user prefix of the access plan: its servers refuse a
    /// request whose `x-source` is not its validated user's identity.
    enforce_identity: Option<String>,
    /// The layers around every handler and tool server, the outermost first: a tool served
    /// on the running bus ([`Bus::serve`]) is wrapped in them too.
    layers: Vec<Arc<dyn BusLayer>>,
    /// What it announced (or would have): its handlers, tools and declared emits and calls.
    contract: ModuleContract,
    /// Fired by drain and close: every consumer loop stops taking deliveries, and emits are
    /// refused.
    pub(crate) stop: CancellationToken,
    /// Fired by drain once the handlers finished and the spool was drained, and by close:
    /// prepared events are refused from then on.
    closed: CancellationToken,
    /// Confirms of emits whose callers did not await them.
    confirms: TaskTracker,
    loops: Mutex<Vec<JoinHandle<()>>>,
    /// The clock its scheduled events are due by.
    clock: crate::schedule::clock::Clock,
}

/// A module's handle onto the mesh: emit events, call tools, and (through the
/// [`BusBuilder`](crate::BusBuilder)) handle events and serve tools.
///
/// Cheap to clone; every clone is the same bus. `Bus` is `Send + Sync`, and every
/// future its methods return.
///
/// There is one way to do each thing: [`emit`](Bus::emit) a typed event,
/// [`emit_outgoing`](Bus::emit_outgoing) an [`Outgoing`](crate::Outgoing) (a JSON payload
/// under an event name, a full key, or options such as a causation id or headers), and
/// [`emit_nowait`](Bus::emit_nowait) to pipeline many emits and await their confirms later.
///
/// ```
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)]
/// # struct SiteCreated { site: String }
/// # impl mesh::Event for SiteCreated { const KEY: &'static str = "module.umami.site.created"; }
/// # #[tokio::main] async fn main() -> Result<(), mesh::Error> {
/// use std::sync::Arc;
/// use mesh::{Bus, Outgoing};
///
/// let broker = mesh::MemoryBroker::new();
/// let umami = Bus::builder().node("anchor").module("umami")
///     .start(Arc::new(broker.transport()))
///     .await?;
/// // Resolves once the broker confirmed the event.
/// let id = umami.emit(&SiteCreated { site: "blog".into() }).await?;
/// // A JSON payload under an event name of this bus, caused by the first event.
/// umami
///     .emit_outgoing(Outgoing::json("site.renamed", &"journal")?.causation_id(id.to_string()))
///     .await?;
/// // Pipelined: many emits in flight, their confirms awaited afterwards.
/// let mut pending = Vec::new();
/// for n in 0..10 {
///     pending.push(umami.emit_nowait(Outgoing::json("site.visited", &n)?).await?);
/// }
/// for emit in pending {
///     emit.await?;
/// }
/// umami.drain().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Bus {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Bus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bus")
            .field("node", self.node())
            .field("identity", self.identity())
            .finish_non_exhaustive()
    }
}

impl Bus {
    /// The node this bus runs on.
    pub fn node(&self) -> &Name {
        self.inner.emitter.node()
    }

    /// Its identity.
    pub fn identity(&self) -> &Identity {
        self.inner.emitter.identity()
    }

    /// Its contract, as [`start`](crate::BusBuilder::start) built it: what it declared it
    /// emits and calls, the patterns it handles and the tools it serves, with their versions
    /// and JSON Schemas. It is what the bus announces (see
    /// [`BusBuilder::announce`](crate::BusBuilder::announce)); a tool served later with
    /// [`Bus::serve`] is not in it.
    pub fn contract(&self) -> &ModuleContract {
        &self.inner.contract
    }

    /// The health of the bus's transport: connected, not blocked, consumers attached.
    pub fn health(&self) -> Health {
        self.inner.transport.health()
    }

    /// The transport's counters and gauges now: unconfirmed depth, reconnects, resends, …
    pub fn transport_stats(&self) -> mesh_core::TransportStats {
        self.inner.transport.stats()
    }

    /// Whether the bus is ready: connected, not blocked, every consumer attached.
    pub fn is_ready(&self) -> bool {
        !self.inner.stop.is_cancelled() && self.health().is_ready()
    }

    pub(crate) async fn spawn_loop(&self, future: impl Future<Output = ()> + Send + 'static) {
        let handle = tokio::spawn(future);
        self.inner.loops.lock().await.push(handle);
    }

    /// Stops taking new deliveries and emits, lets in-flight handlers finish (settling their
    /// deliveries), lets the spool (if any) publish what it holds within the emit deadline
    /// and stop, waits for every unconfirmed emit, then closes the transport.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped mid-way, the bus has stopped taking deliveries (a handler
    /// that had not started is released to its queue), but confirms may still be pending and
    /// the transport open. Calling `drain` again finishes the job; [`Bus::close`] closes at
    /// once.
    pub async fn drain(&self) -> Result<(), Error> {
        self.inner.stop.cancel();
        let loops: Vec<JoinHandle<()>> = std::mem::take(&mut *self.inner.loops.lock().await);
        for handle in loops {
            let _ = handle.await;
        }
        // No emit is taken any more: the spool publishes what it can, as long as an emit
        // may wait, and lets the bus go.
        let emitter = &self.inner.emitter;
        if let Some(spool) = emitter.spool() {
            spool.drain(emitter.emit_deadline()).await;
        }
        self.inner.closed.cancel();
        self.inner.confirms.close();
        self.inner.confirms.wait().await;
        // Emits whose `PendingEmit` is still held (not awaited, not dropped) are in the
        // transport's window: wait for them too, as long as an emit may wait.
        let flushed = self.inner.transport.flush();
        match emitter.emit_deadline() {
            Some(deadline) => {
                if tokio::time::timeout(deadline, flushed).await.is_err() {
                    warn!(
                        ?deadline,
                        "drain: unconfirmed emits remain after the emit deadline"
                    );
                }
            }
            None => flushed.await,
        }
        self.inner.transport.close().await;
        debug!("bus drained");
        Ok(())
    }

    /// Closes now: consumers stop, the spool (if any) stops publishing, the transport closes.
    /// Deliveries whose handlers have not finished are released back to their queues by the
    /// broker; what the spool kept stays kept.
    pub async fn close(&self) {
        self.inner.stop.cancel();
        self.inner.closed.cancel();
        for handle in std::mem::take(&mut *self.inner.loops.lock().await) {
            handle.abort();
        }
        if let Some(spool) = self.inner.emitter.spool() {
            spool.stop().await;
        }
        self.inner.transport.close().await;
    }
}
