//! A fake HTTP server on loopback that records the head of every request it gets, for tests
//! that must show what a client sent (or that it sent nothing): the management API client's
//! credential rule, which URL a command asked.
//!
//! HTTP is spoken by `hyper`; the server answers every request with `200` and the same JSON
//! body, after recording it, so a request the client saw answered is always recorded.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use anyhow::Context;
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

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
