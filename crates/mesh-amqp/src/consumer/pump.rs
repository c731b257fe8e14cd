//! The pump: one task per subscription that owns its consumer's lifecycle. It cancels the
//! consumer when the subscription is cancelled or dropped, and re-attaches it whenever it
//! stops on its own (see the module docs of `consumer`), handing each new stream to the
//! subscription.

use mesh_core::text::EscapedDisplay;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use amqprs::channel::{BasicCancelArguments, Channel};
use mesh_core::{Subscription, TransportError};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_util::sync::DropGuard;
use tracing::Instrument;

use crate::connection::backoff::Backoff;
use crate::connection::link::LinkStatus;
use crate::declare::{take_close, CloseSlot};
use crate::lifecycle::{Counters, Lifecycle};

use super::acker::SubscriptionCtx;
use super::attach::{attach, closing, AttachSpec, Consumer, Env};
use super::feed::{Feed, Reader};
use super::tracker::{close_channel, Closing, Tracker};

/// A consumer attached this long is stable: the next re-attach starts its backoff over.
pub(super) const STABLE_AFTER: Duration = Duration::from_secs(5);

/// Attaches `spec` and starts the pump that keeps the returned subscription attached for as
/// long as it is not cancelled, re-attaching whenever the consumer stops. `declared` says the
/// queue was just declared (no need to again). `forwarders` stop its retry queues'
/// forwarders ([`forward`](super::forward)) when the subscription is dropped.
pub(crate) async fn subscribe(
    env: Env,
    spec: AttachSpec,
    declared: bool,
    forwarders: Vec<DropGuard>,
) -> Result<Subscription, TransportError> {
    let generation = env.link.status().borrow().generation;
    let (consumer, ctx) = attach(&env, &spec, !declared).await?;
    // The pump hands over one attachment at a time, and only after the last one ended.
    let (readers_tx, readers) = mpsc::channel(1);
    let (cancel_tx, cancel) = oneshot::channel();
    env.counts.expected.fetch_add(1, Ordering::AcqRel);
    env.counts.attached.fetch_add(1, Ordering::AcqRel);
    let queue = ctx.queue.clone();
    let (attachment, reader) = Attachment::new(consumer, ctx, generation, spec.prefetch, &env);
    let span = tracing::info_span!(parent: None, "mesh_amqp.subscription", queue = %EscapedDisplay(&queue));
    let pump = Pump {
        backoff: env.backoff.clone(),
        env,
        spec,
        readers: readers_tx,
    };
    // Tracked: the transport's close waits for the pump to have closed its channel.
    let tasks = pump.env.link.shared().channel_tasks.clone();
    tasks.spawn(pump.run(attachment, cancel).instrument(span));
    let feed = Feed {
        readers,
        current: Some(reader),
        _forwarders: forwarders,
    };
    Ok(Subscription::from_feed(queue, feed, cancel_tx))
}

/// Why serving one attachment ended.
enum End {
    /// Cancelled by the subscription (or the transport closing), or the subscription is
    /// gone: the pump stops.
    Stopped,
    /// The consumer stopped on its own: the pump re-attaches.
    Lost {
        reason: String,
        /// With its connection (not only its channel or consumer): re-attaching waits for
        /// the next connection.
        connection: bool,
    },
    /// Its channel is gone with no close from the broker while the link still looks up:
    /// either the connection is going and the link learns it a moment later, or the ack
    /// tracker closed the channel itself after a broker's cancel. The link tells which.
    Unsure,
}

/// How long a pump waits for the link to tell whether an [`End::Unsure`] was the
/// connection going.
const LINK_NEWS: Duration = Duration::from_secs(2);

/// The pump's side of one attached consumer: enough to cancel it and to tell why it ended.
struct Attachment {
    queue: String,
    channel: Channel,
    closed: CloseSlot,
    consumer_tag: String,
    manual_ack: bool,
    /// The link's generation when it attached (its connection's, or an older one).
    generation: u64,
    /// Resolves (with an error) once the attachment's [`Reader`] is gone: its stream ended,
    /// or the subscription was dropped.
    ended: oneshot::Receiver<()>,
}

impl Attachment {
    /// Splits a fresh consumer into the pump's and the reader's halves, and starts its ack
    /// tracker.
    fn new(
        consumer: Consumer,
        ctx: Arc<SubscriptionCtx>,
        generation: u64,
        prefetch: u16,
        env: &Env,
    ) -> (Attachment, Reader) {
        let Consumer {
            queue,
            channel,
            closed,
            consumer_tag,
            stream,
            manual_ack,
        } = consumer;
        let tracker = manual_ack.then(|| {
            // Not tracked as a task (it lives as long as the reader and the ackers, which
            // may outlive the transport), but by a token it drops once its channel is
            // closed: the transport's close waits for that.
            let closing = Closing {
                shutdown: env.shutdown.clone(),
                token: env.link.shared().channel_tasks.token(),
            };
            Tracker::start(&channel, &closed, prefetch, &ctx.queue, closing)
        });
        let (ended_tx, ended) = oneshot::channel();
        let reader = Reader {
            stream,
            channel: channel.clone(),
            manual_ack,
            ctx,
            tracker,
            _ended: ended_tx,
        };
        let attachment = Attachment {
            queue,
            channel,
            closed,
            consumer_tag,
            manual_ack,
            generation,
            ended,
        };
        (attachment, reader)
    }
}

struct Pump {
    env: Env,
    spec: AttachSpec,
    /// Where re-attached consumers go to the subscription; closed once it is dropped.
    readers: mpsc::Sender<Reader>,
    backoff: Backoff,
}

impl Pump {
    async fn run(mut self, mut attachment: Attachment, mut cancel: oneshot::Receiver<()>) {
        let mut shutdown = self.env.shutdown.clone();
        loop {
            let attached_at = Instant::now();
            let end = self
                .serve(&mut attachment, &mut cancel, &mut shutdown)
                .await;
            self.env.counts.attached.fetch_sub(1, Ordering::AcqRel);
            let (reason, connection_lost) = match end {
                End::Stopped => {
                    // A manual-ack channel is closed by its tracker once the reader and
                    // the ackers are gone; a no-ack one has none, and nothing can be
                    // settled on it.
                    if !attachment.manual_ack {
                        close_channel(&attachment.channel, attachment.closed.gate()).await;
                    }
                    break;
                }
                End::Lost { reason, connection } => (reason, connection),
                End::Unsure => {
                    // Taken for a cancel, a lost connection would have the pump back off
                    // (longer each time, until it stays attached a while) instead of
                    // re-attaching as soon as the next connection is up.
                    if self.connection_went(attachment.generation).await {
                        ("the connection was lost".to_owned(), true)
                    } else {
                        ("the broker cancelled the consumer".to_owned(), false)
                    }
                }
            };
            let queue = attachment.queue.clone();
            let generation = attachment.generation;
            if self.env.in_stats {
                Counters::bump(&self.env.link.shared().counters.consumer_cancels);
            }
            tracing::warn!(queue = %EscapedDisplay(&queue), reason = %EscapedDisplay(&reason), "consumer stopped; re-attaching");
            self.env
                .link
                .shared()
                .emit(Lifecycle::ConsumerCancelled { queue, reason });
            if attached_at.elapsed() >= STABLE_AFTER {
                self.backoff.reset();
            }
            // After a lost connection, the next one is what to wait for (the supervisor
            // spaces its attempts); otherwise the backoff spaces ours.
            let after = connection_lost.then_some(generation);
            match self.reattach(after, &mut cancel, &mut shutdown).await {
                Some((next, reader)) => {
                    attachment = next;
                    if self.env.in_stats {
                        Counters::bump(&self.env.link.shared().counters.reattached);
                    }
                    let queue = attachment.queue.clone();
                    tracing::info!(queue = %EscapedDisplay(&queue), prefetch = self.spec.prefetch, "consumer re-attached");
                    self.env
                        .link
                        .shared()
                        .emit(Lifecycle::ConsumerReattached { queue });
                    // Counted last: whoever sees the consumers all attached (`health()`)
                    // finds the re-attach counted and reported.
                    self.env.counts.attached.fetch_add(1, Ordering::AcqRel);
                    // If the subscription is gone meanwhile, `serve` sees it at once.
                    let _ = self.readers.send(reader).await;
                }
                None => break,
            }
        }
        self.env.counts.expected.fetch_sub(1, Ordering::AcqRel);
        tracing::debug!("subscription ended");
    }

    /// Whether the link reports the connection of generation `generation` gone within
    /// [`LINK_NEWS`].
    async fn connection_went(&self, generation: u64) -> bool {
        let mut status = self.env.link.status();
        let went = async {
            status
                .wait_for(|s| !s.connected || s.generation > generation)
                .await
                .is_ok()
        };
        tokio::time::timeout(LINK_NEWS, went).await.unwrap_or(false)
    }

    /// Waits until one attachment is cancelled, its subscription is gone, or it stops on
    /// its own: the broker closed its channel or cancelled it, the connection was lost, or
    /// its stream ended.
    async fn serve(
        &mut self,
        attachment: &mut Attachment,
        cancel: &mut oneshot::Receiver<()>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> End {
        let generation = attachment.generation;
        let link = self.env.link.clone();
        let mut status = link.status();
        tokio::select! {
            biased;
            // Fires on `Subscription::cancel` and when the subscription is dropped.
            _ = &mut *cancel => {}
            () = self.readers.closed() => {}
            () = closing(shutdown) => {}
            () = attachment.closed.stopped() => return why_ended(attachment, &link.status()),
            up = status.wait_for(|s| !s.connected || s.generation > generation) => {
                if up.is_ok() {
                    return End::Lost {
                        reason: "the connection was lost".to_owned(),
                        connection: true,
                    };
                }
            }
            _ = &mut attachment.ended => {
                // The reader went with its subscription, not with its stream.
                if !self.readers.is_closed() {
                    return why_ended(attachment, &link.status());
                }
            }
        }
        cancel_consumer(attachment).await;
        End::Stopped
    }

    /// Attaches again once the link is up — first, with `after`, once a connection newer
    /// than generation `after` is — backing off between failed attempts; `None` if cancelled
    /// meanwhile.
    async fn reattach(
        &mut self,
        mut after: Option<u64>,
        cancel: &mut oneshot::Receiver<()>,
        shutdown: &mut watch::Receiver<bool>,
    ) -> Option<(Attachment, Reader)> {
        let mut status = self.env.link.status();
        // A new connection counts as up only once the link replayed the whole recorded
        // topology on it (this queue, its retry queues and bindings among it): the first
        // attempt after a lost connection consumes without declaring them a second time
        // (hundreds of subscriptions re-attaching at once would double the declarations).
        // Any later attempt declares them again, in case the queue went meanwhile.
        let mut replayed = after.is_some();
        loop {
            let delay = match after {
                Some(_) => Duration::ZERO,
                None => self.backoff.next_delay(),
            };
            let newer = after.take().unwrap_or(0);
            let ready = async {
                tokio::time::sleep(delay).await;
                status
                    .wait_for(|s| s.connected && s.generation > newer)
                    .await
                    .is_ok()
            };
            tokio::select! {
                ready = ready => if !ready { return None },
                _ = &mut *cancel => return None,
                () = self.readers.closed() => return None,
                () = closing(shutdown) => return None,
            }
            let generation = status.borrow().generation;
            let redeclare = !std::mem::take(&mut replayed);
            match attach(&self.env, &self.spec, redeclare).await {
                Ok((consumer, ctx)) => {
                    return Some(Attachment::new(
                        consumer,
                        ctx,
                        generation,
                        self.spec.prefetch,
                        &self.env,
                    ))
                }
                Err(error) => tracing::warn!(
                    error = %EscapedDisplay(&error),
                    failures = self.backoff.failures(),
                    "re-attaching a consumer failed; retrying"
                ),
            }
        }
    }
}

/// Why an attachment whose stream ended stopped. A channel found closed with no close
/// from the broker went with its connection only if the link says so: the ack tracker
/// closes the channel itself once the reader and every acker are gone, which is what
/// follows a broker's cancel on a consumer holding no delivery (a forwarder waiting for
/// copies, say), and waiting for a new connection then would wait for good. While the
/// link still looks up, the pump asks it again ([`End::Unsure`]): the stream of a lost
/// connection can end before the link has noticed.
fn why_ended(attachment: &Attachment, status: &watch::Receiver<LinkStatus>) -> End {
    let link_up = {
        let status = status.borrow();
        status.connected && status.generation == attachment.generation
    };
    let (reason, connection) = match take_close(&attachment.closed) {
        Some(close) => (close.to_string(), false),
        None if attachment.channel.is_open() => {
            ("the broker cancelled the consumer".to_owned(), false)
        }
        None if link_up => return End::Unsure,
        None => ("the connection was lost".to_owned(), true),
    };
    End::Lost { reason, connection }
}

/// Cancels the consumer, unless its channel's close began (see [`crate::gate`]).
///
/// Without waiting for the broker's `basic.cancel-ok`: the gate is held only while a frame is
/// enqueued, never across a round trip (the broker's close callback waits for it, and the
/// answer would come through that callback's task). The client library stops the consumer's
/// stream at once; a delivery the broker sent before it read the cancel stays unacked in the
/// library until the channel closes, and the broker requeues it then.
async fn cancel_consumer(attachment: &Attachment) {
    let args = BasicCancelArguments::new(&attachment.consumer_tag)
        .no_wait(true)
        .finish();
    let sent = attachment
        .closed
        .gate()
        .send(&attachment.channel, attachment.channel.basic_cancel(args))
        .await;
    match sent {
        Some(Ok(_)) => {
            tracing::info!(queue = %EscapedDisplay(&attachment.queue), "consumer cancelled")
        }
        Some(Err(e)) => tracing::debug!(error = %EscapedDisplay(&e), "basic.cancel failed"),
        None => tracing::debug!("basic.cancel not sent: the channel's close began"),
    }
}
