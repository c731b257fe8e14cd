//! Exchanges and their bindings, and topic routing through them.

use mesh_core::text::EscapedDisplay;
use std::collections::{BTreeMap, BTreeSet};

use mesh_core::naming::{DEAD_EXCHANGE, EVENTS_EXCHANGE, RPC_EXCHANGE};
use mesh_core::topic_matches;
use tracing::debug;

/// The exchanges of the contract; every one is a topic exchange.
const EXCHANGES: [&str; 3] = [EVENTS_EXCHANGE, RPC_EXCHANGE, DEAD_EXCHANGE];

/// Per exchange, its bindings as (queue, pattern).
#[derive(Debug)]
pub(crate) struct Bindings(BTreeMap<&'static str, BTreeSet<(String, String)>>);

impl Bindings {
    /// The three exchanges of the contract, with no binding.
    pub(crate) fn new() -> Bindings {
        Bindings(EXCHANGES.iter().map(|e| (*e, BTreeSet::new())).collect())
    }

    /// Binds `queue` on `exchange` with `pattern`; nothing for an unknown exchange.
    pub(crate) fn bind(&mut self, exchange: &'static str, queue: &str, pattern: &str) {
        if let Some(bindings) = self.0.get_mut(exchange) {
            if bindings.insert((queue.to_owned(), pattern.to_owned())) {
                debug!(exchange, queue, pattern, "binding added");
            }
        }
    }

    /// Binds `queue` on `exchange` to exactly `patterns`: missing bindings are added,
    /// bindings no longer asked for are removed.
    pub(crate) fn set(&mut self, exchange: &'static str, queue: &str, patterns: &BTreeSet<String>) {
        if let Some(bindings) = self.0.get_mut(exchange) {
            bindings.retain(|(q, pattern)| {
                let keep = q != queue || patterns.contains(pattern);
                if !keep {
                    debug!(exchange, queue, pattern = %EscapedDisplay(&pattern), "stale binding removed");
                }
                keep
            });
        }
        for pattern in patterns {
            self.bind(exchange, queue, pattern);
        }
    }

    /// Removes every binding of a queue, on every exchange.
    pub(crate) fn remove_queue(&mut self, queue: &str) {
        for bindings in self.0.values_mut() {
            bindings.retain(|(q, _)| q != queue);
        }
    }

    /// The queues a message with `key` reaches on `exchange`; a queue bound by several
    /// matching patterns is named once.
    pub(crate) fn route(&self, exchange: &str, key: &str) -> BTreeSet<String> {
        self.0
            .get(exchange)
            .into_iter()
            .flatten()
            .filter(|(_, pattern)| topic_matches(pattern, key))
            .map(|(queue, _)| queue.clone())
            .collect()
    }

    /// The patterns a queue is bound with on any exchange, sorted and without repeats.
    pub(crate) fn of_queue(&self, queue: &str) -> Vec<String> {
        let patterns: BTreeSet<&str> = self
            .0
            .values()
            .flatten()
            .filter(|(q, _)| q == queue)
            .map(|(_, pattern)| pattern.as_str())
            .collect();
        patterns.into_iter().map(str::to_owned).collect()
    }

    /// Every binding of an exchange as `(queue, pattern)`, sorted.
    pub(crate) fn of_exchange(&self, exchange: &str) -> Vec<(String, String)> {
        self.0
            .get(exchange)
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }
}
