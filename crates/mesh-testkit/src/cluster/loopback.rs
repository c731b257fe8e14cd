//! A three-node RabbitMQ cluster of private nodes on loopback, for failover tests.
//!
//! This module owns [`Cluster`] (three [`PrivateNode`]s joined into one cluster), how it
//! reaches its nodes (its [`ClusterHarness`] implementation: the queries of queues, leaders,
//! members and connections are the harness's), whether a restarted node rejoined, and the
//! per-binary registry [`shared_cluster`].
//!
//! # How the cluster is made
//!
//! The three nodes are ordinary private nodes (own names, AMQP and distribution ports, data
//! directories and watchdogs; see [`crate::node`]), booted at the same time. They share one
//! Erlang cookie because they run as the same user with the same home (on Debian, the
//! `rabbitmq` user, whose cookie `rabbitmqctl` uses too). The second and third node then join
//! the first: `stop_app`, `join_cluster <first>`, `start_app`. On this project's 2-core machines
//! that takes about 25 s in all, so a test binary starts one cluster and its tests share it.
//!
//! A node killed with [`PrivateNode::kill`] and started again with
//! [`PrivateNode::start_again`] keeps its data and its membership: it rejoins on boot, and its
//! quorum queue members catch up from the others. [`Cluster::await_rejoined`] and
//! [`ClusterHarness::await_queues_in_sync`] wait for that.
//!
//! Killing or stopping nodes of a shared cluster affects every test using it: tests that do
//! so must take turns (a static lock in the test binary) and call [`Cluster::heal`] first, in
//! case a failed test left a node down.
//!
//! Every node's watchdog removes it when the test process ends in any way, so a shared
//! cluster (a static, never dropped) is not leaked either.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail};

use super::harness::{self, ClusterConnection, ClusterHarness, CLUSTER_SIZE};
use crate::node::{NodeOptions, PrivateNode};
use crate::registry::Registry;
use crate::shared;

/// Polling interval of the waits in this module (each poll runs `rabbitmqctl`, ~1 s anyway).
const POLL: Duration = Duration::from_millis(250);
/// How long one `rabbitmq-queues` run may take.
const QUEUES_TOOL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one node's boot may take when three boot at once on two cores.
const CLUSTER_BOOT_TIMEOUT: Duration = Duration::from_secs(120);

/// Three private RabbitMQ nodes joined into one cluster.
///
/// ```no_run
/// # async fn demo() -> anyhow::Result<()> {
/// use std::time::Duration;
/// use mesh_testkit::cluster::{shared_cluster, Cluster, ClusterHarness};
/// use mesh_testkit::NodeOptions;
/// let cluster = shared_cluster("failover", NodeOptions::default()).await?; // ~25 s, once
/// cluster.add_vhost("orders").await?;
/// let url = cluster.url("orders"); // all three addresses, comma-separated
/// // ... clients connect to `url` and declare quorum queues ...
/// let leader = cluster.leader_of("orders", "anchor.billing.events").await?;
/// cluster.node(leader).kill().await?; // SIGKILL
/// cluster.node(leader).start_again().await?;
/// cluster.await_rejoined(leader, Duration::from_secs(60)).await?;
/// cluster.await_queues_in_sync("orders", Duration::from_secs(60)).await?;
/// # let _ = url;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Cluster {
    nodes: Vec<PrivateNode>,
}

impl Cluster {
    /// Boots three nodes with `opts` at once and joins the second and third to the first.
    /// Fails (removing every node) if one does not boot or join; when `rabbitmq-server` is not
    /// installed, with a hint saying so.
    ///
    /// A boot timeout left at the default 60 s is raised to 120 s: three nodes booting at once
    /// on two cores are slow.
    pub async fn start(opts: NodeOptions) -> anyhow::Result<Cluster> {
        let began = Instant::now();
        let opts = if opts.get_boot_timeout() == NodeOptions::default().get_boot_timeout() {
            opts.boot_timeout(CLUSTER_BOOT_TIMEOUT)
        } else {
            opts
        };
        // The three boot at once; a node that booted is dropped (and removed) if another
        // failed.
        let (a, b, c) = tokio::join!(
            PrivateNode::start(opts.clone()),
            PrivateNode::start(opts.clone()),
            PrivateNode::start(opts.clone()),
        );
        let nodes = vec![a?, b?, c?];
        let booted = began.elapsed();
        let cluster = Cluster { nodes };
        harness::join_to_first(&cluster).await?;
        for i in 0..CLUSTER_SIZE {
            let running = cluster.running_nodes_seen_by(i).await?;
            if running.len() != CLUSTER_SIZE {
                bail!(
                    "node {} sees running nodes {running:?} after the joins, not all {CLUSTER_SIZE}",
                    cluster.nodes[i].name()
                );
            }
        }
        tracing::info!(
            nodes = ?cluster.nodes.iter().map(PrivateNode::name).collect::<Vec<_>>(),
            ?booted,
            elapsed = ?began.elapsed(),
            "private RabbitMQ cluster formed"
        );
        Ok(cluster)
    }

    /// The three nodes; indexes into this slice name nodes everywhere in this API.
    pub fn nodes(&self) -> &[PrivateNode] {
        &self.nodes
    }

    /// Node `i` (0, 1 or 2), to kill, stop or start again.
    ///
    /// # Panics
    ///
    /// If `i` is not below [`CLUSTER_SIZE`].
    pub fn node(&self, i: usize) -> &PrivateNode {
        &self.nodes[i]
    }

    /// The index of the node listening for AMQP on `port`.
    pub fn index_of_port(&self, port: u16) -> Option<usize> {
        self.nodes.iter().position(|n| n.port() == port)
    }

    /// `127.0.0.1:<port>` of every node, in node order.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        self.nodes.iter().map(PrivateNode::addr).collect()
    }

    /// `amqp://guest:guest@127.0.0.1:<p0>,127.0.0.1:<p1>,127.0.0.1:<p2>/<vhost>`: every node,
    /// in node order (a client tries them in turn).
    pub fn url(&self, vhost: &str) -> String {
        self.url_in_order(&[0, 1, 2], vhost)
    }

    /// Like [`Cluster::url`] with the nodes in the given order, so that a client starts on a
    /// node of the test's choosing (e.g. `[1, 2, 0]`).
    pub fn url_in_order(&self, order: &[usize], vhost: &str) -> String {
        let addrs: Vec<SocketAddr> = order.iter().map(|&i| self.nodes[i].addr()).collect();
        harness::guest_url(&addrs, vhost)
    }

    /// Indexes of the nodes whose OS process runs (they may still be booting).
    pub fn running(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].is_running())
            .collect()
    }

    /// Runs `rabbitmqctl ARGS...` against the first running node that answers (cluster-wide
    /// commands: vhosts, permissions, queue and connection listings).
    pub async fn rabbitmqctl(&self, args: &[&str]) -> anyhow::Result<String> {
        self.rabbitmqctl_any(args).await
    }

    /// The names of the running nodes of the cluster as node `i` sees them.
    pub async fn running_nodes_seen_by(&self, i: usize) -> anyhow::Result<Vec<String>> {
        let status = self.cluster_status(i).await?;
        let mut running: Vec<String> = harness::running_nodes(&status).map(str::to_owned).collect();
        running.sort();
        Ok(running)
    }

    /// Waits until node `i` (started again) runs its app and every running node, `i`
    /// included, sees all running nodes as one cluster.
    pub async fn await_rejoined(&self, i: usize, timeout: Duration) -> anyhow::Result<()> {
        let name = self.nodes[i].name().to_owned();
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        loop {
            let expected: Vec<String> = {
                let mut names: Vec<String> = self
                    .running()
                    .into_iter()
                    .map(|j| self.nodes[j].name().to_owned())
                    .collect();
                names.sort();
                names
            };
            if !expected.contains(&name) {
                bail!("node {name} is not running");
            }
            let mut agreed = true;
            for j in self.running() {
                match self.running_nodes_seen_by(j).await {
                    Ok(seen) if seen == expected => {}
                    Ok(seen) => {
                        last = format!("{} sees {seen:?}", self.nodes[j].name());
                        agreed = false;
                        break;
                    }
                    Err(e) => {
                        last = format!("{e:#}");
                        agreed = false;
                        break;
                    }
                }
            }
            if agreed {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("node {name} did not rejoin the cluster within {timeout:?}: {last}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Starts the nodes `which` (indexes) again at once, after a kill or stop, and waits
    /// until each booted (not until it rejoined: see [`Cluster::await_rejoined`]).
    pub async fn start_again(&self, which: &[usize]) -> anyhow::Result<()> {
        let start = |i: usize| async move {
            if which.contains(&i) {
                self.nodes[i].start_again().await
            } else {
                Ok(())
            }
        };
        let (a, b, c) = tokio::join!(start(0), start(1), start(2));
        a.and(b).and(c)
    }

    /// Starts every node that is down (a test that failed mid-fault may leave one so) and waits
    /// until all three form the cluster again. A no-op when all run.
    pub async fn heal(&self, timeout: Duration) -> anyhow::Result<()> {
        let down: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| !self.nodes[i].is_running())
            .collect();
        if down.is_empty() {
            return Ok(());
        }
        self.start_again(&down).await?;
        for &i in &down {
            self.await_rejoined(i, timeout).await?;
        }
        Ok(())
    }
}

impl ClusterHarness for Cluster {
    fn node_name(&self, i: usize) -> &str {
        self.nodes[i].name()
    }

    /// The running nodes, in node order.
    fn ask_order(&self) -> Vec<usize> {
        self.running()
    }

    async fn ctl(&self, i: usize, args: &[&str]) -> anyhow::Result<String> {
        self.nodes[i].rabbitmqctl(args).await
    }

    async fn queues_ctl(&self, i: usize, args: &[&str]) -> anyhow::Result<String> {
        shared::run_tool(
            "rabbitmq-queues",
            Some(self.nodes[i].name()),
            args,
            QUEUES_TOOL_TIMEOUT,
        )
        .await
    }

    /// The nodes running when the wait begins.
    fn in_sync_nodes(&self) -> Vec<usize> {
        self.running()
    }

    /// Every client connection of the cluster with the node it is on (found by the server
    /// port in its name).
    async fn connections(&self) -> anyhow::Result<Vec<ClusterConnection>> {
        let mut last = None;
        for i in self.running() {
            match shared::list_connections(Some(self.nodes[i].name()), None).await {
                Ok(list) => {
                    return Ok(list
                        .into_iter()
                        .filter_map(|c| {
                            let node = server_port(&c.name).and_then(|p| self.index_of_port(p))?;
                            Some(ClusterConnection {
                                connection_name: c.connection_name,
                                name: c.name,
                                vhost: c.vhost,
                                node,
                            })
                        })
                        .collect())
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("no node of the cluster is running")))
    }
}

/// The server port of a connection named `client-ip:port -> server-ip:port`.
fn server_port(name: &str) -> Option<u16> {
    let (_, server) = name.split_once("->")?;
    server.trim().rsplit_once(':')?.1.parse().ok()
}

/// One cluster per `key` for the whole test binary, formed by the first caller (~25 s);
/// the nodes are removed when the test process exits (their watchdogs do it).
///
/// All callers of one key must pass equal options, else this fails.
pub async fn shared_cluster(key: &str, opts: NodeOptions) -> anyhow::Result<Arc<Cluster>> {
    static CLUSTERS: Registry<NodeOptions, Cluster> = Registry::new();
    CLUSTERS
        .get_or_start("shared_cluster", key, opts, Cluster::start)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_server_port_of_a_connection_name() {
        assert_eq!(
            server_port("127.0.0.1:51234 -> 127.0.0.1:20001"),
            Some(20001)
        );
        assert_eq!(server_port("[::1]:5 -> [::1]:25672"), Some(25672));
        assert_eq!(server_port("nonsense"), None);
    }
}
