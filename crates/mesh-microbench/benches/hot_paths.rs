//! mesh's hot paths, each counted once under Callgrind: `bash scripts/microbench.sh`
//! (docs/BENCHMARKS.md, "Micro-benchmarks of the hot paths").
//!
//! Only the benchmark function is counted: its input comes from a `setup` and its result
//! goes to a `teardown` that checks it, both outside the count. A function hands its
//! inputs back with its result, so that dropping them is not counted either. The window and
//! ack-tracker benchmarks put [`BATCH`] messages through; their count per message is the
//! total divided by it (the script prints both).

// gungraun hands a benchmark's result to its teardown by value, and the teardowns only
// read it.
#![allow(clippy::needless_pass_by_value)]

use std::hint::black_box;
use std::time::Instant;

use gungraun::{
    library_benchmark, library_benchmark_group, main, Callgrind, EventKind, LibraryBenchmarkConfig,
};
use mesh::bench_internals::Consumer;
use mesh_amqp::bench_internals::{self as internals, AckFrame, AckTracker, ClientProperties};
use mesh_amqp::bench_internals::{Flushed, Window};
use mesh_core::naming::EVENTS_EXCHANGE;
use mesh_core::Delivery;
use mesh_core::{
    codec, DecodeError, Envelope, EventName, KeyError, Name, Origin, RoutingKey, TopicPattern,
    TransportError, WireMessage,
};
use mesh_microbench::dispatch::Settles;
use mesh_microbench::{Settled, BATCH, KEY};
use std::sync::Arc;

// 0. The bound of each count: the checked-in baseline plus a tolerance.

/// Each benchmark's count of instructions as checked in, one `<function>::<id><TAB><count>`
/// a line (`#` starts a comment). A count that changes on purpose is written here in the same
/// commit (the script prints the lines to paste).
const BASELINE: &str = include_str!("../baseline.tsv");

/// How far above its baseline a count may go before the run fails, in percent: above what
/// a count moves with no change to the code it measures (nothing between runs of one build;
/// up to about 2 % between builds, as code and data move), below the 5 % a regression must
/// be caught at. `delivered` varies more (the client's header order changes with each
/// process): its baseline is the highest count seen.
const TOLERANCE_PERCENT: u64 = 3;

/// The configuration of the benchmark `id`: its count may not pass its baseline by more
/// than [`TOLERANCE_PERCENT`] (a hard limit: gungraun fails the run, with exit code 3).
fn limit(id: &str) -> LibraryBenchmarkConfig {
    let count = baseline(BASELINE, id).unwrap_or_else(|| {
        panic!("no count for `{id}` in crates/mesh-microbench/baseline.tsv: add its line")
    });
    let mut config = LibraryBenchmarkConfig::default();
    config.tool(
        Callgrind::default()
            .hard_limits([(EventKind::Ir, count + count * TOLERANCE_PERCENT / 100)]),
    );
    config
}

/// The count of `id` in a baseline's text.
fn baseline(text: &str, id: &str) -> Option<u64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_once('\t'))
        .find(|(name, _)| name.trim() == id)
        .and_then(|(_, count)| count.trim().parse().ok())
}

// 1. The codec: an event to the message that carries it, and back.

fn encoded((envelope, message): (Envelope, WireMessage)) {
    mesh_microbench::check_encoded(&envelope, &message);
}

#[library_benchmark]
#[bench::typical(args = (false), setup = mesh_microbench::envelope, teardown = encoded, config = limit("encode::typical"))]
#[bench::caused(args = (true), setup = mesh_microbench::envelope, teardown = encoded, config = limit("encode::caused"))]
fn encode(envelope: Envelope) -> (Envelope, WireMessage) {
    let message = codec::encode(black_box(&envelope));
    (envelope, black_box(message))
}

fn decoded((message, decoded): (WireMessage, Result<Envelope, DecodeError>)) {
    let caused = message.header(codec::CAUSATION_ID).is_some();
    mesh_microbench::check_decoded(&mesh_microbench::envelope(caused), &message, decoded);
}

#[library_benchmark]
#[bench::typical(args = (false), setup = mesh_microbench::message, teardown = decoded, config = limit("decode::typical"))]
#[bench::caused(args = (true), setup = mesh_microbench::message, teardown = decoded, config = limit("decode::caused"))]
fn decode(message: WireMessage) -> (WireMessage, Result<Envelope, DecodeError>) {
    let envelope = codec::decode(black_box(&message));
    (message, black_box(envelope))
}

library_benchmark_group!(name = codec_group; benchmarks = encode, decode);

// 2. The edge to the client library: properties on publish, a delivery back, the frame bound.

fn converted((message, properties): (WireMessage, Result<ClientProperties, TransportError>)) {
    mesh_microbench::check_to_properties(&message, properties);
}

#[library_benchmark]
#[bench::event(args = (true), setup = mesh_microbench::converted_message, teardown = converted, config = limit("to_properties::event"))]
fn to_properties(message: WireMessage) -> (WireMessage, Result<ClientProperties, TransportError>) {
    let properties = internals::to_properties(black_box(&message), false);
    (message, black_box(properties))
}

fn consumed((_, message): (ClientProperties, WireMessage)) {
    let caused = message.header(codec::CAUSATION_ID).is_some();
    mesh_microbench::check_delivered(&mesh_microbench::message(caused), &message);
}

// The consume-side conversion: the client library's properties taken apart (their texts
// moved out), what is left of them handed back and dropped outside the count. (A doc comment
// here is refused by the harness's attribute macro.)
#[library_benchmark]
#[bench::event(args = (true), setup = mesh_microbench::delivery, teardown = consumed, config = limit("delivered::event"))]
fn delivered(
    (properties, routing_key, body): (ClientProperties, String, Vec<u8>),
) -> (ClientProperties, WireMessage) {
    let mut properties = properties;
    let message = internals::delivered(
        black_box(EVENTS_EXCHANGE),
        black_box(routing_key),
        black_box(&mut properties),
        black_box(body),
    );
    (properties, black_box(message))
}

fn bounded((message, bound): (WireMessage, usize)) {
    mesh_microbench::check_frame_bound(&message, bound);
}

#[library_benchmark]
#[bench::event(args = (true), setup = mesh_microbench::message, teardown = bounded, config = limit("header_frame_bound::event"))]
fn header_frame_bound(message: WireMessage) -> (WireMessage, usize) {
    let bound = internals::header_frame_bound(black_box(&message));
    (message, black_box(bound))
}

library_benchmark_group!(
    name = convert_group;
    benchmarks = to_properties, delivered, header_frame_bound
);

// 3. Keys and patterns.

fn key_checked(parsed: Result<RoutingKey, KeyError>) {
    mesh_microbench::check_key(&parsed);
}

fn key_refused(parsed: Result<RoutingKey, KeyError>) {
    assert_eq!(parsed, Err(KeyError::TooFewWords { words: 2 }));
}

#[library_benchmark]
#[bench::typical(args = (KEY), teardown = key_checked, config = limit("key_parse::typical"))]
#[bench::too_few_words(args = ("module.billing"), teardown = key_refused, config = limit("key_parse::too_few_words"))]
fn key_parse(text: &str) -> Result<RoutingKey, KeyError> {
    black_box(RoutingKey::parse(black_box(text)))
}

fn key_built((_, _, built): (Name, EventName, Result<RoutingKey, KeyError>)) {
    mesh_microbench::check_key(&built);
}

#[library_benchmark]
#[bench::typical(setup = mesh_microbench::key_parts, teardown = key_built, config = limit("key_new::typical"))]
fn key_new(
    (origin, name, event): (Origin, Name, EventName),
) -> (Name, EventName, Result<RoutingKey, KeyError>) {
    let key = RoutingKey::new(black_box(origin), black_box(&name), black_box(&event));
    (name, event, black_box(key))
}

fn pattern_checked((text, parsed): (&str, Result<TopicPattern, KeyError>)) {
    mesh_microbench::check_pattern(text, &parsed);
}

#[library_benchmark]
#[bench::wildcards(args = ("module.*.invoice.#"), teardown = pattern_checked, config = limit("pattern_parse::wildcards"))]
fn pattern_parse(text: &str) -> (&str, Result<TopicPattern, KeyError>) {
    (text, black_box(TopicPattern::parse(black_box(text))))
}

fn pattern_matched((pattern, expected, matched): (TopicPattern, bool, bool)) {
    assert_eq!(matched, expected, "{} on {KEY}", pattern.as_str());
}

fn pattern_case((text, expected): (&str, bool)) -> (TopicPattern, bool) {
    (mesh_microbench::pattern(text), expected)
}

#[library_benchmark]
#[bench::literal(args = ((KEY, true)), setup = pattern_case, teardown = pattern_matched, config = limit("pattern_matches::literal"))]
#[bench::star(args = (("module.*.invoice.*", true)), setup = pattern_case, teardown = pattern_matched, config = limit("pattern_matches::star"))]
#[bench::hash_tail(args = (("module.billing.#", true)), setup = pattern_case, teardown = pattern_matched, config = limit("pattern_matches::hash_tail"))]
#[bench::hash_head(args = (("#.paid", true)), setup = pattern_case, teardown = pattern_matched, config = limit("pattern_matches::hash_head"))]
#[bench::miss(args = (("module.shipping.#", false)), setup = pattern_case, teardown = pattern_matched, config = limit("pattern_matches::miss"))]
fn pattern_matches((pattern, expected): (TopicPattern, bool)) -> (TopicPattern, bool, bool) {
    let matched = black_box(&pattern).matches(black_box(KEY));
    (pattern, expected, black_box(matched))
}

library_benchmark_group!(
    name = key_group;
    benchmarks = key_parse, key_new, pattern_parse, pattern_matches
);

// 4. The publisher's unconfirmed window and the consumer's ack tracker, BATCH at a time.

fn window_checked((window, settled): (Window, Settled)) {
    mesh_microbench::check_window(&window, &settled);
}

/// Publishes BATCH messages through `window` (push, pop_unsent, sent), has the broker ack
/// them one by one or with one `multiple` ack, and takes what settled.
fn window_cycle(window: &mut Window, now: Instant, multiple: bool) -> Settled {
    let mut first = None;
    let mut last = 0;
    for id in 0..BATCH {
        window.push(id);
        if let Some(unsent) = window.pop_unsent() {
            last = window.sent(unsent, now);
            first.get_or_insert(last);
        }
    }
    let first = first.unwrap_or(last + 1);
    if multiple {
        window.on_ack(1, last, true, now);
    } else {
        for tag in first..=last {
            window.on_ack(1, tag, false, now);
        }
    }
    let mut settled = Settled {
        in_order: true,
        ..Settled::default()
    };
    while let Some((id, acked)) = window.poll_settled() {
        settled.in_order &= id == settled.count;
        settled.count += 1;
        settled.acked += u64::from(acked);
    }
    settled
}

#[library_benchmark]
#[bench::single_acks_x64(args = (false), setup = warm, teardown = window_checked, config = limit("window::single_acks_x64"))]
#[bench::multiple_ack_x64(args = (true), setup = warm, teardown = window_checked, config = limit("window::multiple_ack_x64"))]
fn window((mut window, now, multiple): (Window, Instant, bool)) -> (Window, Settled) {
    let settled = window_cycle(black_box(&mut window), now, black_box(multiple));
    (window, black_box(settled))
}

fn warm(multiple: bool) -> (Window, Instant, bool) {
    let (window, now) = mesh_microbench::warm_window();
    (window, now, multiple)
}

fn one_multiple_ack((_, flushed): (AckTracker, Flushed)) {
    mesh_microbench::check_one_multiple_ack(&flushed, usize::try_from(BATCH).unwrap_or(0));
}

fn one_batch_ack((_, flushed): (AckTracker, Flushed)) {
    mesh_microbench::check_one_multiple_ack(&flushed, 1);
}

fn around_gap((_, flushed): (AckTracker, Flushed)) {
    mesh_microbench::check_ack_around_gap(&flushed);
}

// Deliveries `1..=BATCH` handed out, then each acked (but `skip`), then one flush.
#[library_benchmark]
#[bench::in_order_x64(args = (AckTracker::default(), None), teardown = one_multiple_ack, config = limit("ack_tracker::in_order_x64"))]
#[bench::gap_x64(args = (AckTracker::default(), Some(BATCH / 2)), teardown = around_gap, config = limit("ack_tracker::gap_x64"))]
fn ack_tracker(mut tracker: AckTracker, skip: Option<u64>) -> (AckTracker, Flushed) {
    for tag in 1..=BATCH {
        tracker.delivered(black_box(tag));
    }
    for tag in 1..=BATCH {
        if Some(tag) != skip {
            tracker.ack(black_box(tag));
        }
    }
    let flushed = tracker.flush(black_box(true));
    (tracker, black_box(flushed))
}

// Deliveries `1..=BATCH` handed out, then acked together (`Delivery::ack_all`), one flush.
#[library_benchmark]
#[bench::batch_x64(args = (AckTracker::default()), teardown = one_batch_ack, config = limit("ack_tracker_ack_many::batch_x64"))]
fn ack_tracker_ack_many(mut tracker: AckTracker) -> (AckTracker, Flushed) {
    for tag in 1..=BATCH {
        tracker.delivered(black_box(tag));
    }
    tracker.ack_many(black_box(1..=BATCH), 0);
    let flushed = tracker.flush(black_box(true));
    (tracker, black_box(flushed))
}

fn each_flushed((_, single_frames): (AckTracker, u64)) {
    assert_eq!(single_frames, BATCH, "one single ack per flush");
}

// Each delivery handed out, acked and flushed on its own (a consumer that acks slower than
// the tracker sends); counts the flushes that sent exactly its single ack.
#[library_benchmark]
#[bench::each_x64(args = (AckTracker::default()), teardown = each_flushed, config = limit("ack_tracker_flush_each::each_x64"))]
fn ack_tracker_flush_each(mut tracker: AckTracker) -> (AckTracker, u64) {
    let mut single_frames = 0;
    for tag in 1..=BATCH {
        tracker.delivered(black_box(tag));
        tracker.ack(black_box(tag));
        let flushed = tracker.flush(black_box(true));
        single_frames += u64::from(
            flushed.frames
                == [AckFrame::Ack {
                    tag,
                    multiple: false,
                }],
        );
    }
    (tracker, black_box(single_frames))
}

library_benchmark_group!(
    name = bookkeeping_group;
    benchmarks = window, ack_tracker, ack_tracker_ack_many, ack_tracker_flush_each
);

// 5. The SDK's consumer loop: a delivery decoded, matched, handled (a handler that
// succeeds, no user layer) and acked.

fn dispatched((_, settles): (Consumer, Arc<Settles>)) {
    mesh_microbench::dispatch::check_dispatched(&settles);
}

#[library_benchmark]
#[bench::one_handler_x64(args = (KEY), setup = mesh_microbench::dispatch::consumer_and_deliveries, teardown = dispatched, config = limit("dispatch::one_handler_x64"))]
fn dispatch(
    (consumer, deliveries, settles): (Consumer, Vec<Delivery>, Arc<Settles>),
) -> (Consumer, Arc<Settles>) {
    for delivery in deliveries {
        consumer.deliver(black_box(delivery));
    }
    (consumer, settles)
}

library_benchmark_group!(name = dispatch_group; benchmarks = dispatch);

main!(
    // Instructions only: no cache simulation, whose estimates are not what is asked here
    // and which slows Callgrind down.
    config = LibraryBenchmarkConfig::default()
        .tool(Callgrind::with_args(["--cache-sim=no"]).format([EventKind::Ir])),
    library_benchmark_groups = [
        codec_group,
        convert_group,
        key_group,
        bookkeeping_group,
        dispatch_group
    ]
);
