//! A per-event-id ledger for at-least-once scenarios.
//!
//! This module owns [`Ledger`] and its [`LedgerReport`]. A test records, per event id, that a
//! publish was attempted, that the broker confirmed it, and each time a handler ran for it;
//! the report then says what at-least-once delivery promises to rule out (a confirmed event
//! never handled: *lost*; a handled event nobody sent: *unexpected*) and what it allows
//! (*duplicates*, counted but not an error).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

/// How many ids a report's `Display` lists per category before eliding the rest.
const LISTED_IDS: usize = 20;

#[derive(Debug, Default, Clone, Copy)]
struct Entry {
    attempts: u32,
    confirmed: bool,
    handles: u32,
}

#[derive(Debug, Default)]
struct Inner {
    entries: Mutex<HashMap<String, Entry>>,
    /// Woken on every `confirmed` and `handled`, for `wait_all_handled`.
    changed: Notify,
}

/// Thread-safe record of attempted, confirmed and handled event ids. Cloning shares the
/// ledger, so publishers and handlers each hold a clone.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use mesh_testkit::ledger::Ledger;
/// use std::time::Duration;
/// let ledger = Ledger::new();
/// ledger.attempted("e1");
/// ledger.confirmed("e1");
/// ledger.handled("e1");
/// ledger.handled("e1"); // a redelivery
/// let report = ledger.wait_all_handled(Duration::from_secs(5)).await;
/// report.assert_clean();
/// assert_eq!(report.duplicates, 1);
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Ledger {
    inner: Arc<Inner>,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Ledger {
        Ledger::default()
    }

    fn entries(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        // A panicking handler must not hide the ledger from the assertion that follows.
        self.inner.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that a publish of `id` was attempted (call before publishing; retries may call
    /// it again).
    pub fn attempted(&self, id: impl Into<String>) {
        self.entries().entry(id.into()).or_default().attempts += 1;
    }

    /// Records that the broker confirmed `id`: from now on, it must be handled.
    pub fn confirmed(&self, id: impl Into<String>) {
        self.entries().entry(id.into()).or_default().confirmed = true;
        self.inner.changed.notify_waiters();
    }

    /// Records one run of a handler for `id` (every delivery, duplicates included).
    pub fn handled(&self, id: impl Into<String>) {
        self.entries().entry(id.into()).or_default().handles += 1;
        self.inner.changed.notify_waiters();
    }

    /// How many times `id` was handled so far.
    pub fn handled_count(&self, id: &str) -> u32 {
        self.entries().get(id).map_or(0, |e| e.handles)
    }

    /// The ledger as it stands.
    pub fn report(&self) -> LedgerReport {
        let entries = self.entries();
        let mut report = LedgerReport::default();
        for (id, e) in entries.iter() {
            report.attempted += usize::from(e.attempts > 0);
            report.confirmed += usize::from(e.confirmed);
            report.handled_unique += usize::from(e.handles > 0);
            report.duplicates += e.handles.saturating_sub(1) as usize;
            if e.confirmed && e.handles == 0 {
                report.lost.push(id.clone());
            }
            if e.handles > 0 && e.attempts == 0 {
                report.unexpected.push(id.clone());
            }
        }
        report.lost.sort();
        report.unexpected.sort();
        report
    }

    fn all_confirmed_handled(&self) -> bool {
        self.entries()
            .values()
            .all(|e| !e.confirmed || e.handles > 0)
    }

    /// Waits until every confirmed id was handled at least once, or `timeout` passes, and
    /// returns the report either way (check it with [`LedgerReport::assert_clean`]).
    ///
    /// Wakes on each `confirmed`/`handled` call rather than polling.
    pub async fn wait_all_handled(&self, timeout: Duration) -> LedgerReport {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let changed = self.inner.changed.notified();
            tokio::pin!(changed);
            // Register before checking, so a `handled` between the check and the await is
            // not missed.
            changed.as_mut().enable();
            if self.all_confirmed_handled() {
                break;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                break;
            }
        }
        self.report()
    }
}

/// A snapshot of a [`Ledger`]. Counts are of distinct ids except `duplicates`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerReport {
    /// Ids with at least one publish attempt.
    pub attempted: usize,
    /// Ids the broker confirmed.
    pub confirmed: usize,
    /// Ids handled at least once.
    pub handled_unique: usize,
    /// Extra handles: for each id, handles beyond the first, summed. Allowed by
    /// at-least-once delivery.
    pub duplicates: usize,
    /// Confirmed but never handled, sorted: at-least-once was broken.
    pub lost: Vec<String>,
    /// Handled but never attempted, sorted: something delivered an event no one sent.
    pub unexpected: Vec<String>,
}

impl LedgerReport {
    /// No lost and no unexpected ids.
    pub fn is_clean(&self) -> bool {
        self.lost.is_empty() && self.unexpected.is_empty()
    }

    /// Panics with the report (lost and unexpected ids listed) unless [`is_clean`].
    ///
    /// [`is_clean`]: LedgerReport::is_clean
    #[track_caller]
    pub fn assert_clean(&self) {
        if !self.is_clean() {
            panic!("at-least-once ledger is not clean:\n{self}");
        }
    }
}

fn write_ids(f: &mut fmt::Formatter<'_>, label: &str, ids: &[String]) -> fmt::Result {
    write!(f, "\n  {label} ({}):", ids.len())?;
    for id in ids.iter().take(LISTED_IDS) {
        write!(f, " {id}")?;
    }
    if ids.len() > LISTED_IDS {
        write!(f, " … and {} more", ids.len() - LISTED_IDS)?;
    }
    Ok(())
}

impl fmt::Display for LedgerReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "attempted {}, confirmed {}, handled {} (+{} duplicates), lost {}, unexpected {}",
            self.attempted,
            self.confirmed,
            self.handled_unique,
            self.duplicates,
            self.lost.len(),
            self.unexpected.len()
        )?;
        if !self.lost.is_empty() {
            write_ids(f, "lost (confirmed, never handled)", &self.lost)?;
        }
        if !self.unexpected.is_empty() {
            write_ids(f, "unexpected (handled, never attempted)", &self.unexpected)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_duplicates_lost_and_unexpected() {
        let l = Ledger::new();
        for id in ["a", "b", "c", "d"] {
            l.attempted(id);
        }
        l.attempted("a"); // a retry is still one attempted id
        for id in ["a", "b", "c"] {
            l.confirmed(id);
        }
        l.handled("a");
        l.handled("a");
        l.handled("a");
        l.handled("b");
        l.handled("d"); // attempted, unconfirmed, handled: fine
        l.handled("zz"); // never attempted
        let r = l.report();
        assert_eq!(
            r,
            LedgerReport {
                attempted: 4,
                confirmed: 3,
                handled_unique: 4,
                duplicates: 2,
                lost: vec!["c".into()],
                unexpected: vec!["zz".into()],
            }
        );
        assert!(!r.is_clean());
        assert_eq!(l.handled_count("a"), 3);
        assert_eq!(l.handled_count("nope"), 0);
    }

    #[test]
    fn display_summarises_and_lists_ids() {
        let l = Ledger::new();
        l.attempted("x");
        l.confirmed("x");
        l.handled("ghost");
        let text = l.report().to_string();
        assert!(
            text.starts_with(
                "attempted 1, confirmed 1, handled 1 (+0 duplicates), lost 1, unexpected 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("lost (confirmed, never handled) (1): x"),
            "{text}"
        );
        assert!(
            text.contains("unexpected (handled, never attempted) (1): ghost"),
            "{text}"
        );

        let many = Ledger::new();
        for i in 0..25 {
            many.confirmed(format!("id{i:02}"));
        }
        assert!(many.report().to_string().contains("… and 5 more"));
    }

    #[test]
    fn assert_clean_passes_on_a_clean_ledger() {
        let l = Ledger::new();
        l.attempted("a");
        l.confirmed("a");
        l.handled("a");
        l.handled("a");
        l.report().assert_clean();
    }

    #[test]
    #[should_panic(expected = "lost (confirmed, never handled) (1): a")]
    fn assert_clean_panics_with_the_lost_ids() {
        let l = Ledger::new();
        l.attempted("a");
        l.confirmed("a");
        l.report().assert_clean();
    }

    #[tokio::test]
    async fn wait_all_handled_wakes_when_the_last_id_is_handled() {
        let l = Ledger::new();
        for i in 0..100 {
            let id = format!("e{i}");
            l.attempted(id.clone());
            l.confirmed(id);
        }
        let handler = l.clone();
        let task = tokio::spawn(async move {
            for i in 0..100 {
                handler.handled(format!("e{i}"));
                tokio::task::yield_now().await;
            }
        });
        let started = std::time::Instant::now();
        let report = l.wait_all_handled(Duration::from_secs(30)).await;
        report.assert_clean();
        assert_eq!(report.handled_unique, 100);
        assert!(started.elapsed() < Duration::from_secs(10));
        task.await.unwrap();
    }

    #[tokio::test]
    async fn wait_all_handled_gives_up_at_the_timeout_with_the_lost_ids() {
        let l = Ledger::new();
        l.attempted("a");
        l.confirmed("a");
        l.attempted("b");
        l.confirmed("b");
        l.handled("a");
        let started = std::time::Instant::now();
        let report = l.wait_all_handled(Duration::from_millis(200)).await;
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(report.lost, vec!["b".to_owned()]);
    }

    #[test]
    fn is_shared_across_threads() {
        let l = Ledger::new();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let l = l.clone();
                std::thread::spawn(move || {
                    for i in 0..250 {
                        let id = format!("{t}-{i}");
                        l.attempted(id.clone());
                        l.confirmed(id.clone());
                        l.handled(id);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let r = l.report();
        assert_eq!(
            (r.attempted, r.confirmed, r.handled_unique),
            (1000, 1000, 1000)
        );
        r.assert_clean();
    }
}
