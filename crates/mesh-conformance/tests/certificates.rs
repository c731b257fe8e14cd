//! x509 authentication and the tools a module may call, on a private RabbitMQ node with a
//! TLS listener that requires a client certificate (`verify_peer`, `fail_if_no_peer_cert`),
//! the plugin `rabbitmq_auth_mechanism_ssl` (`EXTERNAL`, users named by the certificate's
//! common name) and the access plan applied.
//!
//! The spec: modules `umami` and `billing` log in by certificate (their users have no
//! password), `shop` by password. billing reads `module.umami.#` and serves `billing.quote`;
//! umami may call `billing.quote` only, shop only umami's tools.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use mesh::amqp::access::AccessSpec;
use mesh::{Bus, HandlerError, Incoming, Outgoing, RetryPolicy};
use mesh_amqp::AmqpTransport;
use mesh_amqp::{AmqpOptions, AuthMechanism, ConnectRefused};
use mesh_core::{Name, TopicPattern, TransportErrorKind};
use mesh_testkit::planned::PlannedNode;
use mesh_testkit::{error_chain, eventually, CertFiles, NodeOptions, TestPki, TlsListener};

const WAIT: Duration = Duration::from_secs(30);

fn name(text: &str) -> Name {
    Name::parse(text).unwrap()
}

fn pattern(text: &str) -> TopicPattern {
    TopicPattern::parse(text).unwrap()
}

fn spec() -> AccessSpec {
    AccessSpec::new(name("n1"))
        .module(name("umami"), [])
        .module(name("billing"), [pattern("module.umami.#")])
        .module(name("shop"), [])
        .certificate_login(name("umami"))
        .certificate_login(name("billing"))
        .calls(name("umami"), [pattern("billing.quote")])
        .calls(name("shop"), [pattern("umami.#")])
}

/// The node, and the PKI whose CA it trusts (client files are read from it at connect).
struct Setup {
    broker: PlannedNode,
    pki: TestPki,
}

async fn setup() -> Setup {
    let pki = TestPki::generate("x509").unwrap();
    let server = pki.server("rabbit", &["localhost", "127.0.0.1"]).unwrap();
    let options = NodeOptions::default()
        .certificate_login(true)
        .tls(TlsListener {
            ca_file: pki.ca_file().to_owned(),
            server_cert: server.cert,
            server_key: server.key,
            require_client_cert: true,
        });
    let broker = PlannedNode::start_with(options, &spec())
        .await
        .expect("a private node under the access plan");
    // The operator declares billing's durable queues (its consumer queue, its tool's serve
    // queue), as `mesh topology apply` does: under the plan no module may.
    broker
        .declare_consumer(
            "n1",
            "billing",
            &["module.umami.#"],
            &RetryPolicy::default(),
        )
        .await
        .expect("the operator declares billing's queue");
    broker
        .declare_tool("billing.quote")
        .await
        .expect("the operator declares billing.quote's serve queue");
    Setup { broker, pki }
}

/// A transport connected with `options`.
async fn connect(options: AmqpOptions) -> AmqpTransport {
    let shown = options.to_string();
    mesh::amqp::connect(options)
        .await
        .unwrap_or_else(|e| panic!("{shown} connects: {e:#}"))
}

impl Setup {
    /// Options for `user` with its password on the plain listener; connections named
    /// `<name>.<link>`.
    fn password_options(&self, user: &str, name: &str) -> AmqpOptions {
        let options: AmqpOptions = self.broker.node.url().parse().unwrap();
        options
            .credentials(user, self.broker.password(user))
            .connection_name(name)
    }

    /// The user of each connection whose client-provided name contains `name`.
    async fn connection_users(&self, name: &str) -> Vec<String> {
        let listed = self
            .broker
            .node
            .rabbitmqctl(&["list_connections", "client_properties", "user", "-q"])
            .await
            .expect("rabbitmqctl lists the connections");
        listed
            .lines()
            .filter(|line| line.contains(name))
            .filter_map(|line| line.split_whitespace().last().map(str::to_owned))
            .collect()
    }

    /// Options logging in as `user` with the certificate `cert` alone: `amqps://user@…`,
    /// no password, `auth_mechanism=external`.
    fn certificate_options(&self, user: &str, cert: &CertFiles, name: &str) -> AmqpOptions {
        let url = format!(
            "amqps://{user}@127.0.0.1:{}/?auth_mechanism=external&cacertfile={}&certfile={}&keyfile={}",
            self.broker.node.tls_port().unwrap(),
            self.pki.ca_file().display(),
            cert.cert.display(),
            cert.key.display()
        );
        let options: AmqpOptions = url.parse().unwrap();
        assert_eq!(options.get_auth_mechanism(), AuthMechanism::External);
        // The management API is for the operator: these users have no password for it.
        options
            .connection_name(name)
            .management_url("http://127.0.0.1:1")
            .connect_timeout(Duration::from_secs(10))
    }

    fn module_cert(&self, module: &str) -> CertFiles {
        // The subject common name is the user's name, as `ssl_cert_login_from` reads it.
        self.pki.client(&format!("module.{module}")).unwrap()
    }
}

fn forbidden(error: &mesh::Error) -> bool {
    matches!(
        error.transport_kind(),
        Some(TransportErrorKind::Forbidden { .. })
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_alone_logs_in_as_its_module_and_speaks_only_as_it() {
    let setup = setup().await;
    let broker = &setup.broker;
    let (umami_cert, billing_cert) = (setup.module_cert("umami"), setup.module_cert("billing"));

    // billing, by certificate, reads umami's events with identity enforced.
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let billing = Bus::builder()
        .node("n1")
        .module("billing")
        .enforce_identity(true)
        .on_raw(["module.umami.#"], move |incoming: Incoming<Bytes>| {
            let seen_tx = seen_tx.clone();
            async move {
                let _ = seen_tx.send(incoming.meta.source().to_owned());
                Ok::<(), HandlerError>(())
            }
        })
        .start(Arc::new(
            connect(setup.certificate_options("module.billing", &billing_cert, "x509-billing"))
                .await,
        ))
        .await
        .expect("billing starts on its certificate");

    // umami, by certificate: the broker logs it in as module.umami, no password sent.
    let umami = Arc::new(
        connect(setup.certificate_options("module.umami", &umami_cert, "x509-umami")).await,
    );
    let users = setup.connection_users("x509-umami.").await;
    assert!(
        !users.is_empty() && users.iter().all(|u| u == "module.umami"),
        "umami's connections log in as module.umami: {users:?}"
    );
    let own = Bus::builder()
        .node("n1")
        .module("umami")
        .start(umami.clone())
        .await
        .expect("umami's bus starts");
    own.emit_outgoing(Outgoing::json("site.visited", &serde_json::json!({})).unwrap())
        .await
        .expect("umami's own event is confirmed");
    let source = tokio::time::timeout(WAIT, seen.recv())
        .await
        .expect("billing receives umami's event in time")
        .unwrap();
    assert_eq!(source, "umami");

    // umami's certificate emitting billing's key: refused by the broker.
    let forging = Bus::builder()
        .node("n1")
        .module("billing")
        .announce(false)
        .start(umami.clone())
        .await
        .expect("a bus claiming billing starts on umami's connection");
    let error = forging
        .emit_outgoing(Outgoing::json("invoice.paid", &serde_json::json!({})).unwrap())
        .await
        .expect_err("umami's certificate may not emit billing's key");
    assert!(forbidden(&error), "{}", error_chain(&error));

    // umami's certificate naming billing's user: logged in as umami all the same, so even
    // umami's own key is refused, stamped `user-id: module.billing`.
    let claiming =
        connect(setup.certificate_options("module.billing", &umami_cert, "x509-claiming")).await;
    let users = setup.connection_users("x509-claiming.").await;
    assert!(
        !users.is_empty() && users.iter().all(|u| u == "module.umami"),
        "the certificate decides the user: {users:?}"
    );
    let claiming = Bus::builder()
        .node("n1")
        .module("umami")
        .announce(false)
        .start(Arc::new(claiming))
        .await
        .expect("a bus starts on the claiming connection");
    let error = claiming
        .emit_outgoing(Outgoing::json("site.visited", &serde_json::json!({})).unwrap())
        .await
        .expect_err("a user-id other than the certificate's user is refused");
    assert!(forbidden(&error), "{}", error_chain(&error));
    assert!(
        error_chain(&error).contains("user_id"),
        "{}",
        error_chain(&error)
    );

    // No password logs in as a certificate user: it has none.
    let password_login = AmqpOptions::new()
        .address("127.0.0.1", broker.node.port())
        .credentials("module.umami", "")
        .connection_name("x509-password")
        .connect_timeout(Duration::from_secs(10));
    let error = mesh::amqp::connect(password_login)
        .await
        .expect_err("module.umami has no password");
    assert!(
        matches!(
            ConnectRefused::of(&error),
            Some(ConnectRefused::Login { .. })
        ),
        "{error:#}"
    );
    // A certificate of the trusted CA naming no planned user is refused.
    let stranger = setup.pki.client("module.nobody").unwrap();
    let error =
        mesh::amqp::connect(setup.certificate_options("module.nobody", &stranger, "x509-stranger"))
            .await
            .expect_err("no user is named by the certificate");
    assert!(
        matches!(
            ConnectRefused::of(&error),
            Some(ConnectRefused::Login { .. })
        ),
        "{error:#}"
    );

    claiming.close().await;
    forging.close().await;
    own.close().await;
    billing.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_modules_the_spec_lets_call_a_tool_reach_it() {
    let setup = setup().await;
    let callers = Arc::new(Mutex::new(Vec::<(String, Option<String>)>::new()));
    let billing = {
        let callers = callers.clone();
        Bus::builder()
            .node("n1")
            .module("billing")
            .enforce_identity(true)
            .serve(
                "billing.quote",
                move |_: serde_json::Value, meta: mesh_core::RequestMeta| {
                    let callers = callers.clone();
                    async move {
                        callers.lock().unwrap().push((meta.source, meta.user));
                        Ok::<_, mesh_core::RemoteError>(serde_json::json!({"total": 7}))
                    }
                },
            )
            .start(Arc::new(
                connect(setup.certificate_options(
                    "module.billing",
                    &setup.module_cert("billing"),
                    "x509-billing",
                ))
                .await,
            ))
            .await
            .expect("billing serves on its certificate")
    };

    // umami (by certificate) may call billing.quote: served, and seen as itself.
    let umami = Bus::builder()
        .node("n1")
        .module("umami")
        .start(Arc::new(
            connect(setup.certificate_options(
                "module.umami",
                &setup.module_cert("umami"),
                "x509-umami",
            ))
            .await,
        ))
        .await
        .expect("umami's bus starts");
    let quote: serde_json::Value = umami
        .call("billing.quote", &serde_json::json!({}), WAIT)
        .await
        .expect("umami may call billing.quote");
    assert_eq!(quote, serde_json::json!({"total": 7}));

    // shop (by password) may call umami's tools only: the broker refuses its request.
    let shop = Bus::builder()
        .node("n1")
        .module("shop")
        .start(Arc::new(
            connect(setup.password_options("module.shop", "x509-shop")).await,
        ))
        .await
        .expect("shop's bus starts");
    let error = shop
        .call::<_, serde_json::Value>("billing.quote", &serde_json::json!({}), WAIT)
        .await
        .expect_err("shop may not call billing.quote");
    assert!(forbidden(&error), "{}", error_chain(&error));
    assert!(
        error_chain(&error).contains("billing.quote"),
        "{}",
        error_chain(&error)
    );

    // The tool saw umami's request only, with its validated user.
    let seen = eventually(WAIT, "the served request is recorded", || {
        let callers = callers.clone();
        async move {
            let seen = callers.lock().unwrap().clone();
            (!seen.is_empty()).then_some(seen)
        }
    })
    .await;
    assert_eq!(
        seen,
        [("umami".to_owned(), Some("module.umami".to_owned()))]
    );
    shop.close().await;
    umami.close().await;
    billing.close().await;
}
