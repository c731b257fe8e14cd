//! A minimal HTTP client for the telemetry endpoint.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET path` on a local HTTP endpoint: the status code and the body.
pub(crate) async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr)
            .await
            .expect("the endpoint accepts connections");
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream
            .write_all(request.as_bytes())
            .await
            .expect("request written");
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .await
            .expect("response read");
        response
    };
    let response = tokio::time::timeout(Duration::from_secs(30), exchange)
        .await
        .expect("the endpoint answers in time");
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .expect("an HTTP status line");
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.to_owned())
        .unwrap_or_default();
    (status, body)
}
