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
//!
//! An emit that fails for a passing reason (nacked while a queue bound to the key elects its
//! leader, the publisher reconnecting, the emit deadline) keeps its copy: it is held and
//! emitted again after a pause ([`EMIT_PAUSE`], doubled up to [`EMIT_PAUSE_MAX`]), never
//! released. A released copy is due, so the broker would deliver it again at once: a second
//! of nacks would run the schedule queue's delivery limit down and have the broker
//! dead-letter the event, which would then never arrive (as the transport's retry copies are
//! held through passing failures for the same reason).

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

/// The first pause before a due copy whose emit failed is emitted again, doubled after each
/// failure up to [`EMIT_PAUSE_MAX`].
pub(crate) const EMIT_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause between two emits of the same copy.
pub(crate) const EMIT_PAUSE_MAX: Duration = Duration::from_secs(5);

/// A copy held until it is due, ordered by when to look at it again.
struct Held {
    at: Instant,
    seq: u64,
    copy: Delivery,
    /// Its emits that failed so far.
    failed: u32,
}

/// A copy to hold again: for how long, and its emits that failed so far.
struct Again {
    hold: Duration,
    copy: Delivery,
    failed: u32,
}

/// The pause after a copy's `failed`-th failed emit.
fn emit_pause(failed: u32) -> Duration {
    let doubled = EMIT_PAUSE.saturating_mul(1u32 << failed.saturating_sub(1).min(16));
    doubled.min(EMIT_PAUSE_MAX)
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

/// What is being sent; one that failed for a passing reason hands its copy back.
type Sending = FuturesUnordered<Pin<Box<dyn Future<Output = Option<Again>> + Send>>>;

impl Forwarder {
    /// Forwards `copies` until `stop` or the end of the subscription; copies still held then
    /// are released to the schedule queue.
    pub(crate) async fn run(self: Arc<Self>, mut copies: Subscription, stop: CancellationToken) {
        let mut held: BinaryHeap<Reverse<Held>> = BinaryHeap::new();
        let mut sending: Sending = FuturesUnordered::new();
        let mut seq = 0u64;
        let mut hold = |held: &mut BinaryHeap<Reverse<Held>>, again: Option<Again>| {
            if let Some(Again { hold, copy, failed }) = again {
                seq += 1;
                let at = Instant::now() + hold;
                held.push(Reverse(Held {
                    at,
                    seq,
                    copy,
                    failed,
                }));
            }
        };
        loop {
            let wake = held.peek().map(|Reverse(h)| h.at);
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                Some(again) = sending.next(), if !sending.is_empty() => hold(&mut held, again),
                () = sleep_until(wake), if wake.is_some() => {
                    if let Some(Reverse(h)) = held.pop() {
                        let again = self.place(h.copy, h.failed, &mut sending);
                        hold(&mut held, again);
                    }
                }
                next = copies.next() => match next {
                    Some(copy) => {
                        let again = self.place(copy, 0, &mut sending);
                        hold(&mut held, again);
                    }
                    None => break,
                },
            }
        }
        // What is still sending finishes (or fails); a copy handed back is released below.
        while let Some(again) = sending.next().await {
            if let Some(again) = again {
                again.copy.release();
            }
        }
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
    /// with how long to hold it. `failed` counts its emits that failed so far.
    fn place(
        self: &Arc<Self>,
        copy: Delivery,
        failed: u32,
        sending: &mut Sending,
    ) -> Option<Again> {
        let due = match plan::due_of(&copy.message) {
            Ok(due) => due,
            Err(e) => {
                let error = e.to_string();
                sending.push(Box::pin(async move {
                    dead_letter(copy, DeadReason::Undecodable, error).await;
                    None
                }));
                return None;
            }
        };
        match plan::next(due, self.clock.now(), &self.hops) {
            Next::Emit => sending.push(Box::pin(Arc::clone(self).emit(copy, failed))),
            Next::Hold(hold) => return Some(Again { hold, copy, failed }),
            Next::Hop(n) => sending.push(Box::pin(async move {
                hop(copy, n).await;
                None
            })),
        }
        None
    }

    /// Emits a due copy to `mesh.events` as this bus, then acks it; hands the copy back to be
    /// held and emitted again if the emit failed for a passing reason (see the module docs).
    async fn emit(self: Arc<Self>, copy: Delivery, failed: u32) -> Option<Again> {
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
            dead_letter(copy, DeadReason::Undecodable, e.to_string()).await;
            return None;
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
            dead_letter(copy, DeadReason::ForgedSource, error).await;
            return None;
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
                let failed = failed.saturating_add(1);
                let hold = emit_pause(failed);
                warn!(error = %EscapedDisplay(&e), failed, retry_in = ?hold, "emitting a scheduled event failed; its copy is held and emitted again");
                return Some(Again { hold, copy, failed });
            }
        }
        None
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_emit_waits_longer_each_time_up_to_the_longest_pause() {
        assert_eq!(emit_pause(1), EMIT_PAUSE);
        assert_eq!(emit_pause(2), EMIT_PAUSE * 2);
        assert_eq!(emit_pause(4), EMIT_PAUSE * 8);
        assert_eq!(emit_pause(7), EMIT_PAUSE_MAX);
        assert_eq!(emit_pause(u32::MAX), EMIT_PAUSE_MAX);
    }
}
