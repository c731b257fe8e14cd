//! A three-node RabbitMQ cluster whose nodes each live in a network namespace of their own,
//! so that a test can cut one node off from the others while clients still reach it: network
//! partitions.
//!
//! This module owns [`NetnsCluster`] (three nodes joined into one cluster, cutting and healing a
//! node's inter-node link, and what tests ask of the cluster while it is partitioned), its
//! [`NetnsOptions`], and the clean-up that keeps a failed or killed test from leaking
//! namespaces, links or nodes. What every cluster answers (quorum queues, members, connections,
//! waits for queues in sync and drained) is the shared harness's:
//! [`ClusterHarness`], which [`NetnsCluster`] implements.
//!
//! Its rooms: this file (the cluster, its cuts, pauses and clean-up), `network` (a slot's
//! names and addresses, creating and removing its namespaces, bridges and links, its
//! watchdog) and `node` (one node in its namespace: its commands, `epmd`, boot and CLI).
//!
//! # The network
//!
//! Each node `i` runs in namespace `mshp<slot>n<i>` with two interfaces (veth pairs whose other
//! ends are ports of two bridges in the root namespace):
//!
//! - `cl`, on the *client* bridge `mshp<slot>c`, subnet `10.(200+slot/250).(slot%250).0/24`:
//!   the root namespace has `.1` on the bridge, node `i` has `.(10+i)` and listens for AMQP
//!   there (port 5672, its own namespace's). Test clients in the root namespace connect to node
//!   `i` at [`NetnsCluster::addr`].
//! - `in`, on the *inter-node* bridge `mshp<slot>i`, subnet
//!   `10.(204+slot/250).(slot%250).0/24`, node `i` at `.(10+i)`; the root namespace has no
//!   address on it. Erlang distribution runs here only: the node is named
//!   `rabbit@<inter-node address>` (long names, `RABBITMQ_USE_LONGNAME`), listens for
//!   distribution on that address only, and runs its own `epmd` in its namespace.
//!
//! [`NetnsCluster::cut`] takes the root-namespace end of node `i`'s inter-node veth down:
//! node `i` then hears nothing from the others (no reset, no error: packets are dropped), while
//! its client link is untouched. [`NetnsCluster::heal`] brings it back up. No firewall is
//! needed (the machines here have neither iptables nor nftables).
//!
//! Nodes run with `cluster_partition_handling = pause_minority` and a short `net_ticktime`
//! ([`DEFAULT_NET_TICKTIME`], 5 s): a node cut off from the other two sees them down after
//! 5–6.25 s, finds itself in a minority and pauses (stops its app and its listeners: clients
//! are disconnected and refused), and resumes once it sees a majority again. RabbitMQ's default
//! 60 s would hide any partition shorter than a minute (a flapping link) and make every test
//! wait over a minute per detection. `loopback_users = none` lets `guest` log in over the client
//! bridge (these nodes are the test's own).
//!
//! # Names, slots and clean-up
//!
//! Everything a cluster creates is named after its *slot*, a number below 1000 reserved for the
//! process's lifetime by an exclusive lock on a file in `$TMPDIR/mesh-testkit-netns/` (the
//! kernel drops the lock when the process dies in any way), so test binaries running side by
//! side never collide. A slot whose subnets overlap an address or route of the machine is
//! skipped: existing interfaces are never touched. Interface names stay within the kernel's 15
//! characters.
//!
//! [`Drop`] kills every process in the three namespaces (the nodes, their `epmd`s and helpers),
//! deletes the namespaces (which deletes their veths) and the bridges, and removes the
//! directory `$TMPDIR/mshp<slot>` (config, data, logs). A watchdog (a `sh` reading a pipe from
//! the test process, as for [`crate::node`]) does the same if the process dies without
//! dropping it. And each start first removes the leftovers of any slot whose lock is free: a
//! run that could not clean up (a power cut) is cleaned up by the next.
//!
//! # Requirements
//!
//! Root (namespaces, links), `ip` (iproute2) and `setpriv` (util-linux; both on a fresh Debian),
//! and RabbitMQ's scripts as for [`crate::node`]. Only RabbitMQ 3.10.8 with Erlang 25 is tested.

mod network;
mod node;

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;

pub use self::node::{NetnsOptions, AMQP_PORT, DEFAULT_NET_TICKTIME};

use self::network::{kill_namespace, Layout};
use self::node::{NsNode, CTL_TIMEOUT, FAST_POLL};
use crate::cluster::harness::{self, ClusterConnection, ClusterHarness, CLUSTER_SIZE};
use crate::server;
use crate::shared::{client_property, str_field};
use crate::sys::{self, lock, Install};
use crate::watchdog::Watchdog;

/// Polling interval of the waits that run `rabbitmqctl` (~1 s each anyway).
const POLL: Duration = Duration::from_millis(250);

/// Three RabbitMQ nodes, each in a network namespace of its own, joined into one cluster; see
/// the [module docs](self).
///
/// ```no_run
/// # async fn demo() -> anyhow::Result<()> {
/// use std::time::Duration;
/// use mesh_testkit::netns::{NetnsCluster, NetnsOptions};
/// use mesh_testkit::ClusterHarness;
/// let cluster = NetnsCluster::start(NetnsOptions::default()).await?; // ~30 s
/// cluster.add_vhost("orders").await?;
/// let url = cluster.url_in_order(&[0, 1, 2], "orders"); // clients reach every node
/// cluster.cut(0)?; // node 0 hears nothing from 1 and 2; clients still reach it
/// cluster.await_paused(0, Duration::from_secs(30)).await?; // pause_minority
/// cluster.heal(0)?;
/// cluster.await_whole(Duration::from_secs(120)).await?;
/// # let _ = url;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct NetnsCluster {
    layout: Layout,
    nodes: Vec<NsNode>,
    opts: NetnsOptions,
    cut: Mutex<[bool; CLUSTER_SIZE]>,
    watchdog: Mutex<Option<Watchdog>>,
    /// Held for the cluster's lifetime: the slot is ours.
    _slot: File,
}

impl NetnsCluster {
    /// Creates the network, boots the three nodes at once and joins the second and third to
    /// the first (~30 s on 2 cores). Fails (removing everything) if a step fails; when not root,
    /// or `ip` or RabbitMQ is missing, with a hint saying so.
    pub async fn start(opts: NetnsOptions) -> anyhow::Result<NetnsCluster> {
        let began = Instant::now();
        if !nix::unistd::getuid().is_root() {
            bail!("a network-namespace cluster needs root (namespaces, links)");
        }
        let install = Install::get();
        if !install.has("rabbitmq-server") || !install.has("rabbitmqctl") {
            bail!(
                "rabbitmq-server/rabbitmqctl not found (looked in {}): install the Debian \
                 package rabbitmq-server",
                install.program("rabbitmq-server").display()
            );
        }
        network::ip(&["-V"])
            .context("iproute2's `ip` is needed (Debian: apt-get install iproute2)")?;
        let (layout, slot) = tokio::task::spawn_blocking(|| {
            network::remove_stale();
            network::reserve_slot()
        })
        .await
        .context("reserving a network slot")??;
        let nodes = (0..CLUSTER_SIZE)
            .map(|i| NsNode {
                namespace: layout.namespace(i),
                name: format!("rabbit@{}", layout.inter_ip(i)),
                client_ip: layout.client_ip(i),
                inter_ip: layout.inter_ip(i),
                dir: layout.dir().join(format!("n{i}")),
                process: Mutex::new(None),
            })
            .collect();
        // From here on Drop owns the clean-up, whatever fails next.
        let cluster = NetnsCluster {
            watchdog: Mutex::new(Some(network::spawn_watchdog(&layout)?)),
            layout,
            nodes,
            opts,
            cut: Mutex::new([false; CLUSTER_SIZE]),
            _slot: slot,
        };
        {
            let layout = cluster.layout.clone();
            tokio::task::spawn_blocking(move || network::create_network(&layout))
                .await
                .context("creating the network")??;
        }
        cluster.write_files()?;
        let boot = |i: usize| cluster.nodes[i].boot(&cluster.opts);
        let (a, b, c) = tokio::join!(boot(0), boot(1), boot(2));
        a.and(b).and(c)?;
        let booted = began.elapsed();
        harness::join_to_first(&cluster).await?;
        cluster
            .await_whole(Duration::from_secs(60))
            .await
            .context("the cluster after the joins")?;
        tracing::info!(
            slot = cluster.layout.slot,
            ?booted,
            elapsed = ?began.elapsed(),
            "network-namespace RabbitMQ cluster formed"
        );
        Ok(cluster)
    }

    /// Writes every node's configuration files and hands the tree to the scripts' user.
    fn write_files(&self) -> anyhow::Result<()> {
        let base = self.layout.dir();
        std::fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
        for node in &self.nodes {
            node.write_files(&self.opts)?;
        }
        Install::get()
            .chown_tree(&base)
            .with_context(|| format!("chown of {}", base.display()))
    }

    /// Runs `rabbitmqctl ARGS...` against node `i`, from inside its namespace (so it works
    /// while the node is cut off). Killed after 60 s.
    pub async fn rabbitmqctl(&self, i: usize, args: &[&str]) -> anyhow::Result<String> {
        self.nodes[i]
            .ctl("rabbitmqctl", args, CTL_TIMEOUT, &self.opts)
            .await
    }

    /// Node `i`'s Erlang name, `rabbit@<its inter-node address>`.
    pub fn name(&self, i: usize) -> &str {
        &self.nodes[i].name
    }

    /// Node `i`'s namespace.
    pub fn namespace(&self, i: usize) -> &str {
        &self.nodes[i].namespace
    }

    /// Node `i`'s main log file, handy when a test fails.
    pub fn log_file(&self, i: usize) -> PathBuf {
        self.nodes[i].log_file()
    }

    /// What node `i` says about itself, for a failure report: the Erlang nodes it is connected
    /// to, whether its app runs, and the last `lines` lines of its log.
    pub async fn diagnostics(&self, i: usize, lines: usize) -> String {
        let ask = |expr: &'static str| async move {
            match self.rabbitmqctl(i, &["eval", expr]).await {
                Ok(out) => out.trim().to_owned(),
                Err(e) => format!("{e:#}"),
            }
        };
        format!(
            "node {i} ({}): nodes() = {}; rabbit running: {}\n--- {} (last lines) ---\n{}",
            self.nodes[i].name,
            ask("nodes().").await,
            ask("rabbit:is_running().").await,
            self.log_file(i).display(),
            sys::tail(&self.log_file(i), lines)
        )
    }

    /// The index of the node whose client address is `ip`.
    pub fn index_of_client_ip(&self, ip: Ipv4Addr) -> Option<usize> {
        self.nodes.iter().position(|n| n.client_ip == ip)
    }

    /// Where clients in the root namespace reach node `i`: `<client address>:5672`.
    pub fn addr(&self, i: usize) -> SocketAddr {
        self.nodes[i].addr()
    }

    /// Every node's [`NetnsCluster::addr`], in node order.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        (0..CLUSTER_SIZE).map(|i| self.addr(i)).collect()
    }

    /// The addresses of the nodes in `order`.
    pub fn addrs_in_order(&self, order: &[usize]) -> Vec<SocketAddr> {
        order.iter().map(|&i| self.addr(i)).collect()
    }

    /// `amqp://guest:guest@<a0>,<a1>,<a2>/<vhost>` with the nodes in `order`.
    pub fn url_in_order(&self, order: &[usize], vhost: &str) -> String {
        harness::guest_url(&self.addrs_in_order(order), vhost)
    }

    /// Cuts node `i` off from the other two (its client link stays): the root-namespace end of
    /// its inter-node veth goes down. Returns when the link is down.
    pub fn cut(&self, i: usize) -> anyhow::Result<()> {
        network::ip(&["link", "set", "dev", &self.layout.inter_veth(i), "down"])?;
        lock(&self.cut)[i] = true;
        Ok(())
    }

    /// Brings node `i`'s inter-node link back up.
    pub fn heal(&self, i: usize) -> anyhow::Result<()> {
        network::ip(&["link", "set", "dev", &self.layout.inter_veth(i), "up"])?;
        lock(&self.cut)[i] = false;
        Ok(())
    }

    /// Heals every cut link.
    pub fn heal_all(&self) -> anyhow::Result<()> {
        for i in 0..CLUSTER_SIZE {
            self.heal(i)?;
        }
        Ok(())
    }

    /// Whether node `i` is cut off now.
    pub fn is_cut(&self, i: usize) -> bool {
        lock(&self.cut)[i]
    }

    /// Whether node `i` accepts TCP connections on its AMQP port (a node paused by
    /// `pause_minority` does not).
    pub async fn is_listening(&self, i: usize) -> bool {
        self.nodes[i].is_listening().await
    }

    /// Kills node `i` (every process of its namespace, its `epmd` included) and boots it
    /// again on its data, as an operator restarts a node: the way out of a node that does
    /// not resume after a partition healed (RabbitMQ 3.10.8 on Erlang 25.1 and later,
    /// rabbitmq-server#6034).
    pub async fn restart(&self, i: usize) -> anyhow::Result<()> {
        let ns = self.nodes[i].namespace.clone();
        let left =
            tokio::task::spawn_blocking(move || kill_namespace(&ns, Duration::from_secs(10)))
                .await?;
        if !left.is_empty() {
            bail!(
                "processes {left:?} of {} outlived SIGKILL",
                self.nodes[i].namespace
            );
        }
        let child = lock(&self.nodes[i].process).take();
        if let Some(mut child) = child {
            // Killed above: this only reaps it.
            let _ = child.try_wait();
        }
        self.nodes[i].boot(&self.opts).await
    }

    /// Whether node `i`'s server process runs (paused or not).
    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].exit_status().is_none() && lock(&self.nodes[i].process).is_some()
    }

    /// Waits until node `i` stops listening for AMQP (it paused) while its process runs;
    /// returns when it was first seen closed.
    pub async fn await_paused(&self, i: usize, timeout: Duration) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            if !self.is_running(i) {
                bail!("node {} exited", self.nodes[i].name);
            }
            if !self.is_listening(i).await {
                return Ok(Instant::now());
            }
            if Instant::now() >= deadline {
                bail!(
                    "node {} still listens {timeout:?} later (not paused)",
                    self.nodes[i].name
                );
            }
            tokio::time::sleep(FAST_POLL).await;
        }
    }

    /// Waits until node `i` listens for AMQP again (it resumed); returns when it was first
    /// seen open.
    pub async fn await_listening(&self, i: usize, timeout: Duration) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.is_listening(i).await {
                return Ok(Instant::now());
            }
            if !self.is_running(i) {
                bail!("node {} exited", self.nodes[i].name);
            }
            if Instant::now() >= deadline {
                bail!(
                    "node {} does not listen {timeout:?} later",
                    self.nodes[i].name
                );
            }
            tokio::time::sleep(FAST_POLL).await;
        }
    }

    /// The running nodes (indexes) and the partitions node `i` reports (`cluster_status`).
    pub async fn cluster_view(&self, i: usize) -> anyhow::Result<(Vec<usize>, Value)> {
        let status = self.cluster_status(i).await?;
        let mut running: Vec<usize> = harness::running_nodes(&status)
            .filter_map(|n| self.index_of(n))
            .collect();
        running.sort_unstable();
        let partitions = status.get("partitions").cloned().unwrap_or(Value::Null);
        Ok((running, partitions))
    }

    /// Whether the cluster is whole: every node listens, sees all three running and reports
    /// no partition. `Err` says why not.
    pub async fn is_whole(&self) -> anyhow::Result<()> {
        for i in 0..CLUSTER_SIZE {
            if !self.is_listening(i).await {
                bail!("node {i} does not listen");
            }
        }
        for i in 0..CLUSTER_SIZE {
            let (running, partitions) = self.cluster_view(i).await?;
            let no_partition = match &partitions {
                Value::Object(m) => m.is_empty(),
                Value::Array(a) => a.is_empty(),
                Value::Null => true,
                _ => false,
            };
            if running.len() != CLUSTER_SIZE || !no_partition {
                bail!("node {i} sees running {running:?}, partitions {partitions}");
            }
        }
        Ok(())
    }

    /// Waits until [`NetnsCluster::is_whole`] holds.
    pub async fn await_whole(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.is_whole().await {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= deadline => {
                    return Err(e.context(format!("the cluster was not whole within {timeout:?}")))
                }
                Err(_) => {}
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Imports RabbitMQ definitions (JSON) through node 0, as
    /// [`crate::PrivateNode::import_definitions`] does.
    pub async fn import_definitions(&self, definitions: &str) -> anyhow::Result<()> {
        server::import_definitions(&self.layout.dir(), definitions, |path| async move {
            self.rabbitmqctl_any(&["import_definitions", &path]).await
        })
        .await
    }

    /// Kills every process in every namespace and removes the network and the directory;
    /// returns what could not be removed.
    fn remove_all(&self) -> Vec<String> {
        let problems = network::remove_slot(&self.layout);
        for node in &self.nodes {
            if let Some(mut child) = lock(&node.process).take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        problems
    }
}

impl Drop for NetnsCluster {
    fn drop(&mut self) {
        let problems = self.remove_all();
        if problems.is_empty() {
            if let Some(w) = lock(&self.watchdog).take() {
                w.disarm();
            }
        } else {
            // Leave the watchdog armed: it retries when this process exits.
            eprintln!(
                "mesh-testkit: netns slot {} not fully removed: {problems:?}",
                self.layout.slot
            );
        }
    }
}

/// The server address of a connection named `client-ip:port -> server-ip:port`.
fn server_ip(name: &str) -> Option<Ipv4Addr> {
    let (_, server) = name.split_once("->")?;
    server.trim().rsplit_once(':')?.0.parse().ok()
}

impl NetnsCluster {
    /// The cluster's directory (`$TMPDIR/mshp<slot>`: each node's config, data and logs).
    pub fn dir(&self) -> PathBuf {
        self.layout.dir()
    }

    /// The slot's base name, `mshp<slot>`, which every namespace and link name starts with.
    pub fn base_name(&self) -> String {
        self.layout.base()
    }
}

impl ClusterHarness for NetnsCluster {
    fn node_name(&self, i: usize) -> &str {
        &self.nodes[i].name
    }

    /// Node indexes, those not cut off first.
    fn ask_order(&self) -> Vec<usize> {
        let cut = *lock(&self.cut);
        let mut order: Vec<usize> = (0..CLUSTER_SIZE).filter(|&i| !cut[i]).collect();
        order.extend((0..CLUSTER_SIZE).filter(|&i| cut[i]));
        order
    }

    async fn ctl(&self, i: usize, args: &[&str]) -> anyhow::Result<String> {
        self.rabbitmqctl(i, args).await
    }

    async fn queues_ctl(&self, i: usize, args: &[&str]) -> anyhow::Result<String> {
        self.nodes[i]
            .ctl("rabbitmq-queues", args, CTL_TIMEOUT, &self.opts)
            .await
    }

    /// Every node: in sync means whole again.
    fn in_sync_nodes(&self) -> Vec<usize> {
        (0..CLUSTER_SIZE).collect()
    }

    /// Every client connection the answering node knows of, with the node it is on (found by
    /// the server address in its name).
    async fn connections(&self) -> anyhow::Result<Vec<ClusterConnection>> {
        let rows = self
            .list_json(&["list_connections", "name", "vhost", "client_properties"])
            .await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let name = str_field(r, "name");
                let node = server_ip(&name).and_then(|ip| self.index_of_client_ip(ip))?;
                let props = r.get("client_properties").cloned().unwrap_or(Value::Null);
                Some(ClusterConnection {
                    connection_name: client_property(&props, "connection_name"),
                    name,
                    vhost: str_field(r, "vhost"),
                    node,
                })
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_server_address_of_a_connection_name() {
        assert_eq!(
            server_ip("10.200.0.1:51234 -> 10.200.0.11:5672"),
            Some(Ipv4Addr::new(10, 200, 0, 11))
        );
        assert_eq!(server_ip("nonsense"), None);
        assert_eq!(server_ip("a -> b"), None);
    }
}
