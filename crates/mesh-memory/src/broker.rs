//! The shared in-process broker and its inspection methods.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use crate::state::State;
use crate::transport::MemoryTransport;

/// What every handle onto one broker shares.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
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
/// queue of its own to `mesh.events.dead` (the retired `mesh.dead-letters` is declared only
/// by [`with_retired_dead_queue`](MemoryBroker::with_retired_dead_queue)).
#[derive(Clone)]
pub struct MemoryBroker {
    shared: Arc<Shared>,
}

impl MemoryBroker {
    /// A new, empty broker.
    pub fn new() -> MemoryBroker {
        let shared = Arc::new_cyclic(|me| Shared {
            state: Mutex::new(State::new(me.clone())),
        });
        MemoryBroker { shared }
    }

    /// A new broker that also holds the retired queue `mesh.dead-letters`, bound to
    /// `mesh.events.dead` on `#` as an older mesh declared it: for testing its migration.
    pub fn with_retired_dead_queue() -> MemoryBroker {
        let broker = MemoryBroker::new();
        broker.with(|state| state.declare_retired_dead_queue());
        broker
    }

    /// A new connection to this broker.
    pub fn transport(&self) -> MemoryTransport {
        let connection = self.with(State::open_connection);
        MemoryTransport::new(self.clone(), connection)
    }

    /// The names of every queue, sorted (server-named queues included).
    pub fn queue_names(&self) -> Vec<String> {
        self.with(|state| state.queue_names())
    }

    /// The messages ready in a queue (not handed out, not expired); `None` if there is no
    /// such queue.
    pub fn queue_depth(&self, name: &str) -> Option<usize> {
        self.with(|state| state.queue_depth(name))
    }

    /// The deliveries of a queue handed out and not settled yet; `None` if there is no
    /// such queue.
    pub fn unacked(&self, name: &str) -> Option<usize> {
        self.with(|state| state.unacked(name))
    }

    /// The copies sent down the retry ladder from a queue that have not come back yet;
    /// `None` if there is no such queue.
    pub fn delayed(&self, name: &str) -> Option<usize> {
        self.with(|state| state.delayed(name))
    }

    /// The consumers attached to a queue now; `None` if there is no such queue.
    pub fn consumer_count(&self, name: &str) -> Option<usize> {
        self.with(|state| state.consumer_count(name))
    }

    /// The patterns a queue is bound with, sorted: on `mesh.events` for consumer queues,
    /// `mesh.rpc` for serve queues, `mesh.events.dead` for queues of dead letters.
    pub fn bindings(&self, queue: &str) -> Vec<String> {
        self.with(|state| state.bindings(queue))
    }

    /// Every binding of an exchange as `(queue, pattern)`, sorted; empty for an unknown
    /// exchange.
    pub fn exchange_bindings(&self, exchange: &str) -> Vec<(String, String)> {
        self.with(|state| state.exchange_bindings(exchange))
    }

    /// A handle from a weak reference, while the broker lives.
    pub(crate) fn upgrade(shared: &Weak<Shared>) -> Option<MemoryBroker> {
        shared.upgrade().map(|shared| MemoryBroker { shared })
    }

    /// Runs `f` on the state under the lock, after sweeping ended consumers.
    ///
    /// Deliveries the state let go of are dropped only after the lock is released: their
    /// ackers take the lock again.
    pub(crate) fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let (result, graveyard) = {
            let mut state = self.lock();
            state.sweep();
            let result = f(&mut state);
            (result, std::mem::take(&mut state.graveyard))
        };
        drop(graveyard);
        result
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // The state stays consistent between statements that can panic, so a poisoned lock
        // is still usable.
        self.shared
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
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
