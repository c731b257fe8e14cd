//! TLS for `amqps://`: the rustls client configuration of one connection attempt, and what
//! went wrong when the handshake failed ([`TlsError`]).
//!
//! The client library is handed a `TlsConnector` built here (never its own helpers, which
//! load webpki's roots and panic on a bad key file): rustls with the ring provider, the CA
//! file's certificates or else the system's root store (`rustls-native-certs`), and the client
//! certificate if one is configured. Every file is read again for each attempt, so a rotated
//! CA, certificate or key takes effect at the next (re)connect.
//!
//! # Why a failure is known
//!
//! The client library does the handshake itself and turns its failure into a string. Rather
//! than read that string, the configuration carries two recorders the handshake calls into:
//!
//! - the server certificate verifier wraps rustls's `WebPkiServerVerifier` and keeps the
//!   error it returned (unknown CA, name mismatch, expired…);
//! - the client certificate resolver notes that the server asked for a client certificate.
//!   With TLS 1.3 a server that requires one and got none only says so in an alert after the
//!   handshake, on the first read: a failed attempt with no certificate to give, after the
//!   server asked for one, is reported as [`TlsErrorKind::ClientCertificateRequired`].
//!
//! Only what neither recorder saw is read from the library's message (a fatal alert the server
//! sent, or an answer that is not TLS at all).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use mesh_core::{TransportError, TransportErrorKind};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{ResolvesClientCert, WebPkiServerVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::sign::CertifiedKey;
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};

/// Whether the server's certificate is checked (RabbitMQ's `verify` URI parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum TlsVerify {
    /// The server's certificate must chain to a trusted CA and name the server
    /// (`verify_peer`). The default.
    #[default]
    Peer,
    /// Any certificate is accepted (`verify_none`): the connection is encrypted but the
    /// server is not authenticated, so a man in the middle can read the password. Logged as
    /// a warning at every connect.
    None,
}

impl TlsVerify {
    /// The URI parameter's value.
    pub const fn as_str(self) -> &'static str {
        match self {
            TlsVerify::Peer => "verify_peer",
            TlsVerify::None => "verify_none",
        }
    }
}

/// The TLS settings of an `amqps://` connection (see [`AmqpOptions::tls`](crate::AmqpOptions::tls)).
///
/// ```
/// use mesh_amqp::{AmqpOptions, TlsOptions};
///
/// let tls = TlsOptions::new()
///     .ca_file("/etc/mesh/ca.pem")
///     .client_cert("/etc/mesh/client.pem", "/etc/mesh/client.key")
///     .server_name("rabbit.internal");
/// let options = AmqpOptions::new().address("10.0.0.7", 5671).tls(tls);
/// # let _ = options;
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsOptions {
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    verify: TlsVerify,
    server_name: Option<String>,
}

impl TlsOptions {
    /// Verify the server against the system's root store, no client certificate.
    pub fn new() -> TlsOptions {
        TlsOptions::default()
    }

    /// Trust the CA certificates of this PEM file instead of the system's root store
    /// (`cacertfile`).
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Present this client certificate (PEM, the chain leaf first) and its private key
    /// (PEM: PKCS#8, PKCS#1 or SEC1) when the server asks (`certfile`, `keyfile`).
    pub fn client_cert(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.cert_file = Some(cert.into());
        self.key_file = Some(key.into());
        self
    }

    /// Whether to check the server's certificate (`verify`).
    pub fn verify(mut self, verify: TlsVerify) -> Self {
        self.verify = verify;
        self
    }

    /// The name the server's certificate must hold and the SNI sent
    /// (`server_name_indication`); by default the host of the address connected to.
    pub fn server_name(mut self, name: impl Into<String>) -> Self {
        self.server_name = Some(name.into());
        self
    }

    /// The CA file.
    pub fn get_ca_file(&self) -> Option<&Path> {
        self.ca_file.as_deref()
    }

    /// The client certificate file.
    pub fn get_cert_file(&self) -> Option<&Path> {
        self.cert_file.as_deref()
    }

    /// The client key file.
    pub fn get_key_file(&self) -> Option<&Path> {
        self.key_file.as_deref()
    }

    /// The verification mode.
    pub fn get_verify(&self) -> TlsVerify {
        self.verify
    }

    /// The server name, if set.
    pub fn get_server_name(&self) -> Option<&str> {
        self.server_name.as_deref()
    }

    pub(crate) fn set_cert_file(&mut self, path: PathBuf) {
        self.cert_file = Some(path);
    }

    pub(crate) fn set_key_file(&mut self, path: PathBuf) {
        self.key_file = Some(path);
    }

    /// Loads every file and builds a configuration, as a connect would: what is missing,
    /// unreadable or malformed is an `InvalidOptions` error naming the file.
    pub(crate) fn check(&self) -> Result<(), TransportError> {
        if let Some(name) = &self.server_name {
            server_name(name)?;
        }
        Attempt::configure(self).map(|_| ())
    }
}

/// Why a TLS session could not be set up: the source of a
/// [`TransportErrorKind::Tls`] error.
#[derive(Debug)]
pub struct TlsError {
    kind: TlsErrorKind,
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// What went wrong with TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TlsErrorKind {
    /// The server's certificate does not chain to a trusted CA (`cacertfile`, or the system's
    /// root store).
    UnknownCa,
    /// The server's certificate does not hold the name connected to (or
    /// `server_name_indication`).
    NameMismatch {
        /// The name that was expected.
        name: String,
    },
    /// The server's certificate has expired.
    Expired,
    /// The server's certificate is not valid yet.
    NotYetValid,
    /// The server's certificate was refused for another reason (see the source).
    BadCertificate,
    /// The server requires a client certificate and none is configured.
    ClientCertificateRequired,
    /// The server refused the client certificate it was given.
    ClientCertificateRefused {
        /// The TLS alert the server sent.
        alert: String,
    },
    /// The server refused the handshake (no common protocol version or cipher suite…).
    HandshakeRefused {
        /// The TLS alert the server sent.
        alert: String,
    },
    /// The server did not answer in TLS: probably a plain AMQP port.
    NotTls,
}

impl TlsError {
    fn new(kind: TlsErrorKind) -> TlsError {
        TlsError { kind, source: None }
    }

    fn with_source(
        mut self,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> TlsError {
        self.source = Some(source.into());
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> &TlsErrorKind {
        &self.kind
    }

    /// Whether the next address of the same cluster cannot do better: the trusted CAs and the
    /// client certificate are the client's, the same for every node, so an unknown CA and a
    /// missing or refused client certificate end the attempt; a name mismatch, an expired
    /// certificate or a refused handshake belong to one node, and the next may be fine.
    pub fn is_client_configuration(&self) -> bool {
        matches!(
            self.kind,
            TlsErrorKind::UnknownCa
                | TlsErrorKind::ClientCertificateRequired
                | TlsErrorKind::ClientCertificateRefused { .. }
        )
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            TlsErrorKind::UnknownCa => {
                f.write_str("the server's certificate is not signed by a trusted CA")
            }
            TlsErrorKind::NameMismatch { name } => {
                write!(f, "the server's certificate is not valid for `{name}`")
            }
            TlsErrorKind::Expired => f.write_str("the server's certificate has expired"),
            TlsErrorKind::NotYetValid => f.write_str("the server's certificate is not valid yet"),
            TlsErrorKind::BadCertificate => f.write_str("the server's certificate was refused"),
            TlsErrorKind::ClientCertificateRequired => {
                f.write_str("the server requires a client certificate")
            }
            TlsErrorKind::ClientCertificateRefused { alert } => {
                write!(f, "the server refused the client certificate ({alert})")
            }
            TlsErrorKind::HandshakeRefused { alert } => {
                write!(f, "the server refused the tls handshake ({alert})")
            }
            TlsErrorKind::NotTls => {
                f.write_str("the server did not answer in tls (is this a plain amqp port?)")
            }
        }
    }
}

impl std::error::Error for TlsError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// One connection attempt's TLS: the adaptor handed to the client library and what the
/// handshake recorded.
pub(crate) struct Attempt {
    config: Arc<ClientConfig>,
    /// The error the certificate verifier returned, if it refused.
    refusal: Arc<Mutex<Option<rustls::Error>>>,
    /// Whether the server asked for a client certificate.
    asked_for_cert: Arc<AtomicBool>,
    has_client_cert: bool,
    verify: TlsVerify,
}

impl fmt::Debug for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Attempt").finish_non_exhaustive()
    }
}

impl Attempt {
    /// Reads the files and builds the configuration of one attempt.
    pub(crate) fn configure(options: &TlsOptions) -> Result<Attempt, TransportError> {
        let provider = Arc::new(ring_provider());
        let refusal = Arc::new(Mutex::new(None));
        let verifier: Arc<dyn ServerCertVerifier> = match options.verify {
            TlsVerify::Peer => {
                let roots = match &options.ca_file {
                    Some(path) => ca_roots(path)?,
                    None => system_roots()?,
                };
                let inner =
                    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| {
                            invalid("cannot build the certificate verifier").with_source(e)
                        })?;
                Arc::new(Recording {
                    inner,
                    refusal: refusal.clone(),
                })
            }
            TlsVerify::None => Arc::new(Unverified {
                provider: provider.clone(),
            }),
        };
        let client_key = match (&options.cert_file, &options.key_file) {
            (Some(cert), Some(key)) => Some(Arc::new(client_key(cert, key, &provider)?)),
            (None, None) => None,
            (Some(_), None) => {
                return Err(invalid("a client certificate (certfile) needs its keyfile"))
            }
            (None, Some(_)) => return Err(invalid("a client key (keyfile) needs its certfile")),
        };
        let asked_for_cert = Arc::new(AtomicBool::new(false));
        let has_client_cert = client_key.is_some();
        let config = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid("cannot set up tls").with_source(e))?
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_client_cert_resolver(Arc::new(ClientAuth {
                key: client_key,
                asked: asked_for_cert.clone(),
            }));
        Ok(Attempt {
            config: Arc::new(config),
            refusal,
            asked_for_cert,
            has_client_cert,
            verify: options.verify,
        })
    }

    /// The connector handed to the client library (with the name to verify the server as).
    pub(crate) fn connector(&self) -> tokio_rustls::TlsConnector {
        tokio_rustls::TlsConnector::from(self.config.clone())
    }

    pub(crate) fn verify(&self) -> TlsVerify {
        self.verify
    }

    /// What went wrong with TLS in a failed attempt, if TLS is why it failed; `name` is the
    /// name the server was verified as, `message` the client library's error text.
    pub(crate) fn failure(&self, name: &str, message: &str) -> Option<TlsError> {
        if let Some(error) = self.refusal.lock().ok().and_then(|mut r| r.take()) {
            return Some(from_refusal(error, name));
        }
        let alert = alert(message);
        // Only with an alert from the server: a server that merely asks for a certificate
        // (and takes a client without one) may fail later for unrelated reasons.
        if let Some(alert) = alert
            .as_deref()
            .filter(|_| self.asked_for_cert.load(Ordering::Acquire))
        {
            if !self.has_client_cert {
                return Some(
                    TlsError::new(TlsErrorKind::ClientCertificateRequired)
                        .with_source(format!("received fatal alert: {alert}")),
                );
            }
            if is_client_cert_alert(alert) {
                return Some(TlsError::new(TlsErrorKind::ClientCertificateRefused {
                    alert: alert.to_owned(),
                }));
            }
        }
        if let Some(alert) = alert {
            return Some(TlsError::new(TlsErrorKind::HandshakeRefused { alert }));
        }
        // The server asked for a client certificate, got none, and dropped the connection
        // before the AMQP handshake was through. With TLS 1.3 its alert comes after the
        // client's handshake is done; when the client's next write reaches a socket the
        // server already closed, the reset can arrive before the alert is read, and the
        // alert is lost. A server that only asks (and takes a client without one) would go
        // on with the AMQP handshake instead of dropping the connection.
        if self.asked_for_cert.load(Ordering::Acquire)
            && !self.has_client_cert
            && is_dropped_connection(message)
        {
            return Some(TlsError::new(TlsErrorKind::ClientCertificateRequired).with_source(
                format!("the server asked for a client certificate, got none and closed the connection: {message}"),
            ));
        }
        // rustls's words for a first record that is not TLS.
        if message.contains("corrupt message") || message.contains("InvalidContentType") {
            return Some(TlsError::new(TlsErrorKind::NotTls));
        }
        None
    }
}

/// The name to verify and to send as SNI: `server_name_indication`, or the host without an
/// IPv6 address's brackets.
pub(crate) fn verified_name<'a>(options: &'a TlsOptions, host: &'a str) -> &'a str {
    match &options.server_name {
        Some(name) => name,
        None => host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host),
    }
}

/// rustls's *ring* provider, the one this crate builds rustls with.
///
/// rustls 0.23.48 deprecates the function itself ("no support for post-quantum algorithms":
/// *ring* has no hybrid post-quantum key exchange), with no other way to name the provider;
/// the only change that avoids it is another provider (aws-lc-rs). The allowance is limited
/// to this one call, so that a user's crate with a newer rustls gets no warning from mesh.
#[allow(deprecated)]
fn ring_provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// Checks that `name` can be verified (a DNS name or an IP address).
pub(crate) fn server_name(name: &str) -> Result<(), TransportError> {
    ServerName::try_from(name)
        .map(|_| ())
        .map_err(|e| invalid(format!("`{name}` is not a valid tls server name")).with_source(e))
}

fn from_refusal(error: rustls::Error, name: &str) -> TlsError {
    let kind = match &error {
        rustls::Error::InvalidCertificate(certificate) => match certificate {
            CertificateError::UnknownIssuer => TlsErrorKind::UnknownCa,
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                TlsErrorKind::NameMismatch {
                    name: name.to_owned(),
                }
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                TlsErrorKind::Expired
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                TlsErrorKind::NotYetValid
            }
            _ => TlsErrorKind::BadCertificate,
        },
        _ => TlsErrorKind::BadCertificate,
    };
    TlsError::new(kind).with_source(error)
}

/// The alert in rustls's `received fatal alert: <Alert>`, as quoted by the client library.
fn alert(message: &str) -> Option<String> {
    const MARK: &str = "received fatal alert: ";
    let rest = &message[message.find(MARK)? + MARK.len()..];
    let alert: String = rest
        .chars()
        .take_while(char::is_ascii_alphanumeric)
        .collect();
    (!alert.is_empty()).then_some(alert)
}

/// Whether the client library's message says the peer dropped the connection (a reset, a
/// closed pipe, or the end of the stream).
fn is_dropped_connection(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    ["reset by peer", "broken pipe", "end of file", "eof"]
        .iter()
        .any(|words| message.contains(words))
}

/// The alerts a server sends about the client's certificate.
fn is_client_cert_alert(alert: &str) -> bool {
    matches!(
        alert,
        "CertificateRequired"
            | "BadCertificate"
            | "UnsupportedCertificate"
            | "CertificateRevoked"
            | "CertificateExpired"
            | "CertificateUnknown"
            | "UnknownCA"
            | "AccessDenied"
    )
}

/// A PEM file, read as every file a user names is: at most [`mesh_files::MAX_PEM`] bytes, a
/// FIFO or device within [`mesh_files::DEADLINE`].
fn read(path: &Path, what: &str) -> Result<Vec<u8>, TransportError> {
    mesh_files::read_bounded(path, mesh_files::MAX_PEM, mesh_files::DEADLINE)
        .map_err(|e| invalid(format!("cannot read the {what} `{}`", path.display())).with_source(e))
}

fn certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>, TransportError> {
    let pem = read(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            invalid(format!("the {what} `{}` is not valid PEM", path.display())).with_source(e)
        })?;
    if certs.is_empty() {
        return Err(invalid(format!(
            "the {what} `{}` holds no certificate",
            path.display()
        )));
    }
    Ok(certs)
}

fn ca_roots(path: &Path) -> Result<RootCertStore, TransportError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(path, "CA file")? {
        roots.add(cert).map_err(|e| {
            invalid(format!(
                "the CA file `{}` holds a certificate that cannot be trusted",
                path.display()
            ))
            .with_source(e)
        })?;
    }
    Ok(roots)
}

fn system_roots() -> Result<RootCertStore, TransportError> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        let error = invalid("the system's root store holds no CA certificate: give a cacertfile");
        return Err(match found.errors.into_iter().next() {
            Some(cause) => error.with_source(cause),
            None => error,
        });
    }
    Ok(roots)
}

fn client_key(
    cert: &Path,
    key: &Path,
    provider: &CryptoProvider,
) -> Result<CertifiedKey, TransportError> {
    let chain = certificates(cert, "client certificate file")?;
    let pem = read(key, "client key file")?;
    let der = PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        invalid(format!(
            "the client key file `{}` holds no PEM private key",
            key.display()
        ))
        .with_source(e)
    })?;
    CertifiedKey::from_der(chain, der, provider).map_err(|e| {
        invalid(format!(
            "the client key `{}` is unusable or does not match the certificate `{}`",
            key.display(),
            cert.display()
        ))
        .with_source(e)
    })
}

fn invalid(context: impl Into<String>) -> TransportError {
    TransportError::new(TransportErrorKind::InvalidOptions, context)
}

/// rustls's verifier, keeping the error it refused a certificate with.
#[derive(Debug)]
struct Recording {
    inner: Arc<WebPkiServerVerifier>,
    refusal: Arc<Mutex<Option<rustls::Error>>>,
}

impl ServerCertVerifier for Recording {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
            .inspect_err(|error| {
                if let Ok(mut refusal) = self.refusal.lock() {
                    *refusal = Some(error.clone());
                }
            })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// `verify_none`: any certificate is accepted, but the handshake's signatures are still
/// checked against it (so the session is at least bound to the key the server showed).
#[derive(Debug)]
struct Unverified {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The client certificate, given when the server asks; notes that it asked.
#[derive(Debug)]
struct ClientAuth {
    key: Option<Arc<CertifiedKey>>,
    asked: Arc<AtomicBool>,
}

impl ResolvesClientCert for ClientAuth {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[rustls::SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        self.asked.store(true, Ordering::Release);
        self.key.clone()
    }

    fn has_certs(&self) -> bool {
        self.key.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_alerts_from_the_library_message() {
        assert_eq!(
            alert("AMQP network error: received fatal alert: CertificateRequired").as_deref(),
            Some("CertificateRequired")
        );
        assert_eq!(alert("AMQP network error: connection reset"), None);
        assert_eq!(alert("received fatal alert: "), None);
    }

    #[test]
    fn knows_a_dropped_connection_from_other_failures() {
        assert!(is_dropped_connection(
            "AMQP network error: network io error: Connection reset by peer (os error 104)"
        ));
        assert!(is_dropped_connection("network io error: unexpected EOF"));
        assert!(is_dropped_connection("Broken pipe (os error 32)"));
        assert!(!is_dropped_connection("connection refused (os error 111)"));
        assert!(!is_dropped_connection("ACCESS_REFUSED - Login was refused"));
    }

    #[test]
    fn a_refused_certificate_is_named() {
        let kind = |e: CertificateError| {
            from_refusal(rustls::Error::InvalidCertificate(e), "h")
                .kind()
                .clone()
        };
        assert_eq!(
            kind(CertificateError::UnknownIssuer),
            TlsErrorKind::UnknownCa
        );
        assert_eq!(kind(CertificateError::Expired), TlsErrorKind::Expired);
        assert_eq!(
            kind(CertificateError::NotValidForName),
            TlsErrorKind::NameMismatch { name: "h".into() }
        );
        assert_eq!(
            kind(CertificateError::BadEncoding),
            TlsErrorKind::BadCertificate
        );
        assert!(TlsError::new(TlsErrorKind::UnknownCa).is_client_configuration());
        assert!(!TlsError::new(TlsErrorKind::Expired).is_client_configuration());
    }

    #[test]
    fn the_verified_name_drops_ipv6_brackets_and_prefers_sni() {
        let options = TlsOptions::new();
        assert_eq!(verified_name(&options, "[::1]"), "::1");
        assert_eq!(verified_name(&options, "rabbit"), "rabbit");
        let options = options.server_name("other");
        assert_eq!(verified_name(&options, "rabbit"), "other");
        assert!(server_name("::1").is_ok());
        assert!(server_name("not a name").is_err());
    }
}
