//! Opening a named connection to a broker node, and the state the broker reports about it
//! (closed, blocked).
//!
//! Each connection is owned by one task (the publisher's, or the consume side's supervisor),
//! through a [`ConnectionOwner`](super::owner::ConnectionOwner) that watches it with
//! [`lost`] and replaces it when it is lost; everything else only reads the [`LinkState`]. The connection callbacks of the client library run on its own tasks:
//! they only record what the broker said in the `LinkState`, tagged with the connection they
//! came from, so a late callback of a replaced connection changes nothing.

use mesh_core::text::EscapedDisplay;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use amqprs::callbacks::ConnectionCallback;
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::security::SecurityCredentials;
use amqprs::tls::TlsAdaptor;
use amqprs::Close;
use mesh_core::{BoxFuture, TransportError, TransportErrorKind};

use crate::error::from_client;
use crate::lifecycle::{Lifecycle, Link, TransportShared};
use crate::options::{AmqpOptions, AuthMechanism};
use crate::tls::{verified_name, Attempt, TlsError, TlsVerify};

/// What one link's owner and the broker's callbacks report, for health checks and stats.
#[derive(Debug)]
pub(crate) struct LinkState {
    link: Link,
    shared: Arc<TransportShared>,
    connected: AtomicBool,
    blocked: AtomicBool,
    /// Whether the broker said `connection.blocked` (an alarm) on the current connection, and
    /// has not said `connection.unblocked` since.
    broker_blocked: AtomicBool,
    /// Which connection of this link is current (bumped by its owner for each new one).
    current: AtomicU64,
    /// Blocked time: the total of past blocks, and when the current one began.
    blocked_time: Mutex<(Duration, Option<Instant>)>,
    /// Why the broker closed the current connection, if it said.
    close_reason: Mutex<Option<String>>,
}

impl LinkState {
    pub(crate) fn new(link: Link, shared: Arc<TransportShared>) -> LinkState {
        LinkState {
            link,
            shared,
            connected: AtomicBool::new(false),
            blocked: AtomicBool::new(false),
            broker_blocked: AtomicBool::new(false),
            current: AtomicU64::new(0),
            blocked_time: Mutex::new((Duration::ZERO, None)),
            close_reason: Mutex::new(None),
        }
    }

    /// Which link this is.
    pub(crate) fn link(&self) -> Link {
        self.link
    }

    pub(crate) fn connected(&self) -> bool {
        self.connected.load(Ordering::Acquire)
    }

    /// Marks the current connection up or down. A connection starts unblocked (the broker
    /// says again if it is not), so going down ends a block.
    pub(crate) fn set_connected(&self, connected: bool) {
        self.connected.store(connected, Ordering::Release);
        if !connected {
            self.broker_blocked.store(false, Ordering::Release);
            self.unblock();
        }
    }

    /// Whether the broker said it blocks the current connection (a memory or disk alarm):
    /// then confirms stall for that reason, not because the connection is stuck.
    pub(crate) fn broker_blocked(&self) -> bool {
        self.broker_blocked.load(Ordering::Acquire)
    }

    pub(crate) fn blocked(&self) -> bool {
        self.blocked.load(Ordering::Acquire)
    }

    /// Marks the link blocked (by the broker's `connection.blocked`, or inferred by the
    /// publisher); reports it if it was not.
    pub(crate) fn block(&self, reason: String) {
        if self.set_blocked(true) {
            tracing::warn!(link = %self.link, reason = %EscapedDisplay(&reason), "publishing is blocked");
            self.shared.emit(Lifecycle::Blocked {
                link: self.link,
                reason,
            });
        }
    }

    /// Marks the link unblocked; reports it if it was blocked.
    pub(crate) fn unblock(&self) {
        if self.set_blocked(false) {
            tracing::info!(link = %self.link, "publishing is unblocked");
            self.shared.emit(Lifecycle::Unblocked { link: self.link });
        }
    }

    /// Sets the flag and keeps the time; whether it changed.
    fn set_blocked(&self, blocked: bool) -> bool {
        let was = self.blocked.swap(blocked, Ordering::AcqRel);
        if let Ok(mut time) = self.blocked_time.lock() {
            match (was, blocked) {
                (false, true) => time.1 = Some(Instant::now()),
                (true, false) => {
                    if let Some(since) = time.1.take() {
                        time.0 += since.elapsed();
                    }
                }
                _ => {}
            }
        }
        was != blocked
    }

    /// How long this link was blocked by the broker, in all, including a block going on now.
    pub(crate) fn blocked_time(&self) -> Duration {
        match self.blocked_time.lock() {
            Ok(time) => time.0 + time.1.map_or(Duration::ZERO, |since| since.elapsed()),
            Err(_) => Duration::ZERO,
        }
    }

    /// Makes the next connection current; returns its number, for its callbacks.
    fn next_connection(&self) -> u64 {
        if let Ok(mut reason) = self.close_reason.lock() {
            *reason = None;
        }
        self.current.fetch_add(1, Ordering::AcqRel) + 1
    }

    fn is_current(&self, connection: u64) -> bool {
        self.current.load(Ordering::Acquire) == connection
    }

    /// Why the current connection was lost: the broker's close if it sent one, else the
    /// network (a failed read or write, or missed heartbeats).
    pub(crate) fn loss_reason(&self) -> String {
        self.close_reason
            .lock()
            .ok()
            .and_then(|mut reason| reason.take())
            .unwrap_or_else(|| "network failure or missed heartbeats".to_owned())
    }
}

/// The connection callbacks: the broker's `connection.close`, `connection.blocked` and
/// `connection.unblocked`.
struct LinkCallback {
    state: Arc<LinkState>,
    /// Which connection of the link this is.
    connection: u64,
}

#[async_trait::async_trait]
impl ConnectionCallback for LinkCallback {
    async fn close(
        &mut self,
        connection: &Connection,
        close: Close,
    ) -> Result<(), amqprs::error::Error> {
        tracing::warn!(
            connection = %connection.connection_name(),
            close = %EscapedDisplay(&close),
            "broker closed the connection"
        );
        if self.state.is_current(self.connection) {
            if let Ok(mut reason) = self.state.close_reason.lock() {
                *reason = Some(format!("{}: {}", close.reply_code(), close.reply_text()));
            }
            self.state.set_connected(false);
        }
        Ok(())
    }

    // RabbitMQ sends `connection.blocked` only to clients that announce the capability,
    // which mesh's fork of amqprs does (upstream 2.1 does not); the publisher also infers a
    // block from stalled confirms (see `publisher`), and tells the two apart.
    async fn blocked(&mut self, connection: &Connection, reason: String) {
        // A memory or disk alarm: the broker stops reading from publishing connections, so
        // confirms stop and the unconfirmed window fills up.
        tracing::warn!(
            connection = %connection.connection_name(),
            reason = %EscapedDisplay(&reason),
            "broker blocked the connection"
        );
        if self.state.is_current(self.connection) {
            self.state.broker_blocked.store(true, Ordering::Release);
            self.state.block(reason);
        }
    }

    async fn unblocked(&mut self, connection: &Connection) {
        tracing::info!(
            connection = %connection.connection_name(),
            "broker unblocked the connection"
        );
        if self.state.is_current(self.connection) {
            self.state.broker_blocked.store(false, Ordering::Release);
            self.state.unblock();
        }
    }

    async fn secret_updated(&mut self, _connection: &Connection) {}
}

/// A connection and the future that resolves once it is lost, owned by the link's task.
pub(crate) struct Live {
    pub(crate) connection: Connection,
    /// The index of its address in the options.
    pub(crate) address: usize,
    lost: BoxFuture<'static, ()>,
}

impl Live {
    pub(crate) fn new(connection: Connection, address: usize) -> Live {
        let watched = connection.clone();
        Live {
            connection,
            address,
            lost: Box::pin(async move { lost(&watched).await }),
        }
    }
}

/// Resolves once `live` is lost; never while it is `None`.
///
/// # Cancel safety
///
/// Cancel safe: the watch lives in `live`, not in this future.
pub(crate) async fn lost_opt(live: &mut Option<Live>) {
    match live {
        Some(live) => (&mut live.lost).await,
        None => std::future::pending().await,
    }
}

/// Resolves with the outcome of a connection attempt in progress; never while there is none.
pub(crate) async fn opened_opt<T>(attempt: &mut Option<BoxFuture<'static, T>>) -> T {
    match attempt {
        Some(attempt) => attempt.await,
        None => std::future::pending().await,
    }
}

/// Resolves at `at`; never if `None`.
pub(crate) async fn sleep_opt(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Opens the connection `<prefix>.<link>` to the first address that accepts it, trying them
/// in order from `start` (wrapping around), each bounded by the connect timeout. Returns the
/// connection and the index of its address. The caller marks the state connected when it is
/// ready to be used.
///
/// The password file and the TLS files are read here, at every call, so a rotated secret is
/// used by the next (re)connect. A failure that the next address cannot cure ends the attempt
/// early: a refused login, and a TLS failure due to the client's own configuration (unknown
/// CA, client certificate missing or refused; see [`TlsError::is_client_configuration`]).
pub(crate) async fn open(
    options: &AmqpOptions,
    state: Arc<LinkState>,
    start: usize,
) -> Result<(Connection, usize), TransportError> {
    let name = format!("{}.{}", options.get_connection_name(), state.link);
    let heartbeat = u16::try_from(options.get_heartbeat().as_secs()).unwrap_or(u16::MAX);
    let external = options.get_auth_mechanism() == AuthMechanism::External;
    // A certificate login sends no password: none is read.
    let password = if external {
        String::new()
    } else {
        let options = options.clone();
        crate::blocking::off_runtime(move || options.load_password()).await?
    };
    let addresses = options.get_addresses();
    let mut last_error = None;
    for offset in 0..addresses.len() {
        let index = (start + offset) % addresses.len();
        let address = &addresses[index];
        let mut args = OpenConnectionArguments::new(
            &address.host,
            address.port,
            options.get_user(),
            &password,
        );
        if external {
            args.credentials(SecurityCredentials::new_external());
        }
        args.virtual_host(options.get_vhost())
            .connection_name(&name)
            .heartbeat(heartbeat);
        let tls = match options.get_tls() {
            Some(tls_options) => {
                let attempt = {
                    let tls_options = tls_options.clone();
                    crate::blocking::off_runtime(move || Attempt::configure(&tls_options)).await?
                };
                let verified = verified_name(tls_options, &address.host).to_owned();
                if attempt.verify() == TlsVerify::None {
                    tracing::warn!(
                        %address,
                        "tls verification is off (verify_none): the broker is not authenticated"
                    );
                }
                args.tls_adaptor(TlsAdaptor::new(attempt.connector(), verified.clone()));
                Some((attempt, verified))
            }
            None => None,
        };
        let args = args.finish();
        let context = format!("connecting to {address} as `{name}`");
        let opened = tokio::time::timeout(options.get_connect_timeout(), Connection::open(&args))
            .await
            .map_err(|_| {
                TransportError::new(
                    TransportErrorKind::ConnectionLost,
                    format!("{context}: timed out"),
                )
            })
            .and_then(|r| {
                r.map_err(|e| {
                    let refused = super::refused::from_refusal(
                        &e,
                        options.get_user(),
                        options.get_vhost(),
                        &context,
                    );
                    match (refused, &tls) {
                        (Some(refused), _) => refused,
                        (None, Some((attempt, verified))) => {
                            from_tls_attempt(e, attempt, verified, &context)
                        }
                        (None, None) => from_client(e, &context),
                    }
                })
            });
        match opened {
            Ok(connection) => {
                let number = state.next_connection();
                connection
                    .register_callback(LinkCallback {
                        state: state.clone(),
                        connection: number,
                    })
                    .await
                    .map_err(|e| from_client(e, "registering connection callbacks"))?;
                tracing::info!(
                    connection = %name,
                    %address,
                    vhost = %options.get_vhost(),
                    tls = tls.is_some(),
                    heartbeat = connection.heartbeat(),
                    "connected"
                );
                return Ok((connection, index));
            }
            Err(error) => {
                tracing::warn!(%address, error = %EscapedDisplay(&error), "connection attempt failed");
                // A refused login is not cured by the next node of the same cluster.
                if error.kind() == &TransportErrorKind::AccessRefused {
                    return Err(error);
                }
                if tls_is_client_configuration(&error) {
                    return Err(error);
                }
                last_error = Some(error);
            }
        }
    }
    Err(last_error.unwrap_or_else(|| {
        TransportError::new(TransportErrorKind::InvalidOptions, "no broker address")
    }))
}

/// The error of a failed TLS attempt: a `Tls` error saying why if TLS is the cause, else what
/// the client library reported.
fn from_tls_attempt(
    error: amqprs::error::Error,
    attempt: &Attempt,
    verified: &str,
    context: &str,
) -> TransportError {
    // A login refused by the broker came after a good handshake; the recorders may have
    // seen the server ask for an optional client certificate, which is not the cause.
    if let amqprs::error::Error::NetworkError(message) = &error {
        if let Some(tls) = attempt.failure(verified, message) {
            return TransportError::new(TransportErrorKind::Tls, context).with_source(tls);
        }
    }
    from_client(error, context)
}

fn tls_is_client_configuration(error: &TransportError) -> bool {
    error.kind() == &TransportErrorKind::Tls
        && std::error::Error::source(error)
            .and_then(|s| s.downcast_ref::<TlsError>())
            .is_some_and(TlsError::is_client_configuration)
}

/// Resolves once `connection` is gone, whether the network failed, heartbeats stopped, or the
/// broker closed it.
///
/// The client library only reports a shutdown to listeners subscribed before it happens, and
/// subscribes on the first poll; so after that first poll the connection's open flag is
/// checked too, which the library clears before it reports.
pub(crate) async fn lost(connection: &Connection) {
    let listen = connection.listen_network_io_failure();
    tokio::pin!(listen);
    if futures::poll!(&mut listen).is_ready() || !connection.is_open() {
        return;
    }
    listen.await;
}

/// Closes `connection` if it is open, bounded so a dead broker cannot hold the caller.
pub(crate) async fn close(connection: Connection, link: Link) {
    if connection.is_open() {
        if let Err(e) = crate::declare::within(connection.close(), "closing").await {
            tracing::debug!(%link, error = %EscapedDisplay(&e), "closing a connection timed out");
        }
    }
}
