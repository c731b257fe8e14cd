//! `--tls`: a private RabbitMQ node with a TLS listener, certificates made for the run, and
//! the raw client's side of TLS (mesh's side is its `amqps://` URL).
//!
//! The shared broker has no TLS listener (and is never reconfigured or restarted by a
//! program of this project), so the bench starts a node of its own: its own ports, data
//! directory and certificate authority, all removed when the run ends.

use std::sync::Arc;

use amqprs::tls::TlsAdaptor;
use anyhow::Context;
use mesh_testkit::{NodeOptions, PrivateNode, TestPki, TlsListener};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

/// The name the server's certificate is made for, and the host the clients connect to.
const SERVER_NAME: &str = "localhost";

/// A private node with a TLS listener, and the CA its certificate chains to.
#[derive(Debug)]
pub(crate) struct TlsNode {
    node: Arc<PrivateNode>,
    port: u16,
    pki: TestPki,
}

impl TlsNode {
    /// Makes a CA and a server certificate for `localhost`, then boots a node that listens
    /// for TLS on a free loopback port (and for plain AMQP on another, which the bench does
    /// not use for its runs).
    pub(crate) async fn start() -> anyhow::Result<TlsNode> {
        let pki = TestPki::generate("bench")?;
        let server = pki.server("rabbit", &[SERVER_NAME, "127.0.0.1"])?;
        let options = NodeOptions::default().tls(TlsListener {
            ca_file: pki.ca_file().to_owned(),
            server_cert: server.cert,
            server_key: server.key,
            require_client_cert: false,
        });
        let node = PrivateNode::start(options)
            .await
            .context("starting a private RabbitMQ node with a TLS listener")?;
        let port = node
            .tls_port()
            .context("the private node reports no TLS port")?;
        Ok(TlsNode {
            node: Arc::new(node),
            port,
            pki,
        })
    }

    /// The node, for `rabbitmqctl`.
    pub(crate) fn node(&self) -> Arc<PrivateNode> {
        self.node.clone()
    }

    /// mesh's URL for the node's TLS listener, trusting the run's CA.
    pub(crate) fn url(&self) -> String {
        format!(
            "amqps://guest:guest@{SERVER_NAME}:{}?cacertfile={}",
            self.port,
            self.pki.ca_file().display()
        )
    }

    /// The raw client's TLS: rustls with the ring provider, trusting only the run's CA.
    pub(crate) fn raw_tls(&self) -> anyhow::Result<RawTls> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_file_iter(self.pki.ca_file())
            .context("reading the run's CA certificate")?
        {
            roots.add(cert.context("reading the run's CA certificate")?)?;
        }
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("choosing TLS versions")?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(RawTls {
            connector: TlsConnector::from(Arc::new(config)),
        })
    }
}

/// What the raw client needs to open a TLS connection to the node.
#[derive(Clone)]
pub(crate) struct RawTls {
    connector: TlsConnector,
}

impl std::fmt::Debug for RawTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawTls").finish_non_exhaustive()
    }
}

impl RawTls {
    pub(crate) fn adaptor(&self) -> TlsAdaptor {
        TlsAdaptor::new(self.connector.clone(), SERVER_NAME.to_owned())
    }
}
