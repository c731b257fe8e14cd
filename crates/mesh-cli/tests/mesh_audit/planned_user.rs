//! The audit logger run as the access plan's user: on a private node (users are global to a
//! broker), with the plan applied, it starts without a management-API warning, and its
//! stale-binding clean-up runs (a binding the operator left on its queue is removed).

use std::process::Stdio;
use std::time::Duration;

use crate::common::TempStore;
use mesh::amqp::access::{self, AccessSpec, Password, Passwords};
use mesh::amqp::management::{ManagementClient, ManagementOptions};
use mesh::raw::Name;
use mesh_testkit::{eventually, NodeOptions, PrivateNode};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::Child;

const WAIT: Duration = Duration::from_secs(60);
const QUEUE: &str = "n1.audit-logger.events";

fn spawn_logger(url: &str, store: &str, management_url: &str, log: &std::path::Path) -> Child {
    let log = std::fs::File::create(log).expect("the log file");
    crate::common::mesh_audit()
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

async fn wait_consuming(node: &PrivateNode) {
    eventually(WAIT, "mesh-audit consuming its queue", || async {
        let queues = node.list_queues("/").await.ok()?;
        queues
            .iter()
            .any(|q| q.name == QUEUE && q.consumers == 1)
            .then_some(())
    })
    .await;
}

async fn keys(api: &ManagementClient) -> Vec<String> {
    let mut keys: Vec<String> = api
        .queue_bindings("/", QUEUE)
        .await
        .expect("the logger queue's bindings")
        .into_iter()
        .filter(|b| b.source == "mesh.events")
        .map(|b| b.routing_key)
        .collect();
    keys.sort();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_planned_logger_user_reads_its_bindings_and_removes_stale_ones() {
    let node = PrivateNode::start(NodeOptions::default().management(true))
        .await
        .expect("a private RabbitMQ node with management");
    let port = node.management_port().expect("management enabled");
    let management_url = format!("http://127.0.0.1:{port}");
    // guest administers the private node: it applies the plan, and declares mesh's exchanges
    // (no planned user but the operator may).
    let admin = ManagementClient::new(&ManagementOptions::new(format!(
        "http://guest:guest@127.0.0.1:{port}"
    )))
    .unwrap();
    let spec = AccessSpec::new(Name::parse("n1").unwrap()).audit_logger(true);
    let grants = access::grants(&spec);
    let mut passwords = Passwords::new();
    for grant in &grants {
        passwords.insert(
            grant.user.clone(),
            Password::new(format!("pw-{}-{}", grant.user, std::process::id())),
        );
    }
    let broker = eventually(WAIT, "the management API answers", || async {
        access::read(&admin, "/").await.ok()
    })
    .await;
    let plan = access::plan(&grants, &broker, &passwords, "");
    access::apply(&admin, "/", &grants, &plan, &passwords)
        .await
        .unwrap();
    let base = mesh::amqp::connect(node.url().parse().unwrap())
        .await
        .expect("guest declares mesh's exchanges");
    base.close().await;

    let user = access::audit_user("", &Name::parse("n1").unwrap());
    let password = format!("pw-{user}-{}", std::process::id());
    let url = format!("amqp://{user}:{password}@127.0.0.1:{}/%2F", node.port());
    let temp = TempStore::sqlite();
    let log = std::env::temp_dir().join(format!(
        "mesh-audit-planned-user-{}.log",
        std::process::id()
    ));

    // A first start declares its queue; the operator then leaves a binding it does not want.
    let child = spawn_logger(&url, temp.url(), &management_url, &log);
    wait_consuming(&node).await;
    stop(child).await;
    admin
        .bind("/", "mesh.events", QUEUE, "stale.#")
        .await
        .unwrap();
    assert_eq!(keys(&admin).await, ["#", "stale.#"]);

    let child = spawn_logger(&url, temp.url(), &management_url, &log);
    wait_consuming(&node).await;
    stop(child).await;
    assert_eq!(keys(&admin).await, ["#"], "the stale binding is removed");
    let text = std::fs::read_to_string(&log).expect("the log");
    assert!(!text.contains("management API"), "{text}");
    assert!(!text.contains(&password), "{text}");
    let _ = std::fs::remove_file(&log);
}
