//! The one client of RabbitMQ's management HTTP API in the workspace: what AMQP cannot tell
//! (the bindings of a queue, queue arguments, every queue of a vhost) and the declarations
//! `mesh topology apply` makes.
//!
//! The RabbitMQ transport (`meshbus-amqp`, which knows no HTTP) uses it, as the SDK's `amqp`
//! feature connects it, on every durable subscribe to find the bindings a queue no longer
//! asks for ([`ManagementClient::event_binding_keys`]); the `mesh` CLI uses it for
//! `topology`, `access` and `status`, the console for its overview.
//!
//! HTTP and TLS come from `reqwest` over `rustls` (ring), with a root store built here: the
//! [CA file](ManagementOptions::ca_file) when given, else the system's roots. Every request is
//! bounded by the [timeout](ManagementOptions::timeout) (connecting and reading the answer)
//! and the [response size](ManagementOptions::max_response_size); vhost, queue and exchange
//! names are percent-encoded path segments. Credentials go as basic auth, and over plain HTTP
//! only to a loopback host unless [allowed](ManagementOptions::allow_insecure_http) (see
//! [`ManagementOptions`]).
//!
//! Architecture invariant: no `reqwest`, `rustls` or `url` type appears in this module's
//! public API.

mod error;
mod limits;
mod options;

use mesh_core::text::EscapedDisplay;
use std::sync::Arc;

use mesh_core::naming::EVENTS_EXCHANGE;
use percent_encoding::utf8_percent_encode;
use serde::Deserialize;
use serde_json::{Map, Value};
use url::Url;

pub use error::{ManagementError, ManagementErrorKind};
pub use options::ManagementOptions;

use options::shown;

/// What a path segment encodes: everything but RFC 3986's unreserved characters.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// An exchange as the API lists it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct ExchangeRow {
    /// Its name.
    pub name: String,
    /// `topic`, `direct`, …
    #[serde(rename = "type")]
    pub kind: String,
    /// Whether it survives a broker restart.
    pub durable: bool,
    /// Whether it is deleted with its last binding.
    #[serde(default)]
    pub auto_delete: bool,
    /// Whether only other exchanges may publish to it.
    #[serde(default)]
    pub internal: bool,
}

/// A queue as the API lists it. Counts are the last statistics sample and may be absent for
/// a queue created moments ago.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct QueueRow {
    /// Its name.
    pub name: String,
    /// Whether it survives a broker restart.
    pub durable: bool,
    /// Whether it is deleted with its last consumer.
    #[serde(default)]
    pub auto_delete: bool,
    /// Whether it belongs to one connection.
    #[serde(default)]
    pub exclusive: bool,
    /// Its `x-…` arguments.
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// `classic`, `quorum`, `stream`.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    /// Messages ready and unacknowledged.
    #[serde(default)]
    pub messages: Option<u64>,
    /// Messages ready for delivery.
    #[serde(default)]
    pub messages_ready: Option<u64>,
    /// Messages delivered and not acknowledged yet.
    #[serde(default)]
    pub messages_unacknowledged: Option<u64>,
    /// Consumers attached.
    #[serde(default)]
    pub consumers: Option<u64>,
}

/// A binding as the API lists it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct BindingRow {
    /// The exchange (empty for the default exchange).
    pub source: String,
    /// The queue or exchange bound.
    pub destination: String,
    /// `queue` or `exchange`.
    pub destination_type: String,
    /// The pattern.
    pub routing_key: String,
    /// Binding arguments (mesh binds without).
    #[serde(default)]
    pub arguments: Map<String, Value>,
    /// What names the binding in a `DELETE`.
    pub properties_key: String,
}

/// A broker user as the API lists it (`GET /api/users`, `GET /api/users/{name}`; the
/// listing needs the `administrator` tag). `Debug` leaves out the password hash.
#[derive(Clone, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct UserRow {
    /// Its name.
    pub name: String,
    /// Its tags (`management`, `administrator`, …); RabbitMQ before 3.9 sent them as one
    /// comma-separated string, read here as a list too.
    #[serde(default, deserialize_with = "tags")]
    pub tags: Vec<String>,
    /// Base64 of the salt and the salted hash of its password (empty: no password).
    #[serde(default)]
    pub password_hash: String,
    /// How the hash was made, e.g. `rabbit_password_hashing_sha256`.
    #[serde(default)]
    pub hashing_algorithm: Option<String>,
}

impl std::fmt::Debug for UserRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserRow")
            .field("name", &self.name)
            .field("tags", &self.tags)
            .field("hashing_algorithm", &self.hashing_algorithm)
            .finish_non_exhaustive()
    }
}

/// Tags as a list, or as the comma-separated string older brokers send.
fn tags<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Tags {
        List(Vec<String>),
        Text(String),
    }
    Ok(match Option::<Tags>::deserialize(deserializer)? {
        None => Vec::new(),
        Some(Tags::List(list)) => list,
        Some(Tags::Text(text)) => text
            .split(',')
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_owned)
            .collect(),
    })
}

/// The limits of one user or one vhost as the API lists them: limit name to value.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[non_exhaustive]
pub struct LimitRow {
    /// The user (for a user's limits).
    #[serde(default)]
    pub user: Option<String>,
    /// The vhost (for a vhost's limits).
    #[serde(default)]
    pub vhost: Option<String>,
    /// Each limit set, e.g. `max-connections` → `10`.
    #[serde(default)]
    pub value: Map<String, Value>,
}

/// A user's permissions on a vhost: three regular expressions over resource names.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct PermissionRow {
    /// The user.
    pub user: String,
    /// The vhost.
    pub vhost: String,
    /// Declaring and deleting.
    pub configure: String,
    /// Publishing to an exchange, binding a queue (and deleting its bindings).
    pub write: String,
    /// Consuming from a queue, binding from an exchange.
    pub read: String,
}

/// A user's topic permissions on one topic exchange of a vhost: regular expressions over
/// routing keys (`write`: publishing) and binding keys (`read`: binding a queue).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[non_exhaustive]
pub struct TopicPermissionRow {
    /// The user.
    pub user: String,
    /// The vhost.
    pub vhost: String,
    /// The exchange.
    pub exchange: String,
    /// Routing keys it may publish under.
    pub write: String,
    /// Binding keys it may bind a queue on.
    pub read: String,
}

/// A client of one broker's management API: a cheap clone shares the connection pool.
#[derive(Clone)]
pub struct ManagementClient {
    inner: Arc<Inner>,
}

struct Inner {
    http: reqwest::Client,
    /// The base URL, without userinfo, ending with `/` so that `api/…` joins under it.
    base: Url,
    /// `scheme://host:port/prefix`, for messages.
    shown: String,
    user: String,
    password: String,
    max_response_size: usize,
}

impl std::fmt::Debug for ManagementClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagementClient")
            .field("url", &self.inner.shown)
            .field("user", &self.inner.user)
            .finish_non_exhaustive()
    }
}

/// The HTTP methods the client uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Put,
    Post,
    Delete,
}

impl Method {
    fn name(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Put => "PUT",
            Method::Post => "POST",
            Method::Delete => "DELETE",
        }
    }
}

impl ManagementClient {
    /// A client for `options`; no request is made yet.
    ///
    /// Fails with `InvalidOptions` for a URL that is not `http(s)://host…` or a CA file that
    /// cannot be read or holds no certificate, and with `Insecure` for plain HTTP to a host
    /// that is not loopback without [`allow_insecure_http`](ManagementOptions::allow_insecure_http).
    pub fn new(options: &ManagementOptions) -> Result<ManagementClient, ManagementError> {
        let mut base = options.parse_url()?;
        options.check_credential_policy(&base)?;
        let _ = base.set_username("");
        let _ = base.set_password(None);
        base.set_query(None);
        base.set_fragment(None);
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let mut builder = reqwest::Client::builder()
            .timeout(options.get_timeout())
            .connect_timeout(options.get_timeout())
            // A redirect could take the credentials elsewhere; the API never redirects.
            .redirect(reqwest::redirect::Policy::none())
            // Deterministic: an `http_proxy` in the environment must not see the credentials.
            .no_proxy()
            .tls_backend_preconfigured(tls_config(
                base.scheme() == "https",
                options.get_ca_file(),
            )?);
        for (host, addr) in options.get_resolve() {
            builder = builder.resolve(host, *addr);
        }
        let http = builder.build().map_err(|e| {
            ManagementError::new(
                ManagementErrorKind::InvalidOptions,
                "cannot build the management HTTP client",
            )
            .with_source(e.without_url())
        })?;
        Ok(ManagementClient {
            inner: Arc::new(Inner {
                http,
                shown: shown(&base),
                base,
                user: options.get_user().to_owned(),
                password: options.get_password().to_owned(),
                max_response_size: options.get_max_response_size(),
            }),
        })
    }

    /// The API's URL, as messages show it (`scheme://host:port/prefix`, no userinfo).
    pub fn url(&self) -> &str {
        &self.inner.shown
    }

    /// The broker's overview (versions, node name).
    pub async fn overview(&self) -> Result<Value, ManagementError> {
        self.get(&["overview"]).await
    }

    /// Every exchange of `vhost`.
    pub async fn exchanges(&self, vhost: &str) -> Result<Vec<ExchangeRow>, ManagementError> {
        self.get(&["exchanges", vhost]).await
    }

    /// Every queue of `vhost`.
    pub async fn queues(&self, vhost: &str) -> Result<Vec<QueueRow>, ManagementError> {
        self.get(&["queues", vhost]).await
    }

    /// Every binding of `vhost`.
    pub async fn bindings(&self, vhost: &str) -> Result<Vec<BindingRow>, ManagementError> {
        self.get(&["bindings", vhost]).await
    }

    /// The bindings of `queue` in `vhost`.
    pub async fn queue_bindings(
        &self,
        vhost: &str,
        queue: &str,
    ) -> Result<Vec<BindingRow>, ManagementError> {
        self.get(&["queues", vhost, queue, "bindings"]).await
    }

    /// Declares an exchange (not auto-deleted, not internal, no arguments).
    pub async fn put_exchange(
        &self,
        vhost: &str,
        name: &str,
        kind: &str,
        durable: bool,
    ) -> Result<(), ManagementError> {
        let body = serde_json::json!({
            "type": kind, "durable": durable, "auto_delete": false, "internal": false,
            "arguments": {}
        });
        self.call(Method::Put, &["exchanges", vhost, name], Some(&body))
            .await?;
        Ok(())
    }

    /// Declares a queue (not auto-deleted) with `arguments`.
    pub async fn put_queue(
        &self,
        vhost: &str,
        name: &str,
        durable: bool,
        arguments: &Map<String, Value>,
    ) -> Result<(), ManagementError> {
        let body = serde_json::json!({
            "durable": durable, "auto_delete": false, "arguments": arguments
        });
        self.call(Method::Put, &["queues", vhost, name], Some(&body))
            .await?;
        Ok(())
    }

    /// Deletes a queue with everything in it.
    pub async fn delete_queue(&self, vhost: &str, name: &str) -> Result<(), ManagementError> {
        self.call(Method::Delete, &["queues", vhost, name], None)
            .await?;
        Ok(())
    }

    /// Deletes an exchange with its bindings.
    pub async fn delete_exchange(&self, vhost: &str, name: &str) -> Result<(), ManagementError> {
        self.call(Method::Delete, &["exchanges", vhost, name], None)
            .await?;
        Ok(())
    }

    /// Binds `queue` to `exchange` on `routing_key`, without arguments.
    pub async fn bind(
        &self,
        vhost: &str,
        exchange: &str,
        queue: &str,
        routing_key: &str,
    ) -> Result<(), ManagementError> {
        let body = serde_json::json!({ "routing_key": routing_key, "arguments": {} });
        self.call(
            Method::Post,
            &["bindings", vhost, "e", exchange, "q", queue],
            Some(&body),
        )
        .await?;
        Ok(())
    }

    /// Removes the binding the API names `properties_key`.
    pub async fn unbind(
        &self,
        vhost: &str,
        exchange: &str,
        queue: &str,
        properties_key: &str,
    ) -> Result<(), ManagementError> {
        self.call(
            Method::Delete,
            &["bindings", vhost, "e", exchange, "q", queue, properties_key],
            None,
        )
        .await?;
        Ok(())
    }

    /// Every user of the broker (with their password hashes: the API lists them to
    /// administrators only).
    pub async fn users(&self) -> Result<Vec<UserRow>, ManagementError> {
        self.get(&["users"]).await
    }

    /// One user (`NotFound` when there is none of that name).
    pub async fn user(&self, name: &str) -> Result<UserRow, ManagementError> {
        self.get(&["users", name]).await
    }

    /// Creates the user `name`, or sets the password and tags of the one there is. The
    /// password goes in the request body only: no message, error or log holds it.
    pub async fn put_user(
        &self,
        name: &str,
        password: &str,
        tags: &[&str],
    ) -> Result<(), ManagementError> {
        let body = serde_json::json!({ "password": password, "tags": tags.join(",") });
        self.call(Method::Put, &["users", name], Some(&body))
            .await?;
        Ok(())
    }

    /// Creates the user `name`, or sets the tags of the one there is, with no password: no
    /// password logs in as it (`password_hash` empty), only another mechanism such as a
    /// client certificate (`EXTERNAL`).
    pub async fn put_user_without_password(
        &self,
        name: &str,
        tags: &[&str],
    ) -> Result<(), ManagementError> {
        let body = serde_json::json!({ "password_hash": "", "tags": tags.join(",") });
        self.call(Method::Put, &["users", name], Some(&body))
            .await?;
        Ok(())
    }

    /// Deletes the user `name` (with its permissions on every vhost).
    pub async fn delete_user(&self, name: &str) -> Result<(), ManagementError> {
        self.call(Method::Delete, &["users", name], None).await?;
        Ok(())
    }

    /// The permissions of every user on `vhost`.
    pub async fn permissions(&self, vhost: &str) -> Result<Vec<PermissionRow>, ManagementError> {
        self.get(&["vhosts", vhost, "permissions"]).await
    }

    /// Sets the permissions of `user` on `vhost`.
    pub async fn put_permissions(
        &self,
        vhost: &str,
        user: &str,
        configure: &str,
        write: &str,
        read: &str,
    ) -> Result<(), ManagementError> {
        let body = serde_json::json!({ "configure": configure, "write": write, "read": read });
        self.call(Method::Put, &["permissions", vhost, user], Some(&body))
            .await?;
        Ok(())
    }

    /// The topic permissions of every user on `vhost`.
    pub async fn topic_permissions(
        &self,
        vhost: &str,
    ) -> Result<Vec<TopicPermissionRow>, ManagementError> {
        self.get(&["vhosts", vhost, "topic-permissions"]).await
    }

    /// Sets the topic permissions of `user` on `exchange` of `vhost`.
    pub async fn put_topic_permissions(
        &self,
        vhost: &str,
        user: &str,
        exchange: &str,
        write: &str,
        read: &str,
    ) -> Result<(), ManagementError> {
        let body = serde_json::json!({ "exchange": exchange, "write": write, "read": read });
        self.call(
            Method::Put,
            &["topic-permissions", vhost, user],
            Some(&body),
        )
        .await?;
        Ok(())
    }

    /// Deletes every topic permission of `user` on `vhost`.
    pub async fn delete_topic_permissions(
        &self,
        vhost: &str,
        user: &str,
    ) -> Result<(), ManagementError> {
        self.call(Method::Delete, &["topic-permissions", vhost, user], None)
            .await?;
        Ok(())
    }

    /// The routing keys of the bindings of `queue` on `mesh.events` that mesh could have
    /// made: to the queue, without arguments.
    pub async fn event_binding_keys(
        &self,
        vhost: &str,
        queue: &str,
    ) -> Result<Vec<String>, ManagementError> {
        let rows = self.queue_bindings(vhost, queue).await?;
        let mut keys = Vec::new();
        for row in rows {
            if row.source != EVENTS_EXCHANGE || row.destination_type != "queue" {
                continue;
            }
            if !row.arguments.is_empty() {
                // Not one of ours: mesh binds without arguments.
                tracing::debug!(
                    queue,
                    pattern = row.routing_key,
                    "skipping a binding with arguments"
                );
                continue;
            }
            keys.push(row.routing_key);
        }
        Ok(keys)
    }

    /// `api/<segments…>` under the base, each segment percent-encoded.
    fn path(segments: &[&str]) -> String {
        let mut path = "api".to_owned();
        for segment in segments {
            path.push('/');
            path.extend(utf8_percent_encode(segment, SEGMENT));
        }
        path
    }

    async fn get<T: serde::de::DeserializeOwned>(
        &self,
        segments: &[&str],
    ) -> Result<T, ManagementError> {
        let value = self
            .call(Method::Get, segments, None)
            .await?
            .unwrap_or(Value::Null);
        serde_json::from_value(value).map_err(|e| {
            ManagementError::new(
                ManagementErrorKind::InvalidResponse,
                format!(
                    "unexpected answer to GET /{} from {}",
                    Self::path(segments),
                    self.inner.shown
                ),
            )
            .with_source(e)
        })
    }

    /// One request; `None` for an empty answer.
    async fn call(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<&Value>,
    ) -> Result<Option<Value>, ManagementError> {
        self.call_with(method, segments, body, true).await
    }

    /// [`call`](Self::call), asking for JSON only when `accept_json` (the limit endpoints
    /// answer a change with no body and refuse, `406`, a request that accepts only JSON).
    async fn call_with(
        &self,
        method: Method,
        segments: &[&str],
        body: Option<&Value>,
        accept_json: bool,
    ) -> Result<Option<Value>, ManagementError> {
        let path = Self::path(segments);
        let what = format!("{} /{path} on {}", method.name(), self.inner.shown);
        let url = self.inner.base.join(&path).map_err(|e| {
            ManagementError::new(ManagementErrorKind::InvalidOptions, what.clone()).with_source(e)
        })?;
        let http = &self.inner.http;
        let mut request = match method {
            Method::Get => http.get(url),
            Method::Put => http.put(url),
            Method::Post => http.post(url),
            Method::Delete => http.delete(url),
        }
        .basic_auth(&self.inner.user, Some(&self.inner.password));
        if accept_json {
            request = request.header("accept", "application/json");
        }
        if let Some(body) = body {
            let bytes = serde_json::to_vec(body).map_err(|e| {
                ManagementError::new(ManagementErrorKind::InvalidOptions, what.clone())
                    .with_source(e)
            })?;
            request = request
                .header("content-type", "application/json")
                .body(bytes);
        }
        let response = request.send().await.map_err(|e| {
            ManagementError::new(
                ManagementErrorKind::Unreachable,
                format!("the management API at {} is unreachable", self.inner.shown),
            )
            .with_source(e.without_url())
        })?;
        let status = response.status().as_u16();
        let bytes = self.read_body(response, &what).await?;
        if !(200..300).contains(&status) {
            let reason = serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| v.get("reason").and_then(Value::as_str).map(str::to_owned))
                .filter(|r| !r.is_empty());
            let kind = match status {
                401 => ManagementErrorKind::Unauthorized,
                403 => ManagementErrorKind::Forbidden,
                404 => ManagementErrorKind::NotFound,
                _ => ManagementErrorKind::Status,
            };
            return Err(
                ManagementError::new(kind, format!("{what} answered {status}"))
                    .with_status(status, reason),
            );
        }
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        let value = serde_json::from_slice(&bytes).map_err(|e| {
            ManagementError::new(
                ManagementErrorKind::InvalidResponse,
                format!("the answer to {what} is not JSON"),
            )
            .with_source(e)
        })?;
        Ok(Some(value))
    }

    /// The body, at most `max_response_size` bytes.
    async fn read_body(
        &self,
        mut response: reqwest::Response,
        what: &str,
    ) -> Result<Vec<u8>, ManagementError> {
        let limit = self.inner.max_response_size;
        let too_large = || {
            ManagementError::new(
                ManagementErrorKind::InvalidResponse,
                format!("the answer to {what} is larger than {limit} bytes"),
            )
        };
        if response
            .content_length()
            .is_some_and(|length| length > limit as u64)
        {
            return Err(too_large());
        }
        let mut body = Vec::new();
        loop {
            let chunk = response.chunk().await.map_err(|e| {
                ManagementError::new(
                    ManagementErrorKind::Unreachable,
                    format!("reading the answer to {what} failed"),
                )
                .with_source(e.without_url())
            })?;
            let Some(chunk) = chunk else {
                return Ok(body);
            };
            if body.len() + chunk.len() > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
    }
}

/// rustls's *ring* provider, the one this crate builds rustls with.
///
/// rustls 0.23.48 deprecates the function itself ("no support for post-quantum algorithms":
/// *ring* has no hybrid post-quantum key exchange), with no other way to name the provider;
/// the only change that avoids it is another provider (aws-lc-rs). The allowance is limited
/// to this one call, so that a user's crate with a newer rustls gets no warning from mesh.
#[allow(deprecated)]
fn ring_provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// rustls with ring, verifying against the CA file's certificates only, or the system's
/// roots without one; for a plain-HTTP client (`https` false), which never speaks TLS, no
/// roots are loaded.
fn tls_config(
    https: bool,
    ca_file: Option<&std::path::Path>,
) -> Result<rustls::ClientConfig, ManagementError> {
    use rustls_pki_types::pem::PemObject as _;
    use rustls_pki_types::CertificateDer;

    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        _ if !https => {}
        Some(path) => {
            let invalid = |what: &str| {
                ManagementError::new(
                    ManagementErrorKind::InvalidOptions,
                    format!("the management CA file {} {what}", path.display()),
                )
            };
            // Read as every file a user names is: at most a PEM file's bound, a FIFO or
            // device within the deadline.
            let pem = mesh_files::read_bounded(path, mesh_files::MAX_PEM, mesh_files::DEADLINE)
                .map_err(|e| invalid("cannot be read").with_source(e))?;
            let certs = CertificateDer::pem_slice_iter(&pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| invalid("is not PEM").with_source(e))?;
            if certs.is_empty() {
                return Err(invalid("holds no certificate"));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| invalid("holds an invalid certificate").with_source(e))?;
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for error in &found.errors {
                tracing::debug!(error = %EscapedDisplay(&error), "a system root certificate could not be loaded");
            }
            let (added, ignored) = roots.add_parsable_certificates(found.certs);
            tracing::debug!(added, ignored, "system root certificates");
        }
    }
    let provider = Arc::new(ring_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| {
            ManagementError::new(
                ManagementErrorKind::InvalidOptions,
                "no TLS protocol version",
            )
            .with_source(e)
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(
            ManagementClient::path(&["queues", "/", "a.b-c_d~"]),
            "api/queues/%2F/a.b-c_d~"
        );
        assert_eq!(
            ManagementClient::path(&["bindings", "v h", "e", "module.#", "q", "ü?x/y"]),
            "api/bindings/v%20h/e/module.%23/q/%C3%BC%3Fx%2Fy"
        );
    }

    #[test]
    fn paths_join_under_a_prefix() {
        let client = ManagementClient::new(&ManagementOptions::new(
            "http://guest:pw@127.0.0.1:15672/rabbit",
        ))
        .unwrap();
        assert_eq!(client.url(), "http://127.0.0.1:15672/rabbit");
        let joined = client
            .inner
            .base
            .join(&ManagementClient::path(&["queues", "/"]))
            .unwrap();
        assert_eq!(
            joined.as_str(),
            "http://127.0.0.1:15672/rabbit/api/queues/%2F"
        );
        assert!(!format!("{client:?}").contains("pw"));
    }

    #[test]
    fn an_unusable_ca_file_is_invalid_options() {
        let missing =
            ManagementOptions::new("https://localhost:15671").ca_file("/nonexistent/mesh-ca.pem");
        assert_eq!(
            ManagementClient::new(&missing).unwrap_err().kind(),
            ManagementErrorKind::InvalidOptions
        );
    }
}
