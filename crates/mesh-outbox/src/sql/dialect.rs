//! Where the backends' SQL differs: table names, casts, whose clock a time is, and how a
//! set of seqs is bound. The statements themselves are written once (`statements.rs`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sqlx::{Database, Encode, Postgres, QueryBuilder, Sqlite, Type};

use super::schema;

/// How one backend spells what differs.
#[derive(Debug)]
pub(crate) struct Dialect {
    /// The outbox table.
    pub(crate) outbox: &'static str,
    /// The relays' leases, one row per source.
    pub(crate) leases: &'static str,
    /// The inbox table.
    pub(crate) inbox: &'static str,
    /// The scheduled events waiting for their due time.
    pub(crate) scheduled: &'static str,
    /// The table of the library's schema versions.
    pub(crate) versions: &'static str,
    /// Cast after a bound event id.
    pub(crate) uuid: &'static str,
    /// Cast after a computed number of seconds.
    pub(crate) float: &'static str,
    /// Whose clock the time columns hold.
    pub(crate) clock: Clock,
    /// What an install runs before it reads the version: the version table (and its schema).
    pub(crate) install_prelude: &'static str,
    /// Whether the version table exists (one boolean), read without creating anything.
    pub(crate) versions_exist: &'static str,
    /// The advisory lock an install holds for its transaction, where the backend needs one
    /// to serialise installs on one database.
    pub(crate) install_lock: Option<i64>,
    /// How an install's transaction begins; `None`: the driver's `BEGIN`. SQLite's
    /// `BEGIN IMMEDIATE` takes the write lock first, waiting for another install: a deferred
    /// transaction that has read the version cannot wait to write, and fails at once with
    /// "database is locked" while another connection writes.
    pub(crate) install_begin: Option<&'static str>,
    /// The schema's versions, in order: `(version, statements)`.
    pub(crate) schema_versions: &'static [(i64, &'static str)],
    /// What a failed install says it was doing.
    pub(crate) installing: &'static str,
}

/// Whose clock a time column holds, and so who writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Clock {
    /// The database's (`timestamptz`): every relay of one database reads the same clock, and
    /// the columns' defaults stamp new rows.
    Database,
    /// The process's, in milliseconds since the epoch (`INTEGER`), bound by each statement:
    /// a SQLite file is shared by the processes of one machine.
    Process,
}

impl Clock {
    /// Whether statements write the time of a new row themselves (no column default does).
    pub(crate) fn stamps(self) -> bool {
        self == Clock::Process
    }
}

pub(crate) const POSTGRES: Dialect = Dialect {
    outbox: "mesh_outbox.outbox",
    leases: "mesh_outbox.leases",
    inbox: "mesh_outbox.inbox",
    scheduled: "mesh_outbox.scheduled",
    versions: "mesh_outbox.versions",
    uuid: "::uuid",
    float: "::float8",
    clock: Clock::Database,
    install_prelude: schema::POSTGRES_PRELUDE,
    versions_exist: "SELECT to_regclass('mesh_outbox.versions') IS NOT NULL",
    install_lock: Some(schema::INSTALL_LOCK),
    install_begin: None,
    schema_versions: schema::POSTGRES_VERSIONS,
    installing: "installing the outbox schema",
};

pub(crate) const SQLITE: Dialect = Dialect {
    outbox: "mesh_outbox",
    leases: "mesh_outbox_leases",
    inbox: "mesh_inbox",
    scheduled: "mesh_scheduled",
    versions: "mesh_outbox_versions",
    uuid: "",
    float: "",
    clock: Clock::Process,
    install_prelude: schema::SQLITE_PRELUDE,
    versions_exist: "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' \
                     AND name = 'mesh_outbox_versions'",
    install_lock: None,
    install_begin: Some("BEGIN IMMEDIATE"),
    schema_versions: schema::SQLITE_VERSIONS,
    installing: "installing the outbox tables",
};

/// The process's clock, in milliseconds since the epoch (what [`Clock::Process`] binds).
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// The time now: the database's clock, or `now` from the process's.
pub(crate) fn push_now<'a, DB>(qb: &mut QueryBuilder<'a, DB>, d: &Dialect, now: i64)
where
    DB: Database,
    i64: Encode<'a, DB> + Type<DB>,
{
    match d.clock {
        Clock::Database => qb.push("clock_timestamp()"),
        Clock::Process => qb.push_bind(now),
    };
}

/// The time `by` after now (`later`) or before it.
pub(crate) fn push_shifted<'a, DB>(
    qb: &mut QueryBuilder<'a, DB>,
    d: &Dialect,
    now: i64,
    by: Duration,
    later: bool,
) where
    DB: Database,
    i64: Encode<'a, DB> + Type<DB>,
    f64: Encode<'a, DB> + Type<DB>,
{
    match d.clock {
        Clock::Database => qb
            .push(if later {
                "clock_timestamp() + make_interval(secs => "
            } else {
                "clock_timestamp() - make_interval(secs => "
            })
            .push_bind(by.as_secs_f64())
            .push(")"),
        Clock::Process => qb.push_bind(if later {
            now.saturating_add(ms(by))
        } else {
            now.saturating_sub(ms(by))
        }),
    };
}

/// The seconds from the time `column` holds to now (NULL when it holds none).
pub(crate) fn push_age_seconds<'a, DB>(
    qb: &mut QueryBuilder<'a, DB>,
    d: &Dialect,
    now: i64,
    column: &str,
) where
    DB: Database,
    i64: Encode<'a, DB> + Type<DB>,
{
    match d.clock {
        Clock::Database => qb.push(format!("extract(epoch FROM clock_timestamp() - {column})")),
        Clock::Process => qb
            .push("(")
            .push_bind(now)
            .push(format!(" - {column}) / 1000.0")),
    };
}

/// How a statement binds a set of seqs, of any size: where the backends differ in a type
/// rather than in text.
pub(crate) trait SeqSet: Database {
    /// ` IN` the set (or, unless `within`, ` NOT IN` it), after the column.
    fn push_seqs<'a>(
        qb: &mut QueryBuilder<'a, Self>,
        within: bool,
        seqs: &'a [i64],
    ) -> Result<(), sqlx::Error>;
}

/// An array.
impl SeqSet for Postgres {
    fn push_seqs<'a>(
        qb: &mut QueryBuilder<'a, Postgres>,
        within: bool,
        seqs: &'a [i64],
    ) -> Result<(), sqlx::Error> {
        qb.push(if within { " = ANY(" } else { " <> ALL(" })
            .push_bind(seqs)
            .push(")");
        Ok(())
    }
}

/// One JSON array parameter, read by `json_each`: no limit on the number of seqs.
impl SeqSet for Sqlite {
    fn push_seqs<'a>(
        qb: &mut QueryBuilder<'a, Sqlite>,
        within: bool,
        seqs: &'a [i64],
    ) -> Result<(), sqlx::Error> {
        let seqs = serde_json::to_string(seqs).map_err(|e| sqlx::Error::Encode(e.into()))?;
        qb.push(if within { " IN" } else { " NOT IN" })
            .push(" (SELECT value FROM json_each(")
            .push_bind(seqs)
            .push("))");
        Ok(())
    }
}

/// Rows per `INSERT` (10 parameters each: far below either backend's limit).
pub(crate) const ROWS_PER_STATEMENT: usize = 1000;
