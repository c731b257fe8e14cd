//! The bus: a module's handle onto the mesh.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mesh_core::codec;
use mesh_core::contract::{
    HandlerContract, MessageContract, ModuleContract, ToolContract, ANNOUNCED_EVENT,
    CONTRACT_FORMAT,
};
use mesh_core::naming;
use mesh_core::{
    Envelope, EventId, EventName, HeaderValue, Headers, Health, Name, PublishOptions, QueueSpec,
    RetryPolicy, RoutingKey, SchemaVersion, SubscriptionSpec, Timestamp, ToolKey, TopicPattern,
    Transport,
};
use serde::Serialize;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn, Instrument, Span};

use crate::dispatch::{self, Dispatcher};
use crate::error::{Error, ErrorKind, HandlerError};
use crate::event::Event;
use crate::handler::{HandlerDecl, HandlerEntry};
use crate::identity::Identity;
use crate::incoming::Incoming;
use crate::prepared::Prepared;
use crate::rpc::{self, ServeEntry};
use crate::schema::{self, Schema};
use crate::spool::EmitSpool;
use crate::telemetry::propagation;
use crate::telemetry::record::{self, Source};

/// The span of one emit; key, id and causation are recorded once known. Its trace context
/// rides the message (`traceparent`), so the consumer's `mesh.handle` span is its child.
fn emit_span() -> Span {
    tracing::info_span!(
        "mesh.emit",
        otel.kind = "producer",
        key = tracing::field::Empty,
        id = tracing::field::Empty,
        causation_id = tracing::field::Empty,
    )
}

/// The default prefetch: deliveries in flight per consumer (ADR 42).
pub const DEFAULT_PREFETCH: u16 = 32;

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
    emits: Vec<EmitDecl>,
    calls: Vec<ToolContract>,
    announce: bool,
    validate: bool,
    spool: Option<Arc<dyn EmitSpool>>,
}

/// An emit declared on the builder: a full key (typed) or an event name under the bus's
/// prefix, its version and schema.
struct EmitDecl {
    key: EmitKey,
    version: u32,
    schema: Option<Schema>,
}

/// The key of a declared emit, as declared.
enum EmitKey {
    Full(&'static str),
    Event(String),
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
            .field("announce", &self.announce)
            .field("validate", &self.validate)
            .field("spool", &self.spool.is_some())
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
            emits: Vec::new(),
            calls: Vec::new(),
            announce: true,
            validate: false,
            spool: None,
        }
    }
}

impl BusBuilder {
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
    pub fn spool(mut self, spool: impl EmitSpool) -> Self {
        self.spool = Some(Arc::new(spool));
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
    /// is not called. Schemas are compiled once, by [`start`](BusBuilder::start) (which,
    /// validating or not, fails with [`ErrorKind::InvalidSchema`] on a declared schema that
    /// does not compile or uses `$defs`); no remote reference is ever fetched.
    #[cfg(feature = "schemas")]
    pub fn validate_schemas(mut self, validate: bool) -> Self {
        self.validate = validate;
        self
    }

    /// Validates the options, declares the queue, and starts consuming.
    pub async fn start(self, transport: Arc<dyn Transport>) -> Result<Bus, Error> {
        let node_text = self
            .node
            .ok_or_else(|| Error::options("a bus needs a node name"))?;
        let node = Name::parse(&node_text)?;
        if node.as_str() == naming::SHARED_NODE {
            return Err(Error::options(format!(
                "node name `{}` is reserved for shared queues",
                naming::SHARED_NODE
            )));
        }
        let identity = match self.identity {
            Some(IdentitySpec::Module(m)) => Identity::Module(Name::parse(&m)?),
            Some(IdentitySpec::Context(c)) => Identity::Context(Name::parse(&c)?),
            Some(IdentitySpec::Node) => Identity::Node,
            None => {
                return Err(Error::options(
                    "a bus needs a module, a context or the node identity",
                ))
            }
        };
        if self.prefetch == 0 {
            return Err(Error::options("prefetch must be at least 1"));
        }
        let prefix = identity.prefix(&node);
        let mut contract = ModuleContract {
            owner: contract_owner(&identity, &node),
            node: node.to_string(),
            emits: Vec::new(),
            handles: Vec::new(),
            serves: Vec::new(),
            calls: Vec::new(),
        };
        let mut handlers = Vec::with_capacity(self.handlers.len());
        for declared in self.handlers {
            let patterns = declared
                .patterns
                .iter()
                .map(|p| TopicPattern::parse(p))
                .collect::<Result<Vec<_>, _>>()?;
            if patterns.is_empty() {
                return Err(Error::options("a handler needs at least one pattern"));
            }
            #[cfg(feature = "schemas")]
            let check = match (&declared.schema, self.validate) {
                (Some(schema), true) => {
                    refuse_defs(schema.as_json(), &declared.subject)?;
                    Some(Arc::new(
                        schema::Check::compile(
                            schema.as_json(),
                            declared.version,
                            declared.subject.clone(),
                        )
                        .map_err(|problem| invalid_schema(&declared.subject, problem))?,
                    ))
                }
                (Some(schema), false) => {
                    vet(schema.as_json(), &declared.subject)?;
                    None
                }
                (None, _) => None,
            };
            #[cfg(not(feature = "schemas"))]
            if let Some(schema) = &declared.schema {
                vet(schema.as_json(), &declared.subject)?;
            }
            for pattern in &patterns {
                contract.handles.push(HandlerContract {
                    pattern: pattern.to_string(),
                    version: declared.version,
                    schema: declared.schema.as_ref().map(|s| s.as_json().clone()),
                });
            }
            handlers.push(HandlerEntry {
                patterns,
                call: declared.call,
                #[cfg(feature = "schemas")]
                check,
            });
        }
        for emit in self.emits {
            let key = match emit.key {
                EmitKey::Full(key) => {
                    let key = RoutingKey::parse(key)?;
                    if !identity.owns(&node, &key) {
                        return Err(Error::new(ErrorKind::ForeignKey {
                            key: key.to_string(),
                            allowed: format!("{prefix}…"),
                        }));
                    }
                    key
                }
                EmitKey::Event(name) => {
                    let name = EventName::parse(&name)?;
                    RoutingKey::try_from(format!("{prefix}{}", name.as_str()))?
                }
            };
            if let Some(schema) = &emit.schema {
                vet(schema.as_json(), &format!("the emit of `{key}`"))?;
            }
            contract.emits.push(MessageContract {
                key: key.to_string(),
                version: emit.version,
                schema: emit.schema.map(Schema::into_json),
            });
        }
        for serve in &self.serves {
            ToolKey::parse(&serve.tool)?;
            contract.serves.push(ToolContract {
                tool: serve.tool.clone(),
                request: serve.request.as_ref().map(|s| s.as_json().clone()),
                reply: serve.reply.as_ref().map(|s| s.as_json().clone()),
            });
        }
        for call in self.calls {
            ToolKey::parse(&call.tool)?;
            contract.calls.push(call);
        }
        for tool in contract.serves.iter().chain(&contract.calls) {
            for schema in tool.request.iter().chain(&tool.reply) {
                vet(schema, &format!("tool `{}`", tool.tool))?;
            }
        }
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

        let inner = Arc::new(Inner {
            prefix,
            contract,
            source: identity.owner(&node).to_string(),
            source_label: Source::new(&identity.owner(&node).to_string()),
            transport,
            node,
            identity,
            prefetch: self.prefetch,
            retry: self.retry,
            emit_deadline: self.emit_deadline,
            stop: CancellationToken::new(),
            closed: CancellationToken::new(),
            confirms: TaskTracker::new(),
            loops: Mutex::new(Vec::new()),
            spool: self.spool,
        });
        let bus = Bus { inner };

        if let (false, Some(queue)) = (handlers.is_empty(), queue) {
            let mut union: Vec<TopicPattern> =
                handlers.iter().flat_map(|h| h.patterns.clone()).collect();
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
                enforce_identity: self.enforce_identity.then(|| self.user_prefix.clone()),
                retry: bus.inner.retry.clone(),
                queue: metrics_queue.clone(),
                unmatched: std::sync::Mutex::default(),
                ack_failed: dispatch::ack_failed(metrics_queue),
            });
            let stop = bus.inner.stop.child_token();
            bus.spawn_loop(dispatcher.run(subscription, stop)).await;
        }
        for entry in self.serves {
            bus.start_serving(entry).await?;
        }
        if self.announce && !bus.inner.contract.is_empty() {
            bus.announce().await;
        }
        if let Some(spool) = &bus.inner.spool {
            if let Err(e) = spool.start(bus.clone()).await {
                bus.close().await;
                return Err(e);
            }
        }
        Ok(bus)
    }
}

/// The owner of a bus's keys as its contract names it: `module.<m>`, `node.<n>` or
/// `context.<c>`.
fn contract_owner(identity: &Identity, node: &Name) -> String {
    match identity {
        Identity::Module(module) => format!("module.{module}"),
        Identity::Context(context) => format!("context.{context}"),
        Identity::Node => format!("node.{node}"),
    }
}

fn invalid_schema(subject: &str, problem: String) -> Error {
    Error::new(ErrorKind::InvalidSchema {
        subject: subject.to_owned(),
        problem,
    })
}

/// Refuses a declared schema that uses `$defs` (it would dangle once an exporter moves
/// `definitions`).
fn refuse_defs(schema: &serde_json::Value, subject: &str) -> Result<(), Error> {
    if schema::uses_defs(schema) {
        return Err(invalid_schema(
            subject,
            "it uses `$defs`: shared parts go under `definitions`, referenced as \
             `#/definitions/<Name>` (draft-07 style)"
                .to_owned(),
        ));
    }
    Ok(())
}

/// Refuses a declared schema that cannot be used: one with `$defs`, or (feature `schemas`)
/// one that does not compile, so a contract announces only schemas a reader can use.
fn vet(schema: &serde_json::Value, subject: &str) -> Result<(), Error> {
    refuse_defs(schema, subject)?;
    #[cfg(feature = "schemas")]
    schema::Check::compile(schema, None, subject.to_owned())
        .map_err(|problem| invalid_schema(subject, problem))?;
    Ok(())
}

pub(crate) struct Inner {
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) node: Name,
    pub(crate) identity: Identity,
    prefix: String,
    /// The owner word of its keys: `x-source`, and the `source` label of its metrics.
    pub(crate) source: String,
    /// `source`, as the label of its metrics, with the keys of those every emit records.
    source_label: Source,
    prefetch: u16,
    retry: RetryPolicy,
    emit_deadline: Option<Duration>,
    /// What it announced (or would have): its handlers, tools and declared emits and calls.
    contract: ModuleContract,
    /// Fired by drain and close: every consumer loop stops taking deliveries, and emits are
    /// refused.
    pub(crate) stop: CancellationToken,
    /// Fired by drain once the handlers finished and the spool was drained, and by close:
    /// prepared events are refused from then on.
    pub(crate) closed: CancellationToken,
    /// Where emits go, when the bus has a spool.
    spool: Option<Arc<dyn EmitSpool>>,
    /// Confirms of emits whose callers did not await them.
    confirms: TaskTracker,
    loops: Mutex<Vec<JoinHandle<()>>>,
}

/// A module's handle onto the mesh: emit events, call tools, and (through the
/// [`BusBuilder`]) handle events and serve tools.
///
/// Cheap to clone; every clone is the same bus. `Bus` is `Send + Sync`, and every
/// future its methods return.
///
/// There is one way to do each thing: [`emit`](Bus::emit) a typed event,
/// [`emit_outgoing`](Bus::emit_outgoing) an [`Outgoing`] (a JSON payload under an event name,
/// a full key, or options such as a causation id or headers), and
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
            .field("node", &self.inner.node)
            .field("identity", &self.inner.identity)
            .finish_non_exhaustive()
    }
}

/// An event to emit, with its options: built from a typed event, a JSON value under an
/// event name of this bus, or a full key.
#[derive(Debug, Clone)]
pub struct Outgoing {
    key: KeySpec,
    body: Bytes,
    schema: Option<SchemaVersion>,
    causation_id: Option<String>,
    id: Option<EventId>,
    headers: Headers,
    /// The first header set through [`Outgoing::header`] that only the runtime may set: the
    /// emit fails with [`ErrorKind::ReservedHeader`].
    reserved: Option<String>,
}

#[derive(Debug, Clone)]
enum KeySpec {
    Full(RoutingKey),
    Event(EventName),
}

impl Outgoing {
    /// A typed event.
    pub fn event<E: Event>(event: &E) -> Result<Outgoing, Error> {
        let key = RoutingKey::parse(E::KEY)?;
        let body =
            serde_json::to_vec(event).map_err(|e| Error::with_source(ErrorKind::Payload, e))?;
        Ok(Outgoing {
            key: KeySpec::Full(key),
            body: body.into(),
            schema: Some(SchemaVersion(E::SCHEMA)),
            causation_id: None,
            id: None,
            headers: Headers::new(),
            reserved: None,
        })
    }

    /// A JSON payload under event name `name` (`site.created`), emitted under this bus's
    /// own prefix.
    pub fn json<T: Serialize + ?Sized>(name: &str, payload: &T) -> Result<Outgoing, Error> {
        let name = EventName::parse(name)?;
        let body =
            serde_json::to_vec(payload).map_err(|e| Error::with_source(ErrorKind::Payload, e))?;
        Ok(Outgoing {
            key: KeySpec::Event(name),
            body: body.into(),
            schema: None,
            causation_id: None,
            id: None,
            headers: Headers::new(),
            reserved: None,
        })
    }

    /// Serialized JSON under event name `name`.
    fn json_bytes(name: &str, body: Vec<u8>) -> Result<Outgoing, Error> {
        Ok(Outgoing {
            key: KeySpec::Event(EventName::parse(name)?),
            body: body.into(),
            schema: None,
            causation_id: None,
            id: None,
            headers: Headers::new(),
            reserved: None,
        })
    }

    /// A JSON body (checked to be JSON) under a full routing key, which must be one this
    /// bus owns.
    pub fn raw(key: &str, body: impl Into<Bytes>) -> Result<Outgoing, Error> {
        let key = RoutingKey::parse(key)?;
        let body = body.into();
        serde_json::from_slice::<serde::de::IgnoredAny>(&body)
            .map_err(|e| Error::with_source(ErrorKind::Payload, e))?;
        Ok(Outgoing {
            key: KeySpec::Full(key),
            body,
            schema: None,
            causation_id: None,
            id: None,
            headers: Headers::new(),
            reserved: None,
        })
    }

    /// Names its cause (overrides the event being handled, which is the default).
    pub fn causation_id(mut self, id: impl Into<String>) -> Self {
        self.causation_id = Some(id.into());
        self
    }

    /// States the version of the body's shape.
    pub fn schema(mut self, version: u32) -> Self {
        self.schema = Some(SchemaVersion(version));
        self
    }

    /// Uses this event id instead of a new one (a resend of the same event).
    pub fn id(mut self, id: EventId) -> Self {
        self.id = Some(id);
        self
    }

    /// Adds a header the contract does not define (`x-…`; ignored by consumers that do
    /// not know it).
    ///
    /// The headers the runtime sets are its alone: a contract header (`x-event-id`,
    /// `x-source`, `x-node`, `x-time`, `x-causation-id`, `x-schema`, `content-type`), any
    /// `x-mesh-*` header, `traceparent`/`tracestate` or the broker's `x-death` and
    /// `x-delivery-count` (any ASCII case) is not added, and the emit fails with
    /// [`ErrorKind::ReservedHeader`] naming it; use [`Outgoing::causation_id`],
    /// [`Outgoing::schema`] and [`Outgoing::id`] for the ones an emitter may choose.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<HeaderValue>) -> Self {
        let name = name.into();
        if codec::is_reserved_header(&name) {
            self.reserved.get_or_insert(name);
        } else {
            self.headers.insert(name, value.into());
        }
        self
    }
}

/// An emit the broker has not confirmed yet: a future resolving to the event's id once it
/// has.
///
/// The event is published whether this is awaited or not; [`Bus::drain`] waits for its
/// confirm either way (dropped unresolved, it hands the wait to the bus). On a bus with a
/// spool ([`BusBuilder::spool`]) the event was kept by the spool when this was returned, and
/// it resolves to `Ok` at once.
///
/// # Cancel safety
///
/// Cancel safe: dropping it, resolved or not, loses nothing; awaiting it again is not
/// possible once it resolved.
#[must_use = "an emit is confirmed only when this resolves to Ok"]
pub struct PendingEmit {
    id: EventId,
    state: State,
}

/// Where a [`PendingEmit`] stands.
enum State {
    /// Handed to the transport; the confirm is awaited.
    Waiting(Waiting),
    /// Kept by the bus's spool: resolves to `Ok` at once.
    Kept,
    /// Resolved.
    Done,
}

/// What an unresolved [`PendingEmit`] holds.
struct Waiting {
    confirm: mesh_core::Confirm,
    since: Instant,
    source: Source,
    /// Where the wait goes when the `PendingEmit` is dropped unresolved, so `drain` waits
    /// for it. (A held one is not counted there: `drain` would wait for its holder, who may
    /// be waiting for `drain`; the transport's flush covers it.)
    confirms: TaskTracker,
}

impl Waiting {
    fn finish(self, confirmed: &Result<(), mesh_core::TransportError>) {
        record::confirmed(&self.source, self.since, confirmed);
    }
}

impl std::fmt::Debug for PendingEmit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingEmit")
            .field("id", &self.id)
            .field("resolved", &matches!(self.state, State::Done))
            .finish()
    }
}

impl PendingEmit {
    /// The event's id.
    pub fn id(&self) -> EventId {
        self.id
    }
}

impl Future for PendingEmit {
    type Output = Result<EventId, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let id = self.id;
        let waiting = match &mut self.state {
            State::Waiting(waiting) => waiting,
            State::Kept => {
                self.state = State::Done;
                return Poll::Ready(Ok(id));
            }
            State::Done => return Poll::Ready(Err(Error::new(ErrorKind::Closed))),
        };
        let confirmed = std::task::ready!(Pin::new(&mut waiting.confirm).poll(cx));
        if let State::Waiting(waiting) = std::mem::replace(&mut self.state, State::Done) {
            waiting.finish(&confirmed);
        }
        Poll::Ready(confirmed.map(|()| id).map_err(Error::from))
    }
}

impl Drop for PendingEmit {
    /// Nobody will await the confirm: the bus does, so it is counted and `drain` waits.
    fn drop(&mut self) {
        let State::Waiting(waiting) = std::mem::replace(&mut self.state, State::Done) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime left to wait on: the transport still resends and settles it.
            return;
        };
        let confirms = waiting.confirms.clone();
        runtime.spawn(confirms.track_future(async move {
            let mut waiting = waiting;
            let confirmed = (&mut waiting.confirm).await;
            waiting.finish(&confirmed);
        }));
    }
}

impl Bus {
    /// A builder.
    pub fn builder() -> BusBuilder {
        BusBuilder::default()
    }

    /// The node this bus runs on.
    pub fn node(&self) -> &Name {
        &self.inner.node
    }

    /// Its identity.
    pub fn identity(&self) -> &Identity {
        &self.inner.identity
    }

    /// Its contract, as [`start`](BusBuilder::start) built it: what it declared it emits and
    /// calls, the patterns it handles and the tools it serves, with their versions and
    /// JSON Schemas. It is what the bus announces (see [`BusBuilder::announce`]); a tool
    /// served later with [`Bus::serve`] is not in it.
    pub fn contract(&self) -> &ModuleContract {
        &self.inner.contract
    }

    /// Hands the announcement of its contract to the transport; its confirm is awaited on
    /// the side (and by [`Bus::drain`]). Never fails the bus: a failure is logged.
    async fn announce(&self) {
        let body = match serde_json::to_vec(&self.inner.contract) {
            Ok(body) => body,
            Err(e) => {
                warn!("the contract could not be serialized, not announced: {e}");
                return;
            }
        };
        let outgoing = match Outgoing::json_bytes(ANNOUNCED_EVENT, body) {
            Ok(outgoing) => outgoing.schema(CONTRACT_FORMAT),
            Err(e) => {
                warn!("the contract could not be announced: {e}");
                return;
            }
        };
        let span = emit_span();
        let published = self.publish(outgoing, &span).instrument(span.clone()).await;
        let (id, confirm, since) = match published {
            Ok(published) => published,
            Err(e) => {
                warn!("the contract announcement was refused; the bus runs on: {e}");
                return;
            }
        };
        let source = self.inner.source_label.clone();
        self.inner.confirms.spawn(
            async move {
                let confirmed = confirm.await;
                record::confirmed(&source, since, &confirmed);
                match confirmed {
                    Ok(()) => debug!(%id, "contract announced"),
                    Err(e) => warn!(
                        %id,
                        "the contract announcement was not confirmed; the bus runs on: {e}"
                    ),
                }
            }
            .instrument(span),
        );
    }

    /// Emits a typed event and waits until the broker confirmed it (on a bus with a spool:
    /// until the spool kept it, see [`BusBuilder::spool`]).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped before it resolves, the event may or may not have been
    /// published, and the caller cannot tell which. One that was published is still
    /// confirmed (and resent across reconnects) like any other, and [`Bus::drain`] waits for
    /// it. To try again without doubling it, emit an [`Outgoing`] with the same
    /// [`id`](Outgoing::id): consumers deduplicate by event id.
    pub async fn emit<E: Event>(&self, event: &E) -> Result<EventId, Error> {
        self.emit_outgoing(Outgoing::event(event)?).await
    }

    /// Emits an [`Outgoing`] and waits until the broker confirmed it (on a bus with a
    /// spool: until the spool kept it).
    ///
    /// # Cancel safety
    ///
    /// As [`Bus::emit`]: not cancel safe; a retry reuses the event's id.
    pub async fn emit_outgoing(&self, outgoing: Outgoing) -> Result<EventId, Error> {
        let span = emit_span();
        async {
            if let Some(spool) = &self.inner.spool {
                return self.keep(spool.as_ref(), outgoing, &span).await;
            }
            let (id, confirm, since) = self.publish(outgoing, &span).await?;
            let confirmed = confirm.await;
            record::confirmed(&self.inner.source_label, since, &confirmed);
            confirmed?;
            Ok(id)
        }
        .instrument(span.clone())
        .await
    }

    /// Emits without waiting for the confirm: returns once the transport took the event
    /// (waiting only for room in its unconfirmed window), with a [`PendingEmit`] that
    /// resolves on the confirm. Many emits can be in flight this way. On a bus with a spool
    /// it returns once the spool kept the event, and the [`PendingEmit`] resolves at once.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe while it waits for room: dropped then, the event may or may not have
    /// been taken. Once it returned, dropping the [`PendingEmit`] cancels nothing: the
    /// event is confirmed all the same, and [`Bus::drain`] waits for it.
    pub async fn emit_nowait(&self, outgoing: Outgoing) -> Result<PendingEmit, Error> {
        let span = emit_span();
        if let Some(spool) = &self.inner.spool {
            let id = self
                .keep(spool.as_ref(), outgoing, &span)
                .instrument(span.clone())
                .await?;
            return Ok(PendingEmit {
                id,
                state: State::Kept,
            });
        }
        let (id, confirm, since) = self
            .publish(outgoing, &span)
            .instrument(span.clone())
            .await?;
        Ok(PendingEmit {
            id,
            state: State::Waiting(Waiting {
                confirm,
                since,
                source: self.inner.source_label.clone(),
                confirms: self.inner.confirms.clone(),
            }),
        })
    }

    /// Hands the event to the spool; resolves once the spool kept it.
    async fn keep(
        &self,
        spool: &dyn EmitSpool,
        outgoing: Outgoing,
        span: &Span,
    ) -> Result<EventId, Error> {
        let (id, envelope, _) = self.prepare(outgoing, span)?;
        spool
            .keep(Prepared::made(id, codec::encode(&envelope)))
            .await?;
        Ok(id)
    }

    /// Hands the event to the transport; the confirm is pending from the returned instant.
    async fn publish(
        &self,
        outgoing: Outgoing,
        span: &Span,
    ) -> Result<(EventId, mesh_core::Confirm, Instant), Error> {
        let (id, envelope, options) = self.prepare(outgoing, span)?;
        match self.inner.transport.publish_event(envelope, options).await {
            Ok(confirm) => {
                record::emitted(&self.inner.source_label);
                Ok((id, confirm, Instant::now()))
            }
            Err(e) => {
                record::emit_refused(&self.inner.source_label, &e);
                Err(e.into())
            }
        }
    }

    pub(crate) fn prepare(
        &self,
        outgoing: Outgoing,
        span: &Span,
    ) -> Result<(EventId, Envelope, PublishOptions), Error> {
        if self.inner.stop.is_cancelled() {
            return Err(Error::new(ErrorKind::Closed));
        }
        if let Some(name) = outgoing.reserved {
            return Err(Error::new(ErrorKind::ReservedHeader { name }));
        }
        let key = match outgoing.key {
            KeySpec::Full(key) => {
                if !self.inner.identity.owns(&self.inner.node, &key) {
                    return Err(Error::new(ErrorKind::ForeignKey {
                        key: key.to_string(),
                        allowed: format!("{}…", self.inner.prefix),
                    }));
                }
                key
            }
            KeySpec::Event(name) => RoutingKey::new(
                self.inner.identity.origin(),
                self.inner.identity.owner(&self.inner.node),
                &name,
            )?,
        };
        let id = outgoing.id.unwrap_or_default();
        let causation_id = outgoing.causation_id.or_else(crate::causation::current);
        span.record("key", key.as_str());
        span.record("id", tracing::field::display(id));
        if let Some(cause) = &causation_id {
            span.record("causation_id", cause.as_str());
        }
        let mut extra_headers = outgoing.headers;
        propagation::inject(span, &mut extra_headers);
        let envelope = Envelope {
            id,
            key,
            source: self.inner.source.clone(),
            // The name's text as is (its `Display` would go through the formatter).
            node: self.inner.node.as_str().to_owned(),
            time: Timestamp::now(),
            causation_id,
            schema: outgoing.schema,
            extra_headers,
            body: outgoing.body,
        };
        let options = PublishOptions {
            deadline: self.inner.emit_deadline,
            ..PublishOptions::default()
        };
        Ok((id, envelope, options))
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

    pub(crate) async fn start_serving(&self, entry: ServeEntry) -> Result<(), Error> {
        let subscription = rpc::subscribe(&self.inner, &entry, self.inner.prefetch).await?;
        let stop = self.inner.stop.child_token();
        self.spawn_loop(rpc::serve_loop(Arc::new(entry), subscription, stop))
            .await;
        Ok(())
    }

    /// Serves a tool from now on (see [`BusBuilder::serve`]).
    pub async fn serve<Req, Resp, F, Fut>(&self, tool: &str, handler: F) -> Result<(), Error>
    where
        Req: serde::de::DeserializeOwned + Send + 'static,
        Resp: Serialize + Send + 'static,
        F: Fn(Req, mesh_core::RequestMeta) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, mesh_core::RemoteError>> + Send + 'static,
    {
        self.start_serving(ServeEntry::new(tool.to_owned(), handler))
            .await
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
        if let Some(spool) = &self.inner.spool {
            spool.drain(self.inner.emit_deadline).await;
        }
        self.inner.closed.cancel();
        self.inner.confirms.close();
        self.inner.confirms.wait().await;
        // Emits whose `PendingEmit` is still held (not awaited, not dropped) are in the
        // transport's window: wait for them too, as long as an emit may wait.
        let flushed = self.inner.transport.flush();
        match self.inner.emit_deadline {
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
        if let Some(spool) = &self.inner.spool {
            spool.stop().await;
        }
        self.inner.transport.close().await;
    }
}
