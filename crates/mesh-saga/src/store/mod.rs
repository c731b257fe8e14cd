//! Where instances live: a row per saga and correlation key (its state as JSON, its version,
//! whether it completed) and a row per pending timeout, in the application's database beside
//! the outbox's tables (PostgreSQL schema `mesh_saga`, SQLite tables `mesh_saga_*`).

mod schema;
pub(crate) mod sql;

use std::str::FromStr;

use mesh::EventId;
use serde::de::DeserializeOwned;
use sqlx::Pool;

use crate::error::{Error, ErrorKind};
use sql::{Sql, StoredInstance, TimeoutRow};

/// A database sagas run on: [`sqlx::Postgres`] or [`sqlx::Sqlite`] (sealed).
pub trait Database: mesh_outbox::Backend + Sql {}

impl Database for sqlx::Postgres {}
impl Database for sqlx::Sqlite {}

/// The saga tables of one database (and the outbox's, which sagas emit through). Cheap to
/// clone.
#[derive(Debug)]
pub struct SagaStore<DB: Database> {
    pool: Pool<DB>,
}

impl<DB: Database> Clone for SagaStore<DB> {
    fn clone(&self) -> Self {
        SagaStore {
            pool: self.pool.clone(),
        }
    }
}

/// One instance as stored: its state, version and pending timeouts.
#[derive(Debug, Clone)]
pub struct Instance<S> {
    /// The saga's name.
    pub saga: String,
    /// The correlation key.
    pub key: String,
    /// The state after the last event applied.
    pub state: S,
    /// 1 when started, one more per event applied.
    pub version: i64,
    /// Whether a transition completed it.
    pub completed: bool,
    /// When it started (the process's clock, RFC 3339).
    pub created_at: String,
    /// When it last changed.
    pub updated_at: String,
    /// Its timeouts not yet arrived nor cancelled, by name.
    pub timeouts: Vec<PendingTimeout>,
}

/// A timeout an instance waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingTimeout {
    /// Its name in the saga.
    pub name: String,
    /// The scheduled event's id (the outbox cancels it by this id).
    pub event_id: String,
    /// When it is due (RFC 3339).
    pub due: String,
}

impl<DB: Database> SagaStore<DB> {
    /// The store on `pool`'s database: creates or upgrades the saga tables and the
    /// outbox's.
    pub async fn new(pool: Pool<DB>) -> Result<SagaStore<DB>, Error> {
        mesh_outbox::Outbox::new(pool.clone())
            .await
            .map_err(|e| Error::outbox("installing the outbox tables", e))?;
        DB::install_sagas(&pool).await?;
        Ok(SagaStore { pool })
    }

    /// The store on `pool`'s database if the saga tables are there, `None` if not: reads
    /// only (for tools that look at instances).
    pub async fn existing(pool: Pool<DB>) -> Result<Option<SagaStore<DB>>, Error> {
        Ok(DB::installed_sagas(&pool)
            .await?
            .map(|_| SagaStore { pool }))
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<DB> {
        &self.pool
    }

    /// The instance `key` of `saga`, with its state read as `S` (`serde_json::Value` reads
    /// any).
    pub async fn instance<S: DeserializeOwned>(
        &self,
        saga: &str,
        key: &str,
    ) -> Result<Option<Instance<S>>, Error> {
        let failed = |e| Error::database("reading a saga instance", e);
        let mut conn = self.pool.acquire().await.map_err(failed)?;
        let Some(row) = DB::load(&mut conn, saga, key).await.map_err(failed)? else {
            return Ok(None);
        };
        let timeouts = DB::timeouts(&mut conn, saga, key).await.map_err(failed)?;
        Ok(Some(view(row, timeouts)?))
    }

    /// Up to `limit` instances, of `saga` or of every saga (`None`), the latest changed
    /// first, each with its pending timeouts.
    pub async fn instances<S: DeserializeOwned>(
        &self,
        saga: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Instance<S>>, Error> {
        let failed = |e| Error::database("listing saga instances", e);
        let rows = DB::list(&self.pool, saga, i64::from(limit))
            .await
            .map_err(failed)?;
        let mut conn = self.pool.acquire().await.map_err(failed)?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let timeouts = DB::timeouts(&mut conn, &row.saga, &row.key)
                .await
                .map_err(failed)?;
            out.push(view(row, timeouts)?);
        }
        Ok(out)
    }
}

/// The public view of a stored row.
fn view<S: DeserializeOwned>(
    row: StoredInstance,
    timeouts: Vec<TimeoutRow>,
) -> Result<Instance<S>, Error> {
    let state = serde_json::from_str(&row.state).map_err(|e| {
        Error::with_source(
            ErrorKind::State,
            format!(
                "reading the state of instance {:?} of saga {:?}",
                row.key, row.saga
            ),
            e,
        )
    })?;
    Ok(Instance {
        saga: row.saga,
        key: row.key,
        state,
        version: row.version,
        completed: row.completed,
        created_at: row.created_at,
        updated_at: row.updated_at,
        timeouts: timeouts
            .into_iter()
            .map(|t| PendingTimeout {
                name: t.name,
                event_id: t.event_id,
                due: t.due_at,
            })
            .collect(),
    })
}

/// A stored event id as the outbox takes it.
pub(crate) fn event_id(text: &str) -> Result<EventId, Error> {
    EventId::from_str(text).map_err(|_| {
        Error::new(
            ErrorKind::State,
            format!("a pending timeout's event id is not an id: {text:?}"),
        )
    })
}
