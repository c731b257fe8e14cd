//! `mesh console`: the operator's web console.

use std::path::PathBuf;

use clap::Args;

use crate::cli::shared::StoreArg;

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

pub(super) const CONSOLE_HELP: &str = "\
Pages: / (overview), /events (search), /events/ID, /dead (groups), /dead/ID, /live (a live
tail), /map (the system map), /contracts (the announced contracts), /modules/QUEUE (a module
queue, and its replay). A re-drive, a replay or a purge asks for confirmation, then for the
token; it is refused (403) without a valid token, or from another origin than the console's
own. Without a token, no action is offered. The broker (--url) serves re-drive, replay and
the live tail; its management API (--management-url, else the broker's first host on port
15672) the queues and the map's receivers: a console that reaches neither still shows the
store.

Examples:
  mesh console --read-only
  MESH_CONSOLE_TOKEN=$(cat ~/.config/mesh/console-token) mesh console
  mesh console --store postgres://audit@db/audit --token-file /etc/mesh/console-tokens";
