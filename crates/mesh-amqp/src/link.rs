//! The consume side's connection: one supervisor task owns it.
//!
//! Subscriptions, declarations and the RPC reply queue all live on this connection
//! (`<prefix>.consume`), each on a channel of its own. They never hold the connection: they
//! ask the supervisor for a channel through [`ConsumeLink`], so that after a reconnect (next
//! issue) they get a channel of the new connection, and they watch [`LinkStatus`] to learn
//! that the connection changed.

use std::sync::Arc;

use amqprs::channel::Channel;
use amqprs::connection::Connection;
use mesh_core::{TransportError, TransportErrorKind};
use tokio::sync::{mpsc, oneshot, watch};
use tracing::Instrument;

use crate::connection::{self, LinkState};
use crate::declare::{open_channel, within, CloseSlot, DeclareChannel};
use crate::options::AmqpOptions;

/// What subscribers watch: which connection is current, and whether it is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LinkStatus {
    /// Bumped for every new connection.
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
}

impl std::fmt::Debug for ConsumeLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumeLink")
            .field("status", &*self.status.borrow())
            .finish_non_exhaustive()
    }
}

impl ConsumeLink {
    /// Opens the consume connection and starts its supervisor.
    pub(crate) async fn start(options: &AmqpOptions) -> Result<ConsumeLink, TransportError> {
        let state = Arc::new(LinkState::default());
        let connection = connection::open(options, "consume", state.clone()).await?;
        let (commands_tx, commands) = mpsc::channel(64);
        let (status_tx, status) = watch::channel(LinkStatus {
            generation: 1,
            connected: true,
        });
        let span = tracing::info_span!(
            "mesh_amqp.consume_link",
            connection = %format!("{}.consume", options.get_connection_name())
        );
        tokio::spawn(supervise(connection, state.clone(), commands, status_tx).instrument(span));
        Ok(ConsumeLink {
            commands: commands_tx,
            status,
            state,
        })
    }

    /// The connection's state.
    pub(crate) fn state(&self) -> &LinkState {
        &self.state
    }

    /// A new channel of the current connection, with its close kept in the slot.
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

/// The supervisor: answers channel requests and watches the connection.
async fn supervise(
    connection: Connection,
    state: Arc<LinkState>,
    mut commands: mpsc::Receiver<LinkCommand>,
    status: watch::Sender<LinkStatus>,
) {
    let lost = connection::lost(&connection);
    tokio::pin!(lost);
    let mut up = true;
    loop {
        tokio::select! {
            () = &mut lost, if up => {
                up = false;
                state.set_connected(false);
                status.send_modify(|s| s.connected = false);
                // Recovery (next issue) reconnects here, bumps the generation and replays
                // the topology; subscriptions then re-attach.
                tracing::warn!("consume connection lost");
            }
            command = commands.recv() => match command {
                Some(LinkCommand::OpenChannel { role, reply }) => {
                    let opened = if up && connection.is_open() {
                        open_channel(&connection, role).await
                    } else {
                        Err(TransportError::new(
                            TransportErrorKind::ConnectionLost,
                            "the consume connection is lost",
                        ))
                    };
                    let _ = reply.send(opened);
                }
                Some(LinkCommand::Close(done)) => {
                    close(&connection, up, &state, &status).await;
                    let _ = done.send(());
                    return;
                }
                None => break,
            },
        }
    }
    close(&connection, up, &state, &status).await;
}

async fn close(
    connection: &Connection,
    up: bool,
    state: &LinkState,
    status: &watch::Sender<LinkStatus>,
) {
    if up {
        if let Err(e) = within(connection.clone().close(), "closing").await {
            tracing::debug!(error = %e, "closing the consume connection timed out");
        }
    }
    state.set_connected(false);
    status.send_modify(|s| s.connected = false);
    tracing::info!("consume connection closed");
}
