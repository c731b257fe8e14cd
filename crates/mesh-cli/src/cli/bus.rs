//! The commands that speak to the bus: `mesh emit`, `mesh tail`, `mesh call`, `mesh logs
//! tail` and `mesh status`.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand};

use crate::cli::shared::{MetricsArg, StoreArg};
use crate::cli::values::{parse_delay, parse_due, parse_duration, parse_rate};
use mesh::Timestamp;

/// `mesh emit`.
#[derive(Debug, Args)]
pub(crate) struct EmitArgs {
    /// The routing key: <origin>.<name>.<event…>, origin module, mesh or node
    pub(crate) key: String,

    /// The JSON body [default: stdin (at most 16 MiB) when it is not a terminal, else {}]
    #[arg(short, long, conflicts_with = "data_file")]
    pub(crate) data: Option<String>,

    /// Read the JSON body from a file (`-` is stdin), at most 16 MiB
    #[arg(short = 'f', long, value_name = "FILE")]
    pub(crate) data_file: Option<PathBuf>,

    /// Who emits: must be the key's owner (the word after the origin)
    #[arg(short, long, value_name = "S")]
    pub(crate) source: Option<String>,

    /// The id of the event or call that caused this one (x-causation-id)
    #[arg(long, value_name = "ID")]
    pub(crate) causation: Option<String>,

    /// The body's shape version (x-schema), 1 or more
    #[arg(long, value_name = "V", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) schema: Option<u32>,

    /// Emit N events, each body {"seq": n, "data": <data>}
    #[arg(short = 'n', long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) count: Option<u64>,

    /// With --count: emit R events per second instead of as fast as confirms allow (from
    /// one a day, 0.0000116, to 1000000)
    #[arg(long, value_name = "R", requires = "count", value_parser = parse_rate)]
    pub(crate) rate: Option<f64>,

    /// Schedule it: emitted no earlier than this RFC 3339 time (a module's key only; see
    /// "Scheduled events" below)
    #[arg(long, value_name = "TIME", value_parser = parse_due, conflicts_with_all = ["after", "count"])]
    pub(crate) at: Option<Timestamp>,

    /// Schedule it: emitted no earlier than this long from now (e.g. 2s, 15m, 1day; up to 10
    /// years)
    #[arg(long, value_name = "DURATION", value_parser = parse_delay, conflicts_with = "count")]
    pub(crate) after: Option<Duration>,
}

/// `mesh tail`.
#[derive(Debug, Args)]
pub(crate) struct TailArgs {
    /// Topic patterns (`*` one word, `#` zero or more)
    #[arg(value_name = "PATTERN", default_value = "#")]
    pub(crate) patterns: Vec<String>,

    /// Exit after N events (1 or more)
    #[arg(short = 'n', long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) count: Option<u64>,

    #[command(flatten)]
    pub(crate) metrics: MetricsArg,
}

/// `mesh call`.
#[derive(Debug, Args)]
pub(crate) struct CallArgs {
    /// The tool's key, e.g. billing.quote
    pub(crate) tool: String,

    /// The JSON request [default: null]
    #[arg(short, long, default_value = "null")]
    pub(crate) data: String,

    /// How long to wait for the reply (e.g. 500ms, 5s, 1m; 1ms to 24h)
    #[arg(short, long, default_value = "5s", value_parser = parse_duration)]
    pub(crate) timeout: Duration,
}

pub(super) const EMIT_HELP: &str = "\
The key says who emits: module.<m>.… is emitted as module <m>, mesh.<c>.… as context <c>,
node.<n>.… as node <n>. --source, when given, must name the same owner.
Scheduled events (--at, --after): the event goes to module <m>'s schedule queue
scheduled.<m>.events and is emitted, with x-time its due time, by a bus of <m> that forwards
scheduled events (BusBuilder::forward_scheduled), no earlier than due; it waits while none
runs. Exit 7 (not-confirmed) when no such bus ever declared the queue.

With --count N, event n (1..=N) carries the body {\"seq\": n, \"data\": <data>}; the events are
pipelined (as many in flight as the broker's confirms allow) or paced with --rate.

Examples:
  mesh emit module.umami.site.created --data '{\"site\":\"blog\"}'
  echo '{\"site\":\"blog\"}' | mesh emit module.umami.site.created --causation 0190c2b6-…
  mesh emit node.anchor.heartbeat --count 10000 --rate 500";

pub(super) const TAIL_HELP: &str = "\
The queue is exclusive and auto-deleted: nothing of it remains when tail exits, and it sees
only events emitted after it started.

Examples:
  mesh tail
  mesh tail 'module.umami.#' 'node.*.joined' --count 1 --json";

pub(super) const CALL_HELP: &str = "\
Exit codes: 4 when no server serves the tool (no queue is bound for it, or nothing consumed
its queue when the reply was slow: said within about a second, whatever --timeout), 5 when no
reply came in time, 6 when the tool answered with an error.

Examples:
  mesh call billing.quote --data '{\"plan\":\"basic\"}'
  mesh call umami.sites.create --data '{\"name\":\"blog\"}' --timeout 30s --json";

pub(super) const STATUS_HELP: &str = "\
Connects over AMQP (which also checks the URL, the credentials and the vhost), then reads the
queues <node>.*.events, their retry queues and <node>.audit-logger.dead (and the retired
mesh.dead-letters while it exists) from the management API
(counts are as of its last statistics sample, every 5 s by default). Each module's dead letters
(not re-driven yet) are counted from the audit store, when there is one (it only reads it).

The node is the one of --node, MESH_NODE or the context, else the host name's; the output
names it, and, when it has no module queue, the other nodes that do (the demo's is `demo`).

Examples:
  mesh status --node anchor
  mesh status --node demo --json";

/// `mesh logs`.
#[derive(Debug, Subcommand)]
pub(crate) enum LogsCommand {
    /// Print log records as they are shipped (an exclusive, auto-deleted queue)
    #[command(after_help = LOGS_TAIL_HELP)]
    Tail(LogsTailArgs),
}

/// `mesh logs tail`.
#[derive(Debug, Args)]
pub(crate) struct LogsTailArgs {
    /// A topic pattern over `<node>.<source>.<level>` (`*` one word, `#` zero or more)
    #[arg(value_name = "PATTERN", default_value = "#")]
    pub(crate) pattern: String,

    /// Exit after N records (1 or more)
    #[arg(short = 'n', long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) count: Option<u64>,
}

const LOGS_TAIL_HELP: &str = "\
Records are transient and unconfirmed: a tail sees what is shipped while it runs, nothing
before, and nothing is kept for it when it is not running.

Examples:
  mesh logs tail
  mesh logs tail 'anchor.billing.*' --count 10
  mesh logs tail '#.error' --json";

/// `mesh status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Also count each module's dead letters not re-driven yet, from this audit store (the
    /// default store is read when it exists)
    #[command(flatten)]
    pub(crate) store: StoreArg,
}
