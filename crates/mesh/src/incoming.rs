//! What a handler receives.

use mesh_core::{Envelope, EventId, Headers, RoutingKey, SchemaVersion, Timestamp};

/// The metadata of a delivered event.
#[derive(Debug, Clone)]
pub struct Meta {
    /// `x-event-id`.
    pub id: EventId,
    /// The routing key.
    pub key: RoutingKey,
    /// `x-source`.
    pub source: String,
    /// `x-node`.
    pub node: String,
    /// `x-time`.
    pub time: Timestamp,
    /// `x-causation-id`.
    pub causation_id: Option<String>,
    /// `x-schema`, when stated.
    pub schema: Option<SchemaVersion>,
    /// Which handler call this is for the event: 1 the first time, 2 after one retry, …
    pub attempt: u32,
    /// Whether the broker delivered this copy before (a crash or a requeue).
    pub redelivered: bool,
    /// Headers the contract does not define (kept as they came).
    pub headers: Headers,
}

impl Meta {
    pub(crate) fn new(envelope: &Envelope, attempt: u32, redelivered: bool) -> Meta {
        Meta {
            id: envelope.id,
            key: envelope.key.clone(),
            source: envelope.source.clone(),
            node: envelope.node.clone(),
            time: envelope.time,
            causation_id: envelope.causation_id.clone(),
            schema: envelope.schema,
            attempt,
            redelivered,
            headers: envelope.extra_headers.clone(),
        }
    }
}

/// A delivered event: its payload (a typed value, or the JSON bytes for raw handlers) and
/// its metadata.
#[derive(Debug, Clone)]
pub struct Incoming<T> {
    /// The payload.
    pub event: T,
    /// The metadata.
    pub meta: Meta,
}
