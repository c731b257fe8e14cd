//! The command line: every command, option and example, as clap derives it.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use mesh::raw::{DeadReason, Timestamp};

/// The mesh command-line tool: emit and watch events, call tools, and compare the broker's
/// topology with the mesh contract.
#[derive(Debug, Parser)]
#[command(
    name = "mesh",
    version,
    about,
    long_about = None,
    propagate_version = true,
    after_help = exit_table!(),
    after_long_help = LONG_HELP,
)]
pub(crate) struct Cli {
    #[command(flatten)]
    pub(crate) global: Global,

    #[command(subcommand)]
    pub(crate) command: Command,
}

const LONG_HELP: &str = concat!(
    "\
Examples:
  mesh emit module.umami.site.created --data '{\"site\":\"blog\"}'
  mesh tail 'module.umami.#' --count 10
  mesh call billing.quote --data '\"basic\"' --timeout 2s
  mesh topology plan --bind 'billing=module.umami.#'
  mesh access plan --spec mesh.toml --check
  mesh status --json
  mesh outbox relay --database postgres://shop@db/shop --source module.shop
  source <(mesh completions bash)
  mesh man --out /usr/local/share/man/man1

Short flags (one letter, one meaning): -d --data, -f the input file (--data-file, --spec),
-n how many (--count, --limit), -s --source, -k --key, -t --timeout, -q --queue,
-r --reason, -m --module, -p --pattern, -b --bind, -o --out. Durations: 500ms, 5s, 1m30s,
2h, 1day.

What needs what:
  emit, tail and call speak AMQP only. topology show/plan/apply, access plan/apply and the queue part of
  status read RabbitMQ's management HTTP API (the rabbitmq_management plugin, by default
  http://<broker host>:15672 with the AMQP credentials; https with --management-url
  https://… and --management-ca-file): AMQP cannot list bindings or queue arguments.
  Without it those commands fail with exit code 8. Credentials go over plain http only to
  a loopback host, unless --management-allow-http.

",
    exit_table!()
);

/// Options every command takes, in `mesh` and `mesh-audit` alike (`Debug` redacts the URL's
/// user information).
///
/// Each setting is taken from the first of: its flag, its `MESH_*` variable, the chosen
/// context of the config file (see [`crate::config`]), its default. The fields hold what the
/// flag or the variable gave; [`crate::config::apply_context`] fills in the context's.
#[derive(Args)]
#[command(next_help_heading = "Global options")]
pub(crate) struct Global {
    /// The context of the config file (~/.config/mesh/config.toml, or MESH_CONFIG) whose
    /// url, node, store, management url, TLS and password files to use; flags and MESH_*
    /// variables override each of them [default: the file's current-context]
    #[arg(long, env = "MESH_CONTEXT", value_name = "NAME", global = true)]
    pub(crate) context: Option<String>,

    /// The broker: amqp[s]://[user[:password]@]host[:port][/vhost][?params] (guest/guest when
    /// no credentials are given; %2F is the vhost `/`; amqps takes cacertfile, certfile,
    /// keyfile, verify and server_name_indication) [default: amqp://127.0.0.1:5672]
    #[arg(long, env = "MESH_URL", global = true, hide_env_values = true)]
    pub(crate) url: Option<String>,

    /// A file holding the broker password (overrides the URL's). Without it, MESH_PASSWORD may
    /// hold the password itself
    #[arg(long, env = "MESH_PASSWORD_FILE", value_name = "PATH", global = true)]
    pub(crate) password_file: Option<PathBuf>,

    /// The password of MESH_PASSWORD, if set (never a command-line flag).
    #[arg(skip = crate::config::EnvPassword::from_env())]
    pub(crate) password: crate::config::EnvPassword,

    /// The node this tool speaks from (the audit logger consumes NODE.audit-logger.events)
    /// [default: the host name, up to its first dot]
    #[arg(long, env = "MESH_NODE", global = true)]
    pub(crate) node: Option<String>,

    /// RabbitMQ's management API, http(s)://host:port[/prefix], with the --url credentials
    /// [default: http://<first broker host>:15672; the audit logger contacts it only when that
    /// host is loopback]
    #[arg(long, env = "MESH_MANAGEMENT_URL", global = true)]
    pub(crate) management_url: Option<String>,

    /// The CA certificates (PEM) an https management URL is verified against [default: the
    /// --url's cacertfile, else the system's roots]
    #[arg(
        long,
        env = "MESH_MANAGEMENT_CA_FILE",
        value_name = "PEM",
        global = true
    )]
    pub(crate) management_ca_file: Option<PathBuf>,

    /// Send the credentials over plain http to a management host that is not loopback
    /// (refused by default: anyone on the path could read them)
    #[arg(long, global = true)]
    pub(crate) management_allow_http: bool,

    /// How long connecting to the broker may take (1ms to 24h) [default: 5s]
    #[arg(long, env = "MESH_CONNECT_TIMEOUT", value_name = "DURATION", value_parser = parse_duration, global = true)]
    pub(crate) connect_timeout: Option<Duration>,

    /// Print machine-readable JSON (one object per line) instead of text
    #[arg(long, global = true)]
    pub(crate) json: bool,

    /// The type of mesh's durable queues on this broker (the audit logger's queues, and what
    /// topology wants for module queues) [default: quorum]
    #[arg(long, value_enum, env = "MESH_QUEUE_TYPE", global = true)]
    pub(crate) queue_type: Option<QueueTypeArg>,

    /// When to colour the output
    #[arg(long, value_enum, default_value_t = ColorWhen::Auto, global = true)]
    pub(crate) color: ColorWhen,

    /// The audit store of the chosen context, for the commands that take --store (filled in
    /// by `config::apply_context`).
    #[arg(skip)]
    pub(crate) context_store: Option<String>,
}

impl std::fmt::Debug for Global {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Global")
            .field("context", &self.context)
            .field("url", &self.url.as_deref().map(mesh::amqp::redact_url))
            .field("password_file", &self.password_file)
            .field("password", &self.password)
            .field("node", &self.node)
            .field(
                "management_url",
                &self.management_url.as_deref().map(mesh::amqp::redact_url),
            )
            .field("management_ca_file", &self.management_ca_file)
            .field("management_allow_http", &self.management_allow_http)
            .field("connect_timeout", &self.connect_timeout)
            .field("json", &self.json)
            .field("queue_type", &self.queue_type)
            .field("color", &self.color)
            .field(
                "context_store",
                &self.context_store.as_deref().map(mesh::amqp::redact_url),
            )
            .finish()
    }
}

/// `--color`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ColorWhen {
    /// Colour when writing to a terminal (and NO_COLOR is not set).
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Emit one event, or many with --count
    #[command(after_help = EMIT_HELP)]
    Emit(EmitArgs),
    /// Print events as they are emitted (an ephemeral, at-most-once subscription)
    #[command(after_help = TAIL_HELP)]
    Tail(TailArgs),
    /// Call a tool and print its reply
    #[command(after_help = CALL_HELP)]
    Call(CallArgs),
    /// Compare the broker's exchanges, queues and bindings with the contract, and fix them
    #[command(subcommand)]
    Topology(TopologyCommand),
    /// Compare the broker's users and permissions with the access plan, and fix them
    #[command(subcommand)]
    Access(AccessCommand),
    /// Show the connection, and the queues of this node's modules
    #[command(after_help = STATUS_HELP)]
    Status(StatusArgs),
    /// Record every event (the audit logger) and query what was recorded
    #[command(subcommand)]
    Audit(AuditCommand),
    /// Inspect and re-drive dead letters recorded by the audit logger
    #[command(subcommand)]
    Dead(DeadCommand),
    /// Follow the log records processes ship to the mesh.logs exchange
    #[command(subcommand)]
    Logs(LogsCommand),
    /// Export, show and check the contracts the modules announced (AsyncAPI 3.0)
    #[command(subcommand)]
    Contract(ContractCommand),
    /// Relay a transactional outbox's committed events to the broker, and count its rows
    #[command(subcommand)]
    Outbox(OutboxCommand),
    /// Serve the operator's console: events, dead letters, a live tail and the system map, with
    /// re-drive, replay and purge
    #[command(after_help = CONSOLE_HELP)]
    Console(ConsoleArgs),
    /// Print the shell completion script for bash, zsh, fish, elvish or powershell
    #[command(after_help = COMPLETIONS_HELP)]
    Completions(CompletionsArgs),
    /// Write the man pages: mesh.1 and one page per command (mesh-emit.1, mesh-dead-redrive.1…)
    #[command(after_help = MAN_HELP)]
    Man(ManArgs),
}

/// `mesh console`.
#[derive(Debug, Args)]
pub(crate) struct ConsoleArgs {
    #[command(flatten)]
    pub(crate) store: StoreArg,

    /// The address to listen on (loopback unless told otherwise)
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8642")]
    pub(crate) addr: std::net::SocketAddr,

    /// The tokens that may re-drive, replay and purge: one a line, `TOKEN` or `NAME TOKEN` (actions
    /// are logged under NAME, else `operator`) [also: MESH_CONSOLE_TOKEN, one token]
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<PathBuf>,

    /// Hide and refuse every action (re-drive, replay, purge)
    #[arg(long)]
    pub(crate) read_only: bool,

    /// Another origin actions may come from, as browsers send it (http://host:port), when
    /// operators reach the console by another name than the address it listens on
    #[arg(long, value_name = "URL")]
    pub(crate) origin: Vec<String>,
}

const CONSOLE_HELP: &str = "\
Pages: / (overview), /events (search), /events/ID, /dead (groups), /dead/ID, /live (a live
tail), /map (the system map), /modules/QUEUE (a module queue, and its replay). A re-drive, a
replay or a purge asks for confirmation, then for the token; it is refused (403) without a
valid token, or from another origin than the console's own. Without a token, no action is
offered. The broker (--url) serves re-drive, replay and the live tail; its management API
(--management-url, else the broker's first host on port 15672) the queues and the map's
receivers: a console that reaches neither still shows the store.

Examples:
  mesh console --read-only
  MESH_CONSOLE_TOKEN=$(cat ~/.config/mesh/console-token) mesh console
  mesh console --store postgres://audit@db/audit --token-file /etc/mesh/console-tokens";

/// `mesh completions`.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell the script is for
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

const COMPLETIONS_HELP: &str = "\
Prints the script on stdout; it completes commands, options and their fixed values.

Examples:
  source <(mesh completions bash)                       # bash, this shell only
  mesh completions bash > ~/.local/share/bash-completion/completions/mesh
  mesh completions zsh > ~/.zfunc/_mesh                 # with fpath+=(~/.zfunc) in .zshrc
  mesh completions fish > ~/.config/fish/completions/mesh.fish";

/// `mesh man`.
#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// Write every page into DIR (created if missing) instead of printing mesh.1 on stdout
    #[arg(short, long, value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
}

const MAN_HELP: &str = "\
Without --out, prints the page of mesh itself (roff) on stdout. With --out DIR, writes mesh.1
and one page per command and subcommand (mesh-emit.1, mesh-dead-redrive.1, …) and lists them.

Examples:
  mesh man | man -l -
  mesh man --out /usr/local/share/man/man1 && mandb";

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

/// `--store`, on every command that reads the audit store.
#[derive(Args)]
pub(crate) struct StoreArg {
    /// The audit store: sqlite://PATH (the audit logger creates it) or
    /// postgres://user@host/db [default: the context's store, else
    /// $XDG_DATA_HOME/mesh/audit.db, i.e. ~/.local/share/mesh/audit.db]
    #[arg(
        long,
        env = "MESH_AUDIT_STORE",
        value_name = "URL",
        hide_env_values = true
    )]
    pub(crate) store: Option<String>,
}

impl std::fmt::Debug for StoreArg {
    /// The store URL with its user information redacted.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreArg")
            .field("store", &self.store.as_deref().map(mesh::amqp::redact_url))
            .finish()
    }
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

/// `mesh contract …`.
#[derive(Debug, Subcommand)]
pub(crate) enum ContractCommand {
    /// Write the AsyncAPI 3.0 document of the announced contracts (or the system document)
    #[command(after_help = CONTRACT_EXPORT_HELP)]
    Export(ContractExportArgs),
    /// Show who emits each key and who handles it, who serves each tool and who calls it
    #[command(after_help = CONTRACT_SHOW_HELP)]
    Show {
        #[command(flatten)]
        source: ContractSource,
    },
    /// List the breaking changes from a saved contract to the current one (exit 11 if any)
    #[command(after_help = CONTRACT_CHECK_HELP)]
    Check(ContractCheckArgs),
}

/// Where the contracts come from: the audit store, or files.
#[derive(Debug, Args)]
pub(crate) struct ContractSource {
    #[command(flatten)]
    pub(crate) store: StoreArg,
    /// Read the contracts from these files instead of the audit store: a module's
    /// announcement body, an announcement event as `audit query --json` prints it, a system
    /// document or an AsyncAPI document written by `contract export`, or an array of these
    #[arg(long, value_name = "FILE", num_args = 1..)]
    pub(crate) from: Vec<PathBuf>,
}

/// `mesh contract export`.
#[derive(Debug, Args)]
pub(crate) struct ContractExportArgs {
    #[command(flatten)]
    pub(crate) source: ContractSource,
    /// Only this module's operations (its owner, e.g. module.billing)
    #[arg(short, long, value_name = "OWNER")]
    pub(crate) module: Option<String>,
    /// Write the document to FILE instead of stdout
    #[arg(short, long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    /// asyncapi: an AsyncAPI 3.0 document; system: the contracts as announced. Both are read
    /// back by `contract check --against` and `--from`
    #[arg(long, value_enum, default_value_t = ContractFormat::Asyncapi)]
    pub(crate) format: ContractFormat,
}

/// `--format` of `contract export`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ContractFormat {
    /// An AsyncAPI 3.0 document (it carries the system too, in x-mesh-system)
    Asyncapi,
    /// The system document: every module's contract as it announced it
    System,
}

/// `mesh contract check`.
#[derive(Debug, Args)]
pub(crate) struct ContractCheckArgs {
    /// The earlier contract: a file written by `contract export` (either format), or any
    /// file `--from` reads
    #[arg(long, value_name = "OLD")]
    pub(crate) against: PathBuf,
    /// The newer contract, a file of the same forms [default: the audit store's current
    /// contracts]
    #[arg(value_name = "NEW")]
    pub(crate) new: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) store: StoreArg,
}

const CONTRACT_EXPORT_HELP: &str = "\
Each bus announces its contract when it starts (the event <origin>.<owner>.contract.announced);
the audit logger records it. export takes the newest announcement of every owner from the
store (an unreadable one is skipped with a warning naming its event id) or the --from files,
and writes one AsyncAPI 3.0 document: channels are routing keys, messages <key>.v<N> carry
the payload schemas (their definitions in components/schemas), operations are per module
(send, receive, and request/reply for tools). --module keeps one module's operations.

Examples:
  mesh contract export --out contract.json
  mesh contract export --module module.billing --from billing-announcement.json
  mesh contract export --format system --store sqlite:///var/lib/mesh/audit.db";

const CONTRACT_SHOW_HELP: &str = "\
One block per key: its emitters with the schema version each writes, and the modules whose
handler patterns match it (with the pattern when it is not the key itself); a handler pattern
no emitted key matches has a block of its own. Then one block per tool: servers and callers.

Examples:
  mesh contract show
  mesh contract show --from contract.json --json";

const CONTRACT_CHECK_HELP: &str = "\
Prints each breaking change: its rule, the key or tool, the field, the module that changed it
and whom it breaks (the readers of an event whose emitter changed, the emitters of an event
whose handler changed; the same for a tool's request and reply). Exit code 11 when there is
any, 0 when the newer contract is compatible (an empty newer contract is an error, exit
1). The rules are in docs/CONTRACT.md, section
\"Compatibility rules\".

Examples:
  mesh contract export --out before.json        # in CI, on the main branch
  mesh contract check --against before.json     # against the store's current contracts
  mesh contract check --against before.json after.json --json";

/// `mesh outbox …`.
#[derive(Debug, Subcommand)]
pub(crate) enum OutboxCommand {
    /// Publish the outbox's committed events of the given sources until Ctrl-C or SIGTERM
    #[command(after_help = OUTBOX_RELAY_HELP)]
    Relay(OutboxRelayArgs),
    /// Count the outbox's pending and sent rows, with the oldest pending row's age
    #[command(after_help = OUTBOX_STATUS_HELP)]
    Status {
        #[command(flatten)]
        database: OutboxDatabaseArg,
    },
}

/// `--database`, on the outbox commands.
#[derive(Args)]
pub(crate) struct OutboxDatabaseArg {
    /// The database the services write their outbox rows into: postgres://USER@HOST[:PORT]/DB
    /// or sqlite:PATH (the file must exist). Its outbox tables are created or upgraded when
    /// needed (PostgreSQL schema mesh_outbox, SQLite tables mesh_*). Prefer ~/.pgpass or
    /// PGPASSWORD to a password in the URL, which is never shown
    #[arg(
        long,
        env = "MESH_OUTBOX_DATABASE",
        value_name = "URL",
        hide_env_values = true
    )]
    pub(crate) database: String,
}

impl std::fmt::Debug for OutboxDatabaseArg {
    /// The URL with its user information and password redacted.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxDatabaseArg")
            .field("database", &crate::outbox::shown(&self.database))
            .finish()
    }
}

/// `mesh outbox relay`.
#[derive(Debug, Args)]
pub(crate) struct OutboxRelayArgs {
    #[command(flatten)]
    pub(crate) database: OutboxDatabaseArg,

    /// A source whose rows to publish, <origin>.<owner> (module.shop, mesh.billing,
    /// node.anchor): the identity that wrote them with emit_in, and the one they are
    /// published as (repeatable; required)
    #[arg(
        short,
        long = "source",
        value_name = "ORIGIN.OWNER",
        required = true,
        value_parser = crate::outbox::Source::parse
    )]
    pub(crate) sources: Vec<crate::outbox::Source>,

    /// Rows read and published per round (1 to 100000)
    #[arg(long, value_name = "N", default_value_t = 500, value_parser = parse_relay_batch)]
    pub(crate) batch: usize,

    /// How often a source with nothing in flight looks for committed rows: at most this
    /// much lag on top of a round. Idle, one read-only indexed query per source and interval
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = parse_duration)]
    pub(crate) poll_interval: Duration,

    /// How long a source's lease lasts unrenewed: after this relay's crash, its sources wait
    /// this long for another relay. Longer than --publish-deadline
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub(crate) lease_ttl: Duration,

    /// How long one publish may wait for room and its confirm before the round is tried
    /// again
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub(crate) publish_deadline: Duration,

    /// How long sent rows are kept before the relay's cleanup deletes them
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub(crate) retention: Duration,

    /// This relay's name in the lease table, unique among the relays of the database (at
    /// most 100 bytes, no control character) [default: relay-<random>]
    #[arg(long, value_name = "NAME", value_parser = parse_relay_owner)]
    pub(crate) owner: Option<String>,

    #[command(flatten)]
    pub(crate) metrics: MetricsArg,
}

/// `--batch` of `outbox relay`: 1 to 100000.
pub(crate) fn parse_relay_batch(text: &str) -> Result<usize, String> {
    parse_within(text, 1, 100_000)
}

/// `--owner` of `outbox relay`: at most 100 bytes, no control character, not empty.
pub(crate) fn parse_relay_owner(text: &str) -> Result<String, String> {
    if text.is_empty() || text.len() > 100 || text.chars().any(char::is_control) {
        return Err("expected 1 to 100 bytes with no control character".to_owned());
    }
    Ok(text.to_owned())
}

const OUTBOX_RELAY_HELP: &str = "\
For a service that writes its events into the transactional outbox (mesh_outbox's emit_in) and
runs no relay of its own. Each --source gets an emit-only bus (no queue, no contract
announcement) on the broker of --url; the relay publishes the source's committed rows through
it with the broker's confirms, in order per source, and marks them sent only after the
confirm. Relays on one database share the work: one relay at a time holds a source's lease,
so this process may run beside others and beside the services' own relays.

Sources are never discovered from the table: each source is published as a broker user the
operator chooses. Under
broker-enforced identity (mesh access apply, consumers with enforce_identity, the audit logger
with --enforce-identity) an event counts only when published by its key's owner: run one relay
per source, connected as that source's own user (module.shop's relay with the user
module.shop's credentials: --url, --password-file or MESH_PASSWORD). A relay connected as
another user has its publishes refused by the broker (each round fails, is logged and tried
again) or its events dead-lettered forged-source by the consumers. Several sources in one
process share its one user: only where the broker does not enforce identity.

Ctrl-C or SIGTERM stops it cleanly: each source finishes its round (confirms awaited, rows
marked sent), gives its lease up, and the buses drain; exit code 0. A SIGKILL loses nothing:
rows published and not yet marked are published again by the next relay once the lease
expires (--lease-ttl), a duplicate consumers drop by event id. A bad URL, source or option is
exit code 2; a database that cannot be opened is 1; a broker that cannot be reached is 3.

Examples:
  mesh outbox relay --database postgres://shop@db/shop --source module.shop
  MESH_PASSWORD_FILE=/etc/mesh/shop.pw mesh outbox relay --url amqps://module.shop@rabbit/prod \\
      --database postgres://shop@db/shop -s module.shop --metrics-addr 127.0.0.1:9464
  mesh outbox relay --database sqlite:///var/lib/shop/shop.db -s module.shop --poll-interval 200ms";

const OUTBOX_STATUS_HELP: &str = "\
Prints the rows not sent yet, the age of the oldest of them, and the rows sent and kept until
a relay's cleanup deletes them (--retention); --json gives {\"pending\", \"sent\",
\"oldest_pending_seconds\"}. Creates the outbox tables when the database has none yet, as
the relay does.

Examples:
  mesh outbox status --database postgres://shop@db/shop
  MESH_OUTBOX_DATABASE=sqlite:///var/lib/shop/shop.db mesh outbox status --json";

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

/// `text` as a whole number within `min..=max`, or a message saying which are accepted.
fn parse_within<T>(text: &str, min: T, max: T) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    match text.trim().parse::<T>() {
        Ok(value) if min <= value && value <= max => Ok(value),
        _ => Err(format!("expected a whole number from {min} to {max}")),
    }
}

/// `--metrics-addr`, on the commands that run until stopped.
#[derive(Debug, Args)]
pub(crate) struct MetricsArg {
    /// Serve /metrics (Prometheus), /livez and /readyz on this address, e.g.
    /// 127.0.0.1:9464 (port 0 picks a free one; the address is printed on stderr)
    #[arg(long, env = "MESH_METRICS_ADDR", value_name = "ADDR")]
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
}

const AUDIT_RUN_HELP: &str = "\
Consumes <node>.audit-logger.events (bound to # on mesh.events) and its own
<node>.audit-logger.dead (bound to # on mesh.events.dead, so every logger records every dead
letter; at start it retires the older shared mesh.dead-letters: unbinds it, stores what it
holds, deletes it once empty), and stores each event and dead letter once.

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
  mesh-audit run --metrics-addr 127.0.0.1:9464";

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

const AUDIT_TRACE_HELP: &str = "\
Example:
  mesh audit trace 01a22f43-591c-7190-bfdc-009e3b6ca06f";

/// `mesh dead …`.
#[derive(Debug, Subcommand)]
pub(crate) enum DeadCommand {
    /// List recorded dead letters, newest first
    #[command(after_help = DEAD_LIST_HELP)]
    List {
        #[command(flatten)]
        store: StoreArg,
        /// Only those a consumer of queue Q gave up on
        #[arg(short, long, value_name = "Q")]
        queue: Option<String>,
        /// Only this reason
        #[arg(short, long, value_enum)]
        reason: Option<ReasonArg>,
        /// Only those not re-driven yet
        #[arg(long)]
        pending: bool,
        /// Only those dead at or after T: RFC 3339, or a duration ago (30m, 2h, 1day)
        #[arg(long, value_name = "T", value_parser = parse_time)]
        since: Option<Timestamp>,
        /// At most N (1 to 1000000)
        #[arg(short = 'n', long, value_name = "N", default_value_t = 100, value_parser = parse_limit)]
        limit: usize,
    },
    /// Show one dead letter with its headers and body
    #[command(after_help = DEAD_SHOW_HELP)]
    Show {
        #[command(flatten)]
        store: StoreArg,
        /// The dead letter's id (from `mesh dead list`)
        id: String,
    },
    /// Send dead letters back to the queue of the consumer that gave up on them
    #[command(after_help = DEAD_REDRIVE_HELP)]
    Redrive(RedriveArgs),
    /// Delete recorded dead letters from the audit store
    #[command(after_help = DEAD_PURGE_HELP)]
    Purge {
        #[command(flatten)]
        store: StoreArg,
        /// Only those a consumer of queue Q gave up on
        #[arg(short, long, value_name = "Q")]
        queue: Option<String>,
        /// Only this reason
        #[arg(short, long, value_enum)]
        reason: Option<ReasonArg>,
        /// Only those already re-driven
        #[arg(long)]
        redriven: bool,
        /// Delete every recorded dead letter (required when no filter is given)
        #[arg(long)]
        all: bool,
        /// Print how many and which dead letters would be deleted; delete nothing
        #[arg(long)]
        dry_run: bool,
    },
}

const DEAD_PURGE_HELP: &str = "\
Deletes the records from the audit store only; no queue on the broker is touched. Prints how
many were deleted. Without a filter, --all is required. With --dry-run it lists the records
that would be deleted (as `mesh dead list` does) and how many, and deletes nothing.

Examples:
  mesh dead purge --redriven --dry-run
  mesh dead purge -q anchor.mailer.events -r max-attempts
  mesh dead purge --all";

/// `--reason`: why a dead letter was set aside (`x-mesh-dead-reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ReasonArg {
    /// Handlers failed with retryable errors as many times as the retry policy allows
    MaxAttempts,
    /// A handler returned a permanent error
    Permanent,
    /// The message breaks the contract (a header missing, a body that is not JSON, a bad key)
    Undecodable,
    /// The consumer does not read the event's schema version
    UnreadSchema,
    /// The broker's delivery limit: the message crashed its consumer every time
    #[value(alias = "delivery_limit")]
    DeliveryLimit,
    /// The broker dead-lettered a rejected message
    Rejected,
    /// The broker dead-lettered an expired message
    Expired,
    /// A module or node event whose x-source is not the owner of its key
    ForgedSource,
    /// The body does not match the JSON Schema of the handler that reads it
    SchemaInvalid,
}

impl From<ReasonArg> for DeadReason {
    fn from(reason: ReasonArg) -> DeadReason {
        match reason {
            ReasonArg::MaxAttempts => DeadReason::MaxAttempts,
            ReasonArg::Permanent => DeadReason::Permanent,
            ReasonArg::Undecodable => DeadReason::Undecodable,
            ReasonArg::UnreadSchema => DeadReason::UnreadSchema,
            ReasonArg::DeliveryLimit => DeadReason::DeliveryLimit,
            ReasonArg::Rejected => DeadReason::Rejected,
            ReasonArg::Expired => DeadReason::Expired,
            ReasonArg::ForgedSource => DeadReason::ForgedSource,
            ReasonArg::SchemaInvalid => DeadReason::SchemaInvalid,
        }
    }
}

/// `mesh dead redrive`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["ids", "all", "queue"])))]
pub(crate) struct RedriveArgs {
    #[command(flatten)]
    pub(crate) store: StoreArg,
    /// Dead-letter ids
    #[arg(value_name = "ID")]
    pub(crate) ids: Vec<String>,
    /// Every dead letter not re-driven yet
    #[arg(long)]
    pub(crate) all: bool,
    /// Every dead letter of queue Q not re-driven yet
    #[arg(short, long, value_name = "Q")]
    pub(crate) queue: Option<String>,
    /// Print what would be re-driven and where (or why it would be refused); publish
    /// nothing, mark nothing
    #[arg(long)]
    pub(crate) dry_run: bool,
}

const DEAD_LIST_HELP: &str = "\
Examples:
  mesh dead list --pending
  mesh dead list --queue anchor.mailer.events --reason max-attempts --json
  mesh dead list -q anchor.mailer.events -r delivery-limit -n 10";

const DEAD_SHOW_HELP: &str = "\
Example:
  mesh dead show 3f0c1d1e-2b53-5b8e-9a43-0c2b3f1f4f55";

const DEAD_REDRIVE_HELP: &str = "\
A re-driven dead letter keeps its event id, key, body and headers (less the dead-letter
annotations and the attempt counter) and is published to its consumer's queue only, which
starts afresh with its full retry policy. Only a mesh consumer queue is a target
(<node>.<module>.events or shared.<module>.events): a dead letter naming any other queue
(serve.*, a retry queue, mesh.*, anything else) is refused, never published. Exits 1 if any
could not be re-driven (or, with --dry-run, would be refused).

The audit store owns the re-drive state: loggers writing one database share it. With
separate databases, re-drive from one of them; re-driving the same dead letter from another
store sends it again (at-least-once).

Examples:
  mesh dead redrive 3f0c1d1e-2b53-5b8e-9a43-0c2b3f1f4f55
  mesh dead redrive --queue anchor.mailer.events
  mesh dead redrive --all --dry-run";

const EMIT_HELP: &str = "\
The key says who emits: module.<m>.… is emitted as module <m>, mesh.<c>.… as context <c>,
node.<n>.… as node <n>. --source, when given, must name the same owner.

With --count N, event n (1..=N) carries the body {\"seq\": n, \"data\": <data>}; the events are
pipelined (as many in flight as the broker's confirms allow) or paced with --rate.

Examples:
  mesh emit module.umami.site.created --data '{\"site\":\"blog\"}'
  echo '{\"site\":\"blog\"}' | mesh emit module.umami.site.created --causation 0190c2b6-…
  mesh emit node.anchor.heartbeat --count 10000 --rate 500";

const TAIL_HELP: &str = "\
The queue is exclusive and auto-deleted: nothing of it remains when tail exits, and it sees
only events emitted after it started.

Examples:
  mesh tail
  mesh tail 'module.umami.#' 'node.*.joined' --count 1 --json";

const CALL_HELP: &str = "\
Exit codes: 4 when no server serves the tool, 5 when no reply came in time, 6 when the tool
answered with an error.

Examples:
  mesh call billing.quote --data '\"basic\"'
  mesh call umami.sites.create --data '{\"name\":\"blog\"}' --timeout 30s --json";

const STATUS_HELP: &str = "\
Connects over AMQP (which also checks the URL, the credentials and the vhost), then reads the
queues <node>.*.events, their retry queues and <node>.audit-logger.dead (and the retired
mesh.dead-letters while it exists) from the management API
(counts are as of its last statistics sample, every 5 s by default). Each module's dead letters
(not re-driven yet) are counted from the audit store, when there is one.

Example:
  mesh status --node anchor";

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

/// `mesh topology …`.
#[derive(Debug, Subcommand)]
pub(crate) enum TopologyCommand {
    /// What the broker has and what the contract wants, side by side
    #[command(after_help = SHOW_HELP, after_long_help = SHOW_LONG_HELP)]
    Show(TopologyArgs),
    /// The differences between what the contract wants and what the broker has
    #[command(after_help = PLAN_HELP, after_long_help = PLAN_LONG_HELP)]
    Plan {
        #[command(flatten)]
        args: TopologyArgs,
        /// Exit with code 9 when there is any difference
        #[arg(long)]
        check: bool,
    },
    /// Create what is missing and remove bindings the contract does not want
    #[command(after_help = APPLY_HELP, after_long_help = APPLY_LONG_HELP)]
    Apply {
        #[command(flatten)]
        args: TopologyArgs,
        /// Replace queues whose arguments differ: deletes them with the messages they hold
        #[arg(long)]
        force: bool,
        /// Print what apply would do, step by step (or why it would refuse); change nothing
        #[arg(long)]
        dry_run: bool,
    },
}

macro_rules! topology_note {
    () => {
        "\
The contract wants the exchanges mesh.events, mesh.rpc, mesh.events.dead and mesh.retry
(durable topics) and mesh.reply (durable direct), and for each module given with --bind M=P
(repeatable; the pattern P of module M, in any order among the other options), with
--module M --pattern P… or in --spec FILE, the queue <node>.<module>.events (x-queue-type,
x-dead-letter-exchange mesh.events.dead and, on quorum queues, x-delivery-limit) bound to
mesh.events on exactly its patterns (the module audit-logger also wants its
<node>.audit-logger.dead bound to mesh.events.dead on #). The retired mesh.dead-letters, if
the broker still has it, is shown: apply removes its binding, never the queue (a logger
drains and deletes it).
Retry queues (<queue>.retry.<step>) are declared by the SDK when the module starts; they are
not compared. Retired delay queues (<queue>.delay.<step>) are listed: apply deletes those with
no message and no consumer, and leaves the others draining.
This reads the management HTTP API: AMQP cannot list bindings or arguments.

--pattern without --bind: with one --module, every --pattern is that module's, wherever it
stands; with several, each --pattern belongs to the --module before it (the older form, kept
for scripts; --bind says the same without depending on the order).

A spec file (TOML, or JSON when it ends in .json):
  node = \"anchor\"              # optional: else --node
  queue_type = \"quorum\"        # optional: quorum or classic (--queue-type wins)
  delivery_limit = 20          # optional
  [[modules]]
  name = \"billing\"
  patterns = [\"module.umami.#\", \"node.*.joined\"]
  queue_type = \"classic\"       # optional
  shared = false               # optional: the queue shared.<module>.events
  [access]                     # optional: read by mesh access only"
    };
}

const SHOW_HELP: &str = "\
Lists every exchange, queue and binding of the vhost, marked as wanted (=), missing (+),
different (~), a binding not wanted (-) or outside the spec (?).

Example:
  mesh topology show --bind 'billing=module.umami.#'";
const SHOW_LONG_HELP: &str = concat!(
    "\
Lists every exchange, queue and binding of the vhost, marked as wanted (=), missing (+),
different (~), a binding not wanted (-) or outside the spec (?).

Example:
  mesh topology show --bind 'billing=module.umami.#'",
    "\n\n",
    topology_note!()
);

const PLAN_HELP: &str = "\
Each line is one difference: + missing, ~ other arguments, - a binding not wanted.

Examples:
  mesh topology plan --bind 'billing=module.umami.#' --bind 'billing=node.*.joined'
  mesh topology plan -m billing -p 'module.umami.#' -p 'node.*.joined'
  mesh topology plan --spec mesh.toml --check --json";
const PLAN_LONG_HELP: &str = concat!(
    "\
Each line is one difference: + missing, ~ other arguments, - a binding not wanted.

Examples:
  mesh topology plan --bind 'billing=module.umami.#' --bind 'billing=node.*.joined'
  mesh topology plan -m billing -p 'module.umami.#' -p 'node.*.joined'
  mesh topology plan --spec mesh.toml --check --json",
    "\n\n",
    topology_note!()
);

const APPLY_HELP: &str = "\
Refuses, changing nothing, when a queue has other arguments than the contract's, unless
--force, which deletes and re-creates it (its messages are lost; the refusal says how many).
Exchanges with other settings are never replaced. --dry-run prints each step apply would take
(`would create`, `would bind`, …) or its refusal, and changes nothing.

Examples:
  mesh topology apply -f mesh.toml --dry-run
  mesh topology apply --spec mesh.toml";
const APPLY_LONG_HELP: &str = concat!(
    "\
Refuses, changing nothing, when a queue has other arguments than the contract's, unless
--force, which deletes and re-creates it (its messages are lost; the refusal says how many).
Exchanges with other settings are never replaced. --dry-run prints each step apply would take
(`would create`, `would bind`, …) or its refusal, and changes nothing.

Examples:
  mesh topology apply -f mesh.toml --dry-run
  mesh topology apply --spec mesh.toml",
    "\n\n",
    topology_note!()
);

/// What the contract is compared for.
#[derive(Debug, Args)]
pub(crate) struct TopologyArgs {
    /// Module M's queue is bound on topic pattern P (repeatable, in any order; split at the
    /// first `=`)
    #[arg(short, long = "bind", value_name = "M=P", value_parser = parse_binding)]
    pub(crate) bindings: Vec<Binding>,

    /// A module whose queue the contract wants (repeatable)
    #[arg(short, long = "module", value_name = "M")]
    pub(crate) modules: Vec<String>,

    /// A topic pattern of the --module (with several, of the --module before it; repeatable)
    #[arg(short, long = "pattern", value_name = "P")]
    pub(crate) patterns: Vec<String>,

    /// A TOML or JSON file listing modules, their patterns and queue types
    #[arg(short = 'f', long, value_name = "FILE")]
    pub(crate) spec: Option<PathBuf>,

    /// x-delivery-limit of quorum module queues [default: mesh-amqp's, 20]
    #[arg(long, value_name = "N")]
    pub(crate) delivery_limit: Option<u32>,

    /// Where each --pattern stands among the --module options (filled in from the parse).
    #[arg(skip)]
    pub(crate) pattern_owner: Vec<Option<usize>>,
}

/// `--bind M=P`: a module and one topic pattern of its queue (both checked later, with the
/// rest of the contract).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Binding {
    pub(crate) module: String,
    pub(crate) pattern: String,
}

/// `M=P`, split at the first `=` (a module name with `=` goes in a spec file).
pub(crate) fn parse_binding(text: &str) -> Result<Binding, String> {
    match text.split_once('=') {
        Some((module, pattern)) if !module.is_empty() && !pattern.is_empty() => Ok(Binding {
            module: module.to_owned(),
            pattern: pattern.to_owned(),
        }),
        _ => Err("expected MODULE=PATTERN, e.g. billing=module.umami.#".to_owned()),
    }
}

/// `mesh access …`.
#[derive(Debug, Subcommand)]
pub(crate) enum AccessCommand {
    /// The differences between the access plan and the broker's users and permissions
    #[command(after_help = ACCESS_PLAN_HELP, after_long_help = ACCESS_PLAN_LONG_HELP)]
    Plan {
        #[command(flatten)]
        args: AccessArgs,
        /// Exit with code 9 when there is any difference
        #[arg(long)]
        check: bool,
    },
    /// Create the missing users and set passwords, tags and permissions as planned
    #[command(after_help = ACCESS_APPLY_HELP, after_long_help = ACCESS_APPLY_LONG_HELP)]
    Apply {
        #[command(flatten)]
        args: AccessArgs,
        /// Print what apply would change (or why it would refuse); change nothing
        #[arg(long)]
        dry_run: bool,
    },
}

/// What the access plan is made from.
#[derive(Debug, Args)]
pub(crate) struct AccessArgs {
    /// The spec file (TOML, or JSON when it ends in .json), as for topology, with an
    /// optional [access] table
    #[arg(short = 'f', long, value_name = "FILE")]
    pub(crate) spec: PathBuf,

    /// A TOML file of passwords, "user" = "password" (not open to other users of the
    /// machine); users it does not name are read from MESH_PASSWORD_<USER>
    #[arg(long, value_name = "FILE")]
    pub(crate) passwords: Option<PathBuf>,
}

macro_rules! access_note {
    () => {
        "\
The plan has one broker user per identity: <prefix>module.<module> for each module of the spec,
<prefix>mesh.<context> for each context, <prefix>node.<node> (unless node_user = false),
<prefix>audit-logger.<node> when the spec has the module audit-logger, and <prefix>operator
(tag management, every permission: it runs topology apply, dead redrive and status). Each
may configure, read and write only its own queues (<node>.<module>.events on any node,
shared.<module>.events, their retry queues, serve.<owner>.<tool…>, server-named amq.gen-…),
never configure an exchange nor write to the default exchange, publish on mesh.events only
under <origin>.<owner>.…, bind on mesh.events only its spec patterns, call any tool and serve
only its own (docs/CONTRACT.md, \"Users and permissions\", has every expression).
Users not in the plan are never changed; those carrying the prefix with permissions on the
vhost are listed (?). This reads the management HTTP API as an administrator.

Passwords never go on the command line: --passwords FILE, or MESH_PASSWORD_<USER> with the
user name upper-cased and every byte that is not a letter or digit as _ (module.umami:
MESH_PASSWORD_MODULE_UMAMI). A password differs when it is not the one the broker's stored
hash was made from (sha256 and sha512 hashes are checked).

The [access] table of the spec file (all optional):
  [access]
  user_prefix = \"acme/\"         # default none: users are global to a broker
  contexts = [\"billing-ctx\"]    # runtime contexts, each with a user mesh.<context>
  node_user = true               # a user node.<node> for the node itself"
    };
}

const ACCESS_PLAN_HELP: &str = "\
Each line is one difference: + missing, ~ differs, - a topic permission not wanted; ? a note
(no password given, a user outside the plan). Exit code 9 with --check when there is any.

Examples:
  MESH_PASSWORD_MODULE_UMAMI=… mesh access plan --spec mesh.toml --check
  mesh access plan --spec mesh.toml --passwords /etc/mesh/passwords.toml --json";
const ACCESS_PLAN_LONG_HELP: &str = concat!(
    "\
Each line is one difference: + missing, ~ differs, - a topic permission not wanted; ? a note
(no password given, a user outside the plan). Exit code 9 with --check when there is any.

Examples:
  MESH_PASSWORD_MODULE_UMAMI=… mesh access plan --spec mesh.toml --check
  mesh access plan --spec mesh.toml --passwords /etc/mesh/passwords.toml --json",
    "\n\n",
    access_note!()
);

const ACCESS_APPLY_HELP: &str = "\
Puts a user only when it is missing or its password or tags differ, then its permissions and
topic permissions; then plans again. Refuses, changing nothing, when a planned user has no
password (exit code 2). --dry-run makes the same checks and prints each change apply would
make (`would apply`), changing nothing.

Examples:
  mesh access apply -f mesh.toml --passwords /etc/mesh/passwords.toml --dry-run
  mesh access apply --spec mesh.toml --passwords /etc/mesh/passwords.toml";
const ACCESS_APPLY_LONG_HELP: &str = concat!(
    "\
Puts a user only when it is missing or its password or tags differ, then its permissions and
topic permissions; then plans again. Refuses, changing nothing, when a planned user has no
password (exit code 2). --dry-run makes the same checks and prints each change apply would
make (`would apply`), changing nothing.

Examples:
  mesh access apply -f mesh.toml --passwords /etc/mesh/passwords.toml --dry-run
  mesh access apply --spec mesh.toml --passwords /etc/mesh/passwords.toml",
    "\n\n",
    access_note!()
);

/// `--queue-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum QueueTypeArg {
    /// Replicated; the broker counts deliveries.
    Quorum,
    /// Single-node.
    Classic,
}

/// `mesh status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// Also count each module's dead letters not re-driven yet, from this audit store (the
    /// default store is read when it exists)
    #[command(flatten)]
    pub(crate) store: StoreArg,
}

/// The shortest `--timeout` and `--connect-timeout`.
pub(crate) const MIN_TIMEOUT: Duration = Duration::from_millis(1);
/// The longest `--timeout` and `--connect-timeout`: a day (deadlines are instants, which
/// cannot be arbitrarily far away).
pub(crate) const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// The slowest `--rate`: one event a day.
pub(crate) const MIN_RATE: f64 = 1.0 / (24.0 * 3600.0);
/// The fastest `--rate`: a million events per second (a pacing interval of 1 µs).
pub(crate) const MAX_RATE: f64 = 1_000_000.0;
/// The largest `--limit`.
pub(crate) const MAX_LIMIT: usize = 1_000_000;

/// The one duration syntax of the command line: a number and a unit, several summed
/// (`500ms`, `5s`, `1m30s`, `2h`, `1day`), with no bounds of its own.
fn parse_span(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim()).map_err(|e| format!("{e} (e.g. 500ms, 5s, 1m, 2h)"))
}

/// A timeout: a duration from [`MIN_TIMEOUT`] to [`MAX_TIMEOUT`].
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    parse_duration_within(text, MIN_TIMEOUT, MAX_TIMEOUT, "1ms to 24h")
}

/// The one duration syntax of the command line ([`parse_span`]): a duration from `min` to
/// `max` (`bounds` says which, for the message).
pub(crate) fn parse_duration_within(
    text: &str,
    min: Duration,
    max: Duration,
    bounds: &str,
) -> Result<Duration, String> {
    let duration = parse_span(text)?;
    if (min..=max).contains(&duration) {
        Ok(duration)
    } else {
        Err(format!(
            "expected a duration from {bounds} (e.g. 500ms, 5s, 1m)"
        ))
    }
}

/// `--since`/`--until`: an RFC 3339 time, or a duration ago in the syntax of
/// [`parse_duration`] (`90s`, `2h`, `1day`), no earlier than the year 1.
pub(crate) fn parse_time(text: &str) -> Result<Timestamp, String> {
    if let Ok(time) = Timestamp::parse(text) {
        return Ok(time);
    }
    let ago = parse_span(text)
        .map_err(|e| format!("neither an RFC 3339 time nor a duration ago: {e}"))?;
    // Checked: a duration beyond the year 1 (`300000y`) is refused, not a panic.
    Timestamp::now()
        .checked_sub(ago)
        .ok_or_else(|| "that long ago is before the year 1".to_owned())
}

/// Events per second, from [`MIN_RATE`] to [`MAX_RATE`]: its pacing interval, `1 / rate`,
/// is then a duration from 1 µs to a day.
pub(crate) fn parse_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(rate) if (MIN_RATE..=MAX_RATE).contains(&rate) => Ok(rate),
        _ => Err(
            "a rate is a number of events per second from 0.0000116 (one a day) to 1000000"
                .to_owned(),
        ),
    }
}

/// The pacing interval of a rate from [`parse_rate`].
pub(crate) fn rate_interval(rate: f64) -> Duration {
    let rate = rate.clamp(MIN_RATE, MAX_RATE);
    Duration::from_secs_f64(1.0 / rate)
}

/// `--limit`: 1 to [`MAX_LIMIT`].
pub(crate) fn parse_limit(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(limit) if (1..=MAX_LIMIT).contains(&limit) => Ok(limit),
        _ => Err(format!("expected a whole number from 1 to {MAX_LIMIT}")),
    }
}

/// Parses the command line, matching each `--pattern` to the `--module` before it (clap's
/// derive keeps the values but not their order among options).
pub(crate) fn parse() -> Result<Cli, clap::Error> {
    use clap::{CommandFactory, FromArgMatches};
    let matches = Cli::command().try_get_matches()?;
    let mut cli = Cli::from_arg_matches(&matches)?;
    let Some(("topology", topology)) = matches.subcommand() else {
        return Ok(cli);
    };
    let Some((_, sub)) = topology.subcommand() else {
        return Ok(cli);
    };
    let modules: Vec<usize> = sub
        .indices_of("modules")
        .map(Iterator::collect)
        .unwrap_or_default();
    let owners: Vec<Option<usize>> = sub
        .indices_of("patterns")
        .map(|indices| {
            indices
                .map(|p| modules.iter().rposition(|&m| m < p))
                .collect()
        })
        .unwrap_or_default();
    if let Command::Topology(
        TopologyCommand::Show(args)
        | TopologyCommand::Plan { args, .. }
        | TopologyCommand::Apply { args, .. },
    ) = &mut cli.command
    {
        args.pattern_owner = owners;
    }
    Ok(cli)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]

        /// Any text is a bounded value or refused with a message: never a panic, never a
        /// value that a deadline or an interval cannot be made of.
        #[test]
        fn every_parser_bounds_any_text(
            text in "\\PC{0,24}|[0-9]{1,30}(ns|us|ms|s|m|h|d|w|y|days|years)?|[-+]?[0-9.]{1,12}(e[-+]?[0-9]{1,4})?|[-+]?(inf|nan|infinity|NaN)"
        ) {
            if let Ok(duration) = parse_duration(&text) {
                proptest::prop_assert!((MIN_TIMEOUT..=MAX_TIMEOUT).contains(&duration));
                proptest::prop_assert!(std::time::Instant::now().checked_add(duration).is_some());
            }
            if let Ok(rate) = parse_rate(&text) {
                proptest::prop_assert!((MIN_RATE..=MAX_RATE).contains(&rate));
                let interval = rate_interval(rate);
                proptest::prop_assert!(!interval.is_zero() && interval <= MAX_TIMEOUT + Duration::from_secs(1));
            }
            if let Ok(limit) = parse_limit(&text) {
                proptest::prop_assert!((1..=MAX_LIMIT).contains(&limit));
            }
            if let Ok(wait) = parse_batch_wait(&text) {
                proptest::prop_assert!(wait <= mesh_audit::MAX_BATCH_WAIT);
            }
            if let Ok(size) = parse_batch_size(&text) {
                proptest::prop_assert!((1..=mesh_audit::MAX_BATCH_SIZE).contains(&size));
            }
            if let Ok(prefetch) = parse_prefetch(&text) {
                proptest::prop_assert!(prefetch >= 1);
            }
            let _ = parse_time(&text);
        }
    }

    #[test]
    fn limits_are_refused_with_what_is_accepted() {
        for text in ["300000y", "18446744073709551615s", "0s", "0", "25h", "1ns"] {
            let message = parse_duration(text).unwrap_err();
            assert!(
                message.contains("1ms to 24h") || message.contains("e.g."),
                "{text}: {message}"
            );
        }
        assert_eq!(parse_duration("24h"), Ok(MAX_TIMEOUT));
        assert_eq!(parse_duration("1ms"), Ok(MIN_TIMEOUT));
        for text in [
            "1e-300", "inf", "nan", "-1", "0", "1e300", "1000001", "", "NaN",
        ] {
            assert!(parse_rate(text).is_err(), "{text}");
        }
        assert_eq!(
            rate_interval(parse_rate("1000000").unwrap()),
            Duration::from_micros(1)
        );
        assert!(rate_interval(parse_rate("0.0000116").unwrap()) <= MAX_TIMEOUT);
        for text in [
            "0",
            "1000001",
            "18446744073709551615",
            "18446744073709551616",
        ] {
            assert!(parse_limit(text).is_err(), "{text}");
        }
        for text in [
            "300000y",
            "18446744073709551615s",
            "99999999999999999999999s",
        ] {
            assert!(parse_time(text).is_err(), "{text}");
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        Cli::command().debug_assert();
        AuditCli::command().debug_assert();
    }

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

    #[test]
    fn both_programs_take_the_same_audit_run_options() {
        use clap::Parser as _;
        let args = [
            "--node",
            "n1",
            "--enforce-identity",
            "--user-prefix",
            "acme/",
            "--batch-wait",
            "2s",
        ];
        let mesh = Cli::try_parse_from(["mesh", "audit", "run"].iter().chain(&args)).unwrap();
        let Command::Audit(AuditCommand::Run(run)) = mesh.command else {
            panic!("audit run")
        };
        let audit = AuditCli::try_parse_from(["mesh-audit", "run"].iter().chain(&args)).unwrap();
        let AuditCliCommand::Run(alone) = audit.command;
        for run in [&run, &alone] {
            assert!(run.enforce_identity);
            assert_eq!(run.user_prefix.as_deref(), Some("acme/"));
            assert_eq!(run.batch_wait, Duration::from_secs(2));
        }
        assert_eq!(mesh.global.node, audit.global.node);
        // A prefix without enforcement would be silently ignored: refused instead.
        assert!(AuditCli::try_parse_from(["mesh-audit", "run", "--user-prefix", "acme/"]).is_err());
        assert!(Cli::try_parse_from(["mesh", "audit", "run", "--batch-wait-ms", "5"]).is_err());
    }

    #[test]
    fn every_dead_reason_is_a_reason_value_of_the_same_name() {
        use clap::ValueEnum as _;
        assert_eq!(ReasonArg::value_variants().len(), DeadReason::ALL.len());
        for reason in DeadReason::ALL {
            let arg = ReasonArg::from_str(reason.as_str(), false)
                .unwrap_or_else(|e| panic!("{reason}: {e}"));
            assert_eq!(DeadReason::from(arg), reason);
        }
        assert_eq!(
            ReasonArg::from_str("delivery_limit", false),
            Ok(ReasonArg::DeliveryLimit)
        );
    }

    #[test]
    fn short_flags_mean_their_long_options() {
        use clap::Parser as _;
        let parse = |args: &[&str]| {
            Cli::try_parse_from(std::iter::once("mesh").chain(args.iter().copied()))
                .unwrap_or_else(|e| panic!("{args:?}: {e}"))
                .command
        };
        let Command::Emit(emit) = parse(&["emit", "k.a.b", "-d", "{}", "-s", "a", "-n", "2"])
        else {
            panic!("emit")
        };
        assert_eq!(
            (emit.data.as_deref(), emit.source.as_deref(), emit.count),
            (Some("{}"), Some("a"), Some(2))
        );
        let Command::Emit(emit) = parse(&["emit", "k.a.b", "-f", "body.json"]) else {
            panic!("emit")
        };
        assert_eq!(emit.data_file, Some(PathBuf::from("body.json")));
        let Command::Call(call) = parse(&["call", "a.b", "-d", "1", "-t", "2s"]) else {
            panic!("call")
        };
        assert_eq!(
            (call.data.as_str(), call.timeout),
            ("1", Duration::from_secs(2))
        );
        let Command::Dead(DeadCommand::List {
            queue,
            reason,
            limit,
            ..
        }) = parse(&[
            "dead",
            "list",
            "-q",
            "q.x.events",
            "-r",
            "expired",
            "-n",
            "5",
        ])
        else {
            panic!("dead list")
        };
        assert_eq!(
            (queue.as_deref(), reason, limit),
            (Some("q.x.events"), Some(ReasonArg::Expired), 5)
        );
        let Command::Audit(AuditCommand::Query { filter, limit, .. }) =
            parse(&["audit", "query", "-k", "module.#", "-s", "umami", "-n", "3"])
        else {
            panic!("audit query")
        };
        assert_eq!(
            (filter.key.as_deref(), filter.source.as_deref(), limit),
            (Some("module.#"), Some("umami"), 3)
        );
        let Command::Topology(TopologyCommand::Apply { args, dry_run, .. }) = parse(&[
            "topology",
            "apply",
            "-f",
            "mesh.toml",
            "-m",
            "m",
            "-p",
            "a.#",
            "-b",
            "n=b.*",
            "--dry-run",
        ]) else {
            panic!("topology apply")
        };
        assert!(dry_run);
        assert_eq!(args.spec, Some(PathBuf::from("mesh.toml")));
        assert_eq!(
            (args.modules, args.patterns),
            (vec!["m".to_owned()], vec!["a.#".to_owned()])
        );
        assert_eq!(
            args.bindings,
            [Binding {
                module: "n".to_owned(),
                pattern: "b.*".to_owned()
            }]
        );
        let Command::Logs(LogsCommand::Tail(tail)) = parse(&["logs", "tail", "-n", "4"]) else {
            panic!("logs tail")
        };
        assert_eq!(tail.count, Some(4));
        // The connection options have no short form.
        assert!(Cli::try_parse_from(["mesh", "-u", "amqp://h", "status"]).is_err());
    }

    #[test]
    fn durations_have_one_syntax() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        let now = Timestamp::now();
        let ago = parse_time("2h").unwrap();
        assert!(ago < now);
        assert!(parse_time("1day").unwrap() < ago);
        assert!(parse_time("500ms").is_ok());
        assert_eq!(
            parse_time("2026-01-01T00:00:00Z").unwrap().to_string(),
            "2026-01-01T00:00:00Z"
        );
        // The same examples in every refusal.
        let timeout = parse_duration("2 parsecs").unwrap_err();
        let since = parse_time("2 parsecs").unwrap_err();
        assert!(timeout.contains("e.g. 500ms, 5s, 1m, 2h"), "{timeout}");
        assert!(since.contains("e.g. 500ms, 5s, 1m, 2h"), "{since}");
        assert!(since.contains("neither an RFC 3339 time"), "{since}");
    }

    #[test]
    fn debug_shows_no_password() {
        use clap::Parser as _;
        let cli = Cli::try_parse_from([
            "mesh",
            "--url",
            "amqp://u:amqps3cr/et@h/v",
            "audit",
            "count",
            "--store",
            "postgres://u:pgs3cret@h/db",
        ])
        .unwrap();
        let shown = format!("{cli:?}");
        assert!(!shown.contains("s3cr"), "{shown}");
        assert!(shown.contains("<redacted>@h/v"), "{shown}");
    }

    #[test]
    fn every_command_has_an_example() {
        let cli = Cli::command();
        for sub in cli.get_subcommands() {
            let mut found = sub
                .get_after_help()
                .is_some_and(|h| h.to_string().contains("mesh "));
            for nested in sub.get_subcommands() {
                let help = nested.get_after_help().map(ToString::to_string);
                assert!(
                    help.as_deref().is_some_and(|h| h.contains("mesh ")),
                    "{} {} has no example",
                    sub.get_name(),
                    nested.get_name()
                );
                found = true;
            }
            assert!(found, "{} has no example", sub.get_name());
        }
    }
}
