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

    /// The id as text, as [`Display`](fmt::Display) writes it (`x-event-id`), built in one
    /// allocation of its exact size.
    pub fn text(&self) -> String {
        let mut buffer = uuid::Uuid::encode_buffer();
        self.0.hyphenated().encode_lower(&mut buffer).to_owned()
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
///
/// Every time mesh reads is within [`Timestamp::MIN_UNIX_NANOS`]..=[`Timestamp::MAX_UNIX_NANOS`]
/// (0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999999Z, in UTC): the range whose UTC
/// form has a four-digit year, so it can be written in UTC, stored in the audit store's
/// fixed-width text and read back. [`Timestamp::parse`] and [`Timestamp::from_unix_seconds`]
/// check it, once, where the text or number comes in; `9999-12-31T23:59:59-01:00` parses as
/// RFC 3339 but is the year 10000 in UTC, so it is refused like any malformed time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Timestamp(OffsetDateTime);

/// Why a text or a number is not a [`Timestamp`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TimeError {
    /// The text is not RFC 3339.
    #[error("not RFC 3339")]
    Parse(#[source] time::error::Parse),
    /// A valid time, but outside 0001-01-01T00:00:00Z..=9999-12-31T23:59:59.999999999Z once
    /// in UTC.
    #[error("out of range: its UTC form must be within 0001-01-01 and 9999-12-31")]
    OutOfRange,
}

impl Timestamp {
    /// The earliest time accepted, 0001-01-01T00:00:00Z, in nanoseconds since the epoch.
    pub const MIN_UNIX_NANOS: i128 = -62_135_596_800 * 1_000_000_000;
    /// The latest time accepted, 9999-12-31T23:59:59.999999999Z, in nanoseconds since the
    /// epoch.
    pub const MAX_UNIX_NANOS: i128 = 253_402_300_799 * 1_000_000_000 + 999_999_999;

    /// Now, in UTC.
    pub fn now() -> Timestamp {
        Timestamp(OffsetDateTime::now_utc())
    }

    /// Parses RFC 3339 and checks the range (see the type's docs).
    pub fn parse(text: &str) -> Result<Timestamp, TimeError> {
        let time = OffsetDateTime::parse(text, &Rfc3339).map_err(TimeError::Parse)?;
        Timestamp::checked(time).ok_or(TimeError::OutOfRange)
    }

    /// From whole seconds since the Unix epoch, when within the range.
    pub fn from_unix_seconds(seconds: i64) -> Option<Timestamp> {
        OffsetDateTime::from_unix_timestamp(seconds)
            .ok()
            .and_then(Timestamp::checked)
    }

    /// `time`, when within the range (see the type's docs).
    pub fn checked(time: OffsetDateTime) -> Option<Timestamp> {
        // The instant in nanoseconds is plain arithmetic on the date, time and offset: it
        // never panics, whatever the offset, unlike a conversion to UTC.
        let nanos = time.unix_timestamp_nanos();
        (Timestamp::MIN_UNIX_NANOS..=Timestamp::MAX_UNIX_NANOS)
            .contains(&nanos)
            .then_some(Timestamp(time))
    }

    /// Whether it is within the range every parsed time is in (always true for a time
    /// from [`Timestamp::parse`], [`Timestamp::from_unix_seconds`], [`Timestamp::checked`]
    /// or [`Timestamp::now`]; only [`From<OffsetDateTime>`] can make one that is not).
    pub fn in_range(&self) -> bool {
        (Timestamp::MIN_UNIX_NANOS..=Timestamp::MAX_UNIX_NANOS).contains(&self.unix_nanos())
    }

    /// `duration` before this time, when that is still within the range.
    pub fn checked_sub(&self, duration: std::time::Duration) -> Option<Timestamp> {
        let duration = time::Duration::try_from(duration).ok()?;
        self.0.checked_sub(duration).and_then(Timestamp::checked)
    }

    /// `duration` after this time, when that is still within the range.
    pub fn checked_add(&self, duration: std::time::Duration) -> Option<Timestamp> {
        let duration = time::Duration::try_from(duration).ok()?;
        self.0.checked_add(duration).and_then(Timestamp::checked)
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

    /// The time as RFC 3339 text, as [`Display`](fmt::Display) writes it (`x-time`),
    /// without formatting it twice.
    pub fn text(&self) -> String {
        match self.0.format(&Rfc3339) {
            Ok(text) => text,
            Err(_) => format!("{:?}", self.0),
        }
    }
}

/// Unchecked: for times the program computed itself. Times from outside go through
/// [`Timestamp::parse`] or [`Timestamp::checked`].
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
        f.write_str(&self.text())
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn an_ids_text_is_its_display(bits in any::<u128>()) {
            let id = EventId::from(Uuid::from_u128(bits));
            prop_assert_eq!(id.text(), id.to_string());
            prop_assert_eq!(id.text().parse::<EventId>().ok(), Some(id));
        }
    }
}
