//! `mesh-audit run --management-url`: the logger's transport asks the given API for its
//! queue's bindings, and refuses, with a warning, to send credentials in clear to a host
//! that is not loopback.

mod common;

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::TempStore;
use mesh_testkit::{eventually, TestVhost};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::process::{Child, Command};

const WAIT: Duration = Duration::from_secs(60);

/// A fake management API on loopback that answers `[]` and records each request's head
/// before answering.
async fn fake_api() -> (
    SocketAddr,
    Arc<Mutex<Vec<String>>>,
    tokio::task::JoinHandle<()>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("binding");
    let addr = listener.local_addr().expect("local address");
    let heads = Arc::new(Mutex::new(Vec::new()));
    let recorded = heads.clone();
    let task = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let recorded = recorded.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65536 {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                recorded
                    .lock()
                    .expect("the heads lock")
                    .push(String::from_utf8_lossy(&head).into_owned());
                let _ = stream
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                          content-length: 2\r\nconnection: close\r\n\r\n[]",
                    )
                    .await;
                let _ = stream.shutdown().await;
            });
        }
    });
    (addr, heads, task)
}

fn spawn_logger(url: &str, store: &str, management_url: &str, log: &std::path::Path) -> Child {
    let log = std::fs::File::create(log).expect("the log file");
    Command::new(env!("CARGO_BIN_EXE_mesh-audit"))
        .args(["run", "--node", "n1", "--store", store])
        .args(["--management-url", management_url])
        .env("MESH_URL", url)
        .env_remove("MESH_MANAGEMENT_URL")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .expect("starting mesh-audit")
}

async fn wait_consuming(vhost: &TestVhost) {
    eventually(WAIT, "mesh-audit consuming its queue", || async {
        let queues = vhost.list_queues().await.ok()?;
        queues
            .iter()
            .any(|q| q.name == "n1.audit-logger.events" && q.consumers == 1)
            .then_some(())
    })
    .await;
}

async fn stop(child: Child) {
    let pid = child.id().expect("running");
    kill(
        Pid::from_raw(i32::try_from(pid).expect("a pid")),
        Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let output = tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("stopped in time")
        .expect("an exit status");
    assert_eq!(output.status.code(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_given_management_url_is_used() {
    let vhost = TestVhost::create("audit-mgmt").await.expect("a test vhost");
    let (addr, heads, task) = fake_api().await;
    let temp = TempStore::sqlite();
    let log = std::env::temp_dir().join(format!("mesh-audit-mgmt-{}.log", std::process::id()));
    let child = spawn_logger(
        &vhost.url(),
        temp.url(),
        &format!("http://127.0.0.1:{}", addr.port()),
        &log,
    );
    let wanted = format!(
        "GET /api/queues/{}/n1.audit-logger.events/bindings ",
        vhost.name()
    );
    eventually(WAIT, "the logger asking the fake API", || async {
        heads
            .lock()
            .expect("the heads lock")
            .iter()
            .any(|head| head.starts_with(&wanted))
            .then_some(())
    })
    .await;
    stop(child).await;
    task.abort();
    let _ = std::fs::remove_file(&log);
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_to_a_remote_host_is_a_warning_and_no_request() {
    let vhost = TestVhost::create("audit-mgmt-insecure")
        .await
        .expect("a test vhost");
    let temp = TempStore::sqlite();
    let log = std::env::temp_dir().join(format!(
        "mesh-audit-mgmt-insecure-{}.log",
        std::process::id()
    ));
    let child = spawn_logger(
        &vhost.url(),
        temp.url(),
        "http://rabbit-management.example:15672",
        &log,
    );
    wait_consuming(&vhost).await;
    stop(child).await;
    let text = std::fs::read_to_string(&log).expect("the log");
    assert!(
        text.contains("management API not used")
            && text.contains("refusing to send credentials in clear"),
        "{text}"
    );
    assert!(!text.contains(":guest@"), "{text}");
    let _ = std::fs::remove_file(&log);
    vhost.delete().await.unwrap();
}
