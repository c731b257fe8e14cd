//! Inline SVG: bar charts and the causation tree. Every label is escaped by the template.

use maud::{html, Markup};
use mesh_audit::{CausationNode, CausationTree};

/// A horizontal bar chart: one bar a row, each a link.
pub(crate) fn bars(rows: &[(String, String, u64)]) -> Markup {
    const ROW: u64 = 22;
    const LABEL: u64 = 260;
    const WIDTH: u64 = 420;
    let max = rows.iter().map(|(_, _, n)| *n).max().unwrap_or(0).max(1);
    let height = ROW * rows.len() as u64 + 4;
    html! {
        svg.chart xmlns="http://www.w3.org/2000/svg" width=(LABEL + WIDTH + 80) height=(height)
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
                a href=(format!("/events/{}", node.event.id)) {
                    rect class=(if focus { "node focus" } else { "node" }) x=(depth * INDENT)
                        y=(row * ROW + 4) width=(BOX) height="22" rx="4" {}
                    text x=(depth * INDENT + 8) y=(row * ROW + 19) {
                        (node.event.routing_key) " · " (node.event.source) " · "
                        (node.event.time)
                    }
                }
            }
        }
        @if laid.len() == MAX_DRAWN && tree.len() > MAX_DRAWN {
            p.note { "Only the first " (MAX_DRAWN) " of " (tree.len()) " events are drawn." }
        }
    }
}
