//! The metrics the outbox, its relay and the inbox record, through the [`metrics`] facade as
//! the SDK does (see `mesh::telemetry`): a binary's recorder gets them, and without one every
//! call is a no-op.

use metrics::{counter, gauge, histogram};

use crate::sql::Counts;

/// The names of the metrics, with their labels.
///
/// Counters end in `_total`; durations are in seconds.
pub mod names {
    /// Counter `{source}`: outbox events the relay published, the broker confirmed and the
    /// relay marked sent.
    pub const RELAYED: &str = "mesh_outbox_relayed_total";
    /// Counter `{source, reason}`: outbox rows given up for good (a row that is not an
    /// event of this library, a message larger than the broker takes), kept with the
    /// reason in the row's `error` until the cleanup.
    pub const GIVEN_UP: &str = "mesh_outbox_given_up_total";
    /// Counter `{source}`: times a relay's source failed (the broker, the database) and was
    /// tried again after the relay's retry delay.
    pub const RELAY_FAILED: &str = "mesh_outbox_relay_failed_total";
    /// Histogram `{source}`: the relay's lag, from an event's `x-time` (its `emit_in`) to
    /// the broker's confirm of its publish.
    pub const RELAY_LAG: &str = "mesh_outbox_relay_lag_seconds";
    /// Gauge: rows not yet sent (set by each relay's cleanup round).
    pub const PENDING: &str = "mesh_outbox_pending_rows";
    /// Gauge: rows sent, kept until the cleanup deletes them (set likewise).
    pub const SENT: &str = "mesh_outbox_sent_rows";
    /// Gauge: the age of the oldest unsent row, in seconds (set likewise).
    pub const OLDEST_PENDING: &str = "mesh_outbox_oldest_pending_seconds";
    /// Counter: sent rows the cleanup deleted.
    pub const CLEANED: &str = "mesh_outbox_cleaned_total";
    /// Counter `{consumer}`: deliveries the inbox found processed already, acked without
    /// running the handler's work again.
    pub const INBOX_DUPLICATES: &str = "mesh_inbox_duplicates_total";
    /// Counter `{consumer}`: events whose work the inbox committed.
    pub const INBOX_PROCESSED: &str = "mesh_inbox_processed_total";
    /// Gauge: the bytes of the unsent events an emit spool holds, as counted against its
    /// bound.
    pub const SPOOL_PENDING_BYTES: &str = "mesh_spool_pending_bytes";
    /// Counter: emits an emit spool refused because it was full (`SpoolFull`).
    pub const SPOOL_FULL: &str = "mesh_spool_full_total";
}

pub(crate) fn relayed(source: &str, count: usize) {
    counter!(names::RELAYED, "source" => source.to_owned()).increment(count as u64);
}

/// The lag histogram of `source`, recorded at each confirm.
pub(crate) fn lag(source: &str) -> metrics::Histogram {
    histogram!(names::RELAY_LAG, "source" => source.to_owned())
}

pub(crate) fn given_up(source: &str, reason: &'static str) {
    counter!(names::GIVEN_UP, "source" => source.to_owned(), "reason" => reason).increment(1);
}

pub(crate) fn relay_failed(source: &str) {
    counter!(names::RELAY_FAILED, "source" => source.to_owned()).increment(1);
}

pub(crate) fn table(counts: &Counts, cleaned: u64) {
    gauge!(names::PENDING).set(counts.pending as f64);
    gauge!(names::SENT).set(counts.sent as f64);
    gauge!(names::OLDEST_PENDING).set(counts.oldest_pending_seconds);
    counter!(names::CLEANED).increment(cleaned);
}

pub(crate) fn spool_pending(bytes: u64) {
    gauge!(names::SPOOL_PENDING_BYTES).set(bytes as f64);
}

pub(crate) fn spool_full() {
    counter!(names::SPOOL_FULL).increment(1);
}

pub(crate) fn inbox(consumer: &str, duplicate: bool) {
    let name = if duplicate {
        names::INBOX_DUPLICATES
    } else {
        names::INBOX_PROCESSED
    };
    counter!(name, "consumer" => consumer.to_owned()).increment(1);
}
