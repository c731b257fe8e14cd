//! The consumer loop: each delivery of a module's queue is decoded, handed to the matching
//! handlers, and settled by their outcome — ack, a counted retry down the ladder, or a
//! dead letter with its reason.
//!
//! This is where the delivery guarantees are decided, once, for every transport: a
//! delivery is acked only after every matching handler succeeded; a delivery that is never
//! settled (the task died, the bus was closed) is released back to its queue by the
//! transport.

use mesh_core::text::EscapedDisplay;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use mesh_core::codec::{self, DeadLetterNote, DeadReason};
use mesh_core::{AckFailed, Delivery, RetryPolicy, Subscription, Timestamp};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn, Instrument, Span};

use crate::handler::{failure, outcome, HandlerCall, HandlerEntry, Outcome, ParsedBody};
use crate::incoming::Meta;
use crate::layer::{self, Failed, HandlerService, Kind, Stack};
use crate::telemetry::propagation;
use crate::telemetry::record::{self, Queue};

/// What a consumer loop needs.
pub(crate) struct Dispatcher {
    pub(crate) handlers: Vec<HandlerEntry>,
    /// With identity enforced, the prefix of the access plan's user names.
    pub(crate) enforce_identity: Option<String>,
    pub(crate) retry: RetryPolicy,
    /// The queue, as the label of its metrics.
    pub(crate) queue: Queue,
    /// Which unmatched keys were logged lately.
    pub(crate) unmatched: Mutex<UnmatchedLog>,
    /// Hears of an ack that could not be sent ([`ack_failed`]).
    pub(crate) ack_failed: AckFailed,
}

/// What a consumer loop does with an ack the transport could not send: counts it and warns
/// (the event is delivered again). Called on the transport's task, after the handler's
/// future is gone: acks are handed on, not waited for.
pub(crate) fn ack_failed(queue: Queue) -> AckFailed {
    Arc::new(move |error| {
        record::settle_failed(&queue, "ack");
        warn!(
            queue = %EscapedDisplay(&queue.value()),
            error = %EscapedDisplay(&error),
            "ack failed, the event will be redelivered"
        );
    })
}

/// How often an unmatched key is logged at most.
const UNMATCHED_LOG_EVERY: Duration = Duration::from_secs(60);
/// How many keys [`UnmatchedLog`] remembers: its memory is bounded whatever the traffic.
const UNMATCHED_KEYS: usize = 1024;

/// Rate limiting of the "no handler matches" warning: once per key per
/// [`UNMATCHED_LOG_EVERY`], for at most [`UNMATCHED_KEYS`] keys at a time; beyond them,
/// one warning per period says more keys went unlogged (the counter counts them all).
#[derive(Debug, Default)]
pub(crate) struct UnmatchedLog {
    logged: HashMap<String, Instant>,
    overflow_logged: Option<Instant>,
}

/// Whether to log an unmatched event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Log it: its key was not logged within the period.
    Log,
    /// Log that keys go unlogged: the set of keys is full.
    Overflow,
    /// Stay quiet.
    Quiet,
}

impl UnmatchedLog {
    pub(crate) fn check(&mut self, key: &str, now: Instant) -> Verdict {
        let fresh = |at: &Instant| now.saturating_duration_since(*at) < UNMATCHED_LOG_EVERY;
        if let Some(at) = self.logged.get_mut(key) {
            if fresh(at) {
                return Verdict::Quiet;
            }
            *at = now;
            return Verdict::Log;
        }
        if self.logged.len() >= UNMATCHED_KEYS {
            self.logged.retain(|_, at| fresh(at));
        }
        if self.logged.len() < UNMATCHED_KEYS {
            self.logged.insert(key.to_owned(), now);
            return Verdict::Log;
        }
        if self.overflow_logged.as_ref().is_some_and(fresh) {
            return Verdict::Quiet;
        }
        self.overflow_logged = Some(now);
        Verdict::Overflow
    }
}

impl Dispatcher {
    /// Consumes `subscription` until `stop` fires. Handlers run here, on this task,
    /// concurrently up to the prefetch (the subscription holds no more): no task per
    /// delivery. On `stop`, deliveries not yet started are released and those started are
    /// finished and settled before this returns.
    pub(crate) async fn run(
        self: Arc<Self>,
        mut subscription: Subscription,
        stop: CancellationToken,
    ) {
        let mut running = FuturesUnordered::new();
        // Made once, not at every turn: a fresh one would register with the token (under
        // its lock) and unregister again for every delivery.
        let stopped = stop.cancelled();
        tokio::pin!(stopped);
        let mut open = true;
        while open {
            tokio::select! {
                biased;
                () = &mut stopped => break,
                Some(()) = running.next(), if !running.is_empty() => {}
                delivery = subscription.next() => match delivery {
                    Some(delivery) => running.push(self.handle(delivery)),
                    None => open = false,
                },
            }
        }
        // Stop new deliveries; those already buffered are released back to the queue as
        // they drop with the subscription.
        subscription.cancel();
        while running.next().await.is_some() {}
        debug!(queue = subscription.queue(), "consumer stopped");
    }

    /// Handles one delivery: what becomes of it is decided here, at once ([`Plan`]); the
    /// future returned runs its handlers and settles it.
    ///
    /// The future is kept small (it is allocated for every delivery, and past about a
    /// kilobyte an allocation leaves the allocator's fast path): the decoding and matching
    /// happen before it, and it holds the delivery once, as captured, never moved into a
    /// local across an await.
    pub(crate) fn handle(
        &self,
        delivery: Delivery,
    ) -> impl std::future::Future<Output = ()> + Send + '_ {
        let plan = self.plan(&delivery);
        async move {
            // Matched by reference: bindings by value would be copies the future holds
            // beside the plan.
            match &plan {
                Plan::Reject {
                    reason,
                    attempt,
                    error,
                } => {
                    // Boxed, as every path but the ack: the future of each delivery stays
                    // small.
                    let dead = self.dead_letter(delivery, *reason, *attempt, error.clone());
                    Box::pin(dead).await;
                }
                Plan::Unmatched(span) => {
                    span.record("outcome", "unmatched");
                    self.settle_ack(delivery).await;
                }
                Plan::Run(run) => {
                    let started = Instant::now();
                    let outcome = crate::causation::scope(run.meta.id(), run.call())
                        .instrument(run.span.clone())
                        .await;
                    record::handled(
                        &self.queue,
                        started.elapsed(),
                        !matches!(outcome, Outcome::Done),
                    );
                    // The settling is awaited inside the span, never across a held guard.
                    if let Outcome::Done = outcome {
                        run.span.record("outcome", "ack");
                        self.settle_ack(delivery).instrument(run.span.clone()).await;
                    } else {
                        // Boxed: the common path's future does not carry the publish of a
                        // copy.
                        let failure =
                            self.settle_failure(delivery, outcome, run.meta.attempt(), &run.span);
                        Box::pin(failure.instrument(run.span.clone())).await;
                    }
                }
            }
        }
    }

    /// Decodes a delivery and finds its handlers: what is to become of it.
    fn plan(&self, delivery: &Delivery) -> Plan<'_> {
        let failed_before = codec::attempts(&delivery.message);
        let attempt = failed_before.saturating_add(1);
        let decoded =
            codec::decode(&delivery.message).and_then(|envelope| match &self.enforce_identity {
                Some(prefix) => {
                    codec::check_user(&envelope.key, &delivery.message, prefix).map(|()| envelope)
                }
                None => Ok(envelope),
            });
        let envelope = match decoded {
            Ok(envelope) => envelope,
            Err(error) => {
                // Never handled, never acked silently: dead-lettered with the reason
                // (`undecodable`, or `forged-source` for a well-formed event whose
                // `x-source`, or with identity enforced whose validated user, is not the
                // owner of its key).
                let reason = error.dead_reason();
                warn!(
                    queue = %EscapedDisplay(&delivery.queue),
                    key = %codec::quote(&delivery.message.routing_key),
                    field = error.field(),
                    reason = %EscapedDisplay(&reason),
                    error = %EscapedDisplay(&error),
                    "event dead-lettered, it breaks the contract"
                );
                return Plan::Reject {
                    reason,
                    attempt,
                    error: error.to_string(),
                };
            }
        };
        let span = tracing::info_span!(
            "mesh.handle",
            otel.kind = "consumer",
            key = %EscapedDisplay(&envelope.key),
            id = %envelope.id,
            causation_id = envelope.causation_id.as_deref(),
            attempt,
            queue = %EscapedDisplay(&delivery.queue),
            outcome = tracing::field::Empty,
        );
        // Before anything enters the span: the emitter's span becomes its parent.
        propagation::set_parent(&span, &envelope.extra_headers);
        record::delivered(&self.queue, envelope.time, attempt);
        let key = envelope.key.as_str();
        // Most queues have one handler for a key: found without a vector of matches.
        let Some(first) = self.handlers.iter().position(|h| h.matches(key)) else {
            // A binding left over from an earlier deploy (or one the broker would not let
            // us remove), or an event sent straight to this queue, still arrives here:
            // nobody here wants it, and no retry or dead letter would change that (the
            // dead-letter store would fill with events nobody failed on), so it is acked —
            // counted, and logged once per key per minute so it stays visible.
            record::unmatched(&self.queue);
            let now = Instant::now();
            let verdict = match self.unmatched.lock() {
                Ok(mut log) => log.check(envelope.key.as_str(), now),
                Err(_) => Verdict::Quiet,
            };
            match verdict {
                Verdict::Log => warn!(
                    parent: &span,
                    "no handler matches the event; acked (logged once per key per minute)"
                ),
                Verdict::Overflow => warn!(
                    parent: &span,
                    "no handler matches the event; acked (too many distinct unmatched keys \
                     to log each: see mesh_unmatched_total)"
                ),
                Verdict::Quiet => {}
            }
            return Plan::Unmatched(span);
        };
        let handler = &self.handlers[first];
        // With validation on, a body is checked against each handler's schema before that
        // handler deserializes it (parsed once for all of them).
        let mut parsed = ParsedBody::default();
        let refusal = handler.refusal(&envelope, &mut parsed);
        // Other handlers matching the key too (collected only when there are some).
        let others: Vec<(&HandlerEntry, Option<String>)> = self.handlers[first + 1..]
            .iter()
            .filter(|h| h.matches(key))
            .map(|h| (h, h.refusal(&envelope, &mut parsed)))
            .collect();
        Plan::Run(Run {
            span,
            handler,
            refusal,
            others,
            meta: Meta::new(Arc::new(envelope), attempt, delivery.redelivered),
        })
    }

    /// Settles a delivery whose handlers failed: a retry down the ladder, or a dead letter.
    async fn settle_failure(
        &self,
        delivery: Delivery,
        outcome: Outcome,
        attempt: u32,
        span: &Span,
    ) {
        match outcome {
            Outcome::Done => self.settle_ack(delivery).await,
            Outcome::Release(why) => {
                // Not counted: the attempt never ran. The broker delivers it again.
                span.record("outcome", "release");
                debug!(reason = %EscapedDisplay(&why), "a layer refused the event; released");
                delivery.release();
            }
            Outcome::GiveUp(reason, error) => {
                span.record("outcome", "dead-letter");
                warn!(reason = %EscapedDisplay(&reason), error = %EscapedDisplay(&error), "event dead-lettered");
                self.dead_letter(delivery, reason, attempt, error).await;
            }
            Outcome::Retry(error) => match self.retry.next_step(attempt) {
                Some(step) => {
                    span.record("outcome", "retry");
                    debug!(step, error = %EscapedDisplay(&error), "handler failed, retrying");
                    let mut copy = delivery.message.clone();
                    codec::set_attempts(&mut copy, attempt);
                    codec::hand_over_user(&mut copy);
                    match delivery.retry(copy, step).await {
                        Ok(()) => record::retried(&self.queue),
                        Err(e) => {
                            record::settle_failed(&self.queue, "retry");
                            // Not acked: the broker redelivers the original.
                            warn!(
                                error = %EscapedDisplay(&e),
                                "retry could not be scheduled, the event will be redelivered"
                            );
                        }
                    }
                }
                None => {
                    span.record("outcome", "dead-letter");
                    warn!(attempts = attempt, error = %EscapedDisplay(&error), "event dead-lettered: no attempts left");
                    self.dead_letter(delivery, DeadReason::MaxAttempts, attempt, error)
                        .await;
                }
            },
        }
    }
}

/// What becomes of a delivery, decided before any handler runs.
enum Plan<'a> {
    /// It breaks the contract: dead-lettered with the reason.
    Reject {
        reason: DeadReason,
        attempt: u32,
        error: String,
    },
    /// No handler here wants it: acked (in its span).
    Unmatched(Span),
    /// Its handlers run.
    Run(Run<'a>),
}

/// The handlers a delivery goes to, and what they are given.
struct Run<'a> {
    span: Span,
    /// The first handler matching its key.
    handler: &'a HandlerEntry,
    /// Why the first handler's schema refused the body, if it did.
    refusal: Option<String>,
    /// The other handlers matching its key, each with its schema's refusal.
    others: Vec<(&'a HandlerEntry, Option<String>)>,
    /// The event and its attempt, as the handlers are given them.
    meta: Meta,
}

impl Run<'_> {
    /// Calls every handler; the worst of their outcomes.
    async fn call(&self) -> Outcome {
        if self.others.is_empty() {
            return checked_call(self.handler, self.refusal.as_deref(), self.meta.clone()).await;
        }
        let calls = std::iter::once((self.handler, self.refusal.as_deref()))
            .chain(
                self.others
                    .iter()
                    .map(|(h, refusal)| (*h, refusal.as_deref())),
            )
            .map(|(h, refusal)| checked_call(h, refusal, self.meta.clone()));
        let mut worst = Outcome::Done;
        for outcome in futures::future::join_all(calls).await {
            worst = worse(worst, outcome);
        }
        worst
    }
}

/// Calls one handler unless its schema refused the body (dead-lettered `schema-invalid`,
/// the validation error kept).
async fn checked_call(handler: &HandlerEntry, refusal: Option<&str>, meta: Meta) -> Outcome {
    match refusal {
        Some(error) => Outcome::GiveUp(DeadReason::SchemaInvalid, error.to_owned()),
        None => call(handler, meta).await,
    }
}

/// Calls one handler, turning a panic into a retryable failure.
async fn call(handler: &HandlerEntry, meta: Meta) -> Outcome {
    let call = match &handler.call {
        HandlerCall::Plain(call) => call(meta),
        // Boxed: the future of a delivery without layers does not carry the layered call.
        HandlerCall::Layered(stack) => return Box::pin(layered(stack, meta)).await,
    };
    match AssertUnwindSafe(call).catch_unwind().await {
        Ok(result) => outcome(result),
        Err(panic) => panicked(&*panic),
    }
}

/// Calls a handler in its layers: waits for the stack to be ready, calls it, and reads what
/// its result means (see `crate::layer`).
async fn layered(stack: &Stack<HandlerService>, meta: Meta) -> Outcome {
    match AssertUnwindSafe(stack.call(meta)).catch_unwind().await {
        Ok(Ok(())) => Outcome::Done,
        Ok(Err(Failed::NotReady(e))) => {
            Outcome::Release(format!("a layer was not ready: {}", layer::chain(&e)))
        }
        Ok(Err(Failed::Error(e))) => match layer::kind(&e) {
            Kind::Handler(error) => failure(error),
            Kind::TimedOut => Outcome::Retry(format!(
                "the handler timed out (a timeout layer): {}",
                layer::chain(&e)
            )),
            Kind::Overloaded => {
                Outcome::Release(format!("a layer shed the load: {}", layer::chain(&e)))
            }
            Kind::Remote(_) | Kind::Other => Outcome::Retry(layer::chain(&e)),
        },
        Err(panic) => panicked(&*panic),
    }
}

/// A handler's (or a layer's) panic: a retryable failure.
fn panicked(panic: &(dyn std::any::Any + Send)) -> Outcome {
    let text = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a handler panicked".to_owned());
    Outcome::Retry(format!("handler panicked: {text}"))
}

/// A permanent failure outweighs a retryable one, which outweighs a refusal (a release),
/// which outweighs success.
fn worse(a: Outcome, b: Outcome) -> Outcome {
    match (a, b) {
        (g @ Outcome::GiveUp(..), _) | (_, g @ Outcome::GiveUp(..)) => g,
        (r @ Outcome::Retry(_), _) | (_, r @ Outcome::Retry(_)) => r,
        (r @ Outcome::Release(_), _) | (_, r @ Outcome::Release(_)) => r,
        _ => Outcome::Done,
    }
}

impl Dispatcher {
    /// Acks: handed on to the transport, which reports a failure to
    /// [`Dispatcher::ack_failed`]; the delivery's future does not wait for the frame.
    fn settle_ack(&self, delivery: Delivery) -> impl std::future::Future<Output = ()> {
        delivery.ack_detached(self.ack_failed.clone())
    }

    async fn dead_letter(
        &self,
        delivery: Delivery,
        reason: DeadReason,
        attempts: u32,
        error: String,
    ) {
        let mut copy = delivery.message.clone();
        codec::mark_dead(
            &mut copy,
            &DeadLetterNote {
                reason,
                attempts,
                last_error: Some(error),
                queue: delivery.queue.clone(),
                time: Timestamp::now(),
            },
        );
        match delivery.dead_letter(copy).await {
            Ok(()) => record::dead_lettered(&self.queue, reason),
            Err(e) => {
                record::settle_failed(&self.queue, "dead-letter");
                warn!(error = %EscapedDisplay(&e), "dead-lettering failed, the event will be redelivered");
            }
        }
    }
}

#[cfg(test)]
#[path = "layer_tests.rs"]
mod layer_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future made for a delivery, whatever its closure's lifetime.
    fn future_size<'a, F: std::future::Future>(_: fn(&'a Dispatcher, Delivery) -> F) -> usize {
        std::mem::size_of::<F>()
    }

    #[test]
    fn the_future_of_a_delivery_stays_small() {
        // One is allocated per delivery; past about a kilobyte an allocation leaves the
        // allocator's fast path (it was 1,648 bytes, the delivery held three times).
        let size = future_size(Dispatcher::handle);
        assert!(size <= 900, "the future of a delivery is {size} bytes");
    }

    #[test]
    fn an_unmatched_key_is_logged_once_per_period() {
        let mut log = UnmatchedLog::default();
        let start = Instant::now();
        assert_eq!(log.check("module.a.x", start), Verdict::Log);
        assert_eq!(log.check("module.a.x", start), Verdict::Quiet);
        assert_eq!(log.check("module.b.x", start), Verdict::Log);
        let later = start + UNMATCHED_LOG_EVERY - Duration::from_millis(1);
        assert_eq!(log.check("module.a.x", later), Verdict::Quiet);
        let after = start + UNMATCHED_LOG_EVERY;
        assert_eq!(log.check("module.a.x", after), Verdict::Log);
        assert_eq!(log.check("module.a.x", after), Verdict::Quiet);
    }

    #[test]
    fn the_set_of_logged_keys_is_bounded() {
        let mut log = UnmatchedLog::default();
        let start = Instant::now();
        for i in 0..UNMATCHED_KEYS {
            assert_eq!(log.check(&format!("module.a.k{i}"), start), Verdict::Log);
        }
        // Full of fresh keys: a new key is not remembered, one overflow warning per period.
        assert_eq!(log.check("module.a.new", start), Verdict::Overflow);
        assert_eq!(log.check("module.a.other", start), Verdict::Quiet);
        assert_eq!(log.logged.len(), UNMATCHED_KEYS);
        // Once the old keys expired, they make room.
        let after = start + UNMATCHED_LOG_EVERY;
        assert_eq!(log.check("module.a.new", after), Verdict::Log);
        assert_eq!(log.logged.len(), 1);
    }
}
