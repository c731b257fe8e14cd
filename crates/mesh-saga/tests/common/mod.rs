//! What the saga's tests share: a database of the test's own (PostgreSQL or SQLite), the
//! order saga's world on the harness's in-memory broker, and counts of what was published.

#![allow(dead_code, unreachable_pub)]

use std::collections::HashSet;
use std::str::FromStr;
use std::time::Duration;

use mesh::raw::saga::SagaTransition;
use mesh::testing::{Harness, Record};
use mesh::{Bus, Event};
use mesh_outbox::{Outbox, Relay, RelayOptions};
use mesh_saga::{Database, Instance, SagaService, SagaStore};
use mesh_testkit::{eventually, TempStore};
use serde::de::DeserializeOwned;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

#[path = "../../examples/order/mod.rs"]
pub mod order;

/// A wait that should take far less; a broken saga fails the test here.
pub const PATIENCE: Duration = Duration::from_secs(60);

/// A PostgreSQL database of the test's own (dropped with the store) and a pool on it.
pub async fn postgres() -> anyhow::Result<(TempStore, PgPool)> {
    let store = TempStore::postgres().await?;
    let pool = postgres_pool(store.url()).await?;
    Ok((store, pool))
}

/// A pool on the PostgreSQL database at `url`.
pub async fn postgres_pool(url: &str) -> anyhow::Result<PgPool> {
    Ok(PgPoolOptions::new()
        .max_connections(16)
        .connect(url)
        .await?)
}

/// A SQLite file of the test's own (removed with the store) and a pool on it: WAL, and a
/// writer waits for another's lock rather than failing.
pub async fn sqlite() -> anyhow::Result<(TempStore, SqlitePool)> {
    let store = TempStore::sqlite();
    let pool = sqlite_pool(store.url()).await?;
    Ok((store, pool))
}

/// A pool on the SQLite file at `url`.
pub async fn sqlite_pool(url: &str) -> anyhow::Result<SqlitePool> {
    let options = SqliteConnectOptions::from_str(url)?
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30));
    Ok(SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await?)
}

/// Relays that notice quickly.
pub fn quick() -> RelayOptions {
    RelayOptions::default()
        .poll_interval(Duration::from_millis(20))
        .retry_delay(Duration::from_millis(100))
}

/// The order saga's module and the modules around it, on the harness's in-memory broker.
pub struct World<DB: Database> {
    pub harness: Harness,
    pub service: SagaService<order::Order, DB>,
    pub store: SagaStore<DB>,
    pub outbox: Outbox<DB>,
    pub relay: Relay,
    pub orders: Bus,
    pub shop: Bus,
    pub payments: Bus,
    pub warehouse: Bus,
}

impl<DB: Database> World<DB> {
    /// The saga (with `payment_timeout`) in module `orders`, its relay, and buses for
    /// `shop`, `payments` and `warehouse` that emit as a test says.
    pub async fn start(pool: sqlx::Pool<DB>, payment_timeout: Duration) -> anyhow::Result<Self> {
        let harness = Harness::memory().timeout(PATIENCE);
        let store = SagaStore::new(pool.clone()).await?;
        let service = order::saga(payment_timeout).service(store.clone());
        let orders = harness.module("orders", |bus| service.wire(bus)).await?;
        service.attach(&orders);
        let outbox = Outbox::new(pool).await?;
        let relay = outbox.start_relay([orders.clone()], quick()).await?;
        Ok(World {
            shop: harness.module("shop", |bus| bus).await?,
            payments: harness.module("payments", |bus| bus).await?,
            warehouse: harness.module("warehouse", |bus| bus).await?,
            harness,
            service,
            store,
            outbox,
            relay,
            orders,
        })
    }

    /// Order `key`'s instance once `ready` holds for it.
    pub async fn instance_when(
        &self,
        key: &str,
        what: &str,
        ready: impl Fn(&Instance<order::Order>) -> bool,
    ) -> Instance<order::Order> {
        eventually(PATIENCE, what, || async {
            self.store
                .instance::<order::Order>("order", key)
                .await
                .ok()
                .flatten()
                .filter(|i| ready(i))
        })
        .await
    }

    /// Waits until the relay published every committed row (nothing pending).
    pub async fn relay_idle(&self) {
        eventually(PATIENCE, "the outbox relayed everything", || async {
            self.outbox
                .counts()
                .await
                .ok()
                .filter(|c| c.pending == 0)
                .map(|_| ())
        })
        .await;
    }

    /// The distinct ids of the events of type `E` published so far for which `which` holds.
    pub fn published<E: Event + DeserializeOwned>(&self, which: impl Fn(&E) -> bool) -> usize {
        published_ids(&self.harness, which).len()
    }

    /// How many deliveries module `module` handled (acked after its handlers succeeded).
    pub fn handled(&self, module: &str) -> usize {
        self.harness
            .records()
            .iter()
            .filter(|r| matches!(r, Record::Handled(h) if h.module == module))
            .count()
    }

    pub async fn stop(self) -> anyhow::Result<()> {
        self.relay.stop().await;
        self.harness.drain().await?;
        Ok(())
    }
}

/// The distinct ids of the published events of type `E` for which `which` holds.
pub fn published_ids<E: Event + DeserializeOwned>(
    harness: &Harness,
    which: impl Fn(&E) -> bool,
) -> HashSet<String> {
    harness
        .records()
        .iter()
        .filter_map(|r| match r {
            Record::Published(p) if p.key == E::KEY => {
                let event: E = serde_json::from_slice(&p.body).ok()?;
                which(&event).then(|| p.id.map(|id| id.to_string()).unwrap_or_default())
            }
            _ => None,
        })
        .collect()
}

/// The saga's transitions published so far, each id once, by version.
pub fn transitions(harness: &Harness) -> Vec<(String, Option<String>, SagaTransition)> {
    let mut seen = HashSet::new();
    let mut all: Vec<(String, Option<String>, SagaTransition)> = harness
        .records()
        .iter()
        .filter_map(|r| match r {
            Record::Published(p) if p.key == "module.orders.saga.transition" => {
                let id = p.id.map(|id| id.to_string()).unwrap_or_default();
                let body: SagaTransition = serde_json::from_slice(&p.body).ok()?;
                seen.insert(id.clone())
                    .then(|| (id, p.causation_id.clone(), body))
            }
            _ => None,
        })
        .collect();
    all.sort_by_key(|(_, _, t)| (t.key.clone(), t.version));
    all
}

/// Waits until module `orders` handled `n` deliveries in all.
pub async fn wait_handled<DB: Database>(w: &World<DB>, n: usize) {
    eventually(
        PATIENCE,
        &format!("{n} deliveries handled by orders"),
        || async { (w.handled("orders") >= n).then_some(()) },
    )
    .await;
}
