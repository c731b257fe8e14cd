//! On RabbitMQ the demo leaves nothing behind: it removes the durable queues its modules
//! declare, through the broker's management API, before it starts (what an interrupted run
//! left) and when it ends, whether its steps succeeded or not.
//!
//! Its queues are those of its node ([`NODE`](crate::modules::NODE)): each module's
//! `demo.<module>.events` and their retry queues `demo.<module>.events.retry.<step>`, and the
//! serve queue of its tool, `serve.billing.quote`. Left behind, the consumer queues would
//! stay bound to `module.umami.site.created` and collect every such event emitted afterwards.
//! Its dead-letter tap and reply queues are server-named and go with their connections.

use mesh::amqp::management::{ManagementClient, ManagementError, ManagementErrorKind};
use mesh::amqp::AmqpOptions;

use crate::modules::{NODE, QUOTE};

/// The management API of the demo's vhost.
pub(crate) struct Cleanup {
    client: ManagementClient,
    vhost: String,
}

impl Cleanup {
    /// The management API of the broker `options` names: their management URL, else
    /// `http://<first host>:15672`, with the same credentials.
    pub(crate) fn new(options: &AmqpOptions) -> anyhow::Result<Cleanup> {
        let management = mesh::amqp::management_options(options)
            .ok_or_else(|| anyhow::anyhow!("the broker URL names no host"))?;
        Ok(Cleanup {
            client: ManagementClient::new(&management)?,
            vhost: options.get_vhost().to_owned(),
        })
    }

    /// Whether `name` is one of the demo's durable queues.
    pub(crate) fn is_demo_queue(name: &str) -> bool {
        name.strip_prefix(NODE)
            .is_some_and(|rest| rest.starts_with('.'))
            || name == format!("serve.{QUOTE}")
    }

    /// The demo's queues that something consumes now: before the demo starts, something else
    /// running (the service example serves `billing.quote` too), whose queues the clean-up
    /// keeps. As the management API counts consumers, which lags by its statistics interval.
    pub(crate) async fn in_use(&self) -> Result<Vec<String>, ManagementError> {
        Ok(self
            .client
            .queues(&self.vhost)
            .await?
            .into_iter()
            .filter(|queue| Self::is_demo_queue(&queue.name) && queue.consumers.unwrap_or(0) > 0)
            .map(|queue| queue.name)
            .collect())
    }

    /// Deletes every queue of the demo in the vhost but those in `keep` and their retry
    /// queues; returns the names of those deleted.
    pub(crate) async fn remove(&self, keep: &[String]) -> Result<Vec<String>, ManagementError> {
        let kept = |name: &str| {
            keep.iter().any(|owner| {
                name == owner
                    || name
                        .strip_prefix(owner.as_str())
                        .is_some_and(|rest| rest.starts_with('.'))
            })
        };
        let mut removed = Vec::new();
        for queue in self.client.queues(&self.vhost).await? {
            if !Self::is_demo_queue(&queue.name) || kept(&queue.name) {
                continue;
            }
            match self.client.delete_queue(&self.vhost, &queue.name).await {
                Ok(()) => removed.push(queue.name),
                // Gone meanwhile: nothing left to remove.
                Err(e) if matches!(e.kind(), ManagementErrorKind::NotFound) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(removed)
    }

    /// What to tell the user when removing failed: the queues stay, and how to remove them.
    pub(crate) fn hint(&self, error: ManagementError) -> String {
        format!(
            "could not remove the demo's queues through the management API at {} ({:#}): they \
             stay bound to module.umami.site.created. Enable rabbitmq_management (or set \
             MESH_MANAGEMENT_URL) and run the demo again, or remove them with \
             `mesh topology remove --node {NODE} --module billing --force` (and --module mailer)",
            self.client.url(),
            anyhow::Error::from(error)
        )
    }
}
