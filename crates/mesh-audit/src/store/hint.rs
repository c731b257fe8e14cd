//! What to do when the store cannot be opened: one hint per failure a user can fix (a
//! missing directory, a read-only file, a database that is not running, a wrong password),
//! read from the error's kind and code, never from its text.

use std::path::Path;

use sqlx::migrate::MigrateError;

use crate::error::{Error, ErrorKind};
use crate::options::StoreOptions;

/// The `mode` query parameter of a `sqlite:` URL (`ro`, `rw`, `rwc`, `memory`), if any.
pub(super) fn sqlite_mode(url: &str) -> Option<&str> {
    let (_, query) = url.split_once('?')?;
    query
        .split('&')
        .filter_map(|pair| pair.split_once('='))
        .find_map(|(key, value)| (key == "mode").then_some(value))
}

/// Creates the directory of a SQLite file the store may create, when it is missing.
pub(super) fn create_parent_dir(file: &Path, options: &StoreOptions) -> Result<(), Error> {
    let Some(dir) = file.parent().filter(|dir| !dir.as_os_str().is_empty()) else {
        return Ok(());
    };
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| {
        Error::new(
            ErrorKind::Database,
            format!(
                "creating the directory {} of the store {}",
                dir.display(),
                options.redacted_url()
            ),
        )
        .with_source(e)
        .with_hint(format!(
            "create {} with write access for this user (e.g. `sudo install -d -o \"$USER\" {}`), \
             or give another store",
            dir.display(),
            dir.display()
        ))
    })
}

/// SQLite's primary result code of a database error (the low byte of its extended code).
fn sqlite_code(error: &sqlx::Error) -> Option<u32> {
    let code = error.as_database_error()?.code()?;
    code.parse::<u32>().ok().map(|code| code & 0xff)
}

/// What to do when the SQLite file `path` cannot be opened; `creating`: the store was allowed
/// to create it.
pub(super) fn sqlite(path: &Path, error: &sqlx::Error, creating: bool) -> String {
    let shown = path.display();
    let dir = path
        .parent()
        .filter(|dir| !dir.as_os_str().is_empty())
        .map_or_else(|| ".".to_owned(), |dir| dir.display().to_string());
    match sqlite_code(error) {
        // SQLITE_CANTOPEN
        Some(14) if !path.exists() && !creating => format!(
            "there is no store at {shown}: start the audit logger (`mesh audit run --store \
             sqlite://{shown}`) to create it, or correct the path"
        ),
        Some(14) if !path.exists() => format!(
            "{shown} cannot be created: check that {dir} exists and this user may write to it, \
             or give another store"
        ),
        Some(14) => {
            format!("this user cannot open {shown}: check the permissions of the file and of {dir}")
        }
        // SQLITE_READONLY, SQLITE_PERM
        Some(8 | 3) => format!(
            "{shown} is read-only for this user: SQLite also writes {shown}-wal and \
             {shown}-shm beside it, so give write access to the file and to {dir}, or give \
             another store"
        ),
        // SQLITE_NOTADB
        Some(26) => format!(
            "{shown} is not a SQLite database: give the path of an audit store, or of a new file"
        ),
        // SQLITE_CORRUPT
        Some(11) => {
            format!("{shown} is damaged: restore it from a backup, or start a new store")
        }
        // SQLITE_BUSY, SQLITE_LOCKED
        Some(5 | 6) => {
            format!("another process holds a lock on {shown}: stop it, or give another store")
        }
        // SQLITE_FULL
        Some(13) => format!("the disk holding {shown} is full: free space on it"),
        _ => format!(
            "check that {shown} is a SQLite file this user may read and write (and {dir} a \
             directory it may write to), or give another store"
        ),
    }
}

/// What to do when PostgreSQL at `host:port` cannot be opened.
pub(super) fn postgres(
    host: &str,
    port: u16,
    database: Option<&str>,
    error: &sqlx::Error,
) -> String {
    let database = database.unwrap_or("the user's default database");
    if let Some(code) = error.as_database_error().and_then(|e| e.code()) {
        return match code.as_ref() {
            "28P01" | "28000" => format!(
                "PostgreSQL at {host}:{port} refused the user: check its name and password \
                 (in ~/.pgpass or PGPASSWORD rather than the URL) and the server's pg_hba.conf"
            ),
            "3D000" => format!(
                "the database {database} does not exist on {host}:{port}: create it (`createdb \
                 {database}`), or name another in the store URL"
            ),
            "42501" => format!(
                "the user may not use {database} on {host}:{port}: grant it CONNECT and CREATE \
                 on the database (the logger creates its tables)"
            ),
            code if code.starts_with("53") || code.starts_with("57") => format!(
                "PostgreSQL at {host}:{port} is not accepting connections now (too many, or \
                 shutting down): try again, or raise max_connections"
            ),
            _ => format!("check the store URL and PostgreSQL's log at {host}:{port}"),
        };
    }
    match error {
        sqlx::Error::Tls(_) => format!(
            "tls with PostgreSQL at {host}:{port} failed: check sslmode and sslrootcert in the \
             store URL (sslmode=disable for a server without tls)"
        ),
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut => format!(
            "nothing answers at {host}:{port}: start PostgreSQL, or correct the host and port of \
             the store URL"
        ),
        _ => format!("check the store URL and that PostgreSQL at {host}:{port} is reachable"),
    }
}

/// What to do when the schema cannot be brought up to date.
pub(super) fn migration(error: &MigrateError) -> String {
    match error {
        MigrateError::VersionMissing(_) | MigrateError::VersionNotPresent(_) => {
            "the store was migrated by a newer mesh: run a newer audit logger, or give \
             another store"
                .to_owned()
        }
        MigrateError::VersionMismatch(_) => {
            "the store's schema history differs from this mesh's: give a store made by mesh's \
             audit logger"
                .to_owned()
        }
        _ => "check that this user may create tables in the store (the error says which \
              migration failed)"
            .to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_of_a_sqlite_url_is_read() {
        assert_eq!(sqlite_mode("sqlite:///a/b.db"), None);
        assert_eq!(sqlite_mode("sqlite:///a/b.db?mode=rwc"), Some("rwc"));
        assert_eq!(
            sqlite_mode("sqlite://b.db?cache=shared&mode=ro"),
            Some("ro")
        );
        assert_eq!(sqlite_mode("sqlite://b.db?x"), None);
    }
}
