//! What the outbox's tests share: a database of the test's own (PostgreSQL or SQLite), a
//! vhost of its own on the shared broker, buses on it, and a consumer that records what it
//! receives.

#![allow(dead_code, unreachable_pub)]

use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use mesh::{Bus, HandlerError, Incoming};
use mesh_testkit::{sdk, TempStore, TestVhost};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

/// A wait that should take far less; a broken relay fails the test here.
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

/// A SQLite file of the test's own (removed with the store) and a pool on it.
pub async fn sqlite() -> anyhow::Result<(TempStore, SqlitePool)> {
    let store = TempStore::sqlite();
    let pool = sqlite_pool(store.url()).await?;
    Ok((store, pool))
}

/// A pool on the SQLite file at `url`: WAL (readers never wait for the writer), and a
/// writer waits for another's lock rather than failing.
pub async fn sqlite_pool(url: &str) -> anyhow::Result<SqlitePool> {
    let options = SqliteConnectOptions::from_str(url)?
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30));
    Ok(SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await?)
}

/// One delivery as a consumer saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    pub id: String,
    pub key: String,
    pub source: String,
    pub causation_id: Option<String>,
    pub body: Bytes,
}

/// Everything a consumer received, in order.
#[derive(Debug, Clone, Default)]
pub struct Received(Arc<Mutex<Vec<Seen>>>);

impl Received {
    pub fn all(&self) -> Vec<Seen> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// A consumer (module `sink`) of every event under `patterns`, recording each delivery, one
/// at a time (prefetch 1), so the order recorded is the order delivered.
pub async fn consumer(vhost: &TestVhost, patterns: &[&str]) -> anyhow::Result<(Bus, Received)> {
    let received = Received::default();
    let record = received.clone();
    let bus = Bus::builder()
        .node("n1")
        .module("sink")
        .prefetch(1)
        .on_raw(
            patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
            move |e: Incoming<Bytes>| {
                let record = record.clone();
                async move {
                    record
                        .0
                        .lock()
                        .map_err(|_| HandlerError::permanent("poisoned"))?
                        .push(Seen {
                            id: e.meta.id().to_string(),
                            key: e.meta.key().to_string(),
                            source: e.meta.source().to_owned(),
                            causation_id: e.meta.causation_id().map(str::to_owned),
                            body: e.event,
                        });
                    Ok(())
                }
            },
        )
        .start(sdk::transport(&vhost.url()).await?)
        .await?;
    Ok((bus, received))
}

/// A bus of module `module` on the vhost, with no handlers.
pub async fn emitter(vhost: &TestVhost, module: &str) -> anyhow::Result<Bus> {
    sdk::emitter(&vhost.url(), "n1", module).await
}
