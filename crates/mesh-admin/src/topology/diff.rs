//! Comparing what the contract wants with what the broker has, as a list of differences.
//!
//! The retired queue `mesh.dead-letters` is a difference while it exists: its bindings are
//! not wanted (apply removes them, so it stops collecting dead letters nobody reads), and
//! the queue itself is left for an audit logger, which stores what it holds and deletes it
//! at its next start. `topology apply` never deletes it: it may hold dead letters.
//!
//! Retired delay queues (`<queue>.delay.<step>`, see `naming::is_retired_delay_queue`) are a
//! difference while they exist: nothing publishes to them any more, and what they hold
//! expires back into its queue. `topology apply` deletes one that holds no message and has no
//! consumer (counts checked first: quorum queues refuse a conditional `DELETE`), and leaves
//! the others draining.
//!
//! The retired direct exchange `mesh.reply` is a difference while it exists (whatever its
//! type: a passive declare finds it, so the runtime would never say): `topology apply`
//! deletes it, last, once `mesh.replies` exists and no reply queue of a caller of an earlier
//! version (bound on its own name) is bound to it.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use mesh_core::naming::{
    self, DEAD_EXCHANGE, REPLY_EXCHANGE, RETIRED_DEAD_QUEUE, RETIRED_REPLY_EXCHANGE,
};

use super::foreign::{foreign_bindings, ForeignBinding};
use super::wanted::{Wanted, WantedQueue};
use crate::management::{BindingRow, ExchangeRow, QueueRow};

/// What the broker has, as the management API lists it.
#[derive(Debug, Clone, Default)]
pub struct Actual {
    /// Its exchanges.
    pub exchanges: Vec<ExchangeRow>,
    /// Its queues.
    pub queues: Vec<QueueRow>,
    /// Its bindings.
    pub bindings: Vec<BindingRow>,
}

impl Actual {
    /// The queue `name`, if the broker has it.
    pub fn queue(&self, name: &str) -> Option<&QueueRow> {
        self.queues.iter().find(|q| q.name == name)
    }

    fn exchange(&self, name: &str) -> Option<&ExchangeRow> {
        self.exchanges.iter().find(|e| e.name == name)
    }

    /// The plain (argument-less) bindings of `queue` from `exchange`: the ones mesh makes.
    fn bindings_of<'a>(
        &'a self,
        exchange: &'a str,
        queue: &'a str,
    ) -> impl Iterator<Item = &'a BindingRow> {
        self.bindings.iter().filter(move |b| {
            b.source == exchange
                && b.destination == queue
                && b.destination_type == "queue"
                && b.arguments.is_empty()
        })
    }
}

/// One setting of a queue or exchange that differs.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Setting {
    /// An `x-` argument, or `durable`, `exclusive`, `auto_delete`, `internal`, `type`.
    pub name: String,
    /// What the contract wants (`None`: absent).
    pub want: Option<Value>,
    /// What the broker has (`None`: absent).
    pub have: Option<Value>,
}

/// One difference between the contract and the broker.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Difference {
    /// A wanted exchange the broker does not have.
    MissingExchange {
        /// Its name.
        name: String,
        /// Its wanted type.
        kind: String,
    },
    /// An exchange of the wrong type or durability: never replaced by mesh.
    ExchangeDiffers {
        /// Its name.
        name: String,
        /// What differs.
        settings: Vec<Setting>,
    },
    /// A wanted queue the broker does not have.
    MissingQueue {
        /// Its name.
        name: String,
        /// Its wanted arguments.
        arguments: Map<String, Value>,
    },
    /// A queue whose arguments differ: replacing it deletes what it holds.
    QueueDiffers {
        /// Its name.
        name: String,
        /// What differs.
        settings: Vec<Setting>,
        /// Its messages at the last statistics sample (`None`: unknown).
        messages: Option<u64>,
        /// Its wanted arguments, to declare it again with.
        arguments: Map<String, Value>,
    },
    /// A wanted binding the broker does not have.
    MissingBinding {
        /// The exchange it binds from.
        exchange: String,
        /// The queue it binds.
        queue: String,
        /// Its binding key.
        routing_key: String,
    },
    /// A binding of a wanted queue (or of the retired queue) that the contract does not ask
    /// for.
    ExtraBinding {
        /// The exchange it binds from.
        exchange: String,
        /// The queue it binds.
        queue: String,
        /// Its binding key.
        routing_key: String,
        /// How the management API names it, to delete it.
        properties_key: String,
    },
    /// The retired `mesh.dead-letters` still exists: left for an audit logger to drain and
    /// delete, never deleted here.
    RetiredQueue {
        /// Its name.
        name: String,
        /// Its messages at the last statistics sample (`None`: unknown).
        messages: Option<u64>,
    },
    /// A retired delay queue `<queue>.delay.<step>` still exists: deleted by apply once it
    /// is empty and unused.
    RetiredDelayQueue {
        /// Its name.
        name: String,
        /// Its messages at the last statistics sample (`None`: unknown).
        messages: Option<u64>,
        /// Its consumers (`None`: unknown).
        consumers: Option<u64>,
    },
    /// A binding on (from or to) a mesh exchange that the contract does not explain (see
    /// [`foreign_bindings`]): apply removes it.
    ForeignBinding(ForeignBinding),
    /// The retired direct `mesh.reply` still exists (a deployment not yet migrated to
    /// `mesh.replies`): apply deletes it once no caller of an earlier version is bound to it
    /// (see `docs/CONTRACT.md`, "From mesh.reply to mesh.replies").
    RetiredExchange {
        /// Its name.
        name: String,
        /// Its type on the broker.
        kind: String,
        /// Reply queues of callers of an earlier version bound to it (on their own name).
        earlier_callers: usize,
    },
}

impl Difference {
    /// `+`, `~` or `-`.
    pub fn sign(&self) -> char {
        match self {
            Difference::MissingExchange { .. }
            | Difference::MissingQueue { .. }
            | Difference::MissingBinding { .. } => '+',
            Difference::ExchangeDiffers { .. } | Difference::QueueDiffers { .. } => '~',
            Difference::ExtraBinding { .. }
            | Difference::RetiredQueue { .. }
            | Difference::RetiredDelayQueue { .. }
            | Difference::RetiredExchange { .. }
            | Difference::ForeignBinding(_) => '-',
        }
    }

    /// One line of text, without the sign.
    pub fn describe(&self) -> String {
        match self {
            Difference::MissingExchange { name, kind } => {
                format!("exchange {name} ({kind}, durable) is missing")
            }
            Difference::ExchangeDiffers { name, settings } => {
                format!("exchange {name} differs: {}", describe_settings(settings))
            }
            Difference::MissingQueue { name, arguments } => {
                format!(
                    "queue {name} ({}) is missing",
                    describe_arguments(arguments)
                )
            }
            Difference::QueueDiffers {
                name,
                settings,
                messages,
                ..
            } => format!(
                "queue {name} differs: {}; replacing it deletes {}",
                describe_settings(settings),
                describe_messages(*messages)
            ),
            Difference::MissingBinding {
                exchange,
                queue,
                routing_key,
            } => format!("binding {exchange} -> {queue} on `{routing_key}` is missing"),
            Difference::ExtraBinding {
                exchange,
                queue,
                routing_key,
                ..
            } => format!("binding {exchange} -> {queue} on `{routing_key}` is not wanted"),
            Difference::RetiredQueue { name, messages } => format!(
                "queue {name} is retired and holds {}: an audit logger stores them and deletes \
                 it at its next start",
                match messages {
                    Some(1) => "1 message".to_owned(),
                    Some(n) => format!("{n} messages"),
                    None => "an unknown number of messages".to_owned(),
                }
            ),
            Difference::RetiredDelayQueue {
                name,
                messages,
                consumers,
            } => {
                if self.is_deletable() {
                    format!("delay queue {name} is retired and empty: apply deletes it")
                } else {
                    format!(
                        "delay queue {name} is retired and still draining ({} messages, {} \
                         consumers): apply deletes it once empty",
                        count(*messages),
                        count(*consumers)
                    )
                }
            }
            Difference::ForeignBinding(binding) => binding.describe(),
            Difference::RetiredExchange {
                name,
                kind,
                earlier_callers,
            } => {
                if self.is_deletable() {
                    format!(
                        "exchange {name} ({kind}) is retired, replaced by {REPLY_EXCHANGE} \
                         (topic): apply deletes it"
                    )
                } else {
                    format!(
                        "exchange {name} ({kind}) is retired, replaced by {REPLY_EXCHANGE} \
                         (topic), and {earlier_callers} caller(s) of an earlier version still \
                         wait there: apply deletes it once they are upgraded"
                    )
                }
            }
        }
    }

    /// A retired delay queue with no message and no consumer, as last sampled, or the
    /// retired `mesh.reply` with no caller of an earlier version bound.
    pub fn is_deletable(&self) -> bool {
        matches!(
            self,
            Difference::RetiredDelayQueue {
                messages: Some(0),
                consumers: Some(0),
                ..
            } | Difference::RetiredExchange {
                earlier_callers: 0,
                ..
            }
        )
    }

    /// As JSON.
    pub fn to_json(&self) -> Value {
        let settings_json = |settings: &[Setting]| -> Value {
            settings
                .iter()
                .map(|s| json!({"name": s.name, "want": s.want, "have": s.have}))
                .collect()
        };
        match self {
            Difference::MissingExchange { name, kind } => {
                json!({"kind": "missing-exchange", "exchange": name, "type": kind})
            }
            Difference::ExchangeDiffers { name, settings } => json!({
                "kind": "exchange-differs", "exchange": name, "settings": settings_json(settings)
            }),
            Difference::MissingQueue { name, arguments } => {
                json!({"kind": "missing-queue", "queue": name, "arguments": arguments})
            }
            Difference::QueueDiffers {
                name,
                settings,
                messages,
                ..
            } => json!({
                "kind": "queue-differs", "queue": name, "settings": settings_json(settings),
                "messages": messages
            }),
            Difference::MissingBinding {
                exchange,
                queue,
                routing_key,
            } => json!({
                "kind": "missing-binding", "exchange": exchange, "queue": queue,
                "routing_key": routing_key
            }),
            Difference::ExtraBinding {
                exchange,
                queue,
                routing_key,
                ..
            } => json!({
                "kind": "extra-binding", "exchange": exchange, "queue": queue,
                "routing_key": routing_key
            }),
            Difference::RetiredQueue { name, messages } => json!({
                "kind": "retired-queue", "queue": name, "messages": messages
            }),
            Difference::RetiredDelayQueue {
                name,
                messages,
                consumers,
            } => json!({
                "kind": "retired-delay-queue", "queue": name, "messages": messages,
                "consumers": consumers
            }),
            Difference::ForeignBinding(binding) => binding.to_json(),
            Difference::RetiredExchange {
                name,
                kind,
                earlier_callers,
            } => json!({
                "kind": "retired-exchange", "exchange": name, "type": kind,
                "earlier_callers": earlier_callers
            }),
        }
    }
}

fn count(value: Option<u64>) -> String {
    value.map_or_else(|| "unknown".to_owned(), |n| n.to_string())
}

fn describe_messages(messages: Option<u64>) -> String {
    match messages {
        Some(1) => "the 1 message it holds".to_owned(),
        Some(n) => format!("the {n} messages it holds"),
        None => "the messages it holds (how many is not known yet)".to_owned(),
    }
}

fn show(value: Option<&Value>) -> String {
    match value {
        None => "none".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn describe_settings(settings: &[Setting]) -> String {
    settings
        .iter()
        .map(|s| {
            format!(
                "{} wants {}, has {}",
                s.name,
                show(s.want.as_ref()),
                show(s.have.as_ref())
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Arguments as `name=value, …`, in their order (a string without its quotes).
pub fn describe_arguments(arguments: &Map<String, Value>) -> String {
    arguments
        .iter()
        .map(|(k, v)| format!("{k}={}", show(Some(v))))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether two argument values are the same to the broker (`20` and `20.0` are).
fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// The settings of `have` that differ from `want`.
pub fn compare_queue(want: &WantedQueue, have: &QueueRow) -> Vec<Setting> {
    let mut settings = Vec::new();
    for (name, wanted, actual) in [
        ("durable", true, have.durable),
        ("exclusive", false, have.exclusive),
        ("auto_delete", false, have.auto_delete),
    ] {
        if wanted != actual {
            settings.push(Setting {
                name: name.to_owned(),
                want: Some(Value::Bool(wanted)),
                have: Some(Value::Bool(actual)),
            });
        }
    }
    let names: BTreeSet<&String> = want.arguments.keys().chain(have.arguments.keys()).collect();
    for name in names {
        let wanted = want.arguments.get(name);
        let mut actual = have.arguments.get(name).cloned();
        // A queue declared without `x-queue-type` still has a type.
        if name == "x-queue-type" && actual.is_none() {
            actual = have.kind.clone().map(Value::String);
        }
        let equal = match (wanted, &actual) {
            (Some(w), Some(a)) => same(w, a),
            (None, None) => true,
            _ => false,
        };
        if !equal {
            settings.push(Setting {
                name: name.clone(),
                want: wanted.cloned(),
                have: actual,
            });
        }
    }
    settings
}

/// Every difference, in the order `topology apply` fixes them: exchanges, queues, bindings
/// (then the retired queues, then the foreign bindings).
pub fn differences(wanted: &Wanted, actual: &Actual) -> Vec<Difference> {
    let mut out = Vec::new();
    for exchange in &wanted.exchanges {
        match actual.exchange(&exchange.name) {
            None => out.push(Difference::MissingExchange {
                name: exchange.name.clone(),
                kind: exchange.kind.clone(),
            }),
            Some(have) => {
                let mut settings = Vec::new();
                if have.kind != exchange.kind {
                    settings.push(Setting {
                        name: "type".into(),
                        want: Some(Value::from(exchange.kind.clone())),
                        have: Some(Value::from(have.kind.clone())),
                    });
                }
                if !have.durable {
                    settings.push(Setting {
                        name: "durable".into(),
                        want: Some(Value::Bool(true)),
                        have: Some(Value::Bool(false)),
                    });
                }
                if have.auto_delete || have.internal {
                    let name = if have.internal {
                        "internal"
                    } else {
                        "auto_delete"
                    };
                    settings.push(Setting {
                        name: name.into(),
                        want: Some(Value::Bool(false)),
                        have: Some(Value::Bool(true)),
                    });
                }
                if !settings.is_empty() {
                    out.push(Difference::ExchangeDiffers {
                        name: exchange.name.clone(),
                        settings,
                    });
                }
            }
        }
    }
    for queue in &wanted.queues {
        match actual.queue(&queue.name) {
            None => out.push(Difference::MissingQueue {
                name: queue.name.clone(),
                arguments: queue.arguments.clone(),
            }),
            Some(have) => {
                let settings = compare_queue(queue, have);
                if !settings.is_empty() {
                    out.push(Difference::QueueDiffers {
                        name: queue.name.clone(),
                        settings,
                        messages: have.messages,
                        arguments: queue.arguments.clone(),
                    });
                }
            }
        }
    }
    for queue in &wanted.queues {
        let have: Vec<&BindingRow> = actual.bindings_of(&queue.exchange, &queue.name).collect();
        for pattern in &queue.patterns {
            if !have.iter().any(|b| &b.routing_key == pattern) {
                out.push(Difference::MissingBinding {
                    exchange: queue.exchange.clone(),
                    queue: queue.name.clone(),
                    routing_key: pattern.clone(),
                });
            }
        }
        for binding in have {
            if !queue.patterns.contains(&binding.routing_key) {
                out.push(Difference::ExtraBinding {
                    exchange: binding.source.clone(),
                    queue: binding.destination.clone(),
                    routing_key: binding.routing_key.clone(),
                    properties_key: binding.properties_key.clone(),
                });
            }
        }
    }
    if let Some(retired) = actual.queue(RETIRED_DEAD_QUEUE) {
        for binding in actual.bindings_of(DEAD_EXCHANGE, RETIRED_DEAD_QUEUE) {
            out.push(Difference::ExtraBinding {
                exchange: binding.source.clone(),
                queue: binding.destination.clone(),
                routing_key: binding.routing_key.clone(),
                properties_key: binding.properties_key.clone(),
            });
        }
        out.push(Difference::RetiredQueue {
            name: RETIRED_DEAD_QUEUE.to_owned(),
            messages: retired.messages,
        });
    }
    for queue in &actual.queues {
        if naming::is_retired_delay_queue(&queue.name) {
            out.push(Difference::RetiredDelayQueue {
                name: queue.name.clone(),
                messages: queue.messages,
                consumers: queue.consumers,
            });
        }
    }
    // The bindings of a wanted queue from its exchange are compared above, pattern by
    // pattern: the others on a mesh exchange must be explained by the contract.
    let compared = |b: &BindingRow| {
        wanted.queues.iter().any(|q| {
            b.source == q.exchange
                && b.destination == q.name
                && b.destination_type == "queue"
                && b.arguments.is_empty()
        })
    };
    let unexplained: Vec<BindingRow> = actual
        .bindings
        .iter()
        .filter(|b| !compared(b))
        .cloned()
        .collect();
    out.extend(
        foreign_bindings(&unexplained)
            .into_iter()
            .map(Difference::ForeignBinding),
    );
    // Last: deleting it takes its bindings, so the foreign ones are removed first.
    if let Some(retired) = actual.exchange(RETIRED_REPLY_EXCHANGE) {
        out.push(Difference::RetiredExchange {
            name: retired.name.clone(),
            kind: retired.kind.clone(),
            earlier_callers: actual
                .bindings
                .iter()
                .filter(|b| {
                    b.source == RETIRED_REPLY_EXCHANGE
                        && b.destination_type == "queue"
                        && b.routing_key == b.destination
                })
                .count(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::topology::WantedExchange;
    use mesh_core::Name;

    fn wanted() -> Wanted {
        // A quorum consumer queue's arguments, as `mesh topology` wants them.
        let arguments = json!({
            "x-queue-type": "quorum", "x-dead-letter-exchange": "mesh.events.dead",
            "x-delivery-limit": 20
        });
        Wanted {
            node: Name::parse("n").unwrap(),
            exchanges: vec![WantedExchange {
                name: "mesh.events".into(),
                kind: "topic".into(),
            }],
            queues: vec![WantedQueue {
                name: "n.m.events".into(),
                arguments: arguments.as_object().cloned().unwrap(),
                exchange: "mesh.events".into(),
                patterns: vec!["a.#".into(), "b.*".into()],
            }],
        }
    }

    // The rows are `#[non_exhaustive]`: built as the API would send them.
    fn queue(arguments: &Value, kind: &str) -> QueueRow {
        serde_json::from_value(json!({
            "name": "n.m.events", "durable": true, "auto_delete": false, "exclusive": false,
            "arguments": arguments.as_object().cloned().unwrap_or_default(), "type": kind,
            "messages": 3, "messages_ready": 3, "messages_unacknowledged": 0, "consumers": 0
        }))
        .unwrap()
    }

    fn binding(key: &str) -> BindingRow {
        serde_json::from_value(json!({
            "source": "mesh.events", "destination": "n.m.events", "destination_type": "queue",
            "routing_key": key, "arguments": {}, "properties_key": key
        }))
        .unwrap()
    }

    fn exchange() -> ExchangeRow {
        serde_json::from_value(json!({
            "name": "mesh.events", "type": "topic", "durable": true, "auto_delete": false,
            "internal": false
        }))
        .unwrap()
    }

    #[test]
    fn an_agreeing_broker_has_no_difference() {
        let actual = Actual {
            exchanges: vec![exchange()],
            queues: vec![queue(
                &json!({"x-queue-type": "quorum", "x-dead-letter-exchange": "mesh.events.dead", "x-delivery-limit": 20}),
                "quorum",
            )],
            bindings: vec![binding("a.#"), binding("b.*")],
        };
        assert_eq!(differences(&wanted(), &actual), []);
    }

    #[test]
    fn each_difference_is_listed_once() {
        let actual = Actual {
            exchanges: vec![],
            queues: vec![queue(
                &json!({"x-dead-letter-exchange": "mesh.events.dead"}),
                "classic",
            )],
            bindings: vec![binding("a.#"), binding("old.#")],
        };
        let diffs = differences(&wanted(), &actual);
        assert_eq!(diffs.len(), 4, "{diffs:#?}");
        assert!(
            matches!(&diffs[0], Difference::MissingExchange { name, .. } if name == "mesh.events")
        );
        match &diffs[1] {
            Difference::QueueDiffers {
                settings, messages, ..
            } => {
                assert_eq!(*messages, Some(3));
                let names: Vec<_> = settings.iter().map(|s| s.name.as_str()).collect();
                assert_eq!(names, ["x-delivery-limit", "x-queue-type"]);
                assert_eq!(settings[1].have, Some(json!("classic")));
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(&diffs[2], Difference::MissingBinding { routing_key, .. } if routing_key == "b.*")
        );
        assert!(
            matches!(&diffs[3], Difference::ExtraBinding { routing_key, .. } if routing_key == "old.#")
        );
        assert!(diffs[1].describe().contains("the 3 messages it holds"));
    }

    #[test]
    fn the_retired_queue_is_unbound_and_left_for_the_audit_logger() {
        let mut retired = queue(&json!({"x-queue-type": "quorum"}), "quorum");
        retired = serde_json::from_value(json!({
            "name": "mesh.dead-letters", "durable": true, "auto_delete": false,
            "exclusive": false, "arguments": {"x-queue-type": "quorum"}, "type": "quorum",
            "messages": 5, "messages_ready": 5, "messages_unacknowledged": 0, "consumers": 0
        }))
        .unwrap_or(retired);
        let bound: BindingRow = serde_json::from_value(json!({
            "source": "mesh.events.dead", "destination": "mesh.dead-letters",
            "destination_type": "queue", "routing_key": "#", "arguments": {},
            "properties_key": "%23"
        }))
        .unwrap();
        let actual = Actual {
            exchanges: vec![exchange()],
            queues: vec![
                queue(
                    &json!({"x-queue-type": "quorum", "x-dead-letter-exchange": "mesh.events.dead", "x-delivery-limit": 20}),
                    "quorum",
                ),
                retired,
            ],
            bindings: vec![binding("a.#"), binding("b.*"), bound],
        };
        let diffs = differences(&wanted(), &actual);
        assert_eq!(diffs.len(), 2, "{diffs:#?}");
        assert!(
            matches!(&diffs[0], Difference::ExtraBinding { exchange, queue, properties_key, .. }
            if exchange == "mesh.events.dead" && queue == "mesh.dead-letters" && properties_key == "%23")
        );
        assert_eq!(
            diffs[1],
            Difference::RetiredQueue {
                name: "mesh.dead-letters".into(),
                messages: Some(5)
            }
        );
        assert_eq!(diffs[1].sign(), '-');
        assert!(diffs[1].describe().contains("holds 5 messages"));
        assert_eq!(diffs[1].to_json()["kind"], "retired-queue");
    }

    #[test]
    fn retired_delay_queues_are_listed_and_deletable_once_empty() {
        let delay = |name: &str, messages: u64, consumers: u64| -> QueueRow {
            serde_json::from_value(json!({
                "name": name, "durable": true, "auto_delete": false, "exclusive": false,
                "arguments": {}, "type": "quorum", "messages": messages, "consumers": consumers
            }))
            .unwrap()
        };
        let actual = Actual {
            exchanges: vec![exchange()],
            queues: vec![
                queue(
                    &json!({"x-queue-type": "quorum", "x-dead-letter-exchange": "mesh.events.dead", "x-delivery-limit": 20}),
                    "quorum",
                ),
                delay("n.m.events.delay.5s", 0, 0),
                delay("n.m.events.delay.1m", 2, 0),
                delay("n.m.events.retry.5s", 0, 0),
            ],
            bindings: vec![binding("a.#"), binding("b.*")],
        };
        let diffs = differences(&wanted(), &actual);
        assert_eq!(diffs.len(), 2, "{diffs:#?}");
        assert!(diffs[0].is_deletable());
        assert!(diffs[0].describe().contains("apply deletes it"));
        assert!(!diffs[1].is_deletable());
        assert!(diffs[1].describe().contains("still draining (2 messages"));
        assert_eq!(diffs[1].to_json()["kind"], "retired-delay-queue");
        assert_eq!(diffs[1].sign(), '-');
    }

    #[test]
    fn the_retired_reply_exchange_goes_once_no_earlier_caller_waits_there() {
        let retired: ExchangeRow = serde_json::from_value(json!({
            "name": "mesh.reply", "type": "direct", "durable": true, "auto_delete": false,
            "internal": false
        }))
        .unwrap();
        let reply = |key: &str| -> BindingRow {
            serde_json::from_value(json!({
                "source": "mesh.reply", "destination": "amq.gen-r1", "destination_type": "queue",
                "routing_key": key, "arguments": {}, "properties_key": key
            }))
            .unwrap()
        };
        let agreeing = queue(
            &json!({"x-queue-type": "quorum", "x-dead-letter-exchange": "mesh.events.dead", "x-delivery-limit": 20}),
            "quorum",
        );
        // An upgraded caller's binding (its reply key) does not keep it.
        let actual = Actual {
            exchanges: vec![exchange(), retired.clone()],
            queues: vec![agreeing.clone()],
            bindings: vec![binding("a.#"), binding("b.*"), reply("guest.amq.gen-r1")],
        };
        let diffs = differences(&wanted(), &actual);
        assert_eq!(diffs.len(), 1, "{diffs:#?}");
        assert!(diffs[0].is_deletable());
        assert_eq!(diffs[0].sign(), '-');
        assert!(
            diffs[0].describe().contains("apply deletes it"),
            "{}",
            diffs[0].describe()
        );
        assert_eq!(diffs[0].to_json()["kind"], "retired-exchange");
        // A caller of an earlier version (bound on its queue's name) does.
        let actual = Actual {
            exchanges: vec![exchange(), retired],
            queues: vec![agreeing],
            bindings: vec![binding("a.#"), binding("b.*"), reply("amq.gen-r1")],
        };
        let diffs = differences(&wanted(), &actual);
        assert_eq!(diffs.len(), 1, "{diffs:#?}");
        assert!(!diffs[0].is_deletable());
        assert!(diffs[0]
            .describe()
            .contains("1 caller(s) of an earlier version"));
    }
}
