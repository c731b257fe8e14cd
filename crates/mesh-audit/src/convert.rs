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
use serde::ser::{SerializeMap, SerializeSeq};
use serde::{Serialize, Serializer};
use serde_json::{Map, Number, Value};
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

/// [`clean`], keeping the text itself when it holds no U+0000 (nearly always).
pub(crate) fn clean_owned(text: String) -> String {
    if text.contains('\0') {
        clean(&text)
    } else {
        text
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

/// Headers as JSON text: the text of [`headers_to_json`], written straight from the headers
/// instead of through a `Value` (the audit logger does this for every event).
pub(crate) fn headers_to_json_text(headers: &Headers) -> String {
    serde_json::to_string(&JsonTable(headers))
        .unwrap_or_else(|_| headers_to_json(headers).to_string())
}

/// A header table serialized as [`headers_to_json`] would build it.
struct JsonTable<'a>(&'a Headers);

impl Serialize for JsonTable<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // A name with U+0000 is cleaned, which can reorder or merge names: that rare table
        // takes the slow road, so the text stays the same.
        if self.0.keys().any(|name| name.contains('\0')) {
            return headers_to_json(self.0).serialize(serializer);
        }
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, value) in self.0 {
            map.serialize_entry(name, &JsonValue(value))?;
        }
        map.end()
    }
}

/// A header value serialized as [`value_to_json`] would build it.
struct JsonValue<'a>(&'a HeaderValue);

impl Serialize for JsonValue<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        fn tagged<S: Serializer, T: Serialize + ?Sized>(
            serializer: S,
            tag: &str,
            value: &T,
        ) -> Result<S::Ok, S::Error> {
            let mut map = serializer.serialize_map(Some(1))?;
            map.serialize_entry(tag, value)?;
            map.end()
        }
        match self.0 {
            HeaderValue::Str(s) if s.contains('\0') => serializer.serialize_str(&clean(s)),
            HeaderValue::Str(s) => serializer.serialize_str(s),
            HeaderValue::Bool(b) => serializer.serialize_bool(*b),
            HeaderValue::Int(n) => serializer.serialize_i64(*n),
            HeaderValue::UInt(n) => serializer.serialize_u64(*n),
            HeaderValue::Float(x) if x.is_finite() => serializer.serialize_f64(*x),
            HeaderValue::Float(x) => tagged(serializer, FLOAT_TAG, non_finite_text(*x)),
            HeaderValue::Bytes(bytes) => tagged(serializer, BYTES_TAG, &hex(bytes)),
            HeaderValue::Timestamp(seconds) => tagged(serializer, TIMESTAMP_TAG, seconds),
            HeaderValue::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&JsonValue(item))?;
                }
                seq.end()
            }
            HeaderValue::Table(table) => JsonTable(table).serialize(serializer),
            HeaderValue::Void => serializer.serialize_unit(),
        }
    }
}

/// How a float JSON cannot hold is written in its tagged object.
fn non_finite_text(x: f64) -> &'static str {
    if x.is_nan() {
        "NaN"
    } else if x > 0.0 {
        "inf"
    } else {
        "-inf"
    }
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
            None => tagged(FLOAT_TAG, Value::from(non_finite_text(*x))),
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
    if !text.len().is_multiple_of(2) {
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
/// that SQLite compares and sorts the text as it would the time (`STORED_TIME` in the tests
/// is the same format as a description).
///
/// Never panics: a time whose UTC form is not within the years 1 to 9999 (which
/// `Timestamp::parse` refuses, so only a time the program built itself can be one) is an
/// error, not a panicking conversion.
pub(crate) fn time_to_text(time: Timestamp) -> Result<String, Error> {
    let out_of_range = || {
        Error::new(
            crate::ErrorKind::InvalidOptions,
            format!("time {time} cannot be stored: its UTC form is outside the years 1 to 9999"),
        )
    };
    let utc = time
        .as_offset_date_time()
        .checked_to_offset(UtcOffset::UTC)
        .ok_or_else(out_of_range)?;
    // Written by hand for years of four digits (every event's, and the logger does this
    // twice per event): the same text as `STORED_TIME`, without walking its description.
    let Ok(year @ 1..=9999) = u32::try_from(utc.year()) else {
        return Err(out_of_range());
    };
    let mut text = String::with_capacity(27);
    let fields = [
        (year, 4, '-'),
        (u32::from(u8::from(utc.month())), 2, '-'),
        (u32::from(utc.day()), 2, 'T'),
        (u32::from(utc.hour()), 2, ':'),
        (u32::from(utc.minute()), 2, ':'),
        (u32::from(utc.second()), 2, '.'),
        (utc.microsecond(), 6, 'Z'),
    ];
    for (value, width, after) in fields {
        push_digits(&mut text, value, width);
        text.push(after);
    }
    Ok(text)
}

/// `value` in `width` decimal digits, zero-padded (`value` has no more digits than that).
fn push_digits(text: &mut String, value: u32, width: u32) {
    let mut divisor = 10_u32.pow(width - 1);
    while divisor > 0 {
        let digit = (value / divisor) % 10;
        text.push(char::from(b'0' + digit as u8));
        divisor /= 10;
    }
}

/// A stored time back (the stored form is RFC 3339; every time [`time_to_text`] writes is
/// within the range `Timestamp::parse` accepts).
pub(crate) fn time_from_text(text: &str) -> Result<Timestamp, Error> {
    Timestamp::parse(text)
        .map_err(|e| Error::corrupt(format!("stored time `{text}`")).with_source(e))
}

#[cfg(test)]
mod tests {
    use time::format_description::FormatItem;
    use time::macros::format_description;

    use super::*;

    const STORED_TIME: &[FormatItem<'static>] =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]Z");

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
    fn json_text_is_the_text_of_the_json_value() {
        let mut nested = Headers::new();
        nested.insert("count".into(), HeaderValue::UInt(3));
        nested.insert("z\0".into(), "nul name".into());
        nested.insert("z".into(), "plain".into());
        let mut headers = Headers::new();
        headers.insert("s".into(), "te\"xt\n\0".into());
        headers.insert("b".into(), HeaderValue::Bool(false));
        headers.insert("i".into(), HeaderValue::Int(i64::MIN));
        headers.insert("u".into(), HeaderValue::UInt(u64::MAX));
        headers.insert("f".into(), HeaderValue::Float(-0.1));
        headers.insert("whole".into(), HeaderValue::Float(3.0));
        for (name, x) in [
            ("nan", f64::NAN),
            ("inf", f64::INFINITY),
            ("ninf", f64::NEG_INFINITY),
        ] {
            headers.insert(name.into(), HeaderValue::Float(x));
        }
        headers.insert("bytes".into(), HeaderValue::Bytes(vec![0, 159, 255]));
        headers.insert("ts".into(), HeaderValue::Timestamp(1_700_000_000));
        headers.insert(
            "array".into(),
            HeaderValue::Array(vec![
                HeaderValue::Table(nested.clone()),
                HeaderValue::Void,
                HeaderValue::Array(vec![]),
            ]),
        );
        headers.insert("table".into(), HeaderValue::Table(nested));
        headers.insert("empty".into(), HeaderValue::Table(Headers::new()));
        assert_eq!(
            headers_to_json_text(&headers),
            headers_to_json(&headers).to_string()
        );
        headers.insert("\0first".into(), HeaderValue::Void);
        assert_eq!(
            headers_to_json_text(&headers),
            headers_to_json(&headers).to_string()
        );
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

    #[test]
    fn stored_times_are_the_text_of_their_format_description() {
        let mut seconds = -62_135_596_800_i64; // 0001-01-01
        let last = 253_402_300_799_i64; // 9999-12-31T23:59:59
        let mut micros = 7_u32;
        while seconds <= last {
            let nanos = i128::from(seconds) * 1_000_000_000 + i128::from(micros) * 1_000 + 999;
            let t = Timestamp::from(
                time::OffsetDateTime::from_unix_timestamp_nanos(nanos)
                    .unwrap()
                    .to_offset(UtcOffset::from_hms(-3, -30, 0).unwrap()),
            );
            let utc = t.as_offset_date_time().to_offset(UtcOffset::UTC);
            assert_eq!(time_to_text(t).unwrap(), utc.format(STORED_TIME).unwrap());
            seconds += 86_400 * 37 + 3_671;
            micros = (micros * 7 + 13) % 1_000_000;
        }
    }
}
