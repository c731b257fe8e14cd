//! Topology as data: every exchange, queue and binding the transport declared.
//!
//! The functions here build the declarations of the wire contract (the exchanges, the
//! consumer, retry and serve queues, and queues of dead letters) from names and
//! [`AmqpOptions`]; they do no I/O.
//! [`declare`](crate::declare) applies them to a channel. The transport records what it
//! declared in a [`Topology`] so that a reconnect can replay it in order: exchanges, then
//! queues, then bindings.
//!
//! Server-named queues (ephemeral subscriptions, the RPC reply queue) are not recorded: their
//! names die with the connection, and the subscription that owns one declares it again when it
//! re-attaches.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use mesh_core::naming::{
    self, DEAD_EXCHANGE, EVENTS_EXCHANGE, LOGS_EXCHANGE, REPLY_EXCHANGE, RETRY_EXCHANGE,
    RPC_EXCHANGE,
};
use mesh_core::{HeaderValue, Headers};

use crate::options::{AmqpOptions, QueueType};

/// `x-queue-type`.
pub(crate) const QUEUE_TYPE: &str = "x-queue-type";
/// `x-dead-letter-exchange`.
pub(crate) const DEAD_LETTER_EXCHANGE: &str = "x-dead-letter-exchange";
/// `x-dead-letter-routing-key`.
pub(crate) const DEAD_LETTER_ROUTING_KEY: &str = "x-dead-letter-routing-key";
/// `x-dead-letter-strategy`.
pub(crate) const DEAD_LETTER_STRATEGY: &str = "x-dead-letter-strategy";
/// `x-delivery-limit`.
pub(crate) const DELIVERY_LIMIT: &str = "x-delivery-limit";
/// `x-message-ttl`.
pub(crate) const MESSAGE_TTL: &str = "x-message-ttl";
/// `x-overflow`.
pub(crate) const OVERFLOW: &str = "x-overflow";

/// One exchange.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ExchangeDecl {
    /// Its name.
    pub name: String,
    /// Its type (`topic` for every exchange mesh declares).
    pub kind: String,
    /// Whether it survives a broker restart.
    pub durable: bool,
}

/// One queue.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct QueueDecl {
    /// Its name.
    pub name: String,
    /// Whether it survives a broker restart.
    pub durable: bool,
    /// Whether only the declaring connection may use it.
    pub exclusive: bool,
    /// Whether the broker deletes it when its last consumer goes.
    pub auto_delete: bool,
    /// Its `x-` arguments.
    pub arguments: Headers,
}

/// One binding of a queue to an exchange.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub struct BindingDecl {
    /// The exchange.
    pub exchange: String,
    /// The queue.
    pub queue: String,
    /// The binding key (a topic pattern on a topic exchange).
    pub routing_key: String,
}

impl BindingDecl {
    /// A binding of `queue` to `exchange` with `routing_key`.
    pub fn new(
        exchange: impl Into<String>,
        queue: impl Into<String>,
        routing_key: impl Into<String>,
    ) -> BindingDecl {
        BindingDecl {
            exchange: exchange.into(),
            queue: queue.into(),
            routing_key: routing_key.into(),
        }
    }
}

/// Everything a transport declared, in replay order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Topology {
    exchanges: BTreeMap<String, ExchangeDecl>,
    queues: BTreeMap<String, QueueDecl>,
    bindings: BTreeSet<BindingDecl>,
}

impl Topology {
    /// An empty topology.
    pub fn new() -> Topology {
        Topology::default()
    }

    /// The exchanges, by name.
    pub fn exchanges(&self) -> impl Iterator<Item = &ExchangeDecl> {
        self.exchanges.values()
    }

    /// The queues, by name.
    pub fn queues(&self) -> impl Iterator<Item = &QueueDecl> {
        self.queues.values()
    }

    /// The bindings.
    pub fn bindings(&self) -> impl Iterator<Item = &BindingDecl> {
        self.bindings.iter()
    }

    /// A queue by name.
    pub fn queue(&self, name: &str) -> Option<&QueueDecl> {
        self.queues.get(name)
    }

    /// The bindings of one queue.
    pub fn bindings_of<'a>(&'a self, queue: &'a str) -> impl Iterator<Item = &'a BindingDecl> {
        self.bindings.iter().filter(move |b| b.queue == queue)
    }

    /// Records an exchange (replacing one of the same name).
    pub fn add_exchange(&mut self, exchange: ExchangeDecl) {
        self.exchanges.insert(exchange.name.clone(), exchange);
    }

    /// Records a queue (replacing one of the same name).
    pub fn add_queue(&mut self, queue: QueueDecl) {
        self.queues.insert(queue.name.clone(), queue);
    }

    /// Records a binding.
    pub fn add_binding(&mut self, binding: BindingDecl) {
        self.bindings.insert(binding);
    }

    /// Forgets a binding.
    pub fn remove_binding(&mut self, binding: &BindingDecl) {
        self.bindings.remove(binding);
    }

    /// Adds everything `other` holds.
    pub fn merge(&mut self, other: Topology) {
        self.exchanges.extend(other.exchanges);
        self.queues.extend(other.queues);
        self.bindings.extend(other.bindings);
    }
}

fn exchange(name: &str, kind: &str) -> ExchangeDecl {
    ExchangeDecl {
        name: name.to_owned(),
        kind: kind.to_owned(),
        durable: true,
    }
}

fn durable_queue(name: &str, arguments: Headers) -> QueueDecl {
    QueueDecl {
        name: name.to_owned(),
        durable: true,
        exclusive: false,
        auto_delete: false,
        arguments,
    }
}

fn queue_type_argument(options: &AmqpOptions) -> Headers {
    let mut arguments = Headers::new();
    arguments.insert(
        QUEUE_TYPE.to_owned(),
        HeaderValue::Str(options.get_queue_type().as_str().to_owned()),
    );
    arguments
}

/// What every transport declares at connect: `mesh.events`, `mesh.rpc`, `mesh.events.dead`,
/// `mesh.retry`, `mesh.logs` and `mesh.replies` (durable topic exchanges; the retired direct
/// `mesh.reply` is not declared). No queue:
/// each reader of dead letters binds its own to `mesh.events.dead` ([`dead_queue`], or a
/// server-named tap), so none takes them from another (the shared `mesh.dead-letters` of old
/// is retired).
pub(crate) fn base(_options: &AmqpOptions) -> Topology {
    let mut topology = Topology::new();
    for name in [
        EVENTS_EXCHANGE,
        RPC_EXCHANGE,
        DEAD_EXCHANGE,
        RETRY_EXCHANGE,
        LOGS_EXCHANGE,
        REPLY_EXCHANGE,
    ] {
        topology.add_exchange(exchange(name, "topic"));
    }
    topology
}

/// A reader's own durable queue of dead letters (the audit logger's
/// `<node>.audit-logger.dead`). It has no dead-letter exchange and no delivery limit: a dead
/// letter's dead letter would loop, and a dead letter must never be dropped.
pub(crate) fn dead_queue(name: &str, options: &AmqpOptions) -> QueueDecl {
    durable_queue(name, queue_type_argument(options))
}

/// A consumer's durable queue: dead-lettered to `mesh.events.dead`, and on quorum queues
/// bounded by the delivery limit.
pub(crate) fn consumer_queue(name: &str, options: &AmqpOptions) -> QueueDecl {
    let mut arguments = queue_type_argument(options);
    arguments.insert(
        DEAD_LETTER_EXCHANGE.to_owned(),
        HeaderValue::Str(DEAD_EXCHANGE.to_owned()),
    );
    if options.get_queue_type() == QueueType::Quorum {
        arguments.insert(
            DELIVERY_LIMIT.to_owned(),
            HeaderValue::Int(i64::from(options.get_delivery_limit())),
        );
    }
    durable_queue(name, arguments)
}

/// The retry queue of one retry step of `queue`: a copy waits there, held by one of the
/// queue's retry forwarders for the step, which then publishes it through `mesh.retry`
/// under `queue`'s name, on which `queue` alone is bound ([`retry_bindings`]); see
/// `consumer::forward`. Only its queue type: no TTL and no dead-lettering, so no copy
/// depends on the broker's dead-letter worker (nor, on classic queues, on its at-most-once
/// dead-lettering).
pub(crate) fn retry_queue(queue: &str, delay: Duration, options: &AmqpOptions) -> QueueDecl {
    durable_queue(
        &naming::retry_queue(queue, delay),
        queue_type_argument(options),
    )
}

/// A retry queue as versions before the forwarders declared it: the copy expires after
/// `delay` (`x-message-ttl`) and the broker dead-letters it through `mesh.retry` under
/// `queue`'s name, at least once on quorum queues (`x-dead-letter-strategy =
/// at-least-once`, which requires `x-overflow = reject-publish`). Declared only where such
/// a queue exists already (the broker refuses other arguments for an existing queue); its
/// forwarders then take the copies before they expire, and the broker's expiry only brings
/// back those left waiting while no forwarder is attached.
pub(crate) fn legacy_retry_queue(queue: &str, delay: Duration, options: &AmqpOptions) -> QueueDecl {
    let mut arguments = queue_type_argument(options);
    let ttl = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
    arguments.insert(MESSAGE_TTL.to_owned(), HeaderValue::Int(ttl));
    arguments.insert(
        DEAD_LETTER_EXCHANGE.to_owned(),
        HeaderValue::Str(RETRY_EXCHANGE.to_owned()),
    );
    arguments.insert(
        DEAD_LETTER_ROUTING_KEY.to_owned(),
        HeaderValue::Str(queue.to_owned()),
    );
    if options.get_queue_type() == QueueType::Quorum {
        arguments.insert(
            DEAD_LETTER_STRATEGY.to_owned(),
            HeaderValue::Str("at-least-once".to_owned()),
        );
        arguments.insert(
            OVERFLOW.to_owned(),
            HeaderValue::Str("reject-publish".to_owned()),
        );
    }
    durable_queue(&naming::retry_queue(queue, delay), arguments)
}

/// The bindings of a retry ladder on `mesh.retry`: each retry queue on its own name (where
/// the consumer publishes its copies), and `queue` on its own name (where the retry queues
/// dead-letter them back). Names carry no wildcard, so each key routes to one queue.
pub(crate) fn retry_bindings(queue: &str, retries: &[QueueDecl]) -> Vec<BindingDecl> {
    std::iter::once(queue)
        .chain(retries.iter().map(|r| r.name.as_str()))
        .map(|name| BindingDecl::new(RETRY_EXCHANGE, name, name))
        .collect()
}

/// The durable queue `serve.<key>` the servers of a tool compete on. It has no dead-letter
/// exchange: a request nobody could answer is the caller's timeout, not an event to inspect.
pub(crate) fn serve_queue(name: &str, options: &AmqpOptions) -> QueueDecl {
    let mut arguments = queue_type_argument(options);
    if options.get_queue_type() == QueueType::Quorum {
        arguments.insert(
            DELIVERY_LIMIT.to_owned(),
            HeaderValue::Int(i64::from(options.get_delivery_limit())),
        );
    }
    durable_queue(name, arguments)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_topology_is_the_contract() {
        let topology = base(&AmqpOptions::default());
        let names: Vec<_> = topology.exchanges().map(|e| e.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "mesh.events",
                "mesh.events.dead",
                "mesh.logs",
                "mesh.replies",
                "mesh.retry",
                "mesh.rpc"
            ]
        );
        for exchange in topology.exchanges() {
            assert_eq!(exchange.kind, "topic", "{}", exchange.name);
            assert!(exchange.durable);
        }
        // The shared `mesh.dead-letters` is retired: readers of dead letters bind their own.
        assert_eq!(topology.queues().count(), 0);
        assert_eq!(topology.bindings().count(), 0);
    }

    #[test]
    fn dead_queues_are_durable_and_never_dead_lettered_nor_limited() {
        for options in [
            AmqpOptions::default().delivery_limit(7),
            AmqpOptions::default().queue_type(QueueType::Classic),
        ] {
            let q = dead_queue("n.audit-logger.dead", &options);
            assert_eq!(q.name, "n.audit-logger.dead");
            assert!(q.durable && !q.exclusive && !q.auto_delete);
            assert!(!q.arguments.contains_key(DEAD_LETTER_EXCHANGE));
            assert!(!q.arguments.contains_key(DELIVERY_LIMIT));
            assert_eq!(
                q.arguments[QUEUE_TYPE],
                HeaderValue::Str(options.get_queue_type().as_str().into())
            );
        }
    }

    #[test]
    fn consumer_queues_are_dead_lettered_and_limited_on_quorum() {
        let q = consumer_queue("n.m.events", &AmqpOptions::default().delivery_limit(7));
        assert_eq!(q.arguments[QUEUE_TYPE], HeaderValue::Str("quorum".into()));
        assert_eq!(
            q.arguments[DEAD_LETTER_EXCHANGE],
            HeaderValue::Str("mesh.events.dead".into())
        );
        assert_eq!(q.arguments[DELIVERY_LIMIT], HeaderValue::Int(7));

        let classic = AmqpOptions::default().queue_type(QueueType::Classic);
        let q = consumer_queue("n.m.events", &classic);
        assert_eq!(q.arguments[QUEUE_TYPE], HeaderValue::Str("classic".into()));
        assert!(!q.arguments.contains_key(DELIVERY_LIMIT));
    }

    #[test]
    fn retry_queues_return_to_their_queue_only() {
        // A retry queue has its queue type only: its forwarders bring the copies back.
        let q = retry_queue(
            "n.m.events",
            Duration::from_secs(5),
            &AmqpOptions::default(),
        );
        assert_eq!(q.name, "n.m.events.retry.5s");
        assert_eq!(
            q.arguments.keys().collect::<Vec<_>>(),
            [QUEUE_TYPE],
            "{:?}",
            q.arguments
        );
        assert_eq!(q.arguments[QUEUE_TYPE], HeaderValue::Str("quorum".into()));

        // One declared by an earlier version expires back through `mesh.retry`.
        let q = legacy_retry_queue(
            "n.m.events",
            Duration::from_secs(5),
            &AmqpOptions::default(),
        );
        assert_eq!(q.name, "n.m.events.retry.5s");
        assert_eq!(q.arguments[MESSAGE_TTL], HeaderValue::Int(5000));
        assert_eq!(
            q.arguments[DEAD_LETTER_EXCHANGE],
            HeaderValue::Str("mesh.retry".into())
        );
        assert_eq!(
            q.arguments[DEAD_LETTER_ROUTING_KEY],
            HeaderValue::Str("n.m.events".into())
        );
        assert_eq!(
            q.arguments[DEAD_LETTER_STRATEGY],
            HeaderValue::Str("at-least-once".into())
        );
        assert_eq!(
            q.arguments[OVERFLOW],
            HeaderValue::Str("reject-publish".into())
        );

        let classic = AmqpOptions::default().queue_type(QueueType::Classic);
        let legacy = legacy_retry_queue("n.m.events", Duration::from_millis(1500), &classic);
        assert!(!legacy.arguments.contains_key(DEAD_LETTER_STRATEGY));
        let q = retry_queue("n.m.events", Duration::from_millis(1500), &classic);
        assert_eq!(q.name, "n.m.events.retry.1500ms");
        assert_eq!(q.arguments[QUEUE_TYPE], HeaderValue::Str("classic".into()));

        let bindings = retry_bindings("n.m.events", &[q]);
        assert_eq!(
            bindings,
            [
                BindingDecl::new("mesh.retry", "n.m.events", "n.m.events"),
                BindingDecl::new(
                    "mesh.retry",
                    "n.m.events.retry.1500ms",
                    "n.m.events.retry.1500ms"
                ),
            ]
        );
    }

    #[test]
    fn topology_records_and_forgets() {
        let mut t = Topology::new();
        let b = BindingDecl::new("mesh.events", "q", "a.#");
        t.add_binding(b.clone());
        t.add_binding(BindingDecl::new("mesh.events", "other", "#"));
        assert_eq!(t.bindings_of("q").count(), 1);
        t.remove_binding(&b);
        assert_eq!(t.bindings_of("q").count(), 0);
        t.merge(base(&AmqpOptions::default()));
        assert_eq!(t.exchanges().count(), 6);
    }
}
