//! A three-node RabbitMQ cluster of the test's own, for failover tests.
//!
//! This module owns [`Cluster`] (three [`PrivateNode`]s joined into one cluster), what tests
//! ask of it (which node leads a quorum queue and how far each member's log is, which node a
//! client connection is on, whether a restarted node rejoined and the quorum queues are in sync
//! again, whether the queues drained), and the per-binary registry [`shared_cluster`].
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
//! [`Cluster::await_queues_in_sync`] wait for that.
//!
//! Killing or stopping nodes of a shared cluster affects every test using it: tests that do
//! so must take turns (a static lock in the test binary) and call [`Cluster::heal`] first, in
//! case a failed test left a node down.
//!
//! Every node's watchdog removes it when the test process ends in any way, so a shared
//! cluster (a static, never dropped) is not leaked either.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde_json::Value;

use crate::node::{NodeOptions, PrivateNode};
use crate::shared::{self, list_json, percent_encode, str_field, u64_field};
use crate::sys::Install;

/// How many nodes a cluster has: the smallest that keeps a quorum with one node down.
pub const CLUSTER_SIZE: usize = 3;
/// Polling interval of the waits in this module (each poll runs `rabbitmqctl`, ~1 s anyway).
const POLL: Duration = Duration::from_millis(250);
/// How often a quorum queue refreshes the counts `list_queues` shows (its tick), plus a margin.
pub const COUNT_REFRESH: Duration = Duration::from_secs(6);
/// How long one `rabbitmq-queues` run may take.
const QUEUES_TOOL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one node's boot may take when three boot at once on two cores.
const CLUSTER_BOOT_TIMEOUT: Duration = Duration::from_secs(120);

/// Three private RabbitMQ nodes joined into one cluster.
///
/// ```no_run
/// # async fn demo() -> anyhow::Result<()> {
/// use std::time::Duration;
/// use mesh_testkit::cluster::{shared_cluster, Cluster};
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

/// A quorum queue as the cluster sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumQueueInfo {
    /// Queue name.
    pub name: String,
    /// The index (in [`Cluster::nodes`]) of the node leading it, if it has a leader now.
    pub leader: Option<usize>,
    /// Indexes of the nodes holding a member.
    pub members: Vec<usize>,
    /// Indexes of the nodes whose member is running.
    pub online: Vec<usize>,
    /// Messages ready plus unacknowledged (0 when the broker could not tell).
    pub messages: u64,
}

impl QuorumQueueInfo {
    /// A leader, and every member online.
    pub fn is_whole(&self) -> bool {
        self.leader.is_some()
            && !self.members.is_empty()
            && self.members.iter().all(|m| self.online.contains(m))
    }
}

/// A client connection and the node it is on.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterConnection {
    /// The client-provided `connection_name`, if any.
    pub connection_name: Option<String>,
    /// The broker's name for it, `client-ip:port -> server-ip:port`.
    pub name: String,
    /// The vhost it is open on.
    pub vhost: String,
    /// The index of the node it is on (found by the server port in its name).
    pub node: usize,
}

/// One member of a quorum queue as `rabbitmq-queues quorum_status` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    /// The index of the node it runs on.
    pub node: usize,
    /// `leader`, `follower`, `candidate`, …
    pub raft_state: String,
    /// The highest index in its log.
    pub log_index: u64,
    /// The highest index it knows committed.
    pub commit_index: u64,
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
        let seed = cluster.nodes[0].name().to_owned();
        for node in &cluster.nodes[1..] {
            node.rabbitmqctl(&["stop_app"]).await?;
            node.rabbitmqctl(&["join_cluster", &seed])
                .await
                .with_context(|| format!("joining {} to {seed}", node.name()))?;
            node.rabbitmqctl(&["start_app"]).await?;
            node.rabbitmqctl(&["await_startup"]).await?;
        }
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

    /// The index of the node named `name` (`mesh-test-…@localhost`).
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name() == name)
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
        let hosts: Vec<String> = order
            .iter()
            .map(|&i| format!("127.0.0.1:{}", self.nodes[i].port()))
            .collect();
        format!(
            "amqp://guest:guest@{}/{}",
            hosts.join(","),
            percent_encode(vhost)
        )
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
        let mut last = None;
        for i in self.running() {
            match self.nodes[i].rabbitmqctl(args).await {
                Ok(out) => return Ok(out),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("no node of the cluster is running")))
    }

    async fn list_json(&self, args: &[&str]) -> anyhow::Result<Vec<Value>> {
        let mut last = None;
        for i in self.running() {
            match list_json(Some(self.nodes[i].name()), args).await {
                Ok(rows) => return Ok(rows),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("no node of the cluster is running")))
    }

    /// Creates vhost `name` (cluster-wide) and gives `guest` every permission on it.
    pub async fn add_vhost(&self, name: &str) -> anyhow::Result<()> {
        self.rabbitmqctl(&["add_vhost", name]).await?;
        self.rabbitmqctl(&["set_permissions", "-p", name, "guest", ".*", ".*", ".*"])
            .await?;
        Ok(())
    }

    /// The quorum queues of `vhost` with their leader, members and online members.
    pub async fn quorum_queues(&self, vhost: &str) -> anyhow::Result<Vec<QuorumQueueInfo>> {
        let rows = self
            .list_json(&[
                "list_queues",
                "-p",
                vhost,
                "name",
                "type",
                "leader",
                "members",
                "online",
                "messages",
            ])
            .await?;
        Ok(rows
            .iter()
            .filter(|r| str_field(r, "type") == "quorum")
            .map(|r| QuorumQueueInfo {
                name: str_field(r, "name"),
                leader: self.index_of(&str_field(r, "leader")),
                members: self.indexes(r.get("members")),
                online: self.indexes(r.get("online")),
                messages: u64_field(r, "messages"),
            })
            .collect())
    }

    fn indexes(&self, names: Option<&Value>) -> Vec<usize> {
        let mut found: Vec<usize> = match names {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .filter_map(|n| self.index_of(n))
                .collect(),
            Some(Value::String(one)) => self.index_of(one).into_iter().collect(),
            _ => Vec::new(),
        };
        found.sort_unstable();
        found.dedup();
        found
    }

    /// The members of quorum queue `queue` of `vhost` with their Raft state and log
    /// indexes (`rabbitmq-queues quorum_status`, asked of the first running node that answers).
    pub async fn quorum_status(
        &self,
        vhost: &str,
        queue: &str,
    ) -> anyhow::Result<Vec<MemberStatus>> {
        let args = ["quorum_status", "-p", vhost, queue, "--formatter", "json"];
        let mut last = None;
        for i in self.running() {
            let out = match queues_tool(self.nodes[i].name(), &args).await {
                Ok(out) => out,
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            };
            let start = out
                .find('[')
                .ok_or_else(|| anyhow!("no JSON array in quorum_status output: {out}"))?;
            let rows: Vec<Value> = serde_json::from_str(&out[start..])
                .with_context(|| format!("parsing quorum_status output: {out}"))?;
            return Ok(rows
                .iter()
                .filter_map(|r| {
                    Some(MemberStatus {
                        node: self.index_of(&str_field(r, "Node Name"))?,
                        raft_state: str_field(r, "Raft State"),
                        log_index: u64_field(r, "Log Index"),
                        commit_index: u64_field(r, "Commit Index"),
                    })
                })
                .collect());
        }
        Err(last.unwrap_or_else(|| anyhow!("no node of the cluster is running")))
    }

    /// The index of the node leading quorum queue `queue` of `vhost`; fails if it has none
    /// right now (an election is under way) or is not a quorum queue.
    pub async fn leader_of(&self, vhost: &str, queue: &str) -> anyhow::Result<usize> {
        let queues = self.quorum_queues(vhost).await?;
        let q = queues
            .iter()
            .find(|q| q.name == queue)
            .ok_or_else(|| anyhow!("no quorum queue {queue:?} in vhost {vhost:?}"))?;
        q.leader
            .ok_or_else(|| anyhow!("quorum queue {queue:?} has no leader now"))
    }

    /// Every client connection of the cluster (of every vhost) with the node it is on.
    pub async fn connections(&self) -> anyhow::Result<Vec<ClusterConnection>> {
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

    /// The node that the connection whose client-provided name is exactly `connection_name`
    /// is on, if it is open (e.g. `"source.publish"` for a mesh transport named `source`).
    pub async fn node_of_connection(&self, connection_name: &str) -> anyhow::Result<Option<usize>> {
        Ok(self
            .connections()
            .await?
            .into_iter()
            .find(|c| c.connection_name.as_deref() == Some(connection_name))
            .map(|c| c.node))
    }

    /// The names of the running nodes of the cluster as node `i` sees them.
    pub async fn running_nodes_seen_by(&self, i: usize) -> anyhow::Result<Vec<String>> {
        let out = self.nodes[i]
            .rabbitmqctl(&["cluster_status", "--formatter", "json"])
            .await?;
        let start = out
            .find('{')
            .ok_or_else(|| anyhow!("no JSON object in cluster_status output: {out}"))?;
        let status: Value = serde_json::from_str(&out[start..])
            .with_context(|| format!("parsing cluster_status output: {out}"))?;
        let mut running: Vec<String> = status
            .get("running_nodes")
            .and_then(Value::as_array)
            .map(|nodes| {
                nodes
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
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

    /// Waits until every quorum queue of `vhost` is in sync: it has a leader, a member online
    /// on every running node, and every member has the leader's commit index and log index
    /// (so a restarted member has caught up). Returns the queues as last seen.
    ///
    /// Call it while the load pauses: under a steady stream of publishes and acks the members'
    /// indexes are rarely equal at the instant they are asked.
    pub async fn await_queues_in_sync(
        &self,
        vhost: &str,
        timeout: Duration,
    ) -> anyhow::Result<Vec<QuorumQueueInfo>> {
        let deadline = Instant::now() + timeout;
        let running = self.running();
        loop {
            let last = self.queues_in_sync(vhost, &running).await;
            match &last {
                Ok((queues, None)) => return Ok(queues.clone()),
                Ok(_) | Err(_) if Instant::now() >= deadline => {
                    let why = match last {
                        Ok((_, why)) => why.unwrap_or_default(),
                        Err(e) => format!("{e:#}"),
                    };
                    bail!("the quorum queues of vhost {vhost:?} were not in sync within {timeout:?}: {why}");
                }
                _ => {}
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The queues, and why they are not in sync (`None`: they are).
    async fn queues_in_sync(
        &self,
        vhost: &str,
        running: &[usize],
    ) -> anyhow::Result<(Vec<QuorumQueueInfo>, Option<String>)> {
        let queues = self.quorum_queues(vhost).await?;
        for q in &queues {
            if !q.is_whole() || !running.iter().all(|r| q.online.contains(r)) {
                return Ok((queues.clone(), Some(format!("{q:?}"))));
            }
        }
        for q in &queues {
            let members = self.quorum_status(vhost, &q.name).await?;
            let leader = members.iter().find(|m| m.raft_state == "leader");
            let caught_up = leader.is_some_and(|l| {
                members.len() == q.members.len()
                    && members
                        .iter()
                        .all(|m| m.commit_index == l.commit_index && m.log_index == l.log_index)
            });
            if !caught_up {
                return Ok((queues.clone(), Some(format!("{}: {members:?}", q.name))));
            }
        }
        Ok((queues, None))
    }

    /// Waits until the queues of `vhost` (all types) hold no message; returns how long it
    /// took.
    ///
    /// A quorum queue's count is refreshed on its tick (every 5 s), so a count of 0 may be
    /// stale: the queues count as drained once every poll for [`COUNT_REFRESH`] said 0.
    pub async fn await_drained(&self, vhost: &str, timeout: Duration) -> anyhow::Result<Duration> {
        let began = Instant::now();
        let deadline = began + timeout;
        let mut empty_since: Option<Instant> = None;
        loop {
            let rows = self
                .list_json(&["list_queues", "-p", vhost, "name", "messages"])
                .await;
            let empty = rows
                .as_ref()
                .is_ok_and(|rows| rows.iter().all(|r| u64_field(r, "messages") == 0));
            if empty {
                let since = *empty_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= COUNT_REFRESH {
                    return Ok(since - began);
                }
            } else {
                empty_since = None;
            }
            if Instant::now() >= deadline {
                let left: Vec<(String, u64)> = rows
                    .map(|rows| {
                        rows.iter()
                            .map(|r| (str_field(r, "name"), u64_field(r, "messages")))
                            .filter(|(_, m)| *m > 0)
                            .collect()
                    })
                    .unwrap_or_default();
                bail!(
                    "the queues of vhost {vhost:?} still hold messages after {timeout:?}: {left:?}"
                );
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

/// Runs `rabbitmq-queues -n NODE ARGS...` (quorum queue commands) and returns its stdout.
async fn queues_tool(node: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut cmd = tokio::process::Command::from(Install::get().command("rabbitmq-queues"));
    cmd.arg("-n")
        .arg(node)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let output = tokio::time::timeout(QUEUES_TOOL_TIMEOUT, cmd.output())
        .await
        .map_err(|_| anyhow!("`rabbitmq-queues -n {node} {}` timed out", args.join(" ")))?
        .context("spawning rabbitmq-queues")?;
    if !output.status.success() {
        bail!(
            "`rabbitmq-queues -n {node} {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The server port of a connection named `client-ip:port -> server-ip:port`.
fn server_port(name: &str) -> Option<u16> {
    let (_, server) = name.split_once("->")?;
    server.trim().rsplit_once(':')?.1.parse().ok()
}

type SharedCell = Arc<tokio::sync::OnceCell<Arc<Cluster>>>;

/// One cluster per `key` for the whole test binary, formed by the first caller (~25 s);
/// the nodes are removed when the test process exits (their watchdogs do it).
///
/// All callers of one key must pass equal options, else this fails.
pub async fn shared_cluster(key: &str, opts: NodeOptions) -> anyhow::Result<Arc<Cluster>> {
    static CLUSTERS: OnceLock<Mutex<HashMap<String, (NodeOptions, SharedCell)>>> = OnceLock::new();
    let cell = {
        let mut clusters = CLUSTERS
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let (first_opts, cell) = clusters
            .entry(key.to_owned())
            .or_insert_with(|| (opts.clone(), Arc::default()));
        if *first_opts != opts {
            bail!("shared_cluster({key:?}) called with options {opts:?}, but it was first created with {first_opts:?}");
        }
        cell.clone()
    };
    cell.get_or_try_init(|| async { Cluster::start(opts).await.map(Arc::new) })
        .await
        .cloned()
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

    #[test]
    fn a_queue_is_whole_with_a_leader_and_every_member_online() {
        let q = QuorumQueueInfo {
            name: "q".into(),
            leader: Some(0),
            members: vec![0, 1, 2],
            online: vec![0, 1, 2],
            messages: 0,
        };
        assert!(q.is_whole());
        assert!(!QuorumQueueInfo {
            online: vec![0, 2],
            ..q.clone()
        }
        .is_whole());
        assert!(!QuorumQueueInfo { leader: None, ..q }.is_whole());
    }
}
