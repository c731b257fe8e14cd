//! What a handler receives.

use std::sync::Arc;

use mesh_core::{Envelope, EventId, Headers, RoutingKey, SchemaVersion, Timestamp};

/// The metadata of a delivered event: the envelope it came in (shared by every handler of
/// the delivery, never copied field by field), and how it was delivered.
#[derive(Debug, Clone)]
pub struct Meta {
    envelope: Arc<Envelope>,
    attempt: u32,
    redelivered: bool,
}

impl Meta {
    pub(crate) fn new(envelope: Arc<Envelope>, attempt: u32, redelivered: bool) -> Meta {
        Meta {
            envelope,
            attempt,
            redelivered,
        }
    }

    /// `x-event-id`.
    pub fn id(&self) -> EventId {
        self.envelope.id
    }

    /// The routing key.
    pub fn key(&self) -> &RoutingKey {
        &self.envelope.key
    }

    /// `x-source`: the module, context or node that emitted it.
    pub fn source(&self) -> &str {
        &self.envelope.source
    }

    /// `x-node`: the node it was emitted from.
    pub fn node(&self) -> &str {
        &self.envelope.node
    }

    /// `x-time`: when it was emitted.
    pub fn time(&self) -> Timestamp {
        self.envelope.time
    }

    /// `x-causation-id`: the event or call that caused it, when stated.
    pub fn causation_id(&self) -> Option<&str> {
        self.envelope.causation_id.as_deref()
    }

    /// `x-schema`, when stated.
    pub fn schema(&self) -> Option<SchemaVersion> {
        self.envelope.schema
    }

    /// Headers the contract does not define (kept as they came).
    pub fn headers(&self) -> &Headers {
        &self.envelope.extra_headers
    }

    /// Which handler call this is for the event: 1 the first time, 2 after one retry, …
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// Whether this event may have been handled before: the broker delivered this copy
    /// before (a crash or a requeue), or it is stored history replayed into this module's
    /// queue ([`Meta::replayed`]).
    pub fn redelivered(&self) -> bool {
        self.redelivered || self.replayed().is_some()
    }

    /// When this event was replayed from the audit store into this module's queue only
    /// (`mesh audit replay`): `None` for a live event. The marker is the runtime's
    /// (`x-mesh-replayed`), believed only on a delivery the broker routed straight to the
    /// queue, where no module may publish under the access plan; on an event published to
    /// `mesh.events` a transport removes it before a handler sees it.
    pub fn replayed(&self) -> Option<Timestamp> {
        mesh_core::codec::replayed_at(&self.envelope.extra_headers)
    }

    /// The whole envelope, body included (the JSON bytes as emitted).
    pub fn envelope(&self) -> &Envelope {
        &self.envelope
    }
}

/// A delivered event: its payload (a typed value, or the JSON bytes for raw handlers) and
/// its metadata.
///
/// ```
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)]
/// # struct SiteCreated { site: String }
/// # impl mesh::Event for SiteCreated { const KEY: &'static str = "module.umami.site.created"; }
/// use mesh::{HandlerError, Incoming};
///
/// async fn on_site(e: Incoming<SiteCreated>) -> Result<(), HandlerError> {
///     if e.meta.attempt() > 1 {
///         tracing::info!(id = %e.meta.id(), attempt = e.meta.attempt(), "handling again");
///     }
///     if e.event.site.is_empty() {
///         // Dead-lettered at once, with this message as its last error.
///         return Err(HandlerError::permanent("a site needs a name"));
///     }
///     println!("{} created on node {} by {}", e.event.site, e.meta.node(), e.meta.source());
///     Ok(())
/// }
/// # let _ = mesh::Bus::builder().on(on_site);
/// ```
#[derive(Debug, Clone)]
pub struct Incoming<T> {
    /// The payload.
    pub event: T,
    /// The metadata.
    pub meta: Meta,
}
