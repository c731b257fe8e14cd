//! Hostile input through the logger's row conversion: whatever a publisher sends, building
//! the event row (or, when it does not decode, the dead-letter row of the copy the logger
//! dead-letters) never panics, and every time stored reads back.

use bytes::Bytes;
use mesh_core::codec::{self, DeadLetterNote};
use mesh_core::{HeaderValue, Headers, Properties, Timestamp, WireMessage};
use proptest::prelude::*;

use crate::convert::{headers_from_json, headers_to_json_text, time_from_text, time_to_text};
use crate::store::{now_text, DeadRow, EventRow};

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
    "x-delivery-count",
    "reason",
    "time",
    "queue",
];

fn time_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("9999-12-31T23:59:59-01:00".to_owned()),
        Just("0000-01-01T00:00:00+01:00".to_owned()),
        Just("0001-01-01T00:00:00Z".to_owned()),
        Just("0000-12-31T23:00:00-01:00".to_owned()),
        Just("9999-12-31T23:59:59.999999999Z".to_owned()),
        Just("9999-12-31T23:59:59+01:00".to_owned()),
        (
            0_u32..=9999,
            1_u32..=12,
            1_u32..=28,
            0_u32..=23,
            -23_i32..=23
        )
            .prop_map(|(y, mo, d, h, off)| format!(
                "{y:04}-{mo:02}-{d:02}T{h:02}:00:00.123456789{}{:02}:00",
                if off < 0 { '-' } else { '+' },
                off.abs()
            )),
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => any::<String>(),
        1 => Just(String::new()),
        2 => Just("a\0b\r\n\u{1b}[2J\u{202e}".to_owned()),
        // Huge, rarely: a header the size that once overflowed a dead letter's frame.
        1 => (60_000_usize..80_000).prop_map(|n| "x".repeat(n)),
        2 => Just("umami".to_owned()),
        2 => Just("undecodable".to_owned()),
        2 => Just("rejected".to_owned()),
        6 => time_text(),
    ]
}

fn value() -> impl Strategy<Value = HeaderValue> {
    let leaf = prop_oneof![
        text().prop_map(HeaderValue::Str),
        any::<bool>().prop_map(HeaderValue::Bool),
        any::<i64>().prop_map(HeaderValue::Int),
        prop_oneof![any::<u64>(), Just(u64::MAX), Just(253_402_300_800)]
            .prop_map(HeaderValue::UInt),
        any::<f64>().prop_map(HeaderValue::Float),
        proptest::collection::vec(any::<u8>(), 0..32).prop_map(HeaderValue::Bytes),
        prop_oneof![any::<u64>(), Just(253_402_300_799), Just(253_402_300_800)]
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

fn message() -> impl Strategy<Value = WireMessage> {
    let body = prop_oneof![
        Just(Bytes::from_static(b"{}")),
        Just(Bytes::from_static(b"\xff\xfe")),
        Just(Bytes::from_static(b"\"a\\u0000b\"")),
        proptest::collection::vec(any::<u8>(), 0..64).prop_map(Bytes::from),
        any::<String>().prop_map(|s| Bytes::from(serde_json::to_vec(&s).unwrap_or_default())),
    ];
    let key = prop_oneof![
        Just("module.umami.site.created".to_owned()),
        Just("node.anchor.started".to_owned()),
        any::<String>(),
    ];
    (
        key,
        proptest::collection::btree_map(name(), value(), 0..12),
        body,
        any::<bool>(),
    )
        .prop_map(|(key, hostile, body, good_base)| {
            let mut headers = if good_base {
                contract_headers("anchor")
            } else {
                Headers::new()
            };
            headers.extend(hostile);
            json_message(key, headers, body)
        })
}

/// The contract's headers of an event from `umami` on `node`.
fn contract_headers(node: &str) -> Headers {
    let mut headers = Headers::new();
    headers.insert(
        codec::EVENT_ID.into(),
        uuid::Uuid::now_v7().to_string().into(),
    );
    headers.insert(codec::SOURCE.into(), "umami".into());
    headers.insert(codec::NODE.into(), node.into());
    headers.insert(codec::TIME.into(), "2026-09-03T12:00:00Z".into());
    headers
}

fn json_message(routing_key: String, headers: Headers, body: Bytes) -> WireMessage {
    WireMessage {
        routing_key,
        properties: Properties {
            content_type: Some("application/json".into()),
            headers,
            ..Properties::default()
        },
        body,
    }
}

#[test]
fn an_event_row_takes_its_text_and_cleans_it() {
    let message = json_message(
        "module.umami.site.created".into(),
        contract_headers("an\0chor"),
        Bytes::from_static(b"{}"),
    );
    let envelope = codec::decode(&message).expect("a well-formed event");
    let row = EventRow::new(envelope, &message, &now_text()).expect("a row");
    assert_eq!(row.source, "umami");
    // PostgreSQL refuses U+0000 in text.
    assert_eq!(row.node, "an\u{FFFD}chor");
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 10_000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn every_message_becomes_a_row_or_a_dead_letter_row(message in message()) {
        let received_at = now_text();
        match codec::decode(&message) {
            Ok(envelope) => {
                // A decoded event always makes a row (its body is JSON, so UTF-8, and its
                // time is in range), and its stored time reads back.
                let time = envelope.time;
                let row = EventRow::new(envelope, &message, &received_at);
                prop_assert!(row.is_ok(), "{:?}", row.err());
                let row = row.map_err(TestCaseError::fail)?;
                // Text the databases can hold: PostgreSQL refuses U+0000.
                for text in [&row.source, &row.node] {
                    prop_assert!(!text.contains('\0'), "{text:?} kept a U+0000");
                }
                let back = time_from_text(&row.time);
                prop_assert!(back.is_ok(), "stored time {} does not read back", row.time);
                let back = back.map_err(|e| TestCaseError::fail(e.to_string()))?;
                let lost = time.unix_nanos() - back.unix_nanos();
                prop_assert!((0..1_000).contains(&lost), "{lost} ns lost");
            }
            Err(error) => {
                // What the logger does with it: a dead-lettered copy, then its row.
                let mut copy = message.clone();
                codec::mark_dead(&mut copy, &DeadLetterNote {
                    reason: error.dead_reason(),
                    attempts: codec::attempts(&message).saturating_add(1),
                    last_error: Some(error.to_string()),
                    queue: "anchor.audit-logger.events".into(),
                    time: Timestamp::now(),
                });
                let row = DeadRow::new(&copy, &received_at, Some(20));
                prop_assert_eq!(row.reason.as_deref(), Some(error.dead_reason().as_str()));
                prop_assert!(time_from_text(&row.dead_at).is_ok());
                prop_assert_eq!(&row.body[..], &message.body[..]);
            }
        }
        // A message straight from the dead-letter queue: kept whatever it carries.
        let row = DeadRow::new(&message, &received_at, Some(u32::MAX));
        prop_assert!(time_from_text(&row.dead_at).is_ok(), "dead_at {}", row.dead_at);
        let json: serde_json::Value = serde_json::from_str(&row.headers)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        let _ = headers_from_json(&json);
        let _ = headers_to_json_text(&message.properties.headers);
    }

    #[test]
    fn a_parsed_time_is_stored_and_read_back(text in time_text()) {
        if let Ok(time) = Timestamp::parse(&text) {
            let stored = time_to_text(time);
            prop_assert!(stored.is_ok(), "{text}: {stored:?}");
            let stored = stored.unwrap_or_default();
            let back = time_from_text(&stored);
            prop_assert!(back.is_ok(), "{text} stored as {stored}");
            // Microseconds are kept: the stored time is the parsed one, truncated.
            let lost = time.unix_nanos() - back.map(|t| t.unix_nanos()).unwrap_or_default();
            prop_assert!((0..1_000).contains(&lost), "{text}: {lost} ns lost");
        }
    }
}

#[test]
fn a_time_built_out_of_range_is_an_error_not_a_panic() {
    let time = time::OffsetDateTime::parse(
        "9999-12-31T23:59:59-01:00",
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert!(time_to_text(Timestamp::from(time)).is_err());
    let time = time::OffsetDateTime::parse(
        "0000-01-01T00:00:00+01:00",
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    assert!(time_to_text(Timestamp::from(time)).is_err());
}
