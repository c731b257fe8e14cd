//! Limits and bindings of any shape: per-user limits (`/api/user-limits`, RabbitMQ 3.10 has
//! `max-connections` and `max-channels`), vhost-wide limits (`/api/vhost-limits`), and
//! bindings whatever they bind (a queue or an exchange).

use super::{LimitRow, ManagementClient, ManagementError, Method};

impl ManagementClient {
    /// The limits of every user that has one.
    pub async fn user_limits(&self) -> Result<Vec<LimitRow>, ManagementError> {
        self.get(&["user-limits"]).await
    }

    /// Sets the limit `name` (`max-connections`, `max-channels`) of `user` to `value`.
    pub async fn put_user_limit(
        &self,
        user: &str,
        name: &str,
        value: u64,
    ) -> Result<(), ManagementError> {
        let body = serde_json::json!({ "value": value });
        self.call_with(
            Method::Put,
            &["user-limits", user, name],
            Some(&body),
            false,
        )
        .await?;
        Ok(())
    }

    /// Removes the limit `name` of `user`.
    pub async fn delete_user_limit(&self, user: &str, name: &str) -> Result<(), ManagementError> {
        self.call_with(Method::Delete, &["user-limits", user, name], None, false)
            .await?;
        Ok(())
    }

    /// The limits of `vhost` (none listed when it has none).
    pub async fn vhost_limits(&self, vhost: &str) -> Result<Vec<LimitRow>, ManagementError> {
        self.get(&["vhost-limits", vhost]).await
    }

    /// Sets the limit `name` (`max-queues`, `max-connections`) of `vhost` to `value`.
    pub async fn put_vhost_limit(
        &self,
        vhost: &str,
        name: &str,
        value: u64,
    ) -> Result<(), ManagementError> {
        let body = serde_json::json!({ "value": value });
        self.call_with(
            Method::Put,
            &["vhost-limits", vhost, name],
            Some(&body),
            false,
        )
        .await?;
        Ok(())
    }

    /// Removes the limit `name` of `vhost`.
    pub async fn delete_vhost_limit(&self, vhost: &str, name: &str) -> Result<(), ManagementError> {
        self.call_with(Method::Delete, &["vhost-limits", vhost, name], None, false)
            .await?;
        Ok(())
    }

    /// Binds the exchange `destination` to the exchange `source` on `routing_key`, without
    /// arguments (mesh never makes one: the plan finds and removes them).
    pub async fn bind_exchange(
        &self,
        vhost: &str,
        source: &str,
        destination: &str,
        routing_key: &str,
    ) -> Result<(), ManagementError> {
        let body = serde_json::json!({ "routing_key": routing_key, "arguments": {} });
        self.call(
            Method::Post,
            &["bindings", vhost, "e", source, "e", destination],
            Some(&body),
        )
        .await?;
        Ok(())
    }

    /// Removes the binding the API names `properties_key` from `source` to `destination`, a
    /// queue (`destination_type` `queue`) or an exchange (`exchange`).
    pub async fn unbind_any(
        &self,
        vhost: &str,
        source: &str,
        destination_type: &str,
        destination: &str,
        properties_key: &str,
    ) -> Result<(), ManagementError> {
        let kind = if destination_type == "exchange" {
            "e"
        } else {
            "q"
        };
        self.call(
            Method::Delete,
            &[
                "bindings",
                vhost,
                "e",
                source,
                kind,
                destination,
                properties_key,
            ],
            None,
        )
        .await?;
        Ok(())
    }
}
