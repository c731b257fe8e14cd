//! Three-node RabbitMQ clusters of the test's own, for failover and partition tests: one
//! harness, two ways to run its nodes.
//!
//! - [`harness`] (shared): the [`ClusterHarness`] trait, what every cluster answers whichever
//!   way its nodes run (quorum queues with their leader, members and log indexes; the node of
//!   a connection; waits for queues in sync and drained), the types of its answers, and the
//!   forming of a cluster (the second and third node join the first);
//! - [`loopback`]: [`Cluster`], three private nodes ([`crate::node`]) on loopback, for
//!   failover tests (kill and restart nodes, wait for a rejoin), shared per test binary with
//!   [`shared_cluster`].
//!
//! The cluster whose nodes each run in a network namespace of their own, for partitions, is
//! [`crate::netns`]: it implements the same harness, and keeps only what namespaces add
//! (the network, cutting and healing a node's links, pauses) in its own room.

pub mod harness;
pub mod loopback;

pub use self::harness::{
    ClusterConnection, ClusterHarness, MemberStatus, QuorumQueueInfo, CLUSTER_SIZE, COUNT_REFRESH,
};
pub use self::loopback::{shared_cluster, Cluster};
