//! `mesh-audit run --management-url`: the logger's transport asks the given API for its
//! queue's bindings, and refuses, with a warning, to send credentials in clear to a host
//! that is not loopback.

use std::process::Stdio;
use std::time::Duration;

use crate::common::TempStore;
use mesh_testkit::{eventually, RecordingServer, TestVhost};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::Child;

const WAIT: Duration = Duration::from_secs(60);

fn spawn_logger(url: &str, store: &str, management_url: &str, log: &std::path::Path) -> Child {
    let log = std::fs::File::create(log).expect("the log file");
    crate::common::mesh_audit()
        .args(["run", "--node", "n1", "--store", store])
        .args(["--management-url", management_url])
        .env("MESH_URL", url)
        .env_remove("MESH_MANAGEMENT_URL")
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
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
    let fake = RecordingServer::start("[]").await.expect("a fake API");
    let addr = fake.addr();
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
        fake.heads()
            .iter()
            .any(|head| head.starts_with(&wanted))
            .then_some(())
    })
    .await;
    stop(child).await;
    drop(fake);
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
