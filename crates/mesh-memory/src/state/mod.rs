//! The broker's state — exchanges, bindings, queues, consumers and connections — and the
//! transitions that move messages between them: the broker's functional core.
//!
//! Everything here is synchronous and runs under the broker's lock, and none of it performs
//! anything: a transition changes the state and describes what must happen outside it as
//! [`Effect`]s in the [`Effects`] it is given — deliver to a consumer's channel (the slot
//! reserved here), start a retry copy's timer, wait for room in a full channel, answer a
//! call, drop a channel or calls. The broker performs them once it released the lock, so no
//! task starts, no acker is built and nothing whose drop takes the lock again is dropped
//! under it. The state holds no reference to the broker; the time a transition sees is the
//! one the broker gives it ([`State::set_clock`]).
//!
//! Modules, each importing only those listed after it: this one (transitions and
//! inspection) → `queue` (a queue and its dispatch) → `consumer`; `connection`, `topology`
//! (exchanges, bindings, routing), `message`, `effect` and `fault` import none of the others.

mod connection;
mod consumer;
mod effect;
mod fault;
mod message;
mod queue;
mod topology;

#[cfg(test)]
mod tests;

use mesh_core::text::EscapedDisplay;
use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use mesh_core::naming::{DEAD_EXCHANGE, RPC_EXCHANGE};
use mesh_core::WireMessage;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::debug;

use connection::Connection;
pub(crate) use consumer::Consumer;
pub(crate) use effect::{
    ConnectionId, DelayedCopy, Discarded, Effect, Effects, Handout, RoomWaiter, Ticket,
};
pub(crate) use fault::Fault;
use fault::MAX_QUEUE_NAME_LEN;
use message::Message;
use queue::{Queue, QueueKind};
use topology::Bindings;

/// How a delivery is settled.
#[derive(Debug)]
pub(crate) enum Settlement {
    /// Remove the message.
    Ack,
    /// Put it back at its place, redelivered.
    Release,
    /// Remove it; `copy` comes back to the queue's tail after `delay`.
    Retry { copy: WireMessage, delay: Duration },
    /// Remove it; publish `copy` on `mesh.events.dead`.
    DeadLetter(WireMessage),
    /// Remove the request; send the reply to its `reply_to`.
    Reply(WireMessage),
}

/// Everything the broker holds.
#[derive(Debug)]
pub(crate) struct State {
    queues: BTreeMap<String, Queue>,
    bindings: Bindings,
    connections: HashMap<ConnectionId, Connection>,
    next_id: u64,
    /// The time of the transition running now.
    now: Instant,
}

impl State {
    /// The broker's topology at start: the three exchanges, no queue.
    pub(crate) fn new() -> State {
        State {
            queues: BTreeMap::new(),
            bindings: Bindings::new(),
            connections: HashMap::new(),
            next_id: 0,
            now: Instant::now(),
        }
    }

    /// Sets the time the next transitions see (expirations are measured against it).
    pub(crate) fn set_clock(&mut self, now: Instant) {
        self.now = now;
    }

    fn next_id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// Whether a queue exists.
    pub(crate) fn has_queue(&self, name: &str) -> bool {
        self.queues.contains_key(name)
    }

    // ---- connections ------------------------------------------------------------------

    /// Opens a connection.
    pub(crate) fn open_connection(&mut self) -> ConnectionId {
        let id = self.next_id();
        self.connections.insert(id, Connection::default());
        debug!(connection = id, "memory connection opened");
        id
    }

    /// Whether a connection is open.
    pub(crate) fn is_open(&self, connection: ConnectionId) -> bool {
        self.connections.get(&connection).is_some_and(|c| !c.closed)
    }

    /// [`Fault::Closed`] unless the connection is open.
    pub(crate) fn ensure_open(&self, connection: ConnectionId) -> Result<(), Fault> {
        if self.is_open(connection) {
            Ok(())
        } else {
            Err(Fault::Closed)
        }
    }

    /// Replies that reached a connection with no call waiting for them.
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
    pub(crate) fn close(&mut self, connection: ConnectionId, fx: &mut Effects) {
        let Some(conn) = self.connections.get_mut(&connection) else {
            return;
        };
        if conn.closed {
            return;
        }
        let calls = conn.close();
        if !calls.is_empty() {
            fx.push(Effect::Discard(Discarded::Calls(calls)));
        }
        let mut owned = Vec::new();
        let mut requeued = Vec::new();
        for (name, queue) in &mut self.queues {
            if queue.owner() == Some(connection) {
                owned.push(name.clone());
                continue;
            }
            queue.remove_consumers(fx, |c| c.connection == connection);
            let count = queue.requeue_connection(connection);
            if count > 0 {
                debug!(queue = %EscapedDisplay(&name), count, "requeued deliveries of a closed connection");
                requeued.push(name.clone());
            }
        }
        for name in owned {
            self.delete_queue(&name, fx);
        }
        for name in requeued {
            self.dispatch(&name, fx);
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
        debug!(queue = %EscapedDisplay(&name), "ephemeral queue declared");
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
        debug!(queue = %EscapedDisplay(&name), connection, "reply queue declared");
        name
    }

    fn delete_queue(&mut self, name: &str, fx: &mut Effects) {
        if let Some(queue) = self.queues.remove(name) {
            queue.discard(fx);
            self.bindings.remove_queue(name);
            debug!(queue = name, "queue deleted");
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
        self.bindings.set(exchange, queue, patterns);
    }

    // ---- consumers --------------------------------------------------------------------

    /// Attaches a consumer to a queue and starts dispatching to it.
    pub(crate) fn add_consumer(&mut self, queue: &str, mut consumer: Consumer, fx: &mut Effects) {
        consumer.id = self.next_id();
        if let Some(q) = self.queues.get_mut(queue) {
            debug!(queue, consumer = consumer.id, limit = ?consumer.limit, "consumer attached");
            q.consumers.push(consumer);
            self.dispatch(queue, fx);
        }
    }

    /// Removes the consumers whose subscription was cancelled or dropped, and deletes the
    /// auto-delete queues they leave without a consumer. The broker runs it before every
    /// operation, so what anyone observes is already up to date.
    pub(crate) fn sweep(&mut self, fx: &mut Effects) {
        let mut gone = Vec::new();
        for (name, queue) in &mut self.queues {
            if queue.remove_consumers(fx, Consumer::ended) > 0 {
                debug!(queue = %EscapedDisplay(&name), "consumer cancelled");
            }
            if matches!(queue.kind, QueueKind::Ephemeral { .. }) && queue.consumers.is_empty() {
                gone.push(name.clone());
            }
        }
        for name in gone {
            self.delete_queue(&name, fx);
        }
    }

    /// The channel of a consumer the broker waited on has room again.
    pub(crate) fn room_freed(&mut self, queue: &str, consumer: u64, fx: &mut Effects) {
        self.room_wait_ended(queue, consumer);
        self.dispatch(queue, fx);
    }

    /// The broker could not wait for room on a consumer's behalf (no runtime): it may be
    /// asked again by a later dispatch.
    pub(crate) fn room_wait_ended(&mut self, queue: &str, consumer: u64) {
        if let Some(c) = self
            .queues
            .get_mut(queue)
            .and_then(|q| q.consumers.iter_mut().find(|c| c.id == consumer))
        {
            c.waiting_for_room = false;
        }
    }

    // ---- publishing -------------------------------------------------------------------

    /// Publishes through a topic exchange; returns how many queues took the message.
    ///
    /// As on a broker with the RabbitMQ transport, the `x-mesh-*` headers of a message
    /// routed through an exchange where mesh never sets them are dropped before any
    /// consumer sees it ([`mesh_core::codec::remove_unearned_mesh_headers`]).
    pub(crate) fn publish(
        &mut self,
        exchange: &'static str,
        message: &WireMessage,
        fx: &mut Effects,
    ) -> usize {
        self.publish_under(exchange, &message.routing_key, message, fx)
    }

    /// Like [`publish`](Self::publish), routed by `key` rather than the message's own key
    /// (which it keeps): a dead letter goes under its queue's name, as on RabbitMQ (where
    /// the event's key travels in a header and the receiving transport restores it).
    pub(crate) fn publish_under(
        &mut self,
        exchange: &'static str,
        key: &str,
        message: &WireMessage,
        fx: &mut Effects,
    ) -> usize {
        let targets = self.bindings.route(exchange, key);
        let mut message = Cow::Borrowed(message);
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
            self.enqueue(queue, message.clone().into_owned(), fx);
        }
        debug!(exchange, key = %EscapedDisplay(&message.routing_key), queues = targets.len(), "published");
        targets.len()
    }

    /// Puts a message at the tail of a queue (the default exchange); `false` when there is
    /// no such queue.
    pub(crate) fn enqueue(&mut self, name: &str, message: WireMessage, fx: &mut Effects) -> bool {
        let seq = self.next_id();
        let now = self.now;
        let Some(queue) = self.queues.get_mut(name) else {
            debug!(queue = name, "no such queue, message dropped");
            return false;
        };
        if let QueueKind::Reply { owner } = queue.kind {
            self.hand_reply(owner, message, fx);
            return true;
        }
        queue.ready.push_back(Message::fresh(message, seq, now));
        self.dispatch(name, fx);
        true
    }

    /// A reply reached a reply queue: hand it to the call waiting for its correlation id,
    /// or count it as late (the call timed out, gave up or was already answered).
    fn hand_reply(&mut self, owner: ConnectionId, reply: WireMessage, fx: &mut Effects) {
        let Some(conn) = self.connections.get_mut(&owner) else {
            return;
        };
        let waiting = reply
            .properties
            .correlation_id
            .as_ref()
            .and_then(|id| conn.pending.remove(id));
        match waiting {
            Some(call) => fx.push(Effect::Answer {
                connection: owner,
                call,
                reply,
            }),
            None => self.late_reply(owner),
        }
    }

    /// A reply found no call waiting for it: counted, and dropped.
    pub(crate) fn late_reply(&mut self, connection: ConnectionId) {
        if let Some(conn) = self.connections.get_mut(&connection) {
            conn.late_replies += 1;
            debug!(connection, "late or duplicate reply dropped");
        }
    }

    /// Publishes a request for `tool` on `mesh.rpc` with this connection's reply queue,
    /// `correlation` and an expiration of `timeout`; the reply goes to `call`.
    #[expect(
        clippy::too_many_arguments,
        reason = "a request and where its reply goes"
    )]
    pub(crate) fn send_request(
        &mut self,
        connection: ConnectionId,
        tool: &str,
        mut request: WireMessage,
        correlation: &str,
        timeout: Duration,
        call: oneshot::Sender<WireMessage>,
        fx: &mut Effects,
    ) -> Result<(), Fault> {
        self.ensure_open(connection)?;
        let targets = self.bindings.route(RPC_EXCHANGE, tool);
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
            self.enqueue(queue, request.clone(), fx);
        }
        debug!(tool, correlation, "request sent");
        Ok(())
    }

    /// How many consumers the queues bound for `tool` on `mesh.rpc` have in all; `None` when
    /// no queue is bound for it.
    pub(crate) fn tool_consumers(&self, tool: &str) -> Option<usize> {
        let targets = self.bindings.route(RPC_EXCHANGE, tool);
        (!targets.is_empty()).then(|| {
            targets
                .iter()
                .filter_map(|name| self.queues.get(name))
                .map(|queue| queue.consumers.len())
                .sum()
        })
    }

    /// Forgets a call that ended (answered, timed out or dropped): a reply from now on
    /// is late.
    pub(crate) fn forget_call(
        &mut self,
        connection: ConnectionId,
        correlation: &str,
        fx: &mut Effects,
    ) {
        if let Some(call) = self
            .connections
            .get_mut(&connection)
            .and_then(|conn| conn.pending.remove(correlation))
        {
            fx.push(Effect::Discard(Discarded::Calls(vec![call])));
        }
    }

    // ---- delivering -------------------------------------------------------------------

    /// Hands ready messages of a queue to consumers with room, round robin, until either
    /// runs out.
    fn dispatch(&mut self, name: &str, fx: &mut Effects) {
        let State {
            queues,
            next_id,
            now,
            ..
        } = self;
        if let Some(queue) = queues.get_mut(name) {
            let next_tag = || {
                *next_id += 1;
                *next_id
            };
            queue.dispatch(name, *now, next_tag, fx);
        }
    }

    /// Settles delivery `tag` of `queue`, handed to a consumer of `connection`.
    pub(crate) fn settle(
        &mut self,
        queue_name: &str,
        tag: u64,
        connection: ConnectionId,
        settlement: Settlement,
        fx: &mut Effects,
    ) -> Result<(), Fault> {
        if !self.is_open(connection) {
            return Err(Fault::ConnectionLost);
        }
        let Some(queue) = self.queues.get_mut(queue_name) else {
            return Err(Fault::QueueGone(queue_name.to_owned()));
        };
        let unacked = queue.take_unacked(tag)?;
        match settlement {
            Settlement::Ack => debug!(queue = queue_name, tag, "acked"),
            Settlement::Release => {
                debug!(queue = queue_name, tag, "released");
                queue.release(unacked);
            }
            Settlement::Retry { copy, delay } => {
                debug!(
                    queue = queue_name,
                    tag,
                    ?delay,
                    "sent down the retry ladder"
                );
                queue.delayed += 1;
                fx.push(Effect::Delay(DelayedCopy {
                    queue: queue_name.to_owned(),
                    copy,
                    delay,
                }));
            }
            Settlement::DeadLetter(copy) => {
                debug!(queue = queue_name, tag, "dead-lettered");
                // Under the queue's name, so a tap bound on its own queues' names
                // (`Bus::dead_letters`) reads only those.
                self.publish_under(DEAD_EXCHANGE, queue_name, &copy, fx);
            }
            Settlement::Reply(mut reply) => {
                let request = unacked.message.wire.properties;
                match request.reply_to {
                    Some(reply_to) => {
                        reply.properties.correlation_id = request.correlation_id;
                        debug!(queue = queue_name, tag, reply_to = %EscapedDisplay(&reply_to), "replied");
                        self.enqueue(&reply_to, reply, fx);
                    }
                    None => debug!(
                        queue = queue_name,
                        tag, "request without reply_to, reply dropped"
                    ),
                }
            }
        }
        self.dispatch(queue_name, fx);
        Ok(())
    }

    /// A copy comes back from the retry ladder to the tail of its queue, as a fresh
    /// message.
    pub(crate) fn return_delayed(&mut self, queue: &str, copy: WireMessage, fx: &mut Effects) {
        match self.queues.get_mut(queue) {
            Some(q) => {
                q.delayed = q.delayed.saturating_sub(1);
                debug!(queue, "retry copy returned");
                self.enqueue(queue, copy, fx);
            }
            None => debug!(queue, "retry copy dropped, its queue is gone"),
        }
    }

    // ---- inspection -------------------------------------------------------------------

    /// The names of every queue, sorted.
    pub(crate) fn queue_names(&self) -> Vec<String> {
        self.queues.keys().cloned().collect()
    }

    /// Ready messages of a queue that have not expired.
    pub(crate) fn queue_depth(&self, name: &str) -> Option<usize> {
        self.queues.get(name).map(|q| q.depth(self.now))
    }

    /// Deliveries of a queue not settled yet.
    pub(crate) fn unacked(&self, name: &str) -> Option<usize> {
        self.queues.get(name).map(Queue::unacked_count)
    }

    /// Copies of a queue on the retry ladder.
    pub(crate) fn delayed(&self, name: &str) -> Option<usize> {
        self.queues.get(name).map(|q| q.delayed)
    }

    /// Consumers of a queue.
    pub(crate) fn consumer_count(&self, name: &str) -> Option<usize> {
        self.queues.get(name).map(|q| q.consumers.len())
    }

    /// The patterns a queue is bound with, sorted.
    pub(crate) fn bindings(&self, queue: &str) -> Vec<String> {
        self.bindings.of_queue(queue)
    }

    /// Every binding of an exchange as `(queue, pattern)`, sorted.
    pub(crate) fn exchange_bindings(&self, exchange: &str) -> Vec<(String, String)> {
        self.bindings.of_exchange(exchange)
    }
}

/// A server-generated queue name, as RabbitMQ gives them.
fn server_name() -> String {
    format!("amq.gen-{}", uuid::Uuid::new_v4())
}
