//! The emitter: what a bus needs to speak on the mesh in its own name, and nothing of its
//! handlers, loops or contract.
//!
//! An [`Emitter`] holds the bus's transport, its identity (node, owner, key prefix), the emit
//! deadline, where emits go when the bus has a spool, and the bus's two tokens that refuse
//! emits and prepared events once it stops. It makes an event exactly as the contract wants
//! it (the key under the bus's prefix, its id, `x-source`, `x-node`, `x-time`, `x-schema`, the
//! causation id of the event being handled, trace context) and publishes it, keeps it in the
//! spool, or hands it back prepared for a store of the caller's.
//!
//! The bus owns one and hands it to what emits, publishes or calls on its behalf (its own
//! emits, prepared events, tool calls), so that none of them reaches into the bus: this file
//! names no `Bus`, and neither do the files that take an emitter.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use mesh_core::{codec, Envelope, EventId, Name, PublishOptions, RoutingKey, Timestamp, Transport};
use tokio_util::sync::CancellationToken;
use tracing::Span;

use crate::error::{Error, ErrorKind};
use crate::identity::Identity;
use crate::outgoing::{KeySpec, Outgoing};
use crate::prepared::{Prepared, PreparedConfirm};
use crate::telemetry::propagation;
use crate::telemetry::record::{self, Source};

/// The span of one emit; key, id and causation are recorded once known. Its trace context
/// rides the message (`traceparent`), so the consumer's `mesh.handle` span is its child.
pub(crate) fn emit_span() -> Span {
    tracing::info_span!(
        "mesh.emit",
        otel.kind = "producer",
        key = tracing::field::Empty,
        id = tracing::field::Empty,
        causation_id = tracing::field::Empty,
    )
}

/// A spool as the emitter holds it: the store emits go to, drained and stopped with the bus.
///
/// Every [`EmitSpool`](crate::EmitSpool) is one (`spool.rs`). The emitter names this trait,
/// not `EmitSpool`, whose `start` takes the bus that owns the emitter; the builder, which
/// calls `start`, holds the spool both ways.
pub(crate) trait HeldSpool: Send + Sync {
    /// [`EmitSpool::keep`](crate::EmitSpool::keep).
    fn keep(&self, event: Prepared) -> BoxFuture<'_, Result<(), Error>>;

    /// [`EmitSpool::drain`](crate::EmitSpool::drain).
    fn drain(&self, deadline: Option<Duration>) -> BoxFuture<'_, ()>;

    /// [`EmitSpool::stop`](crate::EmitSpool::stop).
    fn stop(&self) -> BoxFuture<'_, ()>;
}

/// What a bus needs to emit, publish prepared events and call tools in its own name.
pub(crate) struct Emitter {
    transport: Arc<dyn Transport>,
    node: Name,
    identity: Identity,
    /// The prefix of its keys (`module.<m>.`), named when a foreign key is refused.
    prefix: String,
    /// The owner word of its keys: `x-source`, and the `source` label of its metrics.
    source: String,
    /// `source`, as the label of its metrics, with the keys of those every emit records.
    source_label: Source,
    emit_deadline: Option<Duration>,
    /// Where emits go, when the bus has a spool.
    spool: Option<Arc<dyn HeldSpool>>,
    /// The bus's, fired by drain and close: emits are refused from then on.
    stop: CancellationToken,
    /// The bus's, fired once drain let the handlers and the spool finish, and by close:
    /// prepared events are refused from then on.
    closed: CancellationToken,
}

impl Emitter {
    /// An emitter speaking as `identity` on `node`, refusing emits once `stop` fires and
    /// prepared events once `closed` does.
    pub(crate) fn new(
        transport: Arc<dyn Transport>,
        node: Name,
        identity: Identity,
        emit_deadline: Option<Duration>,
        spool: Option<Arc<dyn HeldSpool>>,
        stop: CancellationToken,
        closed: CancellationToken,
    ) -> Emitter {
        let source = identity.owner(&node).to_string();
        Emitter {
            transport,
            prefix: identity.prefix(&node),
            source_label: Source::new(&source),
            source,
            node,
            identity,
            emit_deadline,
            spool,
            stop,
            closed,
        }
    }

    /// The transport it publishes through.
    pub(crate) fn transport(&self) -> &dyn Transport {
        self.transport.as_ref()
    }

    /// The node it speaks from.
    pub(crate) fn node(&self) -> &Name {
        &self.node
    }

    /// The identity it speaks as.
    pub(crate) fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The `source` label of its emit metrics.
    pub(crate) fn source_label(&self) -> &Source {
        &self.source_label
    }

    /// How long an emit may wait for room and for its confirm.
    pub(crate) fn emit_deadline(&self) -> Option<Duration> {
        self.emit_deadline
    }

    /// The spool its emits go to, if the bus has one.
    pub(crate) fn spool(&self) -> Option<&dyn HeldSpool> {
        self.spool.as_deref()
    }

    /// Hands the event to the spool; resolves once the spool kept it.
    pub(crate) async fn keep(
        &self,
        spool: &dyn HeldSpool,
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
    pub(crate) async fn publish(
        &self,
        outgoing: Outgoing,
        span: &Span,
    ) -> Result<(EventId, mesh_core::Confirm, Instant), Error> {
        let (id, envelope, options) = self.prepare(outgoing, span)?;
        match self.transport.publish_event(envelope, options).await {
            Ok(confirm) => {
                record::emitted(&self.source_label);
                Ok((id, confirm, Instant::now()))
            }
            Err(e) => {
                record::emit_refused(&self.source_label, &e);
                Err(e.into())
            }
        }
    }

    /// Makes the envelope of `outgoing` under this identity, recording key, id and causation
    /// on `span` and injecting its trace context; refused once the bus stopped.
    fn prepare(
        &self,
        outgoing: Outgoing,
        span: &Span,
    ) -> Result<(EventId, Envelope, PublishOptions), Error> {
        if self.stop.is_cancelled() {
            return Err(Error::new(ErrorKind::Closed));
        }
        if let Some(name) = outgoing.reserved {
            return Err(Error::new(ErrorKind::ReservedHeader { name }));
        }
        let key = match outgoing.key {
            KeySpec::Full(key) => {
                if !self.identity.owns(&self.node, &key) {
                    return Err(Error::new(ErrorKind::ForeignKey {
                        key: key.to_string(),
                        allowed: format!("{}…", self.prefix),
                    }));
                }
                key
            }
            KeySpec::Event(name) => RoutingKey::new(
                self.identity.origin(),
                self.identity.owner(&self.node),
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
            source: self.source.clone(),
            // The name's text as is (its `Display` would go through the formatter).
            node: self.node.as_str().to_owned(),
            time: Timestamp::now(),
            causation_id,
            schema: outgoing.schema,
            extra_headers,
            body: outgoing.body,
        };
        let options = PublishOptions {
            deadline: self.emit_deadline,
            ..PublishOptions::default()
        };
        Ok((id, envelope, options))
    }

    /// The message an emit of `outgoing` would publish, not published (see
    /// [`Bus::prepare_emit`](crate::Bus::prepare_emit)).
    pub(crate) fn prepare_emit(&self, outgoing: Outgoing) -> Result<Prepared, Error> {
        let span = tracing::info_span!(
            "mesh.emit",
            otel.kind = "producer",
            prepared = true,
            key = tracing::field::Empty,
            id = tracing::field::Empty,
            causation_id = tracing::field::Empty,
        );
        let _entered = span.enter();
        let (id, envelope, _) = self.prepare(outgoing, &span)?;
        Ok(Prepared::made(id, codec::encode(&envelope)))
    }

    /// Publishes a prepared event of this identity as it is (see
    /// [`Bus::publish_prepared`](crate::Bus::publish_prepared)).
    pub(crate) async fn publish_prepared(
        &self,
        prepared: Prepared,
        deadline: Option<Duration>,
    ) -> Result<PreparedConfirm, Error> {
        if self.closed.is_cancelled() {
            return Err(Error::new(ErrorKind::Closed));
        }
        let message = prepared.message();
        let foreign = || {
            Error::new(ErrorKind::ForeignKey {
                key: message.routing_key.clone(),
                allowed: format!("{}…", self.identity.prefix(&self.node)),
            })
        };
        let key = RoutingKey::parse(&message.routing_key)?;
        let source = message.header(codec::SOURCE).and_then(|v| v.as_str());
        if !self.identity.owns(&self.node, &key) || source != Some(self.source.as_str()) {
            return Err(foreign());
        }
        let label = Source::new(&self.source);
        let options = PublishOptions {
            deadline,
            ..PublishOptions::default()
        };
        let id = prepared.id();
        match self
            .transport
            .publish(prepared.into_message(), options)
            .await
        {
            Ok(confirm) => {
                record::emitted(&label);
                Ok(PreparedConfirm::new(id, Instant::now(), label, confirm))
            }
            Err(e) => {
                record::emit_refused(&label, &e);
                Err(e.into())
            }
        }
    }
}
