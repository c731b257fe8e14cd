//! Rows as bound and as read: built from messages on the way in, turned into records on the
//! way out. Every value is bound as text, an integer or bytes on both backends; PostgreSQL's
//! SQL casts them to its own types.

use bytes::Bytes;
use mesh_core::{codec, DeadReason, Envelope, EventId, Timestamp, WireMessage};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::convert::{clean, clean_owned, headers_to_json_text, time_from_text, time_to_text};
use crate::error::Error;
use crate::record::{ConflictRecord, DeadLetterId, DeadLetterRecord, EventRecord};

/// The namespace of dead-letter ids (UUID v5 over a dead letter's content).
const DEAD_LETTER_NAMESPACE: Uuid = Uuid::from_u128(0x6d65_7368_2d61_7564_6974_2d64_6561_6401);
/// The namespace of id-conflict ids (UUID v5 over the identity of the conflicting event).
const CONFLICT_NAMESPACE: Uuid = Uuid::from_u128(0x6d65_7368_2d61_7564_6974_2d63_6f6e_6601);

/// An event row to insert.
#[derive(Debug, Clone)]
pub(crate) struct EventRow {
    pub(crate) id: String,
    pub(crate) routing_key: String,
    pub(crate) source: String,
    pub(crate) node: String,
    pub(crate) time: String,
    pub(crate) causation_id: Option<String>,
    pub(crate) schema: Option<i64>,
    pub(crate) received_at: String,
    pub(crate) headers: String,
    pub(crate) body: String,
    /// The validated user of the delivery ([`codec::validated_user`]).
    pub(crate) publisher: Option<String>,
}

impl EventRow {
    /// The row of a decoded event, taking its text; `Err` says why it cannot be stored (its
    /// body is not UTF-8, which JSON requires but the decoder does not check).
    pub(crate) fn new(
        envelope: Envelope,
        message: &WireMessage,
        received_at: &str,
    ) -> Result<EventRow, String> {
        let body = std::str::from_utf8(&envelope.body)
            .map_err(|e| format!("the body is not UTF-8: {e}"))?
            .to_owned();
        let time = time_to_text(envelope.time).map_err(|e| e.to_string())?;
        Ok(EventRow {
            id: envelope.id.to_string(),
            routing_key: envelope.key.as_str().to_owned(),
            source: clean_owned(envelope.source),
            node: clean_owned(envelope.node),
            time,
            causation_id: envelope.causation_id.as_deref().map(canonical_id),
            schema: envelope.schema.map(|s| i64::from(s.0)),
            received_at: received_at.to_owned(),
            headers: headers_to_json_text(&message.properties.headers),
            body,
            publisher: codec::validated_user(message).map(clean),
        })
    }
}

/// What tells two events with the same id apart: the routing key, the source and the body's
/// SHA-256. A redelivery or a publisher's resend has the same; a different event reusing the
/// id does not. The node, time and headers are left out: a resend after a restart may be
/// stamped anew, and the broker adds headers on the way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    pub(crate) routing_key: String,
    pub(crate) source: String,
    pub(crate) body_sha256: [u8; 32],
}

impl Identity {
    /// The identity of a stored or incoming event from its columns.
    pub(crate) fn of(routing_key: &str, source: &str, body: &str) -> Identity {
        Identity {
            routing_key: routing_key.to_owned(),
            source: source.to_owned(),
            body_sha256: Sha256::digest(body.as_bytes()).into(),
        }
    }
}

impl EventRow {
    /// Its identity (see [`Identity`]).
    pub(crate) fn identity(&self) -> Identity {
        Identity::of(&self.routing_key, &self.source, &self.body)
    }
}

/// An event row whose id is taken by a different stored event, to insert into
/// `event_conflicts`.
#[derive(Debug, Clone)]
pub(crate) struct ConflictRow {
    /// UUID v5 of the event id and its [`Identity`]: the same conflicting event delivered
    /// again maps to the same row.
    pub(crate) id: String,
    pub(crate) event: EventRow,
    pub(crate) body_sha256: String,
}

impl ConflictRow {
    pub(crate) fn new(event: &EventRow, identity: &Identity) -> ConflictRow {
        let mut content = Vec::with_capacity(
            event.id.len() + identity.routing_key.len() + identity.source.len() + 35,
        );
        for part in [
            event.id.as_bytes(),
            identity.routing_key.as_bytes(),
            identity.source.as_bytes(),
        ] {
            content.extend_from_slice(part);
            content.push(0);
        }
        content.extend_from_slice(&identity.body_sha256);
        ConflictRow {
            id: Uuid::new_v5(&CONFLICT_NAMESPACE, &content)
                .hyphenated()
                .to_string(),
            event: event.clone(),
            body_sha256: identity
                .body_sha256
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
        }
    }
}

/// A causation id in the form events' ids are stored in, so links are found by equality: a
/// UUID in lowercase hyphenated form, anything else as it came.
pub(crate) fn canonical_id(text: &str) -> String {
    match Uuid::parse_str(text) {
        Ok(uuid) => uuid.hyphenated().to_string(),
        Err(_) => clean(text),
    }
}

/// A dead-letter row to insert.
#[derive(Debug, Clone)]
pub(crate) struct DeadRow {
    pub(crate) id: String,
    pub(crate) event_id: Option<String>,
    pub(crate) routing_key: String,
    pub(crate) reason: Option<String>,
    pub(crate) attempts: i64,
    pub(crate) last_error: Option<String>,
    pub(crate) queue: Option<String>,
    pub(crate) dead_at: String,
    pub(crate) received_at: String,
    pub(crate) content_type: Option<String>,
    pub(crate) message_id: Option<String>,
    pub(crate) amqp_timestamp: Option<i64>,
    pub(crate) headers: String,
    pub(crate) body: Vec<u8>,
    /// The `user-id` property: who published this copy.
    pub(crate) user_id: Option<String>,
    /// Its claims failed the provenance check ([`DeadRow::judged`]).
    pub(crate) untrusted: bool,
}

impl DeadRow {
    /// The row of any message from the dead-letter queue: nothing about it can be refused.
    ///
    /// `delivery_limit` is the `x-delivery-limit` of mesh's consumer queues, which gives the
    /// number of deliveries of a message the broker dead-lettered for it
    /// ([`codec::read_dead_letter_with_limit`]); `None` reads them as 0 (unknown).
    pub(crate) fn new(
        message: &WireMessage,
        received_at: &str,
        delivery_limit: Option<u32>,
    ) -> DeadRow {
        let headers = headers_to_json_text(&message.properties.headers);
        let routing_key = clean(&message.routing_key);
        // The key covers everything the message carries, and the transport keeps nothing
        // that changes between deliveries in the headers (the broker's delivery count is
        // taken out), so a redelivery maps to the same row.
        let mut content =
            Vec::with_capacity(routing_key.len() + headers.len() + message.body.len() + 2);
        content.extend_from_slice(routing_key.as_bytes());
        content.push(0);
        content.extend_from_slice(headers.as_bytes());
        content.push(0);
        content.extend_from_slice(&message.body);
        let id = Uuid::new_v5(&DEAD_LETTER_NAMESPACE, &content);

        let dead = codec::read_dead_letter_with_limit(message, delivery_limit);
        let dead_at = dead
            .as_ref()
            .and_then(|d| time_to_text(d.time).ok())
            .unwrap_or_else(|| received_at.to_owned());
        DeadRow {
            id: id.hyphenated().to_string(),
            event_id: codec::event_id(message).map(|id| id.to_string()),
            routing_key,
            reason: dead.as_ref().map(|d| d.reason.as_str().to_owned()),
            attempts: dead.as_ref().map_or(0, |d| i64::from(d.attempts)),
            last_error: dead
                .as_ref()
                .and_then(|d| d.last_error.as_deref().map(clean)),
            queue: dead
                .as_ref()
                .map(|d| clean(&d.queue))
                .filter(|q| !q.is_empty()),
            dead_at,
            received_at: received_at.to_owned(),
            content_type: message.properties.content_type.as_deref().map(clean),
            message_id: message.properties.message_id.as_deref().map(clean),
            amqp_timestamp: message
                .properties
                .timestamp
                .and_then(|t| i64::try_from(t).ok()),
            headers,
            body: message.body.to_vec(),
            user_id: message.properties.user_id.as_deref().map(clean),
            untrusted: false,
        }
    }

    /// The row with its provenance judged when identity is enforced (`Some(user_prefix)`):
    /// untrusted unless [`mesh_core::provenance::dead_letter_trusted`]. Without, no check is made.
    pub(crate) fn judged(mut self, message: &WireMessage, user_prefix: Option<&str>) -> DeadRow {
        if let Some(prefix) = user_prefix {
            self.untrusted = !mesh_core::provenance::dead_letter_trusted(message, prefix);
        }
        self
    }
}

/// An event row as selected: id, routing key, source, node, time, causation id, schema,
/// received at, headers, body, publisher.
pub(crate) type EventTuple = (
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    Option<i64>,
    String,
    String,
    String,
    Option<String>,
);

pub(crate) fn event_record(row: EventTuple) -> Result<EventRecord, Error> {
    let (
        id,
        routing_key,
        source,
        node,
        time,
        causation_id,
        schema,
        received_at,
        headers,
        body,
        publisher,
    ) = row;
    Ok(EventRecord {
        id: parse_event_id(&id)?,
        routing_key,
        source,
        node,
        time: time_from_text(&time)?,
        causation_id,
        schema: schema.and_then(|s| u32::try_from(s).ok()),
        received_at: time_from_text(&received_at)?,
        headers: parse_json(&headers)?,
        body,
        publisher,
    })
}

/// A conflict row as selected: its id, then the event's columns as in [`EventTuple`].
pub(crate) type ConflictTuple = (
    String,
    String,
    String,
    String,
    String,
    String,
    Option<String>,
    Option<i64>,
    String,
    String,
    String,
    Option<String>,
);

pub(crate) fn conflict_record(row: ConflictTuple) -> Result<ConflictRecord, Error> {
    let (
        id,
        event_id,
        routing_key,
        source,
        node,
        time,
        causation_id,
        schema,
        received_at,
        headers,
        body,
        publisher,
    ) = row;
    Ok(ConflictRecord {
        id: Uuid::parse_str(&id)
            .map_err(|e| Error::corrupt(format!("conflict id `{id}`")).with_source(e))?,
        event: event_record((
            event_id,
            routing_key,
            source,
            node,
            time,
            causation_id,
            schema,
            received_at,
            headers,
            body,
            publisher,
        ))?,
    })
}

/// A dead-letter row as selected, in the column order of the table (more columns than sqlx
/// maps into a tuple, so a tuple struct read by position).
#[derive(sqlx::FromRow)]
pub(crate) struct DeadTuple(
    String,
    Option<String>,
    String,
    Option<String>,
    i64,
    Option<String>,
    Option<String>,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<i64>,
    String,
    Vec<u8>,
    Option<String>,
    i64,
    Option<String>,
    bool,
);

/// A dead letter's record, and the properties re-drive needs (message id, AMQP timestamp).
pub(crate) fn dead_record(
    row: DeadTuple,
) -> Result<(DeadLetterRecord, Option<String>, Option<i64>), Error> {
    let DeadTuple(
        id,
        event_id,
        routing_key,
        reason,
        attempts,
        last_error,
        queue,
        dead_at,
        received_at,
        content_type,
        message_id,
        amqp_timestamp,
        headers,
        body,
        redriven_at,
        redrive_count,
        user_id,
        untrusted,
    ) = row;
    let record = DeadLetterRecord {
        id: DeadLetterId(
            Uuid::parse_str(&id)
                .map_err(|e| Error::corrupt(format!("dead letter id `{id}`")).with_source(e))?,
        ),
        event_id: event_id.as_deref().map(parse_event_id).transpose()?,
        routing_key,
        reason: reason.as_deref().and_then(DeadReason::parse),
        attempts: u32::try_from(attempts).unwrap_or(0),
        last_error,
        queue,
        dead_at: time_from_text(&dead_at)?,
        received_at: time_from_text(&received_at)?,
        content_type,
        headers: parse_json(&headers)?,
        body: Bytes::from(body),
        redriven_at: redriven_at.as_deref().map(time_from_text).transpose()?,
        redrive_count: u32::try_from(redrive_count).unwrap_or(0),
        user_id,
        untrusted,
    };
    Ok((record, message_id, amqp_timestamp))
}

fn parse_event_id(text: &str) -> Result<EventId, Error> {
    text.parse()
        .map_err(|e| Error::corrupt(format!("event id `{text}`")).with_source(e))
}

fn parse_json(text: &str) -> Result<serde_json::Value, Error> {
    serde_json::from_str(text).map_err(|e| Error::corrupt("stored headers").with_source(e))
}

/// Now, as stored.
pub(crate) fn now_text() -> String {
    // Formatting the current time cannot fail before the year 10000.
    time_to_text(Timestamp::now()).unwrap_or_default()
}

#[cfg(test)]
mod hostile;
