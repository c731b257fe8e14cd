//! What the audit logger counts, through the `metrics` facade: the names (in [`names`], the
//! `mesh_audit_*` family beside the SDK's `mesh_*`) and thin recording functions, so names
//! and labels live in one place. Without a recorder installed every call is a no-op; the
//! binaries install one with `--metrics-addr`.

use std::time::Duration;

use mesh_core::DeadReason;
use metrics::{counter, gauge, histogram};

/// The names of the metrics the audit logger records, with their labels.
///
/// Counters end in `_total`; durations are histograms in seconds.
pub mod names {
    /// Counter: events stored (new rows).
    pub const EVENTS_STORED: &str = "mesh_audit_events_stored_total";
    /// Counter: event deliveries skipped because they were stored already: redeliveries and
    /// resends of a stored event (same id, routing key, source and body), or of a stored id
    /// conflict. Not the conflicts themselves ([`ID_CONFLICTS`]).
    pub const DUPLICATES: &str = "mesh_audit_duplicates_total";
    /// Counter: events that reused the id of a different stored event (another routing
    /// key, source or body), kept in `event_conflicts`; each conflicting event counted once.
    pub const ID_CONFLICTS: &str = "mesh_audit_id_conflicts_total";
    /// Counter: dead letters stored (new rows).
    pub const DEAD_LETTERS_STORED: &str = "mesh_audit_dead_letters_stored_total";
    /// Counter `{reason}`: events the logger dead-lettered instead of storing them
    /// (`undecodable`: they break the contract; `forged-source`: a `module` or `node` event
    /// whose `x-source` is not the key's owner, or with
    /// [`AuditOptions::enforce_identity`](crate::AuditOptions::enforce_identity) an event
    /// whose validated user is not; `permanent`: the database refused them).
    pub const REJECTED: &str = "mesh_audit_rejected_total";
    /// Counter: transactions committed.
    pub const BATCHES: &str = "mesh_audit_batches_total";
    /// Counter `{kind}`: writes to the store that failed: `transient` (retried with
    /// backoff) or `refused` (the database refused the content).
    pub const WRITE_ERRORS: &str = "mesh_audit_store_write_errors_total";
    /// Histogram: from a batch's first write attempt to its commit, retries included.
    pub const BATCH_DURATION: &str = "mesh_audit_batch_duration_seconds";
    /// Counter `{table}`: rows retention removed (`events`, `event_conflicts`,
    /// `dead_letters`, `event_rollups`), by arrival (see `AuditOptions::retain`).
    pub const PRUNED_ROWS: &str = "mesh_audit_pruned_rows_total";
    /// Gauge: when the oldest event kept arrived, in seconds since the Unix epoch (set by
    /// retention each time it finds nothing more to remove; absent while the store is empty).
    pub const OLDEST_EVENT_ARRIVAL: &str = "mesh_audit_oldest_event_arrival_seconds";
}

/// Rows a retention step removed.
pub(crate) fn pruned(step: &crate::retention::Pruned) {
    for (table, rows) in [
        ("events", step.events),
        ("event_conflicts", step.conflicts),
        ("dead_letters", step.dead_letters),
        ("event_rollups", step.rollups),
    ] {
        if rows > 0 {
            counter!(names::PRUNED_ROWS, "table" => table).increment(rows);
        }
    }
}

/// When the oldest event kept arrived.
pub(crate) fn oldest_arrival(oldest: Option<mesh_core::Timestamp>) {
    if let Some(oldest) = oldest {
        let seconds = oldest.as_offset_date_time().unix_timestamp_nanos() as f64 / 1e9;
        gauge!(names::OLDEST_EVENT_ARRIVAL).set(seconds);
    }
}

/// A transaction committed: `events` new event rows and `conflicts` new id conflicts out of
/// `deliveries` event deliveries (the rest were duplicates), and `dead_letters` new
/// dead-letter rows, after `took`.
pub(crate) fn committed(
    events: u64,
    conflicts: u64,
    deliveries: u64,
    dead_letters: u64,
    took: Duration,
) {
    counter!(names::BATCHES).increment(1);
    counter!(names::EVENTS_STORED).increment(events);
    counter!(names::ID_CONFLICTS).increment(conflicts);
    counter!(names::DUPLICATES).increment(duplicates(events, conflicts, deliveries));
    counter!(names::DEAD_LETTERS_STORED).increment(dead_letters);
    histogram!(names::BATCH_DURATION).record(took.as_secs_f64());
}

/// The event deliveries of a transaction that were neither new events nor new conflicts.
pub(crate) fn duplicates(events: u64, conflicts: u64, deliveries: u64) -> u64 {
    deliveries.saturating_sub(events).saturating_sub(conflicts)
}

/// An event was dead-lettered by the logger with `reason`.
pub(crate) fn rejected(reason: DeadReason) {
    counter!(names::REJECTED, "reason" => reason.as_str()).increment(1);
}

/// A write failed: `transient` or `refused`.
pub(crate) fn write_failed(kind: &'static str) {
    counter!(names::WRITE_ERRORS, "kind" => kind).increment(1);
}

/// Help text for every metric the audit logger records; call it once a recorder is
/// installed.
pub fn describe() {
    use metrics::{describe_counter, describe_histogram, Unit};
    use names::*;

    describe_counter!(EVENTS_STORED, "Events stored (new rows).");
    describe_counter!(
        DUPLICATES,
        "Event deliveries skipped because they were stored already (redeliveries and resends)."
    );
    describe_counter!(
        ID_CONFLICTS,
        "Events that reused the id of a different stored event, kept as conflicts."
    );
    describe_counter!(DEAD_LETTERS_STORED, "Dead letters stored (new rows).");
    describe_counter!(
        REJECTED,
        "Events dead-lettered instead of stored, by reason."
    );
    describe_counter!(BATCHES, "Transactions committed.");
    describe_counter!(
        PRUNED_ROWS,
        "Rows retention removed, by table, by arrival time."
    );
    metrics::describe_gauge!(
        OLDEST_EVENT_ARRIVAL,
        Unit::Seconds,
        "When the oldest event kept arrived, in seconds since the Unix epoch."
    );
    describe_counter!(
        WRITE_ERRORS,
        "Writes to the audit store that failed, by kind (transient or refused)."
    );
    describe_histogram!(
        BATCH_DURATION,
        Unit::Seconds,
        "From a batch's first write attempt to its commit, retries included."
    );
}
