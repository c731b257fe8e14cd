//! The schedule forwarder: the loop that takes a module's scheduled events from its schedule
//! queue, sends each down the queue's ladder until it is due, and emits it then.
//!
//! Every copy is in a queue or held unacked by a consumer: a hop is a retry copy (published
//! through `mesh.retry`, confirmed, and only then is the copy it replaces acked), and a due
//! event is emitted to `mesh.events` and confirmed before its copy is acked. A forwarder that
//! stops, crashes or loses its channel returns what it holds, and the next one (another bus
//! of the module, or the same re-attached) looks at it again, from its due time: a lost
//! forwarder makes an event late, never early, and loses none. An event emitted whose ack
//! was lost is emitted again (at least once; consumers deduplicate by `x-event-id`).
//!
//! The emit is this bus's own publish, under its own broker user: the broker checks the key
//! against the user's topic permission, so a copy put in the queue under a key the module
//! does not own is refused twice, here (dead-lettered `forged-source`) and by the broker.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt as _};
use mesh_core::codec::{self, DeadLetterNote, DeadReason};
use mesh_core::text::EscapedDisplay;
use mesh_core::{
    Delivery, Name, PublishOptions, RoutingKey, Subscription, Target, Timestamp, Transport,
    TransportErrorKind,
};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::plan::{self, Next};
use crate::identity::Identity;

/// What a forwarder needs: the transport it publishes with and whose keys it may emit.
pub(crate) struct Forwarder {
    pub(crate) transport: Arc<dyn Transport>,
    pub(crate) identity: Identity,
    pub(crate) node: Name,
    pub(crate) hops: Vec<Duration>,
    /// How long an emit may wait for room and its confirm (the bus's emit deadline).
    pub(crate) deadline: Option<Duration>,
    /// What "now" is when a copy's due time is looked at.
    pub(crate) clock: super::clock::Clock,
}

/// A copy held until it is due, ordered by when to look at it again.
struct Held {
    at: Instant,
    seq: u64,
    copy: Delivery,
}

impl PartialEq for Held {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Held {}
impl PartialOrd for Held {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Held {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

type Sending = FuturesUnordered<Pin<Box<dyn Future<Output = ()> + Send>>>;

impl Forwarder {
    /// Forwards `copies` until `stop` or the end of the subscription; copies still held then
    /// are released to the schedule queue.
    pub(crate) async fn run(self: Arc<Self>, mut copies: Subscription, stop: CancellationToken) {
        let mut held: BinaryHeap<Reverse<Held>> = BinaryHeap::new();
        let mut sending: Sending = FuturesUnordered::new();
        let mut seq = 0u64;
        loop {
            let wake = held.peek().map(|Reverse(h)| h.at);
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                Some(()) = sending.next(), if !sending.is_empty() => {}
                () = sleep_until(wake), if wake.is_some() => {
                    if let Some(Reverse(h)) = held.pop() {
                        if let Some(hold) = self.place(h.copy, &mut sending) {
                            seq += 1;
                            held.push(Reverse(Held { at: Instant::now() + hold.0, seq, copy: hold.1 }));
                        }
                    }
                }
                next = copies.next() => match next {
                    Some(copy) => {
                        if let Some(hold) = self.place(copy, &mut sending) {
                            seq += 1;
                            held.push(Reverse(Held { at: Instant::now() + hold.0, seq, copy: hold.1 }));
                        }
                    }
                    None => break,
                },
            }
        }
        while sending.next().await.is_some() {}
        copies.cancel();
        // Released with the rest: what arrives until the broker confirmed the cancel.
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            while let Some(copy) = copies.next().await {
                copy.release();
            }
        })
        .await;
        for Reverse(h) in held {
            h.copy.release();
        }
    }

    /// Starts what `copy` needs now (its emit, its hop, its dead letter), or hands it back
    /// with how long to hold it.
    fn place(
        self: &Arc<Self>,
        copy: Delivery,
        sending: &mut Sending,
    ) -> Option<(Duration, Delivery)> {
        let due = match plan::due_of(&copy.message) {
            Ok(due) => due,
            Err(e) => {
                sending.push(Box::pin(dead_letter(
                    copy,
                    DeadReason::Undecodable,
                    e.to_string(),
                )));
                return None;
            }
        };
        match plan::next(due, self.clock.now(), &self.hops) {
            Next::Emit => sending.push(Box::pin(Arc::clone(self).emit(copy))),
            Next::Hold(hold) => return Some((hold, copy)),
            Next::Hop(n) => sending.push(Box::pin(hop(copy, n))),
        }
        None
    }

    /// Emits a due copy to `mesh.events` as this bus, then acks it.
    async fn emit(self: Arc<Self>, copy: Delivery) {
        let mut message = copy.message.clone();
        // No `x-mesh-*` header is believed from `mesh.events`, and none is sent there; the
        // due time goes on as `x-due`, which says the event was scheduled.
        let due = message.header(codec::DUE).cloned();
        message
            .properties
            .headers
            .retain(|name, _| !codec::is_mesh_header(name));
        if let Some(due) = due {
            message
                .properties
                .headers
                .insert(codec::SCHEDULED_DUE.to_owned(), due);
        }
        if let Err(e) = codec::decode(&message) {
            return dead_letter(copy, DeadReason::Undecodable, e.to_string()).await;
        }
        let own = RoutingKey::parse(&message.routing_key)
            .is_ok_and(|key| self.identity.owns(&self.node, &key))
            && message.header(codec::SOURCE).and_then(|v| v.as_str())
                == Some(self.identity.owner(&self.node).as_str());
        if !own {
            let error = format!(
                "a scheduled event under `{}`, which this module does not own",
                mesh_core::text::escape(&message.routing_key)
            );
            return dead_letter(copy, DeadReason::ForgedSource, error).await;
        }
        let options = PublishOptions {
            target: Target::Events,
            mandatory: false,
            deadline: self.deadline,
        };
        let published = match self.transport.publish(message, options).await {
            Ok(confirm) => confirm.await,
            Err(e) => Err(e),
        };
        match published {
            Ok(()) => {
                if let Err(e) = copy.ack().await {
                    debug!(error = %EscapedDisplay(&e), "a scheduled event was emitted but its ack was lost; it will be emitted again");
                }
            }
            Err(e) if matches!(e.kind(), TransportErrorKind::Forbidden { .. }) => {
                dead_letter(copy, DeadReason::ForgedSource, e.to_string()).await;
            }
            Err(e) => {
                warn!(error = %EscapedDisplay(&e), "emitting a scheduled event failed; it is looked at again");
                copy.release();
            }
        }
    }
}

/// Sends `copy` down hop `n`: a confirmed copy on the ladder, then the ack.
async fn hop(copy: Delivery, n: usize) {
    let message = copy.message.clone();
    if let Err(e) = copy.retry(message, n).await {
        // Released: the schedule queue holds it again.
        warn!(error = %EscapedDisplay(&e), "a scheduled event could not take its hop; it is looked at again");
    }
}

/// Sets aside a copy that is not a scheduled event of this module.
async fn dead_letter(copy: Delivery, reason: DeadReason, error: String) {
    warn!(reason = reason.as_str(), error = %EscapedDisplay(&error), "a copy in the schedule queue is dead-lettered");
    let mut message = copy.message.clone();
    codec::mark_dead(
        &mut message,
        &DeadLetterNote {
            reason,
            attempts: 0,
            last_error: Some(error),
            queue: copy.queue.clone(),
            time: Timestamp::now(),
        },
    );
    if let Err(e) = copy.dead_letter(message).await {
        warn!(error = %EscapedDisplay(&e), "dead-lettering a scheduled copy failed; it will be delivered again");
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
