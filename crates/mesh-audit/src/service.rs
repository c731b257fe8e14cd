//! The audit logger as a service: open the store, connect to RabbitMQ, run the logger, and
//! reconnect when the connection is lost, until shutdown; and say whether it is ready.

use mesh_core::text::EscapedDisplay;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mesh::amqp::management::ManagementOptions;
use mesh::amqp::{connect_with_management, management_options};
use mesh_amqp::{AmqpOptions, AmqpTransport};
use mesh_core::backoff::Backoff;
use mesh_core::Transport;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::error::Error;
use crate::logger::{AuditLogger, LoggerStats};
use crate::options::{AuditOptions, StoreOptions};
use crate::store::Store;

/// The first pause between attempts; it doubles up to [`MAX_BACKOFF`] (the workspace's
/// schedule, `mesh_core::backoff`, with its jitter).
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A run that lasted this long was healthy: the next failure starts the backoff afresh.
const HEALTHY_RUN: Duration = Duration::from_secs(30);

/// The audit logger on RabbitMQ, with its store.
///
/// Clones share their [`readiness`](AuditService::readiness).
#[derive(Debug, Clone)]
pub struct AuditService {
    amqp: AmqpOptions,
    management: Option<ManagementOptions>,
    store: StoreOptions,
    audit: AuditOptions,
    phase: Arc<Mutex<Phase>>,
}

/// Where a run is, for readiness.
#[derive(Default)]
enum Phase {
    #[default]
    NotRunning,
    OpeningStore,
    Connecting,
    Consuming {
        transport: Arc<dyn Transport>,
        logger: AuditLogger,
        shutdown: CancellationToken,
    },
}

impl fmt::Debug for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::NotRunning => "NotRunning",
            Phase::OpeningStore => "OpeningStore",
            Phase::Connecting => "Connecting",
            Phase::Consuming { .. } => "Consuming",
        })
    }
}

impl AuditService {
    /// A service from its three sets of options.
    pub fn new(amqp: AmqpOptions, store: StoreOptions, audit: AuditOptions) -> AuditService {
        AuditService {
            management: management_options(&amqp),
            amqp,
            store,
            audit,
            phase: Arc::default(),
        }
    }

    /// The management API its transport uses to remove stale bindings of the logger's
    /// queues (default: [`management_options`] of the AMQP options; `None`: never
    /// contacted). See [`connect_with_management`] and
    /// [`AmqpTransport::subscribe`](mesh_amqp::AmqpTransport::subscribe).
    pub fn management(mut self, management: Option<ManagementOptions>) -> AuditService {
        self.management = management;
        self
    }

    /// `Ok(())` while [`run`](AuditService::run) consumes both queues with the store open,
    /// connected and not blocked, and shutdown was not asked for; else why not. Cheap and
    /// never blocking: what a `/readyz` endpoint asks.
    pub fn readiness(&self) -> Result<(), String> {
        let phase = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        match &*phase {
            Phase::NotRunning => Err("not running".to_owned()),
            Phase::OpeningStore => Err("opening the audit store".to_owned()),
            Phase::Connecting => Err("connecting to the broker".to_owned()),
            Phase::Consuming {
                transport,
                logger,
                shutdown,
            } => {
                let health = transport.health();
                if shutdown.is_cancelled() {
                    Err("shutting down".to_owned())
                } else if !logger.is_consuming() || !health.is_ready() {
                    Err(format!(
                        "consuming={} connected={} blocked={} consumers {}/{}",
                        logger.is_consuming(),
                        health.connected,
                        health.blocked,
                        health.consumers_attached,
                        health.consumers_expected,
                    ))
                } else {
                    Ok(())
                }
            }
        }
    }

    fn enter(&self, phase: Phase) {
        *self.phase.lock().unwrap_or_else(|e| e.into_inner()) = phase;
    }

    /// Runs until `shutdown` fires, then commits and acks the open batch, closes the
    /// connection and the store, and returns what the logger did.
    ///
    /// A broker or database that cannot be reached, or a lost connection, is retried with
    /// backoff (up to 30 s); options that cannot work (a bad node name, refused credentials,
    /// a schema that cannot be migrated) fail at once.
    pub async fn run(&self, shutdown: CancellationToken) -> Result<LoggerStats, Error> {
        self.audit.validate()?;
        let outcome = self.run_phases(shutdown).await;
        self.enter(Phase::NotRunning);
        outcome
    }

    async fn run_phases(&self, shutdown: CancellationToken) -> Result<LoggerStats, Error> {
        self.enter(Phase::OpeningStore);
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        let store = loop {
            match Store::open(self.store.clone()).await {
                Ok(store) => break store,
                Err(e) if e.is_retryable() => {
                    warn!(error = %EscapedDisplay(format!("{e:#}")), hint = e.hint().unwrap_or_default(), "audit store unavailable; retrying");
                    if !wait(&mut backoff, &shutdown).await {
                        return Ok(LoggerStats::default());
                    }
                }
                Err(e) => return Err(e),
            }
        };
        let logger = AuditLogger::new(store.clone(), self.audit.clone());
        let mut backoff = Backoff::new(FIRST_BACKOFF, MAX_BACKOFF);
        let outcome = loop {
            self.enter(Phase::Connecting);
            let options = self.amqp.clone().connection_name("mesh-audit");
            let transport = match connect_with_management(options, self.management.clone()).await {
                Ok(transport) => Arc::new(transport),
                Err(e) if e.is_retryable() => {
                    warn!(broker = %self.amqp, error = %EscapedDisplay(&e), "broker unavailable; retrying");
                    if !wait(&mut backoff, &shutdown).await {
                        break Ok(());
                    }
                    continue;
                }
                Err(e) => break Err(Error::transport(format!("connecting to {}", self.amqp), e)),
            };
            info!(broker = %self.amqp, "connected");
            self.enter(Phase::Consuming {
                transport: Arc::clone(&transport) as Arc<dyn Transport>,
                logger: logger.clone(),
                shutdown: shutdown.clone(),
            });
            let started = Instant::now();
            let result = logger
                .run_retiring(transport.as_ref(), transport.as_ref(), &shutdown)
                .await;
            self.enter(Phase::Connecting);
            transport.close().await;
            match result {
                Ok(()) => break Ok(()),
                Err(e) if e.is_retryable() || e.is_connection_lost() => {
                    if started.elapsed() >= HEALTHY_RUN {
                        backoff.reset();
                    }
                    warn!(error = %EscapedDisplay(&e), "audit logger interrupted; reconnecting");
                    if !wait(&mut backoff, &shutdown).await {
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

/// Waits the schedule's next pause, cut short by shutdown; `false` if shutdown fired first.
async fn wait(backoff: &mut Backoff, shutdown: &CancellationToken) -> bool {
    let pause = backoff.next_delay();
    tokio::select! {
        () = tokio::time::sleep(pause) => true,
        () = shutdown.cancelled() => false,
    }
}

/// On RabbitMQ, the old `mesh.dead-letters` may still be there: the transport retires it.
impl crate::logger::RetiredDeadQueue for AmqpTransport {
    fn unbind(&self) -> mesh_core::BoxFuture<'_, Result<bool, mesh_core::TransportError>> {
        Box::pin(AmqpTransport::unbind_retired_dead_queue(self))
    }

    fn delete(&self) -> mesh_core::BoxFuture<'_, Result<bool, mesh_core::TransportError>> {
        Box::pin(AmqpTransport::delete_retired_dead_queue(self))
    }
}
