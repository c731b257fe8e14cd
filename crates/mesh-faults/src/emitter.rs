//! A load generator that keeps the at-least-once books: [`Emitter`].
//!
//! It emits `count` JSON events through a [`Bus`] with [`Bus::emit_nowait`], each under an
//! event id chosen up front. An emit that fails with a retryable error (the connection was
//! lost, no confirm before the deadline, no room in the window, a nack) is tried again with
//! the *same* id, as a service honouring the contract would; the [`Ledger`] gets `attempted`
//! for every try and `confirmed` only when a [`mesh::PendingEmit`] resolved `Ok`. A
//! non-retryable error ends that event's tries and is reported as fatal.
//!
//! While emits fail, the generator backs off (50 ms doubling to 1 s, reset by the next
//! confirm) rather than spinning through every event of the plan at once: during an outage it
//! makes about one try a second.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mesh::raw::backoff::Backoff;
use mesh::{Bus, EventId, Outgoing};
use mesh_testkit::Ledger;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::timeline::Timeline;

/// The first pause after a failed emit; it doubles up to [`MAX_BACKOFF`].
const MIN_BACKOFF: Duration = Duration::from_millis(50);
/// The longest pause between tries while emits fail.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// What to emit.
#[derive(Debug, Clone)]
pub struct EmitPlan {
    /// How many distinct events.
    pub count: usize,
    /// The event name, under the bus's own prefix (`tick` → `module.<m>.tick`).
    pub event: String,
    /// A pause between first tries of consecutive events (a paced load); `None` emits as
    /// fast as the window allows.
    pub pace: Option<Duration>,
    /// How many events may be tried at all until [`Emitter::allow`] raises it: a scenario
    /// holds the load back this way so that it still flows when a fault comes, however
    /// slowly the fault comes. `None`: the whole plan.
    pub limit: Option<usize>,
    /// Bytes of padding in each body (a `pad` string next to `seq`), for scenarios that need
    /// events of a given size; 0 for none.
    pub padding: usize,
}

impl EmitPlan {
    /// `count` events named `event`, as fast as the window allows.
    pub fn new(count: usize, event: impl Into<String>) -> EmitPlan {
        EmitPlan {
            count,
            event: event.into(),
            pace: None,
            limit: None,
            padding: 0,
        }
    }

    /// Tries only the first `limit` events until [`Emitter::allow`] says more.
    pub fn limit(mut self, limit: usize) -> EmitPlan {
        self.limit = Some(limit);
        self
    }

    /// Pads each body with a `pad` string of `bytes` bytes.
    pub fn padding(mut self, bytes: usize) -> EmitPlan {
        self.padding = bytes;
        self
    }

    /// Pauses `pace` between first tries.
    pub fn paced(mut self, pace: Duration) -> EmitPlan {
        self.pace = Some(pace);
        self
    }
}

/// How one try ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TryOutcome {
    /// The broker confirmed it.
    Confirmed,
    /// It failed; `kind` names the error kind, `text` is the error chain.
    Failed {
        /// The error kind (the transport's kind when the transport failed).
        kind: String,
        /// Whether it was retried.
        retryable: bool,
        /// The error and its causes.
        text: String,
    },
}

/// One try of one event: from the call of `emit_nowait` to the resolution of its confirm (or
/// the failure of `emit_nowait` itself).
#[derive(Debug, Clone)]
pub struct Try {
    /// The event's index in the plan.
    pub index: usize,
    /// When `emit_nowait` was called.
    pub started: Instant,
    /// When the outcome was known.
    pub resolved: Instant,
    /// The outcome.
    pub outcome: TryOutcome,
}

impl Try {
    /// How long the caller waited for the outcome.
    pub fn waited(&self) -> Duration {
        self.resolved.saturating_duration_since(self.started)
    }
}

#[derive(Debug)]
struct Shared {
    ledger: Ledger,
    ids: Vec<EventId>,
    confirmed: watch::Sender<usize>,
    /// Events with an index below this may be tried.
    limit: watch::Sender<usize>,
    confirms: Timeline,
    tries: Mutex<Vec<Try>>,
    /// Tries handed to the bus whose outcome is not known yet.
    in_flight: watch::Sender<usize>,
    /// The generator runs (false once it returned or was stopped: `abort` only asks, and
    /// the generator may be inside an emit on another thread when it does).
    generating: watch::Sender<bool>,
    /// Failed tries since the last confirm: the generator's backoff.
    failing: AtomicU32,
    /// The pauses while emits fail: the workspace's schedule, fed the count above (shared by
    /// the confirm tasks, so the schedule does not count itself).
    schedule: Backoff,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn record(&self, index: usize, started: Instant, outcome: TryOutcome) {
        let resolved = Instant::now();
        if outcome == TryOutcome::Confirmed {
            self.ledger.confirmed(self.ids[index].to_string());
            self.confirms.mark();
            self.failing.store(0, Ordering::Relaxed);
            self.confirmed.send_modify(|n| *n += 1);
        } else {
            self.failing.fetch_add(1, Ordering::Relaxed);
        }
        lock(&self.tries).push(Try {
            index,
            started,
            resolved,
            outcome,
        });
    }

    fn backoff(&self) -> Option<Duration> {
        match self.failing.load(Ordering::Relaxed) {
            0 => None,
            n => Some(self.schedule.delay_after(n - 1)),
        }
    }
}

fn failed(error: &mesh::Error) -> TryOutcome {
    let kind = match error.transport_kind() {
        Some(kind) => format!("{kind:?}"),
        None => format!("{:?}", error.kind()),
    };
    // `TooLarge { size: .., max: .. }` → `TooLarge`: the kind, not its fields.
    let kind = kind
        .split([' ', '(', '{'])
        .next()
        .unwrap_or_default()
        .to_owned();
    TryOutcome::Failed {
        kind,
        retryable: error.is_retryable(),
        text: crate::chain(error),
    }
}

/// A running load generator; see the [module docs](self).
#[derive(Debug)]
pub struct Emitter {
    shared: Arc<Shared>,
    confirmed: watch::Receiver<usize>,
    count: usize,
    task: JoinHandle<()>,
}

impl Emitter {
    /// Starts emitting `plan` through `bus`, recording in `ledger`.
    pub fn start(bus: Bus, ledger: Ledger, plan: EmitPlan) -> Emitter {
        let (confirmed_tx, confirmed) = watch::channel(0);
        let shared = Arc::new(Shared {
            ledger,
            ids: (0..plan.count).map(|_| EventId::new()).collect(),
            confirmed: confirmed_tx,
            limit: watch::Sender::new(plan.limit.unwrap_or(plan.count)),
            confirms: Timeline::new(),
            tries: Mutex::new(Vec::new()),
            in_flight: watch::Sender::new(0),
            generating: watch::Sender::new(true),
            failing: AtomicU32::new(0),
            schedule: Backoff::new(MIN_BACKOFF, MAX_BACKOFF),
        });
        let count = plan.count;
        let task = tokio::spawn(run(bus, shared.clone(), plan));
        Emitter {
            shared,
            confirmed,
            count,
            task,
        }
    }

    /// How many events of the plan.
    pub fn count(&self) -> usize {
        self.count
    }

    /// The event ids of the plan, by index.
    pub fn ids(&self) -> &[EventId] {
        &self.shared.ids
    }

    /// How many events were confirmed so far.
    pub fn confirmed(&self) -> usize {
        *self.confirmed.borrow()
    }

    /// When each confirm arrived.
    pub fn confirms(&self) -> &Timeline {
        &self.shared.confirms
    }

    /// Every try so far.
    pub fn tries(&self) -> Vec<Try> {
        lock(&self.shared.tries).clone()
    }

    /// Failed tries by error kind.
    pub fn failures(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for t in lock(&self.shared.tries).iter() {
            if let TryOutcome::Failed { kind, .. } = &t.outcome {
                *counts.entry(kind.clone()).or_insert(0) += 1;
            }
        }
        counts
    }

    /// Failures that ended an event's tries (non-retryable), as `kind: text`.
    pub fn fatal(&self) -> Vec<String> {
        lock(&self.shared.tries)
            .iter()
            .filter_map(|t| match &t.outcome {
                TryOutcome::Failed {
                    kind,
                    retryable: false,
                    text,
                } => Some(format!("{kind}: {text}")),
                _ => None,
            })
            .collect()
    }

    /// The most recent failure, as `kind: text`.
    pub fn last_failure(&self) -> Option<String> {
        lock(&self.shared.tries)
            .iter()
            .rev()
            .find_map(|t| match &t.outcome {
                TryOutcome::Failed { kind, text, .. } => Some(format!("{kind}: {text}")),
                TryOutcome::Confirmed => None,
            })
    }

    /// Waits until at least `n` events are confirmed; on timeout, says how far it got and
    /// the last failure.
    pub async fn wait_confirmed(&self, n: usize, timeout: Duration) -> Result<(), String> {
        let mut confirmed = self.confirmed.clone();
        let reached = tokio::time::timeout(timeout, async {
            confirmed.wait_for(|c| *c >= n).await.is_ok()
        })
        .await;
        match reached {
            Ok(true) => Ok(()),
            Ok(false) => Err("the emitter stopped".to_owned()),
            Err(_) => Err(format!(
                "only {} of {n} events confirmed after {timeout:?}; last failure: {}; \
                 failures by kind: {:?}",
                self.confirmed(),
                self.last_failure().unwrap_or_else(|| "none".to_owned()),
                self.failures()
            )),
        }
    }

    /// Lets the first `limit` events of the plan be tried (never lowers the limit).
    pub fn allow(&self, limit: usize) {
        self.shared.limit.send_if_modified(|l| {
            let raised = limit > *l;
            *l = (*l).max(limit);
            raised
        });
    }

    /// Stops trying (events not confirmed yet stay unconfirmed). Tries already handed to the
    /// bus still get their outcome: [`Emitter::settled`] waits for them.
    pub fn stop(&self) {
        self.task.abort();
    }

    /// After [`Emitter::stop`]: waits until the generator has stopped and every try handed
    /// to the bus has its outcome (a confirm, or a failure by its deadline at the latest), so
    /// that a drain closing the bus afterwards cuts none of them off (which would read as a
    /// try failed for good: the bus closed under it).
    pub async fn settled(&self, timeout: Duration) -> Result<(), String> {
        let mut generating = self.shared.generating.subscribe();
        let mut in_flight = self.shared.in_flight.subscribe();
        let settled = tokio::time::timeout(timeout, async {
            let _ = generating.wait_for(|running| !*running).await;
            let _ = in_flight.wait_for(|n| *n == 0).await;
        })
        .await;
        match settled {
            Ok(()) => Ok(()),
            Err(_) => Err(format!(
                "{} tries still without an outcome after {timeout:?} (generator running: {})",
                *in_flight.borrow(),
                *generating.borrow()
            )),
        }
    }
}

impl Drop for Emitter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The generator: fresh events in order, retries first, each try's confirm awaited by a
/// task of its own so that many are in flight (as many as the transport's window holds).
async fn run(bus: Bus, shared: Arc<Shared>, plan: EmitPlan) {
    // Says the generator stopped however it ends: returned, or dropped by `abort`.
    struct Generating(Arc<Shared>);
    impl Drop for Generating {
        fn drop(&mut self) {
            self.0.generating.send_replace(false);
        }
    }
    let _generating = Generating(shared.clone());
    let (retry_tx, mut retry_rx) = mpsc::unbounded_channel::<usize>();
    let mut retries: VecDeque<usize> = VecDeque::new();
    let mut next_fresh = 0;
    let mut limit_rx = shared.limit.subscribe();
    let pad = "x".repeat(plan.padding);
    loop {
        while let Ok(index) = retry_rx.try_recv() {
            retries.push_back(index);
        }
        let limit = *limit_rx.borrow_and_update();
        let index = if let Some(index) = retries.pop_front() {
            index
        } else if next_fresh < plan.count.min(limit) {
            if let (Some(pace), true) = (plan.pace, next_fresh > 0) {
                // Pacing of the load, not a synchronisation.
                tokio::time::sleep(pace).await;
            }
            next_fresh += 1;
            next_fresh - 1
        } else if *shared.confirmed.borrow() + fatal_count(&shared) >= plan.count {
            return;
        } else {
            // Everything allowed was tried once: wait for an outcome that asks for another
            // try, or for the limit to rise. The timeout only re-checks the books; the
            // scenario bounds the whole run with its own.
            tokio::select! {
                index = retry_rx.recv() => match index {
                    Some(index) => index,
                    None => continue,
                },
                _ = limit_rx.changed() => continue,
                () = tokio::time::sleep(MAX_BACKOFF) => continue,
            }
        };
        if let Some(pause) = shared.backoff() {
            // Backing off while emits fail: a pause of the load generator.
            tokio::time::sleep(pause).await;
        }
        let id = shared.ids[index];
        shared.ledger.attempted(id.to_string());
        let body = if pad.is_empty() {
            serde_json::json!({ "seq": index })
        } else {
            serde_json::json!({ "seq": index, "pad": pad })
        };
        let outgoing = match Outgoing::json(&plan.event, &body) {
            Ok(outgoing) => outgoing.id(id),
            Err(e) => {
                shared.record(index, Instant::now(), failed(&e));
                continue;
            }
        };
        let started = Instant::now();
        match bus.emit_nowait(outgoing).await {
            Ok(pending) => {
                let shared = shared.clone();
                let retry = retry_tx.clone();
                // Counted here, not before the emit: `stop` may drop the generator inside
                // `emit_nowait`, but never this task.
                shared.in_flight.send_modify(|n| *n += 1);
                tokio::spawn(async move {
                    match pending.await {
                        Ok(_) => shared.record(index, started, TryOutcome::Confirmed),
                        Err(e) => {
                            let outcome = failed(&e);
                            shared.record(index, started, outcome);
                            if e.is_retryable() {
                                let _ = retry.send(index);
                            }
                        }
                    }
                    shared.in_flight.send_modify(|n| *n = n.saturating_sub(1));
                });
            }
            Err(e) => {
                shared.record(index, started, failed(&e));
                if e.is_retryable() {
                    retries.push_back(index);
                }
            }
        }
    }
}

/// The longest emit as its caller saw it (first try to confirm, across retries) and the
/// longest single try, among `tries`.
pub fn longest_emits(tries: &[Try]) -> (Duration, Duration) {
    let mut first: BTreeMap<usize, Instant> = BTreeMap::new();
    let mut longest_emit = Duration::ZERO;
    let mut longest_try = Duration::ZERO;
    let mut sorted: Vec<&Try> = tries.iter().collect();
    sorted.sort_by_key(|t| t.started);
    for t in &sorted {
        first.entry(t.index).or_insert(t.started);
    }
    for t in sorted {
        longest_try = longest_try.max(t.waited());
        if t.outcome == TryOutcome::Confirmed {
            longest_emit = longest_emit.max(t.resolved - first[&t.index]);
        }
    }
    (longest_emit, longest_try)
}

/// Every try of a run held against a publish deadline: how each ended and how long its
/// caller waited ([`bounded_tries`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TryBounds {
    /// Tries in all.
    pub tries: usize,
    /// Of those, confirmed.
    pub confirmed: usize,
    /// Of those, failed (retryable or not), by error kind.
    pub failed: BTreeMap<String, usize>,
    /// The longest a try waited for its confirm or its failure.
    pub longest: Duration,
}

/// Checks that every try in `tries` ended, as a confirm or a failure, within `bound`, that
/// every failed try was retryable and tried again later, and that each event has exactly
/// one confirmed try; `Err` names the first try that breaks one of these. A try is recorded
/// only once its outcome is known, so the check is complete once every event of the plan is
/// confirmed (an event is tried again only after its try failed).
pub fn bounded_tries(tries: &[Try], bound: Duration) -> Result<TryBounds, String> {
    let mut sorted: Vec<&Try> = tries.iter().collect();
    sorted.sort_by_key(|t| t.started);
    let mut bounds = TryBounds {
        tries: sorted.len(),
        confirmed: 0,
        failed: BTreeMap::new(),
        longest: Duration::ZERO,
    };
    // Per event: its confirmed tries, and whether its last try so far failed.
    let mut events: BTreeMap<usize, (usize, bool)> = BTreeMap::new();
    for t in sorted {
        let waited = t.waited();
        bounds.longest = bounds.longest.max(waited);
        if waited > bound {
            return Err(format!(
                "event {}'s try waited {waited:?} for its outcome ({:?}), over {bound:?}",
                t.index, t.outcome
            ));
        }
        let event = events.entry(t.index).or_insert((0, false));
        match &t.outcome {
            TryOutcome::Confirmed => {
                bounds.confirmed += 1;
                event.0 += 1;
                event.1 = false;
            }
            TryOutcome::Failed {
                kind, retryable, ..
            } => {
                if !retryable {
                    return Err(format!("event {}'s try failed for good: {kind}", t.index));
                }
                *bounds.failed.entry(kind.clone()).or_insert(0) += 1;
                event.1 = true;
            }
        }
    }
    for (index, (confirms, last_failed)) in events {
        if confirms != 1 || last_failed {
            return Err(format!(
                "event {index} has {confirms} confirmed tries{}",
                if last_failed {
                    " and its last try failed (not tried again)"
                } else {
                    ""
                }
            ));
        }
    }
    Ok(bounds)
}

fn fatal_count(shared: &Shared) -> usize {
    lock(&shared.tries)
        .iter()
        .filter(|t| {
            matches!(
                t.outcome,
                TryOutcome::Failed {
                    retryable: false,
                    ..
                }
            )
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(index: usize, at: Instant, waited_ms: u64, outcome: TryOutcome) -> Try {
        Try {
            index,
            started: at,
            resolved: at + Duration::from_millis(waited_ms),
            outcome,
        }
    }

    fn timeout(retryable: bool) -> TryOutcome {
        TryOutcome::Failed {
            kind: "Timeout".to_owned(),
            retryable,
            text: "no confirm within the deadline".to_owned(),
        }
    }

    #[test]
    fn failed_tries_within_the_bound_then_one_confirm_each_are_bounded() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let tries = [
            attempt(0, t0, 5_000, timeout(true)),
            attempt(1, t0 + ms(10), 40, TryOutcome::Confirmed),
            attempt(0, t0 + ms(5_100), 30, TryOutcome::Confirmed),
        ];
        let bounds = bounded_tries(&tries, ms(15_000)).unwrap();
        assert_eq!(bounds.tries, 3);
        assert_eq!(bounds.confirmed, 2);
        assert_eq!(bounds.failed.get("Timeout"), Some(&1));
        assert_eq!(bounds.longest, ms(5_000));
    }

    #[test]
    fn a_try_past_the_bound_a_fatal_failure_or_an_unretried_one_is_named() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let slow = [attempt(7, t0, 15_001, TryOutcome::Confirmed)];
        let err = bounded_tries(&slow, ms(15_000)).unwrap_err();
        assert!(err.contains("event 7") && err.contains("over"), "{err}");
        let fatal = [attempt(2, t0, 10, timeout(false))];
        assert!(bounded_tries(&fatal, ms(15_000))
            .unwrap_err()
            .contains("for good"));
        let dropped = [
            attempt(3, t0, 10, TryOutcome::Confirmed),
            attempt(4, t0, 10, timeout(true)),
        ];
        let err = bounded_tries(&dropped, ms(15_000)).unwrap_err();
        assert!(
            err.contains("event 4") && err.contains("not tried again"),
            "{err}"
        );
        let twice = [
            attempt(5, t0, 10, TryOutcome::Confirmed),
            attempt(5, t0 + ms(20), 10, TryOutcome::Confirmed),
        ];
        assert!(bounded_tries(&twice, ms(15_000))
            .unwrap_err()
            .contains("2 confirmed"));
    }
}
