//! The saga instances on an event's page: each event of the causation tree that a saga
//! applied to an instance caused that saga's transition event (`<prefix>saga.transition`,
//! [`mesh_core::saga`]), whose body is the instance after it. The page lists them in the
//! tree's order: the applied event, the saga, the key, the version and the state after it.
//!
//! A transition is read as any stored body: one that is not a [`SagaTransition`] is listed as
//! unreadable, never trusted further.

use maud::{html, Markup};
use mesh_audit::{CausationNode, CausationTree};
use mesh_core::saga::{is_transition_key, SagaTransition};
use mesh_core::EventId;

use crate::params::under;

/// One transition found on the tree.
struct Shown {
    /// The event the saga applied (the transition's cause).
    applied: EventId,
    /// The transition event itself.
    transition: EventId,
    /// Its source (the saga's module).
    source: String,
    /// Its body, if it reads as one.
    body: Option<SagaTransition>,
}

/// The transitions among the tree's events, depth first from its root.
fn transitions(tree: &CausationTree) -> Vec<Shown> {
    fn walk(node: &CausationNode, out: &mut Vec<Shown>) {
        for child in &node.children {
            if is_transition_key(&child.event.routing_key) {
                out.push(Shown {
                    applied: node.event.id,
                    transition: child.event.id,
                    source: child.event.source.clone(),
                    body: serde_json::from_str(&child.event.body).ok(),
                });
            }
        }
        for child in &node.children {
            walk(child, out);
        }
    }
    let mut out = Vec::new();
    walk(&tree.root, &mut out);
    out
}

/// The page's section of saga instances, or nothing when no event of the tree moved one.
pub(crate) fn section(tree: &CausationTree) -> Markup {
    let shown = transitions(tree);
    if shown.is_empty() {
        return html! {};
    }
    html! {
        h2 { "Saga instances (" (shown.len()) ")" }
        p.note { "The state of each saga instance an event of this trace moved, after that event." }
        table.sagas {
            tr { th { "Event applied" } th { "Saga" } th { "Key" } th { "Version" } th { "State after it" } }
            @for s in &shown {
                tr.saga.focus[s.applied == tree.focus] {
                    td { a.applied href=(under("/events", s.applied)) { (s.applied) } }
                    @match &s.body {
                        Some(t) => {
                            td.saga-name { (t.saga) " · " (s.source) }
                            td.saga-key { (t.key) }
                            td.num.saga-version {
                                (t.version)
                                @if t.completed { " (completed)" }
                            }
                            td { pre.saga-state { (serde_json::to_string_pretty(&t.state).unwrap_or_default()) } }
                        }
                        None => {
                            td colspan="4" {
                                "An unreadable transition: "
                                a href=(under("/events", s.transition)) { (s.transition) }
                            }
                        }
                    }
                }
            }
        }
    }
}
