//! Opening a named connection to the first broker node that answers, and the state the
//! broker reports about it (closed, blocked).
//!
//! Each connection is owned by one task (the publisher's, or the consume side's supervisor),
//! which watches it with [`lost`]; everything else only reads the [`LinkState`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use amqprs::callbacks::ConnectionCallback;
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::Close;
use mesh_core::{TransportError, TransportErrorKind};

use crate::error::from_client;
use crate::options::AmqpOptions;

/// What one connection's owner and the broker's callbacks report, for health checks.
#[derive(Debug, Default)]
pub(crate) struct LinkState {
    connected: AtomicBool,
    blocked: AtomicBool,
}

impl LinkState {
    pub(crate) fn connected(&self) -> bool {
        self.connected.load(Ordering::Acquire)
    }

    pub(crate) fn set_connected(&self, connected: bool) {
        self.connected.store(connected, Ordering::Release);
        if !connected {
            // A new connection starts unblocked; the broker says again if it is not.
            self.blocked.store(false, Ordering::Release);
        }
    }

    pub(crate) fn blocked(&self) -> bool {
        self.blocked.load(Ordering::Acquire)
    }
}

/// The connection callbacks: the broker's `connection.close`, `connection.blocked` and
/// `connection.unblocked`.
struct LinkCallback {
    role: &'static str,
    state: Arc<LinkState>,
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
            role = self.role,
            close = %close,
            "broker closed the connection"
        );
        self.state.set_connected(false);
        Ok(())
    }

    async fn blocked(&mut self, connection: &Connection, reason: String) {
        // A memory or disk alarm: the broker stops reading from publishing connections, so
        // confirms stop and the unconfirmed window fills up.
        tracing::warn!(
            connection = %connection.connection_name(),
            role = self.role,
            %reason,
            "broker blocked the connection"
        );
        self.state.blocked.store(true, Ordering::Release);
    }

    async fn unblocked(&mut self, connection: &Connection) {
        tracing::info!(
            connection = %connection.connection_name(),
            role = self.role,
            "broker unblocked the connection"
        );
        self.state.blocked.store(false, Ordering::Release);
    }

    async fn secret_updated(&mut self, _connection: &Connection) {}
}

/// Opens the connection `<prefix>.<role>` to the first address that accepts it, trying them
/// in order, each bounded by the connect timeout.
pub(crate) async fn open(
    options: &AmqpOptions,
    role: &'static str,
    state: Arc<LinkState>,
) -> Result<Connection, TransportError> {
    let name = format!("{}.{role}", options.get_connection_name());
    let heartbeat = u16::try_from(options.get_heartbeat().as_secs()).unwrap_or(u16::MAX);
    let mut last_error = None;
    for address in options.get_addresses() {
        let args = OpenConnectionArguments::new(
            &address.host,
            address.port,
            options.get_user(),
            options.get_password(),
        )
        .virtual_host(options.get_vhost())
        .connection_name(&name)
        .heartbeat(heartbeat)
        .finish();
        let context = format!("connecting to {address} as `{name}`");
        let opened = tokio::time::timeout(options.get_connect_timeout(), Connection::open(&args))
            .await
            .map_err(|_| {
                TransportError::new(
                    TransportErrorKind::ConnectionLost,
                    format!("{context}: timed out"),
                )
            })
            .and_then(|r| r.map_err(|e| from_client(e, &context)));
        match opened {
            Ok(connection) => {
                connection
                    .register_callback(LinkCallback {
                        role,
                        state: state.clone(),
                    })
                    .await
                    .map_err(|e| from_client(e, "registering connection callbacks"))?;
                state.set_connected(true);
                tracing::info!(
                    connection = %name,
                    %address,
                    vhost = %options.get_vhost(),
                    "connected"
                );
                return Ok(connection);
            }
            Err(error) => {
                tracing::warn!(%address, error = %error, "connection attempt failed");
                // A refused login is not cured by the next node of the same cluster.
                if error.kind() == &TransportErrorKind::AccessRefused {
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

/// Resolves once `connection` is gone, whether the network failed or the broker closed it.
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
