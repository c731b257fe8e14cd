//! The right to settle one manual-ack delivery, and the commands it sends to its channel's
//! ack tracker: a decided ack (answered, or only reported if it fails), a batch of acks
//! decided together, or a release.

use mesh_core::{AckBatch, AckFailed, AckGroup, BoxFuture, TransportError, TransportErrorKind};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};

use amqprs::channel::Channel;

use crate::declare::CloseSlot;

pub(super) enum AckCommand {
    /// Decided: ack.
    Ack { tag: u64, done: Done },
    /// Decided together: ack them all ([`Delivery::ack_all`](mesh_core::Delivery::ack_all)).
    AckMany { tags: Vec<u64>, done: Done },
    /// Decided: requeue.
    Release(u64),
}

/// Who learns how an ack went.
pub(super) enum Done {
    /// The acker's future waits for the outcome ([`Acker::ack`](mesh_core::Acker::ack)).
    Answer(oneshot::Sender<Result<(), TransportError>>),
    /// Nobody waits; a failure is reported
    /// ([`Acker::ack_detached`](mesh_core::Acker::ack_detached)).
    Report(AckFailed),
}

impl Done {
    /// Whether a caller awaits the outcome.
    pub(super) fn is_awaited(&self) -> bool {
        matches!(self, Done::Answer(_))
    }

    pub(super) fn tell(self, outcome: Result<(), TransportError>) {
        match self {
            Done::Answer(answer) => {
                // The acker's future may be gone (dropped by its caller): nobody to tell.
                let _ = answer.send(outcome);
            }
            Done::Report(failed) => {
                if let Err(error) = outcome {
                    failed(error);
                }
            }
        }
    }
}

/// Whether a consumer channel is still there, for its deliveries to ask: its ack tracker
/// task lives on until every delivery is settled, so the tracker cannot tell.
pub(super) struct ChannelLive {
    channel: Channel,
    closed: CloseSlot,
}

impl ChannelLive {
    pub(super) fn new(channel: Channel, closed: CloseSlot) -> ChannelLive {
        ChannelLive { channel, closed }
    }

    /// Whether the channel is open and no close of it began (by the broker or by mesh):
    /// once not, the broker has its unsettled deliveries back.
    fn is_open(&self) -> bool {
        self.channel.is_open() && !self.closed.gate().is_closing()
    }
}

/// The right to settle one manual-ack delivery. Dropped undecided, it releases the
/// delivery (a requeue), so a message is never lost because a task died.
pub(super) struct Settle {
    tracker: mpsc::UnboundedSender<AckCommand>,
    channel: Arc<ChannelLive>,
    tag: u64,
    done: bool,
}

impl Settle {
    /// The right to settle the delivery of `tag`, through the tracker behind `tracker`.
    pub(super) fn new(
        tracker: mpsc::UnboundedSender<AckCommand>,
        channel: Arc<ChannelLive>,
        tag: u64,
    ) -> Settle {
        Settle {
            tracker,
            channel,
            tag,
            done: false,
        }
    }

    /// Whether its channel is still there (open, no close begun, its ack tracker running):
    /// once not, the broker has the delivery back and delivers it again.
    pub(super) fn is_live(&self) -> bool {
        !self.tracker.is_closed() && self.channel.is_open()
    }

    pub(super) async fn ack(mut self) -> Result<(), TransportError> {
        self.done = true;
        let (done, outcome) = oneshot::channel();
        self.tracker
            .send(AckCommand::Ack {
                tag: self.tag,
                done: Done::Answer(done),
            })
            .map_err(|_| lost())?;
        outcome.await.unwrap_or_else(|_| Err(lost()))
    }

    /// Hands the ack to the tracker, which reports a failure to `failed`.
    pub(super) fn ack_detached(mut self, failed: AckFailed) {
        self.done = true;
        let command = AckCommand::Ack {
            tag: self.tag,
            done: Done::Report(failed),
        };
        if let Err(mpsc::error::SendError(AckCommand::Ack { done, .. })) =
            self.tracker.send(command)
        {
            // The tracker is gone with its channel.
            done.tell(Err(lost()));
        }
    }
}

impl Settle {
    /// Adds this delivery's ack to `batch`, in the group of its channel.
    pub(super) fn ack_into(mut self, batch: &mut AckBatch) {
        let tag = self.tag;
        batch.join(
            |group: &ChannelAcks| group.tracker.same_channel(&self.tracker),
            || ChannelAcks {
                tracker: self.tracker.clone(),
                tags: Vec::new(),
            },
            |group| group.tags.push(tag),
        );
        // The group settles it now.
        self.done = true;
    }
}

/// The acks of one channel's deliveries, sent to its tracker as one command.
struct ChannelAcks {
    tracker: mpsc::UnboundedSender<AckCommand>,
    tags: Vec<u64>,
}

impl AckGroup for ChannelAcks {
    fn len(&self) -> usize {
        self.tags.len()
    }

    fn send(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async move {
            let ChannelAcks { tracker, tags } = *self;
            let (done, outcome) = oneshot::channel();
            tracker
                .send(AckCommand::AckMany {
                    tags,
                    done: Done::Answer(done),
                })
                .map_err(|_| lost())?;
            outcome.await.unwrap_or_else(|_| Err(lost()))
        })
    }
}

impl Drop for Settle {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.tracker.send(AckCommand::Release(self.tag));
        }
    }
}

fn lost() -> TransportError {
    TransportError::new(
        TransportErrorKind::ConnectionLost,
        "the delivery's channel is gone",
    )
}
