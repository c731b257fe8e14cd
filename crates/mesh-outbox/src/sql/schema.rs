//! The library's tables on each backend: the version table, and every version of the
//! schema as it was written. A version is never edited once released; a change is a new
//! version.

/// The advisory lock that serialises installs on one PostgreSQL database.
pub(crate) const INSTALL_LOCK: i64 = 0x6d65_7368_6f75_7462; // "meshoutb"

/// PostgreSQL's versions, in order: `(version, statements)`.
pub(crate) const POSTGRES_VERSIONS: &[(i64, &str)] = &[
    (
        1,
        r#"
CREATE TABLE mesh_outbox.outbox (
    seq            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    source         text        NOT NULL,            -- <origin>.<owner>: the unit of order and of leases
    event_id       uuid        NOT NULL,            -- x-event-id
    routing_key    text        NOT NULL,
    content_type   text,
    message_id     text,
    amqp_timestamp bigint,
    persistent     boolean     NOT NULL,
    headers        text        NOT NULL,            -- tagged JSON, every header value exact
    body           bytea       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    sent_at        timestamptz,                     -- set once the broker confirmed (or given up)
    error          text                             -- why it was given up, if it was
);
CREATE INDEX outbox_unsent ON mesh_outbox.outbox (source, seq) WHERE sent_at IS NULL;
CREATE INDEX outbox_sent ON mesh_outbox.outbox (sent_at) WHERE sent_at IS NOT NULL;

CREATE TABLE mesh_outbox.leases (
    source     text        NOT NULL PRIMARY KEY,
    owner      text        NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE TABLE mesh_outbox.inbox (
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX inbox_by_time ON mesh_outbox.inbox (processed_at);

CREATE FUNCTION mesh_outbox.notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Sent at commit, never for a rolled-back row; one per source and transaction.
    PERFORM pg_notify('mesh_outbox', NEW.source);
    RETURN NULL;
END
$$;
CREATE TRIGGER outbox_notify AFTER INSERT ON mesh_outbox.outbox
    FOR EACH ROW EXECUTE FUNCTION mesh_outbox.notify();
"#,
    ),
    (
        2,
        // The commit notification goes: PostgreSQL serialises the commits of every
        // transaction that notifies (they queue for one lock, held through the commit's WAL
        // flush), so the trigger capped the application's emitting transactions at one WAL
        // flush each, one after another. Relays poll instead (`RelayOptions::poll_interval`).
        r#"
DROP TRIGGER IF EXISTS outbox_notify ON mesh_outbox.outbox;
DROP FUNCTION IF EXISTS mesh_outbox.notify();
"#,
    ),
    (
        3,
        // Scheduled events: a table of their own, so the outbox's rows and indexes are left
        // as they are. A row waits here until due, then moves to the outbox in one statement
        // (`sql/scheduled.rs`); cancelling deletes it before that.
        r#"
CREATE TABLE mesh_outbox.scheduled (
    event_id       uuid        NOT NULL PRIMARY KEY, -- x-event-id: what a cancel names
    source         text        NOT NULL,
    due_at         timestamptz NOT NULL,             -- moved to the outbox once the database's clock passed it
    routing_key    text        NOT NULL,
    content_type   text,
    message_id     text,
    amqp_timestamp bigint,
    persistent     boolean     NOT NULL,
    headers        text        NOT NULL,
    body           bytea       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX scheduled_due ON mesh_outbox.scheduled (source, due_at);
"#,
    ),
];

/// SQLite's versions, in order. Every statement is idempotent, so two processes installing
/// at once cannot fail on each other's tables.
pub(crate) const SQLITE_VERSIONS: &[(i64, &str)] = &[
    (
        1,
        r#"
CREATE TABLE IF NOT EXISTS mesh_outbox (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    source         TEXT    NOT NULL,
    event_id       TEXT    NOT NULL,
    routing_key    TEXT    NOT NULL,
    content_type   TEXT,
    message_id     TEXT,
    amqp_timestamp INTEGER,
    persistent     INTEGER NOT NULL,
    headers        TEXT    NOT NULL,
    body           BLOB    NOT NULL,
    created_at     INTEGER NOT NULL,  -- milliseconds since the epoch
    sent_at        INTEGER,
    error          TEXT
);
CREATE INDEX IF NOT EXISTS mesh_outbox_unsent ON mesh_outbox (source, seq) WHERE sent_at IS NULL;
CREATE INDEX IF NOT EXISTS mesh_outbox_sent ON mesh_outbox (sent_at) WHERE sent_at IS NOT NULL;

CREATE TABLE IF NOT EXISTS mesh_outbox_leases (
    source     TEXT    NOT NULL PRIMARY KEY,
    owner      TEXT    NOT NULL,
    expires_at INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS mesh_inbox (
    consumer     TEXT    NOT NULL,
    event_id     TEXT    NOT NULL,
    processed_at INTEGER NOT NULL,
    PRIMARY KEY (consumer, event_id)
);
CREATE INDEX IF NOT EXISTS mesh_inbox_by_time ON mesh_inbox (processed_at);
"#,
    ),
    (
        2,
        // Scheduled events, as PostgreSQL's version 3.
        r#"
CREATE TABLE IF NOT EXISTS mesh_scheduled (
    event_id       TEXT    NOT NULL PRIMARY KEY,
    source         TEXT    NOT NULL,
    due_at         INTEGER NOT NULL,  -- milliseconds since the epoch, the process's clock
    routing_key    TEXT    NOT NULL,
    content_type   TEXT,
    message_id     TEXT,
    amqp_timestamp INTEGER,
    persistent     INTEGER NOT NULL,
    headers        TEXT    NOT NULL,
    body           BLOB    NOT NULL,
    created_at     INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS mesh_scheduled_due ON mesh_scheduled (source, due_at);
"#,
    ),
];

/// PostgreSQL's schema and version table, created before the version is read.
pub(crate) const POSTGRES_PRELUDE: &str = "CREATE SCHEMA IF NOT EXISTS mesh_outbox;
CREATE TABLE IF NOT EXISTS mesh_outbox.versions (
    version    bigint      NOT NULL PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);";

/// SQLite's version table, created before the version is read.
pub(crate) const SQLITE_PRELUDE: &str = "CREATE TABLE IF NOT EXISTS mesh_outbox_versions (
    version    INTEGER NOT NULL PRIMARY KEY,
    applied_at INTEGER NOT NULL
);";
