//! `mesh audit …`, and the `mesh-audit` program, which is `mesh audit run` under its own
//! name: one definition of the logger's options for both.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use mesh::raw::Timestamp;

use crate::cli::global::Global;
use crate::cli::shared::{MetricsArg, StoreArg};
use crate::cli::values::{parse_duration_within, parse_limit, parse_time, parse_within};

/// `mesh audit …`.
#[derive(Debug, Subcommand)]
pub(crate) enum AuditCommand {
    /// Run the audit logger: record every event and dead letter until Ctrl-C or SIGTERM
    #[command(after_help = AUDIT_RUN_HELP)]
    Run(AuditRunArgs),
    /// List recorded events, newest first
    #[command(after_help = AUDIT_QUERY_HELP)]
    Query {
        #[command(flatten)]
        store: StoreArg,
        #[command(flatten)]
        filter: EventFilter,
        /// At most N events (1 to 1000000)
        #[arg(short = 'n', long, value_name = "N", default_value_t = 100, value_parser = parse_limit)]
        limit: usize,
        /// Oldest first
        #[arg(long)]
        oldest_first: bool,
        /// List the id conflicts instead: events that reused the id of a different stored
        /// event (another key, source or body), kept apart
        #[arg(long)]
        conflicts: bool,
    },
    /// Count recorded events (and id conflicts and dead letters, without filters)
    #[command(after_help = AUDIT_COUNT_HELP)]
    Count {
        #[command(flatten)]
        store: StoreArg,
        #[command(flatten)]
        filter: EventFilter,
        /// One count per routing key
        #[arg(long)]
        by_key: bool,
    },
    /// Re-publish stored events into one module's queue only, so it can catch up
    #[command(after_help = AUDIT_REPLAY_HELP)]
    Replay(ReplayArgs),
    /// Remove what arrived before a time: events, id conflicts and re-driven dead letters
    #[command(after_help = AUDIT_PRUNE_HELP)]
    Prune {
        #[command(flatten)]
        store: StoreArg,
        /// Remove rows that arrived (were stored) before T: RFC 3339, or a duration ago
        /// (3d, 12h); never by the events' own x-time
        #[arg(long, value_name = "T", value_parser = parse_time)]
        before: Timestamp,
        /// Also remove rollup minutes (by x-time) before T [default: keep them all]
        #[arg(long, value_name = "T", value_parser = parse_time)]
        rollups_before: Option<Timestamp>,
        /// Also remove dead letters not re-driven yet [default: never]
        #[arg(long)]
        pending_dead_letters: bool,
        /// Count what would be removed, and remove nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// Draw the causation tree of an event: its causes and everything it caused
    #[command(after_help = AUDIT_TRACE_HELP)]
    Trace {
        #[command(flatten)]
        store: StoreArg,
        /// The event id
        id: String,
    },
}

/// `mesh audit replay`.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    #[command(flatten)]
    pub(crate) store: StoreArg,
    /// The keys to replay: a topic pattern (`*` one word, `#` zero or more)
    #[arg(short, long, value_name = "PATTERN")]
    pub(crate) key: String,
    /// Events emitted at or after T: RFC 3339, or a duration ago (30m, 2h, 1day)
    #[arg(long, value_name = "T", value_parser = parse_time)]
    pub(crate) since: Timestamp,
    /// Events emitted before T: RFC 3339, or a duration ago
    #[arg(long, value_name = "T", value_parser = parse_time)]
    pub(crate) until: Option<Timestamp>,
    /// Only events from this source (module, context or node)
    #[arg(short, long, value_name = "S")]
    pub(crate) source: Option<String>,
    /// The module whose queue receives them: <node>.<module> (its queue
    /// <node>.<module>.events), or shared.<module>
    #[arg(long, value_name = "NODE.MODULE")]
    pub(crate) to: String,
    /// At most N events a second (1 to 100000)
    #[arg(long, value_name = "N", default_value = "1000", value_parser = parse_replay_rate)]
    pub(crate) rate: std::num::NonZeroU32,
    /// Print how many events would be replayed, by key, and where; publish nothing
    #[arg(long)]
    pub(crate) dry_run: bool,
}

/// `--rate` of a replay: events a second, 1 to 100,000.
fn parse_replay_rate(text: &str) -> Result<std::num::NonZeroU32, String> {
    let rate: u32 = parse_within(text, 1, 100_000)?;
    std::num::NonZeroU32::new(rate).ok_or_else(|| "expected at least 1".to_owned())
}

/// `mesh audit run`, and `mesh-audit run`: one definition for both.
#[derive(Debug, Args)]
pub(crate) struct AuditRunArgs {
    #[command(flatten)]
    pub(crate) store: StoreArg,
    /// Rows per transaction, at most (1 to 100000)
    #[arg(
        long,
        value_name = "N",
        default_value_t = mesh_audit::DEFAULT_BATCH_SIZE,
        value_parser = parse_batch_size
    )]
    pub(crate) batch_size: usize,
    /// How long a batch stays open after its first message (0ms to 1h)
    #[arg(long, value_name = "DURATION", default_value = "50ms", value_parser = parse_batch_wait)]
    pub(crate) batch_wait: Duration,
    /// Unacked deliveries per queue, at most (1 to 65535)
    #[arg(
        long,
        value_name = "N",
        default_value_t = mesh_audit::DEFAULT_PREFETCH,
        value_parser = parse_prefetch
    )]
    pub(crate) prefetch: u16,
    /// The x-delivery-limit of the deployment's quorum consumer queues: a dead letter the
    /// broker made for it is recorded with this + 1 attempts [default: mesh-amqp's, 20]
    #[arg(long, value_name = "N")]
    pub(crate) delivery_limit: Option<u32>,
    /// Store an event only when its broker-validated publisher (the user-id RabbitMQ
    /// checked) is the user owning its key (module.umami.… only from the user module.umami,
    /// after the --user-prefix);
    /// dead-letter any other as forged-source. Only where every publisher connects as its
    /// own user under the access plan (mesh access apply)
    #[arg(long)]
    pub(crate) enforce_identity: bool,
    /// The access plan's user_prefix the owners of keys carry, with --enforce-identity (at
    /// most 100 bytes, no control character) [default: none]
    #[arg(
        long,
        value_name = "P",
        requires = "enforce_identity",
        value_parser = parse_user_prefix
    )]
    pub(crate) user_prefix: Option<String>,
    /// Keep events, id conflicts and re-driven dead letters this long after they arrived
    /// (1m to 100y; by arrival, never by x-time), removing older ones continuously between
    /// batches [default: keep everything]
    #[arg(long, value_name = "DURATION", value_parser = parse_retention)]
    pub(crate) retain: Option<Duration>,
    /// Keep the rollups (the overview's and map's counts) this long, by minute of x-time; at
    /// least --retain [default: keep them all]
    #[arg(long, value_name = "DURATION", requires = "retain", value_parser = parse_retention)]
    pub(crate) retain_rollups: Option<Duration>,
    /// With --retain, also remove dead letters not re-driven yet [default: never]
    #[arg(long, requires = "retain")]
    pub(crate) retain_pending_dead_letters: bool,
    /// Share the work with other shared loggers: consume shared.audit-logger.events and
    /// shared.audit-logger.dead (competing consumers, each message to one logger) instead of
    /// <node>.audit-logger.*. Run every shared logger into one PostgreSQL store, and no
    /// per-node logger beside them [default: one logger per node, each with a full copy]
    #[arg(long)]
    pub(crate) shared: bool,
    #[command(flatten)]
    pub(crate) metrics: MetricsArg,
    /// Also serve the operator's console (as `mesh console`) on this address, over the
    /// logger's store; actions need MESH_CONSOLE_TOKEN [default: no console]
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) console_addr: Option<std::net::SocketAddr>,
}

/// The `mesh-audit` binary: `mesh audit run` as a program of its own, with the same global
/// options, context and defaults.
#[derive(Debug, Parser)]
#[command(
    name = "mesh-audit",
    version,
    about = "The mesh audit logger: records every event and dead letter (the same command as \
             `mesh audit run`)",
    long_about = None,
    after_help = exit_table!(),
)]
pub(crate) struct AuditCli {
    #[command(flatten)]
    pub(crate) global: Global,

    #[command(subcommand)]
    pub(crate) command: AuditCliCommand,
}

/// The commands of `mesh-audit`.
#[derive(Debug, Subcommand)]
pub(crate) enum AuditCliCommand {
    /// Run the audit logger: record every event and dead letter until Ctrl-C or SIGTERM
    #[command(after_help = AUDIT_RUN_HELP)]
    Run(AuditRunArgs),
}

/// `--batch-size`: rows per transaction, 1 to [`mesh_audit::MAX_BATCH_SIZE`].
pub(crate) fn parse_batch_size(text: &str) -> Result<usize, String> {
    parse_within(text, 1, mesh_audit::MAX_BATCH_SIZE)
}

/// `--batch-wait`: a duration from 0 to [`mesh_audit::MAX_BATCH_WAIT`] (an hour).
pub(crate) fn parse_batch_wait(text: &str) -> Result<Duration, String> {
    parse_duration_within(
        text,
        Duration::ZERO,
        mesh_audit::MAX_BATCH_WAIT,
        "0ms to 1h",
    )
}

/// The longest `--retain` and `--retain-rollups`: a hundred years.
const MAX_RETENTION: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `--retain`, `--retain-rollups`: a duration from [`mesh_audit::retention::MIN_RETENTION`]
/// (a minute) to a hundred years.
pub(crate) fn parse_retention(text: &str) -> Result<Duration, String> {
    parse_duration_within(
        text,
        mesh_audit::retention::MIN_RETENTION,
        MAX_RETENTION,
        "1m to 100y",
    )
}

/// `--prefetch`: unacked deliveries per queue, 1 to 65535.
pub(crate) fn parse_prefetch(text: &str) -> Result<u16, String> {
    parse_within(text, 1, u16::MAX)
}

/// `--user-prefix`: at most [`mesh_audit::MAX_USER_PREFIX_LEN`] bytes, no control character.
pub(crate) fn parse_user_prefix(text: &str) -> Result<String, String> {
    let max = mesh_audit::MAX_USER_PREFIX_LEN;
    if text.len() > max || text.chars().any(char::is_control) {
        return Err(format!(
            "expected at most {max} bytes with no control character"
        ));
    }
    Ok(text.to_owned())
}

/// Which events.
#[derive(Debug, Args)]
pub(crate) struct EventFilter {
    /// Only keys matching this topic pattern
    #[arg(short, long, value_name = "PATTERN")]
    pub(crate) key: Option<String>,
    /// Only events from this source (module, context or node)
    #[arg(short, long, value_name = "S")]
    pub(crate) source: Option<String>,
    /// Only events emitted from this node
    #[arg(long = "from-node", value_name = "N")]
    pub(crate) event_node: Option<String>,
    /// Only events at or after T: RFC 3339, or a duration ago (30m, 2h, 1day)
    #[arg(long, value_name = "T", value_parser = parse_time)]
    pub(crate) since: Option<Timestamp>,
    /// Only events before T: RFC 3339, or a duration ago
    #[arg(long, value_name = "T", value_parser = parse_time)]
    pub(crate) until: Option<Timestamp>,
}

impl EventFilter {
    /// No filter at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.key.is_none()
            && self.source.is_none()
            && self.event_node.is_none()
            && self.since.is_none()
            && self.until.is_none()
    }
}

const AUDIT_RUN_HELP: &str = "\
Consumes <node>.audit-logger.events (bound to # on mesh.events) and its own
<node>.audit-logger.dead (bound to # on mesh.events.dead, so every logger records every dead
letter; at start it retires the older shared mesh.dead-letters: unbinds it, stores what it
holds, deletes it once empty), and stores each event and dead letter once. With --shared it
consumes shared.audit-logger.events and shared.audit-logger.dead instead, which every shared
logger competes on, so several loggers share the load into one PostgreSQL store.

An event whose id is stored already is a duplicate (a redelivery or a resend) when its key,
source and body are the stored event's; otherwise it is a different event reusing the id, kept
as an id conflict (see `mesh audit query --conflicts` and `mesh audit count`).

Each event is stored with its broker-validated publisher (the user-id RabbitMQ checked; JSON
field `publisher` of `mesh audit query`). With --enforce-identity an event whose publisher is
not the user owning its key (<user-prefix><origin>.<owner>, e.g. module.umami) is not stored:
it is dead-lettered forged-source (see `mesh dead list --reason forged-source`).

With --metrics-addr it serves /metrics (the mesh_audit_* counters: events stored, duplicates,
id conflicts, dead letters stored, rejected, batches, store write errors; the batch duration
histogram),
/livez and /readyz (200 only while both queues are consumed), and prints
`metrics on http://ADDR/metrics (also /livez and /readyz)` on stderr.

The store is created when it is a SQLite file that does not exist yet (with its directory,
where this user may create it); the default is $XDG_DATA_HOME/mesh/audit.db
(~/.local/share/mesh/audit.db), which the other audit and dead commands read too.

Examples:
  mesh audit run --node anchor --store sqlite:///var/lib/mesh/audit.db
  mesh audit run --context prod --queue-type classic --batch-wait 200ms
  mesh-audit run --metrics-addr 127.0.0.1:9464
  mesh-audit run --shared --store postgres://audit@db/audit   (on each of several hosts)";

const AUDIT_QUERY_HELP: &str = "\
Each event is a line: time, key, id, source@node, `by <publisher>` when the store recorded who
published it (the broker-validated user), body; --json has it as `publisher`. With --conflicts the lines are the id
conflicts, each followed by `conflicts with <id>` (the stored event of that id, which
`mesh audit query` lists); --json adds `conflict_id` and `conflicts_with` to each object. The
filters apply to the conflicting events.

Examples:
  mesh audit query --key 'module.umami.#' --since 2h --limit 20
  mesh audit query --source billing --since 2026-01-01T00:00:00Z --json
  mesh audit query --conflicts";

const AUDIT_COUNT_HELP: &str = "\
Without filters: events, id conflicts (events that reused the id of a different stored event)
and dead letters; --json gives {\"events\", \"conflicts\", \"dead_letters\",
\"dead_letters_pending\"}. With filters: the matching events only.

Examples:
  mesh audit count
  mesh audit count --key 'module.umami.#' --by-key --json";

const AUDIT_REPLAY_HELP: &str = "\
The matching stored events, oldest first, are published with their ids, keys, bodies and
headers straight into the one queue of --to (through the default exchange, never to
mesh.events: no other module, and no audit logger, receives them). Each carries
x-mesh-replayed, which its handlers read as Meta::replayed (and Meta::redelivered is true);
a consumer deduplicating by event id drops those it already handled. Only a mesh consumer
queue is a target. The replay stops at the first event the broker does not confirm (a queue
that does not exist, a lost connection) and exits 1 naming it: run it again with --since
that event's time to resume (at-least-once).

Examples:
  mesh audit replay --key 'module.shop.order.*' --since 2h --to anchor.billing --dry-run
  mesh audit replay --key 'module.shop.#' --since 2026-12-01T00:00:00Z --to anchor.billing --rate 200";

const AUDIT_PRUNE_HELP: &str = "\
Rows go by when the audit logger stored them (their arrival), never by the events' own
x-time: an event sent with an x-time of 1970 is kept as long as any other. Dead letters not
re-driven yet are kept unless --pending-dead-letters; the rollups (what the console's overview
and map count) are kept unless --rollups-before. On PostgreSQL, whole days of events are
dropped as partitions and the rest removed in chunks; on SQLite, in chunks. A running logger
can prune by itself: mesh audit run --retain 30d.

Examples:
  mesh audit prune --before 30d --dry-run
  mesh audit prune --before 2026-11-01T00:00:00Z --rollups-before 365d";

const AUDIT_TRACE_HELP: &str = "\
Example:
  mesh audit trace 01a22f43-591c-7190-bfdc-009e3b6ca06f";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn audit_run_numbers_at_their_limits_parse_or_say_what_is_accepted() {
        assert_eq!(parse_batch_size("1"), Ok(1));
        assert_eq!(parse_batch_size("100000"), Ok(mesh_audit::MAX_BATCH_SIZE));
        for bad in ["0", "100001", "18446744073709551616", "-1", ""] {
            assert_eq!(
                parse_batch_size(bad).unwrap_err(),
                "expected a whole number from 1 to 100000",
                "{bad}"
            );
        }
        assert_eq!(parse_batch_wait("0ms"), Ok(Duration::ZERO));
        assert_eq!(parse_batch_wait("50ms"), Ok(Duration::from_millis(50)));
        assert_eq!(parse_batch_wait("1h"), Ok(mesh_audit::MAX_BATCH_WAIT));
        assert!(parse_batch_wait("3601s")
            .unwrap_err()
            .contains("from 0ms to 1h"));
        assert!(parse_batch_wait("50").is_err(), "a unit is required");
        assert_eq!(parse_prefetch("65535"), Ok(u16::MAX));
        assert!(parse_prefetch("0").is_err());
        assert_eq!(
            parse_retention("3d"),
            Ok(Duration::from_secs(3 * 24 * 3600))
        );
        assert_eq!(parse_retention("1m"), Ok(Duration::from_secs(60)));
        for bad in ["59s", "101y", "3", "", "-3d", "99999999999999999999d"] {
            assert!(parse_retention(bad).is_err(), "{bad:?}");
        }
        assert!(parse_prefetch("65536").is_err());
        let longest = "p".repeat(mesh_audit::MAX_USER_PREFIX_LEN);
        assert_eq!(parse_user_prefix(&longest), Ok(longest.clone()));
        for bad in [
            format!("{longest}p"),
            "a\nb".to_owned(),
            "\u{1b}[2J".to_owned(),
        ] {
            assert!(parse_user_prefix(&bad).is_err(), "{bad:?}");
        }
    }
}
