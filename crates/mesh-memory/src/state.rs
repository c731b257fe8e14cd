//! The broker's state — exchanges, bindings, queues, consumers and connections — and the
//! mechanics that move messages between them.
//!
//! Everything here runs under the broker's lock and is synchronous: it never awaits, and it
//! never drops a [`Delivery`], whose acker would take the lock again on drop. That includes
//! dropping a consumer's channel sender, which can drop deliveries still in the channel once
//! its receiver is gone. What the state lets go of — a delivery sent to a consumer that just
//! went away, a removed consumer, a deleted queue — is parked in [`State::graveyard`], which
//! [`MemoryBroker::with`](crate::MemoryBroker) empties once the lock is released.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::Duration;

use mesh_core::naming::{DEAD_EXCHANGE, EVENTS_EXCHANGE, RETIRED_DEAD_QUEUE, RPC_EXCHANGE};
use mesh_core::transport::{Acker, Delivery, TransportError, TransportErrorKind};
use mesh_core::{topic_matches, WireMessage};
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::debug;

use crate::acker::{AutoAcker, DelayedCopy, MemoryAcker};
use crate::broker::{MemoryBroker, Shared};

/// Identifies one connection (one [`MemoryTransport`](crate::MemoryTransport) and its clones).
pub(crate) type ConnectionId = u64;

/// The exchanges of the contract; every one is a topic exchange.
const EXCHANGES: [&str; 3] = [EVENTS_EXCHANGE, RPC_EXCHANGE, DEAD_EXCHANGE];

/// The longest queue name AMQP carries (a short string).
const MAX_QUEUE_NAME_LEN: usize = 255;

/// What kind of queue, which decides its lifetime.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueKind {
    /// Declared by name; belongs to the broker and outlives every connection.
    Durable,
    /// Server-named, exclusive to one connection and auto-delete: deleted with its consumer.
    Ephemeral { owner: ConnectionId },
    /// A connection's reply queue: a reply goes straight to the call waiting for it.
    Reply { owner: ConnectionId },
}

/// A message in a queue, with the broker's bookkeeping.
#[derive(Debug)]
pub(crate) struct Message {
    /// Its place in the queue: requeued messages go back to it, ahead of newer ones.
    seq: u64,
    wire: WireMessage,
    redelivered: bool,
    /// How many times it was handed out before (`x-delivery-count`).
    delivery_count: u32,
    /// When its `expiration` runs out; `None` never (no expiration, or one so long that
    /// the deadline cannot be represented).
    expires_at: Option<Instant>,
    /// A zero expiration: RabbitMQ delivers such a message at once or drops it.
    now_or_never: bool,
}

impl Message {
    fn fresh(wire: WireMessage, seq: u64, now: Instant) -> Message {
        let expiration = wire.properties.expiration;
        Message {
            seq,
            expires_at: expiration.and_then(|ttl| now.checked_add(ttl)),
            now_or_never: expiration.is_some_and(|ttl| ttl.is_zero()),
            redelivered: false,
            delivery_count: 0,
            wire,
        }
    }

    /// Waited in its queue as long as its expiration allows. Zero-expiration messages are
    /// handled by the dispatch that follows their enqueue instead.
    fn is_expired(&self, now: Instant) -> bool {
        !self.now_or_never && self.expires_at.is_some_and(|deadline| now >= deadline)
    }

    /// Back to its queue after a delivery that was not settled; the expiration keeps
    /// running from the first enqueue, as on RabbitMQ.
    fn requeued(mut self) -> Message {
        self.redelivered = true;
        self.delivery_count = self.delivery_count.saturating_add(1);
        self
    }
}

/// A delivery handed out and not settled yet.
#[derive(Debug)]
struct Unacked {
    message: Message,
    consumer: u64,
    connection: ConnectionId,
}

/// One consumer of a queue.
#[derive(Debug)]
pub(crate) struct Consumer {
    id: u64,
    connection: ConnectionId,
    tx: mpsc::Sender<Delivery>,
    /// Fires (or closes) when the subscription is cancelled or dropped.
    cancel: oneshot::Receiver<()>,
    /// Unsettled deliveries allowed; `None` is unlimited (prefetch 0, or automatic acks).
    limit: Option<usize>,
    auto_ack: bool,
    in_flight: usize,
    retry_delays: Arc<[Duration]>,
    /// A task waits for room in the channel (only when the channel, not the prefetch,
    /// is what holds deliveries back).
    waiting_for_room: bool,
}

impl Consumer {
    /// A consumer for one subscription.
    pub(crate) fn new(
        connection: ConnectionId,
        tx: mpsc::Sender<Delivery>,
        cancel: oneshot::Receiver<()>,
        limit: Option<usize>,
        auto_ack: bool,
        retry_delays: Arc<[Duration]>,
    ) -> Consumer {
        Consumer {
            id: 0,
            connection,
            tx,
            cancel,
            limit,
            auto_ack,
            in_flight: 0,
            retry_delays,
            waiting_for_room: false,
        }
    }

    /// The subscription was cancelled or dropped.
    fn ended(&mut self) -> bool {
        self.tx.is_closed()
            || !matches!(
                self.cancel.try_recv(),
                Err(oneshot::error::TryRecvError::Empty)
            )
    }

    fn below_limit(&self) -> bool {
        self.limit.is_none_or(|limit| self.in_flight < limit)
    }

    fn has_room(&self) -> bool {
        !self.tx.is_closed() && self.below_limit() && self.tx.capacity() > 0
    }
}

/// A queue: ready messages in order, deliveries out, and competing consumers.
#[derive(Debug)]
pub(crate) struct Queue {
    kind: QueueKind,
    ready: VecDeque<Message>,
    unacked: BTreeMap<u64, Unacked>,
    consumers: Vec<Consumer>,
    /// Where the round robin resumes.
    cursor: usize,
    /// Copies waiting on the retry ladder to come back here.
    delayed: usize,
}

impl Queue {
    fn new(kind: QueueKind) -> Queue {
        Queue {
            kind,
            ready: VecDeque::new(),
            unacked: BTreeMap::new(),
            consumers: Vec::new(),
            cursor: 0,
            delayed: 0,
        }
    }

    /// Puts a message that was handed out back at its original place: ahead of every
    /// newer message, as RabbitMQ requeues.
    fn requeue(&mut self, message: Message) {
        let at = self.ready.partition_point(|m| m.seq < message.seq);
        self.ready.insert(at, message.requeued());
    }

    /// The next consumer in round-robin order that may take a delivery now.
    fn next_consumer(&mut self) -> Option<usize> {
        let count = self.consumers.len();
        for offset in 0..count {
            let index = (self.cursor + offset) % count;
            if self.consumers[index].has_room() {
                self.cursor = (index + 1) % count;
                return Some(index);
            }
        }
        None
    }

    /// Ready messages wait and some consumer is held back only by a full channel (its
    /// subscriber has not taken the deliveries out yet): wake the dispatch once it takes
    /// one. Consumers held back by their prefetch are woken by a settle instead.
    fn await_room(&mut self, name: &str, me: &Weak<Shared>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for consumer in &mut self.consumers {
            // Not `capacity() > 0` as a reason to skip: the subscriber may have taken a
            // delivery out since the dispatch found the channel full, and nothing else
            // would wake the dispatch then. A waiter finds the room at once instead.
            if consumer.waiting_for_room || consumer.tx.is_closed() || !consumer.below_limit() {
                continue;
            }
            consumer.waiting_for_room = true;
            let tx = consumer.tx.clone();
            let me = me.clone();
            let queue = name.to_owned();
            let id = consumer.id;
            runtime.spawn(async move {
                // Resolves once the subscriber received a delivery (or went away); the
                // permit is given back at once, the dispatch below uses it.
                drop(tx.reserve().await);
                drop(tx);
                if let Some(broker) = MemoryBroker::upgrade(&me) {
                    broker.with(|state| state.room_freed(&queue, id));
                }
            });
        }
    }
}

/// Something the state let go of, to drop once the lock is released.
#[derive(Debug)]
#[expect(dead_code, reason = "held only to be dropped outside the lock")]
pub(crate) enum Corpse {
    Delivery(Delivery),
    Consumer(Consumer),
    Queue(Queue),
}

/// Moves the consumers `ended` picks from `consumers` to `graveyard`; returns how many.
fn remove_consumers(
    consumers: &mut Vec<Consumer>,
    graveyard: &mut Vec<Corpse>,
    mut ended: impl FnMut(&mut Consumer) -> bool,
) -> usize {
    let mut removed = 0;
    let mut index = 0;
    while index < consumers.len() {
        if ended(&mut consumers[index]) {
            graveyard.push(Corpse::Consumer(consumers.remove(index)));
            removed += 1;
        } else {
            index += 1;
        }
    }
    removed
}

/// How a delivery is settled.
#[derive(Debug)]
pub(crate) enum Settlement {
    Ack,
    Release,
    Retry { copy: WireMessage, delay: Duration },
    DeadLetter(WireMessage),
    Reply(WireMessage),
}

/// What a connection holds at the broker.
#[derive(Debug, Default)]
struct Connection {
    closed: bool,
    reply_queue: Option<String>,
    /// Calls waiting for their reply, by correlation id.
    pending: HashMap<String, oneshot::Sender<WireMessage>>,
    late_replies: u64,
}

/// Everything the broker holds.
#[derive(Debug)]
pub(crate) struct State {
    me: Weak<Shared>,
    queues: BTreeMap<String, Queue>,
    /// Per exchange, its bindings as (queue, pattern).
    bindings: BTreeMap<&'static str, BTreeSet<(String, String)>>,
    connections: HashMap<ConnectionId, Connection>,
    next_id: u64,
    /// What to drop once the lock is released.
    pub(crate) graveyard: Vec<Corpse>,
}

/// Why the broker refused an operation; a [`TransportError`] at the transport's edge.
///
/// Kept small and separate because `TransportError` is large to pass around.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The connection was closed by its owner.
    Closed,
    /// The connection a delivery came from is closed (or the broker is gone).
    ConnectionLost,
    /// Nothing is bound on `mesh.rpc` for the tool.
    NoServer(String),
    /// A queue name that is empty or too long.
    BadQueueName,
    /// A queue name with the server's `amq.` prefix.
    ReservedQueueName(String),
    /// The queue of a delivery was deleted.
    QueueGone(String),
    /// A delivery tag the queue does not know (already settled).
    UnknownTag(u64),
}

impl From<Fault> for TransportError {
    fn from(fault: Fault) -> TransportError {
        use TransportErrorKind as Kind;
        match fault {
            Fault::Closed => TransportError::new(Kind::Closed, "the memory transport was closed"),
            Fault::ConnectionLost => TransportError::new(
                Kind::ConnectionLost,
                "the connection this delivery came from was closed",
            ),
            Fault::NoServer(tool) => TransportError::new(
                Kind::NoServer,
                format!("no queue is bound for `{tool}` on {RPC_EXCHANGE}"),
            ),
            Fault::BadQueueName => TransportError::new(
                Kind::InvalidOptions,
                format!("a queue name must be 1 to {MAX_QUEUE_NAME_LEN} bytes long"),
            ),
            Fault::ReservedQueueName(name) => TransportError::new(
                Kind::AccessRefused,
                format!("queue name `{name}` uses the reserved prefix `amq.`"),
            ),
            Fault::QueueGone(name) => {
                TransportError::new(Kind::Protocol, format!("queue `{name}` no longer exists"))
            }
            Fault::UnknownTag(tag) => {
                TransportError::new(Kind::Protocol, format!("unknown delivery tag {tag}"))
            }
        }
    }
}

impl State {
    /// The broker's topology at start: the three exchanges, no queue.
    pub(crate) fn new(me: Weak<Shared>) -> State {
        State {
            me,
            queues: BTreeMap::new(),
            bindings: EXCHANGES.iter().map(|e| (*e, BTreeSet::new())).collect(),
            connections: HashMap::new(),
            next_id: 0,
            graveyard: Vec::new(),
        }
    }

    /// Declares the retired `mesh.dead-letters` bound to `mesh.events.dead` on `#`, as an
    /// older mesh left it.
    pub(crate) fn declare_retired_dead_queue(&mut self) {
        if !self.queues.contains_key(RETIRED_DEAD_QUEUE) {
            self.queues.insert(
                RETIRED_DEAD_QUEUE.to_owned(),
                Queue::new(QueueKind::Durable),
            );
        }
        self.bind(DEAD_EXCHANGE, RETIRED_DEAD_QUEUE, "#");
    }

    /// Whether a queue exists.
    pub(crate) fn has_queue(&self, name: &str) -> bool {
        self.queues.contains_key(name)
    }

    /// Removes the retired queue's binding; whether the queue exists.
    pub(crate) fn unbind_retired_dead_queue(&mut self) -> bool {
        if let Some(bindings) = self.bindings.get_mut(DEAD_EXCHANGE) {
            if bindings.remove(&(RETIRED_DEAD_QUEUE.to_owned(), "#".to_owned())) {
                debug!(queue = RETIRED_DEAD_QUEUE, "retired queue unbound");
            }
        }
        self.queues.contains_key(RETIRED_DEAD_QUEUE)
    }

    /// Deletes the retired queue if it holds nothing and nobody consumes it; whether it is
    /// gone.
    pub(crate) fn delete_retired_dead_queue(&mut self) -> bool {
        let Some(queue) = self.queues.get(RETIRED_DEAD_QUEUE) else {
            return true;
        };
        let idle = queue.ready.is_empty()
            && queue.unacked.is_empty()
            && queue.delayed == 0
            && queue.consumers.is_empty();
        if idle {
            self.delete_queue(RETIRED_DEAD_QUEUE);
        }
        idle
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    // ---- connections ------------------------------------------------------------------

    pub(crate) fn open_connection(&mut self) -> ConnectionId {
        let id = self.next_id();
        self.connections.insert(id, Connection::default());
        debug!(connection = id, "memory connection opened");
        id
    }

    pub(crate) fn is_open(&self, connection: ConnectionId) -> bool {
        self.connections.get(&connection).is_some_and(|c| !c.closed)
    }

    pub(crate) fn ensure_open(&self, connection: ConnectionId) -> Result<(), Fault> {
        if self.is_open(connection) {
            Ok(())
        } else {
            Err(Fault::Closed)
        }
    }

    pub(crate) fn late_replies(&self, connection: ConnectionId) -> u64 {
        self.connections
            .get(&connection)
            .map_or(0, |c| c.late_replies)
    }

    /// Live consumers of a connection.
    pub(crate) fn consumers_of(&self, connection: ConnectionId) -> usize {
        self.queues
            .values()
            .flat_map(|q| &q.consumers)
            .filter(|c| c.connection == connection && !c.tx.is_closed())
            .count()
    }

    /// Closes a connection: its consumers end, its unsettled deliveries go back to the
    /// front of their queues (redelivered), its exclusive queues are deleted and its
    /// waiting calls fail.
    pub(crate) fn close(&mut self, connection: ConnectionId) {
        let Some(conn) = self.connections.get_mut(&connection) else {
            return;
        };
        if conn.closed {
            return;
        }
        conn.closed = true;
        conn.pending.clear();
        conn.reply_queue = None;

        let mut owned = Vec::new();
        let mut requeued = Vec::new();
        for (name, queue) in &mut self.queues {
            match queue.kind {
                QueueKind::Ephemeral { owner } | QueueKind::Reply { owner }
                    if owner == connection =>
                {
                    owned.push(name.clone());
                    continue;
                }
                _ => {}
            }
            remove_consumers(&mut queue.consumers, &mut self.graveyard, |c| {
                c.connection == connection
            });
            let tags: Vec<u64> = queue
                .unacked
                .iter()
                .filter(|(_, u)| u.connection == connection)
                .map(|(tag, _)| *tag)
                .collect();
            for tag in &tags {
                if let Some(unacked) = queue.unacked.remove(tag) {
                    queue.requeue(unacked.message);
                }
            }
            if !tags.is_empty() {
                debug!(queue = %name, count = tags.len(), "requeued deliveries of a closed connection");
                requeued.push(name.clone());
            }
        }
        for name in owned {
            self.delete_queue(&name);
        }
        for name in requeued {
            self.dispatch(&name);
        }
        debug!(connection, "memory connection closed");
    }

    // ---- topology ---------------------------------------------------------------------

    /// Declares a durable queue by name, if absent.
    pub(crate) fn declare_durable(&mut self, name: &str) -> Result<(), Fault> {
        if name.is_empty() || name.len() > MAX_QUEUE_NAME_LEN {
            return Err(Fault::BadQueueName);
        }
        // RabbitMQ refuses to declare `amq.` names (they are the server's); this also keeps
        // anyone from consuming another connection's exclusive queue.
        if name.starts_with("amq.") {
            return Err(Fault::ReservedQueueName(name.to_owned()));
        }
        if !self.queues.contains_key(name) {
            self.queues
                .insert(name.to_owned(), Queue::new(QueueKind::Durable));
            debug!(queue = name, "durable queue declared");
        }
        Ok(())
    }

    /// Declares a server-named, exclusive, auto-delete queue.
    pub(crate) fn declare_ephemeral(&mut self, owner: ConnectionId) -> String {
        let name = server_name();
        self.queues
            .insert(name.clone(), Queue::new(QueueKind::Ephemeral { owner }));
        debug!(queue = %name, "ephemeral queue declared");
        name
    }

    /// The connection's reply queue, declared on first use.
    fn reply_queue(&mut self, connection: ConnectionId) -> String {
        if let Some(name) = self
            .connections
            .get(&connection)
            .and_then(|c| c.reply_queue.clone())
        {
            return name;
        }
        let name = server_name();
        self.queues.insert(
            name.clone(),
            Queue::new(QueueKind::Reply { owner: connection }),
        );
        if let Some(conn) = self.connections.get_mut(&connection) {
            conn.reply_queue = Some(name.clone());
        }
        debug!(queue = %name, connection, "reply queue declared");
        name
    }

    fn delete_queue(&mut self, name: &str) {
        if let Some(queue) = self.queues.remove(name) {
            self.graveyard.push(Corpse::Queue(queue));
            for bindings in self.bindings.values_mut() {
                bindings.retain(|(queue, _)| queue != name);
            }
            debug!(queue = name, "queue deleted");
        }
    }

    fn bind(&mut self, exchange: &'static str, queue: &str, pattern: &str) {
        if let Some(bindings) = self.bindings.get_mut(exchange) {
            if bindings.insert((queue.to_owned(), pattern.to_owned())) {
                debug!(exchange, queue, pattern, "binding added");
            }
        }
    }

    /// Binds `queue` on `exchange` to exactly `patterns`: missing bindings are added,
    /// bindings no longer asked for are removed.
    pub(crate) fn set_bindings(
        &mut self,
        exchange: &'static str,
        queue: &str,
        patterns: &BTreeSet<String>,
    ) {
        if let Some(bindings) = self.bindings.get_mut(exchange) {
            bindings.retain(|(q, pattern)| {
                let keep = q != queue || patterns.contains(pattern);
                if !keep {
                    debug!(exchange, queue, pattern = %pattern, "stale binding removed");
                }
                keep
            });
        }
        for pattern in patterns {
            self.bind(exchange, queue, pattern);
        }
    }

    /// The queues a message with `key` reaches on `exchange`; a queue bound by several
    /// matching patterns is named once.
    fn route(&self, exchange: &str, key: &str) -> BTreeSet<String> {
        self.bindings
            .get(exchange)
            .into_iter()
            .flatten()
            .filter(|(_, pattern)| topic_matches(pattern, key))
            .map(|(queue, _)| queue.clone())
            .collect()
    }

    // ---- consumers --------------------------------------------------------------------

    /// Attaches a consumer to a queue and starts dispatching to it.
    pub(crate) fn add_consumer(&mut self, queue: &str, mut consumer: Consumer) {
        consumer.id = self.next_id();
        if let Some(q) = self.queues.get_mut(queue) {
            debug!(queue, consumer = consumer.id, limit = ?consumer.limit, "consumer attached");
            q.consumers.push(consumer);
            self.dispatch(queue);
        }
    }

    /// Removes the consumers whose subscription was cancelled or dropped, and deletes the
    /// auto-delete queues they leave without a consumer. Runs before every operation, so
    /// what anyone observes is already up to date.
    pub(crate) fn sweep(&mut self) {
        let mut gone = Vec::new();
        for (name, queue) in &mut self.queues {
            if remove_consumers(&mut queue.consumers, &mut self.graveyard, Consumer::ended) > 0 {
                debug!(queue = %name, "consumer cancelled");
            }
            if matches!(queue.kind, QueueKind::Ephemeral { .. }) && queue.consumers.is_empty() {
                gone.push(name.clone());
            }
        }
        for name in gone {
            self.delete_queue(&name);
        }
    }

    fn room_freed(&mut self, queue: &str, consumer: u64) {
        if let Some(c) = self
            .queues
            .get_mut(queue)
            .and_then(|q| q.consumers.iter_mut().find(|c| c.id == consumer))
        {
            c.waiting_for_room = false;
        }
        self.dispatch(queue);
    }

    // ---- publishing -------------------------------------------------------------------

    /// Publishes through a topic exchange; returns how many queues took the message.
    ///
    /// As on a broker with the RabbitMQ transport, the `x-mesh-*` headers of a message
    /// routed through an exchange where mesh never sets them are dropped before any
    /// consumer sees it ([`mesh_core::codec::remove_unearned_mesh_headers`]).
    pub(crate) fn publish(&mut self, exchange: &'static str, message: &WireMessage) -> usize {
        let targets = self.route(exchange, &message.routing_key);
        let mut message = std::borrow::Cow::Borrowed(message);
        let forged = message
            .properties
            .headers
            .keys()
            .any(|name| mesh_core::codec::is_mesh_header(name));
        if forged {
            let headers = &mut message.to_mut().properties.headers;
            mesh_core::codec::remove_unearned_mesh_headers(exchange, headers);
        }
        for queue in &targets {
            self.enqueue(queue, message.clone().into_owned());
        }
        debug!(exchange, key = %message.routing_key, queues = targets.len(), "published");
        targets.len()
    }

    /// Puts a message at the tail of a queue (the default exchange); `false` when there is
    /// no such queue.
    pub(crate) fn enqueue(&mut self, name: &str, message: WireMessage) -> bool {
        let seq = self.next_id();
        let Some(queue) = self.queues.get_mut(name) else {
            debug!(queue = name, "no such queue, message dropped");
            return false;
        };
        if let QueueKind::Reply { owner } = queue.kind {
            self.hand_reply(owner, message);
            return true;
        }
        queue
            .ready
            .push_back(Message::fresh(message, seq, Instant::now()));
        self.dispatch(name);
        true
    }

    /// A reply reached a reply queue: hand it to the call waiting for its correlation id,
    /// or count it as late (the call timed out, gave up or was already answered).
    fn hand_reply(&mut self, owner: ConnectionId, reply: WireMessage) {
        let Some(conn) = self.connections.get_mut(&owner) else {
            return;
        };
        let waiting = reply
            .properties
            .correlation_id
            .as_ref()
            .and_then(|id| conn.pending.remove(id));
        let handed = match waiting {
            Some(call) => call.send(reply).is_ok(),
            None => false,
        };
        if !handed {
            conn.late_replies += 1;
            debug!(connection = owner, "late or duplicate reply dropped");
        }
    }

    /// Publishes a request for `tool` on `mesh.rpc` with this connection's reply queue,
    /// `correlation` and an expiration of `timeout`; the reply goes to `call`.
    pub(crate) fn send_request(
        &mut self,
        connection: ConnectionId,
        tool: &str,
        mut request: WireMessage,
        correlation: &str,
        timeout: Duration,
        call: oneshot::Sender<WireMessage>,
    ) -> Result<(), Fault> {
        self.ensure_open(connection)?;
        let targets = self.route(RPC_EXCHANGE, tool);
        if targets.is_empty() {
            debug!(tool, "no serve queue for the tool");
            return Err(Fault::NoServer(tool.to_owned()));
        }
        let reply_queue = self.reply_queue(connection);
        request.routing_key = tool.to_owned();
        request.properties.reply_to = Some(reply_queue);
        request.properties.correlation_id = Some(correlation.to_owned());
        request.properties.expiration = Some(timeout);
        if let Some(conn) = self.connections.get_mut(&connection) {
            conn.pending.insert(correlation.to_owned(), call);
        }
        for queue in &targets {
            self.enqueue(queue, request.clone());
        }
        debug!(tool, correlation, "request sent");
        Ok(())
    }

    /// Forgets a call that ended (answered, timed out or dropped): a reply from now on
    /// is late.
    pub(crate) fn forget_call(&mut self, connection: ConnectionId, correlation: &str) {
        if let Some(conn) = self.connections.get_mut(&connection) {
            conn.pending.remove(correlation);
        }
    }

    // ---- delivering -------------------------------------------------------------------

    /// Hands ready messages to consumers with room, round robin, until either runs out.
    pub(crate) fn dispatch(&mut self, name: &str) {
        let now = Instant::now();
        let State {
            me,
            queues,
            next_id,
            graveyard,
            ..
        } = self;
        let Some(queue) = queues.get_mut(name) else {
            return;
        };
        while let Some(front) = queue.ready.front() {
            if front.is_expired(now) {
                queue.ready.pop_front();
                debug!(queue = name, "expired message dropped");
                continue;
            }
            let Some(index) = queue.next_consumer() else {
                queue.await_room(name, me);
                break;
            };
            let Some(message) = queue.ready.pop_front() else {
                break;
            };
            *next_id += 1;
            let tag = *next_id;
            let consumer = &mut queue.consumers[index];
            let acker: Box<dyn Acker> = if consumer.auto_ack {
                Box::new(AutoAcker)
            } else {
                Box::new(MemoryAcker::new(
                    me.clone(),
                    name,
                    tag,
                    consumer.connection,
                    Arc::clone(&consumer.retry_delays),
                ))
            };
            let delivery = Delivery::new(
                message.wire.clone(),
                message.redelivered,
                Some(message.delivery_count),
                name.to_owned(),
                acker,
            );
            match consumer.tx.try_send(delivery) {
                Ok(()) => {
                    debug!(
                        queue = name,
                        consumer = consumer.id,
                        redelivered = message.redelivered,
                        delivery_count = message.delivery_count,
                        "delivered"
                    );
                    if !consumer.auto_ack {
                        consumer.in_flight += 1;
                        queue.unacked.insert(
                            tag,
                            Unacked {
                                message,
                                consumer: consumer.id,
                                connection: consumer.connection,
                            },
                        );
                    }
                }
                // The subscriber went away (or a room waiter holds the last permit) since
                // `has_room`: the message goes back untouched. The delivery's acker finds no
                // unsettled entry for its tag, so dropping it later is a no-op.
                Err(TrySendError::Full(delivery) | TrySendError::Closed(delivery)) => {
                    queue.ready.push_front(message);
                    graveyard.push(Corpse::Delivery(delivery));
                }
            }
        }
        queue.ready.retain(|m| !m.now_or_never);
    }

    /// Settles delivery `tag` of `queue`; a retry returns the copy to schedule.
    pub(crate) fn settle(
        &mut self,
        queue_name: &str,
        tag: u64,
        connection: ConnectionId,
        settlement: Settlement,
    ) -> Result<Option<DelayedCopy>, Fault> {
        if !self.is_open(connection) {
            return Err(Fault::ConnectionLost);
        }
        let Some(queue) = self.queues.get_mut(queue_name) else {
            return Err(Fault::QueueGone(queue_name.to_owned()));
        };
        let Some(unacked) = queue.unacked.remove(&tag) else {
            return Err(Fault::UnknownTag(tag));
        };
        if let Some(consumer) = queue
            .consumers
            .iter_mut()
            .find(|c| c.id == unacked.consumer)
        {
            consumer.in_flight = consumer.in_flight.saturating_sub(1);
        }
        let mut delayed = None;
        match settlement {
            Settlement::Ack => debug!(queue = queue_name, tag, "acked"),
            Settlement::Release => {
                debug!(queue = queue_name, tag, "released");
                queue.requeue(unacked.message);
            }
            Settlement::Retry { copy, delay } => {
                debug!(
                    queue = queue_name,
                    tag,
                    ?delay,
                    "sent down the retry ladder"
                );
                queue.delayed += 1;
                delayed = Some(DelayedCopy::new(queue_name, copy, delay));
            }
            Settlement::DeadLetter(copy) => {
                debug!(queue = queue_name, tag, "dead-lettered");
                self.publish(DEAD_EXCHANGE, &copy);
            }
            Settlement::Reply(mut reply) => {
                let request = unacked.message.wire.properties;
                match request.reply_to {
                    Some(reply_to) => {
                        reply.properties.correlation_id = request.correlation_id;
                        debug!(queue = queue_name, tag, reply_to = %reply_to, "replied");
                        self.enqueue(&reply_to, reply);
                    }
                    None => debug!(
                        queue = queue_name,
                        tag, "request without reply_to, reply dropped"
                    ),
                }
            }
        }
        self.dispatch(queue_name);
        Ok(delayed)
    }

    /// A copy comes back from the retry ladder to the tail of its queue, as a fresh
    /// message.
    pub(crate) fn return_delayed(&mut self, queue: &str, copy: WireMessage) {
        match self.queues.get_mut(queue) {
            Some(q) => {
                q.delayed = q.delayed.saturating_sub(1);
                debug!(queue, "retry copy returned");
                self.enqueue(queue, copy);
            }
            None => debug!(queue, "retry copy dropped, its queue is gone"),
        }
    }

    // ---- inspection -------------------------------------------------------------------

    pub(crate) fn queue_names(&self) -> Vec<String> {
        self.queues.keys().cloned().collect()
    }

    pub(crate) fn queue_depth(&self, name: &str) -> Option<usize> {
        let now = Instant::now();
        self.queues
            .get(name)
            .map(|q| q.ready.iter().filter(|m| !m.is_expired(now)).count())
    }

    pub(crate) fn unacked(&self, name: &str) -> Option<usize> {
        self.queues.get(name).map(|q| q.unacked.len())
    }

    pub(crate) fn delayed(&self, name: &str) -> Option<usize> {
        self.queues.get(name).map(|q| q.delayed)
    }

    pub(crate) fn consumer_count(&self, name: &str) -> Option<usize> {
        self.queues.get(name).map(|q| q.consumers.len())
    }

    pub(crate) fn bindings(&self, queue: &str) -> Vec<String> {
        let patterns: BTreeSet<&str> = self
            .bindings
            .values()
            .flatten()
            .filter(|(q, _)| q == queue)
            .map(|(_, pattern)| pattern.as_str())
            .collect();
        patterns.into_iter().map(str::to_owned).collect()
    }

    pub(crate) fn exchange_bindings(&self, exchange: &str) -> Vec<(String, String)> {
        self.bindings
            .get(exchange)
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }
}

/// A server-generated queue name, as RabbitMQ gives them.
fn server_name() -> String {
    format!("amq.gen-{}", uuid::Uuid::new_v4())
}
