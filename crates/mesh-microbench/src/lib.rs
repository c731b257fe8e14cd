//! Micro-benchmarks of mesh's hot paths, counted in instructions rather than timed.
//!
//! `benches/hot_paths.rs` runs each operation once under Valgrind's Callgrind (through the
//! `gungraun` harness), so its count does not depend on the machine's load: a regression
//! shows as a changed number, without a broker. This library holds what the benchmark needs
//! besides the measured calls:
//!
//! - the fixtures: a typical event (a 256-byte JSON body and the contract headers, with and
//!   without `x-causation-id`), the message the transport publishes for it, keys, patterns,
//!   and a warmed unconfirmed window;
//! - the checks of each operation's result, run in the benchmark's teardown (outside the
//!   count), so a benchmark fails loudly when the code it measures breaks.
//!
//! The crate-private paths of `mesh-amqp` (the property conversion, the window, the ack
//! tracker) are reached through its hidden `bench_internals` module, compiled only with its
//! non-default `bench-internals` feature, which this crate alone enables.

use std::time::Instant;

pub mod dispatch;

use mesh_amqp::bench_internals::{self as internals, AckFrame, ClientProperties, Flushed, Window};
use mesh_core::naming::EVENTS_EXCHANGE;
use mesh_core::{
    codec, Envelope, EventName, HeaderValue, KeyError, Name, Origin, RoutingKey, TopicPattern,
    TransportError, WireMessage,
};

/// The routing key of the typical event.
pub const KEY: &str = "module.billing.invoice.paid";
/// Its source: the module that owns the key.
pub const SOURCE: &str = "billing";
const NODE: &str = "node-eu-1";
const EVENT_ID: &str = "019a8f2e-7c41-7d3a-9b6e-2f4c1d8e5a60";
const CAUSATION_ID: &str = "019a8f2e-7b10-7c2a-8d5e-1a3b5c7d9e01";
const TIME: &str = "2026-12-03T09:00:00.123456Z";
/// The typical event body's size in bytes.
pub const BODY_LEN: usize = 256;

/// How many messages (or deliveries) the window and ack-tracker benchmarks put through.
pub const BATCH: u64 = 64;

/// The typical body: a JSON object of [`BODY_LEN`] bytes.
pub fn body() -> String {
    let mut body = String::from(
        r#"{"invoice_id":"inv-2026-004211","customer_id":"cus-8812","amount_cents":129900,"currency":"EUR","paid_at":"2026-12-03T08:59:59Z","method":"card","lines":3,"note":""#,
    );
    let closing = "\"}";
    let pad = BODY_LEN - body.len() - closing.len();
    body.extend(std::iter::repeat_n('x', pad));
    body.push_str(closing);
    body
}

/// The typical event, with `x-causation-id` when `caused`. Always the same, so a teardown
/// can compare a result with a fresh copy.
pub fn envelope(caused: bool) -> Envelope {
    Envelope {
        id: EVENT_ID.parse().expect("the fixture's event id is a UUID"),
        key: RoutingKey::parse(KEY).expect("the fixture's key is valid"),
        source: SOURCE.to_owned(),
        node: NODE.to_owned(),
        time: mesh_core::Timestamp::parse(TIME).expect("the fixture's time is RFC 3339"),
        causation_id: caused.then(|| CAUSATION_ID.to_owned()),
        schema: None,
        extra_headers: mesh_core::Headers::new(),
        body: body().into(),
    }
}

/// The typical event as the transport publishes it: encoded, with the publishing user's
/// `user-id`.
pub fn message(caused: bool) -> WireMessage {
    let mut message = codec::encode(&envelope(caused));
    message.properties.user_id = Some(SOURCE.to_owned());
    message
}

/// [`message`], once converted to the client library's properties, as a running publisher
/// has: the conversion's one-time set-up (the empty header table with room that every
/// conversion clones) is then done, so a benchmark counts only the conversion.
pub fn converted_message(caused: bool) -> WireMessage {
    let message = message(caused);
    let _ = internals::to_properties(&message, false);
    message
}

/// Checks an encoded event: persistent JSON carrying every contract header, and decoded
/// back to the event it came from.
pub fn check_encoded(envelope: &Envelope, message: &WireMessage) {
    let properties = &message.properties;
    assert!(properties.persistent, "an event is persistent");
    assert_eq!(
        properties.content_type.as_deref(),
        Some(codec::CONTENT_TYPE_JSON)
    );
    assert_eq!(properties.message_id.as_deref(), Some(EVENT_ID));
    for (name, value) in [
        (codec::EVENT_ID, EVENT_ID),
        (codec::SOURCE, SOURCE),
        (codec::NODE, NODE),
    ] {
        assert_eq!(
            message.header(name).and_then(HeaderValue::as_str),
            Some(value),
            "{name}"
        );
    }
    assert!(message.header(codec::TIME).is_some(), "x-time");
    assert_eq!(
        message
            .header(codec::CAUSATION_ID)
            .and_then(HeaderValue::as_str),
        envelope.causation_id.as_deref()
    );
    assert_eq!(message.body.len(), BODY_LEN);
    check_decoded(envelope, message, codec::decode(message));
}

/// Checks a decoded event: the event `message` was encoded from.
pub fn check_decoded(
    envelope: &Envelope,
    message: &WireMessage,
    decoded: Result<Envelope, mesh_core::DecodeError>,
) {
    match decoded {
        Ok(decoded) => assert_eq!(&decoded, envelope, "decode(encode(event)) is the event"),
        Err(error) => panic!("the typical event does not decode ({error}): {message:?}"),
    }
}

/// The client library's properties of the typical event, and its body, as a delivery
/// brings them.
pub fn delivery(caused: bool) -> (ClientProperties, String, Vec<u8>) {
    let message = message(caused);
    let properties =
        internals::to_properties(&message, false).expect("the typical event has valid properties");
    (properties, message.routing_key, message.body.to_vec())
}

/// Checks the publish-side conversion: the properties are delivered back as the message.
pub fn check_to_properties(
    message: &WireMessage,
    properties: Result<ClientProperties, TransportError>,
) {
    match properties {
        Ok(mut properties) => check_delivered(
            message,
            &internals::delivered(
                EVENTS_EXCHANGE,
                message.routing_key.clone(),
                &mut properties,
                message.body.to_vec(),
            ),
        ),
        Err(error) => panic!("the typical event's properties were refused: {error}"),
    }
}

/// Checks the consume-side conversion: `delivered` is the message that was published, and
/// decodes.
pub fn check_delivered(published: &WireMessage, delivered: &WireMessage) {
    assert_eq!(delivered, published, "a delivery is what was published");
    if let Err(error) = codec::decode(delivered) {
        panic!("the delivered event does not decode: {error}");
    }
}

/// Checks the content-header frame bound of `message`: at least its headers' and
/// properties' bytes, and small enough for the publisher's cheap path (no exact encoding
/// below AMQP's smallest frame, 4096 bytes).
pub fn check_frame_bound(message: &WireMessage, bound: usize) {
    let properties = &message.properties;
    let strings: usize = [
        &properties.content_type,
        &properties.message_id,
        &properties.user_id,
    ]
    .into_iter()
    .flatten()
    .map(String::len)
    .sum();
    let headers: usize = properties
        .headers
        .iter()
        .map(|(name, value)| name.len() + value.as_str().map_or(0, str::len))
        .sum();
    assert!(
        bound >= strings + headers,
        "bound {bound} below the {} bytes of text it carries",
        strings + headers
    );
    assert!(bound < 4096, "bound {bound} for a typical event");
}

/// Checks a parsed routing key: valid, and split into origin, name and event.
pub fn check_key(parsed: &Result<RoutingKey, KeyError>) {
    match parsed {
        Ok(key) => {
            assert_eq!(key.as_str(), KEY);
            assert_eq!(key.origin(), Origin::Module);
            assert_eq!(key.name(), SOURCE);
            assert_eq!(key.event(), "invoice.paid");
        }
        Err(error) => panic!("{KEY} refused: {error}"),
    }
}

/// The parts [`check_key`]'s key is built from.
pub fn key_parts() -> (Origin, Name, EventName) {
    (
        Origin::Module,
        Name::parse(SOURCE).expect("the fixture's name is valid"),
        EventName::parse("invoice.paid").expect("the fixture's event name is valid"),
    )
}

/// A topic pattern, valid.
pub fn pattern(text: &str) -> TopicPattern {
    TopicPattern::parse(text).expect("the fixture's pattern is valid")
}

/// Checks a parsed pattern: valid, and the text it was parsed from.
pub fn check_pattern(text: &str, parsed: &Result<TopicPattern, KeyError>) {
    match parsed {
        Ok(pattern) => assert_eq!(pattern.as_str(), text),
        Err(error) => panic!("{text} refused: {error}"),
    }
}

/// A window on channel 1 that has already put [`BATCH`] messages through, so its queues
/// hold the room a busy publisher's do; the time to feed it.
pub fn warm_window() -> (Window, Instant) {
    let now = Instant::now();
    let mut window = Window::new(now);
    window.channel_opened(1);
    let mut last = 0;
    for id in 0..BATCH {
        window.push(id);
        if let Some(unsent) = window.pop_unsent() {
            last = window.sent(unsent, now);
        }
    }
    assert!(window.on_ack(1, last, true, now), "channel 1 is current");
    let settled = std::iter::from_fn(|| window.poll_settled()).count();
    assert_eq!(settled as u64, BATCH, "the warm-up settled everything");
    (window, now)
}

/// What a window benchmark saw settle: how many messages, how many of them acked, whether in
/// publish order.
#[derive(Debug, Default)]
pub struct Settled {
    /// Messages settled.
    pub count: u64,
    /// Of them, acked.
    pub acked: u64,
    /// They settled in the order they were published.
    pub in_order: bool,
}

/// Checks a window benchmark: [`BATCH`] messages published, all acked in publish order, and
/// nothing left in the window.
pub fn check_window(window: &Window, settled: &Settled) {
    assert_eq!(settled.count, BATCH, "messages settled");
    assert_eq!(settled.acked, BATCH, "messages acked");
    assert!(settled.in_order, "settled in publish order");
    assert_eq!(window.in_flight(), 0, "nothing in flight");
    assert_eq!(window.backlog(), 0, "nothing waiting");
}

/// Checks a flush that acks `1..=BATCH` in one `multiple` frame, answering `waiters`.
pub fn check_one_multiple_ack(flushed: &Flushed, waiters: usize) {
    assert!(!flushed.lost);
    assert_eq!(
        flushed.frames,
        [AckFrame::Ack {
            tag: BATCH,
            multiple: true
        }]
    );
    assert_eq!(flushed.waiters.len(), waiters);
}

/// Checks a flush with tag `BATCH / 2` still undecided: one `multiple` ack below it, then
/// one ack per tag above it.
pub fn check_ack_around_gap(flushed: &Flushed) {
    let gap = BATCH / 2;
    let mut expected = vec![AckFrame::Ack {
        tag: gap - 1,
        multiple: true,
    }];
    expected.extend((gap + 1..=BATCH).map(|tag| AckFrame::Ack {
        tag,
        multiple: false,
    }));
    assert!(!flushed.lost);
    assert_eq!(flushed.frames, expected);
    assert_eq!(flushed.waiters.len() as u64, BATCH - 1);
}
