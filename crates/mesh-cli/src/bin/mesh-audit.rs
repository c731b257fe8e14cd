//! `mesh-audit`: the mesh audit logger as a program of its own.
//!
//! ```text
//! mesh-audit run [--store URL] [--batch-size N] [--batch-wait 50ms] [--prefetch N]
//!                [--delivery-limit N] [--enforce-identity [--user-prefix P]]
//!                [--metrics-addr ADDR] [--console-addr ADDR]
//! ```
//!
//! It is `mesh audit run` under another name: the same options (every global one of `mesh`:
//! `--context`, `--url`, `--password-file`, `--node`, `--queue-type`, `--connect-timeout`,
//! `--management-url`…, with the same `MESH_*` variables and defaults), the same config file
//! and contexts, the same default store (`$XDG_DATA_HOME/mesh/audit.db`, i.e.
//! `~/.local/share/mesh/audit.db`, which `mesh audit query` and `mesh dead list` read) and
//! the same exit codes (0 after a graceful shutdown on SIGTERM or Ctrl-C, 2 on a usage
//! error: an unknown option, a number or duration outside its bounds, an invalid URL, node
//! name or store, a bad config file). `--console-addr` serves the operator's console (as
//! `mesh console`, actions with `MESH_CONSOLE_TOKEN`) over the logger's store, and stops with
//! the logger. See the `mesh` binary's docs and the README.

use std::process::ExitCode;

fn main() -> ExitCode {
    mesh_cli::mesh_audit_main()
}
