//! The codec: the only place that knows header names.
//!
//! It maps an [`Envelope`] to a [`WireMessage`] and back (ADR 42's headers and properties),
//! and reads and writes mesh's own bookkeeping headers: the attempt counter of the retry
//! ladder, the dead-letter annotations, and the status of an RPC reply.

use bytes::Bytes;

use crate::envelope::{Envelope, EventId, SchemaVersion, Timestamp};
use crate::key::{KeyError, RoutingKey};
use crate::wire::{HeaderValue, Headers, Properties, WireMessage};

/// `x-event-id`: the event's unique id.
pub const EVENT_ID: &str = "x-event-id";
/// `x-source`: the emitter.
pub const SOURCE: &str = "x-source";
/// `x-node`: the node it was emitted from.
pub const NODE: &str = "x-node";
/// `x-time`: emit time, RFC 3339.
pub const TIME: &str = "x-time";
/// `x-causation-id`: what caused it.
pub const CAUSATION_ID: &str = "x-causation-id";
/// `x-schema`: the version of the body's shape.
pub const SCHEMA: &str = "x-schema";
/// `content-type` as a header, accepted from foreign publishers that do not set the property.
pub const CONTENT_TYPE_HEADER: &str = "content-type";
/// The only content type of an event body.
pub const CONTENT_TYPE_JSON: &str = "application/json";

/// `x-mesh-attempts`: how many times handlers already failed on this event (retry ladder).
pub const ATTEMPTS: &str = "x-mesh-attempts";
/// `x-mesh-dead-reason`: why the event was dead-lettered.
pub const DEAD_REASON: &str = "x-mesh-dead-reason";
/// `x-mesh-dead-attempts`: how many attempts were made.
pub const DEAD_ATTEMPTS: &str = "x-mesh-dead-attempts";
/// `x-mesh-dead-error`: the last error.
pub const DEAD_ERROR: &str = "x-mesh-dead-error";
/// `x-mesh-dead-queue`: the queue of the consumer that gave up.
pub const DEAD_QUEUE: &str = "x-mesh-dead-queue";
/// `x-mesh-dead-time`: when it was dead-lettered, RFC 3339.
pub const DEAD_TIME: &str = "x-mesh-dead-time";
/// `x-death`: the broker's own dead-letter history (delivery limit, rejection, expiry).
pub const BROKER_DEATH: &str = "x-death";

/// `x-mesh-status`: `ok` or `error` on an RPC reply.
pub const REPLY_STATUS: &str = "x-mesh-status";
/// `x-mesh-error-code`: the remote error's code.
pub const REPLY_ERROR_CODE: &str = "x-mesh-error-code";
/// `x-mesh-error-message`: the remote error's message.
pub const REPLY_ERROR_MESSAGE: &str = "x-mesh-error-message";
/// `x-mesh-tool`: the tool key a request was sent to.
pub const TOOL: &str = "x-mesh-tool";
/// `x-mesh-routing-key`: a message's own routing key while it travels under another one
/// (a retry copy through a delay queue, a re-driven dead letter sent straight to a queue:
/// the broker rewrites the key on both paths). A transport restores it on delivery.
pub const ROUTING_KEY: &str = "x-mesh-routing-key";

/// `traceparent`: the W3C trace context of the span that emitted or called (an extension of
/// ADR 42; optional, carried in `extra_headers` so every consumer passes it on).
pub const TRACEPARENT: &str = "traceparent";
/// `tracestate`: the W3C vendor-specific trace state that goes with `traceparent`.
pub const TRACESTATE: &str = "tracestate";
/// The W3C trace context headers, the only ones a trace propagator may write.
pub const TRACE_CONTEXT_HEADERS: [&str; 2] = [TRACEPARENT, TRACESTATE];

/// The header names ADR 42 defines; everything else lands in `extra_headers`.
const CONTRACT_HEADERS: [&str; 7] = [
    EVENT_ID,
    SOURCE,
    NODE,
    TIME,
    CAUSATION_ID,
    SCHEMA,
    CONTENT_TYPE_HEADER,
];

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
        /// The key received.
        key: String,
        /// What is wrong with it.
        #[source]
        source: KeyError,
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
        }
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
                problem: format!("expected a string, found {value:?}"),
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
    let id = envelope.id.to_string();
    headers.insert(EVENT_ID.to_owned(), id.clone().into());
    headers.insert(SOURCE.to_owned(), envelope.source.clone().into());
    headers.insert(NODE.to_owned(), envelope.node.clone().into());
    headers.insert(TIME.to_owned(), envelope.time.to_string().into());
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
        key: message.routing_key.clone(),
        source,
    })?;

    let id_text = required_text(headers, EVENT_ID)?;
    let id: EventId = id_text.parse().map_err(|e| DecodeError::Malformed {
        field: EVENT_ID,
        problem: format!("`{id_text}` is not a UUID ({e})"),
    })?;
    let source = required_text(headers, SOURCE)?.to_owned();
    let node = required_text(headers, NODE)?.to_owned();
    let time = match headers.get(TIME) {
        Some(HeaderValue::Timestamp(seconds)) => i64::try_from(*seconds)
            .ok()
            .and_then(Timestamp::from_unix_seconds)
            .ok_or_else(|| DecodeError::Malformed {
                field: TIME,
                problem: format!("timestamp {seconds} is out of range"),
            })?,
        _ => {
            let text = required_text(headers, TIME)?;
            Timestamp::parse(text).map_err(|e| DecodeError::Malformed {
                field: TIME,
                problem: format!("`{text}` is not RFC 3339 ({e})"),
            })?
        }
    };

    let content_type = match &message.properties.content_type {
        Some(content_type) => content_type.as_str(),
        None => text_header(headers, CONTENT_TYPE_HEADER)?.ok_or(DecodeError::Missing {
            field: "content-type",
        })?,
    };
    if !is_json(content_type) {
        return Err(DecodeError::ContentType {
            found: content_type.to_owned(),
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
                    problem: format!("expected a positive integer, found {value:?}"),
                })?;
            Some(SchemaVersion(version))
        }
    };

    // The body must be JSON; it is kept byte-exact, not re-serialized.
    serde_json::from_slice::<serde::de::IgnoredAny>(&message.body).map_err(DecodeError::Body)?;

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
}

impl DeadReason {
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
            _ => return None,
        })
    }
}

impl std::fmt::Display for DeadReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The annotations of a dead letter.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
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

/// Annotates a message (keeping its headers and body) as a dead letter.
pub fn mark_dead(message: &mut WireMessage, dead: &DeadLetter) {
    let headers = &mut message.properties.headers;
    headers.insert(DEAD_REASON.to_owned(), dead.reason.as_str().into());
    headers.insert(
        DEAD_ATTEMPTS.to_owned(),
        HeaderValue::UInt(u64::from(dead.attempts)),
    );
    if let Some(error) = &dead.last_error {
        headers.insert(DEAD_ERROR.to_owned(), error.clone().into());
    }
    headers.insert(DEAD_QUEUE.to_owned(), dead.queue.clone().into());
    headers.insert(DEAD_TIME.to_owned(), dead.time.to_string().into());
}

/// Reads the dead-letter annotations: mesh's own, or else the broker's `x-death` entry
/// (a message dead-lettered by the broker's delivery limit, a rejection or an expiry).
pub fn read_dead_letter(message: &WireMessage) -> Option<DeadLetter> {
    let headers = &message.properties.headers;
    if let Some(reason) = headers
        .get(DEAD_REASON)
        .and_then(HeaderValue::as_str)
        .and_then(DeadReason::parse)
    {
        return Some(DeadLetter {
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
    Some(DeadLetter {
        reason,
        attempts: headers
            .get("x-delivery-count")
            .and_then(HeaderValue::as_u64)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
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
    let id_text = required_text(headers, EVENT_ID)?;
    let id: EventId = id_text.parse().map_err(|e| DecodeError::Malformed {
        field: EVENT_ID,
        problem: format!("`{id_text}` is not a UUID ({e})"),
    })?;
    let time_text = required_text(headers, TIME)?;
    let time = Timestamp::parse(time_text).map_err(|e| DecodeError::Malformed {
        field: TIME,
        problem: format!("`{time_text}` is not RFC 3339 ({e})"),
    })?;
    serde_json::from_slice::<serde::de::IgnoredAny>(&message.body).map_err(DecodeError::Body)?;
    Ok(RequestMeta {
        id,
        source: required_text(headers, SOURCE)?.to_owned(),
        node: required_text(headers, NODE)?.to_owned(),
        time,
        causation_id: text_header(headers, CAUSATION_ID)?.map(str::to_owned),
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
            problem: format!("expected `ok` or `error`, found `{other}`"),
        }),
    }
}
