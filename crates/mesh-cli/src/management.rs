//! The management API for one vhost, as the commands use it: mesh-amqp's
//! [`ManagementClient`] with the vhost bound and its errors mapped to exit codes.
//!
//! An unreachable API (connection, TLS, timeout) is exit code 8; a URL, CA file or plain-HTTP
//! rule the client refuses is a usage error (2); a refusal by the API is an error (1) that
//! says what the API needs.

use anyhow::Context as _;
use mesh::amqp::management::{ManagementClient, ManagementError, ManagementErrorKind};
use serde_json::{Map, Value};

pub(crate) use mesh::amqp::management::{BindingRow, ExchangeRow, QueueRow};

use crate::exit::{Code, Coded};

/// A management API client for one vhost.
#[derive(Debug)]
pub(crate) struct Management {
    client: ManagementClient,
    vhost: String,
}

impl Management {
    pub(crate) fn new(client: ManagementClient, vhost: &str) -> Management {
        Management {
            client,
            vhost: vhost.to_owned(),
        }
    }

    /// The vhost it works in.
    pub(crate) fn vhost(&self) -> &str {
        &self.vhost
    }

    fn fail(&self, error: ManagementError, listing: bool) -> anyhow::Error {
        let (code, message) = match error.kind() {
            ManagementErrorKind::Unreachable => (
                Code::NoManagement,
                format!(
                    "the RabbitMQ management API at {} is unreachable (it lists bindings and \
                     arguments, which AMQP cannot; enable rabbitmq_management, or give \
                     --management-url and, for https, --management-ca-file)",
                    self.client.url()
                ),
            ),
            ManagementErrorKind::InvalidOptions | ManagementErrorKind::Insecure => {
                (Code::Usage, "invalid management API options".to_owned())
            }
            ManagementErrorKind::Unauthorized => (
                Code::Error,
                "the management API refused the credentials".to_owned(),
            ),
            ManagementErrorKind::Forbidden => (
                Code::Error,
                "the management API refused access (the user needs a management tag and \
                 permissions on the vhost)"
                    .to_owned(),
            ),
            ManagementErrorKind::NotFound if listing => (
                Code::Error,
                format!("vhost `{}` does not exist", self.vhost),
            ),
            _ => (Code::Error, "the management API request failed".to_owned()),
        };
        anyhow::Error::new(error).context(Coded {
            code,
            message,
            hint: None,
        })
    }

    /// The client itself, for `mesh access` (which works through mesh-amqp's `access`).
    pub(crate) fn client(&self) -> &ManagementClient {
        &self.client
    }

    /// A failed request of the client, with its exit code, as the other methods fail.
    pub(crate) fn error(&self, error: ManagementError) -> anyhow::Error {
        self.fail(error, true)
    }

    /// The broker's overview (versions, node name).
    pub(crate) async fn overview(&self) -> anyhow::Result<Value> {
        self.client
            .overview()
            .await
            .map_err(|e| self.fail(e, false))
    }

    /// Every exchange of the vhost.
    pub(crate) async fn exchanges(&self) -> anyhow::Result<Vec<ExchangeRow>> {
        self.client
            .exchanges(&self.vhost)
            .await
            .map_err(|e| self.fail(e, true))
    }

    /// Every queue of the vhost.
    pub(crate) async fn queues(&self) -> anyhow::Result<Vec<QueueRow>> {
        self.client
            .queues(&self.vhost)
            .await
            .map_err(|e| self.fail(e, true))
    }

    /// Every binding of the vhost.
    pub(crate) async fn bindings(&self) -> anyhow::Result<Vec<BindingRow>> {
        self.client
            .bindings(&self.vhost)
            .await
            .map_err(|e| self.fail(e, true))
    }

    /// Declares a durable topic-like exchange.
    pub(crate) async fn put_exchange(
        &self,
        name: &str,
        kind: &str,
        durable: bool,
    ) -> anyhow::Result<()> {
        self.client
            .put_exchange(&self.vhost, name, kind, durable)
            .await
            .map_err(|e| self.fail(e, false))
            .with_context(|| format!("declaring exchange `{name}`"))
    }

    /// Declares a queue.
    pub(crate) async fn put_queue(
        &self,
        name: &str,
        durable: bool,
        arguments: &Map<String, Value>,
    ) -> anyhow::Result<()> {
        self.client
            .put_queue(&self.vhost, name, durable, arguments)
            .await
            .map_err(|e| self.fail(e, false))
            .with_context(|| format!("declaring queue `{name}`"))
    }

    /// Deletes a queue with everything in it.
    pub(crate) async fn delete_queue(&self, name: &str) -> anyhow::Result<()> {
        self.client
            .delete_queue(&self.vhost, name)
            .await
            .map_err(|e| self.fail(e, false))
            .with_context(|| format!("deleting queue `{name}`"))
    }

    /// Deletes an exchange with its bindings.
    pub(crate) async fn delete_exchange(&self, name: &str) -> anyhow::Result<()> {
        self.client
            .delete_exchange(&self.vhost, name)
            .await
            .map_err(|e| self.fail(e, false))
            .with_context(|| format!("deleting exchange `{name}`"))
    }

    /// Binds `queue` to `exchange` on `routing_key`.
    pub(crate) async fn bind(
        &self,
        exchange: &str,
        queue: &str,
        routing_key: &str,
    ) -> anyhow::Result<()> {
        self.client
            .bind(&self.vhost, exchange, queue, routing_key)
            .await
            .map_err(|e| self.fail(e, false))
            .with_context(|| format!("binding `{queue}` to `{exchange}` on `{routing_key}`"))
    }

    /// Removes the binding the API names `properties_key`.
    pub(crate) async fn unbind(
        &self,
        exchange: &str,
        queue: &str,
        properties_key: &str,
    ) -> anyhow::Result<()> {
        self.client
            .unbind(&self.vhost, exchange, queue, properties_key)
            .await
            .map_err(|e| self.fail(e, false))
            .with_context(|| format!("unbinding `{queue}` from `{exchange}` ({properties_key})"))
    }
}
