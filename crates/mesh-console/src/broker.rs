//! What the console reads of the broker through its management API: the mesh consumer
//! queues with their depth, consumers and retry backlog, and their bindings on
//! `mesh.events`.

use std::collections::BTreeMap;

use mesh_admin::management::{ManagementClient, ManagementError};
use mesh_core::naming::{self, AUDIT_MODULE, EVENTS_EXCHANGE};
use mesh_core::TopicPattern;

/// The management API of one vhost.
#[derive(Clone)]
pub(crate) struct Broker {
    pub(crate) client: ManagementClient,
    pub(crate) vhost: String,
}

/// A mesh consumer queue (`<node>.<module>.events`, `shared.<module>.events`) as the broker
/// reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModuleQueue {
    pub(crate) name: String,
    pub(crate) node: String,
    pub(crate) module: String,
    /// Ready and unacknowledged.
    pub(crate) messages: u64,
    pub(crate) unacked: u64,
    pub(crate) consumers: u64,
    /// Messages waiting in its retry queues (`<queue>.retry.<step>`).
    pub(crate) retrying: u64,
}

impl ModuleQueue {
    /// Whether it is an audit logger's queue (bound to `#`).
    pub(crate) fn is_audit_logger(&self) -> bool {
        self.module == AUDIT_MODULE
    }

    /// Whether it is a module's schedule queue (`scheduled.<module>.events`), whose hops
    /// are its retry queues.
    pub(crate) fn is_schedule_queue(&self) -> bool {
        self.node == naming::SCHEDULE_NODE
    }
}

/// A consumer queue's binding on `mesh.events`.
#[derive(Debug, Clone)]
pub(crate) struct Binding {
    pub(crate) queue: String,
    pub(crate) pattern: TopicPattern,
}

impl Broker {
    /// The consumer queues, by name.
    pub(crate) async fn module_queues(&self) -> Result<Vec<ModuleQueue>, ManagementError> {
        let rows = self.client.queues(&self.vhost).await?;
        let mut retrying: BTreeMap<String, u64> = BTreeMap::new();
        let mut queues = Vec::new();
        for row in rows {
            if let Some((queue, _step)) = row.name.rsplit_once(".retry.") {
                if naming::is_consumer_queue(queue) {
                    *retrying.entry(queue.to_owned()).or_default() += row.messages.unwrap_or(0);
                }
                continue;
            }
            if !naming::is_consumer_queue(&row.name) {
                continue;
            }
            let mut words = row.name.split('.');
            let (Some(node), Some(module)) = (words.next(), words.next()) else {
                continue;
            };
            queues.push(ModuleQueue {
                node: node.to_owned(),
                module: module.to_owned(),
                messages: row.messages.unwrap_or(0),
                unacked: row.messages_unacknowledged.unwrap_or(0),
                consumers: row.consumers.unwrap_or(0),
                retrying: 0,
                name: row.name,
            });
        }
        for queue in &mut queues {
            queue.retrying = retrying.get(&queue.name).copied().unwrap_or(0);
        }
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(queues)
    }

    /// The bindings of consumer queues on `mesh.events` whose pattern parses (a foreign
    /// binding that does not is left out), by queue.
    pub(crate) async fn bindings(&self) -> Result<Vec<Binding>, ManagementError> {
        let rows = self.client.bindings(&self.vhost).await?;
        let mut bindings: Vec<Binding> = rows
            .into_iter()
            .filter(|row| {
                row.source == EVENTS_EXCHANGE
                    && row.destination_type == "queue"
                    && naming::is_consumer_queue(&row.destination)
            })
            .filter_map(|row| {
                let pattern = TopicPattern::parse(&row.routing_key).ok()?;
                Some(Binding {
                    queue: row.destination,
                    pattern,
                })
            })
            .collect();
        bindings.sort_by(|a, b| {
            (a.queue.as_str(), a.pattern.as_str()).cmp(&(b.queue.as_str(), b.pattern.as_str()))
        });
        Ok(bindings)
    }
}
