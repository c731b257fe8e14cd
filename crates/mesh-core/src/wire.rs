//! The message as a transport carries it: routing key, AMQP basic properties, headers, body.
//!
//! These are mesh's own types, shaped after AMQP 0-9-1 but owned here so that the contract,
//! the SDK and the in-memory transport never name an AMQP client's types. A transport maps
//! them to its client at its edge.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;

/// A header value, as an AMQP field table can carry it.
///
/// Integer widths are normalized (`Int` holds every signed width, `UInt` the unsigned
/// ones); a transport maps them back to the narrowest width that holds the value on
/// publish. Decimals arrive as `Float`.
#[derive(Debug, Clone, PartialEq)]
pub enum HeaderValue {
    /// A short or long string.
    Str(String),
    /// A boolean.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// An unsigned integer.
    UInt(u64),
    /// A float or a decimal.
    Float(f64),
    /// A byte array.
    Bytes(Vec<u8>),
    /// An AMQP timestamp (seconds since the epoch).
    Timestamp(u64),
    /// A field array.
    Array(Vec<HeaderValue>),
    /// A nested field table.
    Table(Headers),
    /// No value.
    Void,
}

impl HeaderValue {
    /// The value as text, when it is a string (or UTF-8 bytes, as some clients send them).
    pub fn as_str(&self) -> Option<&str> {
        match self {
            HeaderValue::Str(s) => Some(s),
            HeaderValue::Bytes(b) => std::str::from_utf8(b).ok(),
            _ => None,
        }
    }

    /// The value as an unsigned integer, when it is a non-negative integer or a decimal
    /// string of one.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            HeaderValue::UInt(n) => Some(*n),
            HeaderValue::Int(n) => u64::try_from(*n).ok(),
            HeaderValue::Str(s) => s.parse().ok(),
            _ => None,
        }
    }
}

impl From<&str> for HeaderValue {
    fn from(value: &str) -> Self {
        HeaderValue::Str(value.to_owned())
    }
}

impl From<String> for HeaderValue {
    fn from(value: String) -> Self {
        HeaderValue::Str(value)
    }
}

impl From<u64> for HeaderValue {
    fn from(value: u64) -> Self {
        HeaderValue::UInt(value)
    }
}

impl From<u32> for HeaderValue {
    fn from(value: u32) -> Self {
        HeaderValue::UInt(u64::from(value))
    }
}

impl From<i64> for HeaderValue {
    fn from(value: i64) -> Self {
        HeaderValue::Int(value)
    }
}

impl From<bool> for HeaderValue {
    fn from(value: bool) -> Self {
        HeaderValue::Bool(value)
    }
}

/// AMQP headers: a field table, ordered by name so encodings are deterministic.
pub type Headers = BTreeMap<String, HeaderValue>;

/// The AMQP basic properties mesh uses.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Properties {
    /// `content_type`.
    pub content_type: Option<String>,
    /// `delivery_mode` 2: written to disk by the broker.
    pub persistent: bool,
    /// `message_id`.
    pub message_id: Option<String>,
    /// `timestamp`, seconds since the epoch.
    pub timestamp: Option<u64>,
    /// `correlation_id` (request/reply).
    pub correlation_id: Option<String>,
    /// `reply_to` (request/reply).
    pub reply_to: Option<String>,
    /// `expiration`: the broker drops the message once it waited this long in a queue.
    pub expiration: Option<Duration>,
    /// `user-id`: the user that published it. RabbitMQ refuses a publish whose `user-id` is
    /// not the connection's user (`406 PRECONDITION_FAILED`), so on a delivery it is the
    /// broker-validated publisher, or absent. The RabbitMQ transport sets it on everything
    /// it publishes; see [`codec::validated_user`](crate::codec::validated_user).
    pub user_id: Option<String>,
    /// `headers`.
    pub headers: Headers,
}

/// A message as published or delivered.
#[derive(Debug, Clone, PartialEq)]
pub struct WireMessage {
    /// The routing key it was published with.
    pub routing_key: String,
    /// Its properties and headers.
    pub properties: Properties,
    /// The body, exactly as published.
    pub body: Bytes,
}

impl WireMessage {
    /// A message with default properties.
    pub fn new(routing_key: impl Into<String>, body: impl Into<Bytes>) -> WireMessage {
        WireMessage {
            routing_key: routing_key.into(),
            properties: Properties::default(),
            body: body.into(),
        }
    }

    /// A header by name.
    pub fn header(&self, name: &str) -> Option<&HeaderValue> {
        self.properties.headers.get(name)
    }

    /// The size a broker counts against its message size limit, roughly: body plus keys
    /// and headers. Used to bound caches in bytes.
    pub fn approximate_size(&self) -> usize {
        fn value_size(value: &HeaderValue) -> usize {
            match value {
                HeaderValue::Str(s) => s.len() + 5,
                HeaderValue::Bytes(b) => b.len() + 5,
                HeaderValue::Array(a) => a.iter().map(value_size).sum::<usize>() + 5,
                HeaderValue::Table(t) => t.iter().map(|(k, v)| k.len() + 1 + value_size(v)).sum(),
                _ => 9,
            }
        }
        let headers: usize = self
            .properties
            .headers
            .iter()
            .map(|(k, v)| k.len() + 1 + value_size(v))
            .sum();
        self.body.len() + self.routing_key.len() + headers + 64
    }
}
