//! The shared broker's vhosts, permissions and users through its management HTTP API, for
//! [`TestVhost`](crate::TestVhost): one loopback HTTP request each, where `rabbitmqctl` boots
//! an Erlang VM per command (about 0.8 s on a quiet machine, and over its 60 s limit on a
//! loaded one: the cause of most failures of the shared-broker tests under load).
//!
//! Where the API is: [`MANAGEMENT_URL_ENV`] (`http://host:port`, plain HTTP only: the kit
//! speaks to a local broker), by default `http://127.0.0.1:15672`, as the user of the shared
//! broker's AMQP URL (`BrokerUrl`, `guest` by default). When nothing listens there (a
//! broker without the management plugin) every call answers [`Answer::NoApi`] and the caller
//! falls back to `rabbitmqctl`; any other failure (a refused login, an error status, no
//! answer within 60 s) is an error.
//!
//! A private node runs without the plugin unless a test asks for it
//! ([`NodeOptions::management`](crate::NodeOptions::management)); with it,
//! [`PrivateNode::add_vhost`](crate::PrivateNode::add_vhost) goes through it too, else
//! through `rabbitmqctl` (the node-control tool such a node needs anyway).

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs as _};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// Env var naming the shared broker's management API, `http://host:port`.
pub const MANAGEMENT_URL_ENV: &str = "MESH_TEST_MANAGEMENT_URL";

const DEFAULT_MANAGEMENT_URL: &str = "http://127.0.0.1:15672";
/// The same limit as a `rabbitmqctl` run's: a request this slow means "it hangs".
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// What the API said to a request that reached it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Done (a 2xx status).
    Done,
    /// Nothing listens at the API's address: use `rabbitmqctl`.
    NoApi,
}

/// The shared broker's management API, as the broker URL's user.
#[derive(Debug, Clone)]
pub(crate) struct Management {
    host: String,
    port: u16,
    authorization: String,
}

impl Management {
    /// From [`MANAGEMENT_URL_ENV`] (or the default), as `user` with `password` (the shared
    /// broker's AMQP credentials, decoded).
    pub(crate) fn from_env(user: &str, password: &str) -> anyhow::Result<Management> {
        let url = std::env::var(MANAGEMENT_URL_ENV)
            .ok()
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_MANAGEMENT_URL.to_owned());
        Management::new(url.trim(), user, password)
            .with_context(|| format!("bad {MANAGEMENT_URL_ENV}"))
    }

    /// A private node's API on `127.0.0.1:port`, as `guest` (a private node's operator).
    pub(crate) fn loopback(port: u16) -> Management {
        Management {
            host: "127.0.0.1".to_owned(),
            port,
            authorization: format!("Basic {}", base64(b"guest:guest")),
        }
    }

    fn new(url: &str, user: &str, password: &str) -> anyhow::Result<Management> {
        let hostport = url
            .strip_prefix("http://")
            .ok_or_else(|| anyhow!("`{url}`: the test kit speaks plain http:// only"))?
            .trim_end_matches('/');
        if hostport.contains('/') || hostport.contains('@') {
            bail!("`{url}`: give only http://host:port");
        }
        // `[::1]:15672` keeps its brackets; a bare `host:port` splits on the last colon.
        let (host, port) = if let Some(end) = hostport.find(']') {
            match hostport[end + 1..].strip_prefix(':') {
                Some(p) => (&hostport[..=end], p.parse().context("bad port")?),
                None => (&hostport[..=end], 80),
            }
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, p.parse().context("bad port")?),
                None => (hostport, 80),
            }
        };
        if host.is_empty() {
            bail!("`{url}` has no host");
        }
        let credentials = format!("{user}:{password}");
        Ok(Management {
            host: host.to_owned(),
            port,
            authorization: format!("Basic {}", base64(credentials.as_bytes())),
        })
    }

    /// Creates vhost `name` (`PUT /api/vhosts/<name>`; the broker answers once it runs).
    pub(crate) async fn create_vhost(&self, name: &str) -> anyhow::Result<Answer> {
        let path = format!("/api/vhosts/{}", segment(name));
        self.send("PUT", &path, "{}").await
    }

    /// Gives `user` every permission (`.*` thrice) on `vhost`.
    pub(crate) async fn grant_all(&self, vhost: &str, user: &str) -> anyhow::Result<Answer> {
        let path = format!("/api/permissions/{}/{}", segment(vhost), segment(user));
        self.send("PUT", &path, EVERY_PERMISSION).await
    }

    /// Imports RabbitMQ definitions (`POST /api/definitions`, the JSON of
    /// `rabbitmqctl import_definitions`).
    pub(crate) async fn import_definitions(&self, definitions: &str) -> anyhow::Result<Answer> {
        self.send("POST", "/api/definitions", definitions).await
    }

    /// Deletes vhost `name` and everything in it.
    pub(crate) async fn delete_vhost(&self, name: &str) -> anyhow::Result<Answer> {
        let path = format!("/api/vhosts/{}", segment(name));
        self.send("DELETE", &path, "").await
    }

    /// Deletes user `name`.
    pub(crate) async fn delete_user(&self, name: &str) -> anyhow::Result<Answer> {
        let path = format!("/api/users/{}", segment(name));
        self.send("DELETE", &path, "").await
    }

    /// [`Management::delete_vhost`], blocking (for `Drop`).
    pub(crate) fn delete_vhost_blocking(&self, name: &str) -> anyhow::Result<Answer> {
        let path = format!("/api/vhosts/{}", segment(name));
        self.send_blocking("DELETE", &path, "")
    }

    /// [`Management::delete_user`], blocking (for `Drop`).
    pub(crate) fn delete_user_blocking(&self, name: &str) -> anyhow::Result<Answer> {
        let path = format!("/api/users/{}", segment(name));
        self.send_blocking("DELETE", &path, "")
    }

    fn request(&self, method: &str, path: &str, body: &str) -> String {
        format!(
            "{method} {path} HTTP/1.1\r\nHost: {}:{}\r\nAuthorization: {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.host,
            self.port,
            self.authorization,
            body.len()
        )
    }

    fn describe(&self, method: &str, path: &str) -> String {
        format!("{method} http://{}:{}{path}", self.host, self.port)
    }

    async fn send(&self, method: &str, path: &str, body: &str) -> anyhow::Result<Answer> {
        let what = self.describe(method, path);
        let exchange = async {
            let stream = match tokio::net::TcpStream::connect((
                self.host.trim_matches(['[', ']']),
                self.port,
            ))
            .await
            {
                Ok(stream) => stream,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => return Ok(None),
                Err(e) => return Err(anyhow::Error::new(e).context("connecting")),
            };
            let mut stream = stream;
            stream
                .write_all(self.request(method, path, body).as_bytes())
                .await?;
            let mut response = Vec::new();
            stream.read_to_end(&mut response).await?;
            Ok(Some(response))
        };
        let response = tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| anyhow!("`{what}` had no answer within {REQUEST_TIMEOUT:?}"))?
            .with_context(|| format!("`{what}`"))?;
        match response {
            None => Ok(Answer::NoApi),
            Some(response) => judge(&what, &response),
        }
    }

    fn send_blocking(&self, method: &str, path: &str, body: &str) -> anyhow::Result<Answer> {
        let what = self.describe(method, path);
        let addrs: Vec<SocketAddr> = (self.host.trim_matches(['[', ']']), self.port)
            .to_socket_addrs()
            .with_context(|| format!("`{what}`: resolving the host"))?
            .collect();
        let addr = addrs
            .first()
            .ok_or_else(|| anyhow!("`{what}`: the host resolves to nothing"))?;
        let mut stream = match TcpStream::connect_timeout(addr, REQUEST_TIMEOUT) {
            Ok(stream) => stream,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                return Ok(Answer::NoApi)
            }
            Err(e) => return Err(anyhow::Error::new(e).context(format!("`{what}`: connecting"))),
        };
        stream.set_read_timeout(Some(REQUEST_TIMEOUT))?;
        stream.set_write_timeout(Some(REQUEST_TIMEOUT))?;
        stream
            .write_all(self.request(method, path, body).as_bytes())
            .with_context(|| format!("`{what}`: sending"))?;
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .with_context(|| format!("`{what}`: reading the answer"))?;
        judge(&what, &response)
    }
}

const EVERY_PERMISSION: &str = r#"{"configure":".*","write":".*","read":".*"}"#;

/// A 2xx status is [`Answer::Done`]; anything else an error holding the status line and body.
fn judge(what: &str, response: &[u8]) -> anyhow::Result<Answer> {
    let text = String::from_utf8_lossy(response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status_line = head.lines().next().unwrap_or_default();
    let status: u16 = status_line
        .strip_prefix("HTTP/1.")
        .and_then(|rest| rest.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| anyhow!("`{what}`: not an HTTP answer: {status_line:?}"))?;
    if (200..300).contains(&status) {
        Ok(Answer::Done)
    } else {
        bail!("`{what}` answered {status}: {}", body.trim())
    }
}

/// One path segment, percent-encoded (a vhost or user name may hold `/`): everything but
/// RFC 3986's unreserved characters.
fn segment(name: &str) -> String {
    const UNRESERVED_COMPLEMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(name, UNRESERVED_COMPLEMENT).to_string()
}

/// Standard base64 with padding, for a Basic `Authorization` header.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_4648_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
            ("guest:guest", "Z3Vlc3Q6Z3Vlc3Q="),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64(plain.as_bytes()), encoded, "{plain:?}");
        }
    }

    #[test]
    fn the_url_gives_host_port_and_the_broker_s_user() {
        let m = Management::new("http://127.0.0.1:15672/", "guest", "guest").unwrap();
        assert_eq!((m.host.as_str(), m.port), ("127.0.0.1", 15672));
        assert_eq!(m.authorization, "Basic Z3Vlc3Q6Z3Vlc3Q=");
        let v6 = Management::new("http://[::1]:15673", "guest", "guest").unwrap();
        assert_eq!((v6.host.as_str(), v6.port), ("[::1]", 15673));
        assert!(Management::new("https://127.0.0.1:15671", "guest", "guest").is_err());
        assert!(Management::new("http://u:p@127.0.0.1:15672", "guest", "guest").is_err());
    }

    #[test]
    fn a_2xx_is_done_and_anything_else_an_error_with_the_body() {
        let done = judge(
            "PUT x",
            b"HTTP/1.1 201 Created\r\ncontent-length: 0\r\n\r\n",
        );
        assert_eq!(done.unwrap(), Answer::Done);
        let missing = judge(
            "DELETE x",
            b"HTTP/1.1 404 Not Found\r\n\r\n{\"error\":\"Object Not Found\"}",
        )
        .unwrap_err()
        .to_string();
        assert!(
            missing.contains("404") && missing.contains("Object Not Found"),
            "{missing}"
        );
        assert!(judge("GET x", b"SSH-2.0-x\r\n\r\n").is_err());
    }

    #[test]
    fn names_are_one_path_segment() {
        assert_eq!(segment("/"), "%2F");
        assert_eq!(segment("mesh-test-a_b.c~"), "mesh-test-a_b.c~");
    }

    #[tokio::test]
    async fn nothing_listening_is_no_api() {
        let closed = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap()
        };
        let m = Management::new(&format!("http://{closed}"), "guest", "guest").unwrap();
        assert_eq!(m.create_vhost("x").await.unwrap(), Answer::NoApi);
        assert_eq!(m.delete_vhost_blocking("x").unwrap(), Answer::NoApi);
    }
}
