//! Integration tests: the real `mesh` binary against RabbitMQ, each test in a vhost of its
//! own (`mesh_testkit::TestVhost`), every wait bounded.

mod access;
mod access_drift;
mod answers;
mod audit;
mod audit_run;
mod call;
mod certificates;
mod console;
mod contract;
mod contract_docs;
mod contract_live;
mod contract_pairs;
mod dead_provenance;
mod dry_run;
mod emit_tail;
mod errors;
mod escaping;
mod hostile;
mod limits;
mod log_lines;
mod login;
mod logs;
mod management;
mod metrics;
mod outbox;
mod profiles;
mod replay;
mod reply_migration;
mod saga;
mod schedule;
mod secrets;
mod service_example;
mod shutdown;
mod status;
mod tls;
mod topology;
mod topology_remove;
mod ux;

/// The `service` example's billing module (crates/mesh/examples/service), for
/// `service_example`.
#[path = "../../../mesh/examples/service/billing.rs"]
#[allow(dead_code)]
mod service_billing;

use std::process::{Output, Stdio};
use std::sync::Arc;
use std::time::Duration;

use mesh::amqp::{AmqpOptions, AmqpTransport};
use mesh_testkit::TestVhost;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, Command};

/// The node every test speaks as.
pub(crate) const NODE: &str = "clitest";

/// Long enough for a loaded 2-core machine, short enough to catch a hang.
pub(crate) const WAIT: Duration = Duration::from_secs(60);

/// `mesh` with a clean environment: the vhost's URL (or none), the test node, no colour.
pub(crate) fn mesh(url: Option<&str>) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mesh"));
    command
        .env_remove("MESH_URL")
        .env_remove("MESH_MANAGEMENT_URL")
        .env("MESH_NODE", NODE)
        .env("NO_COLOR", "1")
        .env_remove("RUST_BACKTRACE")
        .env_remove("MESH_AUDIT_STORE")
        .env_remove("MESH_QUEUE_TYPE")
        .env_remove("MESH_CONNECT_TIMEOUT")
        // No developer's config file or context either.
        .env_remove("MESH_CONFIG")
        .env_remove("MESH_CONTEXT")
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("mesh-cli-test-no-config"),
        )
        // The default audit store is never a developer's own.
        .env(
            "XDG_DATA_HOME",
            std::env::temp_dir().join("mesh-cli-test-no-data"),
        )
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(url) = url {
        command.env("MESH_URL", url);
    }
    command
}

/// Runs `mesh` to completion within [`WAIT`].
pub(crate) async fn run(url: Option<&str>, args: &[&str]) -> Output {
    let child = mesh(url)
        .args(args)
        .spawn()
        .expect("the mesh binary starts");
    finish(child).await
}

/// `mesh tail <pattern> <args…>` on `url`, once it says on stderr that its listener is bound
/// (so what is published next reaches it); its stderr's remaining lines come with it.
pub(crate) async fn tail(
    url: &str,
    pattern: &str,
    args: &[&str],
) -> (Child, Lines<BufReader<ChildStderr>>) {
    let mut tail = mesh(Some(url))
        .arg("tail")
        .arg(pattern)
        .args(args)
        .spawn()
        .expect("tail starts");
    let mut errors = BufReader::new(tail.stderr.take().expect("stderr piped")).lines();
    let listening = tokio::time::timeout(WAIT, errors.next_line())
        .await
        .expect("tail starts listening in time")
        .expect("stderr readable")
        .unwrap_or_default();
    assert!(
        listening.contains(&format!("listening on {pattern}")),
        "{listening}"
    );
    (tail, errors)
}

/// Waits for a started `mesh` within [`WAIT`].
pub(crate) async fn finish(child: Child) -> Output {
    tokio::time::timeout(WAIT, child.wait_with_output())
        .await
        .expect("mesh finished in time")
        .expect("mesh's output is readable")
}

/// The exit code (panics on a signal).
pub(crate) fn code(output: &Output) -> i32 {
    output.status.code().expect("mesh exited, not killed")
}

pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts the exit code, showing both streams when it is not the expected one.
pub(crate) fn assert_code(output: &Output, expected: i32) {
    assert_eq!(
        code(output),
        expected,
        "stdout: {}\nstderr: {}",
        stdout(output),
        stderr(output)
    );
}

/// stdout's one JSON line.
pub(crate) fn json(output: &Output) -> serde_json::Value {
    let text = stdout(output);
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("not one JSON value ({e}): {text}"))
}

/// A fresh vhost on the shared broker.
pub(crate) async fn vhost(prefix: &str) -> TestVhost {
    TestVhost::create(prefix)
        .await
        .expect("a test vhost on the shared RabbitMQ (see mesh-testkit)")
}

/// A transport to the vhost, as a service would have.
pub(crate) async fn transport(options: AmqpOptions) -> Arc<AmqpTransport> {
    Arc::new(
        mesh::amqp::connect(options.connection_name("cli-test-service"))
            .await
            .expect("the test service connects"),
    )
}

/// The vhost's AMQP options.
pub(crate) fn options(vhost: &TestVhost) -> AmqpOptions {
    vhost.url().parse().expect("the vhost URL parses")
}
