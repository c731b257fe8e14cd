//! A small client of RabbitMQ's management HTTP API: what AMQP cannot tell (bindings, queue
//! arguments, every queue of a vhost) and the declarations `topology apply` makes.
//!
//! mesh-amqp has a management reader of its own, but it is private to that crate; this one
//! is blocking (`ureq`), plain HTTP like the broker's default listener, and bounded by a
//! timeout on every request.

use std::time::Duration;

use anyhow::Context as _;
use base64::Engine as _;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::exit::{fail, Code, Coded};

/// A management API client for one vhost.
#[derive(Debug)]
pub(crate) struct Management {
    agent: ureq::Agent,
    base: String,
    authorization: String,
    vhost: String,
}

/// An exchange as the API lists it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct ExchangeRow {
    pub(crate) name: String,
    #[serde(rename = "type")]
    pub(crate) kind: String,
    pub(crate) durable: bool,
    #[serde(default)]
    pub(crate) auto_delete: bool,
    #[serde(default)]
    pub(crate) internal: bool,
}

/// A queue as the API lists it. Counts are the last statistics sample and may be absent
/// for a queue created moments ago.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct QueueRow {
    pub(crate) name: String,
    pub(crate) durable: bool,
    #[serde(default)]
    pub(crate) auto_delete: bool,
    #[serde(default)]
    pub(crate) exclusive: bool,
    #[serde(default)]
    pub(crate) arguments: Map<String, Value>,
    #[serde(rename = "type", default)]
    pub(crate) kind: Option<String>,
    #[serde(default)]
    pub(crate) messages: Option<u64>,
    #[serde(default)]
    pub(crate) messages_ready: Option<u64>,
    #[serde(default)]
    pub(crate) messages_unacknowledged: Option<u64>,
    #[serde(default)]
    pub(crate) consumers: Option<u64>,
}

/// A binding as the API lists it.
#[derive(Debug, Clone, Deserialize)]
pub(crate) struct BindingRow {
    pub(crate) source: String,
    pub(crate) destination: String,
    pub(crate) destination_type: String,
    pub(crate) routing_key: String,
    #[serde(default)]
    pub(crate) arguments: Map<String, Value>,
    pub(crate) properties_key: String,
}

impl Management {
    /// A client of the API at `base` (`http://host:15672`, optionally with a path prefix).
    pub(crate) fn new(
        base: &str,
        user: &str,
        password: &str,
        vhost: &str,
        timeout: Duration,
    ) -> anyhow::Result<Management> {
        let base = base.trim_end_matches('/');
        if !base.starts_with("http://") {
            return Err(fail(
                Code::Usage,
                format!("the management URL `{base}` is not http://… (https is not supported)"),
            ));
        }
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(timeout)
            .timeout(timeout.max(Duration::from_secs(30)))
            .build();
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        Ok(Management {
            agent,
            base: base.to_owned(),
            authorization: format!("Basic {token}"),
            vhost: vhost.to_owned(),
        })
    }

    /// The vhost it works in.
    pub(crate) fn vhost(&self) -> &str {
        &self.vhost
    }

    fn url(&self, segments: &[&str]) -> String {
        let mut url = format!("{}/api", self.base);
        for segment in segments {
            url.push('/');
            url.push_str(&encode(segment));
        }
        url
    }

    fn call(
        &self,
        method: &str,
        segments: &[&str],
        body: Option<&Value>,
    ) -> anyhow::Result<Option<Value>> {
        let url = self.url(segments);
        let request = self
            .agent
            .request(method, &url)
            .set("Authorization", &self.authorization)
            .set("Accept", "application/json");
        let result = match body {
            Some(body) => request.send_json(body),
            None => request.call(),
        };
        match result {
            Ok(response) => {
                if response.status() == 204 {
                    return Ok(None);
                }
                let text = response
                    .into_string()
                    .with_context(|| format!("reading the answer to {method} {url}"))?;
                if text.trim().is_empty() {
                    return Ok(None);
                }
                let value = serde_json::from_str(&text)
                    .with_context(|| format!("the answer to {method} {url} is not JSON"))?;
                Ok(Some(value))
            }
            Err(ureq::Error::Status(status, response)) => {
                let reason = response
                    .into_json::<Value>()
                    .ok()
                    .and_then(|v| v.get("reason").and_then(Value::as_str).map(str::to_owned))
                    .unwrap_or_default();
                let what = match status {
                    401 => "the management API refused the credentials".to_owned(),
                    403 => "the management API refused access (the user needs a management tag and permissions on the vhost)".to_owned(),
                    404 if segments.len() == 2 => format!("vhost `{}` does not exist", self.vhost),
                    _ => format!("{method} {url} answered {status}"),
                };
                Err(if reason.is_empty() {
                    anyhow::anyhow!(what)
                } else {
                    anyhow::anyhow!("{what}: {reason}")
                })
            }
            Err(ureq::Error::Transport(error)) => Err(anyhow::Error::new(error).context(Coded {
                code: Code::NoManagement,
                message: format!(
                    "the RabbitMQ management API at {} is unreachable (it lists bindings and \
                     arguments, which AMQP cannot; enable rabbitmq_management or give \
                     --management-url)",
                    self.base
                ),
            })),
        }
    }

    fn get<T: serde::de::DeserializeOwned>(&self, segments: &[&str]) -> anyhow::Result<T> {
        let value = self.call("GET", segments, None)?.unwrap_or(Value::Null);
        serde_json::from_value(value)
            .with_context(|| format!("unexpected answer from GET {}", self.url(segments)))
    }

    /// The broker's overview (versions, node name).
    pub(crate) fn overview(&self) -> anyhow::Result<Value> {
        self.get(&["overview"])
    }

    /// Every exchange of the vhost.
    pub(crate) fn exchanges(&self) -> anyhow::Result<Vec<ExchangeRow>> {
        self.get(&["exchanges", &self.vhost])
    }

    /// Every queue of the vhost.
    pub(crate) fn queues(&self) -> anyhow::Result<Vec<QueueRow>> {
        self.get(&["queues", &self.vhost])
    }

    /// Every binding of the vhost.
    pub(crate) fn bindings(&self) -> anyhow::Result<Vec<BindingRow>> {
        self.get(&["bindings", &self.vhost])
    }

    /// Declares a durable topic-like exchange.
    pub(crate) fn put_exchange(&self, name: &str, kind: &str, durable: bool) -> anyhow::Result<()> {
        let body = serde_json::json!({
            "type": kind, "durable": durable, "auto_delete": false, "internal": false,
            "arguments": {}
        });
        self.call("PUT", &["exchanges", &self.vhost, name], Some(&body))
            .with_context(|| format!("declaring exchange `{name}`"))?;
        Ok(())
    }

    /// Declares a queue.
    pub(crate) fn put_queue(
        &self,
        name: &str,
        durable: bool,
        arguments: &Map<String, Value>,
    ) -> anyhow::Result<()> {
        let body = serde_json::json!({
            "durable": durable, "auto_delete": false, "arguments": arguments
        });
        self.call("PUT", &["queues", &self.vhost, name], Some(&body))
            .with_context(|| format!("declaring queue `{name}`"))?;
        Ok(())
    }

    /// Deletes a queue with everything in it.
    pub(crate) fn delete_queue(&self, name: &str) -> anyhow::Result<()> {
        self.call("DELETE", &["queues", &self.vhost, name], None)
            .with_context(|| format!("deleting queue `{name}`"))?;
        Ok(())
    }

    /// Binds `queue` to `exchange` on `routing_key`.
    pub(crate) fn bind(
        &self,
        exchange: &str,
        queue: &str,
        routing_key: &str,
    ) -> anyhow::Result<()> {
        let body = serde_json::json!({ "routing_key": routing_key, "arguments": {} });
        self.call(
            "POST",
            &["bindings", &self.vhost, "e", exchange, "q", queue],
            Some(&body),
        )
        .with_context(|| format!("binding `{queue}` to `{exchange}` on `{routing_key}`"))?;
        Ok(())
    }

    /// Removes the binding the API names `properties_key`.
    pub(crate) fn unbind(
        &self,
        exchange: &str,
        queue: &str,
        properties_key: &str,
    ) -> anyhow::Result<()> {
        self.call(
            "DELETE",
            &[
                "bindings",
                &self.vhost,
                "e",
                exchange,
                "q",
                queue,
                properties_key,
            ],
            None,
        )
        .with_context(|| format!("unbinding `{queue}` from `{exchange}` ({properties_key})"))?;
        Ok(())
    }
}

/// Percent-encodes one path segment (everything but RFC 3986's unreserved characters, so a
/// vhost `/` is `%2F`).
fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(encode("/"), "%2F");
        assert_eq!(encode("a.b-c_d~"), "a.b-c_d~");
        assert_eq!(encode("module.#"), "module.%23");
        assert_eq!(encode("ü"), "%C3%BC");
    }

    #[test]
    fn only_http_is_accepted() {
        let t = Duration::from_secs(1);
        assert!(Management::new("https://h:15672", "u", "p", "/", t).is_err());
        let m = Management::new("http://h:15672/", "u", "p", "/", t).unwrap();
        assert_eq!(
            m.url(&["queues", "/", "a.b"]),
            "http://h:15672/api/queues/%2F/a.b"
        );
    }
}
