//! The management HTTP API of the scale scenario's private node: its vhosts, and the
//! connections it closes by force.
//!
//! mesh-amqp's `ManagementClient` reads and writes topology only, so the few calls the
//! scenario needs beyond that go through reqwest here (plain HTTP on loopback, basic auth).

use std::time::Duration;

use anyhow::Context;
use reqwest::header::CONTENT_TYPE;
use reqwest::{Client, Method, RequestBuilder, Url};
use serde_json::{json, Value};
use tokio::time::Instant;

/// How long one request may take: deleting a vhost of a thousand quorum queues is slow.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(600);
/// Between two looks while waiting for the API or for connections to be listed.
const POLL: Duration = Duration::from_millis(100);

/// The API of one node, as user `user`.
#[derive(Debug, Clone)]
pub(crate) struct Api {
    client: Client,
    base: Url,
    user: String,
    password: String,
}

impl Api {
    /// The API at `base` (`http://127.0.0.1:<port>`).
    pub(crate) fn new(base: &str, user: &str, password: &str) -> anyhow::Result<Api> {
        // The workspace's reqwest is built with rustls and no provider of its own.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = Client::builder()
            .timeout(REQUEST_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .context("building the management API's HTTP client")?;
        Ok(Api {
            client,
            base: Url::parse(base).with_context(|| format!("bad management URL `{base}`"))?,
            user: user.to_owned(),
            password: password.to_owned(),
        })
    }

    /// The base URL, as mesh's options and `mesh --management-url` take it.
    pub(crate) fn base(&self) -> &str {
        self.base.as_str().trim_end_matches('/')
    }

    /// `/api/<segments…>`, each segment percent-encoded.
    fn url(&self, segments: &[&str]) -> anyhow::Result<Url> {
        let mut url = self.base.clone();
        url.path_segments_mut()
            .map_err(|()| anyhow::anyhow!("the management URL cannot take a path"))?
            .pop_if_empty()
            .push("api")
            .extend(segments);
        Ok(url)
    }

    /// A request to `url`, authenticated.
    fn request_to(&self, method: Method, url: Url) -> RequestBuilder {
        self.client
            .request(method, url)
            .basic_auth(&self.user, Some(&self.password))
    }

    /// A request to `/api/<segments…>`.
    fn request(&self, method: Method, segments: &[&str]) -> anyhow::Result<RequestBuilder> {
        Ok(self.request_to(method, self.url(segments)?))
    }

    /// Sends `request`; fails on an HTTP error status, with its body.
    async fn send(&self, what: &str, request: RequestBuilder) -> anyhow::Result<Vec<u8>> {
        let response = request.send().await.with_context(|| what.to_owned())?;
        let status = response.status();
        let body = response.bytes().await.with_context(|| what.to_owned())?;
        anyhow::ensure!(
            status.is_success(),
            "{what}: HTTP {status}: {}",
            String::from_utf8_lossy(&body).trim()
        );
        Ok(body.to_vec())
    }

    async fn send_json(
        &self,
        what: &str,
        method: Method,
        segments: &[&str],
        body: &Value,
    ) -> anyhow::Result<()> {
        let request = self
            .request(method, segments)?
            .header(CONTENT_TYPE, "application/json")
            .body(serde_json::to_vec(body)?);
        self.send(what, request).await.map(drop)
    }

    /// Waits until the API answers (the plugin starts a moment after the AMQP listener).
    pub(crate) async fn await_up(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let answer = self
                .send(
                    "reading /api/overview",
                    self.request(Method::GET, &["overview"])?,
                )
                .await;
            match answer {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() >= deadline => {
                    return Err(e.context(format!("the management API is not up after {timeout:?}")))
                }
                Err(_) => tokio::time::sleep(POLL).await,
            }
        }
    }

    /// Creates vhost `vhost` and gives the API's user every permission on it.
    pub(crate) async fn add_vhost(&self, vhost: &str) -> anyhow::Result<()> {
        let what = format!("creating vhost `{vhost}`");
        self.send_json(&what, Method::PUT, &["vhosts", vhost], &json!({}))
            .await?;
        let permissions = json!({"configure": ".*", "write": ".*", "read": ".*"});
        let what = format!("giving `{}` permissions on vhost `{vhost}`", self.user);
        self.send_json(
            &what,
            Method::PUT,
            &["permissions", vhost, &self.user],
            &permissions,
        )
        .await
    }

    /// Deletes vhost `vhost`, with every queue in it, waiting at most `timeout` for it to
    /// be gone.
    pub(crate) async fn delete_vhost(&self, vhost: &str, timeout: Duration) -> anyhow::Result<()> {
        let what = format!("deleting vhost `{vhost}`");
        let deleted = self
            .send(&what, self.request(Method::DELETE, &["vhosts", vhost])?)
            .await;
        if deleted.is_ok() {
            return Ok(());
        }
        // The API answers 500 when deleting the queues outlasts its own request timeout,
        // while the broker goes on deleting them: wait until the vhost is gone.
        let deadline = Instant::now() + timeout;
        while self.vhost_exists(vhost).await? {
            if Instant::now() >= deadline {
                return deleted
                    .map(drop)
                    .with_context(|| format!("vhost `{vhost}` still there after {timeout:?}"));
            }
            tokio::time::sleep(POLL).await;
        }
        Ok(())
    }

    /// Whether vhost `vhost` exists.
    async fn vhost_exists(&self, vhost: &str) -> anyhow::Result<bool> {
        let what = format!("reading vhost `{vhost}`");
        let response = self
            .request(Method::GET, &["vhosts", vhost])?
            .send()
            .await
            .with_context(|| what.clone())?;
        match response.status() {
            reqwest::StatusCode::NOT_FOUND => Ok(false),
            status if status.is_success() => Ok(true),
            status => anyhow::bail!("{what}: HTTP {status}"),
        }
    }

    /// The broker's names of the connections to `vhost` whose client-given name starts with
    /// `prefix`.
    async fn connections(&self, vhost: &str, prefix: &str) -> anyhow::Result<Vec<String>> {
        let what = format!("listing the connections of vhost `{vhost}`");
        let mut url = self.url(&["vhosts", vhost, "connections"])?;
        url.query_pairs_mut()
            .append_pair("columns", "name,client_properties");
        let request = self.request_to(Method::GET, url);
        let body = self.send(&what, request).await?;
        let rows: Vec<Value> = serde_json::from_slice(&body).with_context(|| what.clone())?;
        Ok(rows
            .iter()
            .filter(|row| {
                row["client_properties"]["connection_name"]
                    .as_str()
                    .is_some_and(|name| name.starts_with(prefix))
            })
            .filter_map(|row| row["name"].as_str().map(str::to_owned))
            .collect())
    }

    /// Waits until `count` connections to `vhost` named `prefix…` are listed, and returns
    /// their broker names.
    pub(crate) async fn await_connections(
        &self,
        vhost: &str,
        prefix: &str,
        count: usize,
        timeout: Duration,
    ) -> anyhow::Result<Vec<String>> {
        let deadline = Instant::now() + timeout;
        loop {
            let names = self.connections(vhost, prefix).await?;
            if names.len() >= count {
                return Ok(names);
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "{} connection(s) named `{prefix}…` listed after {timeout:?}, not {count}",
                names.len()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Closes connection `name` (the broker's name of it) by force, as an operator would.
    pub(crate) async fn close_connection(&self, name: &str) -> anyhow::Result<()> {
        let what = format!("closing connection `{name}`");
        let request = self
            .request(Method::DELETE, &["connections", name])?
            .header("X-Reason", "closed by mesh-bench's scale scenario");
        self.send(&what, request).await.map(drop)
    }
}
