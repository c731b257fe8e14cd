//! Every malformed input has its own typed error; good input round-trips.

use bytes::Bytes;
use mesh_core::codec::{self, DeadLetterNote, DeadReason, DecodeError, RemoteError};
use mesh_core::{
    Envelope, EventId, HeaderValue, Headers, KeyError, RoutingKey, SchemaVersion, Timestamp,
    ToolKey, WireMessage,
};

fn envelope() -> Envelope {
    let mut extra = Headers::new();
    extra.insert("x-unknown-tracing".into(), HeaderValue::Str("abc".into()));
    Envelope {
        id: EventId::new(),
        key: RoutingKey::parse("module.umami.site.created").expect("valid key"),
        source: "umami".into(),
        node: "anchor".into(),
        time: Timestamp::parse("2026-09-03T12:00:00.123456Z").expect("valid time"),
        causation_id: Some("cause-1".into()),
        schema: Some(SchemaVersion(2)),
        extra_headers: extra,
        body: Bytes::from_static(br#"{"site":"blog"}"#),
    }
}

fn good() -> WireMessage {
    codec::encode(&envelope())
}

#[test]
fn an_event_round_trips_with_unknown_headers_kept() {
    let original = envelope();
    let message = codec::encode(&original);
    assert!(message.properties.persistent);
    assert_eq!(
        message.properties.content_type.as_deref(),
        Some("application/json")
    );
    assert_eq!(message.routing_key, "module.umami.site.created");
    let decoded = codec::decode(&message).unwrap();
    assert_eq!(decoded, original);
    assert_eq!(
        decoded.extra_headers.get("x-unknown-tracing"),
        Some(&HeaderValue::Str("abc".into()))
    );
}

fn without(header: &str) -> WireMessage {
    let mut message = good();
    assert!(message.properties.headers.remove(header).is_some());
    message
}

#[test]
fn each_missing_required_field_is_named() {
    for field in [codec::EVENT_ID, codec::SOURCE, codec::NODE, codec::TIME] {
        match codec::decode(&without(field)) {
            Err(DecodeError::Missing { field: named }) => assert_eq!(named, field),
            other => panic!("{field}: expected Missing, got {other:?}"),
        }
    }
    let mut message = good();
    message.properties.content_type = None;
    match codec::decode(&message) {
        Err(DecodeError::Missing { field }) => assert_eq!(field, "content-type"),
        other => panic!("expected Missing content-type, got {other:?}"),
    }
}

#[test]
fn a_bad_time_is_refused() {
    let mut message = good();
    message
        .properties
        .headers
        .insert(codec::TIME.into(), "yesterday".into());
    let error = codec::decode(&message).unwrap_err();
    assert!(
        matches!(&error, DecodeError::Malformed { field, .. } if *field == codec::TIME),
        "{error:?}"
    );
    assert_eq!(error.field(), "x-time");
}

#[test]
fn a_time_whose_utc_form_cannot_be_stored_is_refused() {
    // Both parse as RFC 3339; in UTC the first is the year 10000, the second the year -1.
    for text in ["9999-12-31T23:59:59-01:00", "0000-01-01T00:00:00+01:00"] {
        assert!(
            matches!(
                Timestamp::parse(text),
                Err(mesh_core::TimeError::OutOfRange)
            ),
            "{text}"
        );
        let mut message = good();
        message
            .properties
            .headers
            .insert(codec::TIME.into(), text.into());
        let error = codec::decode(&message).unwrap_err();
        assert!(
            matches!(&error, DecodeError::Malformed { field, .. } if *field == codec::TIME),
            "{text}: {error:?}"
        );
        assert!(error.to_string().contains("out of range"), "{error}");
        assert_eq!(error.dead_reason(), DeadReason::Undecodable);
        let request = codec::encode_request(
            &ToolKey::parse("umami.site.get").unwrap(),
            &codec::RequestMeta {
                id: EventId::new(),
                source: "cli".into(),
                node: "anchor".into(),
                time: Timestamp::now(),
                causation_id: None,
                user: None,
            },
            Bytes::from_static(b"{}"),
        );
        let mut request = request;
        request
            .properties
            .headers
            .insert(codec::TIME.into(), text.into());
        assert!(matches!(
            codec::decode_request(&request),
            Err(DecodeError::Malformed { field, .. }) if field == codec::TIME
        ));
    }
    // The ends of the range are accepted, on the wire and as AMQP timestamps.
    for text in [
        "0001-01-01T00:00:00Z",
        "0000-12-31T23:00:00-01:00",
        "9999-12-31T23:59:59.999999999Z",
        "9999-12-31T23:59:59+01:00",
    ] {
        assert!(Timestamp::parse(text).is_ok(), "{text}");
    }
    let mut message = good();
    message
        .properties
        .headers
        .insert(codec::TIME.into(), HeaderValue::Timestamp(253_402_300_800));
    assert!(matches!(
        codec::decode(&message),
        Err(DecodeError::Malformed { field, .. }) if field == codec::TIME
    ));
    message
        .properties
        .headers
        .insert(codec::TIME.into(), HeaderValue::Timestamp(253_402_300_799));
    assert!(codec::decode(&message).is_ok());
}

#[test]
fn a_dead_letter_time_out_of_range_reads_as_now() {
    let mut message = good();
    let before = Timestamp::now();
    codec::mark_dead(
        &mut message,
        &DeadLetterNote {
            reason: DeadReason::Permanent,
            attempts: 1,
            last_error: None,
            queue: "anchor.umami.events".into(),
            time: before,
        },
    );
    message
        .properties
        .headers
        .insert(codec::DEAD_TIME.into(), "9999-12-31T23:59:59-01:00".into());
    let dead = codec::read_dead_letter(&message).unwrap();
    assert!(dead.time >= before && dead.time.in_range());
}

#[test]
fn a_module_or_node_event_from_another_source_is_forged() {
    for (key, owner) in [
        ("module.umami.site.created", "umami"),
        ("node.anchor.started", "anchor"),
    ] {
        let mut message = good();
        message.routing_key = key.into();
        message
            .properties
            .headers
            .insert(codec::SOURCE.into(), owner.into());
        assert!(codec::decode(&message).is_ok(), "{key} from {owner}");
        message
            .properties
            .headers
            .insert(codec::SOURCE.into(), "billing".into());
        let error = codec::decode(&message).unwrap_err();
        assert!(
            matches!(&error, DecodeError::ForgedSource { claimed, .. } if claimed == "billing"),
            "{error:?}"
        );
        assert_eq!(error.dead_reason(), DeadReason::ForgedSource);
        assert_eq!(error.field(), codec::SOURCE);
    }
    // `mesh.<context>.…` keys are emitted by runtime components of any source.
    let mut message = good();
    message.routing_key = "mesh.cli.ping".into();
    message
        .properties
        .headers
        .insert(codec::SOURCE.into(), "cli-on-anchor".into());
    assert!(codec::decode(&message).is_ok());
    assert_eq!(
        DeadReason::parse("forged-source"),
        Some(DeadReason::ForgedSource)
    );
}

#[test]
fn errors_quote_huge_values_bounded() {
    let mut message = good();
    message
        .properties
        .headers
        .insert(codec::EVENT_ID.into(), "z".repeat(70_000).into());
    let error = codec::decode(&message).unwrap_err();
    assert!(
        error.to_string().len() < 200,
        "{} bytes",
        error.to_string().len()
    );
    message.properties.headers.insert(
        codec::EVENT_ID.into(),
        HeaderValue::Bytes(vec![0xff; 70_000]),
    );
    let error = codec::decode(&message).unwrap_err();
    assert!(error.to_string().len() < 200, "{error}");
}

#[test]
fn a_bad_id_is_refused() {
    let mut message = good();
    message
        .properties
        .headers
        .insert(codec::EVENT_ID.into(), "42".into());
    assert!(matches!(
        codec::decode(&message),
        Err(DecodeError::Malformed { field, .. }) if field == codec::EVENT_ID
    ));
    message
        .properties
        .headers
        .insert(codec::EVENT_ID.into(), HeaderValue::Int(42));
    assert!(matches!(
        codec::decode(&message),
        Err(DecodeError::Malformed { field, .. }) if field == codec::EVENT_ID
    ));
}

#[test]
fn an_empty_required_header_is_refused() {
    let mut message = good();
    message
        .properties
        .headers
        .insert(codec::SOURCE.into(), "".into());
    assert!(matches!(
        codec::decode(&message),
        Err(DecodeError::Malformed { field, .. }) if field == codec::SOURCE
    ));
}

#[test]
fn a_non_json_body_is_refused() {
    let mut message = good();
    message.body = Bytes::from_static(b"<xml/>");
    let error = codec::decode(&message).unwrap_err();
    assert!(matches!(error, DecodeError::Body(_)), "{error:?}");
    assert_eq!(error.field(), "body");
}

#[test]
fn a_wrong_content_type_is_refused() {
    let mut message = good();
    message.properties.content_type = Some("text/plain".into());
    assert!(matches!(
        codec::decode(&message),
        Err(DecodeError::ContentType { found }) if found == "text/plain"
    ));
    message.properties.content_type = Some("application/json; charset=utf-8".into());
    assert!(codec::decode(&message).is_ok());
}

#[test]
fn a_content_type_header_from_a_foreign_publisher_is_accepted() {
    let mut message = good();
    message.properties.content_type = None;
    message
        .properties
        .headers
        .insert(codec::CONTENT_TYPE_HEADER.into(), "application/json".into());
    let decoded = codec::decode(&message).unwrap();
    assert!(!decoded.extra_headers.contains_key("content-type"));
}

#[test]
fn a_bad_schema_is_refused() {
    for bad in [
        HeaderValue::Str("v2".into()),
        HeaderValue::Int(0),
        HeaderValue::Bool(true),
    ] {
        let mut message = good();
        message.properties.headers.insert(codec::SCHEMA.into(), bad);
        assert!(matches!(
            codec::decode(&message),
            Err(DecodeError::Malformed { field, .. }) if field == codec::SCHEMA
        ));
    }
    let mut message = good();
    message
        .properties
        .headers
        .insert(codec::SCHEMA.into(), "3".into());
    assert_eq!(
        codec::decode(&message).unwrap().schema,
        Some(SchemaVersion(3))
    );
}

#[test]
fn invalid_routing_keys_on_the_wire_are_refused() {
    let cases = [
        ("module.umami.*", KeyError::Wildcard { wildcard: '*' }),
        (
            "service.umami.created",
            KeyError::UnknownOrigin {
                origin: "service".into(),
            },
        ),
        ("module.umami", KeyError::TooFewWords { words: 2 }),
    ];
    for (key, expected) in cases {
        let mut message = good();
        message.routing_key = key.into();
        match codec::decode(&message) {
            Err(DecodeError::Key { source, .. }) => assert_eq!(source, expected, "{key}"),
            other => panic!("{key}: {other:?}"),
        }
    }
    let mut message = good();
    message.routing_key = format!("module.umami.{}", "x".repeat(250));
    assert!(matches!(
        codec::decode(&message),
        Err(DecodeError::Key {
            source: KeyError::TooLong { .. },
            ..
        })
    ));
}

#[test]
fn contract_headers_win_over_same_named_extras() {
    let mut forged = envelope();
    forged
        .extra_headers
        .insert(codec::SOURCE.into(), "someone-else".into());
    let message = codec::encode(&forged);
    assert_eq!(
        message.header(codec::SOURCE),
        Some(&HeaderValue::Str("umami".into()))
    );
}

#[test]
fn attempts_and_dead_letters_round_trip() {
    let mut message = good();
    assert_eq!(codec::attempts(&message), 0);
    codec::set_attempts(&mut message, 3);
    assert_eq!(codec::attempts(&message), 3);
    let dead = DeadLetterNote {
        reason: DeadReason::MaxAttempts,
        attempts: 5,
        last_error: Some("db down".into()),
        queue: "anchor.billing.events".into(),
        time: Timestamp::parse("2026-09-03T12:00:00Z").unwrap(),
    };
    codec::mark_dead(&mut message, &dead);
    assert_eq!(codec::read_dead_letter(&message), Some(dead));
    // The original event is intact under the annotations.
    assert_eq!(codec::decode(&message).unwrap().id, envelope_id(&message));
}

fn envelope_id(message: &WireMessage) -> EventId {
    codec::event_id(message).expect("an event id")
}

#[test]
fn a_broker_dead_letter_is_read_from_x_death() {
    let mut message = good();
    let mut death = Headers::new();
    death.insert("reason".into(), "delivery_limit".into());
    death.insert("queue".into(), "anchor.billing.events".into());
    death.insert("time".into(), HeaderValue::Timestamp(1_790_000_000));
    message.properties.headers.insert(
        codec::BROKER_DEATH.into(),
        HeaderValue::Array(vec![HeaderValue::Table(death)]),
    );
    let dead = codec::read_dead_letter(&message).unwrap();
    assert_eq!(dead.reason, DeadReason::DeliveryLimit);
    assert_eq!(dead.queue, "anchor.billing.events");
}

#[test]
fn replies_carry_a_status() {
    let ok = codec::encode_reply(&Ok(Bytes::from_static(b"5")));
    assert_eq!(
        codec::decode_reply(&ok).unwrap(),
        Ok(Bytes::from_static(b"5"))
    );
    let remote = RemoteError {
        code: "not-found".into(),
        message: "no such site".into(),
    };
    let err = codec::encode_reply(&Err(remote.clone()));
    assert_eq!(codec::decode_reply(&err).unwrap(), Err(remote));
    let mut odd = ok.clone();
    odd.properties
        .headers
        .insert(codec::REPLY_STATUS.into(), "maybe".into());
    assert!(codec::decode_reply(&odd).is_err());
    assert!(matches!(
        codec::decode_reply(&WireMessage::new("", "{}")),
        Err(DecodeError::Missing { .. })
    ));
}

#[test]
fn requests_carry_event_style_metadata() {
    let meta = codec::RequestMeta {
        id: EventId::new(),
        source: "umami".into(),
        node: "anchor".into(),
        time: Timestamp::now(),
        causation_id: Some("c".into()),
        user: None,
    };
    let tool = ToolKey::parse("billing.quote").unwrap();
    let message = codec::encode_request(&tool, &meta, Bytes::from_static(b"{}"));
    assert_eq!(message.routing_key, "billing.quote");
    let decoded = codec::decode_request(&message).unwrap();
    assert_eq!(decoded.id, meta.id);
    assert_eq!(decoded.causation_id.as_deref(), Some("c"));
    // The caller's validated user is the request's `user-id`, never a header.
    assert_eq!(decoded.user, None);
    let mut stamped = message.clone();
    stamped.properties.user_id = Some("module.umami".into());
    stamped
        .properties
        .headers
        .insert(codec::USER.into(), "module.billing".into());
    let decoded = codec::decode_request(&stamped).unwrap();
    assert_eq!(decoded.user.as_deref(), Some("module.umami"));
}

#[test]
fn a_caller_is_only_the_identity_of_its_validated_user() {
    assert!(codec::caller_is("umami", Some("module.umami"), ""));
    assert!(codec::caller_is("umami", Some("p.module.umami"), "p."));
    assert!(codec::caller_is("ops", Some("mesh.ops"), ""));
    assert!(codec::caller_is("anchor", Some("node.anchor"), ""));
    assert!(!codec::caller_is("billing", Some("module.umami"), ""));
    assert!(!codec::caller_is("umami", Some("module.umami"), "p."));
    assert!(!codec::caller_is("umami", None, ""));
    // A source that is no name is no identity.
    assert!(!codec::caller_is("", Some("module."), ""));
}
