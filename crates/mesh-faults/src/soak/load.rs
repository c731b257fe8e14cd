//! The soak's load: the audit logger, the consumers and the RPC servers as child processes
//! ([`start_crew`]), the caller and the emitters in process ([`start_clients`]), the RPC calls
//! ([`Calls`]), and what they all tell the books as they run ([`Tally`]).

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use mesh::Bus;
use mesh_testkit::{list_bindings, Cluster, Ledger, Relay};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::children::{Crew, OnLine, Slot, Spawner};
use super::problems::{lock, Problems};
use super::settings::{
    AUDIT_QUEUE, CALLS_IN_FLIGHT, CALL_PACE, CALL_TIMEOUT, CONSUMER_QUEUE, EMIT_PACE,
    HEARTBEAT_SECS, PREFETCH, VHOST, WAIT,
};
use super::work::{answer, fate, Fate, CALLER, CONSUMER, EMITTERS, SERVER, TOOL};
use crate::setup::{self, Access, NODE};
use crate::timeline::Timeline;
use crate::{EmitPlan, Emitter};

/// What the consumers said, by event id.
#[derive(Debug, Default)]
pub(super) struct Consumed {
    /// Attempts that failed on purpose.
    pub(super) failed: HashMap<String, BTreeSet<u32>>,
    /// Attempts that were handled.
    pub(super) handled: HashMap<String, Vec<u32>>,
}

/// How an RPC call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum CallOutcome {
    /// Answered; whether with the right answer.
    Answered(bool),
    /// Failed with this kind.
    Failed(String),
}

/// What the load tells the books as it runs, shared with the tasks that read the children's
/// lines and make the calls.
#[derive(Debug, Clone)]
pub(super) struct Tally {
    /// Everything found wrong so far.
    pub(super) problems: Problems,
    /// Every emit's tries and confirms, and every handle.
    pub(super) ledger: Ledger,
    /// When events were handled.
    pub(super) handles: Timeline,
    /// What the consumers said.
    pub(super) consumed: Arc<Mutex<Consumed>>,
    /// How often the servers served each request.
    pub(super) served: Arc<Mutex<HashMap<u64, u32>>>,
    /// Handler failures on purpose.
    pub(super) retries: Arc<AtomicU64>,
    /// How each RPC call ended.
    pub(super) call_outcomes: Arc<Mutex<Vec<CallOutcome>>>,
}

impl Tally {
    /// Empty books.
    pub(super) fn new() -> Tally {
        Tally {
            problems: Problems::default(),
            ledger: Ledger::new(),
            handles: Timeline::new(),
            consumed: Arc::default(),
            served: Arc::default(),
            retries: Arc::new(AtomicU64::new(0)),
            call_outcomes: Arc::default(),
        }
    }

    /// What a consumer's line tells: `handled <id> <attempt>` or `failed <id> <attempt>`.
    fn on_consumed(&self) -> OnLine {
        let (ledger, handles, consumed, retries) = (
            self.ledger.clone(),
            self.handles.clone(),
            self.consumed.clone(),
            self.retries.clone(),
        );
        Arc::new(move |line: &str| {
            let mut words = line.split(' ');
            let (what, id, attempt) = (words.next(), words.next(), words.next());
            let attempt = attempt.and_then(|a| a.parse::<u32>().ok());
            match (what, id, attempt) {
                (Some("handled"), Some(id), Some(attempt)) => {
                    ledger.handled(id);
                    handles.mark();
                    lock(&consumed)
                        .handled
                        .entry(id.to_owned())
                        .or_default()
                        .push(attempt);
                }
                (Some("failed"), Some(id), Some(attempt)) => {
                    retries.fetch_add(1, Ordering::Relaxed);
                    lock(&consumed)
                        .failed
                        .entry(id.to_owned())
                        .or_default()
                        .insert(attempt);
                }
                _ => eprintln!("[soak] a consumer said {line:?}"),
            }
        })
    }

    /// What a server's line tells: `served <n>`.
    fn on_served(&self) -> OnLine {
        let served = self.served.clone();
        Arc::new(move |line: &str| {
            match line
                .strip_prefix("served ")
                .and_then(|n| n.parse::<u64>().ok())
            {
                Some(n) => *lock(&served).entry(n).or_insert(0) += 1,
                None => eprintln!("[soak] a server said {line:?}"),
            }
        })
    }
}

/// Starts the child processes of `worker` (the `faults-worker` program): the audit logger
/// first (storing into `store_url`), so that it is bound before the first event, then two
/// competing consumers, then two RPC servers; each reaches the cluster through the relays
/// in an order of its own.
pub(super) async fn start_crew(
    cluster: &Cluster,
    access: &Access,
    relays: &[Relay],
    worker: &Path,
    store_url: &str,
    tally: &Tally,
) -> anyhow::Result<Crew> {
    let problems = &tally.problems;
    let audit_login = access.login_at(&relay_order(relays, [2, 0, 1]), "audit-logger");
    let audit_url = with_heartbeat(audit_login.url());
    let audit = Slot::start(
        "the audit logger".to_owned(),
        Spawner::new(
            worker,
            &["audit", &audit_url, NODE, store_url],
            &audit_login,
        ),
        Arc::new(|_: &str| {}),
        problems.clone(),
    )
    .await?;
    let any_node = cluster.node(0).name().to_owned();
    await_bound(&any_node, AUDIT_QUEUE).await?;

    let on_consumed = tally.on_consumed();
    let prefetch = PREFETCH.to_string();
    let mut consumers = Vec::new();
    for (i, order) in [[0, 1, 2], [1, 2, 0]].into_iter().enumerate() {
        let login = access.login_at(&relay_order(relays, order), CONSUMER);
        let url = with_heartbeat(login.url());
        consumers.push(
            Slot::start(
                format!("consumer {i}"),
                Spawner::new(
                    worker,
                    &["soak-consume", &url, NODE, CONSUMER, &prefetch],
                    &login,
                ),
                on_consumed.clone(),
                problems.clone(),
            )
            .await?,
        );
    }
    await_bound(&any_node, CONSUMER_QUEUE).await?;

    let on_served = tally.on_served();
    let mut servers = Vec::new();
    for (i, order) in [[1, 2, 0], [2, 0, 1]].into_iter().enumerate() {
        let login = access.login_at(&relay_order(relays, order), SERVER);
        let url = with_heartbeat(login.url());
        servers.push(
            Slot::start(
                format!("server {i}"),
                Spawner::new(worker, &["answer", &url, NODE, SERVER, TOOL], &login),
                on_served.clone(),
                problems.clone(),
            )
            .await?,
        );
    }
    Ok(Crew {
        audit,
        consumers,
        servers,
    })
}

/// The in-process clients: the RPC caller, the emitters with their buses, and the fate of
/// every event the emitters may emit, by id.
pub(super) struct Clients {
    pub(super) caller: Bus,
    pub(super) emitters: Vec<(Bus, Emitter)>,
    pub(super) fates: HashMap<String, Fate>,
}

/// Starts the caller and the emitters, each through the relays in an order of its own. The
/// emitters hold far more events than a load of `duration` will reach: it stops by the clock.
pub(super) async fn start_clients(
    access: &Access,
    relays: &[Relay],
    duration: Duration,
    tally: &Tally,
) -> anyhow::Result<Clients> {
    let client = |module: &str, order: [usize; 3]| {
        access
            .options_at(&relay_order(relays, order), module)
            .heartbeat(Duration::from_secs(HEARTBEAT_SECS))
    };
    let caller = Bus::builder()
        .node(NODE)
        .module(CALLER)
        .start(setup::connect(client(CALLER, [0, 1, 2])).await)
        .await
        .context("starting the caller")?;

    let per_emitter = (duration.as_millis() / EMIT_PACE.as_millis()) as usize + 1_000;
    let mut emitters = Vec::new();
    let mut fates: HashMap<String, Fate> = HashMap::new();
    for (module, order) in EMITTERS.into_iter().zip([[0, 1, 2], [1, 2, 0], [2, 0, 1]]) {
        let bus = Bus::builder()
            .node(NODE)
            .module(module)
            .start(setup::connect(client(module, order)).await)
            .await
            .with_context(|| format!("starting emitter {module}"))?;
        let emitter = Emitter::start(
            bus.clone(),
            tally.ledger.clone(),
            EmitPlan::new(per_emitter, "tick").paced(EMIT_PACE),
        );
        for (seq, id) in emitter.ids().iter().enumerate() {
            fates.insert(id.to_string(), fate(seq as u64));
        }
        emitters.push((bus, emitter));
    }
    Ok(Clients {
        caller,
        emitters,
        fates,
    })
}

/// The RPC load, in a task of its own.
pub(super) struct Calls {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Calls {
    /// Starts calling through `caller`, recording every outcome in `tally`.
    pub(super) fn start(caller: Bus, tally: &Tally) -> Calls {
        let stop = CancellationToken::new();
        let task = tokio::spawn(call_load(caller, stop.clone(), tally.call_outcomes.clone()));
        Calls { stop, task }
    }

    /// Makes no new call from now on.
    pub(super) fn stop(&self) {
        self.stop.cancel();
    }

    /// Waits for the calls in flight to end; a load that does not end is a problem.
    pub(super) async fn ended(self, problems: &Problems) {
        if tokio::time::timeout(CALL_TIMEOUT + WAIT, self.task)
            .await
            .is_err()
        {
            problems.push("the RPC calls did not end".to_owned());
        }
    }
}

/// The RPC load: a call every [`CALL_PACE`], at most [`CALLS_IN_FLIGHT`] pending, until
/// `stop`; then waits for the pending ones.
async fn call_load(caller: Bus, stop: CancellationToken, outcomes: Arc<Mutex<Vec<CallOutcome>>>) {
    let slots = Arc::new(Semaphore::new(CALLS_IN_FLIGHT));
    let mut calls = tokio::task::JoinSet::new();
    let mut n: u64 = 0;
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            // The pacing of the load, not a synchronisation.
            () = tokio::time::sleep(CALL_PACE) => {}
        }
        let permit = tokio::select! {
            () = stop.cancelled() => break,
            permit = slots.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        n += 1;
        let (caller, outcomes) = (caller.clone(), outcomes.clone());
        calls.spawn(async move {
            let outcome = match caller.call::<u64, u64>(TOOL, &n, CALL_TIMEOUT).await {
                Ok(got) => CallOutcome::Answered(got == answer(n)),
                Err(e) => CallOutcome::Failed(match e.transport_kind() {
                    Some(kind) => short_kind(&format!("{kind:?}")),
                    None => short_kind(&format!("{:?}", e.kind())),
                }),
            };
            lock(&outcomes).push(outcome);
            drop(permit);
        });
        // Reap the finished ones as we go.
        while calls.try_join_next().is_some() {}
    }
    while calls.join_next().await.is_some() {}
}

/// `TooLarge { size: .. }` → `TooLarge`.
fn short_kind(kind: &str) -> String {
    kind.split([' ', '(', '{'])
        .next()
        .unwrap_or_default()
        .to_owned()
}

fn relay_order(relays: &[Relay], order: [usize; 3]) -> Vec<SocketAddr> {
    order.iter().map(|&i| relays[i].addr()).collect()
}

/// A child's URL with the soak's short heartbeat.
fn with_heartbeat(url: &str) -> String {
    format!("{url}?heartbeat={HEARTBEAT_SECS}")
}

/// Waits until `queue` of the soak's vhost is bound to the events exchange.
async fn await_bound(node: &str, queue: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(bindings) = list_bindings(Some(node), VHOST).await {
            if bindings
                .iter()
                .any(|b| b.source == "mesh.events" && b.destination == queue)
            {
                return Ok(());
            }
        }
        if Instant::now() >= deadline {
            anyhow::bail!("{queue} was not bound within {WAIT:?}");
        }
        // Polling the broker's bindings.
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
