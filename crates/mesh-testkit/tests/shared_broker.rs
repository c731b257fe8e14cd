//! The shared-broker helpers against the real RabbitMQ on 127.0.0.1:5672: vhosts, listings,
//! forced closes, and the relay in front of a real AMQP connection.

use std::time::Duration;

use amqprs::channel::{
    BasicPublishArguments, ExchangeDeclareArguments, QueueBindArguments, QueueDeclareArguments,
};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{BasicProperties, FieldName, FieldTable, FieldValue};
use mesh_testkit::shared::BrokerUrl;
use mesh_testkit::{eventually, rabbitmqctl, Relay, TestVhost};

const WAIT: Duration = Duration::from_secs(20);

async fn connect(port: u16, vhost: &str, name: &str) -> Connection {
    let args = OpenConnectionArguments::new("127.0.0.1", port, "guest", "guest")
        .virtual_host(vhost)
        .connection_name(name)
        .finish();
    Connection::open(&args).await.expect("AMQP connection")
}

async fn vhost_exists(name: &str) -> bool {
    let out = rabbitmqctl(None, &["list_vhosts", "--quiet", "--no-table-headers"])
        .await
        .expect("list_vhosts");
    out.lines().any(|l| l.trim() == name)
}

#[tokio::test]
async fn vhost_holds_what_a_client_declared_and_lists_it_typed() {
    let vhost = TestVhost::create("listing").await.unwrap();
    assert!(vhost.name().starts_with("mesh-test-listing-"));
    assert_eq!(
        vhost.url(),
        format!("amqp://guest:guest@127.0.0.1:5672/{}", vhost.name())
    );
    assert!(vhost_exists(vhost.name()).await);

    let conn = connect(5672, vhost.name(), "listing-conn-1").await;
    let ch = conn.open_channel(None).await.unwrap();
    ch.exchange_declare(
        ExchangeDeclareArguments::new("ex.t", "topic")
            .durable(true)
            .finish(),
    )
    .await
    .unwrap();
    let mut args = FieldTable::new();
    args.insert(
        FieldName::try_from("x-max-length").unwrap(),
        FieldValue::l(10),
    );
    ch.queue_declare(
        QueueDeclareArguments::durable_client_named("q.one")
            .arguments(args)
            .finish(),
    )
    .await
    .unwrap();
    ch.queue_declare(QueueDeclareArguments::transient_autodelete("q.two"))
        .await
        .unwrap();
    ch.queue_bind(QueueBindArguments::new("q.one", "ex.t", "a.*"))
        .await
        .unwrap();
    for body in [b"1".to_vec(), b"2".to_vec()] {
        ch.basic_publish(
            BasicProperties::default(),
            body,
            BasicPublishArguments::new("ex.t", "a.b"),
        )
        .await
        .unwrap();
    }

    let queues = eventually(WAIT, "two messages in q.one", || async {
        let queues = vhost.list_queues().await.unwrap();
        let one = queues.iter().find(|q| q.name == "q.one")?;
        (one.messages == 2).then_some(queues)
    })
    .await;
    let one = queues.iter().find(|q| q.name == "q.one").unwrap();
    assert!(one.durable && !one.auto_delete && !one.exclusive);
    assert_eq!(one.arguments["x-max-length"], 10, "{:?}", one.arguments);
    assert_eq!(one.consumers, 0);
    let two = queues.iter().find(|q| q.name == "q.two").unwrap();
    assert!(!two.durable && two.auto_delete);
    assert_eq!(two.arguments, serde_json::json!({}));

    let exchanges = vhost.list_exchanges().await.unwrap();
    let ex = exchanges.iter().find(|e| e.name == "ex.t").unwrap();
    assert_eq!(ex.kind, "topic");
    assert!(ex.durable && !ex.internal && !ex.is_builtin());
    assert!(exchanges
        .iter()
        .any(|e| e.name == "amq.topic" && e.is_builtin()));

    let bindings = vhost.list_bindings().await.unwrap();
    assert!(
        bindings.iter().any(|b| b.source == "ex.t"
            && b.destination == "q.one"
            && b.destination_kind == "queue"
            && b.routing_key == "a.*"),
        "{bindings:?}"
    );
    // The default exchange's implicit binding is listed too.
    assert!(bindings
        .iter()
        .any(|b| b.source.is_empty() && b.destination == "q.two"));

    // Connections: listed with their client-provided name, closed by filter.
    let other = connect(5672, vhost.name(), "listing-conn-2").await;
    let conns = eventually(WAIT, "both connections listed", || async {
        let conns = vhost.list_connections().await.unwrap();
        (conns.len() == 2).then_some(conns)
    })
    .await;
    assert!(
        conns
            .iter()
            .any(|c| c.connection_name.as_deref() == Some("listing-conn-1")
                && c.vhost == vhost.name()
                && c.pid.starts_with('<')),
        "{conns:?}"
    );
    assert_eq!(
        vhost
            .close_connections(Some("nomatch"), "test")
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        vhost
            .close_connections(Some("conn-1"), "closed by the test")
            .await
            .unwrap(),
        1
    );
    eventually(WAIT, "the client to see its connection closed", || async {
        (!conn.is_open()).then_some(())
    })
    .await;
    assert!(other.is_open());
    assert_eq!(vhost.close_connections(None, "all").await.unwrap(), 1);
    eventually(WAIT, "the second connection closed", || async {
        (!other.is_open()).then_some(())
    })
    .await;

    let name = vhost.name().to_owned();
    vhost.delete().await.unwrap();
    assert!(!vhost_exists(&name).await);
}

#[tokio::test]
async fn a_dropped_vhost_is_deleted() {
    let vhost = TestVhost::create("drop me!").await.unwrap();
    let name = vhost.name().to_owned();
    assert!(name.starts_with("mesh-test-drop-me--"), "{name}");
    assert!(vhost_exists(&name).await);
    drop(vhost);
    assert!(!vhost_exists(&name).await);
}

/// `method path` on the shared broker's management API as guest: the status code.
async fn management(method: &str, path: &str, body: &str) -> u16 {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut stream = tokio::net::TcpStream::connect("127.0.0.1:15672")
        .await
        .expect("the shared broker's management API on 127.0.0.1:15672");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:15672\r\n\
         Authorization: Basic Z3Vlc3Q6Z3Vlc3Q=\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream
        .write_all(request.as_bytes())
        .await
        .expect("sending the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .expect("reading the answer");
    response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {response}"))
}

#[tokio::test]
async fn a_vhost_is_made_and_granted_and_deleted_with_its_users() {
    let began = std::time::Instant::now();
    let mut vhost = TestVhost::create("through-http").await.unwrap();
    let made_in = began.elapsed();
    let name = vhost.name().to_owned();
    // Made and granted: the API lists both, and guest can open the vhost at once.
    assert_eq!(
        management("GET", &format!("/api/vhosts/{name}"), "").await,
        200
    );
    let grant = format!("/api/permissions/{name}/guest");
    assert_eq!(management("GET", &grant, "").await, 200);
    let conn = connect(5672, &name, "through-http").await;
    conn.close().await.unwrap();
    // A user the test made is deleted with the vhost.
    let user = format!("{name}-user");
    let users = format!("/api/users/{user}");
    let made = management("PUT", &users, r#"{"password":"p","tags":""}"#).await;
    assert!(matches!(made, 201 | 204), "{made}");
    vhost.own_user(user.clone());
    vhost.delete().await.unwrap();
    assert_eq!(
        management("GET", &format!("/api/vhosts/{name}"), "").await,
        404
    );
    assert_eq!(
        management("GET", &format!("/api/users/{user}"), "").await,
        404
    );
    eprintln!("MEASURED a test vhost made and granted in {made_in:?}");
}

#[tokio::test]
async fn an_unreachable_broker_fails_with_a_hint() {
    let err = BrokerUrl::parse("amqp://guest:guest@127.0.0.1:1")
        .unwrap()
        .ensure_reachable()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("no RabbitMQ on 127.0.0.1:1: start one with `rabbitmq-server -detached` (Debian package rabbitmq-server)"),
        "{err}"
    );
}

#[tokio::test]
async fn a_relay_cut_and_blackhole_reach_a_real_amqp_client() {
    let vhost = TestVhost::create("relay").await.unwrap();
    let relay = Relay::start(vhost.broker_addr()).await.unwrap();
    assert_eq!(
        vhost.url_via(relay.addr()),
        format!(
            "amqp://guest:guest@127.0.0.1:{}/{}",
            relay.port(),
            vhost.name()
        )
    );
    let conn = connect(relay.port(), vhost.name(), "via-relay").await;
    let ch = conn.open_channel(None).await.unwrap();
    ch.queue_declare(QueueDeclareArguments::new("q"))
        .await
        .unwrap();
    assert_eq!(relay.accepted(), 1);

    // Blackholed, a declare gets no answer; once passed again, it completes.
    relay.blackhole();
    let declare = ch.queue_declare(QueueDeclareArguments::new("q2"));
    tokio::pin!(declare);
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut declare)
            .await
            .is_err(),
        "declare completed through a blackhole"
    );
    relay.pass();
    tokio::time::timeout(WAIT, declare)
        .await
        .expect("declare after pass")
        .unwrap();

    relay.cut();
    eventually(WAIT, "the client to see the cut", || async {
        (!conn.is_open()).then_some(())
    })
    .await;
    // Reconnecting through the relay works.
    let again = connect(relay.port(), vhost.name(), "via-relay-2").await;
    assert!(again.is_open());
    assert_eq!(relay.accepted(), 2);
}
