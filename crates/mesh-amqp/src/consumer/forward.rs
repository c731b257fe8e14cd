//! Retry forwarders: mesh, not the broker, times a retry copy's wait and brings it back.
//!
//! A failed delivery's retry copy is published to its step's retry queue
//! `<queue>.retry.<step>` (through `mesh.retry`). Every subscription with a retry ladder
//! runs one forwarder per retry queue: a consumer of that queue (re-attached like any
//! other) that holds each copy for the step, counted from when it took the copy, then
//! publishes it through `mesh.retry` under `<queue>`'s name (mandatory, confirmed; on that
//! key `<queue>` alone is bound) and only then acks it. A copy is always in a queue or held
//! unacked: a forwarder that dies or loses its channel returns what it held, and another
//! (or the same, re-attached) holds it again for a step. So a retry waits at least its step,
//! and up to about twice that when its forwarder is lost mid-wait.
//!
//! # Why not the broker's TTL
//!
//! Retry queues used to expire their copies (`x-message-ttl`) and dead-letter them back
//! (`x-dead-letter-exchange`, at least once on quorum queues). RabbitMQ's at-least-once
//! dead-lettering runs in one worker process per source queue, started when the queue
//! elects a leader; two elections in short succession (a node stopped, or a partition) can
//! leave the queue with no live worker until its next election, and its expired copies then
//! wait in the queue indefinitely, neither ready nor unacked (found by the soak, see
//! docs/RELIABILITY.md; RabbitMQ fixed parts of it in later releases). Classic queues only
//! dead-letter at most once: a copy expiring while a node fails could be lost. A forwarder
//! needs neither: its publish is confirmed before its ack, like every copy mesh makes.
//!
//! Retry queues declared by earlier versions (with the TTL and the dead-letter arguments)
//! are kept as they are and forwarded too; see `declare_retry_queue` in the transport.
//!
//! # Limits
//!
//! A forwarder holds at most [`FORWARD_PREFETCH`] copies: copies beyond that wait in the
//! queue for their turn, so a burst of failures on a long step makes retries later than the
//! step, never earlier. A held copy is never held longer than its step, and steps are at
//! most [`MAX_STEP`], well below RabbitMQ's default consumer timeout (30 minutes), past
//! which the broker would take the copy back and close the channel. A copy taken back from
//! forwarders twice goes at once ([`hold_for`]), so even a broker with a shorter consumer
//! timeout cannot keep a retry from coming back.

use mesh_core::text::EscapedDisplay;
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt as _};
use mesh_core::{Delivery, Subscription};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};
use tracing::Instrument;

use mesh_core::TransportError;

use super::attach::{AttachSpec, ConsumerCounts, Env, Source};
use super::pump::subscribe;

/// How many copies one forwarder holds at once, at most.
pub(crate) const FORWARD_PREFETCH: u16 = 1000;

/// The longest retry step: a forwarder holds a copy unacked for its step, and RabbitMQ
/// takes back a delivery unacked for its consumer timeout (30 minutes by default).
pub(crate) const MAX_STEP: Duration = Duration::from_secs(15 * 60);

/// How long a stopping forwarder waits for its consumer's cancel to be confirmed before it
/// releases what it holds all the same.
const CANCEL_PATIENCE: Duration = Duration::from_secs(5);

/// Starts a forwarder for each retry queue of `queue`, given with its step. The
/// forwarders stop when the returned guards are dropped (with the subscription), or when
/// the transport closes.
pub(crate) async fn start(
    env: &Env,
    queue: &str,
    retry_queues: &[(String, Duration)],
    counts_deliveries: bool,
) -> Result<Vec<DropGuard>, TransportError> {
    // Attached together, each on a channel of its own (four round trips apart otherwise).
    let attached =
        futures::future::try_join_all(retry_queues.iter().map(|(retry_queue, step)| async move {
            let spec = AttachSpec {
                source: Source::Named(retry_queue.clone()),
                prefetch: FORWARD_PREFETCH,
                manual_ack: true,
                // The one "step" of a forwarder's deliveries is the queue itself: a retry of
                // a retry copy publishes it through `mesh.retry` under `queue`'s name, then
                // acks.
                delay_queues: vec![queue.to_owned()],
                counts_deliveries,
                arrival: super::Arrival::RetryCopies,
            };
            // Not counted in the transport's health or stats: a forwarder detached delays
            // retries and loses nothing, while readiness is about consuming the queue. Its
            // stops and re-attaches are still reported as lifecycle events, under its
            // queue's name.
            let env = Env {
                counts: Arc::new(ConsumerCounts::default()),
                in_stats: false,
                ..env.clone()
            };
            let copies = subscribe(env, spec, true, Vec::new()).await?;
            Ok::<_, TransportError>((retry_queue, *step, copies))
        }))
        .await?;
    let mut guards = Vec::with_capacity(attached.len());
    for (retry_queue, step, copies) in attached {
        let stop = CancellationToken::new();
        let span = tracing::info_span!(parent: None, "mesh_amqp.forwarder", queue = %EscapedDisplay(&retry_queue));
        tokio::spawn(run(copies, step, stop.clone()).instrument(span));
        guards.push(stop.drop_guard());
    }
    Ok(guards)
}

/// Holds each copy of `copies` for `step`, then forwards it; until `stop` or the end of
/// the subscription. Copies still held then are released (back to their retry queue).
async fn run(mut copies: Subscription, step: Duration, stop: CancellationToken) {
    let mut held: VecDeque<(Instant, Delivery)> = VecDeque::new();
    let mut sending = FuturesUnordered::new();
    loop {
        let due = held.front().map(|(at, _)| *at);
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            Some(sent) = sending.next(), if !sending.is_empty() => {
                if let Err(error) = sent {
                    // The copy was released: its retry queue holds it again.
                    tracing::warn!(error = %EscapedDisplay(&error), "forwarding a retry copy failed; it waits again");
                }
            }
            () = sleep_until(due), if due.is_some() => {
                if let Some((_, copy)) = held.pop_front() {
                    sending.push(forward(copy));
                }
            }
            next = copies.next() => match next {
                Some(copy) => {
                    let now = Instant::now();
                    let hold = hold_for(copy.delivery_count, copy.redelivered, step);
                    // In the queue's order: one that may go at once still goes after
                    // those taken before it.
                    let last = held.back().map_or(now, |(at, _)| *at);
                    held.push_back(((now + hold).max(last), copy));
                }
                None => break,
            },
        }
    }
    // Let what was sent finish (its ack, or its release).
    while let Some(sent) = sending.next().await {
        if let Err(error) = sent {
            tracing::debug!(error = %EscapedDisplay(&error), "forwarding a retry copy failed while stopping");
        }
    }
    // Stop taking copies before releasing those held: released while the consumer is still
    // attached, a copy would come straight back to it and be returned once more with the
    // channel, two returns that make the next forwarder send it at once ([`hold_for`])
    // instead of holding it for its step. The stream ends once the broker confirmed the
    // cancel; what arrives until then is released with the rest.
    copies.cancel();
    let _ = tokio::time::timeout(CANCEL_PATIENCE, async {
        while let Some(copy) = copies.next().await {
            held.push_back((Instant::now(), copy));
        }
    })
    .await;
    drop(held);
}

/// How long to hold a copy: its step, unless it was taken back from forwarders twice already
/// (its delivery count, on a quorum queue) or at all (on a classic queue, which does not
/// count): it then goes at once. A broker whose consumer timeout is shorter than the step
/// takes back every copy held for it; without this, such a copy would be held and taken back
/// forever.
fn hold_for(delivery_count: Option<u32>, redelivered: bool, step: Duration) -> Duration {
    let taken_back_enough = match delivery_count {
        Some(count) => count >= 2,
        None => redelivered,
    };
    if taken_back_enough {
        Duration::ZERO
    } else {
        step
    }
}

async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Publishes `copy` back to its queue, then acks it (see the module docs).
async fn forward(copy: Delivery) -> Result<(), TransportError> {
    let message = copy.message.clone();
    copy.retry(message, 0).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_is_held_for_its_step_until_taken_back_twice() {
        let step = Duration::from_secs(5);
        // Quorum queues count what the broker took back.
        assert_eq!(hold_for(Some(0), false, step), step);
        assert_eq!(hold_for(Some(1), true, step), step);
        assert_eq!(hold_for(Some(2), true, step), Duration::ZERO);
        assert_eq!(hold_for(Some(u32::MAX), true, step), Duration::ZERO);
        // Classic queues only say it came before.
        assert_eq!(hold_for(None, false, step), step);
        assert_eq!(hold_for(None, true, step), Duration::ZERO);
    }
}
