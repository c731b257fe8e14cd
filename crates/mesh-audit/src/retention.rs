//! The logger's retention (`--retain`): what arrived longer ago than the retention is removed
//! continuously, a bounded step at a time between the logger's batches, by arrival
//! (`received_at`), never by an event's `x-time`. See [`Store::prune_step`] and decision 0022.

use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use mesh_core::Timestamp;
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::error::Error;
use crate::logger::AuditLogger;
use crate::store::{Prune, Pruned, DEFAULT_PRUNE_CHUNK};
use crate::telemetry;

/// The shortest retention accepted: a minute.
pub const MIN_RETENTION: Duration = Duration::from_secs(60);

/// How long the logger keeps what it stores: see [`AuditOptions::retain`](crate::AuditOptions::retain).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retention {
    events: Duration,
    rollups: Option<Duration>,
    pending_dead_letters: bool,
    chunk: usize,
    interval: Duration,
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
const PACE: u32 = 9;

impl AuditLogger {
    /// One retention step: removes a bounded chunk of what is older than the retention, and
    /// sets when the next is due. A failure is logged and retried after the interval: it
    /// never stops the logger.
    pub(crate) async fn retention_step(
        &self,
        retention: &Retention,
        due: &Due,
    ) -> Result<(), Error> {
        let started = Instant::now();
        let outcome = async {
            let prune = retention.prune_at(Timestamp::now())?;
            let step = self.store().prune_step(&prune).await?;
            if step.done {
                self.store().prepare_partitions_ahead().await?;
                telemetry::oldest_arrival(self.store().oldest_arrival().await?);
            }
            Ok::<Pruned, Error>(step)
        }
        .await;
        let next = match outcome {
            Ok(step) => {
                self.counters()
                    .rows_pruned
                    .fetch_add(step.rows(), Ordering::Relaxed);
                telemetry::pruned(&step);
                debug!(?step, "retention step");
                if step.done {
                    Instant::now() + retention.interval
                } else {
                    Instant::now() + started.elapsed() * PACE
                }
            }
            Err(e) => {
                warn!(error = %e, "retention step failed; retrying later");
                Instant::now() + retention.interval
            }
        };
        if let Ok(mut due) = due.lock() {
            *due = Some(next);
        }
        Ok(())
    }
}
