//! The consume side's connection: one supervisor task owns it, and replaces it when it is
//! lost.
//!
//! Subscriptions, declarations and the RPC reply queue all live on this connection
//! (`<prefix>.consume`), each on a channel of its own. They never hold the connection: they
//! ask the supervisor for a channel through [`ConsumeLink`], so after a reconnect they get a
//! channel of the new connection, and they watch [`LinkStatus`] to learn that the connection
//! is up again.
//!
//! # Reconnecting
//!
//! When the connection is lost (the broker closed it, the network failed, or heartbeats
//! stopped), the supervisor:
//!
//! 1. marks the link down, so `health()` says so and channel requests fail at once with
//!    `ConnectionLost` (everything on the old connection has failed by then too: consumer
//!    streams end, ackers fail, pending RPC calls fail);
//! 2. waits a backoff delay (100 ms doubling to 5 s by default, with jitter), then tries the
//!    addresses in turn, starting after the one it lost;
//! 3. on the new connection, declares the whole [`Topology`] again: exchanges, then queues,
//!    then bindings. A declaration the broker refuses is logged and skipped (its channel is
//!    replaced and the replay goes on), because one incompatible queue must not keep every
//!    other consumer away; a failure of the connection itself fails the attempt;
//! 4. only then bumps the generation in [`LinkStatus`] with `connected = true`. Consumers
//!    waiting for it re-attach, each on a fresh channel with its own prefetch.
//!
//! Channels are opened on tasks of their own, so a request made just as the connection
//! hangs can never stall the supervisor: it keeps watching for the loss.

use std::sync::{Arc, Mutex};

use amqprs::channel::Channel;
use amqprs::connection::Connection;
use mesh_core::{BoxFuture, TransportError, TransportErrorKind};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tracing::Instrument;

use crate::backoff::Backoff;
use crate::connection::{self, lost_opt, opened_opt, sleep_opt, LinkState, Live};
use crate::declare::{open_channel, CloseSlot, DeclareChannel};
use crate::lifecycle::{Counters, Lifecycle, Link, Shared};
use crate::options::AmqpOptions;
use crate::topology::Topology;

/// What subscribers watch: which connection is current, and whether it is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LinkStatus {
    /// Bumped for every new connection, once its topology is declared.
    pub(crate) generation: u64,
    /// Whether that connection is up.
    pub(crate) connected: bool,
}

type ChannelReply = oneshot::Sender<Result<(Channel, CloseSlot), TransportError>>;

enum LinkCommand {
    OpenChannel {
        role: &'static str,
        reply: ChannelReply,
    },
    Close(oneshot::Sender<()>),
}

/// The handle to the consume side's supervisor.
#[derive(Clone)]
pub(crate) struct ConsumeLink {
    commands: mpsc::Sender<LinkCommand>,
    status: watch::Receiver<LinkStatus>,
    state: Arc<LinkState>,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for ConsumeLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumeLink")
            .field("status", &*self.status.borrow())
            .finish_non_exhaustive()
    }
}

impl ConsumeLink {
    /// Opens the consume connection and starts its supervisor, which replays `topology`
    /// after every reconnect.
    pub(crate) async fn start(
        options: &AmqpOptions,
        shared: Arc<Shared>,
        topology: Arc<Mutex<Topology>>,
    ) -> Result<ConsumeLink, TransportError> {
        let state = Arc::new(LinkState::new(Link::Consume, shared.clone()));
        let (connection, address) = connection::open(options, state.clone(), 0).await?;
        state.set_connected(true);
        shared.emit(Lifecycle::Connected {
            link: Link::Consume,
            address: options.get_addresses()[address].to_string(),
            reconnect: false,
        });
        let (commands_tx, commands) = mpsc::channel(64);
        let (status_tx, status) = watch::channel(LinkStatus {
            generation: 1,
            connected: true,
        });
        let span = tracing::info_span!(
            parent: None,
            "mesh_amqp.consume_link",
            connection = %format!("{}.consume", options.get_connection_name())
        );
        let supervisor = Supervisor {
            options: options.clone(),
            state: state.clone(),
            shared: shared.clone(),
            topology,
            commands,
            status: status_tx,
            live: Some(Live::new(connection, address)),
            connecting: None,
            retry_at: None,
            backoff: Backoff::from_options(options),
            next_address: address,
        };
        tokio::spawn(supervisor.run().instrument(span));
        Ok(ConsumeLink {
            commands: commands_tx,
            status,
            state,
            shared,
        })
    }

    /// The connection's state.
    pub(crate) fn state(&self) -> &LinkState {
        &self.state
    }

    /// What the transport's tasks share.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// A receiver of the link's status, for waiting until it is up again.
    pub(crate) fn status(&self) -> watch::Receiver<LinkStatus> {
        self.status.clone()
    }

    /// A new channel of the current connection, with its close kept in the slot; fails at
    /// once with `ConnectionLost` while the link is down.
    pub(crate) async fn channel(
        &self,
        role: &'static str,
    ) -> Result<(Channel, CloseSlot), TransportError> {
        let (reply, opened) = oneshot::channel();
        self.commands
            .send(LinkCommand::OpenChannel { role, reply })
            .await
            .map_err(|_| closed())?;
        opened.await.map_err(|_| closed())?
    }

    /// A new channel for declarations.
    pub(crate) async fn declare_channel(&self) -> Result<DeclareChannel, TransportError> {
        let (channel, slot) = self.channel("declare").await?;
        Ok(DeclareChannel::wrap(channel, slot))
    }

    /// Closes the connection and stops the supervisor.
    pub(crate) async fn close(&self) {
        let (done, finished) = oneshot::channel();
        if self.commands.send(LinkCommand::Close(done)).await.is_ok() {
            let _ = finished.await;
        }
    }
}

fn closed() -> TransportError {
    TransportError::new(
        TransportErrorKind::Closed,
        "the consume connection is closed",
    )
}

/// The supervisor task; see the module docs.
struct Supervisor {
    options: AmqpOptions,
    state: Arc<LinkState>,
    shared: Arc<Shared>,
    topology: Arc<Mutex<Topology>>,
    commands: mpsc::Receiver<LinkCommand>,
    status: watch::Sender<LinkStatus>,
    live: Option<Live>,
    /// A reconnect attempt in progress (connect, then replay the topology).
    connecting: Option<BoxFuture<'static, Result<(Connection, usize), TransportError>>>,
    /// When the next reconnect attempt starts.
    retry_at: Option<Instant>,
    backoff: Backoff,
    /// The address the next attempt starts with.
    next_address: usize,
}

enum Step {
    Lost,
    Opened(Result<(Connection, usize), TransportError>),
    Reconnect,
    Command(Option<LinkCommand>),
}

impl Supervisor {
    async fn run(mut self) {
        loop {
            let step = tokio::select! {
                biased;
                () = lost_opt(&mut self.live) => Step::Lost,
                opened = opened_opt(&mut self.connecting) => Step::Opened(opened),
                () = sleep_opt(self.retry_at) => Step::Reconnect,
                command = self.commands.recv() => Step::Command(command),
            };
            match step {
                Step::Lost => self.on_lost(),
                Step::Reconnect => self.reconnect(),
                Step::Opened(Ok((connection, address))) => self.on_reconnected(connection, address),
                Step::Opened(Err(error)) => self.on_reconnect_failed(&error),
                Step::Command(Some(LinkCommand::OpenChannel { role, reply })) => {
                    self.open_channel(role, reply);
                }
                Step::Command(Some(LinkCommand::Close(done))) => {
                    self.shutdown().await;
                    let _ = done.send(());
                    return;
                }
                // Every handle is gone.
                Step::Command(None) => {
                    self.shutdown().await;
                    return;
                }
            }
        }
    }

    fn on_lost(&mut self) {
        let Some(live) = self.live.take() else {
            return;
        };
        let reason = self.state.loss_reason();
        self.state.set_connected(false);
        self.status.send_modify(|s| s.connected = false);
        // The node we lost may be the one that is down: start with the next.
        self.next_address = live.address + 1;
        drop(live);
        let delay = self.backoff.next_delay();
        self.retry_at = Some(Instant::now() + delay);
        tracing::warn!(%reason, retry_in = ?delay, "consume connection lost; reconnecting");
        self.shared.emit(Lifecycle::Disconnected {
            link: Link::Consume,
            reason,
        });
    }

    fn reconnect(&mut self) {
        self.retry_at = None;
        let options = self.options.clone();
        let state = self.state.clone();
        let shared = self.shared.clone();
        let topology = self.topology.lock().map(|t| t.clone()).unwrap_or_default();
        let start = self.next_address;
        self.connecting = Some(Box::pin(async move {
            let (connection, address) = connection::open(&options, state, start).await?;
            if let Err(error) = replay(&connection, &topology, shared).await {
                connection::close(connection, Link::Consume).await;
                return Err(error);
            }
            Ok((connection, address))
        }));
    }

    fn on_reconnected(&mut self, connection: Connection, address: usize) {
        self.connecting = None;
        self.backoff.reset();
        self.live = Some(Live::new(connection, address));
        self.next_address = address;
        self.state.set_connected(true);
        Counters::bump(&self.shared.counters.reconnects);
        // Consumers waiting for a new generation re-attach now.
        self.status.send_modify(|s| {
            s.generation += 1;
            s.connected = true;
        });
        let address = self.options.get_addresses()[address].to_string();
        tracing::info!(%address, "consume connection re-established, topology declared");
        self.shared.emit(Lifecycle::Connected {
            link: Link::Consume,
            address,
            reconnect: true,
        });
    }

    fn on_reconnect_failed(&mut self, error: &TransportError) {
        self.connecting = None;
        let delay = self.backoff.next_delay();
        self.retry_at = Some(Instant::now() + delay);
        tracing::warn!(error = %error, retry_in = ?delay, "reconnecting the consume connection failed");
        self.shared.emit(Lifecycle::ReconnectFailed {
            link: Link::Consume,
            attempt: self.backoff.failures(),
            retry_in: delay,
            reason: error.to_string(),
        });
    }

    fn open_channel(&self, role: &'static str, reply: ChannelReply) {
        match self.live.as_ref().filter(|l| l.connection.is_open()) {
            Some(live) => {
                let connection = live.connection.clone();
                let shared = self.shared.clone();
                tokio::spawn(async move {
                    let _ = reply.send(open_channel(&connection, role, shared).await);
                });
            }
            None => {
                let _ = reply.send(Err(TransportError::new(
                    TransportErrorKind::ConnectionLost,
                    "the consume connection is lost; reconnecting",
                )));
            }
        }
    }

    async fn shutdown(&mut self) {
        self.connecting = None;
        self.retry_at = None;
        if let Some(live) = self.live.take() {
            connection::close(live.connection, Link::Consume).await;
        }
        self.state.set_connected(false);
        self.status.send_modify(|s| s.connected = false);
        tracing::info!("consume connection closed");
    }
}

/// Declares `topology` on `connection`: exchanges, then queues, then bindings. A refused
/// declaration (it closes its channel) is logged and skipped, on a fresh channel; only a
/// failure of the connection fails the replay.
async fn replay(
    connection: &Connection,
    topology: &Topology,
    shared: Arc<Shared>,
) -> Result<(), TransportError> {
    enum Decl<'a> {
        Exchange(&'a crate::topology::ExchangeDecl),
        Queue(&'a crate::topology::QueueDecl),
        Binding(&'a crate::topology::BindingDecl),
    }
    let decls = topology
        .exchanges()
        .map(Decl::Exchange)
        .chain(topology.queues().map(Decl::Queue))
        .chain(topology.bindings().map(Decl::Binding));
    let mut channel: Option<DeclareChannel> = None;
    let mut refused = 0usize;
    for decl in decls {
        let declare = match channel.take() {
            Some(declare) if declare.is_open() => declare,
            _ => {
                let (c, slot) = open_channel(connection, "replay", shared.clone()).await?;
                DeclareChannel::wrap(c, slot)
            }
        };
        let declared = match decl {
            Decl::Exchange(exchange) => declare.exchange(exchange).await,
            Decl::Queue(queue) => declare.queue(queue).await,
            Decl::Binding(binding) => declare.bind(binding).await,
        };
        if let Err(error) = declared {
            if !connection.is_open() {
                return Err(error);
            }
            refused += 1;
            tracing::error!(error = %error, "replaying the topology: a declaration was refused; skipped");
        }
        channel = Some(declare);
    }
    if let Some(declare) = channel {
        declare.close().await;
    }
    tracing::debug!(refused, "topology declared again");
    Ok(())
}
