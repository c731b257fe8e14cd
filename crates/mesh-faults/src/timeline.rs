//! Instants to measure with: when confirms and handles happened ([`Timeline`]), and how a
//! bus's health changed ([`HealthLog`]).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mesh::{Bus, Health};
use tokio::task::JoinHandle;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking handler must not hide the timeline from the report that follows.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The instants at which something happened (a confirm, a handle), shared between the tasks
/// that mark them and the scenario that reads them. Cloning shares it.
#[derive(Debug, Clone, Default)]
pub struct Timeline {
    marks: Arc<Mutex<Vec<Instant>>>,
}

impl Timeline {
    /// An empty timeline.
    pub fn new() -> Timeline {
        Timeline::default()
    }

    /// Records that it happened now.
    pub fn mark(&self) {
        lock(&self.marks).push(Instant::now());
    }

    /// How many times it happened.
    pub fn len(&self) -> usize {
        lock(&self.marks).len()
    }

    /// Whether it never happened.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many times it happened in `[from, to]`.
    pub fn count_between(&self, from: Instant, to: Instant) -> usize {
        lock(&self.marks)
            .iter()
            .filter(|t| **t >= from && **t <= to)
            .count()
    }

    /// The first time it happened at or after `t`.
    pub fn first_after(&self, t: Instant) -> Option<Instant> {
        lock(&self.marks).iter().copied().filter(|m| *m >= t).min()
    }

    /// The last time it happened before `t`.
    pub fn last_before(&self, t: Instant) -> Option<Instant> {
        lock(&self.marks).iter().copied().filter(|m| *m < t).max()
    }
}

/// How often [`HealthLog`] looks at the bus: health is a few atomics, so this is cheap, and
/// it bounds the error of every detection time measured from the log.
const HEALTH_POLL: Duration = Duration::from_millis(10);

/// Every change of a bus's [`Health`], with when it was seen. Polls until dropped.
#[derive(Debug)]
pub struct HealthLog {
    changes: Arc<Mutex<Vec<(Instant, Health)>>>,
    task: JoinHandle<()>,
}

impl HealthLog {
    /// Starts watching `bus`.
    pub fn start(bus: Bus) -> HealthLog {
        let changes: Arc<Mutex<Vec<(Instant, Health)>>> = Arc::default();
        let log = changes.clone();
        let task = tokio::spawn(async move {
            let mut last: Option<Health> = None;
            loop {
                let now = bus.health();
                if last.as_ref() != Some(&now) {
                    lock(&log).push((Instant::now(), now.clone()));
                    last = Some(now);
                }
                tokio::time::sleep(HEALTH_POLL).await;
            }
        });
        HealthLog { changes, task }
    }

    /// The first instant at or after `t` at which the health satisfied `pred` (the state in
    /// force at `t` counts as seen at `t`).
    pub fn first_after(&self, t: Instant, pred: impl Fn(&Health) -> bool) -> Option<Instant> {
        let changes = lock(&self.changes);
        let in_force = changes.iter().rev().find(|(at, _)| *at <= t);
        if let Some((_, health)) = in_force {
            if pred(health) {
                return Some(t);
            }
        }
        changes
            .iter()
            .find(|(at, health)| *at > t && pred(health))
            .map(|(at, _)| *at)
    }

    /// How many times it went from connected to disconnected in `[from, to]`.
    pub fn disconnects_between(&self, from: Instant, to: Instant) -> usize {
        let changes = lock(&self.changes);
        changes
            .windows(2)
            .filter(|w| w[0].1.connected && !w[1].1.connected)
            .filter(|w| w[1].0 >= from && w[1].0 <= to)
            .count()
    }

    /// How many times the number of attached consumers dropped in `[from, to]`.
    pub fn detaches_between(&self, from: Instant, to: Instant) -> usize {
        let changes = lock(&self.changes);
        changes
            .windows(2)
            .filter(|w| w[1].1.consumers_attached < w[0].1.consumers_attached)
            .filter(|w| w[1].0 >= from && w[1].0 <= to)
            .count()
    }

    /// The health now, as last seen.
    pub fn current(&self) -> Option<Health> {
        lock(&self.changes).last().map(|(_, h)| h.clone())
    }

    /// Every change, relative to `origin`, one per line, for a failure report.
    pub fn describe(&self, origin: Instant) -> String {
        lock(&self.changes)
            .iter()
            .map(|(at, h)| {
                format!(
                    "    +{:>8.3}s connected={} blocked={} consumers={}/{}",
                    at.saturating_duration_since(origin).as_secs_f64(),
                    h.connected,
                    h.blocked,
                    h.consumers_attached,
                    h.consumers_expected
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for HealthLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Ready in the sense of [`Health::is_ready`]: connected, not blocked, every consumer
/// attached.
pub fn ready(h: &Health) -> bool {
    h.is_ready()
}

/// Not connected.
pub fn disconnected(h: &Health) -> bool {
    !h.connected
}

/// At least `n` consumers attached. Counts attached consumers rather than comparing with
/// `consumers_expected`, which a transport that gave up on a consumer may have lowered too;
/// ignores `connected`, which also covers the publishing connection.
pub fn consuming(n: usize) -> impl Fn(&Health) -> bool {
    move |h| h.consumers_attached >= n
}
