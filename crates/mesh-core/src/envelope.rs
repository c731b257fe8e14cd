//! The envelope: an event's identity and provenance, and its payload.
//!
//! The envelope is plain data; [`crate::codec`] maps it to and from AMQP properties and
//! headers.

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use uuid::Uuid;

use crate::key::RoutingKey;
use crate::wire::Headers;

/// The unique id of an event, a UUID. New ids are version 7, so they sort by time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(Uuid);

impl EventId {
    /// A new, time-ordered id.
    pub fn new() -> EventId {
        EventId(Uuid::now_v7())
    }

    /// The id as a UUID.
    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl Default for EventId {
    fn default() -> Self {
        EventId::new()
    }
}

impl From<Uuid> for EventId {
    fn from(value: Uuid) -> Self {
        EventId(value)
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl FromStr for EventId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(EventId)
    }
}

/// A point in time, written on the wire as RFC 3339 (`2026-09-03T12:00:00.123456Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Timestamp(OffsetDateTime);

impl Timestamp {
    /// Now, in UTC.
    pub fn now() -> Timestamp {
        Timestamp(OffsetDateTime::now_utc())
    }

    /// Parses RFC 3339.
    pub fn parse(text: &str) -> Result<Timestamp, time::error::Parse> {
        OffsetDateTime::parse(text, &Rfc3339).map(Timestamp)
    }

    /// From whole seconds since the Unix epoch.
    pub fn from_unix_seconds(seconds: i64) -> Option<Timestamp> {
        OffsetDateTime::from_unix_timestamp(seconds)
            .ok()
            .map(Timestamp)
    }

    /// The time as `time`'s type.
    pub fn as_offset_date_time(&self) -> OffsetDateTime {
        self.0
    }

    /// Whole seconds since the Unix epoch.
    pub fn unix_seconds(&self) -> i64 {
        self.0.unix_timestamp()
    }

    /// Nanoseconds since the Unix epoch.
    pub fn unix_nanos(&self) -> i128 {
        self.0.unix_timestamp_nanos()
    }
}

impl From<OffsetDateTime> for Timestamp {
    fn from(value: OffsetDateTime) -> Self {
        Timestamp(value)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Formatting an OffsetDateTime as RFC 3339 fails only for years outside 0..=9999,
        // which `now()` and the parser never produce; fall back to the debug form rather
        // than panic.
        match self.0.format(&Rfc3339) {
            Ok(text) => f.write_str(&text),
            Err(_) => write!(f, "{:?}", self.0),
        }
    }
}

/// The version of a body's shape (`x-schema`). An event without the header is version 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SchemaVersion(pub u32);

impl SchemaVersion {
    /// The version of an event that carries no `x-schema` header.
    pub const DEFAULT: SchemaVersion = SchemaVersion(1);
}

impl fmt::Display for SchemaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An event: its routing key, metadata and JSON payload.
#[derive(Debug, Clone, PartialEq)]
pub struct Envelope {
    /// `x-event-id`.
    pub id: EventId,
    /// The routing key: the event's type.
    pub key: RoutingKey,
    /// `x-source`: the module, context or node that emitted it.
    pub source: String,
    /// `x-node`: the node it was emitted from.
    pub node: String,
    /// `x-time`: when it was emitted.
    pub time: Timestamp,
    /// `x-causation-id`: the event or call that caused it.
    pub causation_id: Option<String>,
    /// `x-schema`: the version of the body's shape, when the emitter stated one.
    pub schema: Option<SchemaVersion>,
    /// Headers this version of the contract does not define, kept so a forwarder passes
    /// them on.
    pub extra_headers: Headers,
    /// The domain payload: a JSON document, exactly as emitted.
    pub body: Bytes,
}

impl Envelope {
    /// The schema version the body claims, [`SchemaVersion::DEFAULT`] when none was stated.
    pub fn schema_or_default(&self) -> SchemaVersion {
        self.schema.unwrap_or(SchemaVersion::DEFAULT)
    }
}
