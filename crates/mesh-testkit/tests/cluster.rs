//! A private three-node cluster for real: it forms, finds a quorum queue's leader and the node
//! of a connection, loses a node to SIGKILL without losing the queue, and takes the node back.
//! One test: forming the cluster costs ~25 s.

use std::time::{Duration, Instant};

use amqprs::channel::{BasicPublishArguments, ConfirmSelectArguments, QueueDeclareArguments};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{BasicProperties, FieldTable, FieldValue};
use mesh_testkit::{eventually, shared_cluster, ClusterHarness, NodeOptions};

const WAIT: Duration = Duration::from_secs(60);
const QUEUE: &str = "cluster-test.q";

async fn connect(port: u16, name: &str) -> Connection {
    let args = OpenConnectionArguments::new("127.0.0.1", port, "guest", "guest")
        .virtual_host("kit")
        .connection_name(name)
        .finish();
    Connection::open(&args).await.expect("AMQP connection")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_forms_fails_over_and_takes_a_killed_node_back() {
    let began = Instant::now();
    let cluster = shared_cluster("kit", NodeOptions::default())
        .await
        .expect("a private RabbitMQ cluster (is rabbitmq-server installed?)");
    eprintln!("cluster formed in {:?}", began.elapsed());
    assert_eq!(cluster.nodes().len(), 3);
    assert_eq!(cluster.running(), vec![0, 1, 2]);
    for i in 0..3 {
        assert_eq!(cluster.running_nodes_seen_by(i).await.unwrap().len(), 3);
    }
    let url = cluster.url("a/b");
    let ports: Vec<u16> = cluster.nodes().iter().map(|n| n.port()).collect();
    assert_eq!(
        url,
        format!(
            "amqp://guest:guest@127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}/a%2Fb",
            ports[0], ports[1], ports[2]
        )
    );
    assert!(cluster
        .url_in_order(&[2, 0, 1], "v")
        .contains(&format!("@127.0.0.1:{},", ports[2])));
    cluster.add_vhost("kit").await.unwrap();

    // A quorum queue declared through node 1 is led by node 1 (the default leader locator is
    // the client's node), with a member on every node.
    let conn = connect(ports[1], "kit-client").await;
    let channel = conn.open_channel(None).await.unwrap();
    let mut args = FieldTable::new();
    args.insert(
        "x-queue-type".try_into().unwrap(),
        FieldValue::S("quorum".try_into().unwrap()),
    );
    channel
        .queue_declare(
            QueueDeclareArguments::new(QUEUE)
                .durable(true)
                .arguments(args)
                .finish(),
        )
        .await
        .unwrap();
    channel
        .confirm_select(ConfirmSelectArguments::default())
        .await
        .unwrap();
    for _ in 0..10 {
        channel
            .basic_publish(
                BasicProperties::default().with_delivery_mode(2).finish(),
                b"x".to_vec(),
                BasicPublishArguments::new("", QUEUE),
            )
            .await
            .unwrap();
    }
    let queues = cluster.await_queues_in_sync("kit", WAIT).await.unwrap();
    let q = queues.iter().find(|q| q.name == QUEUE).unwrap();
    assert_eq!(q.members, vec![0, 1, 2]);
    assert_eq!(q.leader, Some(1));
    assert_eq!(cluster.leader_of("kit", QUEUE).await.unwrap(), 1);
    let members = cluster.quorum_status("kit", QUEUE).await.unwrap();
    let mut nodes: Vec<usize> = members.iter().map(|m| m.node).collect();
    nodes.sort_unstable();
    assert_eq!(nodes, vec![0, 1, 2]);
    assert_eq!(
        members.iter().filter(|m| m.raft_state == "leader").count(),
        1,
        "{members:?}"
    );
    assert!(members.iter().all(|m| m.commit_index > 0), "{members:?}");
    let on = eventually(WAIT, "the client's connection listed", || async {
        cluster
            .node_of_connection("kit-client")
            .await
            .ok()
            .flatten()
    })
    .await;
    assert_eq!(on, 1);
    // Quorum queues refresh their counts on a 5 s tick.
    let messages = eventually(WAIT, "10 messages counted", || async {
        let qs = cluster.quorum_queues("kit").await.ok()?;
        let n = qs.into_iter().find(|q| q.name == QUEUE)?.messages;
        (n == 10).then_some(n)
    })
    .await;
    assert_eq!(messages, 10);
    let drained = cluster.await_drained("kit", Duration::from_secs(1)).await;
    assert!(
        drained.is_err(),
        "10 messages wait, so the vhost is not drained"
    );

    // SIGKILL the leader: another member takes over; the queue keeps its messages.
    let killed_at = Instant::now();
    cluster.node(1).kill().await.unwrap();
    assert_eq!(cluster.running(), vec![0, 2]);
    let leader = eventually(WAIT, "a new leader", || async {
        cluster.leader_of("kit", QUEUE).await.ok()
    })
    .await;
    assert_ne!(leader, 1);
    eprintln!("new leader {leader} after {:?}", killed_at.elapsed());
    let messages = eventually(WAIT, "10 messages counted by the new leader", || async {
        let qs = cluster.quorum_queues("kit").await.ok()?;
        let n = qs.into_iter().find(|q| q.name == QUEUE)?.messages;
        (n == 10).then_some(n)
    })
    .await;
    assert_eq!(messages, 10);

    // Back: it rejoins, and its member comes online again.
    let restarted_at = Instant::now();
    cluster.start_again(&[1]).await.unwrap();
    cluster.await_rejoined(1, WAIT).await.unwrap();
    let queues = cluster.await_queues_in_sync("kit", WAIT).await.unwrap();
    eprintln!(
        "node 1 back, rejoined and in sync {:?} after its restart",
        restarted_at.elapsed()
    );
    assert_eq!(
        queues.iter().find(|q| q.name == QUEUE).unwrap().online,
        vec![0, 1, 2]
    );
    // `heal` has nothing to do.
    cluster.heal(WAIT).await.unwrap();
    assert_eq!(cluster.running(), vec![0, 1, 2]);
    drop(conn);
}
