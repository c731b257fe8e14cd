//! Bindings on mesh's exchanges that the contract does not explain.
//!
//! mesh binds only queues, without arguments, and only in these shapes (see
//! `docs/CONTRACT.md`):
//!
//! | exchange | queue | binding key |
//! |---|---|---|
//! | `mesh.events` | a consumer queue `<node>.<module>.events`, or a server-named `amq.gen-…` (an ephemeral subscription) | a topic pattern |
//! | `mesh.rpc` | `serve.<tool>` | `<tool>` |
//! | `mesh.retry` | a consumer queue or one of its retry queues `<queue>.retry.<step>` | the queue's own name |
//! | `mesh.replies` | a server-named `amq.gen-…` | its reply key, `<user>.<queue>` (ending in the queue's own name) |
//! | `mesh.reply` (retired, until migrated) | a server-named `amq.gen-…` | the queue's own name, or its reply key |
//! | `mesh.events.dead` | `<node>.audit-logger.dead` (`shared.audit-logger.dead` too), or a server-named `amq.gen-…` (a tap) | `#` for the logger's queue |
//! | `mesh.logs` | a server-named `amq.gen-…` (a follower) | a topic pattern |
//!
//! Anything else touching one of them is foreign: an exchange bound to a mesh exchange or
//! from one (an exchange-to-exchange binding routes around the topic permissions of the
//! exchange it lands on), a queue mesh never names, a binding with arguments, or a mesh
//! queue bound where mesh never binds it. Only the broker's own server-named queues start
//! with `amq.` (a client may not declare such a name), so they are explained by their shape;
//! the consumer queues of other nodes are explained by their own node's plan.
//!
//! The retired `mesh.dead-letters` is left to the topology plan's own difference.

use serde_json::{json, Value};

use mesh_core::naming::{
    self, AUDIT_MODULE, DEAD_EXCHANGE, EVENTS_EXCHANGE, REPLY_EXCHANGE, RETIRED_DEAD_QUEUE,
    RETIRED_REPLY_EXCHANGE, RETRY_EXCHANGE, RPC_EXCHANGE,
};
use mesh_core::Name;

use crate::management::BindingRow;

/// The logs exchange of `mesh-logs` (not a dependency of this crate).
const LOGS_EXCHANGE: &str = "mesh.logs";

/// Every exchange of the contract, and the retired `mesh.reply` (whose bindings are checked
/// as long as it exists).
pub const MESH_EXCHANGES: [&str; 7] = [
    EVENTS_EXCHANGE,
    RPC_EXCHANGE,
    DEAD_EXCHANGE,
    RETRY_EXCHANGE,
    REPLY_EXCHANGE,
    LOGS_EXCHANGE,
    RETIRED_REPLY_EXCHANGE,
];

/// Whether `key` is a reply key of `queue`: `<user>.<queue>` with a user.
fn is_reply_key_of(key: &str, queue: &str) -> bool {
    key.strip_suffix(queue)
        .and_then(|user| user.strip_suffix('.'))
        .is_some_and(|user| !user.is_empty() && !user.contains(['*', '#']))
}

/// A binding on a mesh exchange the contract does not explain.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ForeignBinding {
    /// The exchange it binds from.
    pub source: String,
    /// The queue or exchange it binds.
    pub destination: String,
    /// `queue` or `exchange`.
    pub destination_type: String,
    /// Its binding key.
    pub routing_key: String,
    /// Whether it has binding arguments.
    pub has_arguments: bool,
    /// How the management API names it, to delete it.
    pub properties_key: String,
}

impl ForeignBinding {
    fn of(row: &BindingRow) -> ForeignBinding {
        ForeignBinding {
            source: row.source.clone(),
            destination: row.destination.clone(),
            destination_type: row.destination_type.clone(),
            routing_key: row.routing_key.clone(),
            has_arguments: !row.arguments.is_empty(),
            properties_key: row.properties_key.clone(),
        }
    }

    /// Whether it binds an exchange (rather than a queue).
    pub fn is_exchange_to_exchange(&self) -> bool {
        self.destination_type == "exchange"
    }

    /// One line of text: what is bound, and why mesh did not make it.
    pub fn describe(&self) -> String {
        let why = if self.is_exchange_to_exchange() {
            "an exchange-to-exchange binding"
        } else if self.has_arguments {
            "a binding with arguments"
        } else if is_mesh_queue(&self.destination) {
            "a binding mesh never makes for this queue"
        } else {
            "a queue mesh never names"
        };
        format!(
            "foreign binding {} -> {} {} on `{}`: {why}, not explained by the contract",
            self.source, self.destination_type, self.destination, self.routing_key
        )
    }

    /// As JSON.
    pub fn to_json(&self) -> Value {
        json!({
            "kind": "foreign-binding", "exchange": self.source,
            "destination": self.destination, "destination_type": self.destination_type,
            "routing_key": self.routing_key, "arguments": self.has_arguments
        })
    }
}

/// A name the broker gave a queue (`amq.gen-…`).
fn is_server_named(queue: &str) -> bool {
    queue.starts_with("amq.gen-")
}

/// `<node>.audit-logger.dead`, `shared.audit-logger.dead` (the shared loggers') included.
fn is_audit_dead_queue(queue: &str) -> bool {
    match queue.strip_suffix(".dead") {
        Some(rest) => match rest.rsplit_once('.') {
            Some((node, AUDIT_MODULE)) => {
                Name::parse(node).is_ok() && !naming::RESERVED_NODES.contains(&node)
            }
            _ => false,
        },
        None => false,
    }
}

/// A consumer queue's retry queue `<queue>.retry.<step>`.
fn is_retry_queue(queue: &str) -> bool {
    match queue.rsplit_once(".retry.") {
        Some((consumer, step)) => {
            naming::is_consumer_queue(consumer)
                && !step.is_empty()
                && step.bytes().all(|b| b.is_ascii_alphanumeric())
        }
        None => false,
    }
}

fn is_mesh_queue(queue: &str) -> bool {
    naming::is_consumer_queue(queue)
        || is_retry_queue(queue)
        || is_audit_dead_queue(queue)
        || queue.starts_with("serve.")
        || is_server_named(queue)
        || queue == RETIRED_DEAD_QUEUE
}

/// Whether mesh could have made `row` (a binding from a mesh exchange to a queue, without
/// arguments, in one of the contract's shapes).
pub fn is_explained(row: &BindingRow) -> bool {
    if row.destination_type != "queue" || !row.arguments.is_empty() {
        return false;
    }
    let queue = row.destination.as_str();
    let key = row.routing_key.as_str();
    match row.source.as_str() {
        EVENTS_EXCHANGE => naming::is_consumer_queue(queue) || is_server_named(queue),
        RPC_EXCHANGE => queue.strip_prefix("serve.") == Some(key) && !key.is_empty(),
        RETRY_EXCHANGE => {
            key == queue && (naming::is_consumer_queue(queue) || is_retry_queue(queue))
        }
        REPLY_EXCHANGE => is_server_named(queue) && is_reply_key_of(key, queue),
        RETIRED_REPLY_EXCHANGE => {
            is_server_named(queue) && (key == queue || is_reply_key_of(key, queue))
        }
        DEAD_EXCHANGE => {
            (is_audit_dead_queue(queue) && key == "#")
                || is_server_named(queue)
                || queue == RETIRED_DEAD_QUEUE
        }
        LOGS_EXCHANGE => is_server_named(queue),
        _ => false,
    }
}

/// Whether `row` binds from or to one of mesh's exchanges.
fn touches_mesh(row: &BindingRow) -> bool {
    MESH_EXCHANGES.contains(&row.source.as_str())
        || (row.destination_type == "exchange"
            && MESH_EXCHANGES.contains(&row.destination.as_str()))
}

/// Every binding of `bindings` on (from or to) a mesh exchange that the contract does not
/// explain, in their order.
pub fn foreign_bindings(bindings: &[BindingRow]) -> Vec<ForeignBinding> {
    bindings
        .iter()
        .filter(|b| touches_mesh(b) && !is_explained(b))
        .map(ForeignBinding::of)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(source: &str, kind: &str, destination: &str, key: &str) -> BindingRow {
        serde_json::from_value(json!({
            "source": source, "destination": destination, "destination_type": kind,
            "routing_key": key, "arguments": {}, "properties_key": key
        }))
        .unwrap()
    }

    #[test]
    fn what_mesh_makes_is_explained() {
        for b in [
            row(
                "mesh.events",
                "queue",
                "n1.billing.events",
                "module.umami.#",
            ),
            row("mesh.events", "queue", "shared.billing.events", "#"),
            row("mesh.events", "queue", "amq.gen-abc", "module.*.x"),
            row(
                "mesh.rpc",
                "queue",
                "serve.umami.sites.create",
                "umami.sites.create",
            ),
            row(
                "mesh.retry",
                "queue",
                "n1.billing.events",
                "n1.billing.events",
            ),
            row(
                "mesh.retry",
                "queue",
                "n1.billing.events.retry.5s",
                "n1.billing.events.retry.5s",
            ),
            row("mesh.reply", "queue", "amq.gen-r1", "amq.gen-r1"),
            row("mesh.reply", "queue", "amq.gen-r1", "module.a.amq.gen-r1"),
            row("mesh.replies", "queue", "amq.gen-r1", "module.a.amq.gen-r1"),
            row(
                "mesh.replies",
                "queue",
                "amq.gen-r1",
                "acme/module.a.amq.gen-r1",
            ),
            row("mesh.events.dead", "queue", "n1.audit-logger.dead", "#"),
            // The shared audit loggers' queue of dead letters.
            row("mesh.events.dead", "queue", "shared.audit-logger.dead", "#"),
            row("mesh.events", "queue", "shared.audit-logger.events", "#"),
            row("mesh.events.dead", "queue", "amq.gen-t", "#"),
            row("mesh.events.dead", "queue", "mesh.dead-letters", "#"),
            row("mesh.logs", "queue", "amq.gen-l", "n1.#"),
            // Not on a mesh exchange: none of mesh's business.
            row("x.other", "exchange", "x.elsewhere", "#"),
            row("", "queue", "foreign", "foreign"),
        ] {
            assert!(
                foreign_bindings(std::slice::from_ref(&b)).is_empty(),
                "{b:?}"
            );
        }
    }

    #[test]
    fn anything_else_on_a_mesh_exchange_is_foreign() {
        let cases = [
            (
                row(
                    "mesh.reply",
                    "exchange",
                    "mesh.events",
                    "module.billing.invoice.paid",
                ),
                "exchange-to-exchange",
            ),
            (
                row("x.umami.events", "exchange", "mesh.events", "#"),
                "exchange-to-exchange",
            ),
            (
                row("mesh.events", "exchange", "mesh.events.dead", "#"),
                "exchange-to-exchange",
            ),
            (
                row("mesh.events", "queue", "foreign-queue", "module.billing.#"),
                "never names",
            ),
            (
                row("mesh.reply", "queue", "amq.gen-r1", "amq.gen-other"),
                "never makes",
            ),
            (
                row("mesh.replies", "queue", "amq.gen-r1", "amq.gen-r1"),
                "never makes",
            ),
            (
                row("mesh.replies", "queue", "amq.gen-r1", "#.amq.gen-r1"),
                "never makes",
            ),
            (
                row("mesh.replies", "queue", "amq.gen-r1", "module.a.amq.gen-r2"),
                "never makes",
            ),
            (
                row("mesh.replies", "exchange", "mesh.events", "module.a.x"),
                "exchange-to-exchange",
            ),
            (
                row(
                    "mesh.rpc",
                    "queue",
                    "serve.billing.quote",
                    "umami.sites.create",
                ),
                "never makes",
            ),
            (
                row(
                    "mesh.retry",
                    "queue",
                    "n1.billing.events",
                    "n1.umami.events",
                ),
                "never makes",
            ),
            (
                row(
                    "mesh.events.dead",
                    "queue",
                    "n1.audit-logger.dead",
                    "module.#",
                ),
                "never makes",
            ),
            (
                row("mesh.events.dead", "queue", "n1.billing.events", "#"),
                "never makes",
            ),
            (
                row("mesh.logs", "queue", "n1.billing.events", "#"),
                "never makes",
            ),
        ];
        for (b, why) in cases {
            let found = foreign_bindings(std::slice::from_ref(&b));
            assert_eq!(found.len(), 1, "{b:?}");
            assert!(found[0].describe().contains(why), "{}", found[0].describe());
            assert_eq!(found[0].to_json()["kind"], "foreign-binding");
        }
        let mut with_arguments = row("mesh.events", "queue", "n1.billing.events", "#");
        with_arguments
            .arguments
            .insert("x-match".into(), Value::from("all"));
        let found = foreign_bindings(&[with_arguments]);
        assert!(found[0].describe().contains("arguments"), "{found:?}");
    }
}
