//! The ack tracker task of one manual-ack channel: the I/O shell of the [`AckTracker`] state
//! machine. It takes the ackers' commands, sends the frames the state machine returns,
//! answers who waits for them, and closes the channel once the reader and every acker are
//! gone or the transport closes.

use mesh_core::text::EscapedDisplay;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqprs::channel::{BasicAckArguments, BasicNackArguments, Channel};
use mesh_core::{TransportError, TransportErrorKind};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::Instrument;

use crate::declare::{take_close, within, CloseSlot};
use crate::gate::{ChannelGate, Closer};

use super::ack::{AckTracker, Flush, Frame};
use super::attach::closing;
use super::settle::{AckCommand, ChannelLive, Done, Settle};

/// How many commands the ack tracker handles before it sends what they decided.
const ACK_BATCH: usize = 1024;

/// How long the ack tracker holds decided acks back for more to join them in one frame,
/// at most: only while fewer than half the prefetch is decided, and handlers still run on
/// other deliveries of the channel or nobody awaits these acks (see
/// [`AckTracker::should_linger`]).
pub(super) const ACK_LINGER: Duration = Duration::from_millis(1);

/// A channel's ack tracker state. Shared rather than owned by the tracker task: the reader
/// registers a delivery without waking the task. Locked only for a call into the state
/// machine, never across an await.
type TrackerState = Arc<Mutex<AckTracker<Done>>>;

fn lock(state: &TrackerState) -> std::sync::MutexGuard<'_, AckTracker<Done>> {
    state
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The reader's handle on a channel's ack tracker.
pub(super) struct Tracker {
    commands: mpsc::UnboundedSender<AckCommand>,
    state: TrackerState,
    channel: Arc<ChannelLive>,
}

impl Tracker {
    /// Starts the ack tracker task of a manual-ack channel consuming `queue`, which lingers
    /// over acks while fewer than half the `prefetch` is decided; the reader's handle on it.
    pub(super) fn start(
        channel: &Channel,
        closed: &CloseSlot,
        prefetch: u16,
        queue: &str,
        closing: Closing,
    ) -> Tracker {
        let (commands, rx) = mpsc::unbounded_channel();
        let state = Arc::new(Mutex::new(AckTracker::default()));
        let span =
            tracing::debug_span!(parent: None, "mesh_amqp.acks", queue = %EscapedDisplay(&queue));
        tokio::spawn(
            track(
                channel.clone(),
                closed.clone(),
                state.clone(),
                usize::from(prefetch / 2),
                rx,
                closing,
            )
            .instrument(span),
        );
        let channel = Arc::new(ChannelLive::new(channel.clone(), closed.clone()));
        Tracker {
            commands,
            state,
            channel,
        }
    }

    /// Registers a delivery as handed out: the right to settle it.
    pub(super) fn delivered(&self, tag: u64) -> Settle {
        lock(&self.state).delivered(tag);
        Settle::new(self.commands.clone(), self.channel.clone(), tag)
    }
}

/// How an ack tracker learns that the transport closes, and tells it when its channel is
/// closed (by dropping the token).
pub(super) struct Closing {
    pub(super) shutdown: watch::Receiver<bool>,
    pub(super) token: TaskTrackerToken,
}

/// The ack tracker task of one channel; see the module docs.
///
/// It closes its channel once the reader and every acker are gone, or as soon as the
/// transport closes (the broker requeues what is unsettled; a later ack fails with
/// `ConnectionLost`), so that the close is acknowledged before the connection goes.
async fn track(
    channel: Channel,
    closed: CloseSlot,
    state: TrackerState,
    linger_acks: usize,
    mut commands: mpsc::UnboundedReceiver<AckCommand>,
    transport: Closing,
) {
    let Closing {
        mut shutdown,
        token,
    } = transport;
    let mut token = Some(token);
    loop {
        let first = tokio::select! {
            biased;
            command = commands.recv() => match command {
                Some(command) => command,
                None => break,
            },
            () = closing(&mut shutdown), if token.is_some() => {
                close_channel(&channel, closed.gate()).await;
                token = None;
                continue;
            }
        };
        let mut next = Some(first);
        let mut linger_until = None;
        let mut ended = false;
        // Whether someone awaits an ack of this flush (else all were handed on detached).
        let mut awaited = false;
        let mut closing_now = false;
        let flush = loop {
            {
                let mut tracker = lock(&state);
                let mut handled = 0;
                while let Some(command) = next.take() {
                    match command {
                        AckCommand::Ack { tag, done } => {
                            awaited |= done.is_awaited();
                            tracker.ack(tag, done);
                        }
                        AckCommand::AckMany { tags, done } => {
                            awaited |= done.is_awaited();
                            tracker.ack_many(tags, done);
                        }
                        AckCommand::Release(tag) => tracker.release(tag),
                    }
                    handled += 1;
                    if handled < ACK_BATCH {
                        next = commands.try_recv().ok();
                    }
                }
                let lingered = linger_until.is_some_and(|at| Instant::now() >= at);
                if ended || lingered || closing_now || !tracker.should_linger(linger_acks, awaited)
                {
                    // A closed channel's tags died with it (the broker requeued them);
                    // sending on it would reach whatever channel reuses its number, or
                    // close the connection. (A close that begins after this glance is
                    // caught by the gate, in `send`.)
                    break tracker.flush(channel.is_open() && !closed.gate().is_closing());
                }
            }
            // Handlers are still running on deliveries of this channel, or nobody waits for
            // these acks: more acks, due any moment, can join them in one frame.
            let at = *linger_until.get_or_insert_with(|| Instant::now() + ACK_LINGER);
            tokio::select! {
                biased;
                command = commands.recv() => match command {
                    Some(command) => next = Some(command),
                    None => ended = true,
                },
                // The transport closes: what is decided goes now, before the channel.
                () = closing(&mut shutdown), if token.is_some() => closing_now = true,
                () = tokio::time::sleep_until(at) => {}
            }
        };
        send(&channel, &closed, flush).await;
        if ended {
            break;
        }
    }
    // The reader and the ackers are gone: nothing more can be settled here.
    close_channel(&channel, closed.gate()).await;
    drop(token);
}

/// Closes a consumer channel unless its close began already (by the broker, or by the
/// pump): marked begun under its gate first, so that nothing is sent on it after the
/// `channel.close` (see [`crate::gate`]).
pub(super) async fn close_channel(channel: &Channel, gate: &ChannelGate) {
    if gate.close_began(Closer::Client).await && channel.is_open() {
        let _ = within(channel.clone().close(), "closing a consumer channel").await;
    }
}

/// Sends what the tracker decided and answers who waits for it. The frames go under the
/// channel's gate: none once its close began, whoever began it.
async fn send(channel: &Channel, closed: &CloseSlot, flush: Flush<Done>) {
    let Flush {
        frames,
        waiters,
        lost,
    } = flush;
    let sent = if lost {
        None
    } else {
        closed
            .gate()
            .send(channel, send_frames(channel, frames))
            .await
    };
    let Some(failure) = sent else {
        let close = take_close(closed);
        for done in waiters {
            let error = TransportError::new(
                TransportErrorKind::ConnectionLost,
                "the delivery's channel is closed",
            );
            let error = match &close {
                Some(close) => error.with_source(close.clone()),
                None => error,
            };
            done.tell(Err(error));
        }
        return;
    };
    for done in waiters {
        let outcome = match &failure {
            None => Ok(()),
            Some(e) => Err(TransportError::new(
                TransportErrorKind::ConnectionLost,
                format!("sending an ack failed: {e}"),
            )),
        };
        done.tell(outcome);
    }
}

/// Enqueues `frames` on `channel` (no round trip: an ack and a nack have no answer); the
/// first ack that failed, if any.
async fn send_frames(channel: &Channel, frames: Vec<Frame>) -> Option<String> {
    for frame in frames {
        match frame {
            Frame::Release(tag) => {
                if let Err(e) = channel
                    .basic_nack(BasicNackArguments::new(tag, false, true))
                    .await
                {
                    tracing::debug!(tag, error = %EscapedDisplay(&e), "releasing a delivery failed");
                }
            }
            Frame::Ack { tag, multiple } => {
                if let Err(e) = channel
                    .basic_ack(BasicAckArguments::new(tag, multiple))
                    .await
                {
                    return Some(e.to_string());
                }
            }
        }
    }
    None
}
