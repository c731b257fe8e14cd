//! What a bus is asked to emit: an [`Outgoing`] event and its options, before the emitter
//! turns it into an envelope under the bus's identity.

use bytes::Bytes;
use mesh_core::codec;
use mesh_core::{EventId, EventName, HeaderValue, Headers, RoutingKey, SchemaVersion};
use serde::Serialize;

use crate::error::{Error, ErrorKind};
use crate::event::Event;

/// An event to emit, with its options: built from a typed event, a JSON value under an
/// event name of this bus, or a full key.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub(crate) key: KeySpec,
    pub(crate) body: Bytes,
    pub(crate) schema: Option<SchemaVersion>,
    pub(crate) causation_id: Option<String>,
    pub(crate) id: Option<EventId>,
    pub(crate) headers: Headers,
    /// The first header set through [`Outgoing::header`] that only the runtime may set: the
    /// emit fails with [`ErrorKind::ReservedHeader`].
    pub(crate) reserved: Option<String>,
}

/// The key of an [`Outgoing`], as asked for.
#[derive(Debug, Clone)]
pub(crate) enum KeySpec {
    /// A full key, which must be one the bus owns.
    Full(RoutingKey),
    /// An event name, under the bus's prefix.
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
    pub(crate) fn json_bytes(name: &str, body: Vec<u8>) -> Result<Outgoing, Error> {
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
