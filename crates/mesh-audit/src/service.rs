//! The audit logger as a service: open the store, connect to RabbitMQ, run the logger, and
//! reconnect when the connection is lost, until shutdown.

use std::time::Duration;

use mesh_amqp::{AmqpOptions, AmqpTransport};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::Error;
use crate::logger::{AuditLogger, LoggerStats};
use crate::options::{AuditOptions, StoreOptions};
use crate::store::Store;

const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A run that lasted this long was healthy: the next failure starts the backoff afresh.
const HEALTHY_RUN: Duration = Duration::from_secs(30);

/// The audit logger on RabbitMQ, with its store.
#[derive(Debug, Clone)]
pub struct AuditService {
    amqp: AmqpOptions,
    store: StoreOptions,
    audit: AuditOptions,
}

impl AuditService {
    /// A service from its three sets of options.
    pub fn new(amqp: AmqpOptions, store: StoreOptions, audit: AuditOptions) -> AuditService {
        AuditService { amqp, store, audit }
    }

    /// Runs until `shutdown` fires, then commits and acks the open batch, closes the
    /// connection and the store, and returns what the logger did.
    ///
    /// A broker or database that cannot be reached, or a lost connection, is retried with
    /// backoff (up to 30 s); options that cannot work (a bad node name, refused credentials,
    /// a schema that cannot be migrated) fail at once.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<LoggerStats, Error> {
        self.audit.validate()?;
        let mut backoff = Backoff::new();
        let store = loop {
            match Store::open(self.store.clone()).await {
                Ok(store) => break store,
                Err(e) if e.is_retryable() => {
                    warn!(error = %format!("{e:#}"), "audit store unavailable; retrying");
                    if !backoff.wait(&shutdown).await {
                        return Ok(LoggerStats::default());
                    }
                }
                Err(e) => return Err(e),
            }
        };
        let logger = AuditLogger::new(store.clone(), self.audit.clone());
        let mut backoff = Backoff::new();
        let outcome = loop {
            let options = self.amqp.clone().connection_name("mesh-audit");
            let transport = match AmqpTransport::connect(options).await {
                Ok(transport) => transport,
                Err(e) if e.is_retryable() => {
                    warn!(broker = %self.amqp, error = %e, "broker unavailable; retrying");
                    if !backoff.wait(&shutdown).await {
                        break Ok(());
                    }
                    continue;
                }
                Err(e) => break Err(Error::transport(format!("connecting to {}", self.amqp), e)),
            };
            info!(broker = %self.amqp, "connected");
            let started = Instant::now();
            let result = logger.run(&transport, &shutdown).await;
            transport.close().await;
            match result {
                Ok(()) => break Ok(()),
                Err(e) if e.is_retryable() || e.is_connection_lost() => {
                    if started.elapsed() >= HEALTHY_RUN {
                        backoff = Backoff::new();
                    }
                    warn!(error = %e, "audit logger interrupted; reconnecting");
                    if !backoff.wait(&shutdown).await {
                        break Ok(());
                    }
                }
                Err(e) => break Err(e),
            }
        };
        store.close().await;
        outcome.map(|()| logger.stats())
    }
}

/// Doubling pauses between attempts, cut short by shutdown.
struct Backoff {
    next: Duration,
}

impl Backoff {
    fn new() -> Backoff {
        Backoff {
            next: FIRST_BACKOFF,
        }
    }

    /// Waits the next pause; `false` if shutdown fired first.
    async fn wait(&mut self, shutdown: &CancellationToken) -> bool {
        let pause = self.next;
        self.next = (self.next * 2).min(MAX_BACKOFF);
        tokio::select! {
            () = tokio::time::sleep(pause) => true,
            () = shutdown.cancelled() => false,
        }
    }
}
