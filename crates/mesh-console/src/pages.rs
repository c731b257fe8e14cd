//! The pages: each handler checks its input (400 or 404 pages), reads the store, and renders
//! HTML in which the template escapes every interpolated value.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::html;
use mesh_audit::DeadLetterQuery;
use mesh_core::{EventId, Timestamp};
use tracing::warn;

use crate::input::event_id;
use crate::params::{link, under};
use crate::respond::{auto_refresh, missing, page, unavailable, Fail, Page, Shared};
use crate::{sagas, svg, when};

/// Refuses a request whose `Host` is none of the allowed origins' (421).
pub(crate) async fn known_host(
    State(c): Shared,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = request
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or_default();
    let known = c.origins.iter().any(|origin| {
        origin
            .split_once("://")
            .is_some_and(|(_, authority)| authority.eq_ignore_ascii_case(host))
    });
    if known {
        return next.run(request).await;
    }
    warn!("request refused: unknown Host");
    Fail::new(
        StatusCode::MISDIRECTED_REQUEST,
        "this console does not answer to that host name (start it with --origin \
         http://HOST:PORT to allow one)",
    )
    .into_response()
}

pub(crate) async fn not_found() -> Fail {
    missing("no such page")
}

/// The first two words of a key: `module.billing` of `module.billing.invoice.paid`.
fn key_prefix(key: &str) -> String {
    key.split('.').take(2).collect::<Vec<_>>().join(".")
}

pub(crate) async fn overview(State(c): Shared) -> Page {
    let store = &c.store;
    let counts = store
        .counts()
        .await
        .map_err(|e| unavailable("counting", &e))?;
    let since = Timestamp::now()
        .checked_sub(Duration::from_secs(3600))
        .unwrap_or_else(Timestamp::now);
    let since_text = since.to_string();
    // From the rollups (events per minute, key and source), never a scan of the events.
    let flows = store
        .rolled_up_flows(since, None)
        .await
        .map_err(|e| unavailable("reading the rollups", &e))?;
    let per_minute = store
        .events_per_minute(since, None)
        .await
        .map_err(|e| unavailable("reading the rollups", &e))?;
    let mut prefixes: BTreeMap<String, u64> = BTreeMap::new();
    let mut sources: BTreeMap<String, u64> = BTreeMap::new();
    for flow in flows {
        *prefixes.entry(key_prefix(&flow.key)).or_default() += flow.events;
        *sources.entry(flow.source).or_default() += flow.events;
    }
    let prefix_bars: Vec<(String, String, u64)> = prefixes
        .into_iter()
        .map(|(prefix, n)| {
            let pattern = format!("{prefix}.#");
            let href = link(
                "/events",
                [("key", pattern.as_str()), ("since", since_text.as_str())],
            );
            (prefix, href, n)
        })
        .collect();
    let source_bars: Vec<(String, String, u64)> = sources
        .into_iter()
        .map(|(source, n)| {
            let href = link(
                "/events",
                [("source", source.as_str()), ("since", since_text.as_str())],
            );
            (source, href, n)
        })
        .collect();
    let groups = store
        .dead_letter_groups(&DeadLetterQuery::new().redriven(false))
        .await
        .map_err(|e| unavailable("counting dead letters", &e))?;
    let mut pending: BTreeMap<Option<String>, u64> = BTreeMap::new();
    for group in groups {
        *pending.entry(group.queue).or_default() += group.pending;
    }
    let broker = crate::map::broker_overview(&c, &pending).await;
    page(
        "Overview",
        html! {
            h1 { "Overview" }
            (auto_refresh())
            div #refreshed {
            table {
                tr { th { "Events" } td.num { (counts.events) } }
                tr { th { "Dead letters" } td.num { (counts.dead_letters) } }
                tr { th { "Dead letters pending" } td.num { (counts.dead_letters_pending) } }
                tr { th { "Id conflicts" } td.num { (counts.conflicts) } }
            }
            h2 { "Events per minute, the last hour" }
            @if per_minute.is_empty() { p.note { "None." } } @else { (svg::per_minute(&per_minute, since)) }
            h2 { "Events of the last hour, by key prefix" }
            @if prefix_bars.is_empty() { p.note { "None." } } @else { (svg::bars("prefixes", &prefix_bars)) }
            h2 { "Events of the last hour, by source" }
            @if source_bars.is_empty() { p.note { "None." } } @else { (svg::bars("sources", &source_bars)) }
            (broker)
            h2 { "Dead letters pending, by queue" }
            @if pending.is_empty() { p.note { "None." } } @else {
                table.pending {
                    tr { th { "Queue" } th { "Pending" } }
                    @for (queue, n) in &pending {
                        tr {
                            td {
                                @if let Some(queue) = queue {
                                    a href=(link("/dead", [("queue", queue.as_str())])) { (queue) }
                                } @else { span.note { "(no queue recorded)" } }
                            }
                            td.num { (n) }
                        }
                    }
                }
            }
            }
        },
    )
}

pub(crate) fn pretty_json(text: &str) -> String {
    serde_json::from_str::<serde_json::Value>(text)
        .ok()
        .and_then(|v| serde_json::to_string_pretty(&v).ok())
        .unwrap_or_else(|| text.to_owned())
}

/// The due time a scheduled event was emitted at (`x-due`, set by the runtime only), if it
/// was scheduled.
fn scheduled_due(headers: &serde_json::Value) -> Option<&str> {
    headers.get(mesh_core::codec::SCHEDULED_DUE)?.as_str()
}

pub(crate) async fn event(State(c): Shared, Path(id): Path<String>) -> Page {
    let id = event_id("id", &id)?;
    let tree = c
        .store
        .causation_tree(id)
        .await
        .map_err(|e| unavailable("reading an event", &e))?
        .ok_or_else(|| missing(format!("no event `{id}` is stored")))?;
    let event = tree
        .find(id)
        .map(|node| node.event.clone())
        .ok_or_else(|| missing(format!("no event `{id}` is stored")))?;
    let headers = serde_json::to_string_pretty(&event.headers).unwrap_or_default();
    let of_event = DeadLetterQuery::new().event_id(id);
    let dead_letters = c
        .store
        .dead_letters(&of_event.clone().limit(EVENT_DEAD_LETTERS))
        .await
        .map_err(|e| unavailable("listing the event's dead letters", &e))?;
    let dead_total = if dead_letters.len() < EVENT_DEAD_LETTERS {
        dead_letters.len() as u64
    } else {
        c.store
            .count_dead_letters(&of_event)
            .await
            .map_err(|e| unavailable("counting the event's dead letters", &e))?
    };
    let id_text = id.to_string();
    page(
        &event.routing_key,
        html! {
            h1 { (event.routing_key) }
            table {
                tr { th { "Id" } td { (event.id) } }
                tr { th { "Source" } td { (event.source) } }
                tr { th { "Node" } td { (event.node) } }
                tr { th { "Time" } td { (when::time(&event.time)) } }
                @if let Some(due) = scheduled_due(&event.headers) {
                    tr.scheduled { th { "Scheduled" } td {
                        "for "
                        @match Timestamp::parse(due) {
                            Ok(due) => (when::time(&due)),
                            Err(_) => (due),
                        }
                        "; delivered (emitted when due, stored " (when::time(&event.received_at)) ")"
                    } }
                }
                tr { th { "Received" } td { (when::time(&event.received_at)) } }
                tr { th { "Schema" } td { (event.schema.unwrap_or(1)) } }
                tr { th { "Publisher" } td { (event.publisher.as_deref().unwrap_or("—")) } }
                tr { th { "Caused by" } td {
                    @match &event.causation_id {
                        Some(cause) => @match EventId::from_str(cause) {
                            Ok(cause) => a href=(under("/events", cause)) { (cause) },
                            Err(_) => (cause),
                        },
                        None => "—",
                    }
                } }
            }
            (sagas::section(&tree))
            h2 { "Dead letters" }
            @if dead_letters.is_empty() { p.note { "None: no consumer dead-lettered this event." } } @else {
                table.event-dead {
                    tr { th { "Dead at" } th { "Queue" } th { "Reason" } th { "Re-driven" } th { "Id" } }
                    @for dead in &dead_letters {
                        tr {
                            td { (when::time(&dead.dead_at)) }
                            td { (dead.queue.as_deref().unwrap_or("—")) }
                            td { (dead.reason.map_or("—", |r| r.as_str())) }
                            td.num { (dead.redrive_count) }
                            td { a.dead href=(under("/dead", dead.id)) { (dead.id) } }
                        }
                    }
                }
                p {
                    @if dead_total > dead_letters.len() as u64 {
                        "The newest " (dead_letters.len()) " of " (dead_total) " are listed here. "
                    }
                    a.event-dead-list href=(link("/dead", [("event", id_text.as_str())])) {
                        "All " (dead_total) " in the dead letters' list (paged, to re-drive or purge) →"
                    }
                }
            }
            h2 { "Body" }
            pre.body { (pretty_json(&event.body)) }
            h2 { "Headers" }
            pre.headers { (headers) }
            h2 { "Causation tree (" (tree.len()) " events)" }
            @if let Some(missing) = &tree.missing_cause {
                p.note { "Its first cause, " (missing) ", is not stored." }
            }
            @if tree.truncated { p.note { "The tree was cut at its size limit." } }
            (svg::tree(&tree))
        },
    )
}

/// The most dead letters of one event its page lists.
const EVENT_DEAD_LETTERS: usize = 50;
