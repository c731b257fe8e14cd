//! The system map as data: who emitted which keys (the rollups' flows) and which module
//! queues receive them (their bindings), drawn by `svg.rs` and listed by `map.rs`.

use std::collections::{BTreeMap, BTreeSet};

use mesh_audit::Flow;
use mesh_core::naming;

use crate::broker::Binding;

/// The map: emitters, keys, receiving queues, and the edges between them.
#[derive(Debug, Default)]
pub(crate) struct SystemMap {
    /// Who emitted which key, how many times.
    pub(crate) flows: Vec<Flow>,
    /// The consumer queues (audit loggers' aside) and their patterns.
    pub(crate) receivers: BTreeMap<String, Vec<String>>,
    /// Which queues receive a key, through which pattern.
    pub(crate) routes: BTreeMap<String, Vec<(String, String)>>,
}

impl SystemMap {
    pub(crate) fn new(flows: Vec<Flow>, bindings: &[Binding]) -> SystemMap {
        let mut receivers: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for binding in bindings {
            if is_audit_queue(&binding.queue) {
                continue;
            }
            receivers
                .entry(binding.queue.clone())
                .or_default()
                .push(binding.pattern.to_string());
        }
        let keys: BTreeSet<&str> = flows.iter().map(|f| f.key.as_str()).collect();
        let mut routes: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for key in keys {
            for binding in bindings {
                if !is_audit_queue(&binding.queue) && binding.pattern.matches(key) {
                    let to = routes.entry(key.to_owned()).or_default();
                    if !to.iter().any(|(queue, _)| *queue == binding.queue) {
                        to.push((binding.queue.clone(), binding.pattern.to_string()));
                    }
                }
            }
        }
        SystemMap {
            flows,
            receivers,
            routes,
        }
    }
}

fn is_audit_queue(queue: &str) -> bool {
    queue.split('.').nth(1) == Some(naming::AUDIT_MODULE)
}
