//! The statements, each written once with `$n` placeholders (which both backends read),
//! compiled once per backend by [`impl_sql`]; the [`Dialect`] names the tables.

// The sealed trait's items are `pub` so a public trait may name them; nothing outside the
// crate can.
#![allow(unreachable_pub)]

use futures::future::BoxFuture;
use sqlx::{Executor, Pool, Postgres, Sqlite};

use super::schema;
use crate::error::{Error, ErrorKind};

/// One instance's row.
#[derive(Debug, Clone)]
pub struct StoredInstance {
    pub saga: String,
    pub key: String,
    /// JSON.
    pub state: String,
    pub version: i64,
    pub completed: bool,
    pub created_at: String,
    pub updated_at: String,
}

/// One pending timeout's row.
#[derive(Debug, Clone)]
pub struct TimeoutRow {
    pub name: String,
    pub event_id: String,
    pub due_at: String,
}

/// How one backend names the tables and installs them.
#[derive(Debug)]
pub(crate) struct Dialect {
    instances: &'static str,
    timeouts: &'static str,
    versions: &'static str,
    prelude: &'static str,
    install_lock: Option<i64>,
    /// How an install's transaction begins; `None`: the driver's `BEGIN`. SQLite's
    /// `BEGIN IMMEDIATE` takes the write lock first, waiting for another install: a deferred
    /// transaction that has read the version cannot wait to write, and fails at once with
    /// "database is locked" while another connection writes.
    install_begin: Option<&'static str>,
    versions_exist: &'static str,
    schema_versions: &'static [(i64, &'static str)],
}

const POSTGRES: Dialect = Dialect {
    instances: "mesh_saga.instances",
    timeouts: "mesh_saga.timeouts",
    versions: "mesh_saga.versions",
    prelude: schema::POSTGRES_PRELUDE,
    install_lock: Some(schema::INSTALL_LOCK),
    install_begin: None,
    versions_exist: "SELECT to_regclass('mesh_saga.versions') IS NOT NULL",
    schema_versions: schema::POSTGRES_VERSIONS,
};

const SQLITE: Dialect = Dialect {
    instances: "mesh_saga_instances",
    timeouts: "mesh_saga_timeouts",
    versions: "mesh_saga_versions",
    prelude: schema::SQLITE_PRELUDE,
    install_lock: None,
    install_begin: Some("BEGIN IMMEDIATE"),
    versions_exist: "SELECT count(*) > 0 FROM sqlite_master \
                     WHERE type = 'table' AND name = 'mesh_saga_versions'",
    schema_versions: schema::SQLITE_VERSIONS,
};

const INSTANCE_COLUMNS: &str = "saga, key, state, version, completed, created_at, updated_at";

type InstanceTuple = (String, String, String, i64, bool, String, String);

fn instance(
    (saga, key, state, version, completed, created_at, updated_at): InstanceTuple,
) -> StoredInstance {
    StoredInstance {
        saga,
        key,
        state,
        version,
        completed,
        created_at,
        updated_at,
    }
}

fn latest(d: &Dialect) -> i64 {
    d.schema_versions.last().map_or(0, |(v, _)| *v)
}

/// What each backend does; sealed.
pub trait Sql: sqlx::Database + Sized {
    /// Creates or upgrades the saga's tables.
    fn install_sagas(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), Error>>;

    /// The tables' version, `None` when they are not there; creates nothing.
    fn installed_sagas(pool: &Pool<Self>) -> BoxFuture<'_, Result<Option<i64>, Error>>;

    /// The instance `saga`/`key`, read in the caller's transaction.
    fn load<'a>(
        conn: &'a mut Self::Connection,
        saga: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredInstance>, sqlx::Error>>;

    /// Writes a new instance: `false` when one of its key exists (another start won).
    fn insert_instance<'a>(
        conn: &'a mut Self::Connection,
        row: &'a StoredInstance,
    ) -> BoxFuture<'a, Result<bool, sqlx::Error>>;

    /// Writes `row` over the instance if its version is still `expected`: `false` when it
    /// is not (another update won).
    fn update<'a>(
        conn: &'a mut Self::Connection,
        row: &'a StoredInstance,
        expected: i64,
    ) -> BoxFuture<'a, Result<bool, sqlx::Error>>;

    /// The instance's pending timeouts, by name.
    fn timeouts<'a>(
        conn: &'a mut Self::Connection,
        saga: &'a str,
        key: &'a str,
    ) -> BoxFuture<'a, Result<Vec<TimeoutRow>, sqlx::Error>>;

    /// Records a pending timeout.
    fn put_timeout<'a>(
        conn: &'a mut Self::Connection,
        saga: &'a str,
        key: &'a str,
        row: &'a TimeoutRow,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>>;

    /// Forgets the pending timeout `name`.
    fn delete_timeout<'a>(
        conn: &'a mut Self::Connection,
        saga: &'a str,
        key: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<(), sqlx::Error>>;

    /// Up to `limit` instances, of `saga` or of every saga, the latest updated first.
    fn list<'a>(
        pool: &'a Pool<Self>,
        saga: Option<&'a str>,
        limit: i64,
    ) -> BoxFuture<'a, Result<Vec<StoredInstance>, sqlx::Error>>;
}

macro_rules! impl_sql {
    ($db:ty, $dialect:expr) => {
        impl Sql for $db {
            fn install_sagas(pool: &Pool<Self>) -> BoxFuture<'_, Result<(), Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    let failed = |e| Error::database("installing the saga tables", e);
                    let known = latest(d);
                    let mut tx = match d.install_begin {
                        Some(begin) => pool.begin_with(begin).await,
                        None => pool.begin().await,
                    }
                    .map_err(failed)?;
                    if let Some(lock) = d.install_lock {
                        sqlx::query("SELECT pg_advisory_xact_lock($1)")
                            .bind(lock)
                            .execute(&mut *tx)
                            .await
                            .map_err(failed)?;
                    }
                    (&mut *tx)
                        .execute(d.prelude)
                        .await
                        .map_err(failed)?;
                    let found: Option<i64> =
                        sqlx::query_scalar(&format!("SELECT max(version) FROM {}", d.versions))
                            .fetch_one(&mut *tx)
                            .await
                            .map_err(failed)?;
                    let found = found.unwrap_or(0);
                    if found > known {
                        return Err(Error::new(
                            ErrorKind::SchemaTooNew { found, known },
                            "installing the saga tables",
                        ));
                    }
                    for (version, statements) in d.schema_versions {
                        if *version <= found {
                            continue;
                        }
                        (&mut *tx)
                            .execute(*statements)
                            .await
                            .map_err(failed)?;
                        sqlx::query(&format!("INSERT INTO {} (version) VALUES ($1)", d.versions))
                            .bind(*version)
                            .execute(&mut *tx)
                            .await
                            .map_err(failed)?;
                    }
                    tx.commit().await.map_err(failed)
                })
            }

            fn installed_sagas(pool: &Pool<Self>) -> BoxFuture<'_, Result<Option<i64>, Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    let failed = |e| Error::database("reading the saga tables' version", e);
                    let exists: bool = sqlx::query_scalar(d.versions_exist)
                        .fetch_one(pool)
                        .await
                        .map_err(failed)?;
                    if !exists {
                        return Ok(None);
                    }
                    let found: Option<i64> =
                        sqlx::query_scalar(&format!("SELECT max(version) FROM {}", d.versions))
                            .fetch_one(pool)
                            .await
                            .map_err(failed)?;
                    let (found, known) = (found.unwrap_or(0), latest(d));
                    if found > known {
                        return Err(Error::new(
                            ErrorKind::SchemaTooNew { found, known },
                            "reading the saga tables",
                        ));
                    }
                    Ok((found > 0).then_some(found))
                })
            }

            fn load<'a>(
                conn: &'a mut Self::Connection,
                saga: &'a str,
                key: &'a str,
            ) -> BoxFuture<'a, Result<Option<StoredInstance>, sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    let row: Option<InstanceTuple> = sqlx::query_as(&format!(
                        "SELECT {INSTANCE_COLUMNS} FROM {} WHERE saga = $1 AND key = $2",
                        d.instances
                    ))
                    .bind(saga)
                    .bind(key)
                    .fetch_optional(conn)
                    .await?;
                    Ok(row.map(instance))
                })
            }

            fn insert_instance<'a>(
                conn: &'a mut Self::Connection,
                row: &'a StoredInstance,
            ) -> BoxFuture<'a, Result<bool, sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    let done = sqlx::query(&format!(
                        "INSERT INTO {} ({INSTANCE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                         ON CONFLICT DO NOTHING",
                        d.instances
                    ))
                    .bind(&row.saga)
                    .bind(&row.key)
                    .bind(&row.state)
                    .bind(row.version)
                    .bind(row.completed)
                    .bind(&row.created_at)
                    .bind(&row.updated_at)
                    .execute(conn)
                    .await?;
                    Ok(done.rows_affected() == 1)
                })
            }

            fn update<'a>(
                conn: &'a mut Self::Connection,
                row: &'a StoredInstance,
                expected: i64,
            ) -> BoxFuture<'a, Result<bool, sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    // The version check is the optimistic lock: on PostgreSQL an update
                    // racing another waits for its commit and then finds the version moved.
                    let done = sqlx::query(&format!(
                        "UPDATE {} SET state = $1, version = $2, completed = $3, updated_at = $4 \
                         WHERE saga = $5 AND key = $6 AND version = $7",
                        d.instances
                    ))
                    .bind(&row.state)
                    .bind(row.version)
                    .bind(row.completed)
                    .bind(&row.updated_at)
                    .bind(&row.saga)
                    .bind(&row.key)
                    .bind(expected)
                    .execute(conn)
                    .await?;
                    Ok(done.rows_affected() == 1)
                })
            }

            fn timeouts<'a>(
                conn: &'a mut Self::Connection,
                saga: &'a str,
                key: &'a str,
            ) -> BoxFuture<'a, Result<Vec<TimeoutRow>, sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    let rows: Vec<(String, String, String)> = sqlx::query_as(&format!(
                        "SELECT name, event_id, due_at FROM {} WHERE saga = $1 AND key = $2 \
                         ORDER BY name",
                        d.timeouts
                    ))
                    .bind(saga)
                    .bind(key)
                    .fetch_all(conn)
                    .await?;
                    Ok(rows
                        .into_iter()
                        .map(|(name, event_id, due_at)| TimeoutRow {
                            name,
                            event_id,
                            due_at,
                        })
                        .collect())
                })
            }

            fn put_timeout<'a>(
                conn: &'a mut Self::Connection,
                saga: &'a str,
                key: &'a str,
                row: &'a TimeoutRow,
            ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    sqlx::query(&format!(
                        "INSERT INTO {} (saga, key, name, event_id, due_at) \
                         VALUES ($1, $2, $3, $4, $5)",
                        d.timeouts
                    ))
                    .bind(saga)
                    .bind(key)
                    .bind(&row.name)
                    .bind(&row.event_id)
                    .bind(&row.due_at)
                    .execute(conn)
                    .await?;
                    Ok(())
                })
            }

            fn delete_timeout<'a>(
                conn: &'a mut Self::Connection,
                saga: &'a str,
                key: &'a str,
                name: &'a str,
            ) -> BoxFuture<'a, Result<(), sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    sqlx::query(&format!(
                        "DELETE FROM {} WHERE saga = $1 AND key = $2 AND name = $3",
                        d.timeouts
                    ))
                    .bind(saga)
                    .bind(key)
                    .bind(name)
                    .execute(conn)
                    .await?;
                    Ok(())
                })
            }

            fn list<'a>(
                pool: &'a Pool<Self>,
                saga: Option<&'a str>,
                limit: i64,
            ) -> BoxFuture<'a, Result<Vec<StoredInstance>, sqlx::Error>> {
                Box::pin(async move {
                    let d: &Dialect = &$dialect;
                    let rows: Vec<InstanceTuple> = sqlx::query_as(&format!(
                        "SELECT {INSTANCE_COLUMNS} FROM {} WHERE (CAST($1 AS TEXT) IS NULL OR saga = $1) \
                         ORDER BY updated_at DESC, saga, key LIMIT $2",
                        d.instances
                    ))
                    .bind(saga)
                    .bind(limit)
                    .fetch_all(pool)
                    .await?;
                    Ok(rows.into_iter().map(instance).collect())
                })
            }
        }
    };
}

impl_sql!(Postgres, POSTGRES);
impl_sql!(Sqlite, SQLITE);
