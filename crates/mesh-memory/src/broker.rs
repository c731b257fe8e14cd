//! The shared in-process broker: the state behind its lock, the performer of the effects
//! its transitions return, and the inspection methods.

use mesh_core::text::EscapedDisplay;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use mesh_core::transport::{Acker, Delivery};
use tokio::time::Instant;
use tracing::debug;

use crate::acker::{AutoAcker, MemoryAcker, Settle};
use crate::state::{
    ConnectionId, DelayedCopy, Discarded, Effect, Effects, Fault, Handout, RoomWaiter, Settlement,
    State, Ticket,
};

/// What every handle onto one broker shares.
#[derive(Debug)]
pub(crate) struct BrokerShared {
    state: Mutex<State>,
    /// Taken before the state's lock is released and held while the effects of that
    /// transition are performed, so effects are performed in the order of the transitions
    /// that returned them (a consumer's channel receives deliveries in the order the state
    /// handed them out). Performing never takes the state's lock, nor drops anything that
    /// would.
    order: Mutex<()>,
}

/// What is left once effects were performed, to do after the ordering lock is released:
/// values whose drop may take the broker's lock again, and follow-up transitions.
#[derive(Default)]
struct Aftermath {
    discarded: Vec<Discarded>,
    late_replies: Vec<ConnectionId>,
    abandoned_waits: Vec<(String, u64)>,
    returned_now: Vec<DelayedCopy>,
}

impl BrokerShared {
    /// Runs the transition `f` under the state's lock, after sweeping ended consumers, and
    /// performs the effects it returned once the lock is released.
    fn with<R>(self: &Arc<Self>, f: impl FnOnce(&mut State, &mut Effects) -> R) -> R {
        let mut fx = Effects::default();
        let mut state = lock(&self.state);
        state.set_clock(Instant::now());
        state.sweep(&mut fx);
        let result = f(&mut state, &mut fx);
        let order = lock(&self.order);
        drop(state);
        let aftermath = self.perform(fx);
        drop(order);
        self.finish(aftermath);
        result
    }

    /// Performs effects in order. Takes no lock and drops nothing that would take one.
    fn perform(self: &Arc<Self>, fx: Effects) -> Aftermath {
        let mut aftermath = Aftermath::default();
        for effect in fx.into_vec() {
            match effect {
                Effect::Deliver(handout) => {
                    let sender = self.deliver(handout);
                    aftermath.discarded.push(Discarded::Channel(sender));
                }
                Effect::Delay(copy) => match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => {
                        runtime.spawn(run_delayed(copy, Arc::downgrade(self)));
                    }
                    Err(_) => aftermath.returned_now.push(copy),
                },
                Effect::AwaitRoom(waiter) => match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => {
                        runtime.spawn(await_room(waiter, Arc::downgrade(self)));
                    }
                    Err(_) => aftermath
                        .abandoned_waits
                        .push((waiter.queue, waiter.consumer)),
                },
                Effect::Answer {
                    connection,
                    call,
                    reply,
                } => {
                    if call.send(reply).is_err() {
                        aftermath.late_replies.push(connection);
                    }
                }
                Effect::Discard(discarded) => aftermath.discarded.push(discarded),
            }
        }
        aftermath
    }

    /// Builds the delivery of a handout, with its acker, and sends it on the slot the state
    /// reserved; returns the channel's sender, to drop outside every lock.
    fn deliver(self: &Arc<Self>, handout: Handout) -> tokio::sync::mpsc::Sender<Delivery> {
        let acker: Box<dyn Acker> = match handout.ticket {
            Some(ticket) => {
                let broker: Weak<BrokerShared> = Arc::downgrade(self);
                Box::new(MemoryAcker::new(broker, ticket))
            }
            None => Box::new(AutoAcker),
        };
        let delivery = Delivery::new(
            handout.message,
            handout.redelivered,
            Some(handout.delivery_count),
            handout.queue,
            acker,
        );
        handout.permit.send(delivery)
    }

    /// Drops what the effects left and runs their follow-up transitions.
    fn finish(self: &Arc<Self>, aftermath: Aftermath) {
        let Aftermath {
            discarded,
            late_replies,
            abandoned_waits,
            returned_now,
        } = aftermath;
        drop(discarded);
        if late_replies.is_empty() && abandoned_waits.is_empty() && returned_now.is_empty() {
            return;
        }
        self.with(|state, fx| {
            for connection in late_replies {
                state.late_reply(connection);
            }
            for (queue, consumer) in abandoned_waits {
                state.room_wait_ended(&queue, consumer);
            }
            for copy in returned_now {
                debug!(queue = %EscapedDisplay(&copy.queue), "no runtime for the retry timer, copy returned now");
                state.return_delayed(&copy.queue, copy.copy, fx);
            }
        });
    }
}

impl Settle for BrokerShared {
    fn settle(self: Arc<Self>, ticket: &Ticket, settlement: Settlement) -> Result<(), Fault> {
        self.with(|state, fx| {
            state.settle(&ticket.queue, ticket.tag, ticket.connection, settlement, fx)
        })
    }
}

/// The timer of a copy on the retry ladder. Holds the broker weakly, so a broker dropped
/// meanwhile takes its delayed copies with it.
async fn run_delayed(copy: DelayedCopy, broker: Weak<BrokerShared>) {
    tokio::time::sleep(copy.delay).await;
    if let Some(broker) = broker.upgrade() {
        broker.with(|state, fx| state.return_delayed(&copy.queue, copy.copy, fx));
    }
}

/// Waits until a consumer's subscriber took a delivery out of its full channel (or went
/// away), then lets the state dispatch again.
async fn await_room(waiter: RoomWaiter, broker: Weak<BrokerShared>) {
    let RoomWaiter {
        queue,
        consumer,
        tx,
    } = waiter;
    // The permit is given back at once: the dispatch that follows uses it.
    drop(tx.reserve().await);
    drop(tx);
    if let Some(broker) = broker.upgrade() {
        broker.with(|state, fx| state.room_freed(&queue, consumer, fx));
    }
}

/// Locks a mutex. The state stays consistent between statements that can panic, so a
/// poisoned lock is still usable.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// An in-process broker with RabbitMQ's semantics for what mesh uses: the topic exchanges
/// `mesh.events`, `mesh.rpc` and `mesh.events.dead`, durable, exclusive and reply queues,
/// competing consumers with a prefetch, acks and requeues, per-message expiration.
///
/// A cheap handle: clones share one broker. Each [`transport`](MemoryBroker::transport) is
/// a new connection to it, so several buses (nodes, modules) can share one broker the way
/// they share a RabbitMQ.
///
/// At start it holds the three exchanges and no queue: every reader of dead letters binds a
/// queue of its own to `mesh.events.dead` (the retired `mesh.dead-letters` of older versions
/// never exists here: no older mesh ran on this broker).
#[derive(Clone)]
pub struct MemoryBroker {
    shared: Arc<BrokerShared>,
}

impl MemoryBroker {
    /// A new, empty broker.
    pub fn new() -> MemoryBroker {
        MemoryBroker {
            shared: Arc::new(BrokerShared {
                state: Mutex::new(State::new()),
                order: Mutex::new(()),
            }),
        }
    }

    /// The names of every queue, sorted (server-named queues included).
    pub fn queue_names(&self) -> Vec<String> {
        self.with(|state, _| state.queue_names())
    }

    /// The messages ready in a queue (not handed out, not expired); `None` if there is no
    /// such queue.
    pub fn queue_depth(&self, name: &str) -> Option<usize> {
        self.with(|state, _| state.queue_depth(name))
    }

    /// The deliveries of a queue handed out and not settled yet; `None` if there is no
    /// such queue.
    pub fn unacked(&self, name: &str) -> Option<usize> {
        self.with(|state, _| state.unacked(name))
    }

    /// The copies sent down the retry ladder from a queue that have not come back yet;
    /// `None` if there is no such queue.
    pub fn delayed(&self, name: &str) -> Option<usize> {
        self.with(|state, _| state.delayed(name))
    }

    /// The consumers attached to a queue now; `None` if there is no such queue.
    pub fn consumer_count(&self, name: &str) -> Option<usize> {
        self.with(|state, _| state.consumer_count(name))
    }

    /// The patterns a queue is bound with, sorted: on `mesh.events` for consumer queues,
    /// `mesh.rpc` for serve queues, `mesh.events.dead` for queues of dead letters.
    pub fn bindings(&self, queue: &str) -> Vec<String> {
        self.with(|state, _| state.bindings(queue))
    }

    /// Every binding of an exchange as `(queue, pattern)`, sorted; empty for an unknown
    /// exchange.
    pub fn exchange_bindings(&self, exchange: &str) -> Vec<(String, String)> {
        self.with(|state, _| state.exchange_bindings(exchange))
    }

    /// Runs the transition `f` on the state under the lock, after sweeping ended consumers;
    /// the effects `f` leaves in its [`Effects`] are performed once the lock is released.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut State, &mut Effects) -> R) -> R {
        self.shared.with(f)
    }
}

impl Default for MemoryBroker {
    fn default() -> Self {
        MemoryBroker::new()
    }
}

impl fmt::Debug for MemoryBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `try_lock`: formatting must never wait for (or deadlock on) the broker.
        let mut debug = f.debug_struct("MemoryBroker");
        if let Ok(state) = self.shared.state.try_lock() {
            debug.field("queues", &state.queue_names());
        }
        debug.finish_non_exhaustive()
    }
}
