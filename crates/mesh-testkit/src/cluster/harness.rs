//! What every three-node cluster harness shares, whichever way its nodes run: the
//! [`ClusterHarness`] trait (how a harness reaches its nodes, and everything a test asks of a
//! cluster built on that), the types of its answers, and the forming of the cluster.
//!
//! A harness implements the few required methods (a node's name, the order in which to ask
//! nodes, `rabbitmqctl` and `rabbitmq-queues` on one node, the nodes a queue must have online,
//! the connections); the inspection of queues and the waits on them are written once, here.

use std::future::Future;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use serde_json::Value;

use crate::shared::{parse_rows, percent_encode, str_field, u64_field};

/// How many nodes a cluster has: the smallest that keeps a quorum with one node down.
pub const CLUSTER_SIZE: usize = 3;
/// How often a quorum queue refreshes the counts `list_queues` shows (its tick), plus a margin.
pub const COUNT_REFRESH: Duration = Duration::from_secs(6);
/// Polling interval of the waits that run `rabbitmqctl` (~1 s each anyway).
const POLL: Duration = Duration::from_millis(250);

/// A quorum queue as the cluster sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumQueueInfo {
    /// Queue name.
    pub name: String,
    /// The index of the node leading it, if it has a leader now.
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
    /// The index of the node it is on (found by the server address in its name).
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

/// A three-node RabbitMQ cluster of the test's own, whichever way its nodes run: private
/// nodes on loopback ([`Cluster`](crate::Cluster)) or nodes in network namespaces
/// ([`NetnsCluster`](crate::netns::NetnsCluster)). Nodes are named by their index, 0 to 2.
///
/// The required methods say how the harness reaches its nodes; the provided ones are what
/// tests ask of the cluster (queues, leaders, members, connections, and waits on them).
/// Bring the trait into scope to call them (`use mesh_testkit::ClusterHarness`).
pub trait ClusterHarness: Sync {
    /// Node `i`'s Erlang name.
    fn node_name(&self, i: usize) -> &str;

    /// The nodes to ask a cluster-wide question, in the order to ask them (the first that
    /// answers is believed).
    fn ask_order(&self) -> Vec<usize>;

    /// Runs `rabbitmqctl ARGS...` against node `i` and returns its stdout.
    fn ctl(&self, i: usize, args: &[&str]) -> impl Future<Output = anyhow::Result<String>> + Send;

    /// Runs `rabbitmq-queues ARGS...` (quorum queue commands) against node `i` and returns
    /// its stdout.
    fn queues_ctl(
        &self,
        i: usize,
        args: &[&str],
    ) -> impl Future<Output = anyhow::Result<String>> + Send;

    /// The nodes on which every quorum queue must have a member online to count as in sync
    /// (see [`ClusterHarness::await_queues_in_sync`]).
    fn in_sync_nodes(&self) -> Vec<usize>;

    /// Every client connection of the cluster (of every vhost) with the node it is on.
    fn connections(&self) -> impl Future<Output = anyhow::Result<Vec<ClusterConnection>>> + Send;

    /// The index of the node named `name`.
    fn index_of(&self, name: &str) -> Option<usize> {
        (0..CLUSTER_SIZE).find(|&i| self.node_name(i) == name)
    }

    /// Runs `rabbitmqctl ARGS...` against the first node that answers, in
    /// [`ClusterHarness::ask_order`] (cluster-wide commands: vhosts, permissions, listings).
    fn rabbitmqctl_any(
        &self,
        args: &[&str],
    ) -> impl Future<Output = anyhow::Result<String>> + Send {
        async move {
            let mut last = None;
            for i in self.ask_order() {
                match self.ctl(i, args).await {
                    Ok(out) => return Ok(out),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| anyhow!("no node of the cluster answered")))
        }
    }

    /// The rows of a `rabbitmqctl list_*` command (`--formatter json`), from the first node
    /// that answers.
    fn list_json(&self, args: &[&str]) -> impl Future<Output = anyhow::Result<Vec<Value>>> + Send {
        async move {
            let mut full: Vec<&str> = args.to_vec();
            full.extend(["--formatter", "json", "--quiet"]);
            let mut last = None;
            for i in self.ask_order() {
                match self.ctl(i, &full).await.and_then(|out| parse_rows(&out)) {
                    Ok(rows) => return Ok(rows),
                    Err(e) => last = Some(e),
                }
            }
            Err(last.unwrap_or_else(|| anyhow!("no node of the cluster answered")))
        }
    }

    /// Creates vhost `name` (cluster-wide) and gives `guest` every permission on it.
    fn add_vhost(&self, name: &str) -> impl Future<Output = anyhow::Result<()>> + Send {
        async move {
            self.rabbitmqctl_any(&["add_vhost", name]).await?;
            self.rabbitmqctl_any(&["set_permissions", "-p", name, "guest", ".*", ".*", ".*"])
                .await?;
            Ok(())
        }
    }

    /// Node `i`'s `cluster_status`, as JSON.
    fn cluster_status(&self, i: usize) -> impl Future<Output = anyhow::Result<Value>> + Send {
        async move {
            let out = self
                .ctl(i, &["cluster_status", "--formatter", "json"])
                .await?;
            let start = out
                .find('{')
                .ok_or_else(|| anyhow!("no JSON object in cluster_status output: {out}"))?;
            serde_json::from_str(&out[start..])
                .with_context(|| format!("parsing cluster_status output: {out}"))
        }
    }

    /// The quorum queues of `vhost` with their leader, members and online members.
    fn quorum_queues(
        &self,
        vhost: &str,
    ) -> impl Future<Output = anyhow::Result<Vec<QuorumQueueInfo>>> + Send {
        async move {
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
                    members: indexes(self, r.get("members")),
                    online: indexes(self, r.get("online")),
                    messages: u64_field(r, "messages"),
                })
                .collect())
        }
    }

    /// The members of quorum queue `queue` of `vhost` with their Raft state and log indexes
    /// (`rabbitmq-queues quorum_status`, asked of the first node that answers).
    fn quorum_status(
        &self,
        vhost: &str,
        queue: &str,
    ) -> impl Future<Output = anyhow::Result<Vec<MemberStatus>>> + Send {
        async move {
            let args = ["quorum_status", "-p", vhost, queue, "--formatter", "json"];
            let mut last = None;
            for i in self.ask_order() {
                let out = match self.queues_ctl(i, &args).await {
                    Ok(out) => out,
                    Err(e) => {
                        last = Some(e);
                        continue;
                    }
                };
                let rows = parse_rows(&out)
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
            Err(last.unwrap_or_else(|| anyhow!("no node of the cluster answered")))
        }
    }

    /// The index of the node leading quorum queue `queue` of `vhost`; fails if it has none
    /// right now (an election is under way) or is not a quorum queue.
    fn leader_of(
        &self,
        vhost: &str,
        queue: &str,
    ) -> impl Future<Output = anyhow::Result<usize>> + Send {
        async move {
            let queues = self.quorum_queues(vhost).await?;
            let q = queues
                .iter()
                .find(|q| q.name == queue)
                .ok_or_else(|| anyhow!("no quorum queue {queue:?} in vhost {vhost:?}"))?;
            q.leader
                .ok_or_else(|| anyhow!("quorum queue {queue:?} has no leader now"))
        }
    }

    /// `messages_unacknowledged` of queue `queue` of `vhost` (deliveries a consumer holds).
    fn unacked(
        &self,
        vhost: &str,
        queue: &str,
    ) -> impl Future<Output = anyhow::Result<u64>> + Send {
        async move {
            let rows = self
                .list_json(&[
                    "list_queues",
                    "-p",
                    vhost,
                    "name",
                    "messages_unacknowledged",
                ])
                .await?;
            rows.iter()
                .find(|r| str_field(r, "name") == queue)
                .map(|r| u64_field(r, "messages_unacknowledged"))
                .ok_or_else(|| anyhow!("no queue {queue:?} in vhost {vhost:?}"))
        }
    }

    /// Waits until every quorum queue of `vhost` is in sync: it has a leader, a member online
    /// on every node of [`ClusterHarness::in_sync_nodes`] (asked once, at the start), and
    /// every member has the leader's commit index and log index (so a restarted member has
    /// caught up). Returns the queues as last seen.
    ///
    /// Call it while the load pauses: under a steady stream of publishes and acks the members'
    /// indexes are rarely equal at the instant they are asked.
    fn await_queues_in_sync(
        &self,
        vhost: &str,
        timeout: Duration,
    ) -> impl Future<Output = anyhow::Result<Vec<QuorumQueueInfo>>> + Send {
        async move {
            let deadline = Instant::now() + timeout;
            let nodes = self.in_sync_nodes();
            loop {
                let why = match queues_in_sync(self, vhost, &nodes).await {
                    Ok((queues, None)) => return Ok(queues),
                    Ok((_, Some(why))) => why,
                    Err(e) => format!("{e:#}"),
                };
                if Instant::now() >= deadline {
                    bail!("the quorum queues of vhost {vhost:?} were not in sync within {timeout:?}: {why}");
                }
                tokio::time::sleep(POLL).await;
            }
        }
    }

    /// Waits until the queues of `vhost` (all types) hold no message; returns how long it
    /// took.
    ///
    /// A quorum queue's count is refreshed on its tick (every 5 s), so a count of 0 may be
    /// stale: the queues count as drained once every poll for [`COUNT_REFRESH`] said 0.
    fn await_drained(
        &self,
        vhost: &str,
        timeout: Duration,
    ) -> impl Future<Output = anyhow::Result<Duration>> + Send {
        async move {
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
    }

    /// The node that the connection whose client-provided name is exactly `connection_name`
    /// is on, if it is open (e.g. `"source.publish"` for a mesh transport named `source`).
    fn node_of_connection(
        &self,
        connection_name: &str,
    ) -> impl Future<Output = anyhow::Result<Option<usize>>> + Send {
        async move {
            Ok(self
                .connections()
                .await?
                .into_iter()
                .find(|c| c.connection_name.as_deref() == Some(connection_name))
                .map(|c| c.node))
        }
    }
}

/// Joins the second and third node of `cluster` to the first: `stop_app`, `join_cluster
/// <first>`, `start_app`, `await_startup`, one node after the other.
pub(crate) async fn join_to_first(cluster: &impl ClusterHarness) -> anyhow::Result<()> {
    let seed = cluster.node_name(0).to_owned();
    for i in 1..CLUSTER_SIZE {
        cluster.ctl(i, &["stop_app"]).await?;
        cluster
            .ctl(i, &["join_cluster", &seed])
            .await
            .with_context(|| format!("joining {} to {seed}", cluster.node_name(i)))?;
        cluster.ctl(i, &["start_app"]).await?;
        cluster.ctl(i, &["await_startup"]).await?;
    }
    Ok(())
}

/// `amqp://guest:guest@<a0>,<a1>,.../<vhost>`: every address given, in the order given (a
/// client tries them in turn).
pub(crate) fn guest_url(addrs: &[SocketAddr], vhost: &str) -> String {
    let hosts: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
    format!(
        "amqp://guest:guest@{}/{}",
        hosts.join(","),
        percent_encode(vhost)
    )
}

/// The names of the running nodes in a `cluster_status`.
pub(crate) fn running_nodes(status: &Value) -> impl Iterator<Item = &str> {
    status
        .get("running_nodes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// The node indexes of a listing's node names (one name or an array of them), sorted.
fn indexes<C: ClusterHarness + ?Sized>(cluster: &C, names: Option<&Value>) -> Vec<usize> {
    let mut found: Vec<usize> = match names {
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .filter_map(|n| cluster.index_of(n))
            .collect(),
        Some(Value::String(one)) => cluster.index_of(one).into_iter().collect(),
        _ => Vec::new(),
    };
    found.sort_unstable();
    found.dedup();
    found
}

/// The quorum queues of `vhost`, and why they are not in sync (`None`: they are), given
/// the nodes every queue must have online.
async fn queues_in_sync<C: ClusterHarness + ?Sized>(
    cluster: &C,
    vhost: &str,
    nodes: &[usize],
) -> anyhow::Result<(Vec<QuorumQueueInfo>, Option<String>)> {
    let queues = cluster.quorum_queues(vhost).await?;
    for q in &queues {
        if !q.is_whole() || !nodes.iter().all(|r| q.online.contains(r)) {
            return Ok((queues.clone(), Some(format!("{q:?}"))));
        }
    }
    for q in &queues {
        let members = cluster.quorum_status(vhost, &q.name).await?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
