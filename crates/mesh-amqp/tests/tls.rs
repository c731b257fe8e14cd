//! TLS end to end: private RabbitMQ nodes with a TLS listener using certificates of a
//! throw-away CA ([`TestPki`]).
//!
//! - a node that asks for a client certificate but does not require one (shared by the tests
//!   of this file): emit/on/call/serve through the SDK over `amqps://…?cacertfile=…`, mutual
//!   TLS with a client certificate, each client-side failure typed (unknown CA, name
//!   mismatch) within the connect timeout, a rotated CA file taking effect at the next
//!   connect, and the recovery scenarios (forced closes, a TCP cut) over TLS, losing nothing;
//! - a node that requires a client certificate (`fail_if_no_peer_cert`): refused without one,
//!   with the reason, and fine with one;
//! - a certificate login (`EXTERNAL`) on a node that does not offer it: refused at once, typed;
//! - an expired server certificate, served by an in-process rustls server: RabbitMQ's TLS
//!   options are node-wide, so a third node would cost ~10 s for a refusal that happens in
//!   the client's verifier before the server matters.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mesh::{Bus, Incoming, Outgoing};
use mesh_amqp::{
    AmqpOptions, AmqpTransport, BrokerAddress, Lifecycle, Link, TlsError, TlsErrorKind,
};
use mesh_core::{TransportError, TransportErrorKind};
use mesh_testkit::{
    error_chain, eventually, shared_node, CertFiles, Ledger, NodeOptions, PrivateNode, Relay,
    TestPki, TlsListener,
};

/// The connect timeout of the failure cases: each must come back well within it.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The PKI of the shared node, kept for the test binary's life (the node copies the files it
/// needs; clients read the CA and client files from here).
fn pki() -> &'static (TestPki, CertFiles, CertFiles) {
    static PKI: std::sync::OnceLock<(TestPki, CertFiles, CertFiles)> = std::sync::OnceLock::new();
    PKI.get_or_init(|| {
        let pki = TestPki::generate("amqp-tls").unwrap();
        let server = pki.server("rabbit", &["localhost", "127.0.0.1"]).unwrap();
        let client = pki.client("mesh-client").unwrap();
        (pki, server, client)
    })
}

async fn node() -> Arc<PrivateNode> {
    let (pki, server, _) = pki();
    shared_node(
        "tls",
        NodeOptions::default().tls(TlsListener {
            ca_file: pki.ca_file().to_owned(),
            server_cert: server.cert.clone(),
            server_key: server.key.clone(),
            require_client_cert: false,
        }),
    )
    .await
    .expect("a private RabbitMQ node with a TLS listener")
}

fn url(port: u16, query: &str) -> String {
    format!("amqps://guest:guest@127.0.0.1:{port}/?{query}")
}

fn ca_query(ca: &Path) -> String {
    format!("cacertfile={}", ca.display())
}

/// Options for `url`; the management API is not enabled on private nodes: point it nowhere.
fn options(url: &str, name: &str) -> AmqpOptions {
    url.parse::<AmqpOptions>()
        .unwrap()
        .connection_name(name)
        .connect_timeout(CONNECT_TIMEOUT)
        .management_url("http://127.0.0.1:1")
}

/// Connects, expecting a TLS failure within the connect timeout; returns its kind.
async fn refused(options: AmqpOptions) -> (TlsErrorKind, TransportError) {
    let began = Instant::now();
    let error = tokio::time::timeout(3 * CONNECT_TIMEOUT, AmqpTransport::connect(options))
        .await
        .expect("the connect returns")
        .expect_err("the connect fails");
    let took = began.elapsed();
    assert!(took < CONNECT_TIMEOUT, "took {took:?}: {error:#}");
    assert_eq!(error.kind(), &TransportErrorKind::Tls, "{error}");
    assert!(error.is_tls());
    let tls = std::error::Error::source(&error)
        .and_then(|s| s.downcast_ref::<TlsError>())
        .expect("a TlsError in the source chain");
    eprintln!("refused after {took:?}: {}", error_chain(&error));
    (tls.kind().clone(), error)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emit_on_call_and_serve_work_over_amqps() {
    let node = node().await;
    let (pki, _, _) = pki();
    let port = node.tls_port().unwrap();
    let transport =
        AmqpTransport::connect(options(&url(port, &ca_query(pki.ca_file())), "tls-sdk"))
            .await
            .unwrap();
    assert_eq!(
        transport.options().to_string(),
        format!("amqps://guest@127.0.0.1:{port}/%2F")
    );
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let bus = Bus::builder()
        .node("n1")
        .module("tlsapp")
        // Its handler takes its own prefix: the contract announcement would be one more
        // event there, which this test does not expect.
        .announce(false)
        .on_raw(["module.tlsapp.#"], move |incoming: Incoming<Bytes>| {
            let seen_tx = seen_tx.clone();
            async move {
                let _ = seen_tx.send(incoming.meta.id().to_string());
                Ok(())
            }
        })
        .serve("tlsapp.quote", |plan: String, _meta| async move {
            Ok(format!("quoted {plan}"))
        })
        .start(Arc::new(transport.clone()))
        .await
        .unwrap();
    let id = bus
        .emit_outgoing(Outgoing::json("pinged", &serde_json::json!({ "n": 1 })).unwrap())
        .await
        .unwrap();
    let got = tokio::time::timeout(common::WAIT, seen.recv())
        .await
        .expect("the event comes back in time")
        .unwrap();
    assert_eq!(got, id.to_string());
    let reply: String = bus
        .call("tlsapp.quote", "gold", common::WAIT)
        .await
        .unwrap();
    assert_eq!(reply, "quoted gold");
    // Both connections are TLS ones, as the broker sees them.
    let listed = node
        .rabbitmqctl(&["list_connections", "client_properties", "ssl", "-q"])
        .await
        .unwrap();
    let ours: Vec<&str> = listed.lines().filter(|l| l.contains("tls-sdk.")).collect();
    assert_eq!(ours.len(), 2, "{listed}");
    assert!(
        ours.iter().all(|l| l.trim_end().ends_with("true")),
        "{listed}"
    );
    bus.drain().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_with_a_client_certificate_works() {
    let node = node().await;
    let (pki, _, client) = pki();
    let port = node.tls_port().unwrap();
    let query = format!(
        "{}&certfile={}&keyfile={}",
        ca_query(pki.ca_file()),
        client.cert.display(),
        client.key.display()
    );
    let transport = AmqpTransport::connect(options(&url(port, &query), "tls-mutual"))
        .await
        .unwrap();
    assert!(transport.health().is_ready());
    // The broker saw the client's certificate.
    let listed = node
        .rabbitmqctl(&[
            "list_connections",
            "client_properties",
            "peer_cert_subject",
            "-q",
        ])
        .await
        .unwrap();
    assert!(
        listed
            .lines()
            .any(|l| l.contains("tls-mutual.") && l.contains("mesh-client")),
        "{listed}"
    );
    transport.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_login_the_broker_does_not_offer_is_refused_at_once() {
    // This node has no `rabbitmq_auth_mechanism_ssl`: EXTERNAL is not offered, even to a
    // client with a certificate it accepts.
    let node = node().await;
    let (pki, _, client) = pki();
    let port = node.tls_port().unwrap();
    let query = format!(
        "{}&certfile={}&keyfile={}&auth_mechanism=external",
        ca_query(pki.ca_file()),
        client.cert.display(),
        client.key.display()
    );
    let url = format!("amqps://mesh-client@127.0.0.1:{port}/?{query}");
    let began = Instant::now();
    let error = tokio::time::timeout(
        3 * CONNECT_TIMEOUT,
        AmqpTransport::connect(options(&url, "tls-external")),
    )
    .await
    .expect("the connect returns")
    .expect_err("EXTERNAL is not offered");
    assert!(began.elapsed() < CONNECT_TIMEOUT, "{}", error_chain(&error));
    assert_eq!(
        error.kind(),
        &TransportErrorKind::AccessRefused,
        "{}",
        error_chain(&error)
    );
    assert_eq!(
        mesh_amqp::ConnectRefused::of(&error),
        Some(&mesh_amqp::ConnectRefused::Mechanism {
            mechanism: "EXTERNAL".into()
        }),
        "{}",
        error_chain(&error)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_ca_is_refused_with_its_reason() {
    let node = node().await;
    let stranger = TestPki::generate("stranger").unwrap();
    let port = node.tls_port().unwrap();
    let (kind, error) = refused(options(&url(port, &ca_query(stranger.ca_file())), "tls-ca")).await;
    assert_eq!(kind, TlsErrorKind::UnknownCa);
    assert!(
        format!("{error:#}").contains("not signed by a trusted CA")
            || error_chain(&error).contains("not signed by a trusted CA"),
        "{}",
        error_chain(&error)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_mismatch_is_refused_with_its_reason() {
    let node = node().await;
    let (pki, _, _) = pki();
    let port = node.tls_port().unwrap();
    let query = format!(
        "{}&server_name_indication=elsewhere.example",
        ca_query(pki.ca_file())
    );
    let (kind, _) = refused(options(&url(port, &query), "tls-name")).await;
    assert_eq!(
        kind,
        TlsErrorKind::NameMismatch {
            name: "elsewhere.example".into()
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_none_accepts_a_certificate_no_trusted_ca_signed() {
    let node = node().await;
    let stranger = TestPki::generate("verify-none").unwrap();
    let port = node.tls_port().unwrap();
    let query = format!("{}&verify=verify_none", ca_query(stranger.ca_file()));
    let transport = AmqpTransport::connect(options(&url(port, &query), "tls-none"))
        .await
        .unwrap();
    assert!(transport.health().is_ready());
    transport.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_port_is_not_taken_for_tls() {
    let node = node().await;
    let (pki, _, _) = pki();
    let (kind, _) = refused(options(
        &url(node.port(), &ca_query(pki.ca_file())),
        "tls-plain",
    ))
    .await;
    assert_eq!(kind, TlsErrorKind::NotTls);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_ca_file_is_read_at_the_next_connect() {
    let node = node().await;
    let (pki, _, _) = pki();
    let stranger = TestPki::generate("rotation").unwrap();
    let port = node.tls_port().unwrap();
    let ca = stranger.dir().join("rotating-ca.pem");
    std::fs::copy(stranger.ca_file(), &ca).unwrap();
    let options = options(&url(port, &ca_query(&ca)), "tls-rotate");
    let (kind, _) = refused(options.clone()).await;
    assert_eq!(kind, TlsErrorKind::UnknownCa);
    // The same options, the file's content replaced: the next connect reads it again.
    std::fs::copy(pki.ca_file(), &ca).unwrap();
    let transport = AmqpTransport::connect(options).await.unwrap();
    assert!(transport.health().is_ready());
    transport.close().await;
}

/// Scenario b of the recovery tests over TLS, shorter: connections force-closed by name
/// while events are published and consumed; nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forced_closes_over_tls_lose_nothing() {
    const ROUNDS: usize = 3;
    let node = node().await;
    let (pki, _, _) = pki();
    let port = node.tls_port().unwrap();
    let transport = AmqpTransport::connect(options(&url(port, &ca_query(pki.ca_file())), "tlsfc"))
        .await
        .unwrap();
    let events = common::Recorder::start(&transport);
    let ledger = Ledger::new();
    let bus = common::traffic::consuming_bus(&transport, "tlsfc", &ledger).await;
    let stop = Arc::new(AtomicBool::new(false));
    let emits = Arc::new(common::traffic::Emits::default());
    let emitting = common::traffic::emitter(
        &bus,
        &ledger,
        Duration::from_millis(5),
        stop.clone(),
        emits.clone(),
    );
    for round in 0..ROUNDS {
        eventually(common::WAIT, "traffic before the close", || async {
            (ledger.report().handled_unique >= 50 * (round + 1)).then_some(())
        })
        .await;
        let closed = node.close_connections(Some("tlsfc.")).await.unwrap();
        assert_eq!(closed, 2, "round {round}");
        eventually(common::WAIT, "both connections back over tls", || async {
            (events.count(reconnected(Link::Publish)) > round
                && events.count(reconnected(Link::Consume)) > round
                && transport.health().is_ready())
            .then_some(())
        })
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(60), emitting)
        .await
        .expect("every emit returns")
        .unwrap();
    let report = ledger.wait_all_handled(Duration::from_secs(60)).await;
    eprintln!("forced closes over tls: {report}");
    report.assert_clean();
    assert_eq!(report.lost.len(), 0);
    let errors = emits.errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "emits failed: {errors:#?}");
    common::measured("tls forced close: lost", report.lost.len());
    common::measured("tls forced close: duplicates handled", report.duplicates);
    bus.drain().await.unwrap();
}

/// Scenario c of the network tests over TLS, shorter: every TCP connection cut through a
/// relay mid-publish and mid-consume; the TLS sessions are set up again and nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_cut_over_tls_loses_nothing() {
    const CUTS: usize = 2;
    let node = node().await;
    let (pki, _, _) = pki();
    let relay = Relay::start(std::net::SocketAddr::from((
        std::net::Ipv4Addr::LOCALHOST,
        node.tls_port().unwrap(),
    )))
    .await
    .unwrap();
    let transport = AmqpTransport::connect(options(
        &url(relay.port(), &ca_query(pki.ca_file())),
        "tlscut",
    ))
    .await
    .unwrap();
    let events = common::Recorder::start(&transport);
    let ledger = Ledger::new();
    let bus = common::traffic::consuming_bus(&transport, "tlscut", &ledger).await;
    let stop = Arc::new(AtomicBool::new(false));
    let emits = Arc::new(common::traffic::Emits::default());
    let emitting = common::traffic::emitter(
        &bus,
        &ledger,
        Duration::from_millis(5),
        stop.clone(),
        emits.clone(),
    );
    for round in 0..CUTS {
        eventually(common::WAIT, "traffic before the cut", || async {
            (ledger.report().handled_unique >= 50 * (round + 1)).then_some(())
        })
        .await;
        let cut = Instant::now();
        relay.cut();
        eventually(
            common::WAIT,
            "both connections to notice the cut",
            || async {
                (events.first_after(cut, lost(Link::Publish)).is_some()
                    && events.first_after(cut, lost(Link::Consume)).is_some())
                .then_some(())
            },
        )
        .await;
        eventually(common::WAIT, "the transport to be ready again", || async {
            transport.health().is_ready().then_some(())
        })
        .await;
    }
    stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(60), emitting)
        .await
        .expect("every emit returns")
        .unwrap();
    let report = ledger.wait_all_handled(Duration::from_secs(60)).await;
    eprintln!("tcp cuts over tls: {report}");
    report.assert_clean();
    assert_eq!(report.lost.len(), 0);
    let errors = emits.errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "emits failed: {errors:#?}");
    assert_eq!(transport.stats().reconnects, 2 * CUTS as u64);
    common::measured("tls tcp cut: lost", report.lost.len());
    common::measured("tls tcp cut: duplicates handled", report.duplicates);
    bus.drain().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_requiring_a_client_certificate_refuses_a_client_without_one() {
    let pki = TestPki::generate("amqp-mtls").unwrap();
    let server = pki.server("rabbit", &["localhost", "127.0.0.1"]).unwrap();
    let client = pki.client("mesh-client").unwrap();
    let node = PrivateNode::start(NodeOptions::default().tls(TlsListener {
        ca_file: pki.ca_file().to_owned(),
        server_cert: server.cert,
        server_key: server.key,
        require_client_cert: true,
    }))
    .await
    .expect("a private RabbitMQ node requiring client certificates");
    let port = node.tls_port().unwrap();
    let (kind, error) = refused(options(&url(port, &ca_query(pki.ca_file())), "tls-nocert")).await;
    assert_eq!(kind, TlsErrorKind::ClientCertificateRequired);
    assert!(
        error_chain(&error).contains("the server requires a client certificate"),
        "{}",
        error_chain(&error)
    );
    let query = format!(
        "{}&certfile={}&keyfile={}",
        ca_query(pki.ca_file()),
        client.cert.display(),
        client.key.display()
    );
    let transport = AmqpTransport::connect(options(&url(port, &query), "tls-cert"))
        .await
        .unwrap();
    assert!(transport.health().is_ready());
    transport.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_server_certificate_is_refused_with_its_reason() {
    let pki = TestPki::generate("amqp-expired").unwrap();
    let expired = pki
        .expired_server("old", &["localhost", "127.0.0.1"])
        .unwrap();
    let server = TlsStub::start(&expired).await;
    let (kind, _) = refused(options(
        &url(server.port, &ca_query(pki.ca_file())),
        "tls-expired",
    ))
    .await;
    assert_eq!(kind, TlsErrorKind::Expired);
}

/// A cluster's addresses: a certificate problem of one node (here an expired certificate)
/// moves on to the next address; a problem of the client's own configuration (a CA that
/// signs no node's certificate) ends the attempt at the first, as no node can do better.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_node_specific_tls_failure_moves_on_to_the_next_address() {
    let node = node().await;
    let (pki, _, _) = pki();
    let port = node.tls_port().unwrap();
    let expired = pki.expired_server("old-node", &["127.0.0.1"]).unwrap();
    let stub = TlsStub::start(&expired).await;
    let cluster = options(&url(stub.port, &ca_query(pki.ca_file())), "tls-next").addresses([
        BrokerAddress::new("127.0.0.1", stub.port),
        BrokerAddress::new("127.0.0.1", port),
    ]);
    let transport = AmqpTransport::connect(cluster).await.unwrap();
    assert!(transport.health().is_ready());
    transport.close().await;

    // A listener standing for a second node, counting who comes.
    let second = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let second_port = second.local_addr().unwrap().port();
    let stranger = TestPki::generate("stranger-cluster").unwrap();
    let cluster = options(&url(port, &ca_query(stranger.ca_file())), "tls-stop").addresses([
        BrokerAddress::new("127.0.0.1", port),
        BrokerAddress::new("127.0.0.1", second_port),
    ]);
    let (kind, _) = refused(cluster).await;
    assert_eq!(kind, TlsErrorKind::UnknownCa);
    let knocked = tokio::time::timeout(Duration::from_millis(300), second.accept()).await;
    assert!(knocked.is_err(), "the second address was tried");
}

/// A TLS server that accepts connections and handshakes with a given certificate, then
/// closes: enough for a client to see the certificate.
struct TlsStub {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl TlsStub {
    async fn start(cert: &CertFiles) -> TlsStub {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let chain = CertificateDer::pem_file_iter(&cert.cert)
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        let key = PrivateKeyDer::from_pem_file(&cert.key).unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let task = tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let _ = acceptor.accept(socket).await;
                });
            }
        });
        TlsStub { port, task }
    }
}

impl Drop for TlsStub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn reconnected(link: Link) -> impl Fn(&Lifecycle) -> bool {
    move |e| matches!(e, Lifecycle::Connected { link: l, reconnect: true, .. } if *l == link)
}

fn lost(link: Link) -> impl Fn(&Lifecycle) -> bool {
    move |e| matches!(e, Lifecycle::Disconnected { link: l, .. } if *l == link)
}
