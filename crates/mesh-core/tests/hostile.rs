//! Hostile input: arbitrary header tables and bodies through every reader of the codec.
//!
//! Whatever a publisher sends, each reader returns a value or a typed error, never panics;
//! every time it returns is in the range the audit store can write and read back; every
//! error message is bounded, since a dead letter quotes it, and escaped, since logs print it.

use bytes::Bytes;
use mesh_core::codec::{self, DecodeError};
use mesh_core::{HeaderValue, Headers, Properties, Timestamp, WireMessage};
use proptest::prelude::*;

/// The header names the codec reads, drawn often so the tables hit them.
const NAMES: &[&str] = &[
    codec::EVENT_ID,
    codec::SOURCE,
    codec::NODE,
    codec::TIME,
    codec::CAUSATION_ID,
    codec::SCHEMA,
    codec::CONTENT_TYPE_HEADER,
    codec::ATTEMPTS,
    codec::DEAD_REASON,
    codec::DEAD_ATTEMPTS,
    codec::DEAD_ERROR,
    codec::DEAD_QUEUE,
    codec::DEAD_TIME,
    codec::BROKER_DEATH,
    codec::REPLY_STATUS,
    codec::REPLY_ERROR_CODE,
    codec::REPLY_ERROR_MESSAGE,
    codec::ROUTING_KEY,
    "X-Mesh-Attempts",
    "x-delivery-count",
    "reason",
    "time",
    "queue",
];

/// The longest error message a reader may produce, whatever the input's size.
const MAX_ERROR_LEN: usize = 1024;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        // Anything, control characters and bidi overrides included.
        4 => any::<String>(),
        1 => Just(String::new()),
        1 => Just("\r\n\u{1b}[31m\u{202e}".to_owned()),
        // Huge, rarely: around the ~70 KB that once made a dead-letter copy exceed the
        // frame limit.
        1 => (60_000_usize..80_000).prop_map(|n| "x".repeat(n)),
        1 => Just("umami".to_owned()),
        1 => Just("anchor".to_owned()),
        1 => Just("ok".to_owned()),
        1 => Just("error".to_owned()),
        1 => Just("undecodable".to_owned()),
        1 => Just("delivery_limit".to_owned()),
        1 => Just(uuid::Uuid::now_v7().to_string()),
        1 => Just("application/json".to_owned()),
        6 => time_text(),
    ]
}

/// RFC 3339 times, within and outside the range, and near misses.
fn time_text() -> impl Strategy<Value = String> {
    (
        0_u32..=9999,
        1_u32..=12,
        1_u32..=31,
        0_u32..=23,
        0_u32..=59,
        0_u32..=60,
        prop_oneof![
            Just("Z".to_owned()),
            (-23_i32..=23, 0_u32..=59).prop_map(|(h, m)| format!(
                "{}{:02}:{m:02}",
                if h < 0 { '-' } else { '+' },
                h.abs()
            )),
        ],
        prop_oneof![Just(String::new()), "\\.[0-9]{1,12}"],
    )
        .prop_map(|(y, mo, d, h, mi, s, offset, frac)| {
            format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}{frac}{offset}")
        })
        .boxed()
        .prop_union(
            prop_oneof![
                Just("9999-12-31T23:59:59-01:00".to_owned()),
                Just("0000-01-01T00:00:00+01:00".to_owned()),
                Just("0001-01-01T00:00:00Z".to_owned()),
                Just("9999-12-31T23:59:59.999999999Z".to_owned()),
                Just("0000-12-31T23:00:00-01:00".to_owned()),
            ]
            .boxed(),
        )
}

fn value() -> impl Strategy<Value = HeaderValue> {
    let leaf = prop_oneof![
        text().prop_map(HeaderValue::Str),
        any::<bool>().prop_map(HeaderValue::Bool),
        prop_oneof![
            any::<i64>(),
            Just(i64::MIN),
            Just(-1),
            Just(0),
            Just(i64::MAX)
        ]
        .prop_map(HeaderValue::Int),
        prop_oneof![
            any::<u64>(),
            Just(0),
            Just(u64::from(u32::MAX)),
            Just(u64::from(u32::MAX) + 1),
            Just(u64::MAX),
            // Around the ends of the accepted range, in seconds.
            Just(253_402_300_799),
            Just(253_402_300_800),
        ]
        .prop_map(HeaderValue::UInt),
        any::<f64>().prop_map(HeaderValue::Float),
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            text().prop_map(String::into_bytes),
        ]
        .prop_map(HeaderValue::Bytes),
        prop_oneof![
            any::<u64>(),
            Just(253_402_300_799),
            Just(253_402_300_800),
            Just(u64::MAX)
        ]
        .prop_map(HeaderValue::Timestamp),
        Just(HeaderValue::Void),
    ];
    leaf.prop_recursive(3, 24, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(HeaderValue::Array),
            proptest::collection::btree_map(name(), inner, 0..6).prop_map(HeaderValue::Table),
        ]
    })
}

fn name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => proptest::sample::select(NAMES).prop_map(str::to_owned),
        1 => any::<String>(),
    ]
}

fn headers() -> impl Strategy<Value = Headers> {
    proptest::collection::btree_map(name(), value(), 0..16)
}

fn body() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        4 => Just(Bytes::from_static(b"{}")),
        2 => Just(Bytes::from_static(br#"{"site":"blog"}"#)),
        1 => Just(Bytes::from_static(b"null")),
        1 => Just(Bytes::new()),
        1 => Just(Bytes::from_static(b"\xff\xfe{}")),
        2 => proptest::collection::vec(any::<u8>(), 0..256).prop_map(Bytes::from),
        2 => any::<String>().prop_map(|s| Bytes::from(serde_json::to_vec(&s).unwrap_or_default())),
        1 => (60_000_usize..80_000).prop_map(|n| Bytes::from(format!("\"{}\"", "y".repeat(n)))),
    ]
}

fn routing_key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("module.umami.site.created".to_owned()),
        Just("node.anchor.started".to_owned()),
        Just("mesh.cli.ping".to_owned()),
        any::<String>(),
        (1_usize..2_000).prop_map(|n| format!("module.{}.x", "u".repeat(n))),
    ]
}

/// A message: mostly a good event with hostile changes, sometimes anything at all.
fn message() -> impl Strategy<Value = WireMessage> {
    // The time of a good event: often one at or past the ends of the range.
    let time = prop_oneof![
        1 => Just(HeaderValue::Str("2026-09-03T12:00:00Z".into())),
        2 => time_text().prop_map(HeaderValue::Str),
        1 => prop_oneof![
            any::<u64>(),
            Just(253_402_300_799_u64),
            Just(253_402_300_800_u64)
        ]
        .prop_map(HeaderValue::Timestamp),
    ];
    let good = (
        routing_key(),
        time,
        headers(),
        body(),
        proptest::option::of(text()),
    )
        .prop_map(|(key, time, hostile, body, content_type)| {
            let mut headers = Headers::new();
            headers.insert(
                codec::EVENT_ID.into(),
                uuid::Uuid::now_v7().to_string().into(),
            );
            headers.insert(codec::SOURCE.into(), "umami".into());
            headers.insert(codec::NODE.into(), "anchor".into());
            headers.insert(codec::TIME.into(), time);
            headers.extend(hostile);
            WireMessage {
                routing_key: key,
                properties: Properties {
                    content_type: content_type.or_else(|| Some("application/json".into())),
                    headers,
                    ..Properties::default()
                },
                body,
            }
        });
    let anything = (
        routing_key(),
        headers(),
        body(),
        proptest::option::of(text()),
    )
        .prop_map(|(key, headers, body, content_type)| WireMessage {
            routing_key: key,
            properties: Properties {
                content_type,
                headers,
                ..Properties::default()
            },
            body,
        });
    prop_oneof![3 => good, 1 => anything]
}

fn bounded(error: &DecodeError) -> Result<(), TestCaseError> {
    let text = error.to_string();
    prop_assert!(
        text.len() <= MAX_ERROR_LEN,
        "error message of {} bytes: {}…",
        text.len(),
        text.chars().take(200).collect::<String>()
    );
    prop_assert!(!error.field().is_empty());
    // Safe to print or log: no control or bidi character from the wire survives.
    prop_assert!(
        !text.chars().any(mesh_core::text::is_unsafe),
        "unescaped error message: {:?}",
        text
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 10_000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_reader_returns_a_value_or_a_typed_error(message in message()) {
        match codec::decode(&message) {
            Ok(envelope) => {
                prop_assert!(envelope.time.in_range());
                prop_assert!(envelope.schema.is_none_or(|s| s.0 > 0));
                prop_assert!(codec::source_owns(&envelope.key, &envelope.source));
                prop_assert!(!envelope.source.is_empty() && !envelope.node.is_empty());
                // What was decoded encodes to a message that decodes to the same event.
                let again = codec::decode(&codec::encode(&envelope));
                prop_assert_eq!(again.ok(), Some(envelope));
            }
            Err(error) => bounded(&error)?,
        }
        if let Some(dead) = codec::read_dead_letter(&message) {
            prop_assert!(dead.time.in_range());
        }
        match codec::decode_request(&message) {
            Ok(meta) => prop_assert!(meta.time.in_range()),
            Err(error) => bounded(&error)?,
        }
        if let Err(error) = codec::decode_reply(&message) {
            bounded(&error)?;
        }
        let _ = codec::attempts(&message);
        let _ = codec::event_id(&message);
    }

    #[test]
    fn a_parsed_time_is_in_range_or_refused(text in time_text()) {
        if let Ok(time) = Timestamp::parse(&text) {
            prop_assert!(time.in_range());
            // Its UTC form exists and has a four-digit year.
            let utc = time
                .as_offset_date_time()
                .checked_to_offset(time::UtcOffset::UTC);
            prop_assert!(utc.is_some_and(|t| (1..=9999).contains(&t.year())));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 10_000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn mesh_headers_are_removed_wherever_mesh_cannot_have_set_them(
        headers in headers(),
        exchange in prop_oneof![
            Just(String::new()),
            Just(mesh_core::naming::DEAD_EXCHANGE.to_owned()),
            Just(mesh_core::naming::RETRY_EXCHANGE.to_owned()),
            Just(mesh_core::naming::REPLY_EXCHANGE.to_owned()),
            Just(mesh_core::naming::EVENTS_EXCHANGE.to_owned()),
            Just(mesh_core::naming::RPC_EXCHANGE.to_owned()),
            any::<String>(),
        ],
    ) {
        let mut kept = headers.clone();
        let removed = codec::remove_unearned_mesh_headers(&exchange, &mut kept);
        if codec::mesh_headers_trusted_from(&exchange) {
            prop_assert_eq!(removed, 0);
            prop_assert_eq!(&kept, &headers);
        } else {
            prop_assert!(kept.keys().all(|name| !name.to_ascii_lowercase().starts_with("x-mesh-")));
            prop_assert_eq!(kept.len() + removed, headers.len());
            for (name, value) in &kept {
                prop_assert_eq!(Some(value), headers.get(name));
            }
        }
    }

    #[test]
    fn a_trimmed_copy_is_small_and_keeps_what_identifies_it(headers in headers()) {
        let mut message = WireMessage::new("module.a.b", Bytes::new());
        message.properties.headers = headers.clone();
        let trimmed = codec::trim_headers(&mut message);
        let kept = &message.properties.headers;
        prop_assert_eq!(
            kept.get(codec::TRIMMED).and_then(HeaderValue::as_u64),
            u64::try_from(trimmed).ok()
        );
        let mut bytes = 0;
        for (name, value) in kept {
            prop_assert!(
                name.starts_with("x-mesh-") || headers.contains_key(name),
                "{} was not in the message", name
            );
            prop_assert!(!matches!(
                value,
                HeaderValue::Array(_) | HeaderValue::Table(_) | HeaderValue::Bytes(_)
            ));
            if let HeaderValue::Str(text) = value {
                prop_assert!(text.len() <= 512, "{}: {} bytes", name, text.len());
                bytes += text.len();
            }
            bytes += name.len() + 16;
        }
        // Well under AMQP's smallest frame (4,096 bytes), whatever came in.
        prop_assert!(bytes < 4096, "{} bytes", bytes);
        // A contract header with a short string value is kept as it was.
        if let Some(HeaderValue::Str(id)) = headers.get(codec::EVENT_ID) {
            if id.len() <= codec::MAX_SHORT_VALUE_BYTES {
                prop_assert_eq!(kept.get(codec::EVENT_ID), Some(&HeaderValue::Str(id.clone())));
            }
        }
    }
}
