//! `mesh saga …`: the instances of the sagas (`mesh_saga`) in a service's database.

use clap::{Args, Subcommand};

use crate::cli::shown;
use crate::cli::values::parse_within;

/// `mesh saga …`.
#[derive(Debug, Subcommand)]
pub(crate) enum SagaCommand {
    /// List saga instances, the latest changed first: state, version, pending timeouts
    #[command(after_help = SAGA_LIST_HELP)]
    List {
        #[command(flatten)]
        database: SagaDatabaseArg,
        /// Only the instances of this saga
        #[arg(long, value_name = "NAME")]
        saga: Option<String>,
        /// At most this many instances (1 to 10000)
        #[arg(short = 'n', long, value_name = "N", default_value_t = 100, value_parser = parse_limit)]
        limit: u32,
    },
    /// Show one instance: its state, version and pending timeouts
    #[command(after_help = SAGA_SHOW_HELP)]
    Show {
        #[command(flatten)]
        database: SagaDatabaseArg,
        /// The saga's name
        saga: String,
        /// The instance's correlation key
        key: String,
    },
}

/// `--database`, on the saga commands.
#[derive(Args)]
pub(crate) struct SagaDatabaseArg {
    /// The database the saga's service keeps its instances in: postgres://USER@HOST[:PORT]/DB
    /// or sqlite:PATH (the file must exist). Only read. Prefer ~/.pgpass or PGPASSWORD to a
    /// password in the URL, which is never shown
    #[arg(
        long,
        env = "MESH_SAGA_DATABASE",
        value_name = "URL",
        hide_env_values = true
    )]
    pub(crate) database: String,
}

impl std::fmt::Debug for SagaDatabaseArg {
    /// The URL with its user information and password redacted.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SagaDatabaseArg")
            .field("database", &shown(&self.database))
            .finish()
    }
}

/// `--limit` of `saga list`: 1 to 10000.
fn parse_limit(text: &str) -> Result<u32, String> {
    parse_within(text, 1, 10_000)
}

const SAGA_LIST_HELP: &str = "\
One line per instance: the saga, the correlation key, the version (1 when started, one more
per event applied), running or completed, when it last changed, its pending timeouts, and its
state as JSON. --json gives an array of {\"saga\", \"key\", \"version\", \"completed\",
\"created_at\", \"updated_at\", \"state\", \"timeouts\": [{\"name\", \"event_id\", \"due\"}]}.
It only reads: a database without the saga tables is an error saying so (exit code 1).

Examples:
  mesh saga list --database postgres://orders@db/orders
  mesh saga list --database sqlite:///var/lib/orders/orders.db --saga order --limit 20 --json";

const SAGA_SHOW_HELP: &str = "\
The instance's saga, key, version, whether it completed, when it started and last changed,
its pending timeouts (name, due time, the scheduled event's id) and its state as JSON;
--json gives the object `saga list --json` lists. An instance that is not there is exit
code 1.

Examples:
  mesh saga show order 42 --database postgres://orders@db/orders
  MESH_SAGA_DATABASE=sqlite:///var/lib/orders/orders.db mesh saga show order 42 --json";
