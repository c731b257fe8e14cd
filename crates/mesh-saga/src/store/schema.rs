//! The saga's tables on each backend, every version as it was written. A version is never
//! edited once released; a change is a new version. Every statement is idempotent
//! (`IF NOT EXISTS`), so two installs racing on one SQLite file both succeed.

/// The advisory lock that serialises installs on one PostgreSQL database.
pub(crate) const INSTALL_LOCK: i64 = 0x6d65_7368_7361_6761; // "meshsaga"

/// PostgreSQL: schema `mesh_saga`.
pub(crate) const POSTGRES_PRELUDE: &str = "
CREATE SCHEMA IF NOT EXISTS mesh_saga;
CREATE TABLE IF NOT EXISTS mesh_saga.versions (version bigint NOT NULL);
";

/// PostgreSQL's versions, in order.
pub(crate) const POSTGRES_VERSIONS: &[(i64, &str)] = &[(
    1,
    "
CREATE TABLE IF NOT EXISTS mesh_saga.instances (
    saga       text    NOT NULL,
    key        text    NOT NULL,               -- the correlation key
    state      text    NOT NULL,               -- JSON
    version    bigint  NOT NULL,               -- 1 at the start, +1 per applied event
    completed  boolean NOT NULL,
    created_at text    NOT NULL,               -- RFC 3339, the process's clock
    updated_at text    NOT NULL,
    PRIMARY KEY (saga, key)
);
CREATE TABLE IF NOT EXISTS mesh_saga.timeouts (
    saga     text NOT NULL,
    key      text NOT NULL,
    name     text NOT NULL,
    event_id text NOT NULL,                    -- the scheduled outbox event's id
    due_at   text NOT NULL,
    PRIMARY KEY (saga, key, name)
);
",
)];

/// SQLite: tables named `mesh_saga_*`.
pub(crate) const SQLITE_PRELUDE: &str =
    "CREATE TABLE IF NOT EXISTS mesh_saga_versions (version INTEGER NOT NULL);";

/// SQLite's versions, in order.
pub(crate) const SQLITE_VERSIONS: &[(i64, &str)] = &[(
    1,
    "
CREATE TABLE IF NOT EXISTS mesh_saga_instances (
    saga       TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    state      TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    completed  BOOLEAN NOT NULL,
    created_at TEXT    NOT NULL,
    updated_at TEXT    NOT NULL,
    PRIMARY KEY (saga, key)
);
CREATE TABLE IF NOT EXISTS mesh_saga_timeouts (
    saga     TEXT NOT NULL,
    key      TEXT NOT NULL,
    name     TEXT NOT NULL,
    event_id TEXT NOT NULL,
    due_at   TEXT NOT NULL,
    PRIMARY KEY (saga, key, name)
);
",
)];
