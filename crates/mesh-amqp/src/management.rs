//! The little of RabbitMQ's management HTTP API mesh needs: the bindings of a queue.
//!
//! AMQP can add and remove bindings but not list them, so removing the bindings a durable
//! queue no longer asks for needs `GET /api/queues/{vhost}/{queue}/bindings`. That is one
//! plain-HTTP GET with basic auth, written here over a TCP stream rather than pulling an HTTP
//! client into every service. When the API is unreachable the caller logs a warning and
//! falls back to the bindings it recorded itself.

use std::time::Duration;

use mesh_core::naming::EVENTS_EXCHANGE;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::options::{percent_encode, AmqpOptions};
use crate::topology::BindingDecl;

/// How long one API request may take.
const TIMEOUT: Duration = Duration::from_secs(5);
/// The largest response read.
const MAX_RESPONSE: usize = 16 * 1024 * 1024;

/// Where the API is, and the credentials.
#[derive(Clone)]
pub(crate) struct Management {
    base: Result<Base, String>,
    user: String,
    password: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Base {
    /// `host:port`, as the TCP connect and the `Host` header want it.
    authority: String,
    /// A path prefix (the API may be served under one), without a trailing `/`.
    prefix: String,
}

impl std::fmt::Debug for Management {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Management")
            .field("base", &self.base)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

impl Management {
    pub(crate) fn new(options: &AmqpOptions) -> Management {
        let base = match options.get_management_url() {
            Some(url) => parse_base(&url),
            None => Err("no management URL".to_owned()),
        };
        Management {
            base,
            user: options.get_user().to_owned(),
            password: options.get_password().to_owned(),
        }
    }

    /// The bindings of `queue` on `mesh.events`.
    pub(crate) async fn event_bindings(
        &self,
        vhost: &str,
        queue: &str,
    ) -> Result<Vec<BindingDecl>, String> {
        let base = self.base.as_ref().map_err(Clone::clone)?;
        let path = format!(
            "{}/api/queues/{}/{}/bindings",
            base.prefix,
            percent_encode(vhost),
            percent_encode(queue)
        );
        let body = tokio::time::timeout(TIMEOUT, self.get(base, &path))
            .await
            .map_err(|_| format!("no answer in {TIMEOUT:?}"))??;
        let rows: Value =
            serde_json::from_slice(&body).map_err(|e| format!("the answer is not JSON: {e}"))?;
        let rows = rows
            .as_array()
            .ok_or_else(|| "the answer is not a JSON array".to_owned())?;
        let mut bindings = Vec::new();
        for row in rows {
            let text = |key: &str| row.get(key).and_then(Value::as_str).unwrap_or_default();
            if text("source") != EVENTS_EXCHANGE || text("destination_type") != "queue" {
                continue;
            }
            let has_arguments = row
                .get("arguments")
                .and_then(Value::as_object)
                .is_some_and(|a| !a.is_empty());
            if has_arguments {
                // Not one of ours: mesh binds without arguments.
                tracing::debug!(
                    queue,
                    pattern = text("routing_key"),
                    "skipping a binding with arguments"
                );
                continue;
            }
            bindings.push(BindingDecl::new(
                EVENTS_EXCHANGE,
                queue,
                text("routing_key"),
            ));
        }
        Ok(bindings)
    }

    async fn get(&self, base: &Base, path: &str) -> Result<Vec<u8>, String> {
        let mut stream = tokio::net::TcpStream::connect(&base.authority)
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", base.authority))?;
        let credentials = base64(format!("{}:{}", self.user, self.password).as_bytes());
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Basic {credentials}\r\n\
             Accept: application/json\r\nConnection: close\r\n\r\n",
            base.authority
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("sending the request failed: {e}"))?;
        let mut response = Vec::new();
        (&mut stream)
            .take(MAX_RESPONSE as u64)
            .read_to_end(&mut response)
            .await
            .map_err(|e| format!("reading the answer failed: {e}"))?;
        parse_response(&response)
    }
}

/// `http://host[:port][/prefix]`.
fn parse_base(url: &str) -> Result<Base, String> {
    let rest = match url.split_once("://") {
        Some(("http", rest)) => rest,
        Some((scheme, _)) => return Err(format!("scheme `{scheme}` is not supported (only http)")),
        None => return Err(format!("`{url}` is not a URL")),
    };
    let (authority, prefix) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    // Credentials in the URL are not used: the API gets the AMQP ones.
    let authority = authority.rsplit_once('@').map_or(authority, |(_, a)| a);
    if authority.is_empty() {
        return Err(format!("`{url}` has no host"));
    }
    let has_port = match authority.rfind(']') {
        Some(end) => authority[end..].contains(':'),
        None => authority.contains(':'),
    };
    let authority = if has_port {
        authority.to_owned()
    } else {
        format!("{authority}:80")
    };
    Ok(Base {
        authority,
        prefix: prefix.to_owned(),
    })
}

/// The body of a `200` answer (chunked or not).
fn parse_response(response: &[u8]) -> Result<Vec<u8>, String> {
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| "the answer has no header end".to_owned())?;
    let head = String::from_utf8_lossy(&response[..split]);
    let body = &response[split + 4..];
    let mut lines = head.lines();
    let status = lines.next().unwrap_or_default();
    let code = status.split_whitespace().nth(1).unwrap_or_default();
    if code != "200" {
        return Err(format!("the API answered `{status}`"));
    }
    let chunked = lines.any(|line| {
        line.split_once(':').is_some_and(|(name, value)| {
            name.trim().eq_ignore_ascii_case("transfer-encoding")
                && value.to_ascii_lowercase().contains("chunked")
        })
    });
    if chunked {
        dechunk(body)
    } else {
        Ok(body.to_vec())
    }
}

fn dechunk(mut body: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let end = body
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or_else(|| "a chunk has no size line".to_owned())?;
        let size_line = String::from_utf8_lossy(&body[..end]);
        let size_text = size_line.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size `{size_text}`"))?;
        body = &body[end + 2..];
        if size == 0 {
            return Ok(out);
        }
        let chunk = body
            .get(..size)
            .ok_or_else(|| "a chunk is cut short".to_owned())?;
        out.extend_from_slice(chunk);
        body = body.get(size + 2..).unwrap_or_default();
    }
}

/// Standard base64 with padding, for the `Authorization` header.
fn base64(input: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(input.len().div_ceil(3) * 4);
    for chunk in input.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
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
    fn base64_matches_the_rfc_examples() {
        for (plain, encoded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("guest:guest", "Z3Vlc3Q6Z3Vlc3Q="),
        ] {
            assert_eq!(base64(plain.as_bytes()), encoded);
        }
    }

    #[test]
    fn parses_base_urls() {
        assert_eq!(
            parse_base("http://h:15672").unwrap(),
            Base {
                authority: "h:15672".into(),
                prefix: String::new()
            }
        );
        assert_eq!(
            parse_base("http://u:p@[::1]:8080/rabbit/").unwrap(),
            Base {
                authority: "[::1]:8080".into(),
                prefix: "/rabbit".into()
            }
        );
        assert_eq!(parse_base("http://h").unwrap().authority, "h:80");
        assert!(parse_base("https://h").is_err());
        assert!(parse_base("h:15672").is_err());
    }

    #[test]
    fn reads_plain_and_chunked_answers() {
        let plain = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n[]";
        assert_eq!(parse_response(plain).unwrap(), b"[]");
        let chunked =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[{\r\n1\r\n}\r\n1\r\n]\r\n0\r\n\r\n";
        assert_eq!(parse_response(chunked).unwrap(), b"[{}]");
        assert!(parse_response(b"HTTP/1.1 401 Unauthorized\r\n\r\n").is_err());
        assert!(parse_response(b"garbage").is_err());
        assert!(
            parse_response(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n").is_err()
        );
    }
}
