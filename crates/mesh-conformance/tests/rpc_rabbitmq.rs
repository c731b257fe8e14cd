//! RPC on RabbitMQ beyond the conformance suite: competing servers, a server lost mid-request,
//! many concurrent calls, and no RPC traffic on `mesh.events`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mesh::{Bus, RemoteError};
use mesh_amqp::{AmqpOptions, AmqpTransport};
use mesh_testkit::TestVhost;
use tokio::sync::Notify;

const WAIT: Duration = Duration::from_secs(60);

async fn transport(options: &AmqpOptions, name: &str) -> Arc<AmqpTransport> {
    Arc::new(
        mesh::amqp::connect(options.clone().connection_name(name))
            .await
            .expect("connects"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_share_a_thousand_concurrent_calls_and_events_see_none() {
    let vhost = TestVhost::create("rpc-share").await.expect("a test vhost");
    let options: AmqpOptions = vhost.url().parse().expect("url");
    let answered: Arc<Mutex<HashMap<u32, Vec<&'static str>>>> = Arc::default();
    let mut servers = Vec::new();
    for node in ["s1", "s2"] {
        let answered = Arc::clone(&answered);
        let bus = Bus::builder()
            .node(node)
            .module("calc")
            .serve("calc.echo", move |n: u32, _meta| {
                answered
                    .lock()
                    .expect("lock")
                    .entry(n)
                    .or_default()
                    .push(node);
                async move { Ok::<u32, RemoteError>(n) }
            })
            .start(transport(&options, node).await)
            .await
            .expect("server starts");
        servers.push(bus);
    }
    let client = Bus::builder()
        .node("c1")
        .module("client")
        .start(transport(&options, "client").await)
        .await
        .expect("client starts");
    // A complete audit of mesh.events while the calls run.
    let mut audit = client.listen(["#"]).await.expect("listen");

    let calls = (0..1000_u32).map(|n| {
        let client = client.clone();
        async move { client.call::<_, u32>("calc.echo", &n, WAIT).await }
    });
    let replies = tokio::time::timeout(WAIT * 2, futures::future::join_all(calls))
        .await
        .expect("all calls complete in time");
    for (n, reply) in replies.into_iter().enumerate() {
        assert_eq!(reply.expect("a reply"), n as u32);
    }
    let answered = std::mem::take(&mut *answered.lock().expect("lock"));
    assert_eq!(answered.len(), 1000);
    assert!(
        answered.values().all(|by| by.len() == 1),
        "every call answered exactly once"
    );
    let by_s1 = answered.values().filter(|by| by[0] == "s1").count();
    assert!(
        by_s1 > 0 && by_s1 < 1000,
        "both servers got some: s1 had {by_s1}"
    );

    // A sentinel event proves the listener works; it must be the first thing it saw.
    let sentinel = client
        .emit_outgoing(
            mesh::Outgoing::json("audit.sentinel", &serde_json::json!({})).expect("a JSON payload"),
        )
        .await
        .expect("emit");
    let first = tokio::time::timeout(WAIT, audit.next())
        .await
        .expect("the sentinel in time")
        .expect("open")
        .expect("valid");
    assert_eq!(first.meta.id(), sentinel, "no RPC message rode mesh.events");

    client.drain().await.expect("drain");
    for server in servers {
        server.drain().await.expect("drain");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_server_connection_closed_is_answered_once_by_another() {
    let vhost = TestVhost::create("rpc-lost").await.expect("a test vhost");
    let options: AmqpOptions = vhost.url().parse().expect("url");
    let started = Arc::new(Notify::new());
    let stuck = Arc::clone(&started);
    let server_a = Bus::builder()
        .node("sa")
        .module("calc")
        .serve("calc.slow", move |n: u32, _meta| {
            stuck.notify_one();
            async move {
                // Never answers: its connection is closed under it.
                std::future::pending::<()>().await;
                Ok::<u32, RemoteError>(n)
            }
        })
        .start(transport(&options, "srv-a").await)
        .await
        .expect("server a starts");
    let client = Bus::builder()
        .node("c1")
        .module("client")
        .start(transport(&options, "client").await)
        .await
        .expect("client starts");
    let call = {
        let client = client.clone();
        tokio::spawn(async move { client.call::<_, u32>("calc.slow", &7, WAIT).await })
    };
    tokio::time::timeout(WAIT, started.notified())
        .await
        .expect("server a took the request");

    let answered_by_b = Arc::new(AtomicU32::new(0));
    let counted = Arc::clone(&answered_by_b);
    let server_b = Bus::builder()
        .node("sb")
        .module("calc")
        .serve("calc.slow", move |n: u32, _meta| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move { Ok::<u32, RemoteError>(n * 10) }
        })
        .start(transport(&options, "srv-b").await)
        .await
        .expect("server b starts");
    // Server a's node goes away: its connections are closed and it does not come back.
    let closed = vhost
        .close_connections(Some("srv-a"), "server lost")
        .await
        .expect("closed");
    assert!(closed >= 1, "server a's connections were closed");
    server_a.close().await;

    let reply = tokio::time::timeout(WAIT, call)
        .await
        .expect("the call completes")
        .expect("the call task")
        .expect("a reply");
    assert_eq!(reply, 70, "answered by server b");
    assert_eq!(answered_by_b.load(Ordering::SeqCst), 1, "answered once");
    client.drain().await.expect("drain");
    server_b.drain().await.expect("drain");
}
