//! Private RabbitMQ nodes for real: start, stop, start again, crash, restart, drop. Each boot
//! costs ~10 s, so the lifecycle is one test.

use std::net::TcpStream;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use amqprs::channel::{BasicPublishArguments, QueueDeclareArguments};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::BasicProperties;
use mesh_testkit::{eventually, shared_node, NodeOptions, PrivateNode};

const WAIT: Duration = Duration::from_secs(30);

/// Pids of live processes carrying the kit's marker for `node` (what the kit itself uses to
/// find a node's processes), to prove none is left.
fn node_processes(node: &str) -> Vec<String> {
    let wanted = format!("MESH_TESTKIT_NODE={node}");
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        let zombie = stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if !zombie
            && comm.trim() != "epmd"
            && env.split(|b| *b == 0).any(|v| v == wanted.as_bytes())
        {
            pids.push(format!("{pid} ({})", comm.trim()));
        }
    }
    pids
}

fn accepts_tcp(port: u16) -> bool {
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(1)).is_ok()
}

async fn connect(port: u16, name: &str) -> Connection {
    let args = OpenConnectionArguments::new("127.0.0.1", port, "guest", "guest")
        .connection_name(name)
        .finish();
    Connection::open(&args).await.expect("AMQP connection")
}

async fn messages_in(node: &PrivateNode, queue: &str) -> Option<u64> {
    node.list_queues("/")
        .await
        .expect("list_queues")
        .into_iter()
        .find(|q| q.name == queue)
        .map(|q| q.messages)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_node_stops_restarts_crashes_and_cleans_up() {
    let began = Instant::now();
    let node = PrivateNode::start(NodeOptions::default().heartbeat(5))
        .await
        .unwrap();
    eprintln!(
        "private node {} started in {:?}",
        node.name(),
        began.elapsed()
    );
    let (name, port, dir) = (node.name().to_owned(), node.port(), node.dir().to_owned());
    assert!(name.starts_with("mesh-test-") && name.ends_with("@localhost"));
    assert_eq!(node.url(), format!("amqp://guest:guest@127.0.0.1:{port}/"));
    assert!(node.is_running());
    assert!(accepts_tcp(port));
    assert!(node.log_file().exists());
    assert!(!node_processes(&name).is_empty());

    // A durable queue with one persistent message.
    let conn = connect(port, "lifecycle-test").await;
    let ch = conn.open_channel(None).await.unwrap();
    ch.queue_declare(QueueDeclareArguments::durable_client_named("durable-q"))
        .await
        .unwrap();
    ch.basic_publish(
        BasicProperties::default().with_persistence(true).finish(),
        b"survivor".to_vec(),
        BasicPublishArguments::new("", "durable-q"),
    )
    .await
    .unwrap();
    eventually(WAIT, "the message in durable-q", || async {
        (messages_in(&node, "durable-q").await == Some(1)).then_some(())
    })
    .await;

    // Memory alarm on and off.
    node.set_memory_alarm(true).await.unwrap();
    let alarms = node
        .rabbitmqctl(&["eval", "rabbit_alarm:get_alarms()."])
        .await
        .unwrap();
    assert!(alarms.contains("memory"), "{alarms}");
    node.set_memory_alarm(false).await.unwrap();
    let alarms = node
        .rabbitmqctl(&["eval", "rabbit_alarm:get_alarms()."])
        .await
        .unwrap();
    assert!(!alarms.contains("memory"), "{alarms}");

    // Forced close by connection name.
    assert_eq!(node.close_connections(Some("nomatch")).await.unwrap(), 0);
    assert_eq!(node.close_connections(Some("lifecycle")).await.unwrap(), 1);
    eventually(WAIT, "the client to see the close", || async {
        (!conn.is_open()).then_some(())
    })
    .await;

    // Graceful stop: port closed, data kept.
    let t = Instant::now();
    node.stop().await.unwrap();
    eprintln!("stop took {:?}", t.elapsed());
    assert!(!node.is_running());
    assert!(!accepts_tcp(port));
    assert!(
        node_processes(&name).is_empty(),
        "{:?}",
        node_processes(&name)
    );
    assert!(dir.join("mnesia").exists());

    let t = Instant::now();
    node.start_again().await.unwrap();
    eprintln!("start_again took {:?}", t.elapsed());
    assert_eq!((node.name(), node.port()), (name.as_str(), port));
    assert!(accepts_tcp(port));
    assert_eq!(messages_in(&node, "durable-q").await, Some(1));
    assert!(
        node.start_again().await.is_err(),
        "a running node must not start twice"
    );

    // Crash: every process gone, port closed; the data survives the restart.
    let t = Instant::now();
    node.kill().await.unwrap();
    eprintln!("kill took {:?}", t.elapsed());
    assert!(!accepts_tcp(port));
    assert!(
        node_processes(&name).is_empty(),
        "{:?}",
        node_processes(&name)
    );
    node.start_again().await.unwrap();
    assert_eq!(messages_in(&node, "durable-q").await, Some(1));
    let again = connect(port, "after-crash").await;
    assert!(again.is_open());

    // Drop: killed and removed, synchronously.
    drop(node);
    assert!(!dir.exists(), "{} left behind", dir.display());
    assert!(
        node_processes(&name).is_empty(),
        "{:?}",
        node_processes(&name)
    );
    assert!(!accepts_tcp(port));
}

#[tokio::test]
async fn a_node_that_cannot_boot_in_time_fails_and_leaves_nothing() {
    let err = PrivateNode::start(NodeOptions::default().boot_timeout(Duration::from_secs(1)))
        .await
        .unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains("did not boot"), "{text}");
    assert!(text.contains("timed out"), "{text}");
    // The error names the node: its directory and processes must be gone.
    let name = text
        .split_whitespace()
        .find(|w| w.starts_with("mesh-test-") && w.ends_with("@localhost"))
        .expect("node name in the error")
        .to_owned();
    let short = name.trim_end_matches("@localhost");
    assert!(!Path::new(&std::env::temp_dir()).join(short).exists());
    assert!(
        node_processes(&name).is_empty(),
        "{:?}",
        node_processes(&name)
    );
}

/// The port of the shared node as the first test to get it saw it.
static SHARED_PORT: OnceLock<u16> = OnceLock::new();

/// Every option set, to prove the config files reach the node.
fn shared_opts() -> NodeOptions {
    NodeOptions::default()
        .heartbeat(7)
        .max_message_size(1_048_576)
        .consumer_timeout_ms(5_000)
        .channel_tick_interval_ms(1_000)
        .extra_conf("disk_free_limit.absolute = 1MB")
        .management(true)
}

async fn use_shared_node() -> Arc<PrivateNode> {
    let node = shared_node("basic", shared_opts())
        .await
        .expect("shared node");
    let port = *SHARED_PORT.get_or_init(|| node.port());
    assert_eq!(node.port(), port, "both tests must get the same node");
    let conn = connect(node.port(), "shared").await;
    assert!(conn.is_open());
    conn.close().await.expect("close");
    // Different options under the same key are refused.
    assert!(shared_node("basic", NodeOptions::default()).await.is_err());
    node
}

#[tokio::test]
async fn shared_node_first_user_checks_the_options() {
    let node = use_shared_node().await;
    let env = node
        .rabbitmqctl(&[
            "eval",
            "[application:get_env(rabbit, K) || K <- [heartbeat, max_message_size, \
             consumer_timeout, channel_tick_interval, disk_free_limit]].",
        ])
        .await
        .unwrap();
    assert_eq!(
        env.split_whitespace().collect::<String>(),
        "[{ok,7},{ok,1048576},{ok,5000},{ok,1000},{ok,\"1MB\"}]",
        "{env}"
    );
    let management = node.management_port().expect("management port");
    assert!(accepts_tcp(management));
}

#[tokio::test]
async fn shared_node_second_user() {
    use_shared_node().await;
}

#[tokio::test]
async fn a_vhost_and_definitions_go_in_on_a_node_with_management() {
    let node = use_shared_node().await;
    node.add_vhost("kit-defs").await.unwrap();
    node.import_definitions(
        r#"{"users": [{"name": "kit-defs-user", "password": "kit-defs-pw", "tags": ""}],
            "permissions": [{"user": "kit-defs-user", "vhost": "kit-defs",
                             "configure": ".*", "write": ".*", "read": ".*"}]}"#,
    )
    .await
    .unwrap();
    for (user, password) in [("guest", "guest"), ("kit-defs-user", "kit-defs-pw")] {
        let args = OpenConnectionArguments::new("127.0.0.1", node.port(), user, password)
            .virtual_host("kit-defs")
            .finish();
        let conn = Connection::open(&args)
            .await
            .unwrap_or_else(|e| panic!("{user} opens the new vhost: {e}"));
        let channel = conn.open_channel(None).await.unwrap();
        channel
            .queue_declare(QueueDeclareArguments::new(&format!("{user}.q")))
            .await
            .unwrap_or_else(|e| panic!("{user} may configure there: {e}"));
        conn.close().await.unwrap();
    }
}
