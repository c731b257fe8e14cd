//! The books a soak closes once its load drained and its children finished: the audit store
//! against the emits, the poison, the handlers' attempts, the RPC outcomes, the ledger and the
//! faults; the [`SoakReport`] that holds the figures and everything found wrong.
//!
//! Each check appends what it finds wrong to the soak's problems, in the order the report
//! lists them.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use mesh::DeadReason;
use mesh_audit::{DeadLetterRecord, EventRecord};
use mesh_testkit::TempStore;

use super::load::{CallOutcome, Clients, Consumed, Tally};
use super::problems::{lock, Problems};
use super::report::{Injected, SoakReport};
use super::settings::{SoakOptions, RPC_FAILURE_KINDS};
use super::work::{fate, Fate, EMITTERS};
use crate::timeline::Timeline;
use crate::{Emitter, TryOutcome};

/// When the soak ran: its start, the start of its load, and how long the queues took to
/// drain once the load stopped.
pub(super) struct Times {
    pub(super) started: Instant,
    pub(super) origin: Instant,
    pub(super) drained_after: Option<Duration>,
}

/// Closes the books of a soak run with `options`: reads the audit store (then removes it),
/// checks everything against the tally and the clients' tries, and reports.
pub(super) async fn close(
    options: &SoakOptions,
    store: TempStore,
    clients: &Clients,
    tally: &Tally,
    mut injected: Vec<Injected>,
    times: Times,
) -> anyhow::Result<SoakReport> {
    let problems = &tally.problems;
    let fates = &clients.fates;
    let (rows, dead) = read_audit_store(&store, tally.ledger.report().confirmed).await?;
    drop(store);

    let soak_rows = soak_rows(&rows);
    let audit_distinct = check_audit_rows(&soak_rows, fates, problems);
    let dead_poison = check_dead_letters(&dead, fates, problems);
    for id in &dead_poison {
        tally.ledger.handled(id.clone());
    }
    let report = tally.ledger.report();
    let poison_confirmed = check_poison_dead(&clients.emitters, &dead_poison, problems);
    check_audited(&clients.emitters, &audit_distinct, problems);
    check_attempts(&lock(&tally.consumed), fates, problems);
    let rpc = check_calls(&lock(&tally.call_outcomes).clone(), problems);
    let served_twice = lock(&tally.served).values().filter(|n| **n > 1).count();

    // The ledger.
    if !report.is_clean() {
        problems.push(format!("the ledger does not balance: {report}"));
    }
    let retries = tally.retries.load(Ordering::Relaxed);
    if retries == 0 {
        problems.push("no handler failed: the retries were not exercised".to_owned());
    }
    if poison_confirmed.is_empty() {
        problems.push("no poison event was confirmed".to_owned());
    }

    let confirms: Vec<Timeline> = clients
        .emitters
        .iter()
        .map(|(_, e)| e.confirms().clone())
        .collect();
    recoveries(&mut injected, &confirms, &tally.handles, times.origin);
    let overlapping = check_faults(&injected, options.min_faults, problems);
    let emits = emit_figures(clients, problems);

    let mut problems_found = problems.take();
    problems_found.dedup();
    Ok(SoakReport {
        seed: options.seed,
        duration: options.duration,
        total: times.started.elapsed(),
        overlapping,
        faults: injected,
        ledger: report.to_string(),
        attempted: report.attempted,
        confirmed: report.confirmed,
        handled: report.handled_unique,
        duplicates: report.duplicates,
        lost: report.lost.len(),
        unexpected: report.unexpected.len(),
        retries,
        poison_confirmed: poison_confirmed.len(),
        poison_dead: dead_poison.len(),
        emit_failures: emits.failures,
        longest_emit: emits.longest_emit,
        longest_try: emits.longest_try,
        calls: rpc.calls,
        answered: rpc.answered,
        call_failures: rpc.failures,
        served_twice,
        late_replies: emits.late_replies,
        audit_rows: soak_rows.len(),
        audit_distinct: audit_distinct.len(),
        drained_after: times.drained_after,
        problems: problems_found,
    })
}

/// The audit store's events and dead letters, read in full (`confirmed` bounds how many
/// there can be).
async fn read_audit_store(
    store: &TempStore,
    confirmed: usize,
) -> anyhow::Result<(Vec<EventRecord>, Vec<DeadLetterRecord>)> {
    let audit_store = mesh_audit::Store::open(mesh_audit::StoreOptions::url(store.url())?)
        .await
        .context("opening the audit store")?;
    let rows = audit_store
        .events(&mesh_audit::EventQuery::new().limit(confirmed * 2 + 10_000))
        .await
        .context("reading the audit store")?;
    let dead = audit_store
        .dead_letters(&mesh_audit::DeadLetterQuery::new().limit(confirmed + 10_000))
        .await
        .context("reading the dead letters")?;
    audit_store.close().await;
    Ok((rows, dead))
}

/// The ids of the audit store's rows that hold soak events.
fn soak_rows(rows: &[EventRecord]) -> Vec<String> {
    rows.iter()
        .filter(|r| {
            EMITTERS
                .iter()
                .any(|m| r.routing_key.starts_with(&format!("module.{m}.")))
        })
        .map(|r| r.id.to_string())
        .collect()
}

/// The distinct ids of `soak_rows`; each stored once, and emitted.
fn check_audit_rows<'a>(
    soak_rows: &'a [String],
    fates: &HashMap<String, Fate>,
    problems: &Problems,
) -> BTreeSet<&'a String> {
    let audit_distinct: BTreeSet<&String> = soak_rows.iter().collect();
    if audit_distinct.len() != soak_rows.len() {
        problems.push(format!(
            "the audit store holds {} rows of soak events but {} distinct ids",
            soak_rows.len(),
            audit_distinct.len()
        ));
    }
    let never_emitted: Vec<&&String> = audit_distinct
        .iter()
        .filter(|id| !fates.contains_key(id.as_str()))
        .collect();
    if !never_emitted.is_empty() {
        problems.push(format!(
            "the audit store holds {} events nobody emitted: {:?}",
            never_emitted.len(),
            never_emitted.iter().take(10).collect::<Vec<_>>()
        ));
    }
    audit_distinct
}

/// The poison events dead-lettered for max-attempts; poison dead-lettered for another reason,
/// and any other event dead-lettered, is a problem.
fn check_dead_letters(
    dead: &[DeadLetterRecord],
    fates: &HashMap<String, Fate>,
    problems: &Problems,
) -> BTreeSet<String> {
    let fates_of = |id: &str| fates.get(id).copied();
    let mut dead_poison: BTreeSet<String> = BTreeSet::new();
    for letter in dead {
        let Some(id) = letter.event_id.map(|id| id.to_string()) else {
            problems.push(format!(
                "a dead letter without an event id: {:?}",
                letter.id
            ));
            continue;
        };
        match fates_of(&id) {
            Some(Fate::Poison) if letter.reason == Some(DeadReason::MaxAttempts) => {
                dead_poison.insert(id);
            }
            Some(Fate::Poison) => problems.push(format!(
                "poison {id} dead-lettered for {:?}, not max-attempts",
                letter.reason
            )),
            _ => problems.push(format!(
                "event {id} ({:?}) dead-lettered ({:?} after {} attempts)",
                fates_of(&id),
                letter.reason,
                letter.attempts
            )),
        }
    }
    dead_poison
}

/// The confirmed poison events; each must be among `dead_poison`.
fn check_poison_dead(
    emitters: &[(mesh::Bus, Emitter)],
    dead_poison: &BTreeSet<String>,
    problems: &Problems,
) -> BTreeSet<String> {
    let poison_confirmed = emitters
        .iter()
        .flat_map(|(_, e)| {
            let confirmed: BTreeSet<usize> = e
                .tries()
                .into_iter()
                .filter(|t| t.outcome == TryOutcome::Confirmed)
                .map(|t| t.index)
                .collect();
            confirmed
                .into_iter()
                .filter(|i| fate(*i as u64) == Fate::Poison)
                .map(|i| e.ids()[i].to_string())
                .collect::<Vec<_>>()
        })
        .collect::<BTreeSet<String>>();
    let poison_undead: Vec<&String> = poison_confirmed
        .iter()
        .filter(|id| !dead_poison.contains(*id))
        .collect();
    if !poison_undead.is_empty() {
        problems.push(format!(
            "{} confirmed poison events were never dead-lettered: {:?}",
            poison_undead.len(),
            poison_undead.iter().take(10).collect::<Vec<_>>()
        ));
    }
    poison_confirmed
}

/// Every confirmed event in the audit store (poison included: it was emitted).
fn check_audited(
    emitters: &[(mesh::Bus, Emitter)],
    audit_distinct: &BTreeSet<&String>,
    problems: &Problems,
) {
    let all_confirmed: Vec<String> = emitters
        .iter()
        .flat_map(|(_, e)| {
            e.tries()
                .into_iter()
                .filter(|t| t.outcome == TryOutcome::Confirmed)
                .map(|t| e.ids()[t.index].to_string())
                .collect::<Vec<_>>()
        })
        .collect::<BTreeSet<String>>()
        .into_iter()
        .collect();
    let unaudited: Vec<&String> = all_confirmed
        .iter()
        .filter(|id| !audit_distinct.contains(id))
        .collect();
    if !unaudited.is_empty() {
        problems.push(format!(
            "{} confirmed events are missing from the audit store: {:?}",
            unaudited.len(),
            unaudited.iter().take(10).collect::<Vec<_>>()
        ));
    }
}

/// The handlers' attempts: poison never handled, planned failures before each handle.
fn check_attempts(consumed: &Consumed, fates: &HashMap<String, Fate>, problems: &Problems) {
    let mut wrong = Vec::new();
    for (id, attempts) in &consumed.handled {
        match fates.get(id).copied() {
            Some(Fate::Poison) => wrong.push(format!("poison {id} handled")),
            Some(Fate::Fails(n)) => {
                let failed = consumed.failed.get(id).cloned().unwrap_or_default();
                let missing: Vec<u32> = (1..=n).filter(|a| !failed.contains(a)).collect();
                if !missing.is_empty() || attempts.iter().any(|a| *a <= n) {
                    wrong.push(format!(
                        "{id} (fails {n}) handled at attempts {attempts:?}, failed at \
                         {failed:?}"
                    ));
                }
            }
            Some(Fate::Handled) | None => {}
        }
    }
    if !wrong.is_empty() {
        problems.push(format!(
            "{} events handled against their fate: {:?}",
            wrong.len(),
            wrong.iter().take(10).collect::<Vec<_>>()
        ));
    }
}

/// The RPC calls' figures.
struct Rpc {
    calls: usize,
    answered: usize,
    failures: BTreeMap<String, usize>,
}

/// Every call answered with its own answer or failed with a retryable kind, and some
/// answered.
fn check_calls(outcomes: &[CallOutcome], problems: &Problems) -> Rpc {
    let mut failures: BTreeMap<String, usize> = BTreeMap::new();
    let mut answered = 0;
    let mut wrong_answers = 0;
    for outcome in outcomes {
        match outcome {
            CallOutcome::Answered(true) => answered += 1,
            CallOutcome::Answered(false) => wrong_answers += 1,
            CallOutcome::Failed(kind) => *failures.entry(kind.clone()).or_default() += 1,
        }
    }
    if wrong_answers > 0 {
        problems.push(format!(
            "{wrong_answers} RPC calls got another call's answer"
        ));
    }
    let untyped: Vec<&String> = failures
        .keys()
        .filter(|k| !RPC_FAILURE_KINDS.contains(&k.as_str()))
        .collect();
    if !untyped.is_empty() {
        problems.push(format!(
            "RPC calls failed with unexpected kinds {untyped:?}"
        ));
    }
    if answered == 0 {
        problems.push("no RPC call was answered".to_owned());
    }
    Rpc {
        calls: outcomes.len(),
        answered,
        failures,
    }
}

/// Each fault's recovery: from its lift (the load began at `origin`) to the first confirm
/// and the first handle after it, if both came.
fn recoveries(
    injected: &mut [Injected],
    confirms: &[Timeline],
    handles: &Timeline,
    origin: Instant,
) {
    for fault in injected {
        let lifted = origin + fault.ended;
        let confirm = confirms.iter().filter_map(|t| t.first_after(lifted)).min();
        let handle = handles.first_after(lifted);
        fault.recovery = match (confirm, handle) {
            (Some(c), Some(h)) => Some(c.max(h) - lifted),
            _ => None,
        };
    }
}

/// How many faults overlapped another; enough faults, and at least two overlapping.
fn check_faults(injected: &[Injected], min_faults: usize, problems: &Problems) -> usize {
    let overlapping = injected
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            injected
                .iter()
                .enumerate()
                .any(|(j, b)| *i != j && a.began <= b.ended && b.began <= a.ended)
        })
        .count();
    if injected.len() < min_faults {
        problems.push(format!(
            "only {} faults injected (at least {} wanted)",
            injected.len(),
            min_faults
        ));
    }
    if overlapping < 2 {
        problems.push("no two faults overlapped".to_owned());
    }
    overlapping
}

/// The emits' figures.
struct Emits {
    failures: BTreeMap<String, usize>,
    longest_emit: Duration,
    longest_try: Duration,
    late_replies: u64,
}

/// The emits' failed tries by kind and longest times, and the replies that came late; an
/// emit that failed for good is a problem.
fn emit_figures(clients: &Clients, problems: &Problems) -> Emits {
    let mut tries = Vec::new();
    let mut failures: BTreeMap<String, usize> = BTreeMap::new();
    let mut late_replies = clients.caller.transport_stats().late_replies;
    for (bus, emitter) in &clients.emitters {
        tries.push(emitter.tries());
        for (kind, n) in emitter.failures() {
            *failures.entry(kind).or_default() += n;
        }
        late_replies += bus.transport_stats().late_replies;
        for fatal in emitter.fatal() {
            problems.push(format!("an emit failed for good: {fatal}"));
        }
    }
    let (longest_emit, longest_try) = tries
        .iter()
        .map(|t| crate::emitter::longest_emits(t))
        .fold((Duration::ZERO, Duration::ZERO), |(a, b), (c, d)| {
            (a.max(c), b.max(d))
        });
    Emits {
        failures,
        longest_emit,
        longest_try,
        late_replies,
    }
}
