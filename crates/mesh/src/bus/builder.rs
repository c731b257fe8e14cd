//! The builder of a bus: its identity, policies and declarations, checked and started by
//! [`BusBuilder::start`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mesh_core::contract::ToolContract;
use mesh_core::naming;
use mesh_core::{
    KeyError, Name, QueueSpec, RetryPolicy, SubscriptionSpec, TopicPattern, Transport,
};
use serde::Serialize;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::info;

use super::contract::{self, EmitDecl, EmitKey};
use super::{Bus, Inner, DEFAULT_PREFETCH};
use crate::dispatch::{self, Dispatcher};
use crate::emitter::{Emitter, HeldSpool};
use crate::error::{Error, HandlerError};
use crate::event::Event;
use crate::handler::{HandlerDecl, HandlerEntry};
use crate::identity::Identity;
use crate::incoming::Incoming;
use crate::layer::{BusLayer, HandlerLayer, ToolLayer};
use crate::rpc::ServeEntry;
use crate::schema::Schema;
use crate::spool::EmitSpool;
use crate::telemetry::record;

enum IdentitySpec {
    Module(String),
    Context(String),
    Node,
}

/// Configures and starts a [`Bus`]: identity, policies, and the handlers of its queue.
///
/// All `on` handlers of a bus share its one consumer queue, bound to the union of their
/// patterns; they are registered before [`start`](BusBuilder::start) so the queue's
/// bindings are set once, completely (bindings no longer asked for are removed).
///
/// ```
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)]
/// # struct SiteCreated { site: String }
/// # impl mesh::Event for SiteCreated { const KEY: &'static str = "module.umami.site.created"; }
/// # #[tokio::main] async fn main() -> Result<(), mesh::Error> {
/// use std::sync::Arc;
/// use mesh::{Bus, HandlerError, Incoming, RetryPolicy};
///
/// let broker = mesh::MemoryBroker::new();
/// let (seen, mut sites) = tokio::sync::mpsc::unbounded_channel();
/// let stats = Bus::builder()
///     .node("anchor")
///     .module("stats") // consumes on queue `anchor.stats.events`
///     .prefetch(8)
///     .retry(RetryPolicy::default())
///     .on(move |e: Incoming<SiteCreated>| {
///         let seen = seen.clone();
///         async move {
///             seen.send(e.event.site).map_err(HandlerError::permanent)?;
///             Ok(())
///         }
///     })
///     .start(Arc::new(broker.transport()))
///     .await?;
///
/// let umami = Bus::builder().node("anchor").module("umami")
///     .start(Arc::new(broker.transport()))
///     .await?;
/// umami.emit(&SiteCreated { site: "blog".into() }).await?;
/// assert_eq!(sites.recv().await.as_deref(), Some("blog"));
/// stats.drain().await?;
/// # Ok(()) }
/// ```
pub struct BusBuilder {
    node: Option<String>,
    identity: Option<IdentitySpec>,
    prefetch: u16,
    retry: RetryPolicy,
    shared: bool,
    emit_deadline: Option<Duration>,
    enforce_identity: bool,
    user_prefix: String,
    handlers: Vec<HandlerDecl>,
    serves: Vec<ServeEntry>,
    layers: Vec<Arc<dyn BusLayer>>,
    emits: Vec<EmitDecl>,
    calls: Vec<ToolContract>,
    announce: bool,
    validate: bool,
    spool: Option<SpoolSlot>,
    /// Forward the module's scheduled events, with hops up to this long.
    forward_scheduled: Option<Duration>,
    /// The clock scheduled events are due by (tokio's under the test harness).
    clock: crate::schedule::clock::Clock,
}

/// A bus's spool, held both ways: the builder starts it (handing it the bus), the bus's
/// emitter keeps emits in it, drains and stops it.
struct SpoolSlot {
    seam: Arc<dyn EmitSpool>,
    held: Arc<dyn HeldSpool>,
}

impl std::fmt::Debug for BusBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BusBuilder")
            .field("node", &self.node)
            .field("prefetch", &self.prefetch)
            .field("retry", &self.retry)
            .field("shared", &self.shared)
            .field("enforce_identity", &self.enforce_identity)
            .field("handlers", &self.handlers.len())
            .field("layers", &self.layers.len())
            .field("announce", &self.announce)
            .field("validate", &self.validate)
            .field("spool", &self.spool.is_some())
            .field("forward_scheduled", &self.forward_scheduled)
            .finish_non_exhaustive()
    }
}

impl Default for BusBuilder {
    fn default() -> Self {
        BusBuilder {
            node: None,
            identity: None,
            prefetch: DEFAULT_PREFETCH,
            retry: RetryPolicy::default(),
            shared: false,
            emit_deadline: Some(Duration::from_secs(30)),
            enforce_identity: false,
            user_prefix: String::new(),
            handlers: Vec::new(),
            serves: Vec::new(),
            layers: Vec::new(),
            emits: Vec::new(),
            calls: Vec::new(),
            announce: true,
            validate: false,
            spool: None,
            forward_scheduled: None,
            clock: crate::schedule::clock::Clock::System,
        }
    }
}

impl BusBuilder {
    /// The clock its scheduled events are due by: the test harness gives its in-memory
    /// modules tokio's, so a paused clock runs a schedule as it runs a retry ladder.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn clock(mut self, clock: crate::schedule::clock::Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The node this bus runs on (one word).
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// Speak as module `module`: emit `module.<module>.…`, consume on
    /// `<node>.<module>.events`.
    pub fn module(mut self, module: impl Into<String>) -> Self {
        self.identity = Some(IdentitySpec::Module(module.into()));
        self
    }

    /// Speak as runtime context `context`: emit `mesh.<context>.…`.
    pub fn context(mut self, context: impl Into<String>) -> Self {
        self.identity = Some(IdentitySpec::Context(context.into()));
        self
    }

    /// Speak as the node itself: emit `node.<node>.…`.
    pub fn as_node(mut self) -> Self {
        self.identity = Some(IdentitySpec::Node);
        self
    }

    /// Deliveries in flight per consumer (default 32); handlers run concurrently up to it,
    /// on the consumer's task (a handler with heavy CPU work moves it to
    /// `tokio::task::spawn_blocking` or a task of its own, so the others keep going).
    pub fn prefetch(mut self, prefetch: u16) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// How failed handlers are retried (default: 5 attempts, 1 s, 5 s, 25 s, 2 min).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// Consume from `shared.<module>.events`, one queue for this module's workers on every
    /// node, instead of this node's own queue.
    pub fn shared(mut self, shared: bool) -> Self {
        self.shared = shared;
        self
    }

    /// Forward this module's scheduled events (default: no): declare its schedule queue
    /// `scheduled.<module>.events` and its ladder, and emit each scheduled event (of any
    /// bus of the module, [`Bus::emit_at`]) once it is due. Run it in at least one process
    /// of a module that schedules; while none runs, scheduled events wait (and
    /// [`Bus::emit_at`] fails as unroutable until one first declared the queue). Several
    /// may run: each event is emitted by one of them (at least once).
    pub fn forward_scheduled(mut self, forward: bool) -> Self {
        self.forward_scheduled = match (forward, self.forward_scheduled) {
            (true, Some(longest)) => Some(longest),
            (true, None) => {
                Some(crate::schedule::plan::HOPS[crate::schedule::plan::HOPS.len() - 1])
            }
            (false, _) => None,
        };
        self
    }

    /// The longest hop of the schedule ladder (default 10 minutes; from 1 s to 15 minutes):
    /// a scheduled copy is held unacked by a forwarder for at most this long. Set it below
    /// the broker's consumer timeout when that is shorter than 20 minutes (a held copy
    /// taken back comes back late). Implies [`forward_scheduled(true)`](Self::forward_scheduled).
    pub fn longest_schedule_hop(mut self, longest: Duration) -> Self {
        self.forward_scheduled = Some(longest);
        self
    }

    /// How long an emit may wait for room and for its confirm (default 30 s; `None`:
    /// forever).
    pub fn emit_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.emit_deadline = deadline;
        self
    }

    /// Emits through `spool`, a durable store (default: none; the SDK's seam, implemented by
    /// `mesh_outbox::Spool` on a SQLite file).
    ///
    /// With a spool, [`Bus::emit`], [`Bus::emit_outgoing`] and [`Bus::emit_nowait`] make the
    /// event as always and resolve once the spool **kept** it (durably: it survives a crash
    /// of the process), not on the broker's confirm; the spool publishes it through the bus
    /// with confirms, in the order kept, with its id, and forgets it only once confirmed,
    /// after a restart if need be. An emit made while the broker is unreachable therefore
    /// succeeds and is published once the broker is back. A full spool fails the emit with
    /// [`ErrorKind::SpoolFull`], a failing one with [`ErrorKind::Spool`]; nothing of the
    /// event is kept then. [`Bus::drain`] lets the spool publish what it can within the emit
    /// deadline before the bus closes; what is left stays kept for the next start. The
    /// contract announcement does not go through the spool. Events published by the spool
    /// are confirmed at least once: after a crash between a confirm and the spool's record
    /// of it, the event is published again (consumers deduplicate by id).
    ///
    /// [`ErrorKind::SpoolFull`]: crate::ErrorKind::SpoolFull
    /// [`ErrorKind::Spool`]: crate::ErrorKind::Spool
    pub fn spool(mut self, spool: impl EmitSpool) -> Self {
        let spool = Arc::new(spool);
        self.spool = Some(SpoolSlot {
            seam: spool.clone(),
            held: spool,
        });
        self
    }

    /// Believe an event only from the broker user owning its key (default: off). With it,
    /// an event under `<origin>.<owner>.…` whose broker-validated user
    /// ([`mesh_core::codec::validated_user`]: the `user-id` RabbitMQ checked against the
    /// publishing connection, or on a copy mesh made for the original publisher the
    /// original's) is not `<user prefix><origin>.<owner>` is dead-lettered `forged-source`
    /// and never handled; so is one with no validated user. It needs the access plan's
    /// users (`mesh access apply`, `docs/SECURITY.md`) and a transport that validates users
    /// (RabbitMQ; the in-memory transport has none, so every event fails the check there).
    ///
    /// Its servers check their callers too: a request whose `x-source` is not its validated
    /// user's identity ([`mesh_core::codec::caller_is`]) is answered with the remote error
    /// `forged-source` ([`RemoteError::FORGED_SOURCE`](mesh_core::RemoteError)), and the
    /// tool never sees it. A tool sees the caller's validated user in
    /// [`RequestMeta::user`](mesh_core::RequestMeta) whether this is on or not.
    pub fn enforce_identity(mut self, enforce: bool) -> Self {
        self.enforce_identity = enforce;
        self
    }

    /// The prefix of the access plan's user names (default none), as in the spec's
    /// `[access] user_prefix`: the owner of `module.umami.…` is then `<prefix>module.umami`.
    pub fn user_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.user_prefix = prefix.into();
        self
    }

    /// Handles events of type `E` (its key is the pattern). The bus's contract lists the
    /// key with `E`'s version and, when `E` declares one, its JSON Schema
    /// ([`Event::json_schema`]).
    pub fn on<E, F, Fut>(mut self, handler: F) -> Self
    where
        E: Event,
        F: Fn(Incoming<E>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        self.handlers.push(HandlerDecl::typed::<E, F, Fut>(handler));
        self
    }

    /// Handles every event matching any of `patterns` (topic patterns: `*` one word, `#`
    /// zero or more), receiving the JSON body as bytes.
    pub fn on_raw<I, S, F, Fut>(mut self, patterns: I, handler: F) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
        F: Fn(Incoming<Bytes>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        self.handlers.push(HandlerDecl::raw(
            patterns.into_iter().map(Into::into).collect(),
            None,
            handler,
        ));
        self
    }

    /// As [`on_raw`](BusBuilder::on_raw), declaring the JSON Schema of the bodies the
    /// handler reads: announced in the bus's contract for each pattern, and checked before
    /// the handler runs when [`validate_schemas`](BusBuilder::validate_schemas) is on.
    pub fn on_raw_with_schema<I, S, F, Fut>(
        mut self,
        patterns: I,
        schema: Schema,
        handler: F,
    ) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
        F: Fn(Incoming<Bytes>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        self.handlers.push(HandlerDecl::raw(
            patterns.into_iter().map(Into::into).collect(),
            Some(schema),
            handler,
        ));
        self
    }

    /// Wraps every handler and tool server of the bus in `layer`, a [`tower`] `Layer`
    /// (`TimeoutLayer`, `ConcurrencyLimitLayer`, `RateLimitLayer`, one of yours, …): see
    /// [`mesh::layer`](crate::layer) for the order of the layers and what each result means
    /// for a delivery (a timeout is a counted retry; a refusal before the handler ran
    /// releases the delivery uncounted).
    ///
    /// Layers added first are outermost: a delivery passes them in the order they were
    /// added, then the handler's own ([`on_layered`](BusBuilder::on_layered)). Each handler
    /// and server gets an instance of its own (a `ConcurrencyLimitLayer(2)` allows two at
    /// once per handler). A bus without layers calls its handlers directly.
    ///
    /// [`tower`]: https://docs.rs/tower
    pub fn layer<L: BusLayer>(mut self, layer: L) -> Self {
        self.layers.push(Arc::new(layer));
        self
    }

    /// As [`on`](BusBuilder::on), the handler wrapped in `layer` (inside the bus's layers,
    /// see [`layer`](BusBuilder::layer)). Several: a tuple of layers, or `tower`'s
    /// `ServiceBuilder`.
    // Taken by value, as `tower`'s `ServiceBuilder::layer` takes it: the builder's idiom.
    #[allow(clippy::needless_pass_by_value)]
    pub fn on_layered<E, L, F, Fut>(mut self, layer: L, handler: F) -> Self
    where
        E: Event,
        L: HandlerLayer,
        F: Fn(Incoming<E>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        let mut decl = HandlerDecl::typed::<E, F, Fut>(handler);
        decl.service = layer.wrap_handler(decl.service);
        self.handlers.push(decl);
        self
    }

    /// As [`on_raw`](BusBuilder::on_raw), the handler wrapped in `layer` (inside the bus's
    /// layers, see [`layer`](BusBuilder::layer)).
    // Taken by value, as `tower`'s `ServiceBuilder::layer` takes it: the builder's idiom.
    #[allow(clippy::needless_pass_by_value)]
    pub fn on_raw_layered<I, S, L, F, Fut>(mut self, patterns: I, layer: L, handler: F) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
        L: HandlerLayer,
        F: Fn(Incoming<Bytes>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        let mut decl = HandlerDecl::raw(
            patterns.into_iter().map(Into::into).collect(),
            None,
            handler,
        );
        decl.service = layer.wrap_handler(decl.service);
        self.handlers.push(decl);
        self
    }

    /// As [`serve`](BusBuilder::serve), the server wrapped in `layer` (inside the bus's
    /// layers, see [`layer`](BusBuilder::layer)).
    // Taken by value, as `tower`'s `ServiceBuilder::layer` takes it: the builder's idiom.
    #[allow(clippy::needless_pass_by_value)]
    pub fn serve_layered<Req, Resp, L, F, Fut>(
        mut self,
        tool: impl Into<String>,
        layer: L,
        handler: F,
    ) -> Self
    where
        Req: serde::de::DeserializeOwned + Send + 'static,
        Resp: Serialize + Send + 'static,
        L: ToolLayer,
        F: Fn(Req, mesh_core::RequestMeta) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, mesh_core::RemoteError>> + Send + 'static,
    {
        let mut entry = ServeEntry::new(tool.into(), handler);
        entry.service = layer.wrap_tool(entry.service);
        self.serves.push(entry);
        self
    }

    /// Serves tool `tool`: requests of type `Req`, replies of type `Resp` or a
    /// [`RemoteError`](mesh_core::RemoteError).
    pub fn serve<Req, Resp, F, Fut>(mut self, tool: impl Into<String>, handler: F) -> Self
    where
        Req: serde::de::DeserializeOwned + Send + 'static,
        Resp: Serialize + Send + 'static,
        F: Fn(Req, mesh_core::RequestMeta) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, mesh_core::RemoteError>> + Send + 'static,
    {
        self.serves.push(ServeEntry::new(tool.into(), handler));
        self
    }

    /// As [`serve`](BusBuilder::serve), declaring the JSON Schemas of `Req` and `Resp` (their
    /// `schemars` derives) in the bus's contract.
    #[cfg(feature = "schemas")]
    pub fn serve_with_schemas<Req, Resp, F, Fut>(
        mut self,
        tool: impl Into<String>,
        handler: F,
    ) -> Self
    where
        Req: serde::de::DeserializeOwned + schemars::JsonSchema + Send + 'static,
        Resp: Serialize + schemars::JsonSchema + Send + 'static,
        F: Fn(Req, mesh_core::RequestMeta) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, mesh_core::RemoteError>> + Send + 'static,
    {
        self.serves.push(
            ServeEntry::new(tool.into(), handler)
                .with_schemas(Some(Schema::of::<Req>()), Some(Schema::of::<Resp>())),
        );
        self
    }

    /// Declares that this bus emits events of type `E` (announced in its contract with `E`'s
    /// key, version and schema). `E`'s key must be one this bus owns, or
    /// [`start`](BusBuilder::start) fails.
    ///
    /// What a bus emits is known only when it emits; declaring it makes the contract
    /// complete. A bus may emit what it did not declare.
    pub fn emits<E: Event>(mut self) -> Self {
        self.emits.push(EmitDecl {
            key: EmitKey::Full(E::KEY),
            version: E::SCHEMA,
            schema: E::json_schema(),
        });
        self
    }

    /// Declares that this bus emits JSON events under event name `name` (as
    /// [`Outgoing::json`] does: the key is the bus's prefix and `name`), of schema version
    /// `version`, with the JSON Schema `schema` when given.
    ///
    /// [`Outgoing::json`]: crate::Outgoing::json
    pub fn emits_json(
        mut self,
        name: impl Into<String>,
        version: u32,
        schema: Option<Schema>,
    ) -> Self {
        self.emits.push(EmitDecl {
            key: EmitKey::Event(name.into()),
            version,
            schema,
        });
        self
    }

    /// Declares that this bus calls tool `tool` with requests of type `Req` and replies of
    /// type `Resp` (their JSON Schemas, in its contract).
    #[cfg(feature = "schemas")]
    pub fn calls<Req, Resp>(self, tool: impl Into<String>) -> Self
    where
        Req: schemars::JsonSchema + ?Sized,
        Resp: schemars::JsonSchema,
    {
        self.calls_json(tool, Some(Schema::of::<Req>()), Some(Schema::of::<Resp>()))
    }

    /// Declares that this bus calls tool `tool`, with the JSON Schemas of its request and
    /// reply when given.
    pub fn calls_json(
        mut self,
        tool: impl Into<String>,
        request: Option<Schema>,
        reply: Option<Schema>,
    ) -> Self {
        self.calls.push(ToolContract {
            tool: tool.into(),
            request: request.map(Schema::into_json),
            reply: reply.map(Schema::into_json),
        });
        self
    }

    /// Whether the bus announces its contract when it starts (default: on).
    ///
    /// The announcement is the event `<prefix>contract.announced` (for a module
    /// `module.<m>.contract.announced`), body the bus's [`ModuleContract`] as JSON,
    /// `x-schema` [`CONTRACT_FORMAT`], emitted under the bus's own identity like any of its
    /// events. A bus whose contract is empty (no handler, tool, declared emit or call)
    /// announces nothing. [`start`](BusBuilder::start) hands the announcement to the
    /// transport before it returns (so it precedes every event the bus emits) but does not
    /// wait for the broker's confirm: the contract is informative, so a refused or
    /// unconfirmed announcement is logged as a warning and the bus runs on.
    ///
    /// [`ModuleContract`]: crate::ModuleContract
    /// [`CONTRACT_FORMAT`]: crate::CONTRACT_FORMAT
    pub fn announce(mut self, announce: bool) -> Self {
        self.announce = announce;
        self
    }

    /// Checks every incoming body against the JSON Schema of the handler that reads it,
    /// before it is deserialized (default: off).
    ///
    /// A typed handler's schema ([`Event::json_schema`]) describes the version its type
    /// writes, so only bodies of that `x-schema` are checked (an older version it also
    /// reads has another shape, and its deserializer judges it); a raw handler's declared
    /// schema ([`on_raw_with_schema`](BusBuilder::on_raw_with_schema)) checks every body.
    /// A handler without a schema is not checked. A body that does not match is
    /// dead-lettered with reason `schema-invalid`, the first violation (its path and what
    /// is wrong, never the body's values; at most 1 KiB) as its last error, and the handler
    /// is not called.
    ///
    /// Its tool servers check every request against the request schema they declared
    /// ([`serve_with_schemas`](BusBuilder::serve_with_schemas)) before the tool (and its
    /// layers) runs: a request that does not match is answered with the remote error
    /// `schema-invalid` ([`RemoteError::SCHEMA_INVALID`](mesh_core::RemoteError), the first
    /// violation as its message, paths only), which the caller's [`Bus::call`] returns as
    /// [`ErrorKind::Remote`](crate::ErrorKind::Remote) ([`Error::is_schema_invalid`]): a
    /// refusal, never a dead letter nor a timeout.
    ///
    /// Schemas are compiled once, by [`start`](BusBuilder::start) (which,
    /// validating or not, fails with [`ErrorKind::InvalidSchema`] on a declared schema that
    /// does not compile or uses `$defs`); no remote reference is ever fetched.
    ///
    /// [`ErrorKind::InvalidSchema`]: crate::ErrorKind::InvalidSchema
    #[cfg(feature = "schemas")]
    pub fn validate_schemas(mut self, validate: bool) -> Self {
        self.validate = validate;
        self
    }

    /// Validates the options, declares the queue, and starts consuming.
    pub async fn start(mut self, transport: Arc<dyn Transport>) -> Result<Bus, Error> {
        let (node, identity) = identify(self.node, self.identity)?;
        if self.prefetch == 0 {
            return Err(Error::options("prefetch must be at least 1"));
        }
        let mut contract = contract::empty(&identity, &node);
        let handlers =
            contract::handlers(self.handlers, &self.layers, self.validate, &mut contract)?;
        contract::emits(self.emits, &identity, &node, &mut contract)?;
        contract::tools(&mut self.serves, self.calls, self.validate, &mut contract)?;
        let queue = match (&identity, self.shared) {
            (Identity::Module(module), false) => Some(naming::consumer_queue(&node, module)),
            (Identity::Module(module), true) => Some(naming::shared_queue(module)),
            _ => None,
        };
        if !handlers.is_empty() && queue.is_none() {
            return Err(Error::options(
                "only a module consumes events; give the bus a module identity",
            ));
        }

        if let Some(longest) = self.forward_scheduled {
            use crate::schedule::plan::{MAX_LONGEST_HOP, MIN_LONGEST_HOP};
            if !(MIN_LONGEST_HOP..=MAX_LONGEST_HOP).contains(&longest) {
                return Err(Error::options(format!(
                    "the longest schedule hop must be within {MIN_LONGEST_HOP:?} and {MAX_LONGEST_HOP:?}"
                )));
            }
            if !matches!(identity, Identity::Module(_)) {
                return Err(Error::options(
                    "only a module forwards scheduled events; give the bus a module identity",
                ));
            }
        }

        let (spool, held) = match self.spool {
            Some(SpoolSlot { seam, held }) => (Some(seam), Some(held)),
            None => (None, None),
        };
        let stop = CancellationToken::new();
        let closed = CancellationToken::new();
        let emitter = Emitter::new(
            Arc::clone(&transport),
            node,
            identity,
            self.emit_deadline,
            held,
            stop.clone(),
            closed.clone(),
        );
        let inner = Arc::new(Inner {
            transport,
            emitter,
            prefetch: self.prefetch,
            retry: self.retry,
            enforce_identity: self.enforce_identity.then(|| self.user_prefix.clone()),
            layers: self.layers,
            contract,
            stop,
            closed,
            confirms: TaskTracker::new(),
            loops: Mutex::new(Vec::new()),
            clock: self.clock,
        });
        let bus = Bus { inner };

        if let (false, Some(queue)) = (handlers.is_empty(), queue) {
            let enforce_identity = self.enforce_identity.then(|| self.user_prefix.clone());
            consume(&bus, queue, handlers, enforce_identity).await?;
        }
        for entry in self.serves {
            bus.start_serving(entry).await?;
        }
        if let Some(longest) = self.forward_scheduled {
            let hops = crate::schedule::plan::hops_up_to(longest);
            super::schedule::start_forwarding(&bus, hops).await?;
        }
        if self.announce && !bus.inner.contract.is_empty() {
            bus.announce().await;
        }
        if let Some(spool) = spool {
            if let Err(e) = spool.start(bus.clone()).await {
                bus.close().await;
                return Err(e);
            }
        }
        Ok(bus)
    }
}

impl Bus {
    /// A builder.
    pub fn builder() -> BusBuilder {
        BusBuilder::default()
    }
}

/// The node and identity a builder was given, checked.
fn identify(
    node: Option<String>,
    identity: Option<IdentitySpec>,
) -> Result<(Name, Identity), Error> {
    let node_text = node.ok_or_else(|| Error::options("a bus needs a node name"))?;
    // `shared` and `scheduled` name queues of the contract's: an options error, with the
    // typed `KeyError::ReservedNode` as its source.
    let node = naming::node_name(&node_text).map_err(|e| match e {
        e @ KeyError::ReservedNode { .. } => {
            Error::with_source(crate::error::ErrorKind::InvalidOptions, e)
        }
        e => Error::from(e),
    })?;
    let identity = match identity {
        Some(IdentitySpec::Module(m)) => Identity::Module(Name::parse(&m)?),
        Some(IdentitySpec::Context(c)) => Identity::Context(Name::parse(&c)?),
        Some(IdentitySpec::Node) => Identity::Node,
        None => {
            return Err(Error::options(
                "a bus needs a module, a context or the node identity",
            ))
        }
    };
    Ok((node, identity))
}

/// Subscribes the bus's queue to the union of its handlers' patterns and starts the loop that
/// dispatches its deliveries (with `enforce_identity`, the user prefix of the access plan).
async fn consume(
    bus: &Bus,
    queue: String,
    handlers: Vec<HandlerEntry>,
    enforce_identity: Option<String>,
) -> Result<(), Error> {
    let mut union: Vec<TopicPattern> = handlers.iter().flat_map(|h| h.patterns.clone()).collect();
    union.sort();
    union.dedup();
    let spec = SubscriptionSpec {
        queue: QueueSpec::Durable {
            name: queue.clone(),
        },
        patterns: union,
        prefetch: bus.inner.prefetch,
        retry_delays: bus.inner.retry.delays().to_vec(),
    };
    let subscription = bus.inner.transport.subscribe(spec).await?;
    info!(queue, handlers = handlers.len(), "consuming");
    let metrics_queue = record::Queue::new(&queue);
    let dispatcher = Arc::new(Dispatcher {
        handlers,
        enforce_identity,
        retry: bus.inner.retry.clone(),
        queue: metrics_queue.clone(),
        unmatched: std::sync::Mutex::default(),
        ack_failed: dispatch::ack_failed(metrics_queue),
    });
    let stop = bus.inner.stop.child_token();
    bus.spawn_loop(dispatcher.run(subscription, stop)).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_contracts_node_names_are_options_errors_with_a_typed_source() {
        for reserved in [naming::SHARED_NODE, naming::SCHEDULE_NODE] {
            let err = identify(Some(reserved.to_owned()), Some(IdentitySpec::Node))
                .expect_err("a reserved node name");
            assert_eq!(err.kind(), &crate::error::ErrorKind::InvalidOptions);
            let source = std::error::Error::source(&err).expect("a source");
            assert!(
                matches!(
                    source.downcast_ref::<KeyError>(),
                    Some(KeyError::ReservedNode { .. })
                ),
                "{source:?}"
            );
        }
        let err = identify(Some("a.b".to_owned()), Some(IdentitySpec::Node)).unwrap_err();
        assert_eq!(err.kind(), &crate::error::ErrorKind::InvalidKey);
        assert!(identify(Some("n1".to_owned()), Some(IdentitySpec::Node)).is_ok());
    }
}
