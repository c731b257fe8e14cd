//! The codec: the only place that knows header names.
//!
//! It maps an [`Envelope`] to a [`WireMessage`] and back (the wire contract's headers and
//! properties), and reads and writes mesh's own bookkeeping headers: the attempt counter of
//! the retry ladder, the dead-letter annotations, and the status of an RPC reply. The names themselves,
//! and whose a header may be, are in `headers.rs`, re-exported here.

use bytes::Bytes;

use crate::envelope::{Envelope, EventId, SchemaVersion, TimeError, Timestamp};
use crate::key::{KeyError, Origin, RoutingKey};
use crate::wire::{HeaderValue, Headers, Properties, WireMessage};

mod headers;

pub use self::headers::*;

/// Why a message could not be read as an event. Each names the field at fault.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// A required header or property is absent.
    #[error("required field `{field}` is missing")]
    Missing {
        /// The header or property name.
        field: &'static str,
    },
    /// A header is present but its value is not what the contract says.
    #[error("field `{field}` is malformed: {problem}")]
    Malformed {
        /// The header or property name.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// The content type is not `application/json`.
    #[error("content type `{found}` is not `application/json`")]
    ContentType {
        /// The content type found.
        found: String,
    },
    /// The body is not a JSON document.
    #[error("body is not JSON")]
    Body(#[source] serde_json::Error),
    /// The routing key breaks the contract.
    #[error("routing key `{key}` is invalid")]
    Key {
        /// The key received (bounded, as every quoted value).
        key: String,
        /// What is wrong with it.
        #[source]
        source: KeyError,
    },
    /// A `module.<owner>.…` or `node.<owner>.…` event whose `x-source` is not its owner:
    /// only the owner may emit under its name, so the event is a forgery (or a bug).
    #[error("`x-source` `{claimed}` is not the owner of `{key}`")]
    ForgedSource {
        /// The routing key.
        key: String,
        /// The `x-source` found (bounded, as every quoted value).
        claimed: String,
    },
    /// The broker-validated user that published the event is not the user owning its key
    /// (identity enforced, [`check_user`]): another module's credentials, or a client that
    /// set no `user-id`.
    #[error("published by {}, not by `{owner}`, the owner of `{key}`", .user.as_deref().map_or_else(|| "no validated user".to_owned(), |u| format!("`{u}`")))]
    ForgedUser {
        /// The routing key.
        key: String,
        /// The validated user found, if any (bounded).
        user: Option<String>,
        /// The user owning the key.
        owner: String,
    },
}

impl DecodeError {
    /// The field at fault (`body` and `routing-key` for those).
    pub fn field(&self) -> &'static str {
        match self {
            DecodeError::Missing { field } | DecodeError::Malformed { field, .. } => field,
            DecodeError::ContentType { .. } => "content-type",
            DecodeError::Body(_) => "body",
            DecodeError::Key { .. } => "routing-key",
            DecodeError::ForgedSource { .. } => SOURCE,
            DecodeError::ForgedUser { .. } => "user-id",
        }
    }

    /// The reason a consumer dead-letters the message with: `forged-source` for a forged
    /// source, `undecodable` for everything else.
    pub fn dead_reason(&self) -> DeadReason {
        match self {
            DecodeError::ForgedSource { .. } | DecodeError::ForgedUser { .. } => {
                DeadReason::ForgedSource
            }
            _ => DeadReason::Undecodable,
        }
    }
}

/// The most characters of a wire value an error message quotes: a dead letter carries the
/// message in `x-mesh-dead-error`, so a huge header must not make a huge copy.
pub const MAX_QUOTED_CHARS: usize = 64;

/// `text` as an error message quotes it: escaped ([`crate::text::escape`]: no control or
/// bidi character, so an error that quotes a wire value is safe wherever it is printed or
/// logged) and cut to [`MAX_QUOTED_CHARS`] characters of that escaped form (marked with `…`
/// and the original's length when cut; an escape is never cut in two).
pub fn quote(text: &str) -> String {
    let mut out = String::new();
    let mut width = 0;
    for c in text.chars() {
        let mut buffer = [0; 4];
        let piece = crate::text::escape(c.encode_utf8(&mut buffer));
        width += piece.chars().count();
        if width > MAX_QUOTED_CHARS {
            out.push_str(&format!("… ({} bytes)", text.len()));
            return out;
        }
        out.push_str(&piece);
    }
    out
}

/// `text`, cut to at most `max` bytes on a character boundary (marked with `…` and its
/// length when cut, which the bound includes).
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mark = format!("… ({} bytes)", text.len());
    let mut end = max.saturating_sub(mark.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{mark}", &text[..end])
}

/// What a header value is, for an error message: its type and a bounded preview.
fn describe(value: &HeaderValue) -> String {
    match value {
        HeaderValue::Str(s) => format!("the string `{}`", quote(s)),
        HeaderValue::Bool(b) => format!("the boolean {b}"),
        HeaderValue::Int(n) => format!("the integer {n}"),
        HeaderValue::UInt(n) => format!("the integer {n}"),
        HeaderValue::Float(x) => format!("the float {x}"),
        HeaderValue::Bytes(b) => match std::str::from_utf8(b) {
            Ok(text) => format!("the bytes `{}`", quote(text)),
            Err(_) => format!("{} bytes that are not UTF-8", b.len()),
        },
        HeaderValue::Timestamp(t) => format!("the timestamp {t}"),
        HeaderValue::Array(items) => format!("an array of {} values", items.len()),
        HeaderValue::Table(table) => format!("a table of {} fields", table.len()),
        HeaderValue::Void => "void".to_owned(),
    }
}

/// Reads a time header: RFC 3339 text, or an AMQP timestamp; either is range-checked here,
/// once (see [`Timestamp`]).
fn required_time(headers: &Headers, field: &'static str) -> Result<Timestamp, DecodeError> {
    if let Some(HeaderValue::Timestamp(seconds)) = headers.get(field) {
        return i64::try_from(*seconds)
            .ok()
            .and_then(Timestamp::from_unix_seconds)
            .ok_or_else(|| DecodeError::Malformed {
                field,
                problem: format!(
                    "timestamp {seconds} is out of range: its UTC form must be within \
                     0001-01-01 and 9999-12-31"
                ),
            });
    }
    let text = required_text(headers, field)?;
    Timestamp::parse(text).map_err(|e| DecodeError::Malformed {
        field,
        problem: match e {
            TimeError::OutOfRange => format!("`{}` is {e}", quote(text)),
            _ => format!("`{}` is not RFC 3339", quote(text)),
        },
    })
}

/// Reads an event id header.
fn required_id(headers: &Headers, field: &'static str) -> Result<EventId, DecodeError> {
    let text = required_text(headers, field)?;
    text.parse().map_err(|e| DecodeError::Malformed {
        field,
        problem: format!(
            "`{}` is not a UUID ({})",
            quote(text),
            crate::text::EscapedDisplay(&e)
        ),
    })
}

/// Whether `source` may emit `key`: the owner word of a `module` or `node` key must be its
/// `x-source`. `mesh.<context>.…` keys are the runtime's, emitted by components whose
/// source is not the context's name (the CLI, the audit logger), so they are not checked.
pub fn source_owns(key: &RoutingKey, source: &str) -> bool {
    match key.origin() {
        Origin::Module | Origin::Node => key.name() == source,
        _ => true,
    }
}

/// The broker-validated user of a delivered message: its `x-mesh-user` when it is a copy the
/// runtime made on the original publisher's behalf (a header believed only where mesh can
/// have set it, see [`remove_unearned_mesh_headers`], which transports apply first), else
/// its `user-id` property, which RabbitMQ refuses unless it names the publishing
/// connection's user. `None` when the message carries neither (a client that set no
/// `user-id`), or a non-text `x-mesh-user`.
pub fn validated_user(message: &WireMessage) -> Option<&str> {
    match message.properties.headers.get(USER) {
        Some(value) => value.as_str(),
        None => message.properties.user_id.as_deref(),
    }
}

/// When a delivered event was replayed from the audit store ([`REPLAYED`]), from the headers
/// a transport kept ([`remove_unearned_mesh_headers`] removed a forged one); `None` for a
/// live event, and for a value that is not an RFC 3339 time.
pub fn replayed_at(headers: &Headers) -> Option<Timestamp> {
    headers
        .get(REPLAYED)
        .and_then(HeaderValue::as_str)
        .and_then(|text| Timestamp::parse(text).ok())
}

/// Prepares a copy the runtime publishes on the original publisher's behalf (a retry copy, a
/// dead letter): the original's validated user moves to `x-mesh-user`, and `user-id` is
/// cleared for the transport to stamp its own (a broker refuses a `user-id` other than the
/// publishing connection's). A copy of a message with no validated user carries no
/// `x-mesh-user`, so it stays one.
pub fn hand_over_user(copy: &mut WireMessage) {
    let user = validated_user(copy).map(str::to_owned);
    copy.properties.user_id = None;
    match user {
        Some(user) => {
            copy.properties
                .headers
                .insert(USER.to_owned(), HeaderValue::Str(user));
        }
        None => {
            copy.properties.headers.remove(USER);
        }
    }
}

/// With identity enforced: whether the event under `key` was published by the user owning
/// it, [`naming::owner_user`](crate::naming::owner_user) with `user_prefix`. Otherwise a
/// [`DecodeError::ForgedUser`] (dead reason `forged-source`).
pub fn check_user(
    key: &RoutingKey,
    message: &WireMessage,
    user_prefix: &str,
) -> Result<(), DecodeError> {
    let user = validated_user(message);
    let owner = crate::key::Name::parse(key.name())
        .map(|name| crate::naming::owner_user(user_prefix, key.origin(), &name))
        .map_err(|_| DecodeError::ForgedUser {
            key: quote(key.as_str()),
            user: user.map(quote),
            owner: String::new(),
        })?;
    if user == Some(owner.as_str()) {
        Ok(())
    } else {
        Err(DecodeError::ForgedUser {
            key: quote(key.as_str()),
            user: user.map(quote),
            owner: quote(&owner),
        })
    }
}

fn text_header<'a>(
    headers: &'a Headers,
    field: &'static str,
) -> Result<Option<&'a str>, DecodeError> {
    match headers.get(field) {
        None | Some(HeaderValue::Void) => Ok(None),
        Some(value) => value
            .as_str()
            .map(Some)
            .ok_or_else(|| DecodeError::Malformed {
                field,
                problem: format!("expected a UTF-8 string, found {}", describe(value)),
            }),
    }
}

fn required_text<'a>(headers: &'a Headers, field: &'static str) -> Result<&'a str, DecodeError> {
    match text_header(headers, field)? {
        Some(text) if !text.is_empty() => Ok(text),
        Some(_) => Err(DecodeError::Malformed {
            field,
            problem: "it is empty".to_owned(),
        }),
        None => Err(DecodeError::Missing { field }),
    }
}

/// Whether a content type names JSON, allowing parameters such as `; charset=utf-8`.
fn is_json(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(CONTENT_TYPE_JSON))
}

/// Encodes an event as a persistent message with the contract's headers and properties.
pub fn encode(envelope: &Envelope) -> WireMessage {
    let mut headers = envelope.extra_headers.clone();
    // Contract headers win over same-named extras: a forwarder cannot be made to lie.
    for name in CONTRACT_HEADERS {
        headers.remove(name);
    }
    // The id is formatted once: it is the header and the message id.
    let id = envelope.id.text();
    headers.insert(EVENT_ID.to_owned(), id.clone().into());
    headers.insert(SOURCE.to_owned(), envelope.source.clone().into());
    headers.insert(NODE.to_owned(), envelope.node.clone().into());
    headers.insert(TIME.to_owned(), envelope.time.text().into());
    if let Some(causation) = &envelope.causation_id {
        headers.insert(CAUSATION_ID.to_owned(), causation.clone().into());
    }
    if let Some(schema) = envelope.schema {
        headers.insert(SCHEMA.to_owned(), HeaderValue::UInt(u64::from(schema.0)));
    }
    WireMessage {
        routing_key: envelope.key.as_str().to_owned(),
        properties: Properties {
            content_type: Some(CONTENT_TYPE_JSON.to_owned()),
            persistent: true,
            message_id: Some(id),
            timestamp: u64::try_from(envelope.time.unix_seconds()).ok(),
            headers,
            ..Properties::default()
        },
        body: envelope.body.clone(),
    }
}

/// Decodes a delivered message as an event, checking every rule of the contract.
///
/// Unknown headers are kept in `extra_headers` (mesh's own bookkeeping headers included, so
/// a forwarder passes everything on).
pub fn decode(message: &WireMessage) -> Result<Envelope, DecodeError> {
    let headers = &message.properties.headers;
    let key = RoutingKey::parse(&message.routing_key).map_err(|source| DecodeError::Key {
        key: quote(&message.routing_key),
        source,
    })?;

    let id = required_id(headers, EVENT_ID)?;
    let source = required_text(headers, SOURCE)?.to_owned();
    let node = required_text(headers, NODE)?.to_owned();
    let time = required_time(headers, TIME)?;

    let content_type = match &message.properties.content_type {
        Some(content_type) => content_type.as_str(),
        None => text_header(headers, CONTENT_TYPE_HEADER)?.ok_or(DecodeError::Missing {
            field: "content-type",
        })?,
    };
    if !is_json(content_type) {
        return Err(DecodeError::ContentType {
            found: quote(content_type),
        });
    }

    let causation_id = text_header(headers, CAUSATION_ID)?.map(str::to_owned);
    let schema = match headers.get(SCHEMA) {
        None | Some(HeaderValue::Void) => None,
        Some(value) => {
            let version = value
                .as_u64()
                .and_then(|v| u32::try_from(v).ok())
                .filter(|v| *v > 0)
                .ok_or_else(|| DecodeError::Malformed {
                    field: SCHEMA,
                    problem: format!(
                        "expected an integer from 1 to {}, found {}",
                        u32::MAX,
                        describe(value)
                    ),
                })?;
            Some(SchemaVersion(version))
        }
    };

    // The body must be JSON (which is UTF-8); it is kept byte-exact, not re-serialized.
    serde_json::from_slice::<serde::de::IgnoredAny>(&message.body).map_err(DecodeError::Body)?;

    // Last: a forgery is a well-formed message, told apart only by who claims to send it.
    if !source_owns(&key, &source) {
        return Err(DecodeError::ForgedSource {
            key: quote(key.as_str()),
            claimed: quote(&source),
        });
    }

    let extra_headers = headers
        .iter()
        .filter(|(name, _)| !CONTRACT_HEADERS.contains(&name.as_str()))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();

    Ok(Envelope {
        id,
        key,
        source,
        node,
        time,
        causation_id,
        schema,
        extra_headers,
        body: message.body.clone(),
    })
}

/// The event id of a message, when it carries a well-formed one (used to keep the id of
/// messages that fail to decode for other reasons).
pub fn event_id(message: &WireMessage) -> Option<EventId> {
    message
        .header(EVENT_ID)
        .and_then(HeaderValue::as_str)
        .and_then(|text| text.parse().ok())
}

/// How many attempts handlers already failed on this message (0 on first delivery).
///
/// A counter that is absent, of another type, negative or beyond `u32` reads as 0: the
/// worst a bad counter does is buy the event more attempts, never fewer.
pub fn attempts(message: &WireMessage) -> u32 {
    message
        .header(ATTEMPTS)
        .and_then(HeaderValue::as_u64)
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0)
}

/// Sets the attempt counter, for the copy that goes through the retry ladder.
pub fn set_attempts(message: &mut WireMessage, attempts: u32) {
    message
        .properties
        .headers
        .insert(ATTEMPTS.to_owned(), HeaderValue::UInt(u64::from(attempts)));
}

/// Why an event was set aside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DeadReason {
    /// Handlers failed with retryable errors as many times as the policy allows.
    MaxAttempts,
    /// A handler returned a permanent error.
    Permanent,
    /// The message breaks the contract (a header missing, a non-JSON body, a bad key).
    Undecodable,
    /// The consumer does not read the event's schema version.
    UnreadSchema,
    /// The broker's delivery limit (the message crashed its consumer every time).
    DeliveryLimit,
    /// The broker dead-lettered a rejected message.
    Rejected,
    /// The broker dead-lettered an expired message.
    Expired,
    /// A `module` or `node` event whose `x-source` is not the owner of its key
    /// ([`DecodeError::ForgedSource`]).
    ForgedSource,
    /// The body does not match the JSON Schema of the handler that reads it (checked only
    /// by a consumer that validates schemas).
    SchemaInvalid,
    /// A delivery on a consumer's queue that came by a path mesh does not send events by
    /// (not through `mesh.events`, nor through `mesh.retry` or the default exchange under
    /// that queue's own name): an exchange-to-exchange binding, a foreign publisher. Its
    /// `x-mesh-*` headers were dropped before it was dead-lettered.
    ForeignPath,
}

impl DeadReason {
    /// Every reason, in the order they are documented (a command line lists them from it).
    pub const ALL: [DeadReason; 10] = [
        DeadReason::MaxAttempts,
        DeadReason::Permanent,
        DeadReason::Undecodable,
        DeadReason::UnreadSchema,
        DeadReason::DeliveryLimit,
        DeadReason::Rejected,
        DeadReason::Expired,
        DeadReason::ForgedSource,
        DeadReason::SchemaInvalid,
        DeadReason::ForeignPath,
    ];

    /// The reason as written in `x-mesh-dead-reason`.
    pub const fn as_str(self) -> &'static str {
        match self {
            DeadReason::MaxAttempts => "max-attempts",
            DeadReason::Permanent => "permanent",
            DeadReason::Undecodable => "undecodable",
            DeadReason::UnreadSchema => "unread-schema",
            DeadReason::DeliveryLimit => "delivery-limit",
            DeadReason::Rejected => "rejected",
            DeadReason::Expired => "expired",
            DeadReason::ForgedSource => "forged-source",
            DeadReason::SchemaInvalid => "schema-invalid",
            DeadReason::ForeignPath => "foreign-path",
        }
    }

    /// Parses the header or the broker's `x-death` reason.
    pub fn parse(text: &str) -> Option<DeadReason> {
        Some(match text {
            "max-attempts" => DeadReason::MaxAttempts,
            "permanent" => DeadReason::Permanent,
            "undecodable" => DeadReason::Undecodable,
            "unread-schema" => DeadReason::UnreadSchema,
            "delivery-limit" | "delivery_limit" => DeadReason::DeliveryLimit,
            "rejected" => DeadReason::Rejected,
            "expired" => DeadReason::Expired,
            "forged-source" => DeadReason::ForgedSource,
            "schema-invalid" => DeadReason::SchemaInvalid,
            "foreign-path" => DeadReason::ForeignPath,
            _ => return None,
        })
    }
}

impl std::fmt::Display for DeadReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The note a dead letter carries (its `x-mesh-dead-*` annotations): why it was set aside,
/// after how many attempts, by which queue, and when.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetterNote {
    /// Why it was set aside.
    pub reason: DeadReason,
    /// How many times handlers were called on it.
    pub attempts: u32,
    /// The last error, if a handler or the decoder reported one.
    pub last_error: Option<String>,
    /// The queue of the consumer that gave up.
    pub queue: String,
    /// When it was set aside.
    pub time: Timestamp,
}

/// Annotates a message (keeping its headers and body) as a dead letter. The original's
/// validated user moves to `x-mesh-user` ([`hand_over_user`]): the dead letter is published
/// by whoever gave up, on the original publisher's behalf.
pub fn mark_dead(message: &mut WireMessage, dead: &DeadLetterNote) {
    hand_over_user(message);
    let headers = &mut message.properties.headers;
    headers.insert(DEAD_REASON.to_owned(), dead.reason.as_str().into());
    headers.insert(
        DEAD_ATTEMPTS.to_owned(),
        HeaderValue::UInt(u64::from(dead.attempts)),
    );
    if let Some(error) = &dead.last_error {
        headers.insert(
            DEAD_ERROR.to_owned(),
            cut(error, MAX_DEAD_ERROR_BYTES).into(),
        );
    }
    headers.insert(
        DEAD_QUEUE.to_owned(),
        cut(&dead.queue, MAX_SHORT_VALUE_BYTES).into(),
    );
    headers.insert(DEAD_TIME.to_owned(), dead.time.to_string().into());
}

/// The most bytes of a handler's error a dead letter carries in `x-mesh-dead-error`: a
/// handler's error (and its cause chain) can be any size, a header cannot.
pub const MAX_DEAD_ERROR_BYTES: usize = 4096;

/// The most bytes of a value a trimmed copy keeps (see [`trim_headers`]).
pub const MAX_SHORT_VALUE_BYTES: usize = 255;

/// The most bytes of `x-mesh-dead-error` a trimmed copy keeps.
const TRIMMED_ERROR_BYTES: usize = 512;

/// `x-mesh-trimmed`: on a copy mesh had to trim to send it (see [`trim_headers`]), how many
/// headers it dropped or cut.
pub const TRIMMED: &str = "x-mesh-trimmed";

/// Trims a copy mesh republishes (a retry copy, a dead letter) whose headers no longer fit
/// in one frame of the connection (the original fitted; mesh's annotations did not): keeps
/// the contract headers and mesh's own, string values cut to [`MAX_SHORT_VALUE_BYTES`]
/// (`x-mesh-dead-error` to 512 bytes) and other values of theirs dropped; drops every other
/// header (the broker's `x-death` too), and records how many headers it dropped or cut in
/// [`TRIMMED`]. What is left is a few kilobytes at most, under AMQP's smallest frame size,
/// so the copy is never lost for its size. Returns that count.
pub fn trim_headers(message: &mut WireMessage) -> usize {
    let headers = std::mem::take(&mut message.properties.headers);
    let mut trimmed = 0usize;
    for (name, value) in headers {
        let kept =
            CONTRACT_HEADERS.contains(&name.as_str()) || (is_mesh_header(&name) && name != TRIMMED);
        if !kept {
            trimmed += 1;
            continue;
        }
        let max = if name == DEAD_ERROR {
            TRIMMED_ERROR_BYTES
        } else {
            MAX_SHORT_VALUE_BYTES
        };
        let value = match value {
            HeaderValue::Str(text) if text.len() > max => {
                trimmed += 1;
                HeaderValue::Str(cut(&text, max))
            }
            HeaderValue::Str(_)
            | HeaderValue::Bool(_)
            | HeaderValue::Int(_)
            | HeaderValue::UInt(_)
            | HeaderValue::Float(_)
            | HeaderValue::Timestamp(_)
            | HeaderValue::Void => value,
            HeaderValue::Bytes(_) | HeaderValue::Array(_) | HeaderValue::Table(_) => {
                trimmed += 1;
                continue;
            }
        };
        message.properties.headers.insert(name, value);
    }
    message.properties.headers.insert(
        TRIMMED.to_owned(),
        HeaderValue::UInt(u64::try_from(trimmed).unwrap_or(u64::MAX)),
    );
    trimmed
}

/// Reads the dead-letter annotations: mesh's own, or else the broker's `x-death` entry
/// (a message dead-lettered by the broker's delivery limit, a rejection or an expiry).
///
/// A dead letter is kept whatever it carries, so this never refuses one: `None` when no
/// reason mesh or the broker writes is found; within annotations, a value of the wrong
/// type or out of range reads as its default (attempts 0, no error, no queue) and a time
/// that is not a valid, in-range time (see [`Timestamp`]) as now. Every time returned is in
/// range.
///
/// A broker `delivery-limit` death reads as attempts 0 (unknown) here: the dead-lettered copy
/// carries no count of the deliveries it had (see [`read_dead_letter_with_limit`]).
pub fn read_dead_letter(message: &WireMessage) -> Option<DeadLetterNote> {
    read_dead_letter_with_limit(message, None)
}

/// [`read_dead_letter`], with a broker `delivery-limit` death's attempts derived from the
/// `x-delivery-limit` `L` its queue was declared with: RabbitMQ 3.10 dead-letters a message
/// when it is returned after its `L + 1`-th delivery, so it had exactly `L + 1`.
///
/// The dead-lettered copy itself cannot tell: it carries no `x-delivery-count` of the queue
/// it died in (a quorum dead-letter queue adds its own, 0 at the first delivery from there),
/// and `x-death`'s `count` is how often it was dead-lettered from that queue (1), not how
/// often it was delivered. `delivery_limit` is `None` when the queue's limit is unknown:
/// attempts then read 0.
pub fn read_dead_letter_with_limit(
    message: &WireMessage,
    delivery_limit: Option<u32>,
) -> Option<DeadLetterNote> {
    let headers = &message.properties.headers;
    if let Some(reason) = headers
        .get(DEAD_REASON)
        .and_then(HeaderValue::as_str)
        .and_then(DeadReason::parse)
    {
        return Some(DeadLetterNote {
            reason,
            attempts: headers
                .get(DEAD_ATTEMPTS)
                .and_then(HeaderValue::as_u64)
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
            last_error: headers
                .get(DEAD_ERROR)
                .and_then(HeaderValue::as_str)
                .map(str::to_owned),
            queue: headers
                .get(DEAD_QUEUE)
                .and_then(HeaderValue::as_str)
                .unwrap_or_default()
                .to_owned(),
            time: headers
                .get(DEAD_TIME)
                .and_then(HeaderValue::as_str)
                .and_then(|t| Timestamp::parse(t).ok())
                .unwrap_or_else(Timestamp::now),
        });
    }
    // The broker puts its newest death first.
    let HeaderValue::Array(deaths) = headers.get(BROKER_DEATH)? else {
        return None;
    };
    let HeaderValue::Table(death) = deaths.first()? else {
        return None;
    };
    let reason = death
        .get("reason")
        .and_then(HeaderValue::as_str)
        .and_then(DeadReason::parse)?;
    let time = match death.get("time") {
        Some(HeaderValue::Timestamp(seconds)) => i64::try_from(*seconds)
            .ok()
            .and_then(Timestamp::from_unix_seconds),
        _ => None,
    };
    let attempts = match (reason, delivery_limit) {
        (DeadReason::DeliveryLimit, Some(limit)) => limit.saturating_add(1),
        _ => 0,
    };
    Some(DeadLetterNote {
        reason,
        attempts,
        last_error: None,
        queue: death
            .get("queue")
            .and_then(HeaderValue::as_str)
            .unwrap_or_default()
            .to_owned(),
        time: time.unwrap_or_else(Timestamp::now),
    })
}

/// Metadata of an RPC request: the event-style provenance of a call.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestMeta {
    /// A unique id of the call (also its correlation id).
    pub id: EventId,
    /// The caller: module, context or node name.
    pub source: String,
    /// The caller's node.
    pub node: String,
    /// When the call was made.
    pub time: Timestamp,
    /// What caused the call.
    pub causation_id: Option<String>,
    /// The caller's broker-validated user: the request's `user-id`, which RabbitMQ checks
    /// against the publishing connection's user (`None` when the request carries none, and
    /// on a caller's side, where it is never sent: the transport stamps its own).
    pub user: Option<String>,
}

/// Whether the validated `user` of a request may claim `source` as its caller: `user` is
/// one of the users the access plan gives the identity named `source` ([`owner_user`] with
/// `user_prefix`, as a module, a runtime context or a node). `None` never may.
///
/// [`owner_user`]: crate::naming::owner_user
pub fn caller_is(source: &str, user: Option<&str>, user_prefix: &str) -> bool {
    let (Some(user), Ok(name)) = (user, crate::key::Name::parse(source)) else {
        return false;
    };
    [Origin::Module, Origin::Mesh, Origin::Node]
        .into_iter()
        .any(|origin| crate::naming::owner_user(user_prefix, origin, &name) == user)
}

/// Encodes a request to a tool. The transport sets `reply_to`, `correlation_id` and
/// `expiration`.
pub fn encode_request(tool: &crate::key::ToolKey, meta: &RequestMeta, body: Bytes) -> WireMessage {
    let mut headers = Headers::new();
    headers.insert(EVENT_ID.to_owned(), meta.id.to_string().into());
    headers.insert(SOURCE.to_owned(), meta.source.clone().into());
    headers.insert(NODE.to_owned(), meta.node.clone().into());
    headers.insert(TIME.to_owned(), meta.time.to_string().into());
    headers.insert(TOOL.to_owned(), tool.as_str().into());
    if let Some(causation) = &meta.causation_id {
        headers.insert(CAUSATION_ID.to_owned(), causation.clone().into());
    }
    WireMessage {
        routing_key: tool.as_str().to_owned(),
        properties: Properties {
            content_type: Some(CONTENT_TYPE_JSON.to_owned()),
            persistent: false,
            message_id: Some(meta.id.to_string()),
            timestamp: u64::try_from(meta.time.unix_seconds()).ok(),
            headers,
            ..Properties::default()
        },
        body,
    }
}

/// Decodes a request's metadata and checks its body is JSON.
pub fn decode_request(message: &WireMessage) -> Result<RequestMeta, DecodeError> {
    let headers = &message.properties.headers;
    let id = required_id(headers, EVENT_ID)?;
    let time = required_time(headers, TIME)?;
    serde_json::from_slice::<serde::de::IgnoredAny>(&message.body).map_err(DecodeError::Body)?;
    Ok(RequestMeta {
        id,
        source: required_text(headers, SOURCE)?.to_owned(),
        node: required_text(headers, NODE)?.to_owned(),
        time,
        causation_id: text_header(headers, CAUSATION_ID)?.map(str::to_owned),
        user: message.properties.user_id.clone(),
    })
}

/// An error a tool returned, carried back to the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteError {
    /// A stable, machine-readable code (`not-found`, `invalid`, …).
    pub code: String,
    /// A human-readable message.
    pub message: String,
}

impl RemoteError {
    /// The code a server answers with when a request's body does not fit the tool's
    /// request type.
    pub const INVALID_REQUEST: &'static str = "invalid-request";
    /// The code a server answers with when its handler panicked or its reply could not be
    /// serialized.
    pub const INTERNAL: &'static str = "internal";
    /// The code a server enforcing identity answers with when a request's `x-source` is
    /// not its validated user's identity ([`caller_is`]); the tool never sees it.
    pub const FORGED_SOURCE: &'static str = "forged-source";
    /// The code a server answers with when a timeout layer around its tool gave up.
    pub const TIMEOUT: &'static str = "timeout";
    /// The code a server answers with when a layer around its tool refused the request
    /// before the tool ran (it shed the load, or was not ready).
    pub const OVERLOADED: &'static str = "overloaded";
    /// The code a server validating schemas answers with when a request's body does not
    /// match the JSON Schema of the tool's request (its first violation, paths only, as the
    /// message); the tool never sees it.
    pub const SCHEMA_INVALID: &'static str = "schema-invalid";

    /// A remote error with code `code` and message `message`.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> RemoteError {
        RemoteError {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for RemoteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for RemoteError {}

/// Encodes a reply: a JSON payload on success, or a remote error with an empty JSON body.
pub fn encode_reply(result: &Result<Bytes, RemoteError>) -> WireMessage {
    let mut headers = Headers::new();
    let body = match result {
        Ok(body) => {
            headers.insert(REPLY_STATUS.to_owned(), "ok".into());
            body.clone()
        }
        Err(error) => {
            headers.insert(REPLY_STATUS.to_owned(), "error".into());
            headers.insert(REPLY_ERROR_CODE.to_owned(), error.code.clone().into());
            headers.insert(REPLY_ERROR_MESSAGE.to_owned(), error.message.clone().into());
            Bytes::from_static(b"null")
        }
    };
    WireMessage {
        routing_key: String::new(),
        properties: Properties {
            content_type: Some(CONTENT_TYPE_JSON.to_owned()),
            headers,
            ..Properties::default()
        },
        body,
    }
}

/// Decodes a reply into the tool's payload or its remote error.
pub fn decode_reply(message: &WireMessage) -> Result<Result<Bytes, RemoteError>, DecodeError> {
    let headers = &message.properties.headers;
    match required_text(headers, REPLY_STATUS)? {
        "ok" => {
            serde_json::from_slice::<serde::de::IgnoredAny>(&message.body)
                .map_err(DecodeError::Body)?;
            Ok(Ok(message.body.clone()))
        }
        "error" => Ok(Err(RemoteError {
            code: required_text(headers, REPLY_ERROR_CODE)?.to_owned(),
            message: text_header(headers, REPLY_ERROR_MESSAGE)?
                .unwrap_or_default()
                .to_owned(),
        })),
        other => Err(DecodeError::Malformed {
            field: REPLY_STATUS,
            problem: format!("expected `ok` or `error`, found `{}`", quote(other)),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_dead_reasons_are_listed_once_and_parse_back() {
        // An exhaustive match: a new reason does not compile until it has a place in ALL.
        let index = |reason: DeadReason| match reason {
            DeadReason::MaxAttempts => 0,
            DeadReason::Permanent => 1,
            DeadReason::Undecodable => 2,
            DeadReason::UnreadSchema => 3,
            DeadReason::DeliveryLimit => 4,
            DeadReason::Rejected => 5,
            DeadReason::Expired => 6,
            DeadReason::ForgedSource => 7,
            DeadReason::SchemaInvalid => 8,
            DeadReason::ForeignPath => 9,
        };
        for (i, reason) in DeadReason::ALL.into_iter().enumerate() {
            assert_eq!(index(reason), i);
            assert_eq!(DeadReason::parse(reason.as_str()), Some(reason));
        }
    }

    #[test]
    fn quote_escapes_and_bounds_what_it_quotes() {
        assert_eq!(quote("module.a.b"), "module.a.b");
        assert_eq!(
            quote("id\r\nforged\u{1b}[2J\u{202e}\u{9b}"),
            "id\\r\\nforged\\u{1b}[2J\\u{202e}\\u{9b}"
        );
        let long = "x".repeat(100);
        assert_eq!(quote(&long), format!("{}… (100 bytes)", "x".repeat(64)));
        // Escapes count in the bound and are never cut in two.
        let hostile = "\u{202e}".repeat(100);
        let quoted = quote(&hostile);
        assert_eq!(
            quoted,
            format!("{}… (300 bytes)", "\\u{202e}".repeat(64 / 8))
        );
    }

    #[test]
    fn cut_keeps_short_text_and_bounds_long_text_on_a_char_boundary() {
        assert_eq!(cut("short", 10), "short");
        let long = "é".repeat(1000);
        let bounded = cut(&long, 100);
        assert!(bounded.len() <= 100, "{}", bounded.len());
        assert!(bounded.ends_with("… (2000 bytes)"), "{bounded}");
        assert!(cut(&long, 0).ends_with("(2000 bytes)"));
    }

    #[test]
    fn a_dead_letter_quotes_a_bounded_error() {
        let mut message = WireMessage::new("module.a.b", Bytes::new());
        mark_dead(
            &mut message,
            &DeadLetterNote {
                reason: DeadReason::Permanent,
                attempts: 1,
                last_error: Some("x".repeat(1 << 20)),
                queue: "q".repeat(1000),
                time: Timestamp::now(),
            },
        );
        let read = read_dead_letter(&message).unwrap();
        assert!(read.last_error.unwrap().len() <= MAX_DEAD_ERROR_BYTES);
        assert!(read.queue.len() <= MAX_SHORT_VALUE_BYTES);
    }
}
