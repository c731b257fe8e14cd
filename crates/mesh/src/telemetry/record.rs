//! Where the SDK counts: thin wrappers over the `metrics` facade, so the names and labels
//! live in one place (`super::names`). Without a recorder installed every call is a no-op.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mesh_core::{DeadReason, Timestamp, TransportError, TransportErrorKind};
use metrics::{counter, histogram, Key, Level, Metadata, SharedString};

use super::names;

/// A label value made once (a source, a queue) and shared by every sample: recording takes
/// a reference count, not an allocation.
#[derive(Debug, Clone)]
pub(crate) struct Label(SharedString);

impl Label {
    pub(crate) fn new(value: &str) -> Label {
        Label(SharedString::from(std::sync::Arc::<str>::from(value)))
    }

    fn value(&self) -> SharedString {
        self.0.clone()
    }
}

/// What the `metrics` macros attach to a sample registered here.
static METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// A bus's `source` label with the keys of the metrics every emit records, built once: an
/// emit then costs the recorder's lookup, as through the macros, but no key (and its
/// allocation and hashing) per sample. The recorder is still looked up at each sample, so
/// one installed after the bus was built is used.
#[derive(Debug, Clone)]
pub(crate) struct Source(Arc<SourceKeys>);

#[derive(Debug)]
struct SourceKeys {
    label: Label,
    emitted: Key,
    confirmed: Key,
    confirm_latency: Key,
}

impl Source {
    pub(crate) fn new(value: &str) -> Source {
        let label = Label::new(value);
        let key = |name: &'static str| {
            Key::from_parts(name, vec![metrics::Label::new("source", label.value())])
        };
        Source(Arc::new(SourceKeys {
            emitted: key(names::EMITTED),
            confirmed: key(names::CONFIRMED),
            confirm_latency: key(names::CONFIRM_LATENCY),
            label,
        }))
    }
}

/// The transport took an emit into its unconfirmed window.
pub(crate) fn emitted(source: &Source) {
    metrics::with_recorder(|r| r.register_counter(&source.0.emitted, &METADATA)).increment(1);
}

/// An emit failed before the transport took it (backpressure, closed, too large, …).
pub(crate) fn emit_refused(source: &Source, error: &TransportError) {
    counter!(
        names::EMIT_FAILED,
        "source" => source.0.label.value(),
        "reason" => reason(error.kind()),
    )
    .increment(1);
}

/// The broker's answer to one emit, `since` the transport took it.
pub(crate) fn confirmed(source: &Source, since: Instant, result: &Result<(), TransportError>) {
    match result {
        Ok(()) => {
            let keys = &source.0;
            metrics::with_recorder(|r| {
                r.register_counter(&keys.confirmed, &METADATA).increment(1);
                r.register_histogram(&keys.confirm_latency, &METADATA)
                    .record(since.elapsed().as_secs_f64());
            });
        }
        Err(e) if *e.kind() == TransportErrorKind::Nacked => {
            counter!(names::NACKED, "source" => source.0.label.value()).increment(1);
        }
        Err(e) => emit_refused(source, e),
    }
}

/// A consumer's `queue` label with the keys of the metrics every delivery records, built
/// once, as [`Source`] does for emits: a delivery then costs the recorder's lookups, but no
/// key (its label vector, hashing) per sample.
#[derive(Debug, Clone)]
pub(crate) struct Queue(Arc<QueueKeys>);

#[derive(Debug)]
struct QueueKeys {
    label: Label,
    lag: Key,
    handled: Key,
    handler_duration: Key,
    failed: Key,
}

impl Queue {
    pub(crate) fn new(value: &str) -> Queue {
        let label = Label::new(value);
        let key = |name: &'static str| {
            Key::from_parts(name, vec![metrics::Label::new("queue", label.value())])
        };
        Queue(Arc::new(QueueKeys {
            lag: key(names::LAG),
            handled: key(names::HANDLED),
            handler_duration: key(names::HANDLER_DURATION),
            failed: key(names::FAILED),
            label,
        }))
    }

    /// The queue's name.
    pub(crate) fn value(&self) -> SharedString {
        self.0.label.value()
    }
}

/// A delivery arrived: the lag since its emit, for first attempts only (a retry's lag would
/// be the ladder's delay).
pub(crate) fn delivered(queue: &Queue, emitted_at: Timestamp, attempt: u32) {
    if attempt != 1 {
        return;
    }
    let lag_nanos = Timestamp::now().unix_nanos() - emitted_at.unix_nanos();
    // Clocks of two nodes disagree a little: a negative lag is recorded as none.
    let lag = Duration::from_nanos(u64::try_from(lag_nanos).unwrap_or(0));
    metrics::with_recorder(|r| {
        r.register_histogram(&queue.0.lag, &METADATA)
            .record(lag.as_secs_f64());
    });
}

/// Handlers ran on one delivery for `took`; `failed` when any failed.
pub(crate) fn handled(queue: &Queue, took: Duration, failed: bool) {
    let keys = &queue.0;
    metrics::with_recorder(|r| {
        r.register_counter(&keys.handled, &METADATA).increment(1);
        r.register_histogram(&keys.handler_duration, &METADATA)
            .record(took.as_secs_f64());
        if failed {
            r.register_counter(&keys.failed, &METADATA).increment(1);
        }
    });
}

/// A retry copy was scheduled (its publish confirmed, the original acked).
pub(crate) fn retried(queue: &Queue) {
    counter!(names::RETRIED, "queue" => queue.value()).increment(1);
}

/// A dead letter was set aside (its publish confirmed, the original acked).
pub(crate) fn dead_lettered(queue: &Queue, reason: DeadReason) {
    counter!(
        names::DEAD_LETTERED,
        "queue" => queue.value(),
        "reason" => reason.as_str(),
    )
    .increment(1);
}

/// An event no handler of the queue matches was acked.
pub(crate) fn unmatched(queue: &Queue) {
    counter!(names::UNMATCHED, "queue" => queue.value()).increment(1);
}

/// Settling a delivery failed; the broker will redeliver it.
pub(crate) fn settle_failed(queue: &Queue, action: &'static str) {
    counter!(
        names::SETTLE_FAILED,
        "queue" => queue.value(),
        "action" => action,
    )
    .increment(1);
}

/// A call to `tool` ended, after `took`, with `outcome` (`ok`, `remote-error`, `timeout`,
/// `no-server`, …).
pub(crate) fn called(tool: &str, took: Duration, outcome: &'static str) {
    counter!(
        names::CALLS,
        "tool" => tool.to_owned(),
        "outcome" => outcome,
    )
    .increment(1);
    histogram!(names::CALL_DURATION, "tool" => tool.to_owned()).record(took.as_secs_f64());
}

/// A request to `tool` was answered with `outcome` (`ok` or `error`).
pub(crate) fn served(tool: &str, outcome: &'static str) {
    counter!(
        names::SERVED,
        "tool" => tool.to_owned(),
        "outcome" => outcome,
    )
    .increment(1);
}

/// A stable, lowercase label for a transport error kind.
pub(crate) fn reason(kind: &TransportErrorKind) -> &'static str {
    match kind {
        TransportErrorKind::ConnectionLost => "connection-lost",
        TransportErrorKind::Closed => "closed",
        TransportErrorKind::Nacked => "nacked",
        TransportErrorKind::Unroutable => "unroutable",
        TransportErrorKind::TooLarge { .. } => "too-large",
        TransportErrorKind::HeadersTooLarge { .. } => "headers-too-large",
        TransportErrorKind::Timeout => "timeout",
        TransportErrorKind::Backpressure => "backpressure",
        TransportErrorKind::NoServer => "no-server",
        TransportErrorKind::Incompatible { .. } => "incompatible",
        TransportErrorKind::AccessRefused => "access-refused",
        TransportErrorKind::Forbidden { .. } => "forbidden",
        TransportErrorKind::Tls => "tls",
        TransportErrorKind::InvalidOptions => "invalid-options",
        TransportErrorKind::Protocol => "protocol",
        _ => "other",
    }
}
