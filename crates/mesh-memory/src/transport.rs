//! [`MemoryTransport`]: one connection to a [`MemoryBroker`], implementing mesh's
//! transport seam.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use mesh_core::naming::{self, DEAD_EXCHANGE, EVENTS_EXCHANGE, RETIRED_DEAD_QUEUE, RPC_EXCHANGE};
use mesh_core::transport::{
    BoxFuture, Confirm, DeadQueue, Delivery, Health, PublishOptions, QueueSpec, ServeSpec,
    Subscription, SubscriptionSpec, Target, Transport, TransportError, TransportErrorKind,
};
use mesh_core::{ToolKey, WireMessage};
use tokio::sync::{mpsc, oneshot};
use tracing::debug;

use crate::broker::MemoryBroker;
use crate::state::{ConnectionId, Consumer, Fault};

// Here, not in `broker`: the broker does not depend on the transport built on it.
impl MemoryBroker {
    /// A new connection to this broker.
    pub fn transport(&self) -> MemoryTransport {
        let connection = self.with(|state, _| state.open_connection());
        MemoryTransport {
            broker: self.clone(),
            connection,
        }
    }
}

/// The channel capacity of a consumer without a prefetch limit (prefetch 0, which AMQP
/// reads as unlimited, or automatic acks, where AMQP ignores the prefetch): the broker
/// keeps the rest ready in the queue until the subscriber takes deliveries out.
const UNLIMITED_CHANNEL: usize = 1024;

/// One connection to a [`MemoryBroker`]; clones share the connection.
///
/// Publishes are confirmed at once: the returned [`Confirm`] is already resolved, to an
/// [`Unroutable`](TransportErrorKind::Unroutable) error for a mandatory message no queue
/// took (`publish` itself fails only once the transport is closed).
///
/// [`close`](Transport::close) ends its subscriptions, puts every delivery it has not
/// settled back at the front of its queue (redelivered), deletes its ephemeral and reply
/// queues and fails its waiting calls with [`Closed`](TransportErrorKind::Closed). Deliveries
/// a subscription had buffered but not yet returned are still returned by
/// [`Subscription::next`] before it ends (the channel cannot be emptied from the broker's
/// side); like every delivery of a closed connection they were requeued already, and
/// settling them fails with [`ConnectionLost`](TransportErrorKind::ConnectionLost) without
/// touching the broker. Dropping every handle does not close the connection.
///
/// A prefetch of 0 means unlimited, as in AMQP; ephemeral subscriptions (automatic acks)
/// ignore the prefetch for settling, as AMQP does, and use it only as the size of their
/// channel.
#[derive(Clone)]
pub struct MemoryTransport {
    broker: MemoryBroker,
    connection: ConnectionId,
}

impl MemoryTransport {
    /// The broker this transport is connected to.
    pub fn broker(&self) -> &MemoryBroker {
        &self.broker
    }

    /// Replies that reached this connection's reply queue after their call timed out or
    /// gave up, or a second time for one call; they are dropped.
    pub fn late_replies(&self) -> u64 {
        self.broker
            .with(|state, _| state.late_replies(self.connection))
    }

    /// Declares the subscription's queue, binds it and attaches a consumer.
    fn attach(
        &self,
        spec: &SubscriptionSpec,
        tx: mpsc::Sender<Delivery>,
        cancel: oneshot::Receiver<()>,
    ) -> Result<String, Fault> {
        let connection = self.connection;
        let patterns: BTreeSet<String> = spec.patterns.iter().map(|p| p.to_string()).collect();
        let retry_delays: Arc<[Duration]> = spec.retry_delays.clone().into();
        self.broker.with(|state, fx| {
            state.ensure_open(connection)?;
            let (queue, auto_ack) = match &spec.queue {
                QueueSpec::Durable { name } => {
                    state.declare_durable(name)?;
                    state.set_bindings(EVENTS_EXCHANGE, name, &patterns);
                    (name.clone(), false)
                }
                QueueSpec::Ephemeral => {
                    let name = state.declare_ephemeral(connection);
                    state.set_bindings(EVENTS_EXCHANGE, &name, &patterns);
                    (name, true)
                }
                QueueSpec::DeadLetters(DeadQueue::Durable { name }) => {
                    state.declare_durable(name)?;
                    state.set_bindings(DEAD_EXCHANGE, name, &every());
                    (name.clone(), false)
                }
                QueueSpec::DeadLetters(DeadQueue::Tap) => {
                    let name = state.declare_ephemeral(connection);
                    // The queue names it asks for (a module's tap: its own), else all.
                    let patterns = if patterns.is_empty() {
                        every()
                    } else {
                        patterns.clone()
                    };
                    state.set_bindings(DEAD_EXCHANGE, &name, &patterns);
                    (name, true)
                }
                QueueSpec::DeadLetters(DeadQueue::Retired) => {
                    if !state.has_queue(RETIRED_DEAD_QUEUE) {
                        return Err(Fault::QueueGone(RETIRED_DEAD_QUEUE.to_owned()));
                    }
                    (RETIRED_DEAD_QUEUE.to_owned(), false)
                }
            };
            let limit = match (auto_ack, spec.prefetch) {
                (true, _) | (false, 0) => None,
                (false, prefetch) => Some(usize::from(prefetch)),
            };
            let consumer = Consumer::new(connection, tx, cancel, limit, auto_ack, retry_delays);
            state.add_consumer(&queue, consumer, fx);
            Ok(queue)
        })
    }
}

/// The one pattern of a queue of dead letters.
fn every() -> BTreeSet<String> {
    BTreeSet::from(["#".to_owned()])
}

/// The channel of a subscription: as large as its prefetch, since a consumer never holds
/// more unsettled deliveries than that.
fn channel(prefetch: u16) -> (mpsc::Sender<Delivery>, mpsc::Receiver<Delivery>) {
    match prefetch {
        0 => mpsc::channel(UNLIMITED_CHANNEL),
        n => mpsc::channel(usize::from(n)),
    }
}

/// Forgets a call when its future ends, however it ends, so a reply arriving afterwards
/// counts as late.
struct PendingCall<'a> {
    broker: &'a MemoryBroker,
    connection: ConnectionId,
    correlation: &'a str,
}

impl Drop for PendingCall<'_> {
    fn drop(&mut self) {
        self.broker
            .with(|state, fx| state.forget_call(self.connection, self.correlation, fx));
    }
}

impl Transport for MemoryTransport {
    fn publish(
        &self,
        message: WireMessage,
        options: PublishOptions,
    ) -> BoxFuture<'_, Result<Confirm, TransportError>> {
        Box::pin(async move {
            let connection = self.connection;
            let routed = self.broker.with(|state, fx| {
                state.ensure_open(connection)?;
                Ok::<_, Fault>(match &options.target {
                    Target::Events => state.publish(EVENTS_EXCHANGE, &message, fx),
                    // `mesh.retry` binds each queue on its own name alone.
                    Target::Queue(queue) | Target::Retry(queue) => {
                        usize::from(state.enqueue(queue, message, fx))
                    }
                })
            })?;
            if routed == 0 && options.mandatory {
                debug!(target = ?options.target, "mandatory message returned unroutable");
                return Ok(Confirm::ready(Err(TransportError::new(
                    TransportErrorKind::Unroutable,
                    "no queue took the message",
                ))));
            }
            Ok(Confirm::ready(Ok(())))
        })
    }

    fn subscribe(
        &self,
        spec: SubscriptionSpec,
    ) -> BoxFuture<'_, Result<Subscription, TransportError>> {
        Box::pin(async move {
            let (tx, rx) = channel(spec.prefetch);
            let (cancel_tx, cancel_rx) = oneshot::channel();
            let queue = self.attach(&spec, tx, cancel_rx)?;
            Ok(Subscription::new(queue, rx, cancel_tx))
        })
    }

    fn call(
        &self,
        tool: &ToolKey,
        request: WireMessage,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<WireMessage, TransportError>> {
        let tool = tool.as_str().to_owned();
        Box::pin(async move {
            let connection = self.connection;
            let correlation = uuid::Uuid::new_v4().to_string();
            let (reply_tx, mut reply_rx) = oneshot::channel();
            self.broker.with(|state, fx| {
                state.send_request(
                    connection,
                    &tool,
                    request,
                    &correlation,
                    timeout,
                    reply_tx,
                    fx,
                )
            })?;
            let pending = PendingCall {
                broker: &self.broker,
                connection,
                correlation: &correlation,
            };
            // A slow reply: is anything consuming the tool's queue at all?
            let started = tokio::time::Instant::now();
            let check_after = timeout.min(mesh_core::NO_SERVER_CHECK);
            if let Ok(reply) = tokio::time::timeout(check_after, &mut reply_rx).await {
                return reply.map_err(|_| closed_while_waiting());
            }
            if check_after < timeout {
                let unserved = self
                    .broker
                    .with(|state, _| match state.tool_consumers(&tool) {
                        None => Some(Fault::NoServer(tool.clone())),
                        Some(0) => Some(Fault::NotConsumed(tool.clone())),
                        Some(_) => None,
                    });
                if let Some(fault) = unserved {
                    drop(pending);
                    // A reply handed over before the call was forgotten still counts.
                    return reply_rx.try_recv().map_err(|_| fault.into());
                }
            }
            let left = timeout.saturating_sub(started.elapsed());
            match tokio::time::timeout(left, &mut reply_rx).await {
                Ok(Ok(reply)) => Ok(reply),
                Ok(Err(_)) => Err(closed_while_waiting()),
                Err(_) => {
                    // Forget the call first: from now on a reply is late. One handed over
                    // before that still counts.
                    drop(pending);
                    reply_rx.try_recv().map_err(|_| {
                        debug!(tool = %tool, "call timed out");
                        TransportError::new(
                            TransportErrorKind::Timeout,
                            format!("no reply from `{tool}` within {timeout:?}"),
                        )
                    })
                }
            }
        })
    }

    fn serve(&self, spec: ServeSpec) -> BoxFuture<'_, Result<Subscription, TransportError>> {
        Box::pin(async move {
            let connection = self.connection;
            let queue = naming::serve_queue(&spec.tool);
            let key = BTreeSet::from([spec.tool.as_str().to_owned()]);
            let (tx, rx) = channel(spec.prefetch);
            let (cancel_tx, cancel_rx) = oneshot::channel();
            let limit = (spec.prefetch > 0).then_some(usize::from(spec.prefetch));
            self.broker.with(|state, fx| {
                state.ensure_open(connection)?;
                state.declare_durable(&queue)?;
                state.set_bindings(RPC_EXCHANGE, &queue, &key);
                let consumer = Consumer::new(connection, tx, cancel_rx, limit, false, Arc::new([]));
                state.add_consumer(&queue, consumer, fx);
                Ok::<_, Fault>(())
            })?;
            Ok(Subscription::new(queue, rx, cancel_tx))
        })
    }

    fn health(&self) -> Health {
        self.broker.with(|state, _| {
            let consumers = state.consumers_of(self.connection);
            Health {
                connected: state.is_open(self.connection),
                blocked: false,
                consumers_expected: consumers,
                consumers_attached: consumers,
            }
        })
    }

    /// A publish is settled as it is accepted here: nothing is ever waiting.
    fn flush(&self) -> BoxFuture<'_, ()> {
        Box::pin(std::future::ready(()))
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.broker
                .with(|state, fx| state.close(self.connection, fx));
        })
    }
}

impl fmt::Debug for MemoryTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryTransport")
            .field("connection", &self.connection)
            .finish_non_exhaustive()
    }
}

fn closed_while_waiting() -> TransportError {
    TransportError::new(
        TransportErrorKind::Closed,
        "the transport closed while the call waited for its reply",
    )
}
