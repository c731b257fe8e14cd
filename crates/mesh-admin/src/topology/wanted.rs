//! What the contract wants on the broker for a node, as plain data.

use mesh_core::Name;
use serde_json::{Map, Value};

/// An exchange the contract wants (durable, neither auto-deleted nor internal).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WantedExchange {
    /// Its name.
    pub name: String,
    /// Its type: `topic`, `direct`, …
    pub kind: String,
}

impl WantedExchange {
    /// The exchange `name` of type `kind`.
    pub fn new(name: impl Into<String>, kind: impl Into<String>) -> WantedExchange {
        WantedExchange {
            name: name.into(),
            kind: kind.into(),
        }
    }
}

/// A queue the contract wants (durable, neither exclusive nor auto-deleted), with its
/// arguments and the bindings it must have (on one exchange: bindings from that exchange not
/// listed here are not wanted).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct WantedQueue {
    /// Its name.
    pub name: String,
    /// Its `x-…` arguments.
    pub arguments: Map<String, Value>,
    /// The exchange its bindings come from.
    pub exchange: String,
    /// Its binding keys on that exchange.
    pub patterns: Vec<String>,
}

impl WantedQueue {
    /// The queue `name` with its `arguments`, bound from `exchange` on each of `patterns`.
    pub fn new(
        name: impl Into<String>,
        arguments: Map<String, Value>,
        exchange: impl Into<String>,
        patterns: Vec<String>,
    ) -> WantedQueue {
        WantedQueue {
            name: name.into(),
            arguments,
            exchange: exchange.into(),
            patterns,
        }
    }
}

/// Everything the contract wants for a node.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct Wanted {
    /// The node.
    pub node: Name,
    /// Its exchanges.
    pub exchanges: Vec<WantedExchange>,
    /// Its queues.
    pub queues: Vec<WantedQueue>,
}

impl Wanted {
    /// What `node` wants: these exchanges and queues.
    pub fn new(node: Name, exchanges: Vec<WantedExchange>, queues: Vec<WantedQueue>) -> Wanted {
        Wanted {
            node,
            exchanges,
            queues,
        }
    }
}
