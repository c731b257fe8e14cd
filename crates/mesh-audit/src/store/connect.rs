//! Connecting to the store's database: the pool of either backend, a refused PostgreSQL
//! connection failing at once, and the check a reader makes that the store is there (a
//! reader never creates a file or a table).

use std::str::FromStr;
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::Connection as _;

use super::hint;
use crate::error::{Error, ErrorKind};
use crate::options::{Backend, StoreOptions, STORE_URL_HINT};

pub(super) static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("migrations/sqlite");
pub(super) static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("migrations/postgres");

/// The store's pool, one per backend.
#[derive(Debug, Clone)]
pub(super) enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

/// How long the pool waits for a connection (PostgreSQL that is starting, or busy).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether the store may be created: the logger's open makes the file and the tables; a
/// reader's changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Create,
    Existing,
}

/// The pool of the store's database.
pub(super) async fn pool(options: &StoreOptions, mode: Mode) -> Result<Pool, Error> {
    match options.backend() {
        Backend::Sqlite => sqlite(options, mode).await,
        Backend::Postgres => postgres(options).await,
    }
}

fn invalid_url(options: &StoreOptions, e: sqlx::Error) -> Error {
    Error::options(format!("store URL `{}`", options.redacted_url()))
        .with_source(e)
        .with_hint(STORE_URL_HINT)
}

async fn sqlite(options: &StoreOptions, mode: Mode) -> Result<Pool, Error> {
    let url = options.get_url();
    let mut connect = SqliteConnectOptions::from_str(url)
        .map_err(|e| invalid_url(options, e))?
        // WAL: readers (queries) never block the logger's writes.
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(if options.get_sqlite_synchronous_full() {
            SqliteSynchronous::Full
        } else {
            SqliteSynchronous::Normal
        })
        // How long a writer waits for another; a transaction that read first cannot wait
        // (the store's writing transactions begin `IMMEDIATE`: see the module docs).
        .busy_timeout(Duration::from_secs(30));
    // Every connection to `:memory:` is a database of its own: keep exactly one.
    let memory = url.contains(":memory:") || url.contains("mode=memory");
    let url_mode = hint::sqlite_mode(url);
    let creates = mode == Mode::Create
        && !memory
        && (url_mode == Some("rwc") || (url_mode.is_none() && options.get_create_if_missing()));
    if creates {
        connect = connect.create_if_missing(true);
        hint::create_parent_dir(connect.get_filename(), options)?;
    } else {
        // A reader never makes the file, whatever the URL's mode says.
        connect = connect.create_if_missing(false);
    }
    let mut pool = SqlitePoolOptions::new().max_connections(if memory {
        1
    } else {
        options.get_max_connections()
    });
    if memory {
        pool = pool
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None);
    }
    let path = connect.get_filename().to_path_buf();
    let pool = pool.connect_with(connect).await.map_err(|e| {
        let hint = hint::sqlite(&path, &e, creates);
        Error::database(format!("opening {}", options.redacted_url()), e).with_hint(hint)
    })?;
    Ok(Pool::Sqlite(pool))
}

async fn postgres(options: &StoreOptions) -> Result<Pool, Error> {
    let connect =
        PgConnectOptions::from_str(options.get_url()).map_err(|e| invalid_url(options, e))?;
    let (host, port, database) = (
        connect.get_host().to_owned(),
        connect.get_port(),
        connect.get_database().map(str::to_owned),
    );
    let failed = |e: sqlx::Error| {
        let hint = hint::postgres(&host, port, database.as_deref(), &e);
        Error::database(format!("connecting to {}", options.redacted_url()), e).with_hint(hint)
    };
    // sqlx's pool takes a refused connection for a server still starting and tries again
    // until its timeout: 30 s of silence for a port where nothing listens. One connection
    // first: refused fails now, with the hint; anything that may heal (a server starting,
    // too many connections, a slow answer) is left to the pool's retries.
    match tokio::time::timeout(ACQUIRE_TIMEOUT, PgConnection::connect_with(&connect)).await {
        Ok(Ok(probe)) => {
            let _ = probe.close().await;
        }
        Ok(Err(e)) if fails_now(&e) => return Err(failed(e)),
        Ok(Err(_)) | Err(_) => {}
    }
    let pool = PgPoolOptions::new()
        .max_connections(options.get_max_connections())
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .connect_with(connect)
        .await
        .map_err(failed)?;
    Ok(Pool::Postgres(pool))
}

/// Whether a first connection's failure is final: a refused or unreachable address (no
/// server listens there), or anything but a database's transient refusal (a server that is
/// starting or shutting down, too many connections).
fn fails_now(error: &sqlx::Error) -> bool {
    match error {
        // cannot_connect_now (starting, shutting down), insufficient resources (too many
        // connections): what sqlx's pool retries.
        sqlx::Error::Database(db) => !db
            .code()
            .is_some_and(|code| code == "57P03" || code.starts_with("53")),
        _ => true,
    }
}

/// Checks that the store is there for a reader: the logger's tables, at this mesh's
/// version. A database without them is [`ErrorKind::NotFound`]; one migrated by another
/// version (older or newer) is [`ErrorKind::Migration`]. Creates and changes nothing.
pub(super) async fn check_schema(pool: &Pool, options: &StoreOptions) -> Result<(), Error> {
    let shown = options.redacted_url();
    let failed = |e| Error::database(format!("reading the schema of {shown}"), e);
    let (present, applied, known): (bool, Option<i64>, Option<i64>) = match pool {
        Pool::Sqlite(pool) => {
            let present: bool = sqlx::query_scalar(
                "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' \
                 AND name = '_sqlx_migrations'",
            )
            .fetch_one(pool)
            .await
            .map_err(failed)?;
            let applied = if present {
                sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
                    .fetch_one(pool)
                    .await
                    .map_err(failed)?
            } else {
                None
            };
            (
                present,
                applied,
                SQLITE_MIGRATIONS.iter().map(|m| m.version).max(),
            )
        }
        Pool::Postgres(pool) => {
            let present: bool =
                sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
                    .fetch_one(pool)
                    .await
                    .map_err(failed)?;
            let applied = if present {
                sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
                    .fetch_one(pool)
                    .await
                    .map_err(failed)?
            } else {
                None
            };
            (
                present,
                applied,
                POSTGRES_MIGRATIONS.iter().map(|m| m.version).max(),
            )
        }
    };
    match applied {
        None => Err(Error::new(
            ErrorKind::NotFound,
            format!(
                "no audit store in {shown}{}",
                if present {
                    " (no migration applied)"
                } else {
                    ""
                }
            ),
        )
        .with_hint(format!(
            "an audit logger creates its store: run `mesh audit run --store {shown}`, or give \
             the store it records into"
        ))),
        Some(applied) if Some(applied) < known => Err(Error::new(
            ErrorKind::Migration,
            format!("the audit store {shown} has an older schema (version {applied})"),
        )
        .with_hint(
            "start this mesh's audit logger on it once (`mesh audit run`): it upgrades the \
             schema; reading commands change nothing",
        )),
        Some(applied) if Some(applied) > known => Err(Error::new(
            ErrorKind::Migration,
            format!("the audit store {shown} has a newer schema (version {applied})"),
        )
        .with_hint("the store was migrated by a newer mesh: use a newer mesh to read it")),
        Some(_) => Ok(()),
    }
}
