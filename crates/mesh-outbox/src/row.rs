//! A wire message as an outbox row stores it, and back: routing key, the properties an
//! event has, headers as tagged JSON (every [`HeaderValue`] kept exactly, floats by their
//! bits), body as bytes.

use bytes::Bytes;
use mesh::Bus;
use mesh_core::{HeaderValue, Headers, Properties, WireMessage};
use serde_json::{json, Map, Value};

use crate::error::Error;

/// The columns of one outbox row that hold its message.
#[derive(Debug, Clone)]
pub(crate) struct MessageColumns {
    pub(crate) routing_key: String,
    pub(crate) content_type: Option<String>,
    pub(crate) message_id: Option<String>,
    pub(crate) amqp_timestamp: Option<i64>,
    pub(crate) persistent: bool,
    pub(crate) headers: String,
    pub(crate) body: Vec<u8>,
}

/// What a stored row is counted beyond its routing key, headers and body (its other
/// columns, and SQLite's own bookkeeping, roughly).
pub(crate) const ROW_OVERHEAD: u64 = 128;

impl MessageColumns {
    /// The bytes a spool counts for the row: routing key, headers and body, plus
    /// [`ROW_OVERHEAD`]. The spool's SQL sums the same (`sqlite_pending_bytes`).
    pub(crate) fn stored_size(&self) -> u64 {
        (self.routing_key.len() + self.headers.len() + self.body.len()) as u64 + ROW_OVERHEAD
    }

    pub(crate) fn from_message(message: &WireMessage) -> MessageColumns {
        let p = &message.properties;
        MessageColumns {
            routing_key: message.routing_key.clone(),
            content_type: p.content_type.clone(),
            message_id: p.message_id.clone(),
            amqp_timestamp: p.timestamp.and_then(|t| i64::try_from(t).ok()),
            persistent: p.persistent,
            headers: Value::Object(table(&p.headers)).to_string(),
            body: message.body.to_vec(),
        }
    }

    pub(crate) fn into_message(self) -> Result<WireMessage, Error> {
        let headers: Value = serde_json::from_str(&self.headers)
            .map_err(|e| Error::corrupt(format!("headers are not JSON: {e}")))?;
        let Value::Object(headers) = headers else {
            return Err(Error::corrupt("headers are not a JSON object"));
        };
        Ok(WireMessage {
            routing_key: self.routing_key,
            properties: Properties {
                content_type: self.content_type,
                persistent: self.persistent,
                message_id: self.message_id,
                timestamp: self.amqp_timestamp.and_then(|t| u64::try_from(t).ok()),
                headers: read_table(&headers)?,
                ..Properties::default()
            },
            body: Bytes::from(self.body),
        })
    }
}

/// A bus's source in the outbox table, the unit of order and of leases: `<origin>.<owner>`
/// (`module.shop`, `mesh.billing`, `node.n1`), the prefix of every key it may emit, so a
/// module and a context of the same name never share rows or a lease.
pub(crate) fn source_of(bus: &Bus) -> String {
    let identity = bus.identity();
    format!("{}.{}", identity.origin(), identity.owner(bus.node()))
}

fn table(headers: &Headers) -> Map<String, Value> {
    headers
        .iter()
        .map(|(name, value)| (name.clone(), tagged(value)))
        .collect()
}

fn tagged(value: &HeaderValue) -> Value {
    match value {
        HeaderValue::Str(s) => json!({ "s": s }),
        HeaderValue::Bool(b) => json!({ "b": b }),
        HeaderValue::Int(n) => json!({ "i": n }),
        HeaderValue::UInt(n) => json!({ "u": n }),
        HeaderValue::Float(f) => json!({ "f": f.to_bits() }),
        HeaderValue::Bytes(b) => json!({ "x": b }),
        HeaderValue::Timestamp(t) => json!({ "t": t }),
        HeaderValue::Array(a) => json!({ "a": a.iter().map(tagged).collect::<Vec<_>>() }),
        HeaderValue::Table(t) => json!({ "m": table(t) }),
        HeaderValue::Void => json!({ "v": null }),
    }
}

fn read_table(map: &Map<String, Value>) -> Result<Headers, Error> {
    map.iter()
        .map(|(name, value)| Ok((name.clone(), read(value)?)))
        .collect()
}

fn read(value: &Value) -> Result<HeaderValue, Error> {
    let bad = || {
        Error::corrupt(format!(
            "header value {value} is not one this library wrote"
        ))
    };
    let Value::Object(map) = value else {
        return Err(bad());
    };
    let mut entries = map.iter();
    let (Some((tag, inner)), None) = (entries.next(), entries.next()) else {
        return Err(bad());
    };
    Ok(match (tag.as_str(), inner) {
        ("s", Value::String(s)) => HeaderValue::Str(s.clone()),
        ("b", Value::Bool(b)) => HeaderValue::Bool(*b),
        ("i", n) => HeaderValue::Int(n.as_i64().ok_or_else(bad)?),
        ("u", n) => HeaderValue::UInt(n.as_u64().ok_or_else(bad)?),
        ("f", n) => HeaderValue::Float(f64::from_bits(n.as_u64().ok_or_else(bad)?)),
        ("x", Value::Array(bytes)) => HeaderValue::Bytes(
            bytes
                .iter()
                .map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
                .collect::<Option<Vec<u8>>>()
                .ok_or_else(bad)?,
        ),
        ("t", n) => HeaderValue::Timestamp(n.as_u64().ok_or_else(bad)?),
        ("a", Value::Array(items)) => {
            HeaderValue::Array(items.iter().map(read).collect::<Result<_, _>>()?)
        }
        ("m", Value::Object(map)) => HeaderValue::Table(read_table(map)?),
        ("v", Value::Null) => HeaderValue::Void,
        _ => return Err(bad()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_header_value_survives_the_row() {
        let mut nested = Headers::new();
        nested.insert("k".into(), HeaderValue::Int(-3));
        let mut headers = Headers::new();
        for (name, value) in [
            ("s", HeaderValue::Str("é\"x".into())),
            ("b", HeaderValue::Bool(true)),
            ("i", HeaderValue::Int(i64::MIN)),
            ("u", HeaderValue::UInt(u64::MAX)),
            ("f", HeaderValue::Float(f64::NAN)),
            ("g", HeaderValue::Float(-0.5)),
            ("x", HeaderValue::Bytes(vec![0, 255, 7])),
            ("t", HeaderValue::Timestamp(1_700_000_000)),
            (
                "a",
                HeaderValue::Array(vec![HeaderValue::Void, HeaderValue::Str("y".into())]),
            ),
            ("m", HeaderValue::Table(nested)),
        ] {
            headers.insert(name.into(), value);
        }
        let message = WireMessage {
            routing_key: "module.shop.order.placed".into(),
            properties: Properties {
                content_type: Some("application/json".into()),
                persistent: true,
                message_id: Some("id".into()),
                timestamp: Some(1_700_000_000),
                headers,
                ..Properties::default()
            },
            body: Bytes::from_static(b"{\"n\":1}"),
        };
        let back = MessageColumns::from_message(&message)
            .into_message()
            .expect("the row reads back");
        // NaN is not equal to itself: compare its bits, then the rest without it.
        let bits = |m: &WireMessage| match m.header("f") {
            Some(HeaderValue::Float(f)) => f.to_bits(),
            other => panic!("{other:?}"),
        };
        assert_eq!(bits(&back), bits(&message));
        let (mut a, mut b) = (back, message);
        a.properties.headers.remove("f");
        b.properties.headers.remove("f");
        assert_eq!(a, b);
    }

    #[test]
    fn a_foreign_header_value_is_refused_not_guessed() {
        for headers in [
            "[]",
            r#"{"h":1}"#,
            r#"{"h":{"s":1}}"#,
            r#"{"h":{"u":-1}}"#,
            r#"{"h":{"x":[256]}}"#,
            r#"{"h":{"s":"a","b":true}}"#,
            r#"{"h":{"q":null}}"#,
        ] {
            let columns = MessageColumns {
                routing_key: "module.a.b".into(),
                content_type: None,
                message_id: None,
                amqp_timestamp: None,
                persistent: true,
                headers: headers.into(),
                body: b"{}".to_vec(),
            };
            let error = columns.into_message().expect_err(headers);
            assert_eq!(error.kind(), &crate::ErrorKind::Corrupt, "{headers}");
        }
    }
}
