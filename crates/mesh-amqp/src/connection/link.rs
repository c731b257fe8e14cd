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
//! The connection itself is held by a [`ConnectionOwner`], as the publisher's is: it sees
//! the loss, reconnects through the addresses with backoff and jitter, and reports it. When
//! the connection is lost (the broker closed it, the network failed, or heartbeats stopped):
//!
//! 1. the owner marks the link down, so `health()` says so, and the supervisor marks its
//!    [`LinkStatus`] down, so channel requests fail at once with `ConnectionLost`
//!    (everything on the old connection has failed by then too: consumer streams end,
//!    ackers fail, pending RPC calls fail);
//! 2. the owner waits a backoff delay (100 ms doubling to 5 s by default, with jitter), then
//!    tries the addresses in turn, starting after the one it lost;
//! 3. on the new connection, before it counts as up, the supervisor's preparation declares
//!    the whole [`Topology`] again: exchanges, then queues, then bindings, each object once,
//!    up to [`LANES`] declarations in flight together (see [`crate::lanes`]). A declaration
//!    the broker refuses is logged and skipped (its channel is replaced and the replay goes on),
//!    because one incompatible queue must not keep every other consumer away; a failure of
//!    the connection itself fails the attempt;
//! 4. only then the supervisor bumps the generation in [`LinkStatus`] with
//!    `connected = true`. Consumers waiting for it re-attach, each on a fresh channel with
//!    its own prefetch.
//!
//! Channels are opened on tasks of their own, so a request made just as the connection
//! hangs can never stall the supervisor: it keeps watching for the loss.

use mesh_core::text::EscapedDisplay;
use std::sync::{Arc, Mutex};

use amqprs::channel::Channel;
use amqprs::connection::Connection;
use mesh_core::{TransportError, TransportErrorKind};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument;

use crate::declare::{
    ensure_exchange, ensure_queue, open_channel, within, CloseSlot, DeclareChannel,
};
use crate::lanes::{first_failure, in_lanes, LANES};
use crate::lifecycle::{Link, TransportShared};
use crate::options::AmqpOptions;
use crate::topology::Topology;

use super::owner::{ConnectionOwner, LinkEvent, Prepare};
use super::state::LinkState;

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
    shared: Arc<TransportShared>,
}

impl std::fmt::Debug for ConsumeLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumeLink")
            .field("status", &*self.status.borrow())
            .finish_non_exhaustive()
    }
}

impl ConsumeLink {
    /// Makes sure mesh's exchanges exist, declaring only those that are missing (see
    /// [`ensure_exchange`]), up to [`LANES`] in flight together.
    pub(crate) async fn declare_base(&self, base: &Topology) -> Result<(), TransportError> {
        let open = || self.declare_channel();
        let open = &open;
        let (declared, carried) = in_lanes(
            base.exchanges().collect(),
            LANES,
            Some(&self.shared().declare_lanes),
            open,
            None,
            |declare, exchange| ensure_exchange(Some(declare), exchange, open),
        )
        .await;
        if let Some(declare) = carried {
            declare.close().await;
        }
        first_failure(declared)?;
        tracing::debug!("base topology declared");
        Ok(())
    }

    /// Opens the consume connection and starts its supervisor, which replays `topology`
    /// after every reconnect.
    pub(crate) async fn start(
        options: &AmqpOptions,
        shared: Arc<TransportShared>,
        topology: Arc<Mutex<Topology>>,
    ) -> Result<ConsumeLink, TransportError> {
        let state = Arc::new(LinkState::new(Link::Consume, shared.clone()));
        // A new connection counts as up once the topology recorded by then is declared on it.
        let prepare: Prepare = {
            let shared = shared.clone();
            Arc::new(move |connection: Connection| {
                let topology = topology.lock().map(|t| t.clone()).unwrap_or_default();
                let shared = shared.clone();
                Box::pin(async move { replay(&connection, &topology, shared).await })
            })
        };
        let owner =
            ConnectionOwner::open(options, state.clone(), shared.clone(), Some(prepare)).await?;
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
            shared: shared.clone(),
            commands,
            status: status_tx,
            owner,
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
    pub(crate) fn shared(&self) -> &Arc<TransportShared> {
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
    shared: Arc<TransportShared>,
    commands: mpsc::Receiver<LinkCommand>,
    status: watch::Sender<LinkStatus>,
    /// The connection, and its replacement (with the topology replayed) after a loss.
    owner: ConnectionOwner,
}

enum Step {
    Link(LinkEvent),
    Command(Option<LinkCommand>),
}

impl Supervisor {
    async fn run(mut self) {
        loop {
            let step = tokio::select! {
                biased;
                event = self.owner.event() => Step::Link(event),
                command = self.commands.recv() => Step::Command(command),
            };
            match step {
                Step::Link(event) => self.on_link(event),
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

    /// The supervisor's reactions to the connection going down or up: its status, which
    /// channel requests and consumers watch.
    fn on_link(&mut self, event: LinkEvent) {
        match &event {
            LinkEvent::Lost { .. } => self.status.send_modify(|s| s.connected = false),
            LinkEvent::Up { .. } => {
                // Consumers waiting for a new generation re-attach now.
                self.status.send_modify(|s| {
                    s.generation += 1;
                    s.connected = true;
                });
                tracing::info!("consume connection re-established, topology declared");
            }
        }
        self.owner.report(event);
    }

    fn open_channel(&self, role: &'static str, reply: ChannelReply) {
        match self.owner.connection().filter(|c| c.is_open()) {
            Some(connection) => {
                let connection = connection.clone();
                let shared = self.shared.clone();
                // Tracked, and a channel nobody waits for any more is closed here rather
                // than dropped open (see `TransportShared::channel_tasks`).
                self.shared.channel_tasks.spawn(async move {
                    let opened = open_channel(&connection, role, shared).await;
                    if let Err(Ok((channel, _))) = reply.send(opened) {
                        if let Err(e) = within(channel.close(), "closing an unwanted channel").await
                        {
                            tracing::debug!(error = %EscapedDisplay(&e), "closing an unwanted channel failed");
                        }
                    }
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
        self.owner.close().await;
        self.status.send_modify(|s| s.connected = false);
        tracing::info!("consume connection closed");
    }
}

/// Declares `topology` on `connection`: exchanges (only those missing, see
/// [`ensure_exchange`]), then queues, then bindings, each phase up to [`LANES`] declarations
/// in flight together (see [`crate::lanes`]). A refused declaration (it closes its lane's
/// channel) is logged and skipped, the lane going on with a fresh channel; only a failure of
/// the connection fails the replay.
async fn replay(
    connection: &Connection,
    topology: &Topology,
    shared: Arc<TransportShared>,
) -> Result<(), TransportError> {
    let open = || async {
        let (c, slot) = open_channel(connection, "replay", shared.clone()).await?;
        Ok(DeclareChannel::wrap(c, slot))
    };
    let open = &open;
    // One channel carried through the phases, the other lanes' opened for a phase.
    let (exchanges, carried) = in_lanes(
        topology.exchanges().collect(),
        LANES,
        None,
        open,
        None,
        |declare, exchange| ensure_exchange(Some(declare), exchange, open),
    )
    .await;
    let (queues, carried) = in_lanes(
        topology.queues().collect(),
        LANES,
        None,
        open,
        carried,
        |mut declare, queue| async move {
            let declared = ensure_queue(&mut declare, queue, open).await;
            (declared, Some(declare))
        },
    )
    .await;
    let (bindings, carried) = in_lanes(
        topology.bindings().collect(),
        LANES,
        None,
        open,
        carried,
        |declare, binding| async move { (declare.bind(binding).await, Some(declare)) },
    )
    .await;
    if let Some(declare) = carried {
        declare.close().await;
    }
    let mut refused = 0usize;
    for declared in exchanges.into_iter().chain(queues).chain(bindings) {
        if let Err(error) = declared {
            if !connection.is_open() {
                return Err(error);
            }
            refused += 1;
            tracing::error!(error = %EscapedDisplay(&error), "replaying the topology: a declaration was refused; skipped");
        }
    }
    tracing::debug!(refused, "topology declared again");
    Ok(())
}
