//! Test helpers for mesh's crates (dev-only, never published).
//!
//! - [`shared`]: a throw-away vhost per test on the machine's shared RabbitMQ
//!   ([`TestVhost`], made through the management API), `rabbitmqctl`, and typed listings of queues, exchanges, bindings and
//!   connections, plus forced connection closes;
//! - [`node`]: private RabbitMQ nodes for destructive tests ([`PrivateNode`]: stop, crash,
//!   restart with the same data, memory alarm), shared per test binary with [`shared_node`],
//!   and never leaked, even when the test binary is killed;
//! - [`certs`]: a throw-away certificate authority and the server and client certificates
//!   it signs ([`TestPki`]), for TLS tests;
//! - [`postgres`]: a private PostgreSQL server ([`PrivatePostgres`], TLS optional) for
//!   tests that must configure one, never the shared one;
//! - [`store`]: a throw-away audit store ([`TempStore`]): a SQLite file, or a database of its
//!   own on the machine's PostgreSQL server, removed on drop;
//! - [`temp`]: a throw-away directory ([`TempDir`]);
//! - [`http`]: a fake HTTP server that records every request's head ([`RecordingServer`]),
//!   and [`get`](http::get) for a local endpoint (`/metrics`, `/readyz`);
//! - [`prometheus`]: [`sample`](prometheus::sample), one value of a scraped Prometheus text
//!   exposition, by name and labels (malformed lines are skipped, never a panic);
//! - [`cluster`]: three-node RabbitMQ clusters behind one harness ([`ClusterHarness`]: find
//!   a quorum queue's leader and a connection's node, wait for queues in sync and drained): a
//!   [`Cluster`] of private nodes for failover tests (kill and restart nodes, wait for a
//!   rejoin), shared per test binary with [`shared_cluster`];
//! - [`netns`]: the same harness with each node in a network namespace of its own, for
//!   network partitions ([`netns::NetnsCluster`]: cut and heal a node's inter-node link);
//! - [`relay`]: a TCP [`Relay`] between client and broker that passes, blackholes or cuts
//!   connections;
//! - [`ledger`]: a per-event-id [`Ledger`] of attempts, confirms and handles that finds lost,
//!   unexpected and duplicate events;
//! - [`wait`]: [`eventually`], polling a condition under a timeout (tests never sleep to
//!   synchronise);
//! - `sdk` (feature `sdk`): a transport and an emitting bus of the mesh SDK on a URL;
//! - `planned` (feature `sdk`): a private node under an applied access plan, with every
//!   planned user's password, and the operator's declaration of a module's durable queues
//!   (`planned::declare_as`), which under the plan no module may make;
//! - [`free_port`] for a listener a test configures itself, and [`error_chain`] to show an
//!   error with its sources on one line.
//!
//! Rules the helpers encode: tests never stop, restart or alarm the shared broker (that is
//! what private nodes are for); tests needing a broker fail with a hint when none is reachable,
//! rather than skip; every wait has a timeout.
//!
//! # Example
//!
//! ```no_run
//! use std::time::Duration;
//! use mesh_testkit::{eventually, Ledger, Relay, TestVhost};
//!
//! # async fn demo() -> anyhow::Result<()> {
//! // Isolation on the shared broker: deleted on drop, even if the test panics.
//! let vhost = TestVhost::create("orders").await?;
//! // Put a relay in front of the broker and connect through it.
//! let relay = Relay::start(vhost.broker_addr()).await?;
//! let url = vhost.url_via(relay.addr());
//! let ledger = Ledger::new();
//! // ... a publisher calls ledger.attempted(id) / ledger.confirmed(id),
//! //     a handler calls ledger.handled(id), both connected to `url` ...
//! relay.cut(); // every connection drops; the client must reconnect and carry on
//! eventually(Duration::from_secs(30), "a reconnect through the relay", || async {
//!     (relay.active() > 0).then_some(())
//! })
//! .await;
//! let queues = vhost.list_queues().await?;
//! assert!(queues.iter().all(|q| q.durable));
//! ledger.wait_all_handled(Duration::from_secs(30)).await.assert_clean();
//! # let _ = url;
//! # Ok(()) }
//! ```
//!
//! For crash tests on a node of the test's own:
//!
//! ```no_run
//! use mesh_testkit::{NodeOptions, PrivateNode};
//! # async fn demo() -> anyhow::Result<()> {
//! let node = PrivateNode::start(NodeOptions::default().heartbeat(2)).await?; // ~10 s
//! // ... connect to node.url(), publish persistent messages to a durable queue ...
//! node.kill().await?; // SIGKILL
//! node.start_again().await?; // same port and data
//! # Ok(()) }
//! ```

mod admin;
pub mod certs;
pub mod cluster;
pub mod http;
pub mod ledger;
pub mod netns;
pub mod node;
#[cfg(feature = "sdk")]
pub mod planned;
pub mod postgres;
pub mod prometheus;
mod registry;
pub mod relay;
#[cfg(feature = "sdk")]
pub mod sdk;
mod server;
pub mod shared;
pub mod store;
mod sys;
pub mod temp;
pub mod wait;
mod watchdog;

pub use certs::{CertFiles, TestPki};
pub use cluster::{
    shared_cluster, Cluster, ClusterConnection, ClusterHarness, MemberStatus, QuorumQueueInfo,
};
pub use http::RecordingServer;
pub use ledger::{Ledger, LedgerReport};
pub use node::{free_port, shared_node, NodeOptions, PrivateNode, TlsListener};
pub use postgres::PrivatePostgres;
pub use relay::{Relay, RelayMode};
pub use shared::{
    close_connections, list_bindings, list_connections, list_exchanges, list_queues, rabbitmqctl,
    BindingInfo, ConnectionInfo, ExchangeInfo, QueueInfo, TestVhost,
};
pub use store::TempStore;
pub use temp::TempDir;
pub use wait::eventually;

/// `error` and its sources, `: `-separated on one line, for an assertion on what a user
/// would read, or its message.
///
/// ```
/// #[derive(Debug)]
/// struct Connect(std::io::Error);
/// impl std::fmt::Display for Connect {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         f.write_str("cannot connect")
///     }
/// }
/// impl std::error::Error for Connect {
///     fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
///         Some(&self.0)
///     }
/// }
/// let error = Connect(std::io::Error::other("connection reset"));
/// assert_eq!(mesh_testkit::error_chain(&error), "cannot connect: connection reset");
/// ```
pub fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
