//! The logger's retention (`--retain`): what arrived longer ago than the retention is removed
//! continuously, a bounded step at a time between the logger's batches, by arrival
//! (`received_at`), never by an event's `x-time`. See [`Store::prune_step`](crate::Store::prune_step) and decision 0022.

use std::sync::Mutex;
use std::time::Duration;

use mesh_core::Timestamp;
use tokio::time::Instant;

use crate::error::Error;

/// The shortest retention accepted: a minute.
pub const MIN_RETENTION: Duration = Duration::from_secs(60);

/// How long the logger keeps what it stores: see [`AuditOptions::retain`](crate::AuditOptions::retain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    events: Duration,
    rollups: Option<Duration>,
    pending_dead_letters: bool,
    chunk: usize,
    pub(crate) interval: Duration,
}

impl Retention {
    /// Events, id conflicts and re-driven dead letters are kept for `events` after their
    /// arrival (at least [`MIN_RETENTION`]); the rollups and pending dead letters are kept.
    pub fn new(events: Duration) -> Retention {
        Retention {
            events,
            rollups: None,
            pending_dead_letters: false,
            chunk: DEFAULT_PRUNE_CHUNK,
            interval: Duration::from_secs(60),
        }
    }

    /// Rollup minutes are kept for this long (by the events' `x-time`, the only time a
    /// rollup has; at least the events' retention); `None` (the default) keeps them all.
    pub fn rollups(mut self, rollups: Option<Duration>) -> Self {
        self.rollups = rollups;
        self
    }

    /// Also removes dead letters not re-driven yet (default false: never without this).
    pub fn pending_dead_letters(mut self, remove: bool) -> Self {
        self.pending_dead_letters = remove;
        self
    }

    /// Rows per delete statement (default [`DEFAULT_PRUNE_CHUNK`]).
    pub fn chunk(mut self, chunk: usize) -> Self {
        self.chunk = chunk;
        self
    }

    /// How often to look for rows to remove once none are left (default a minute).
    pub fn interval(mut self, interval: Duration) -> Self {
        self.interval = interval;
        self
    }

    /// The events' retention.
    pub fn get_events(&self) -> Duration {
        self.events
    }

    /// The rollups' retention.
    pub fn get_rollups(&self) -> Option<Duration> {
        self.rollups
    }

    /// Checks the retention.
    pub fn validate(&self) -> Result<(), Error> {
        if self.events < MIN_RETENTION {
            return Err(Error::options("the retention must be at least a minute"));
        }
        if self.rollups.is_some_and(|r| r < self.events) {
            return Err(Error::options(
                "the rollups' retention must be at least the events' retention",
            ));
        }
        if self.chunk == 0 {
            return Err(Error::options("the prune chunk must be at least 1 row"));
        }
        if self.interval.is_zero() || self.interval > Duration::from_secs(24 * 3600) {
            return Err(Error::options(
                "the prune interval must be more than zero and at most a day",
            ));
        }
        Ok(())
    }

    /// What to remove now.
    pub fn prune_at(&self, now: Timestamp) -> Result<Prune, Error> {
        let ago = |d: Duration| {
            now.checked_sub(d)
                .ok_or_else(|| Error::options("the retention reaches before the year 1"))
        };
        Ok(Prune {
            before: ago(self.events)?,
            rollups_before: self.rollups.map(ago).transpose()?,
            pending_dead_letters: self.pending_dead_letters,
            chunk: self.chunk,
        })
    }
}

/// When the logger's next retention step is due: `None` while one runs.
pub(crate) type Due = Mutex<Option<Instant>>;

/// While rows are left, the next retention step waits this many times as long as the last one
/// took: retention takes at most a tenth of the logger's time.
pub(crate) const PACE: u32 = 9;

/// Rows removed per statement by default.
pub const DEFAULT_PRUNE_CHUNK: usize = 5_000;

/// What to remove: see `Store::prune`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prune {
    /// Events, id conflicts and re-driven dead letters that arrived before this time.
    pub before: Timestamp,
    /// Rollup minutes (by the events' `x-time`) before this time; `None` keeps them all.
    /// Rollups are small (a row per minute, key and source) and keep a longer history than
    /// the events, so the overview and the map still show it.
    pub rollups_before: Option<Timestamp>,
    /// Also dead letters not re-driven yet (pending). Off by default: retention never
    /// removes a dead letter an operator has not dealt with.
    pub pending_dead_letters: bool,
    /// Rows per statement (at least 1).
    pub chunk: usize,
}

impl Prune {
    /// Removes what arrived before `before`, in chunks of [`DEFAULT_PRUNE_CHUNK`], keeping
    /// the rollups and pending dead letters.
    pub fn before(before: Timestamp) -> Prune {
        Prune {
            before,
            rollups_before: None,
            pending_dead_letters: false,
            chunk: DEFAULT_PRUNE_CHUNK,
        }
    }
}

/// What a prune removed (or, from `Store::prune_preview`, would remove).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Pruned {
    /// Event rows.
    pub events: u64,
    /// Id-conflict rows.
    pub conflicts: u64,
    /// Dead-letter rows.
    pub dead_letters: u64,
    /// Rollup rows.
    pub rollups: u64,
    /// Whole partitions of `events` dropped (PostgreSQL; their rows are in `events`).
    pub partitions_dropped: u64,
    /// Nothing is left to remove (after a step: no further step needed).
    pub done: bool,
}

impl Pruned {
    /// Rows removed from every table.
    pub fn rows(&self) -> u64 {
        self.events + self.conflicts + self.dead_letters + self.rollups
    }

    pub(crate) fn add(&mut self, other: &Pruned) {
        self.events += other.events;
        self.conflicts += other.conflicts;
        self.dead_letters += other.dead_letters;
        self.rollups += other.rollups;
        self.partitions_dropped += other.partitions_dropped;
        self.done = other.done;
    }
}
