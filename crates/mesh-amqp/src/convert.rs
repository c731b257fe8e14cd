//! The edge between mesh's wire types and the client library's: headers, properties and the
//! limits of AMQP short strings.
//!
//! This module is the only one that converts between `mesh_core::wire` and `amqprs` values.
//! The client library panics on a short string longer than 255 bytes, so everything that
//! becomes one is checked here first and refused with an error instead.

use std::time::Duration;

use amqprs::{BasicProperties, FieldTable, FieldValue, ShortStr, DELIVERY_MODE_PERSISTENT};
use mesh_core::codec::{
    CAUSATION_ID, CONTENT_TYPE_JSON, CONTRACT_HEADERS, EVENT_ID, NODE, SCHEMA, SOURCE, TIME,
};
use mesh_core::{
    Envelope, HeaderValue, Headers, Properties, TransportError, TransportErrorKind, WireMessage,
};

/// The longest AMQP short string (names, routing keys, most properties).
pub(crate) const MAX_SHORT_STR: usize = 255;

/// How deep nested tables and arrays may go, both ways. Deeper values from the wire become
/// [`HeaderValue::Void`] rather than risk the stack; deeper values to the wire are refused.
const MAX_DEPTH: usize = 32;

/// Refuses `value` if it cannot be an AMQP short string.
pub(crate) fn check_short(what: &str, value: &str) -> Result<(), TransportError> {
    if value.len() > MAX_SHORT_STR {
        return Err(TransportError::new(
            TransportErrorKind::Protocol,
            format!(
                "{what} is {} bytes, AMQP allows at most {MAX_SHORT_STR}",
                value.len()
            ),
        ));
    }
    Ok(())
}

/// The entries an empty table from [`new_table`] takes without growing: an event's contract
/// headers (four, six with causation and schema) and a couple more.
const TABLE_ROOM: usize = 7;

/// An empty header table with room for [`TABLE_ROOM`] entries.
///
/// The client library's table is a hash map it makes empty, with no way to size it: filled
/// with an event's four to six headers it grew twice, hashing its first entries again at the
/// second growth. A clone of an empty table that has room keeps that room (the map's control
/// bytes are copied, nothing is hashed), so a table is cloned from one made once with room.
/// Its hasher's keys are random per process, as a fresh map's are per thread.
fn new_table() -> FieldTable {
    static ROOMY: std::sync::OnceLock<FieldTable> = std::sync::OnceLock::new();
    ROOMY
        .get_or_init(|| {
            let mut table = FieldTable::new();
            let names: Vec<ShortStr> = (0..TABLE_ROOM)
                .filter_map(|n| ShortStr::try_from(format!("room-{n}")).ok())
                .collect();
            for name in &names {
                table.insert(name.clone(), FieldValue::V);
            }
            for name in &names {
                table.remove(name);
            }
            // Emptied entries may leave tombstones that take room: then a plain table.
            if table.as_ref().capacity() >= TABLE_ROOM {
                table
            } else {
                FieldTable::new()
            }
        })
        .clone()
}

fn too_deep() -> TransportError {
    TransportError::new(
        TransportErrorKind::Protocol,
        format!("headers nest deeper than {MAX_DEPTH} levels"),
    )
}

/// A header table as the client library carries it.
pub(crate) fn to_field_table(headers: &Headers) -> Result<FieldTable, TransportError> {
    table_to_wire(headers, 0)
}

fn table_to_wire(headers: &Headers, depth: usize) -> Result<FieldTable, TransportError> {
    if depth > MAX_DEPTH {
        return Err(too_deep());
    }
    let mut table = new_table();
    for (name, value) in headers {
        check_short("a header name", name)?;
        let key = name.as_str().try_into().map_err(|_| {
            TransportError::new(TransportErrorKind::Protocol, "header name is too long")
        })?;
        table.insert(key, value_to_wire(value, depth + 1)?);
    }
    Ok(table)
}

/// AMQP's smallest `frame_max` (the protocol's `frame-min-size`): every broker takes content
/// header frames at least this large.
pub(crate) const FRAME_MIN_SIZE: usize = 4096;

/// The bytes of a content-header frame besides the properties: the frame's header (type,
/// channel, size) and end octet, and the class, weight and body size before the properties.
pub(crate) const HEADER_FRAME_OVERHEAD: usize = 7 + 1 + 2 + 2 + 8;

/// An upper bound of the content-header frame that will carry `message`'s properties, cheap
/// to compute (no encoding, no allocation): a short string counts its length byte, a header
/// value its type octet and at most 8 bytes of a scalar, or its length prefix and bytes
/// ([`value_to_wire`]'s widths; an unsigned integer sent as text counts 24). Above
/// [`FRAME_MIN_SIZE`] the publisher measures the frame exactly instead.
pub(crate) fn header_frame_bound(message: &WireMessage) -> usize {
    fn short(text: Option<&String>) -> usize {
        text.map_or(0, |t| 1 + t.len())
    }
    fn entries(table: &mesh_core::Headers) -> usize {
        table
            .iter()
            .map(|(name, v)| 1 + name.len() + value_bound(v))
            .sum()
    }
    let p = &message.properties;
    HEADER_FRAME_OVERHEAD
        + 2 // property flags
        + short(p.content_type.as_ref())
        + 1 // delivery mode
        + short(p.message_id.as_ref())
        + 8 // timestamp
        + short(p.correlation_id.as_ref())
        + short(p.reply_to.as_ref())
        + short(p.user_id.as_ref())
        + 1 + 20 // expiration, as decimal text
        + 4 + entries(&p.headers)
}

/// Integers go out in the narrowest AMQP width that holds them, as `mesh_core::wire`
/// promises. RabbitMQ has no unsigned 64-bit type, so an unsigned value above `u32::MAX`
/// goes out signed (and is read back as [`HeaderValue::Int`], same number), and one above
/// `i64::MAX` as its decimal text; [`HeaderValue::as_u64`] reads either.
fn value_to_wire(value: &HeaderValue, depth: usize) -> Result<FieldValue, TransportError> {
    if depth > MAX_DEPTH {
        return Err(too_deep());
    }
    let too_long = || TransportError::new(TransportErrorKind::Protocol, "header value is too long");
    Ok(match value {
        HeaderValue::Str(s) => FieldValue::S(s.as_str().try_into().map_err(|_| too_long())?),
        HeaderValue::Bool(b) => FieldValue::t(*b),
        HeaderValue::Int(n) => {
            if let Ok(n) = i8::try_from(*n) {
                FieldValue::b(n)
            } else if let Ok(n) = i16::try_from(*n) {
                FieldValue::s(n)
            } else if let Ok(n) = i32::try_from(*n) {
                FieldValue::I(n)
            } else {
                FieldValue::l(*n)
            }
        }
        HeaderValue::UInt(n) => {
            if let Ok(n) = u8::try_from(*n) {
                FieldValue::B(n)
            } else if let Ok(n) = u16::try_from(*n) {
                FieldValue::u(n)
            } else if let Ok(n) = u32::try_from(*n) {
                FieldValue::i(n)
            } else if let Ok(n) = i64::try_from(*n) {
                FieldValue::l(n)
            } else {
                FieldValue::S(n.to_string().as_str().try_into().map_err(|_| too_long())?)
            }
        }
        // RabbitMQ's table parser has no clause for a NaN or an infinite double: it crashes
        // the channel and closes the connection, and a resend would do it again forever.
        HeaderValue::Float(f) if !f.is_finite() => {
            return Err(TransportError::new(
                TransportErrorKind::Protocol,
                format!("header value {f} is not a finite number, which AMQP brokers refuse"),
            ))
        }
        HeaderValue::Float(f) => FieldValue::d(*f),
        HeaderValue::Bytes(b) => FieldValue::x(b.clone().try_into().map_err(|_| too_long())?),
        HeaderValue::Timestamp(t) => FieldValue::T(*t),
        HeaderValue::Array(items) => {
            let values = items
                .iter()
                .map(|v| value_to_wire(v, depth + 1))
                .collect::<Result<Vec<_>, _>>()?;
            FieldValue::A(values.try_into().map_err(|_| too_long())?)
        }
        HeaderValue::Table(table) => FieldValue::F(table_to_wire(table, depth + 1)?),
        HeaderValue::Void => FieldValue::V,
    })
}

/// A header table from the wire. Never fails: whatever the broker or a foreign publisher
/// sent is kept as faithfully as mesh's types allow.
pub(crate) fn from_field_table(table: &FieldTable) -> Headers {
    table_from_wire(table, 0)
}

fn table_from_wire(table: &FieldTable, depth: usize) -> Headers {
    // Inserted one by one: collecting would gather the pairs in a vector and sort it
    // first, an allocation more for every delivery (the names are unique already).
    let mut headers = Headers::new();
    for (name, value) in table.as_ref() {
        headers.insert(short_text(name), value_from_wire(value, depth + 1));
    }
    headers
}

/// A short string's text (a copy: the client library keeps the table).
fn short_text(text: &ShortStr) -> String {
    AsRef::<String>::as_ref(text).clone()
}

fn value_from_wire(value: &FieldValue, depth: usize) -> HeaderValue {
    if depth > MAX_DEPTH {
        return HeaderValue::Void;
    }
    match value {
        FieldValue::t(b) => HeaderValue::Bool(*b),
        FieldValue::b(n) => HeaderValue::Int(i64::from(*n)),
        FieldValue::s(n) => HeaderValue::Int(i64::from(*n)),
        FieldValue::I(n) => HeaderValue::Int(i64::from(*n)),
        FieldValue::l(n) => HeaderValue::Int(*n),
        FieldValue::B(n) => HeaderValue::UInt(u64::from(*n)),
        FieldValue::u(n) => HeaderValue::UInt(u64::from(*n)),
        FieldValue::i(n) => HeaderValue::UInt(u64::from(*n)),
        FieldValue::f(f) => HeaderValue::Float(f64::from(*f)),
        FieldValue::d(f) => HeaderValue::Float(*f),
        FieldValue::D(decimal) => decimal_from_wire(&decimal.to_string()),
        FieldValue::S(s) => HeaderValue::Str(AsRef::<String>::as_ref(s).clone()),
        FieldValue::A(array) => {
            let items: Vec<FieldValue> = array.clone().into();
            HeaderValue::Array(
                items
                    .iter()
                    .map(|v| value_from_wire(v, depth + 1))
                    .collect(),
            )
        }
        FieldValue::T(t) => HeaderValue::Timestamp(*t),
        FieldValue::F(table) => HeaderValue::Table(table_from_wire(table, depth + 1)),
        FieldValue::V => HeaderValue::Void,
        FieldValue::x(bytes) => HeaderValue::Bytes(bytes.clone().into()),
    }
}

/// The client library keeps a decimal's scale and digits private and only shows them as
/// `Decimal(<scale>, <value>)`, so that text is what is read back.
fn decimal_from_wire(text: &str) -> HeaderValue {
    let parsed = text
        .strip_prefix("Decimal(")
        .and_then(|rest| rest.strip_suffix(')'))
        .and_then(|inner| inner.split_once(", "))
        .and_then(|(scale, value)| Some((scale.parse::<i32>().ok()?, value.parse::<i32>().ok()?)));
    match parsed {
        Some((scale, value)) => HeaderValue::Float(f64::from(value) / 10f64.powi(scale)),
        None => HeaderValue::Str(text.to_owned()),
    }
}

/// The basic properties of `message` for publishing. With `force_persistent`, the message
/// is sent persistent whatever it says (retry and dead-letter copies).
pub(crate) fn to_properties(
    message: &WireMessage,
    force_persistent: bool,
) -> Result<BasicProperties, TransportError> {
    let p = &message.properties;
    let mut props = BasicProperties::default();
    if let Some(content_type) = &p.content_type {
        check_short("the content type", content_type)?;
        props.with_content_type(content_type);
    }
    if p.persistent || force_persistent {
        props.with_delivery_mode(DELIVERY_MODE_PERSISTENT);
    }
    if let Some(id) = &p.message_id {
        check_short("the message id", id)?;
        props.with_message_id(id);
    }
    if let Some(timestamp) = p.timestamp {
        props.with_timestamp(timestamp);
    }
    if let Some(correlation_id) = &p.correlation_id {
        check_short("the correlation id", correlation_id)?;
        props.with_correlation_id(correlation_id);
    }
    if let Some(reply_to) = &p.reply_to {
        check_short("reply_to", reply_to)?;
        props.with_reply_to(reply_to);
    }
    if let Some(expiration) = p.expiration {
        props.with_expiration(&expiration_text(expiration));
    }
    if let Some(user_id) = &p.user_id {
        check_short("the user id", user_id)?;
        props.with_user_id(user_id);
    }
    if !p.headers.is_empty() {
        props.with_headers(to_field_table(&p.headers)?);
    }
    Ok(props)
}

/// The basic properties of the event `envelope` published by `user_id`: exactly those of
/// [`to_properties`] of [`mesh_core::codec::encode`]`(envelope)` with that `user-id`, built
/// without the encoded message in between (no header table of mesh's own to build and
/// free for every emit). A property test holds the two equal.
pub(crate) fn event_properties(
    envelope: &Envelope,
    user_id: &str,
) -> Result<BasicProperties, TransportError> {
    check_short("the user id", user_id)?;
    let too_long = || TransportError::new(TransportErrorKind::Protocol, "header value is too long");
    let text = |value: &str| value.try_into().map(FieldValue::S).map_err(|_| too_long());
    let owned_text = |value: String| value.try_into().map(FieldValue::S).map_err(|_| too_long());
    let mut table = new_table();
    let mut insert = |name: &str, value: FieldValue| -> Result<(), TransportError> {
        check_short("a header name", name)?;
        let key = name.try_into().map_err(|_| {
            TransportError::new(TransportErrorKind::Protocol, "header name is too long")
        })?;
        table.insert(key, value);
        Ok(())
    };
    for (name, value) in &envelope.extra_headers {
        if !CONTRACT_HEADERS.contains(&name.as_str()) {
            insert(name, value_to_wire(value, 1)?)?;
        }
    }
    let id = envelope.id.text();
    let mut props = BasicProperties::default();
    props.with_message_id(&id);
    // The texts made for the headers are theirs: moved in, not copied.
    insert(EVENT_ID, owned_text(id)?)?;
    insert(SOURCE, text(&envelope.source)?)?;
    insert(NODE, text(&envelope.node)?)?;
    insert(TIME, owned_text(envelope.time.text())?)?;
    if let Some(causation) = &envelope.causation_id {
        insert(CAUSATION_ID, text(causation)?)?;
    }
    if let Some(schema) = envelope.schema {
        insert(
            SCHEMA,
            value_to_wire(&HeaderValue::UInt(u64::from(schema.0)), 1)?,
        )?;
    }
    props
        .with_content_type(CONTENT_TYPE_JSON)
        .with_delivery_mode(DELIVERY_MODE_PERSISTENT);
    if let Ok(seconds) = u64::try_from(envelope.time.unix_seconds()) {
        props.with_timestamp(seconds);
    }
    props.with_user_id(user_id).with_headers(table);
    Ok(props)
}

/// [`header_frame_bound`] of the event `envelope` as [`event_properties`] carries it: the
/// same bound, counted from the envelope.
pub(crate) fn event_frame_bound(envelope: &Envelope, user_id: &str) -> usize {
    // The contract's headers: a name, its length byte, and a string value's type octet
    // and length prefix (or `x-schema`'s integer, counted as `header_frame_bound` does).
    let string = |name: &str, len: usize| 1 + name.len() + 1 + 4 + len;
    let extra: usize = envelope
        .extra_headers
        .iter()
        .filter(|(name, _)| !CONTRACT_HEADERS.contains(&name.as_str()))
        .map(|(name, value)| 1 + name.len() + value_bound(value))
        .sum();
    // RFC 3339 with nanoseconds is 30 bytes; the debug form of a time beyond year 9999, which
    // `Timestamp` never holds from a parse or a clock, under 64.
    let time_len = 96;
    let contract = string(EVENT_ID, 36)
        + string(SOURCE, envelope.source.len())
        + string(NODE, envelope.node.len())
        + string(TIME, time_len)
        + envelope
            .causation_id
            .as_ref()
            .map_or(0, |c| string(CAUSATION_ID, c.len()))
        + envelope.schema.map_or(0, |_| 1 + SCHEMA.len() + 1 + 24);
    HEADER_FRAME_OVERHEAD
        + 2 // property flags
        + 1 + CONTENT_TYPE_JSON.len()
        + 1 // delivery mode
        + 1 + 36 // message id
        + 8 // timestamp
        + 1 + user_id.len()
        + 4 + extra + contract
}

/// A header value's share of [`header_frame_bound`]: its type octet and at most 8 bytes of
/// a scalar, or its length prefix and bytes.
fn value_bound(value: &HeaderValue) -> usize {
    1 + match value {
        HeaderValue::Str(s) => 4 + s.len(),
        HeaderValue::Bytes(b) => 4 + b.len(),
        HeaderValue::UInt(_) => 24,
        HeaderValue::Bool(_)
        | HeaderValue::Int(_)
        | HeaderValue::Float(_)
        | HeaderValue::Timestamp(_)
        | HeaderValue::Void => 8,
        HeaderValue::Array(items) => 4 + items.iter().map(value_bound).sum::<usize>(),
        HeaderValue::Table(table) => {
            4 + table
                .iter()
                .map(|(name, v)| 1 + name.len() + value_bound(v))
                .sum::<usize>()
        }
    }
}

/// `expiration` is the TTL in whole milliseconds, as text.
pub(crate) fn expiration_text(expiration: Duration) -> String {
    expiration.as_millis().min(u128::from(u32::MAX)).to_string()
}

/// The header that carries a message's own routing key when it is published under another
/// one: a retry copy sent to its retry queue, or a message sent straight to a queue through
/// the default exchange. The broker delivers those under the queue's name (dead-lettering
/// from a retry queue even replaces the key), so without it the event's type, which *is* its
/// routing key, would be lost. It is set by [`stamp_routing_key`] and removed again by
/// [`delivered`], so a consumer never sees it.
pub(crate) const ROUTING_KEY_HEADER: &str = mesh_core::codec::ROUTING_KEY;

/// Keeps `message`'s routing key in [`ROUTING_KEY_HEADER`] when it is published under
/// `publish_key`.
pub(crate) fn stamp_routing_key(message: &mut WireMessage, publish_key: &str) {
    if !message.routing_key.is_empty() && message.routing_key != publish_key {
        message.properties.headers.insert(
            ROUTING_KEY_HEADER.to_owned(),
            HeaderValue::Str(message.routing_key.clone()),
        );
    }
}

/// A delivered message in mesh's types, under its own routing key (see
/// [`ROUTING_KEY_HEADER`]), with mesh's own headers only where mesh can have set them: on a
/// delivery through any exchange but the default and the dead-letter exchange, every
/// `x-mesh-*` header is left out ([`mesh_core::codec::mesh_headers_trusted_from`], as
/// [`mesh_core::codec::remove_unearned_mesh_headers`] would remove it). A dead letter also
/// gets the key it was delivered under in [`mesh_core::codec::DEAD_KEY`].
///
/// One pass over the client library's header table: each header is copied once, or left
/// out, as it is read (not copied, then looked for and removed). The properties' texts are
/// moved out of `props`; the caller drops what is left.
pub(crate) fn delivered(
    exchange: &str,
    routing_key: String,
    props: &mut BasicProperties,
    body: Vec<u8>,
) -> WireMessage {
    let trusted = mesh_core::codec::mesh_headers_trusted_from(exchange);
    let mut removed = 0_usize;
    let mut original_key = None;
    let mut headers = Headers::new();
    if let Some(table) = props.headers() {
        for (name, value) in table.as_ref() {
            let name: &String = name.as_ref();
            if !trusted && mesh_core::codec::is_mesh_header(name) {
                removed += 1;
            } else if name == ROUTING_KEY_HEADER {
                original_key = Some(value);
            } else {
                headers.insert(name.clone(), value_from_wire(value, 1));
            }
        }
    }
    if removed > 0 {
        tracing::debug!(
            exchange,
            removed,
            "ignored x-mesh-* headers that mesh does not set on this exchange"
        );
    }
    if exchange == mesh_core::naming::DEAD_EXCHANGE {
        // The key it came under, which provenance is judged on: replaces any value sent.
        headers.insert(
            mesh_core::codec::DEAD_KEY.to_owned(),
            HeaderValue::Str(routing_key.clone()),
        );
    }
    let routing_key = match original_key {
        Some(FieldValue::S(key)) if AsRef::<String>::as_ref(key).len() <= MAX_SHORT_STR => {
            AsRef::<String>::as_ref(key).clone()
        }
        Some(other) => {
            tracing::debug!(value = ?other, "ignored a malformed {ROUTING_KEY_HEADER}");
            routing_key
        }
        None => routing_key,
    };
    message_of(routing_key, props, headers, body)
}

/// A returned message in mesh's types, as the broker handed it. The client library's
/// properties are taken apart: their texts are moved, not copied.
pub(crate) fn from_delivery(
    routing_key: String,
    mut props: BasicProperties,
    body: Vec<u8>,
) -> WireMessage {
    let headers = props.headers().map(from_field_table).unwrap_or_default();
    message_of(routing_key, &mut props, headers, body)
}

/// A message of `props` (their texts moved out) with `headers`.
fn message_of(
    routing_key: String,
    props: &mut BasicProperties,
    headers: Headers,
    body: Vec<u8>,
) -> WireMessage {
    let texts = props.take_texts();
    WireMessage {
        routing_key,
        properties: Properties {
            content_type: texts.content_type,
            persistent: props.delivery_mode() == Some(DELIVERY_MODE_PERSISTENT),
            message_id: texts.message_id,
            timestamp: props.timestamp(),
            correlation_id: texts.correlation_id,
            reply_to: texts.reply_to,
            user_id: texts.user_id,
            expiration: props
                .expiration()
                .and_then(|text| text.parse::<u64>().ok())
                .map(Duration::from_millis),
            headers,
        },
        body: body.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(value: &HeaderValue) -> HeaderValue {
        value_from_wire(&value_to_wire(value, 0).unwrap(), 0)
    }

    #[test]
    fn a_new_table_takes_an_events_headers_without_growing() {
        let mut table = new_table();
        assert!(table.as_ref().is_empty());
        let room = table.as_ref().capacity();
        assert!(
            room >= TABLE_ROOM,
            "a new table has room for {room} entries"
        );
        // The contract's seven names: an event's six possible headers, and one more.
        for name in CONTRACT_HEADERS {
            table.insert(ShortStr::try_from(name).unwrap(), FieldValue::V);
        }
        assert_eq!(table.as_ref().len(), CONTRACT_HEADERS.len());
        assert_eq!(table.as_ref().capacity(), room, "the table grew");
        // Each is a table of its own.
        assert!(new_table().as_ref().is_empty());
    }

    #[test]
    fn header_values_survive_a_round_trip() {
        let mut nested = Headers::new();
        nested.insert("count".into(), HeaderValue::Int(3));
        nested.insert("reason".into(), HeaderValue::Str("expired".into()));
        nested.insert(
            "routing-keys".into(),
            HeaderValue::Array(vec![HeaderValue::Str("a.b".into())]),
        );
        for value in [
            HeaderValue::Str("x".into()),
            HeaderValue::Bool(true),
            HeaderValue::Int(-1),
            HeaderValue::Int(-300),
            HeaderValue::Int(-70_000),
            HeaderValue::Int(i64::MIN),
            HeaderValue::UInt(0),
            HeaderValue::UInt(300),
            HeaderValue::UInt(70_000),
            HeaderValue::UInt(u64::from(u32::MAX)),
            HeaderValue::Float(1.5),
            HeaderValue::Bytes(vec![0, 159, 146, 150]),
            HeaderValue::Timestamp(1_700_000_000),
            HeaderValue::Void,
            HeaderValue::Array(vec![]),
            HeaderValue::Array(vec![HeaderValue::Table(nested.clone())]),
            HeaderValue::Table(nested),
        ] {
            assert_eq!(round_trip(&value), value);
        }
    }

    #[test]
    fn integers_go_out_narrow() {
        assert_eq!(
            value_to_wire(&HeaderValue::Int(5), 0).unwrap(),
            FieldValue::b(5)
        );
        assert_eq!(
            value_to_wire(&HeaderValue::UInt(5), 0).unwrap(),
            FieldValue::B(5)
        );
        assert_eq!(
            value_to_wire(&HeaderValue::UInt(1 << 40), 0).unwrap(),
            FieldValue::l(1 << 40)
        );
        // RabbitMQ has no unsigned 64-bit type: above u32::MAX the value comes back signed
        // (same number), and above i64::MAX as text; `as_u64` reads both.
        assert_eq!(
            round_trip(&HeaderValue::UInt(5_000_000_000)),
            HeaderValue::Int(5_000_000_000)
        );
        let huge = round_trip(&HeaderValue::UInt(u64::MAX));
        assert_eq!(huge.as_u64(), Some(u64::MAX));
    }

    #[test]
    fn decimals_arrive_as_floats() {
        assert_eq!(
            decimal_from_wire("Decimal(2, 12345)"),
            HeaderValue::Float(123.45)
        );
        assert_eq!(
            decimal_from_wire("Decimal(0, -7)"),
            HeaderValue::Float(-7.0)
        );
        assert_eq!(
            decimal_from_wire("garbage"),
            HeaderValue::Str("garbage".into())
        );
    }

    #[test]
    fn too_long_names_and_too_deep_values_are_refused_not_panicked_on() {
        let mut headers = Headers::new();
        headers.insert("h".repeat(256), HeaderValue::Bool(true));
        assert!(to_field_table(&headers).is_err());

        let mut deep = HeaderValue::Void;
        for _ in 0..100 {
            deep = HeaderValue::Array(vec![deep]);
        }
        assert!(value_to_wire(&deep, 0).is_err());
        for f in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            assert!(value_to_wire(&HeaderValue::Float(f), 0).is_err(), "{f}");
            assert!(value_to_wire(&HeaderValue::Array(vec![HeaderValue::Float(f)]), 0).is_err());
        }
        assert!(value_to_wire(&HeaderValue::Float(f64::MAX), 0).is_ok());

        let mut message = WireMessage::new("k", "{}");
        message.properties.correlation_id = Some("c".repeat(300));
        assert!(to_properties(&message, false).is_err());
    }

    #[test]
    fn a_message_keeps_its_routing_key_when_published_under_another() {
        let mut message = WireMessage::new("module.a.b", "{}");
        stamp_routing_key(&mut message, "n.m.events.retry.1s");
        let props = to_properties(&message, true).unwrap();
        let back = delivered("", "n.m.events".into(), &mut props.clone(), b"{}".to_vec());
        assert_eq!(back.routing_key, "module.a.b");
        assert!(back.header(ROUTING_KEY_HEADER).is_none());

        let mut same = WireMessage::new("module.a.b", "{}");
        stamp_routing_key(&mut same, "module.a.b");
        assert!(same.header(ROUTING_KEY_HEADER).is_none());

        // Garbage in the header is ignored, not trusted.
        let mut forged = WireMessage::new("k", "");
        forged
            .properties
            .headers
            .insert(ROUTING_KEY_HEADER.into(), HeaderValue::Int(3));
        let props = to_properties(&forged, false).unwrap();
        assert_eq!(
            delivered("", "q".into(), &mut props.clone(), vec![]).routing_key,
            "q"
        );
    }

    #[test]
    fn mesh_headers_are_believed_only_where_mesh_can_have_set_them() {
        let mut forged = WireMessage::new("module.umami.site.created", "{}");
        for (name, value) in [
            (
                ROUTING_KEY_HEADER,
                HeaderValue::Str("module.billing.invoice.paid".into()),
            ),
            (mesh_core::codec::ATTEMPTS, HeaderValue::UInt(99)),
            ("X-Mesh-Dead-Queue", HeaderValue::Str("serve.x".into())),
            ("x-other", HeaderValue::Str("kept".into())),
        ] {
            forged.properties.headers.insert(name.into(), value);
        }
        let props = to_properties(&forged, false).unwrap();
        for exchange in ["mesh.events", "mesh.rpc", "amq.topic"] {
            let back = delivered(
                exchange,
                "module.umami.site.created".into(),
                &mut props.clone(),
                vec![],
            );
            assert_eq!(back.routing_key, "module.umami.site.created", "{exchange}");
            let names: Vec<_> = back.properties.headers.keys().collect();
            assert_eq!(names, ["x-other"], "{exchange}");
        }
        // Through the retry exchange (a retry from its retry queue), the default exchange (a
        // re-driven dead letter) and the dead-letter exchange, they are mesh's.
        for exchange in ["mesh.retry", ""] {
            let back = delivered(exchange, "n.m.events".into(), &mut props.clone(), vec![]);
            assert_eq!(
                back.routing_key, "module.billing.invoice.paid",
                "{exchange:?}"
            );
            assert_eq!(mesh_core::codec::attempts(&back), 99, "{exchange:?}");
        }
        let dead = delivered("mesh.events.dead", "k".into(), &mut props.clone(), vec![]);
        assert!(dead.header("X-Mesh-Dead-Queue").is_some());
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]

        /// An event's properties built from its envelope are exactly those of its encoding
        /// with the publisher's `user-id`, the same bytes on the wire, and the event's bound
        /// is never below them.
        #[test]
        fn an_events_properties_are_its_encodings(
            id in proptest::prelude::any::<u128>(),
            key in "(module|mesh|node)\\.[a-z]{1,12}\\.[a-z]{1,10}(\\.[a-z]{1,10}){0,3}",
            source in "[a-zé]{1,40}",
            node in "[a-z0-9-]{1,40}",
            nanos in -62_135_596_800_000_000_000i128..253_402_300_799_999_999_999i128,
            causation in proptest::option::of("[0-9a-z:-]{0,80}"),
            schema in proptest::option::of(proptest::prelude::any::<u32>()),
            extra in proptest::collection::btree_map(
                "(x-event-id|x-source|x-node|x-time|x-causation-id|x-schema|content-type|\
                  traceparent|x-[a-z]{1,8}|[a-z]{1,8})",
                header_value(),
                0..6,
            ),
            user in "[a-z./-]{1,255}",
        ) {
            let time = time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
                .ok()
                .and_then(mesh_core::Timestamp::checked);
            let Some(time) = time else { return Ok(()); };
            let envelope = Envelope {
                id: uuid::Uuid::from_u128(id).into(),
                key: mesh_core::RoutingKey::parse(&key).unwrap(),
                source,
                node,
                time,
                causation_id: causation,
                schema: schema.map(mesh_core::SchemaVersion),
                extra_headers: extra,
                body: bytes::Bytes::from_static(b"{}"),
            };
            let mut encoded = mesh_core::codec::encode(&envelope);
            encoded.properties.user_id = Some(user.clone());
            let expected = to_properties(&encoded, false);
            let built = event_properties(&envelope, &user);
            match (built, expected) {
                (Ok(built), Ok(expected)) => {
                    proptest::prop_assert_eq!(built.content_type(), expected.content_type());
                    proptest::prop_assert_eq!(built.delivery_mode(), expected.delivery_mode());
                    proptest::prop_assert_eq!(built.message_id(), expected.message_id());
                    proptest::prop_assert_eq!(built.timestamp(), expected.timestamp());
                    proptest::prop_assert_eq!(built.user_id(), expected.user_id());
                    proptest::prop_assert_eq!(built.expiration(), expected.expiration());
                    proptest::prop_assert_eq!(built.correlation_id(), expected.correlation_id());
                    proptest::prop_assert_eq!(built.reply_to(), expected.reply_to());
                    proptest::prop_assert_eq!(built.headers(), expected.headers());
                    let encoded_frame = amqp_serde::to_bytes(&built).unwrap().len()
                        + HEADER_FRAME_OVERHEAD;
                    proptest::prop_assert_eq!(
                        amqp_serde::to_bytes(&expected).unwrap().len() + HEADER_FRAME_OVERHEAD,
                        encoded_frame
                    );
                    proptest::prop_assert!(
                        event_frame_bound(&envelope, &user) >= encoded_frame,
                        "bound {} < encoded {}", event_frame_bound(&envelope, &user), encoded_frame
                    );
                }
                (Err(_), Err(_)) => {}
                (built, expected) => proptest::prop_assert!(
                    false,
                    "built {:?}, encoded {:?}", built.map(|_| ()), expected.map(|_| ())
                ),
            }
        }

        /// The cheap bound is never below the frame the client library encodes.
        #[test]
        fn the_header_frame_bound_is_never_below_the_encoded_frame(
            headers in proptest::collection::btree_map(
                "[a-z-]{0,20}",
                header_value(),
                0..12,
            ),
            content_type in proptest::option::of("[a-z/;=-]{0,40}"),
            message_id in proptest::option::of("[0-9a-f-]{0,36}"),
            reply_to in proptest::option::of("[a-z.-]{0,60}"),
            user_id in proptest::option::of("[a-z./-]{0,255}"),
            expiration in proptest::option::of(0u64..u64::MAX),
        ) {
            let mut message = WireMessage::new("module.a.b", "{}");
            message.properties.headers = headers;
            message.properties.content_type = content_type;
            message.properties.message_id = message_id;
            message.properties.reply_to = reply_to;
            message.properties.user_id = user_id;
            message.properties.correlation_id = Some("c".repeat(36));
            message.properties.timestamp = Some(1);
            message.properties.expiration = expiration.map(Duration::from_millis);
            if let Ok(props) = to_properties(&message, true) {
                let encoded = HEADER_FRAME_OVERHEAD + amqp_serde::to_bytes(&props).unwrap().len();
                proptest::prop_assert!(
                    header_frame_bound(&message) >= encoded,
                    "bound {} < encoded {}", header_frame_bound(&message), encoded
                );
            }
        }
    }

    fn header_value() -> impl proptest::strategy::Strategy<Value = HeaderValue> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            ".{0,50}".prop_map(HeaderValue::Str),
            any::<bool>().prop_map(HeaderValue::Bool),
            any::<i64>().prop_map(HeaderValue::Int),
            any::<u64>().prop_map(HeaderValue::UInt),
            (-1e300f64..1e300).prop_map(HeaderValue::Float),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(HeaderValue::Bytes),
            any::<u64>().prop_map(HeaderValue::Timestamp),
            Just(HeaderValue::Void),
        ];
        leaf.prop_recursive(3, 24, 5, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..5).prop_map(HeaderValue::Array),
                proptest::collection::btree_map("[a-z]{0,8}", inner, 0..5)
                    .prop_map(HeaderValue::Table),
            ]
        })
    }

    #[test]
    fn properties_survive_a_round_trip() {
        let mut message = WireMessage::new("module.a.b", "{}");
        message.properties = Properties {
            content_type: Some("application/json".into()),
            persistent: true,
            message_id: Some("id".into()),
            timestamp: Some(1_700_000_000),
            correlation_id: Some("corr".into()),
            reply_to: Some("amq.gen-x".into()),
            user_id: Some("module.a".into()),
            expiration: Some(Duration::from_millis(1500)),
            headers: [("x-event-id".to_owned(), HeaderValue::Str("e".into()))]
                .into_iter()
                .collect(),
        };
        let props = to_properties(&message, false).unwrap();
        let back = from_delivery("module.a.b".into(), props, b"{}".to_vec());
        assert_eq!(back, message);

        let mut transient = WireMessage::new("k", "");
        transient.properties.persistent = false;
        let forced = to_properties(&transient, true).unwrap();
        assert!(
            from_delivery("k".into(), forced, vec![])
                .properties
                .persistent
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2_000))]

        /// A delivery read in one pass is what the two passes made of it before: the whole
        /// table copied, then `remove_unearned_mesh_headers`, the dead letter's key, and the
        /// routing key restored from `x-mesh-routing-key` when that is a short string.
        #[test]
        fn a_delivery_read_in_one_pass_is_what_two_passes_made(
            exchange in "(|mesh\\.events|mesh\\.rpc|mesh\\.retry|mesh\\.replies|mesh\\.reply|\
                          mesh\\.events\\.dead|amq\\.topic)",
            key in "[a-z.]{0,30}",
            headers in proptest::collection::btree_map(
                "(x-mesh-routing-key|X-Mesh-Routing-Key|x-mesh-attempts|X-MESH-dead-queue|\
                  x-mesh-dead-key|x-mesh-user|x-event-id|x-delivery-count|x-[a-z]{1,8}|[a-z]{1,8})",
                header_value(),
                0..8,
            ),
            original in proptest::option::of(".{0,300}"),
            user in proptest::option::of("[a-z]{1,8}"),
        ) {
            let mut message = WireMessage::new(key.clone(), "{}");
            message.properties.headers = headers;
            message.properties.user_id = user;
            if let Some(original) = original {
                message
                    .properties
                    .headers
                    .insert(ROUTING_KEY_HEADER.to_owned(), HeaderValue::Str(original));
            }
            let Ok(props) = to_properties(&message, false) else {
                return Ok(());
            };
            let mut expected = from_delivery(key.clone(), props.clone(), b"{}".to_vec());
            let headers = &mut expected.properties.headers;
            mesh_core::codec::remove_unearned_mesh_headers(&exchange, headers);
            if exchange == mesh_core::naming::DEAD_EXCHANGE {
                headers.insert(
                    mesh_core::codec::DEAD_KEY.to_owned(),
                    HeaderValue::Str(key.clone()),
                );
            }
            if let Some(HeaderValue::Str(original)) = headers.remove(ROUTING_KEY_HEADER) {
                if original.len() <= MAX_SHORT_STR {
                    expected.routing_key = original;
                }
            }
            let got = delivered(&exchange, key, &mut props.clone(), b"{}".to_vec());
            proptest::prop_assert_eq!(got, expected);
        }
    }
}
