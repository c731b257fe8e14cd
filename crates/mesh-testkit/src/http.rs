//! HTTP for tests, both ways.
//!
//! - [`RecordingServer`]: a fake HTTP server on loopback that records the head of every
//!   request it gets, for tests that must show what a client sent (or that it sent nothing):
//!   the management API client's credential rule, which URL a command asked. HTTP is spoken
//!   by `hyper`; the server answers every request with `200` and the same JSON body, after
//!   recording it, so a request the client saw answered is always recorded.
//! - [`get`] and [`must_get`]: one `GET` to a local endpoint of the process under test
//!   (`/metrics`, `/livez`, `/readyz`), the status and the body.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

/// How long one [`get`] may take, connecting included.
const GET_TIMEOUT: Duration = Duration::from_secs(10);

/// A recording HTTP server; stops when dropped.
#[derive(Debug)]
pub struct RecordingServer {
    addr: SocketAddr,
    heads: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl RecordingServer {
    /// Listens on a free loopback port and answers every request with `200` and `body`
    /// (`content-type: application/json`).
    pub async fn start(body: &'static str) -> anyhow::Result<RecordingServer> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding a loopback port")?;
        let addr = listener.local_addr()?;
        let heads = Arc::new(Mutex::new(Vec::new()));
        let recorded = heads.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let recorded = recorded.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                        if let Ok(mut heads) = recorded.lock() {
                            heads.push(head(&request));
                        }
                        let mut response =
                            Response::new(Full::new(Bytes::from_static(body.as_bytes())));
                        response
                            .headers_mut()
                            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                        async move { Ok::<_, Infallible>(response) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(RecordingServer { addr, heads, task })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The heads of the requests it got, in order: the request line
    /// (`GET /api/queues/%2F HTTP/1.1`), then one `name: value` line per header, names in
    /// lowercase.
    pub fn heads(&self) -> Vec<String> {
        self.heads.lock().map(|h| h.clone()).unwrap_or_default()
    }
}

impl Drop for RecordingServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The request line and the headers, as text.
fn head(request: &Request<Incoming>) -> String {
    let mut text = format!(
        "{} {} {:?}\r\n",
        request.method(),
        request.uri(),
        request.version()
    );
    for (name, value) in request.headers() {
        text.push_str(&format!(
            "{name}: {}\r\n",
            String::from_utf8_lossy(value.as_bytes())
        ));
    }
    text
}

/// `GET path` on `addr` (HTTP/1.1, `Connection: close`): the status code and the body;
/// `None` when nothing accepts the connection, the answer is not HTTP (or not UTF-8), or
/// it takes over 10 s. For polling an endpoint until it answers, with
/// [`eventually`](crate::eventually). The body is taken as sent: the endpoints tested send a
/// `content-length`, not chunks.
pub async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        let status = head
            .strip_prefix("HTTP/1.")?
            .split(' ')
            .nth(1)?
            .parse()
            .ok()?;
        Some((status, body.to_owned()))
    };
    tokio::time::timeout(GET_TIMEOUT, exchange)
        .await
        .ok()
        .flatten()
}

/// [`get`], which must answer.
///
/// # Panics
///
/// When [`get`] returns `None`, naming the URL.
pub async fn must_get(addr: SocketAddr, path: &str) -> (u16, String) {
    get(addr, path)
        .await
        .unwrap_or_else(|| panic!("no HTTP answer from http://{addr}{path}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn get_returns_the_status_and_body_and_the_server_records_the_head() {
        let server = RecordingServer::start(r#"{"ok":true}"#)
            .await
            .expect("a recording server");
        let (status, body) = must_get(server.addr(), "/metrics?x=1").await;
        assert_eq!((status, body.as_str()), (200, r#"{"ok":true}"#));
        let heads = server.heads();
        assert_eq!(heads.len(), 1);
        assert!(
            heads[0].starts_with("GET /metrics?x=1 HTTP/1.1\r\n"),
            "{heads:?}"
        );
    }

    #[tokio::test]
    async fn get_is_none_when_nothing_listens_or_the_answer_is_not_http() {
        let closed = {
            let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
            listener.local_addr().expect("an address")
        };
        assert_eq!(get(closed, "/").await, None);

        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let addr = listener.local_addr().expect("an address");
        let garbage = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.expect("a connection");
            let mut request = [0u8; 256];
            let _ = stream.read(&mut request).await;
            let _ = stream.write_all(b"SSH-2.0-not-http\r\n\r\nbody").await;
        });
        assert_eq!(get(addr, "/").await, None);
        garbage.await.expect("the fake server ran");
    }
}
