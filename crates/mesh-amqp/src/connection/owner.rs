//! The owner of one link's connection: the live connection, the watch for its loss, the
//! reconnect attempts through the addresses with backoff and jitter, and the lifecycle
//! events they make. Both links have one: the publish task's (`publisher`) and the consume
//! link's supervisor's (`link`).
//!
//! A [`ConnectionOwner`] lives inside its task, which awaits [`ConnectionOwner::event`] in
//! its `select!` beside its own work, and reacts to what it returns: the publish task
//! resends its window and fails what is not resent, the supervisor republishes its status so
//! that consumers re-attach. The owner does the rest, the same for both:
//!
//! 1. **loss** — the broker closed the connection, its socket failed, or two heartbeat
//!    intervals passed without a frame ([`connection::lost`]): the link is marked down and
//!    the next attempt is scheduled after a backoff delay (100 ms doubling to 5 s by default,
//!    with jitter), starting with the address after the lost one, since that node may be
//!    the one that is down;
//! 2. **attempt** — the addresses are tried in turn ([`connection::open`]), then the link's
//!    own preparation runs on the new connection (the consume link declares its topology
//!    again); a failure of either is a failed attempt (`ReconnectFailed`), and the next one
//!    waits longer;
//! 3. **up** — the backoff starts over, the link is marked up, and the task is told.
//!
//! The task reports `Disconnected` and `Connected` with [`ConnectionOwner::report`] once it
//! has reacted, so whoever watches the lifecycle sees the link's new state complete.

use mesh_core::text::EscapedDisplay;
use std::sync::Arc;

use amqprs::connection::Connection;
use mesh_core::{BoxFuture, TransportError};
use tokio::time::Instant;

use crate::lifecycle::{Counters, Lifecycle, Link, TransportShared};
use crate::options::AmqpOptions;

use super::backoff::Backoff;
use super::state::{self as connection, lost_opt, opened_opt, sleep_opt, LinkState, Live};

/// What a new connection must go through before it counts as up (the consume link's
/// topology replay); a failure fails the attempt.
pub(crate) type Prepare =
    Arc<dyn Fn(Connection) -> BoxFuture<'static, Result<(), TransportError>> + Send + Sync>;

/// What happened to the connection.
#[derive(Debug)]
pub(crate) enum LinkEvent {
    /// It was lost; the next attempt is scheduled.
    Lost {
        /// Why (the broker's close, or the network).
        reason: String,
    },
    /// A new one is up (and prepared).
    Up {
        /// The address it reached.
        address: String,
    },
}

/// One link's connection and its replacement; see the module docs.
pub(crate) struct ConnectionOwner {
    options: AmqpOptions,
    state: Arc<LinkState>,
    shared: Arc<TransportShared>,
    prepare: Option<Prepare>,
    live: Option<Live>,
    /// A reconnect attempt in progress (connect, then prepare).
    connecting: Option<BoxFuture<'static, Result<(Connection, usize), TransportError>>>,
    /// When the next attempt starts.
    retry_at: Option<Instant>,
    backoff: Backoff,
    /// The address the next attempt starts with.
    next_address: usize,
}

impl ConnectionOwner {
    /// Opens the link's first connection (trying every address), marks it up and reports
    /// it. `prepare` runs on every later connection before it counts as up.
    pub(crate) async fn open(
        options: &AmqpOptions,
        state: Arc<LinkState>,
        shared: Arc<TransportShared>,
        prepare: Option<Prepare>,
    ) -> Result<ConnectionOwner, TransportError> {
        let (connection, address) = connection::open(options, state.clone(), 0).await?;
        state.set_connected(true);
        shared.emit(Lifecycle::Connected {
            link: state.link(),
            address: options.get_addresses()[address].to_string(),
            reconnect: false,
        });
        Ok(ConnectionOwner {
            options: options.clone(),
            state,
            shared,
            prepare,
            live: Some(Live::new(connection, address)),
            connecting: None,
            retry_at: None,
            backoff: Backoff::from_options(options),
            next_address: address,
        })
    }

    fn link(&self) -> Link {
        self.state.link()
    }

    /// The live connection, if the link is up.
    pub(crate) fn connection(&self) -> Option<&Connection> {
        self.live.as_ref().map(|live| &live.connection)
    }

    /// Resolves with the next loss or the next connection up, making reconnect attempts
    /// (and reporting the failed ones) meanwhile.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the loss watch, the attempt in progress and the retry time live in the
    /// owner, so a `select!` that drops this future loses nothing.
    pub(crate) async fn event(&mut self) -> LinkEvent {
        enum Step {
            Lost,
            Opened(Result<(Connection, usize), TransportError>),
            Attempt,
        }
        loop {
            let step = tokio::select! {
                biased;
                () = lost_opt(&mut self.live) => Step::Lost,
                opened = opened_opt(&mut self.connecting) => Step::Opened(opened),
                () = sleep_opt(self.retry_at) => Step::Attempt,
            };
            match step {
                Step::Lost => {
                    if let Some(event) = self.on_lost() {
                        return event;
                    }
                }
                Step::Opened(Ok((connection, address))) => return self.on_up(connection, address),
                Step::Opened(Err(error)) => self.on_attempt_failed(&error),
                Step::Attempt => self.attempt(),
            }
        }
    }

    /// Reports `event` once the link's task has reacted to it.
    pub(crate) fn report(&self, event: LinkEvent) {
        let link = self.link();
        match event {
            LinkEvent::Lost { reason } => {
                self.shared.emit(Lifecycle::Disconnected { link, reason });
            }
            LinkEvent::Up { address } => {
                self.shared.emit(Lifecycle::Connected {
                    link,
                    address,
                    reconnect: true,
                });
            }
        }
    }

    fn on_lost(&mut self) -> Option<LinkEvent> {
        let live = self.live.take()?;
        let reason = self.state.loss_reason();
        // Going down ends a block (reported).
        self.state.set_connected(false);
        // The node we lost may be the one that is down: start with the next.
        self.next_address = live.address + 1;
        drop(live);
        let delay = self.backoff.next_delay();
        self.retry_at = Some(Instant::now() + delay);
        tracing::warn!(link = %self.link(), reason = %EscapedDisplay(&reason), retry_in = ?delay, "connection lost; reconnecting");
        Some(LinkEvent::Lost { reason })
    }

    fn attempt(&mut self) {
        self.retry_at = None;
        let options = self.options.clone();
        let state = self.state.clone();
        let prepare = self.prepare.clone();
        let link = self.link();
        let start = self.next_address;
        self.connecting = Some(Box::pin(async move {
            let (connection, address) = connection::open(&options, state, start).await?;
            if let Some(prepare) = prepare {
                if let Err(error) = prepare(connection.clone()).await {
                    connection::close(connection, link).await;
                    return Err(error);
                }
            }
            Ok((connection, address))
        }));
    }

    fn on_up(&mut self, connection: Connection, address: usize) -> LinkEvent {
        self.connecting = None;
        self.backoff.reset();
        self.live = Some(Live::new(connection, address));
        self.next_address = address;
        self.state.set_connected(true);
        Counters::bump(&self.shared.counters.reconnects);
        let address = self.options.get_addresses()[address].to_string();
        tracing::info!(link = %self.link(), %address, "connection re-established");
        LinkEvent::Up { address }
    }

    fn on_attempt_failed(&mut self, error: &TransportError) {
        self.connecting = None;
        let delay = self.backoff.next_delay();
        self.retry_at = Some(Instant::now() + delay);
        if super::ConnectRefused::of(error).is_some() {
            // Not an outage: the password (file) may be rotated; it is read again next time.
            tracing::error!(link = %self.link(), error = %EscapedDisplay(&error), retry_in = ?delay, "reconnecting failed: the broker refused the login or vhost; the password is read again at the next attempt");
        } else {
            tracing::warn!(link = %self.link(), error = %EscapedDisplay(&error), retry_in = ?delay, "reconnecting failed");
        }
        self.shared.emit(Lifecycle::ReconnectFailed {
            link: self.link(),
            attempt: self.backoff.failures(),
            retry_in: delay,
            reason: error.to_string(),
        });
    }

    /// Stops reconnecting and closes the connection.
    pub(crate) async fn close(&mut self) {
        self.connecting = None;
        self.retry_at = None;
        if let Some(live) = self.live.take() {
            connection::close(live.connection, self.link()).await;
        }
        self.state.set_connected(false);
    }
}
