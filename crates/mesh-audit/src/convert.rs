//! Values as stored: headers as JSON (and back, for re-drive), times as fixed-width UTC text.
//!
//! Headers become plain JSON where that is unambiguous (strings, numbers, booleans, arrays,
//! tables), so a query can read `headers->>'x-source'`; the AMQP types JSON lacks are tagged
//! objects of one key: `{"$bytes": "<hex>"}`, `{"$timestamp": <seconds>}`, and
//! `{"$float": "NaN" | "inf" | "-inf"}`.
//!
//! PostgreSQL's text and `jsonb` cannot hold U+0000, which an AMQP string can: it is stored as
//! U+FFFD on both backends (so they stay equivalent). The raw message is not kept for
//! events; a dead letter's body is kept byte for byte.

use mesh_core::{HeaderValue, Headers, Timestamp};
use serde_json::{Map, Number, Value};
use time::format_description::FormatItem;
use time::macros::format_description;
use time::UtcOffset;

use crate::error::Error;

const BYTES_TAG: &str = "$bytes";
const TIMESTAMP_TAG: &str = "$timestamp";
const FLOAT_TAG: &str = "$float";

/// Text the databases can hold: U+0000 replaced by U+FFFD.
pub(crate) fn clean(text: &str) -> String {
    if text.contains('\0') {
        text.replace('\0', "\u{FFFD}")
    } else {
        text.to_owned()
    }
}

/// Headers as a JSON object.
pub(crate) fn headers_to_json(headers: &Headers) -> Value {
    Value::Object(
        headers
            .iter()
            .map(|(name, value)| (clean(name), value_to_json(value)))
            .collect(),
    )
}

fn value_to_json(value: &HeaderValue) -> Value {
    let tagged = |tag: &str, value: Value| {
        let mut map = Map::new();
        map.insert(tag.to_owned(), value);
        Value::Object(map)
    };
    match value {
        HeaderValue::Str(s) => Value::String(clean(s)),
        HeaderValue::Bool(b) => Value::Bool(*b),
        HeaderValue::Int(n) => Value::from(*n),
        HeaderValue::UInt(n) => Value::from(*n),
        HeaderValue::Float(x) => match Number::from_f64(*x) {
            Some(number) => Value::Number(number),
            None => {
                let text = if x.is_nan() {
                    "NaN"
                } else if *x > 0.0 {
                    "inf"
                } else {
                    "-inf"
                };
                tagged(FLOAT_TAG, Value::from(text))
            }
        },
        HeaderValue::Bytes(bytes) => tagged(BYTES_TAG, Value::String(hex(bytes))),
        HeaderValue::Timestamp(seconds) => tagged(TIMESTAMP_TAG, Value::from(*seconds)),
        HeaderValue::Array(items) => Value::Array(items.iter().map(value_to_json).collect()),
        HeaderValue::Table(table) => headers_to_json(table),
        HeaderValue::Void => Value::Null,
    }
}

/// Headers back from their stored JSON (the inverse of [`headers_to_json`], up to integer
/// signedness: a non-negative integer comes back unsigned).
pub(crate) fn headers_from_json(value: &Value) -> Headers {
    match value {
        Value::Object(map) => map
            .iter()
            .map(|(name, value)| (name.clone(), value_from_json(value)))
            .collect(),
        _ => Headers::new(),
    }
}

fn value_from_json(value: &Value) -> HeaderValue {
    match value {
        Value::Null => HeaderValue::Void,
        Value::Bool(b) => HeaderValue::Bool(*b),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                HeaderValue::UInt(u)
            } else if let Some(i) = n.as_i64() {
                HeaderValue::Int(i)
            } else {
                HeaderValue::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        Value::String(s) => HeaderValue::Str(s.clone()),
        Value::Array(items) => HeaderValue::Array(items.iter().map(value_from_json).collect()),
        Value::Object(map) => {
            if map.len() == 1 {
                if let Some(tagged) = tagged_from_json(map) {
                    return tagged;
                }
            }
            HeaderValue::Table(headers_from_json(value))
        }
    }
}

fn tagged_from_json(map: &Map<String, Value>) -> Option<HeaderValue> {
    let (tag, value) = map.iter().next()?;
    match (tag.as_str(), value) {
        (BYTES_TAG, Value::String(text)) => unhex(text).map(HeaderValue::Bytes),
        (TIMESTAMP_TAG, Value::Number(n)) => n.as_u64().map(HeaderValue::Timestamp),
        (FLOAT_TAG, Value::String(text)) => match text.as_str() {
            "NaN" => Some(HeaderValue::Float(f64::NAN)),
            "inf" => Some(HeaderValue::Float(f64::INFINITY)),
            "-inf" => Some(HeaderValue::Float(f64::NEG_INFINITY)),
            _ => None,
        },
        _ => None,
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    text
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| {
            text.get(i..i + 2)
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
        })
        .collect()
}

/// `2026-09-03T12:00:00.123456Z`: UTC, microseconds (PostgreSQL's precision), fixed width, so
/// that SQLite compares and sorts the text as it would the time.
const STORED_TIME: &[FormatItem<'static>] =
    format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z");

/// A time as stored.
pub(crate) fn time_to_text(time: Timestamp) -> Result<String, Error> {
    let utc = time.as_offset_date_time().to_offset(UtcOffset::UTC);
    utc.format(STORED_TIME).map_err(|e| {
        Error::new(
            crate::ErrorKind::InvalidOptions,
            format!("time {time} cannot be stored"),
        )
        .with_source(e)
    })
}

/// A stored time back (the stored form is RFC 3339).
pub(crate) fn time_from_text(text: &str) -> Result<Timestamp, Error> {
    Timestamp::parse(text)
        .map_err(|e| Error::corrupt(format!("stored time `{text}`")).with_source(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_survive_the_round_trip() {
        let mut nested = Headers::new();
        nested.insert("count".into(), HeaderValue::UInt(3));
        let mut headers = Headers::new();
        headers.insert("s".into(), "text".into());
        headers.insert("b".into(), HeaderValue::Bool(true));
        headers.insert("i".into(), HeaderValue::Int(-4));
        headers.insert("u".into(), HeaderValue::UInt(u64::MAX));
        headers.insert("f".into(), HeaderValue::Float(1.5));
        headers.insert("nan".into(), HeaderValue::Float(f64::INFINITY));
        headers.insert("bytes".into(), HeaderValue::Bytes(vec![0, 159, 255]));
        headers.insert("ts".into(), HeaderValue::Timestamp(1_700_000_000));
        headers.insert(
            "array".into(),
            HeaderValue::Array(vec![HeaderValue::Table(nested), HeaderValue::Void]),
        );
        let json = headers_to_json(&headers);
        assert_eq!(json["s"], "text");
        assert_eq!(json["bytes"]["$bytes"], "009fff");
        let text = serde_json::to_string(&json).unwrap();
        let back = headers_from_json(&serde_json::from_str(&text).unwrap());
        assert_eq!(back, headers);
    }

    #[test]
    fn nul_is_replaced() {
        let mut headers = Headers::new();
        headers.insert("x\0".into(), "a\0b".into());
        let json = headers_to_json(&headers);
        assert_eq!(json["x\u{FFFD}"], "a\u{FFFD}b");
    }

    #[test]
    fn stored_times_are_fixed_width_utc() {
        let t = Timestamp::parse("2026-09-03T14:00:00.5+02:00").unwrap();
        let text = time_to_text(t).unwrap();
        assert_eq!(text, "2026-09-03T12:00:00.500000Z");
        assert_eq!(time_from_text(&text).unwrap(), t);
        let fine = Timestamp::parse("2026-09-03T12:00:00.123456789Z").unwrap();
        assert_eq!(time_to_text(fine).unwrap(), "2026-09-03T12:00:00.123456Z");
    }
}
