//! Two services of one saga (two processes of its module, each with its own pool, consuming
//! one queue) racing on one correlation key with concurrent and duplicate deliveries: every
//! event's effect is in the final state, once. On PostgreSQL a race is also forced, so the
//! retry from the fresh state is shown to run.

mod common;

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use common::PATIENCE;
use mesh::testing::{Harness, Record};
use mesh::{Bus, EventId, Outgoing};
use mesh_saga::{Database, Saga, SagaService, SagaStore};
use mesh_testkit::eventually;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Tick {
    key: String,
    n: u32,
}
impl mesh::Event for Tick {
    const KEY: &'static str = "module.clock.tick.struck";
}

/// Every tick an instance has seen.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Tally {
    seen: BTreeSet<u32>,
}

/// Called at each transition; may block (the forced race).
type Hook = Arc<dyn Fn() + Send + Sync>;

/// A tick starts its key's instance, or adds itself to it.
fn tally(hook: Hook) -> Saga<Tally> {
    Saga::new("tally")
        .starts(
            |e: &Tick| e.key.clone(),
            |e, _| Tally {
                seen: BTreeSet::from([e.n]),
            },
        )
        .on(
            |e: &Tick| e.key.clone(),
            move |tally, e, _| {
                hook();
                tally.seen.insert(e.n);
            },
        )
}

/// Two services of the saga on the harness, each with its own pool on the database.
async fn two_services<DB: Database>(
    harness: &Harness,
    pools: [sqlx::Pool<DB>; 2],
    prefetch: u16,
    hook: Hook,
) -> anyhow::Result<Vec<SagaService<Tally, DB>>> {
    let mut services = Vec::new();
    for pool in pools {
        let service = tally(Arc::clone(&hook)).service(SagaStore::new(pool).await?);
        let bus = harness
            .module("tally", |bus| service.wire(bus.prefetch(prefetch)))
            .await?;
        service.attach(&bus);
        services.push(service);
    }
    Ok(services)
}

fn handled_by_tally(harness: &Harness) -> usize {
    harness
        .records()
        .iter()
        .filter(|r| matches!(r, Record::Handled(h) if h.module == "tally"))
        .count()
}

async fn wait_handled(harness: &Harness, n: usize) {
    eventually(PATIENCE, &format!("{n} deliveries handled"), || async {
        (handled_by_tally(harness) >= n).then_some(())
    })
    .await;
}

async fn emit_tick(clock: &Bus, key: &str, n: u32, id: EventId) -> anyhow::Result<()> {
    let tick = Tick {
        key: key.to_owned(),
        n,
    };
    clock.emit_outgoing(Outgoing::event(&tick)?.id(id)).await?;
    Ok(())
}

/// The storm: `TICKS` ticks of one key, each delivered twice, to two services that each
/// run 8 at once.
async fn storm<DB: Database>(pools: [sqlx::Pool<DB>; 2]) -> anyhow::Result<()> {
    const TICKS: u32 = 64;
    let harness = Harness::memory().timeout(PATIENCE);
    let services = two_services(&harness, pools, 8, Arc::new(|| ())).await?;
    let clock = harness.module("clock", |bus| bus).await?;
    let ids: Vec<EventId> = (0..TICKS).map(|_| EventId::new()).collect();
    for round in 0..2 {
        for i in 0..TICKS {
            // The second round backwards, so duplicates meet first deliveries in flight.
            let n = if round == 0 { i } else { TICKS - 1 - i };
            emit_tick(&clock, "k", n, ids[n as usize]).await?;
        }
    }
    wait_handled(&harness, 2 * TICKS as usize).await;

    let instance = services[0]
        .store()
        .instance::<Tally>("tally", "k")
        .await?
        .ok_or_else(|| anyhow::anyhow!("no instance"))?;
    assert_eq!(
        instance.state.seen,
        (0..TICKS).collect::<BTreeSet<_>>(),
        "every tick's effect is in the final state"
    );
    assert_eq!(i64::from(TICKS), instance.version, "each applied once");
    eprintln!(
        "conflicts retried: {} and {}",
        services[0].conflicts(),
        services[1].conflicts()
    );
    harness.drain().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_two_services_racing_lose_no_update() -> anyhow::Result<()> {
    let (db, pool) = common::sqlite().await?;
    let other = common::sqlite_pool(db.url()).await?;
    storm([pool, other]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_services_racing_lose_no_update() -> anyhow::Result<()> {
    let (db, pool) = common::postgres().await?;
    let other = common::postgres_pool(db.url()).await?;
    storm([pool, other]).await
}

/// The first `parties` callers wait for each other (at most `PATIENCE`), later ones pass.
#[derive(Default)]
struct Rendezvous {
    arrived: Mutex<u32>,
    all_here: Condvar,
}

impl Rendezvous {
    fn arrive(&self, parties: u32) {
        let mut arrived = self.arrived.lock().unwrap_or_else(|e| e.into_inner());
        *arrived += 1;
        if *arrived > parties {
            return;
        }
        self.all_here.notify_all();
        let _ = self
            .all_here
            .wait_timeout_while(arrived, PATIENCE, |n| *n < parties);
    }
}

/// Two deliveries of one key, one to each service, both read the instance at version 1
/// (their transitions wait for each other) and both try to write version 2: one wins, the
/// other is rolled back and applied again to the fresh state. PostgreSQL only: SQLite runs
/// one writer at a time, so two transactions never read the same version there.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_a_lost_race_is_applied_again_to_the_fresh_state() -> anyhow::Result<()> {
    let (db, pool) = common::postgres().await?;
    let other = common::postgres_pool(db.url()).await?;
    let harness = Harness::memory().timeout(PATIENCE);
    let gate = Arc::new(Rendezvous::default());
    let calls = Arc::new(AtomicU32::new(0));
    let (g, c) = (Arc::clone(&gate), Arc::clone(&calls));
    // Waits until the other transition arrives (with prefetch 1 each service holds one of
    // the two deliveries), its worker's other tasks handed to another thread meanwhile.
    let hook: Hook = Arc::new(move || {
        c.fetch_add(1, Ordering::SeqCst);
        tokio::task::block_in_place(|| g.arrive(2));
    });
    let services = two_services(&harness, [pool, other], 1, hook).await?;
    let clock = harness.module("clock", |bus| bus).await?;

    emit_tick(&clock, "g", 0, EventId::new()).await?;
    wait_handled(&harness, 1).await;
    emit_tick(&clock, "g", 1, EventId::new()).await?;
    emit_tick(&clock, "g", 2, EventId::new()).await?;
    wait_handled(&harness, 3).await;

    let instance = services[0]
        .store()
        .instance::<Tally>("tally", "g")
        .await?
        .ok_or_else(|| anyhow::anyhow!("no instance"))?;
    assert_eq!(instance.state.seen, BTreeSet::from([0, 1, 2]));
    assert_eq!(instance.version, 3);
    let conflicts = services[0].conflicts() + services[1].conflicts();
    assert_eq!(
        conflicts, 1,
        "one of the two lost the race and was applied again"
    );
    assert_eq!(
        calls.load(Ordering::SeqCst),
        3,
        "the loser's transition ran twice"
    );
    harness.drain().await?;
    Ok(())
}
