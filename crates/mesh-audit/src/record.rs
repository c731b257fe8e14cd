//! What the store returns and how it is asked: records of events and dead letters, the
//! queries over them, and the causation tree.

use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use mesh_core::{DeadReason, EventId, Timestamp};
use serde_json::Value;
use uuid::Uuid;

/// One event as the audit logger recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord {
    /// `x-event-id`: the primary key, so each event is stored once.
    pub id: EventId,
    /// The routing key: the event's type.
    pub routing_key: String,
    /// `x-source`.
    pub source: String,
    /// `x-node`.
    pub node: String,
    /// `x-time`, to the microsecond.
    pub time: Timestamp,
    /// `x-causation-id` (a UUID in its canonical lowercase form when it is one).
    pub causation_id: Option<String>,
    /// `x-schema` as stated; `None` means version 1.
    pub schema: Option<u32>,
    /// When the logger first stored it.
    pub received_at: Timestamp,
    /// Every header of the message as JSON (see the crate docs for the encoding).
    pub headers: Value,
    /// The body: the JSON text exactly as emitted.
    pub body: String,
    /// The broker-validated user that published it ([`mesh_core::codec::validated_user`]):
    /// the `user-id` property RabbitMQ checked against the publishing connection, or
    /// `x-mesh-user` on a copy mesh published on the original publisher's behalf (a retry
    /// copy). `None` when it carried neither, and for events stored before the store
    /// recorded publishers.
    pub publisher: Option<String>,
}

impl EventRecord {
    /// The body parsed as JSON.
    pub fn body_json(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(&self.body)
    }
}

/// An event that arrived with the id of a different stored event: another routing key,
/// source or body (a redelivery or a resend has the same). It is kept in full, apart from
/// the trail of events, rather than dropped as a duplicate.
#[derive(Debug, Clone, PartialEq)]
pub struct ConflictRecord {
    /// Its key: a UUID v5 of the event id, routing key, source and body's SHA-256, so the
    /// same conflicting event delivered again is stored once.
    pub id: Uuid,
    /// The event as it arrived. Its `id` is the id it reused, the key of the stored event it
    /// conflicts with ([`crate::Store::event`]); `received_at` is when it was first seen.
    pub event: EventRecord,
}

/// The key of a dead letter: a UUID derived from the dead letter's content, so a redelivered
/// dead letter is stored once while the same event dead-lettered again (after a re-drive) is
/// a row of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeadLetterId(pub(crate) Uuid);

impl DeadLetterId {
    /// The id as a UUID.
    pub fn as_uuid(&self) -> Uuid {
        self.0
    }
}

impl From<Uuid> for DeadLetterId {
    fn from(value: Uuid) -> Self {
        DeadLetterId(value)
    }
}

impl fmt::Display for DeadLetterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.hyphenated().fmt(f)
    }
}

impl FromStr for DeadLetterId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s).map(DeadLetterId)
    }
}

/// One dead letter as the store recorded it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetterRecord {
    /// Its key.
    pub id: DeadLetterId,
    /// `x-event-id`, when the message carries a well-formed one.
    pub event_id: Option<EventId>,
    /// The original routing key (a dead letter travels under its queue's name, with this
    /// in `x-mesh-routing-key`, restored on receipt).
    pub routing_key: String,
    /// Why it was set aside; `None` when the message carries no annotation mesh or the
    /// broker knows.
    pub reason: Option<DeadReason>,
    /// How many times handlers were called on it.
    pub attempts: u32,
    /// The last error, with its cause chain.
    pub last_error: Option<String>,
    /// The queue of the consumer that gave up: where a re-drive sends it.
    pub queue: Option<String>,
    /// When it was set aside.
    pub dead_at: Timestamp,
    /// When the store first recorded it.
    pub received_at: Timestamp,
    /// The `content_type` property.
    pub content_type: Option<String>,
    /// Every header, the dead-letter annotations included, as JSON.
    pub headers: Value,
    /// The body, byte for byte (a dead letter's body need not be JSON).
    pub body: Bytes,
    /// When it was last re-driven.
    pub redriven_at: Option<Timestamp>,
    /// How many times it was re-driven.
    pub redrive_count: u32,
    /// The dead letter's own `user-id` property: the broker user that published this copy
    /// (the consumer or audit logger that gave up on it; for a message the broker
    /// dead-lettered itself, the original publisher, whose properties it keeps). The
    /// original publisher of a copy mesh made is its `x-mesh-user` header, in
    /// [`headers`](DeadLetterRecord::headers). `None` when it carried none, and for dead
    /// letters stored before the store recorded it.
    pub user_id: Option<String>,
    /// Whether its claims (the queue that gave up on it, `x-mesh-user`) failed the
    /// provenance check of a logger enforcing identity
    /// ([`mesh_core::provenance::dead_letter_trusted`]): its publisher is not the owner of the
    /// queue it names. Such a dead letter is never re-driven as it is
    /// ([`RedriveOptions::strip_untrusted_claims`](crate::RedriveOptions)). `false` when no
    /// check was made (a logger not enforcing identity, rows stored before the check).
    pub untrusted: bool,
}

/// The order of query results, by time (then id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    /// Oldest first.
    Asc,
    /// Newest first (the default).
    #[default]
    Desc,
}

/// The default number of rows a query returns.
pub const DEFAULT_LIMIT: usize = 100;

/// Which events to list or count. Filters combine with AND; `since` is inclusive, `until`
/// exclusive.
///
/// ```
/// # use mesh_audit::{EventQuery, Order};
/// let query = EventQuery::new().pattern("module.umami.#").node("anchor").limit(20).order(Order::Asc);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventQuery {
    pub(crate) pattern: Option<String>,
    pub(crate) source: Option<String>,
    pub(crate) node: Option<String>,
    pub(crate) since: Option<Timestamp>,
    pub(crate) until: Option<Timestamp>,
    pub(crate) body: Option<String>,
    /// The pattern resolved by the store to the stored keys it matches (see
    /// `Store::resolved`): SQL then decides the pattern alone, through the key index.
    pub(crate) keys: Option<Vec<String>>,
    pub(crate) limit: usize,
    pub(crate) order: Order,
    pub(crate) after: Option<(Timestamp, EventId)>,
    pub(crate) read_limit: Option<usize>,
}

impl Default for EventQuery {
    fn default() -> Self {
        EventQuery {
            pattern: None,
            source: None,
            node: None,
            since: None,
            until: None,
            body: None,
            keys: None,
            limit: DEFAULT_LIMIT,
            order: Order::Desc,
            after: None,
            read_limit: None,
        }
    }
}

impl EventQuery {
    /// Every event, newest first, at most [`DEFAULT_LIMIT`].
    pub fn new() -> EventQuery {
        EventQuery::default()
    }

    /// Routing keys matching a topic pattern, exactly as the broker routes
    /// ([`mesh_core::topic_matches`]): `*` one word, `#` zero or more.
    pub fn pattern(mut self, pattern: impl Into<String>) -> Self {
        self.pattern = Some(pattern.into());
        self.keys = None;
        self
    }

    /// Emitted by this source.
    pub fn source(mut self, source: impl Into<String>) -> Self {
        self.source = Some(source.into());
        self
    }

    /// Emitted from this node.
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// Emitted at or after `time`.
    pub fn since(mut self, time: Timestamp) -> Self {
        self.since = Some(time);
        self
    }

    /// Emitted before `time`.
    pub fn until(mut self, time: Timestamp) -> Self {
        self.until = Some(time);
        self
    }

    /// Whose body holds these words, in this order, next to each other (a phrase): words as
    /// the store's full-text index splits the body's JSON text (keys and values, letters and
    /// digits, case ignored; see decision 0030), in its first 100,000 characters. Any text is
    /// searched literally, never parsed as a query language; a text of more than
    /// [`crate::MAX_BODY_SEARCH`] characters is refused, and one with no word matches
    /// nothing. Searches stored events only ([`crate::Store::conflicts`] refuses it).
    pub fn body(mut self, text: impl Into<String>) -> Self {
        self.body = Some(text.into());
        self
    }

    /// At most `limit` events (ignored by counts).
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// The order by emit time.
    pub fn order(mut self, order: Order) -> Self {
        self.order = order;
        self
    }

    /// Only the events after the one emitted at `time` with id `id`, in the query's order
    /// (by time, then id): the keyset cursor of the next page is the last event of the page
    /// before, so paging never skips or repeats an event, whatever is stored meanwhile
    /// (ignored by counts).
    ///
    /// ```
    /// # use mesh_audit::{EventQuery, Order};
    /// # fn next(last: &mesh_audit::EventRecord) -> EventQuery {
    /// EventQuery::new().order(Order::Asc).limit(50).after(last.time, last.id)
    /// # }
    /// ```
    pub fn after(mut self, time: Timestamp, id: EventId) -> Self {
        self.after = Some((time, id));
        self
    }

    /// Reads at most `rows` stored events to answer (ignored by counts). A wildcard pattern is
    /// resolved to the stored keys it matches when the store holds at most 1,000 keys; in a
    /// larger store it is matched on each row read, so one that matches few events would
    /// otherwise read every row; with a read limit the search stops there and
    /// [`crate::Store::search`] says after which event to go on.
    pub fn read_limit(mut self, rows: usize) -> Self {
        self.read_limit = Some(rows);
        self
    }
}

/// What [`crate::Store::search`] found.
#[derive(Debug, Clone, PartialEq)]
pub struct Found {
    /// The matching events, in the query's order, at most its limit.
    pub events: Vec<EventRecord>,
    /// How many stored events were read to find them.
    pub read: u64,
    /// Set when the query's read limit stopped the search before it filled its limit or ran
    /// out of events: the last event read, whose time and id are the cursor
    /// ([`EventQuery::after`]) that goes on where this search stopped.
    pub stopped_after: Option<(Timestamp, EventId)>,
}

/// The dead letters of one queue and reason ([`crate::Store::dead_letter_groups`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterGroup {
    /// The queue of the consumer that gave up (`None`: none recorded).
    pub queue: Option<String>,
    /// Why they were set aside (`None`: no annotation mesh or the broker knows).
    pub reason: Option<DeadReason>,
    /// How many dead letters.
    pub count: u64,
    /// How many of them were never re-driven.
    pub pending: u64,
}

/// Which dead letters to list, count or re-drive. Filters combine with AND; `since` is
/// inclusive, `until` exclusive (both on the time it was set aside).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterQuery {
    pub(crate) queue: Option<String>,
    pub(crate) reason: Option<DeadReason>,
    pub(crate) event_id: Option<EventId>,
    pub(crate) since: Option<Timestamp>,
    pub(crate) until: Option<Timestamp>,
    pub(crate) redriven: Option<bool>,
    pub(crate) limit: usize,
    pub(crate) order: Order,
    pub(crate) after: Option<(Timestamp, DeadLetterId)>,
}

impl Default for DeadLetterQuery {
    fn default() -> Self {
        DeadLetterQuery {
            queue: None,
            reason: None,
            event_id: None,
            since: None,
            until: None,
            redriven: None,
            limit: DEFAULT_LIMIT,
            order: Order::Desc,
            after: None,
        }
    }
}

impl DeadLetterQuery {
    /// Every dead letter, newest first, at most [`DEFAULT_LIMIT`].
    pub fn new() -> DeadLetterQuery {
        DeadLetterQuery::default()
    }

    /// Set aside by the consumer of this queue.
    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    /// Set aside for this reason.
    pub fn reason(mut self, reason: DeadReason) -> Self {
        self.reason = Some(reason);
        self
    }

    /// Of this event.
    pub fn event_id(mut self, id: EventId) -> Self {
        self.event_id = Some(id);
        self
    }

    /// Set aside at or after `time`.
    pub fn since(mut self, time: Timestamp) -> Self {
        self.since = Some(time);
        self
    }

    /// Set aside before `time`.
    pub fn until(mut self, time: Timestamp) -> Self {
        self.until = Some(time);
        self
    }

    /// Only those re-driven (`true`) or not yet re-driven (`false`).
    pub fn redriven(mut self, redriven: bool) -> Self {
        self.redriven = Some(redriven);
        self
    }

    /// At most `limit` dead letters (ignored by counts).
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }

    /// The order by the time they were set aside.
    pub fn order(mut self, order: Order) -> Self {
        self.order = order;
        self
    }

    /// Only those after the dead letter set aside at `time` with id `id`, in the query's
    /// order: a keyset cursor, so paging never skips nor repeats a dead letter, however many
    /// arrive meanwhile. Lists and re-drives ([`crate::Redrive::Matching`]) honour it;
    /// counts, groups and purges ignore it, as they ignore the limit.
    ///
    /// ```
    /// # use mesh_audit::{DeadLetterQuery, Order};
    /// # fn next(last: &mesh_audit::DeadLetterRecord) -> DeadLetterQuery {
    /// DeadLetterQuery::new().order(Order::Asc).limit(50).after(last.dead_at, last.id)
    /// # }
    /// ```
    pub fn after(mut self, time: Timestamp, id: DeadLetterId) -> Self {
        self.after = Some((time, id));
        self
    }
}

/// How many rows the store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Counts {
    /// Events.
    pub events: u64,
    /// Dead letters.
    pub dead_letters: u64,
    /// Dead letters never re-driven.
    pub dead_letters_pending: u64,
    /// Events that reused the id of a different stored event ([`ConflictRecord`]).
    pub conflicts: u64,
}

/// How many events one source emitted under one routing key ([`crate::Store::event_flows`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flow {
    /// The `x-source` of the events.
    pub source: String,
    /// Their routing key.
    pub key: String,
    /// How many.
    pub events: u64,
}

/// An event and what it caused.
#[derive(Debug, Clone, PartialEq)]
pub struct CausationNode {
    /// The event.
    pub event: EventRecord,
    /// The events whose `x-causation-id` is this event's id, oldest first.
    pub children: Vec<CausationNode>,
}

/// The causation tree of an event: its causes up to the oldest one recorded (the root), and
/// everything it caused, transitively.
///
/// From the root down to the event asked about (the focus), each level holds only the cause
/// of the next, not its other effects; below the focus, every effect is included.
#[derive(Debug, Clone, PartialEq)]
pub struct CausationTree {
    /// The oldest cause recorded (the focus itself when it has no recorded cause).
    pub root: CausationNode,
    /// The event asked about.
    pub focus: EventId,
    /// The root's own `x-causation-id` when that cause is not in the store (a tool call, or
    /// an event emitted before the logger ran).
    pub missing_cause: Option<String>,
    /// Whether the tree was cut at [`MAX_TREE_NODES`] events.
    pub truncated: bool,
}

/// The most events a causation tree holds; larger trees are cut and marked truncated.
pub const MAX_TREE_NODES: usize = 10_000;

impl CausationTree {
    /// The node of event `id`, if it is in the tree.
    pub fn find(&self, id: EventId) -> Option<&CausationNode> {
        fn walk(node: &CausationNode, id: EventId) -> Option<&CausationNode> {
            if node.event.id == id {
                return Some(node);
            }
            node.children.iter().find_map(|child| walk(child, id))
        }
        walk(&self.root, id)
    }

    /// Every event of the tree, depth first from the root.
    pub fn events(&self) -> Vec<&EventRecord> {
        fn walk<'a>(node: &'a CausationNode, out: &mut Vec<&'a EventRecord>) {
            out.push(&node.event);
            for child in &node.children {
                walk(child, out);
            }
        }
        let mut out = Vec::new();
        walk(&self.root, &mut out);
        out
    }

    /// The number of events in the tree.
    pub fn len(&self) -> usize {
        self.events().len()
    }

    /// Always false: a tree holds at least its focus.
    pub fn is_empty(&self) -> bool {
        false
    }
}
