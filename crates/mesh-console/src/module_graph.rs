//! The map's module → module view: an edge from module A to module B when events A emitted
//! reached a queue of B (by the bindings the map knows), weighted by those events. It answers
//! the architect's question the key-level map does not: which module depends on which.

use std::collections::{BTreeMap, BTreeSet};

use maud::{html, Markup};

use crate::params::link;
use crate::topology::SystemMap;

/// One edge: `events` of `from`'s events reached queues of `to`, through `keys` (an event
/// counts once per receiving module, however many of its nodes' queues received it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ModuleEdge {
    pub(crate) from: String,
    pub(crate) to: String,
    pub(crate) events: u64,
    pub(crate) keys: BTreeSet<String>,
}

/// The module a consumer queue belongs to: `billing` of `n1.billing.events` and of
/// `shared.billing.events`.
fn module_of(queue: &str) -> Option<&str> {
    let mut words = queue.split('.');
    match (words.next(), words.next(), words.next(), words.next()) {
        (Some(_), Some(module), Some("events"), None) => Some(module),
        _ => None,
    }
}

/// The edges of `map`, heaviest first (then by name).
pub(crate) fn module_edges(map: &SystemMap) -> Vec<ModuleEdge> {
    let mut edges: BTreeMap<(String, String), ModuleEdge> = BTreeMap::new();
    for flow in &map.flows {
        let Some(routes) = map.routes.get(&flow.key) else {
            continue;
        };
        let modules: BTreeSet<&str> = routes.iter().filter_map(|(q, _)| module_of(q)).collect();
        for to in modules {
            let edge = edges
                .entry((flow.source.clone(), to.to_owned()))
                .or_insert_with(|| ModuleEdge {
                    from: flow.source.clone(),
                    to: to.to_owned(),
                    events: 0,
                    keys: BTreeSet::new(),
                });
            edge.events = edge.events.saturating_add(flow.events);
            edge.keys.insert(flow.key.clone());
        }
    }
    let mut edges: Vec<ModuleEdge> = edges.into_values().collect();
    edges.sort_by(|a, b| {
        b.events
            .cmp(&a.events)
            .then_with(|| (&a.from, &a.to).cmp(&(&b.from, &b.to)))
    });
    edges
}

/// The most modules a column draws (the table lists every edge).
const MAX_COLUMN: usize = 60;

/// The edges drawn: emitting modules on the left, receiving ones on the right, an edge's
/// width by its share of the heaviest; then the table of every edge.
pub(crate) fn view(edges: &[ModuleEdge], window: &[(&str, &str)]) -> Markup {
    const ROW: usize = 30;
    const BOX: usize = 200;
    const GAP: usize = 220;
    let column = |pick: fn(&ModuleEdge) -> &str| -> Vec<&str> {
        edges
            .iter()
            .map(pick)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .take(MAX_COLUMN)
            .collect()
    };
    let from: Vec<&str> = column(|e| e.from.as_str());
    let to: Vec<&str> = column(|e| e.to.as_str());
    let heaviest = edges.iter().map(|e| e.events).max().unwrap_or(1).max(1);
    let row_of = |names: &[&str], name: &str| names.iter().position(|n| *n == name);
    let y = |row: usize| 26 + row * ROW;
    let right = BOX + GAP;
    let height = from.len().max(to.len()) * ROW + 30;
    let events_of = |source: &str| {
        let mut pairs = vec![("source", source)];
        pairs.extend_from_slice(window);
        link("/events", pairs)
    };
    html! {
        svg.modules xmlns="http://www.w3.org/2000/svg" width=(2 * BOX + GAP + 4) height=(height) role="img" {
            text.column x="0" y="14" { "Emitting module" }
            text.column x=(right) y="14" { "Receiving module" }
            @for edge in edges {
                @if let (Some(a), Some(b)) = (row_of(&from, &edge.from), row_of(&to, &edge.to)) {
                    @let (x1, y1, x2, y2) = (BOX, y(a) + 11, right, y(b) + 11);
                    @let mid = (x1 + x2) / 2;
                    @let width = 1.0 + 5.0 * (edge.events as f64 / heaviest as f64);
                    a href=(events_of(&edge.from)) {
                        path.edge data-from=(edge.from) data-to=(edge.to) data-events=(edge.events)
                            stroke-width=(format!("{width:.1}"))
                            d=(format!("M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}")) {
                            title { (edge.from) " → " (edge.to) ": " (edge.events) " events" }
                        }
                    }
                }
            }
            @for (row, name) in from.iter().enumerate() {
                rect.node x="0" y=(y(row)) width=(BOX) height="22" rx="4" {}
                text x="8" y=(y(row) + 15) { (name) }
            }
            @for (row, name) in to.iter().enumerate() {
                rect.node x=(right) y=(y(row)) width=(BOX) height="22" rx="4" {}
                text x=(right + 8) y=(y(row) + 15) { (name) }
            }
        }
        table.module-edges {
            tr { th { "From" } th { "To" } th.num { "Events" } th { "Keys" } }
            @for edge in edges {
                tr {
                    td { (edge.from) }
                    td { (edge.to) }
                    td.num { (edge.events) }
                    td { @for (i, key) in edge.keys.iter().enumerate() { @if i > 0 { ", " } (key) } }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use mesh_audit::Flow;
    use mesh_core::TopicPattern;

    use super::*;
    use crate::broker::Binding;

    fn flow(source: &str, key: &str, events: u64) -> Flow {
        Flow {
            source: source.into(),
            key: key.into(),
            events,
        }
    }

    fn binding(queue: &str, pattern: &str) -> Binding {
        Binding {
            queue: queue.into(),
            pattern: TopicPattern::parse(pattern).unwrap(),
        }
    }

    #[test]
    fn an_edge_joins_an_emitter_to_each_module_its_events_reach() {
        let map = SystemMap::new(
            vec![
                flow("umami", "module.umami.site.created", 5),
                flow("billing", "module.billing.invoice.paid", 2),
                flow("shop", "module.shop.order.placed", 1),
            ],
            &[
                binding("n1.billing.events", "module.umami.site.created"),
                binding("n1.mailer.events", "module.*.site.created"),
                binding("n2.mailer.events", "module.umami.#"),
                binding("n1.mailer.events", "module.billing.#"),
                binding("n1.audit-logger.events", "#"),
            ],
        );
        let edges: Vec<(String, String, u64)> = module_edges(&map)
            .into_iter()
            .map(|e| (e.from, e.to, e.events))
            .collect();
        assert_eq!(
            edges,
            [
                // Once each, though two of mailer's queues received umami's events.
                ("umami".into(), "billing".into(), 5),
                ("umami".into(), "mailer".into(), 5),
                ("billing".into(), "mailer".into(), 2),
            ]
        );
    }
}
