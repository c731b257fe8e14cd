//! The options every command takes, in `mesh` and `mesh-audit` alike: the broker, its
//! management API, the node, the context of the config file, the output.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::cli::values::parse_duration;

/// Options every command takes, in `mesh` and `mesh-audit` alike (`Debug` redacts the URL's
/// user information).
///
/// Each setting is taken from the first of: its flag, its `MESH_*` variable, the chosen
/// context of the config file (see the `config` module), its default. The fields hold what
/// the flag or the variable gave; `config::apply_context` fills in the context's.
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
    /// keyfile, verify and server_name_indication; auth_mechanism=external logs in with the
    /// client certificate alone, no password, as the URL's user) [default:
    /// amqp://127.0.0.1:5672]
    #[arg(long, env = "MESH_URL", global = true, hide_env_values = true)]
    pub(crate) url: Option<String>,

    /// A file holding the broker password (overrides the URL's). Without it, MESH_PASSWORD may
    /// hold the password itself
    #[arg(long, env = "MESH_PASSWORD_FILE", value_name = "PATH", global = true)]
    pub(crate) password_file: Option<PathBuf>,

    /// The password of MESH_PASSWORD, if set (never a command-line flag).
    #[arg(skip = EnvPassword::from_env())]
    pub(crate) password: EnvPassword,

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

    /// When to colour the output and the log lines on stderr (auto: only on a terminal, and
    /// not when NO_COLOR is set; a file, a pipe or journald never gets escape codes)
    #[arg(long, value_enum, default_value_t = ColorWhen::Auto, global = true)]
    pub(crate) color: ColorWhen,

    /// The form of the log lines on stderr (filtered by RUST_LOG: `info` for the commands
    /// that run until stopped, none for the others unless RUST_LOG says): text, or one JSON
    /// object per line for a log collector
    #[arg(
        long,
        value_enum,
        env = "MESH_LOG_FORMAT",
        default_value_t = LogFormatArg::Text,
        global = true
    )]
    pub(crate) log_format: LogFormatArg,

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
            .field("log_format", &self.log_format)
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

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum LogFormatArg {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// `--queue-type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum QueueTypeArg {
    /// Replicated; the broker counts deliveries.
    Quorum,
    /// Single-node.
    Classic,
}

/// The environment variable holding the broker password.
pub(crate) const PASSWORD_ENV: &str = "MESH_PASSWORD";

/// A password taken from [`PASSWORD_ENV`]: `Debug` only says whether it is set.
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct EnvPassword(Option<String>);

impl EnvPassword {
    /// The password `password`, if any.
    pub(crate) fn new(password: Option<String>) -> EnvPassword {
        EnvPassword(password)
    }

    /// Reads [`PASSWORD_ENV`] (unset, empty or not UTF-8: none).
    pub(crate) fn from_env() -> EnvPassword {
        EnvPassword::new(std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty()))
    }

    /// The password, if set.
    pub(crate) fn get(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl fmt::Debug for EnvPassword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(_) => f.write_str("EnvPassword(<redacted>)"),
            None => f.write_str("EnvPassword(None)"),
        }
    }
}
