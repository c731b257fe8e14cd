//! Options several commands flatten in: the audit store they read, and the metrics endpoint
//! of those that run until stopped.

use clap::Args;

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

/// `--metrics-addr`, on the commands that run until stopped.
#[derive(Debug, Args)]
pub(crate) struct MetricsArg {
    /// Serve /metrics (Prometheus), /livez and /readyz on this address, e.g.
    /// 127.0.0.1:9464 (port 0 picks a free one; the address is printed on stderr)
    #[arg(long, env = "MESH_METRICS_ADDR", value_name = "ADDR")]
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
}
