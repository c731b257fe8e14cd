//! The management API client: credentials never in clear to a host that is not loopback
//! (against a fake API that records what it receives), the transport's rule on when it
//! contacts the API at all (as the SDK connects it), and HTTPS with a CA of the test's own
//! against a private node.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use mesh::amqp::{connect_with_management, management_options};
use mesh_admin::management::{
    BindingRow, ManagementClient, ManagementErrorKind, ManagementOptions,
};
use mesh_amqp::AmqpOptions;
use mesh_core::{QueueSpec, SubscriptionSpec, TopicPattern};
use mesh_testkit::{free_port, NodeOptions, PrivateNode, RecordingServer, TestPki};

/// A name that is not loopback by its looks; the client is told to connect to the fake API
/// for it (as `curl --resolve` would), so no traffic leaves the machine.
const REMOTE_LOOKING: &str = "rabbit-management.example";

/// A fake management API on loopback: answers `[]` to everything and records the head of
/// every request it gets, before answering (so a request the client saw answered is
/// recorded).
struct FakeApi {
    addr: SocketAddr,
    server: RecordingServer,
}

impl FakeApi {
    async fn start() -> FakeApi {
        let server = RecordingServer::start("[]").await.expect("a fake API");
        FakeApi {
            addr: server.addr(),
            server,
        }
    }

    /// `http://rabbit-management.example:<port>`, pinned to the fake.
    fn options(&self) -> ManagementOptions {
        ManagementOptions::new(format!("http://{REMOTE_LOOKING}:{}", self.addr.port()))
            .credentials("mesh", "s3cret-pw")
            .timeout(Duration::from_secs(5))
            .resolve(REMOTE_LOOKING, self.addr)
    }

    fn heads(&self) -> Vec<String> {
        self.server.heads()
    }
}

fn has_authorization(head: &str) -> bool {
    head.lines()
        .any(|line| line.to_ascii_lowercase().starts_with("authorization:"))
}

fn durable(queue: &str, patterns: &[&str]) -> SubscriptionSpec {
    SubscriptionSpec {
        queue: QueueSpec::Durable {
            name: queue.to_owned(),
        },
        patterns: patterns
            .iter()
            .map(|p| TopicPattern::parse(p).unwrap())
            .collect(),
        prefetch: 10,
        retry_delays: Vec::new(),
    }
}

#[tokio::test]
async fn credentials_go_in_clear_to_a_remote_host_only_when_allowed() {
    let fake = FakeApi::start().await;

    // Not allowed: refused before anything is sent.
    let error = ManagementClient::new(&fake.options()).unwrap_err();
    assert_eq!(error.kind(), ManagementErrorKind::Insecure);
    assert!(!error.to_string().contains("s3cret"), "{error}");
    assert!(fake.heads().is_empty(), "{:?}", fake.heads());

    // Allowed: the request carries basic auth ("mesh:s3cret-pw").
    let client = ManagementClient::new(&fake.options().allow_insecure_http(true)).unwrap();
    let queues = tokio::time::timeout(common::WAIT, client.queues("/"))
        .await
        .expect("an answer in time")
        .unwrap();
    assert!(queues.is_empty());
    let heads = fake.heads();
    assert_eq!(heads.len(), 1, "{heads:?}");
    assert!(
        heads[0].starts_with("GET /api/queues/%2F HTTP/1.1"),
        "{}",
        heads[0]
    );
    assert!(
        heads[0].lines().any(|line| line
            .to_ascii_lowercase()
            .starts_with("authorization: basic ")
            && line.ends_with("bWVzaDpzM2NyZXQtcHc=")),
        "{}",
        heads[0]
    );
    assert!(!format!("{client:?}").contains("s3cret"));
}

#[tokio::test]
async fn an_oversized_or_slow_answer_is_bounded() {
    // A server that never answers: the request ends at the timeout, not later.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let client = ManagementClient::new(
        &ManagementOptions::new(format!("http://127.0.0.1:{}", addr.port()))
            .timeout(Duration::from_millis(300)),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let error = tokio::time::timeout(common::WAIT, client.overview())
        .await
        .expect("the client's own timeout ends the request")
        .unwrap_err();
    assert_eq!(error.kind(), ManagementErrorKind::Unreachable);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    silent.abort();

    // An answer larger than the limit is refused.
    let fake = FakeApi::start().await;
    let client = ManagementClient::new(
        &ManagementOptions::new(format!("http://127.0.0.1:{}", fake.addr.port()))
            .max_response_size(1),
    )
    .unwrap();
    let error = tokio::time::timeout(common::WAIT, client.queues("/"))
        .await
        .expect("an answer in time")
        .unwrap_err();
    assert_eq!(error.kind(), ManagementErrorKind::InvalidResponse);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transport_contacts_only_a_configured_or_loopback_api() {
    let vhost = common::vhost("mgmt-policy").await;
    let fake = FakeApi::start().await;
    let queue = "n.m.events";
    let subscribe = |management: ManagementOptions, name: &'static str| {
        let options = common::options(&vhost, name);
        async move {
            let transport = connect_with_management(options, Some(management))
                .await
                .expect("connecting");
            let subscription =
                tokio::time::timeout(common::WAIT, transport.subscribe(durable(queue, &["a.b"])))
                    .await
                    .expect("subscribed in time")
                    .expect("subscribing");
            drop(subscription);
            transport.close().await;
        }
    };

    // Derived (not configured) and not loopback: never contacted, even with plain HTTP
    // allowed.
    subscribe(
        fake.options().configured(false).allow_insecure_http(true),
        "mgmt-derived",
    )
    .await;
    assert!(fake.heads().is_empty(), "{:?}", fake.heads());

    // Configured, plain HTTP to a remote-looking host, not allowed: nothing sent either.
    subscribe(fake.options(), "mgmt-insecure").await;
    assert!(fake.heads().is_empty(), "{:?}", fake.heads());

    // Configured and allowed: asked for the queue's bindings, with credentials.
    subscribe(fake.options().allow_insecure_http(true), "mgmt-allowed").await;
    let heads = fake.heads();
    assert_eq!(heads.len(), 1, "{heads:?}");
    let expected = format!("GET /api/queues/{}/n.m.events/bindings ", vhost.name());
    assert!(heads[0].starts_with(&expected), "{}", heads[0]);
    assert!(has_authorization(&heads[0]), "{}", heads[0]);

    vhost.delete().await.unwrap();
}

#[test]
fn a_derived_url_is_contacted_only_for_a_loopback_broker() {
    let remote: AmqpOptions = "amqp://u:p@rabbit.example/%2F".parse().unwrap();
    let derived = management_options(&remote).unwrap();
    assert!(!derived.is_configured() && !derived.is_loopback());
    let local: AmqpOptions = "amqp://u:p@127.0.0.1/%2F".parse().unwrap();
    let derived = management_options(&local).unwrap();
    assert!(!derived.is_configured() && derived.is_loopback());
    let configured =
        management_options(&remote.management_url("https://rabbit.example:15671")).unwrap();
    assert!(configured.is_configured());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_test_ca_serves_the_client_and_stale_binding_removal() {
    let pki = TestPki::generate("mgmt-https").unwrap();
    let server = pki
        .server("management", &["localhost", "127.0.0.1"])
        .unwrap();
    let ssl_port = free_port();
    let node =
        PrivateNode::start(NodeOptions::default().management_tls(ssl_port, pki.ca_file(), &server))
            .await
            .expect("a private RabbitMQ node with management over TLS");
    let url = format!("https://localhost:{ssl_port}");
    let management = ManagementOptions::new(&url)
        .ca_file(pki.ca_file())
        .timeout(Duration::from_secs(10));

    // The listener may come up a moment after the node reports booted.
    let client = ManagementClient::new(&management).unwrap();
    let overview = mesh_testkit::eventually(common::WAIT, "the API answers over TLS", || {
        let client = client.clone();
        async move { client.overview().await.ok() }
    })
    .await;
    assert!(overview.get("rabbitmq_version").is_some(), "{overview}");

    // Another CA is refused: the certificate is not trusted.
    let other = TestPki::generate("mgmt-other").unwrap();
    let untrusted = ManagementClient::new(&management.clone().ca_file(other.ca_file())).unwrap();
    let error = untrusted.overview().await.unwrap_err();
    assert_eq!(error.kind(), ManagementErrorKind::Unreachable, "{error:?}");

    // The transport finds, through the API over TLS, a binding it never made, and removes it.
    let options: AmqpOptions = node.url().parse().unwrap();
    let transport = connect_with_management(options, Some(management.clone()))
        .await
        .unwrap();
    let queue = "n.m.events";
    drop(
        transport
            .subscribe(durable(queue, &["a.b.c"]))
            .await
            .unwrap(),
    );
    client
        .bind("/", "mesh.events", queue, "old.pattern.#")
        .await
        .unwrap();
    let keys = |rows: Vec<BindingRow>| {
        let mut keys: Vec<String> = rows
            .into_iter()
            .filter(|b| b.source == "mesh.events")
            .map(|b| b.routing_key)
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(
        keys(client.queue_bindings("/", queue).await.unwrap()),
        ["a.b.c", "old.pattern.#"]
    );
    drop(
        transport
            .subscribe(durable(queue, &["a.b.c"]))
            .await
            .unwrap(),
    );
    assert_eq!(
        keys(client.queue_bindings("/", queue).await.unwrap()),
        ["a.b.c"]
    );
    transport.close().await;
}
