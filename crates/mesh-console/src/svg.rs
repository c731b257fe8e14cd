//! Inline SVG: bar charts, the causation tree and the system map. Every label is escaped by the template.

use std::collections::BTreeSet;

use maud::{html, Markup};
use mesh_audit::{CausationNode, CausationTree};
use mesh_core::Timestamp;

use crate::params::{link, under};
use crate::topology::SystemMap;

/// A horizontal bar chart of class `chart <class>`: one bar a row, each a link.
pub(crate) fn bars(class: &str, rows: &[(String, String, u64)]) -> Markup {
    const ROW: u64 = 22;
    const LABEL: u64 = 260;
    const WIDTH: u64 = 420;
    let max = rows.iter().map(|(_, _, n)| *n).max().unwrap_or(0).max(1);
    let height = ROW * rows.len() as u64 + 4;
    html! {
        svg class=(format!("chart {class}")) xmlns="http://www.w3.org/2000/svg" width=(LABEL + WIDTH + 80) height=(height)
            role="img" {
            @for (i, (label, href, n)) in rows.iter().enumerate() {
                @let y = ROW * i as u64;
                a href=(href) {
                    text x="0" y=(y + 15) class="label" { (label) }
                    rect x=(LABEL) y=(y + 3) height="16" width=((WIDTH * n / max).max(1)) {}
                    text x=(LABEL + (WIDTH * n / max).max(1) + 6) y=(y + 15) { (n) }
                }
            }
        }
    }
}

/// Events per minute over the hour from `since`: one column a minute (from the rollups),
/// each a link to that minute's events, its height and title saying how many and at what
/// rate.
pub(crate) fn per_minute(minutes: &[(Timestamp, u64)], since: Timestamp) -> Markup {
    const COLUMN: i64 = 12;
    const HEIGHT: u64 = 120;
    let max = minutes.iter().map(|(_, n)| *n).max().unwrap_or(0).max(1);
    let first = since.unix_seconds() / 60;
    html! {
        svg.chart.minutes xmlns="http://www.w3.org/2000/svg" width=(COLUMN * 61 + 60)
            height=(HEIGHT + 20) role="img" {
            text x="0" y="12" { (max) "/min" }
            @for (minute, n) in minutes {
                @let column = (minute.unix_seconds() / 60 - first).clamp(0, 60);
                @let h = (HEIGHT * n / max).max(1);
                @let until = Timestamp::from_unix_seconds(minute.unix_seconds() + 59).unwrap_or(*minute);
                a href=(link("/events", [("since", minute.to_string().as_str()), ("until", until.to_string().as_str())])) {
                    rect x=(60 + column * COLUMN) y=(HEIGHT + 4 - h) width=(COLUMN - 2) height=(h) {
                        title { (crate::when::fixed(minute)) ": " (n) " events (" (format!("{:.1}", *n as f64 / 60.0)) "/s)" }
                    }
                }
            }
            text x="60" y=(HEIGHT + 18) { "−60 min" }
            text x=(COLUMN * 61 + 20) y=(HEIGHT + 18) { "now" }
        }
    }
}

/// The most nodes drawn; the rest are listed as cut.
const MAX_DRAWN: usize = 500;

/// The causation tree as a graph: one node a row, indented by depth, edges from each cause
/// to its effects, each node a link to its event's page, the focus marked.
pub(crate) fn tree(tree: &CausationTree) -> Markup {
    const ROW: usize = 30;
    const INDENT: usize = 28;
    const BOX: usize = 520;
    // Depth-first: (depth, row of the parent, node).
    let mut laid: Vec<(usize, Option<usize>, &CausationNode)> = Vec::new();
    fn walk<'a>(
        node: &'a CausationNode,
        depth: usize,
        parent: Option<usize>,
        out: &mut Vec<(usize, Option<usize>, &'a CausationNode)>,
    ) {
        if out.len() == MAX_DRAWN {
            return;
        }
        let row = out.len();
        out.push((depth, parent, node));
        for child in &node.children {
            walk(child, depth + 1, Some(row), out);
        }
    }
    walk(&tree.root, 0, None, &mut laid);
    let depth = laid.iter().map(|(d, _, _)| *d).max().unwrap_or(0);
    let width = depth * INDENT + BOX + 10;
    let height = laid.len() * ROW + 6;
    html! {
        svg.tree xmlns="http://www.w3.org/2000/svg" width=(width) height=(height) role="img" {
            @for (row, (depth, parent, _)) in laid.iter().enumerate() {
                @if let Some(parent) = parent {
                    @let px = (depth - 1) * INDENT + 10;
                    path class="edge" d=(format!(
                        "M{px},{} V{} H{}",
                        parent * ROW + 26,
                        row * ROW + 15,
                        depth * INDENT
                    )) {}
                }
            }
            @for (row, (depth, _, node)) in laid.iter().enumerate() {
                @let focus = node.event.id == tree.focus;
                a href=(under("/events", node.event.id)) {
                    rect class=(if focus { "node focus" } else { "node" }) x=(depth * INDENT)
                        y=(row * ROW + 4) width=(BOX) height="22" rx="4" {}
                    text x=(depth * INDENT + 8) y=(row * ROW + 19) {
                        (node.event.routing_key) " · " (node.event.source) " · "
                        (crate::when::fixed(&node.event.time))
                    }
                }
            }
        }
        @if laid.len() == MAX_DRAWN && tree.len() > MAX_DRAWN {
            p.note { "Only the first " (MAX_DRAWN) " of " (tree.len()) " events are drawn." }
        }
    }
}

/// The most nodes a column of the map draws; the rest are listed in the flows table only.
const MAX_COLUMN: usize = 200;

/// The system map: emitters, keys and receiving queues in three columns, an edge from each
/// source to each key it emitted and from each key to each queue bound to it; every node
/// and edge links to the events behind it (`window`: the query pairs of the map's window).
pub(crate) fn map(map: &SystemMap, window: &[(&str, &str)]) -> Markup {
    const ROW: usize = 28;
    const BOX: usize = 250;
    const GAP: usize = 130;
    let sources: Vec<&str> = map
        .flows
        .iter()
        .map(|f| f.source.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .take(MAX_COLUMN)
        .collect();
    let keys: Vec<&str> = map
        .flows
        .iter()
        .map(|f| f.key.as_str())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .take(MAX_COLUMN)
        .collect();
    let queues: Vec<&str> = map
        .receivers
        .keys()
        .map(String::as_str)
        .chain(map.routes.values().flatten().map(|(q, _)| q.as_str()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .take(MAX_COLUMN)
        .collect();
    let row_of = |column: &[&str], name: &str| column.iter().position(|n| *n == name);
    let x = [0, BOX + GAP, 2 * (BOX + GAP)];
    let rows = sources.len().max(keys.len()).max(queues.len());
    let width = 3 * BOX + 2 * GAP + 4;
    let height = rows * ROW + 30;
    let y = |row: usize| 26 + row * ROW;
    let curve = |from_x: usize, from_row: usize, to_x: usize, to_row: usize| {
        let (x1, y1, x2, y2) = (from_x + BOX, y(from_row) + 11, to_x, y(to_row) + 11);
        let mid = (x1 + x2) / 2;
        format!("M{x1},{y1} C{mid},{y1} {mid},{y2} {x2},{y2}")
    };
    let with = |pairs: Vec<(&str, &str)>| {
        let mut pairs = pairs;
        pairs.extend_from_slice(window);
        link("/events", pairs)
    };
    html! {
        svg.map xmlns="http://www.w3.org/2000/svg" width=(width) height=(height) role="img" {
            text.column x=(x[0]) y="14" { "Emitters" }
            text.column x=(x[1]) y="14" { "Keys" }
            text.column x=(x[2]) y="14" { "Receiving queues" }
            @for flow in &map.flows {
                @if let (Some(from), Some(to)) = (row_of(&sources, &flow.source), row_of(&keys, &flow.key)) {
                    a href=(with(vec![("source", flow.source.as_str()), ("key", flow.key.as_str())])) {
                        path.edge.emits data-from=(flow.source) data-to=(flow.key)
                            d=(curve(x[0], from, x[1], to)) {
                            title { (flow.source) " emitted " (flow.key) ": " (flow.events) }
                        }
                    }
                }
            }
            @for (key, to) in &map.routes {
                @for (queue, via) in to {
                    @if let (Some(from), Some(row)) = (row_of(&keys, key), row_of(&queues, queue)) {
                        a href=(with(vec![("key", key.as_str())])) {
                            path.edge.receives data-from=(key) data-to=(queue)
                                d=(curve(x[1], from, x[2], row)) {
                                title { (queue) " receives " (key) " (bound on " (via) ")" }
                            }
                        }
                    }
                }
            }
            @for (row, source) in sources.iter().enumerate() {
                a href=(with(vec![("source", source)])) {
                    rect.node.emitter x=(x[0]) y=(y(row)) width=(BOX) height="22" rx="4" {}
                    text x=(x[0] + 8) y=(y(row) + 15) { (source) }
                }
            }
            @for (row, key) in keys.iter().enumerate() {
                a href=(with(vec![("key", key)])) {
                    rect.node.key x=(x[1]) y=(y(row)) width=(BOX) height="22" rx="4" {}
                    text x=(x[1] + 8) y=(y(row) + 15) { (key) }
                }
            }
            @for (row, queue) in queues.iter().enumerate() {
                a href=(under("/modules", queue)) {
                    rect.node.queue x=(x[2]) y=(y(row)) width=(BOX) height="22" rx="4" {}
                    text x=(x[2] + 8) y=(y(row) + 15) { (queue) }
                }
            }
        }
        @if sources.len() == MAX_COLUMN || keys.len() == MAX_COLUMN || queues.len() == MAX_COLUMN {
            p.note { "A column was cut at " (MAX_COLUMN) " nodes: the table below lists every flow." }
        }
    }
}
