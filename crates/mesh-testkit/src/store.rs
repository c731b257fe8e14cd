//! A throw-away database for the audit store ([`TempStore`]): a SQLite file in a directory of
//! its own, or a database of its own on the machine's PostgreSQL server, removed on drop.
//!
//! The kit knows the store only by its URL (what `mesh audit --store` and the store's
//! options parse), so it needs neither the audit crate nor a database driver: the PostgreSQL
//! database is created and dropped with `psql`.
//!
//! The server is `MESH_TEST_PG_URL`, by default `postgres://postgres@127.0.0.1:5432/test`
//! (see [`postgres_admin_url`]); the user must be allowed to create databases. Tests that
//! must configure a server their own way (TLS) start a [`PrivatePostgres`](crate::PrivatePostgres)
//! instead.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context};

use crate::temp::{unique, TempDir};

/// The environment variable naming the PostgreSQL server the tests create databases on.
pub const PG_URL_ENV: &str = "MESH_TEST_PG_URL";

/// The server when [`PG_URL_ENV`] is not set: the local one, trust authentication.
const DEFAULT_PG_URL: &str = "postgres://postgres@127.0.0.1:5432/test";

/// The URL of a database on the test PostgreSQL server that the tests' user may connect to
/// and create databases from: `MESH_TEST_PG_URL`, or `postgres://postgres@127.0.0.1:5432/test`.
pub fn postgres_admin_url() -> String {
    std::env::var(PG_URL_ENV).unwrap_or_else(|_| DEFAULT_PG_URL.to_owned())
}

/// A store of the test's own, removed on drop (even when the test panics).
#[derive(Debug)]
pub struct TempStore {
    url: String,
    cleanup: Cleanup,
}

#[derive(Debug)]
enum Cleanup {
    /// The directory that holds the SQLite file (removed on drop), and the file.
    Sqlite { _dir: TempDir, file: PathBuf },
    /// A database on the server of `admin_url`.
    Postgres { admin_url: String, name: String },
}

impl TempStore {
    /// A SQLite file, created on first open (`sqlite://…?mode=rwc`), in a new directory of the
    /// temporary directory; the directory goes on drop, with the file's `-wal`, `-shm` and
    /// `-journal` companions.
    ///
    /// # Panics
    ///
    /// When the temporary directory is not writable.
    pub fn sqlite() -> TempStore {
        let dir = TempDir::new("store").expect("a directory in the temporary directory");
        let file = dir.join("audit.db");
        TempStore {
            url: format!("sqlite://{}?mode=rwc", file.display()),
            cleanup: Cleanup::Sqlite { _dir: dir, file },
        }
    }

    /// A new, empty database `mesh_test_<random>` on the test PostgreSQL server
    /// ([`postgres_admin_url`]), dropped on drop (`WITH (FORCE)`: connections still open
    /// are closed). Fails with a hint when no server answers.
    pub async fn postgres() -> anyhow::Result<TempStore> {
        TempStore::postgres_on(postgres_admin_url()).await
    }

    /// A new, empty database on the server of `admin_url` (a database URL whose user may
    /// create databases), dropped on drop, as [`TempStore::postgres`] does on the test server.
    pub async fn postgres_on(admin_url: String) -> anyhow::Result<TempStore> {
        let name = format!("mesh_test_{}", unique().replace('-', "_"));
        let (base, _) = admin_url
            .rsplit_once('/')
            .filter(|(base, _)| base.contains("://"))
            .with_context(|| format!("{PG_URL_ENV} names no database: {admin_url}"))?;
        let url = format!("{base}/{name}");
        let output =
            tokio::process::Command::from(psql(&admin_url, &format!("CREATE DATABASE {name}")))
                .output()
                .await
                .context("running psql (install the Debian package postgresql-client)")?;
        if !output.status.success() {
            bail!(
                "creating database {name} on {admin_url} failed: {} (start PostgreSQL or set \
                 {PG_URL_ENV})",
                String::from_utf8_lossy(&output.stderr).trim()
            );
        }
        Ok(TempStore {
            url,
            cleanup: Cleanup::Postgres { admin_url, name },
        })
    }

    /// The store's URL: `sqlite://<file>?mode=rwc` or `postgres://…/<database>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The SQLite file, for a SQLite store.
    pub fn sqlite_path(&self) -> Option<&Path> {
        match &self.cleanup {
            Cleanup::Sqlite { file, .. } => Some(file),
            Cleanup::Postgres { .. } => None,
        }
    }

    /// Whether it is a PostgreSQL database.
    pub fn is_postgres(&self) -> bool {
        matches!(self.cleanup, Cleanup::Postgres { .. })
    }
}

impl Drop for TempStore {
    fn drop(&mut self) {
        match &self.cleanup {
            // The directory goes with its `TempDir`.
            Cleanup::Sqlite { .. } => {}
            Cleanup::Postgres { admin_url, name } => {
                // Blocking, on purpose: the database is gone when the drop returns.
                let dropped = psql(
                    admin_url,
                    &format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"),
                )
                .output();
                match dropped {
                    Ok(output) if output.status.success() => {}
                    Ok(output) => eprintln!(
                        "could not drop test database {name}: {}",
                        String::from_utf8_lossy(&output.stderr).trim()
                    ),
                    Err(e) => eprintln!("could not drop test database {name}: psql: {e}"),
                }
            }
        }
    }
}

/// `psql` running one statement on `url`, stopping on the first error, with no `.psqlrc`.
fn psql(url: &str, statement: &str) -> Command {
    let mut command = Command::new("psql");
    command
        .args(["--no-psqlrc", "--quiet", "-v", "ON_ERROR_STOP=1"])
        .args(["--dbname", url, "--command", statement])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sqlite_store_is_a_file_in_a_directory_removed_on_drop() {
        let store = TempStore::sqlite();
        let path = store.sqlite_path().expect("a SQLite store").to_owned();
        assert!(!store.is_postgres());
        assert_eq!(store.url(), format!("sqlite://{}?mode=rwc", path.display()));
        let dir = path.parent().expect("a directory").to_owned();
        assert!(dir.is_dir());
        std::fs::write(&path, b"db").expect("the file is writable");
        std::fs::write(dir.join("audit.db-wal"), b"wal").expect("a companion is writable");
        let other = TempStore::sqlite();
        assert_ne!(other.url(), store.url());
        drop(store);
        assert!(!dir.exists());
    }

    #[tokio::test]
    async fn a_postgres_store_is_a_database_of_its_own_dropped_on_drop() {
        let store = TempStore::postgres()
            .await
            .expect("a PostgreSQL server (see MESH_TEST_PG_URL)");
        assert!(store.is_postgres() && store.sqlite_path().is_none());
        let name = store
            .url()
            .rsplit('/')
            .next()
            .expect("a database")
            .to_owned();
        assert!(name.starts_with("mesh_test_"), "{name}");
        let exists = |name: &str| {
            let query = format!("SELECT 1 FROM pg_database WHERE datname = '{name}'");
            let output = psql(&postgres_admin_url(), &query)
                .args(["--tuples-only", "--no-align"])
                .stdout(Stdio::piped())
                .output()
                .expect("psql runs");
            assert!(output.status.success(), "{output:?}");
            String::from_utf8_lossy(&output.stdout).trim() == "1"
        };
        assert!(exists(&name));
        // The database is usable at its URL.
        let created = psql(store.url(), "CREATE TABLE t (n int)")
            .output()
            .expect("psql runs");
        assert!(created.status.success(), "{created:?}");
        drop(store);
        assert!(!exists(&name));
    }
}
