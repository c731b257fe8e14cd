//! The system map: who emits which keys (the audit store's history), and which module
//! queues receive them (their bindings on `mesh.events`, from the management API); and a
//! module queue's page, with a replay of stored events into it.

use std::collections::BTreeMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use maud::{html, Markup};
use mesh_audit::{DeadLetterQuery, EventQuery, Flow, Replay};
use mesh_core::naming;
use mesh_core::Timestamp;
use tracing::{info, warn};

use crate::actions::{actions_refused, confirm_form, guard, Pairs};
use crate::broker::Binding;
use crate::broker::ModuleQueue;
use crate::input::{pattern, time};
use crate::params::{link, under, Params};
use crate::respond::{bad, missing, page, shown, unavailable, Fail, Page, Shared};
use crate::topology::SystemMap;
use crate::{module_graph, svg, when, Console};

/// The window the map draws by default: the last day.
const DEFAULT_WINDOW: Duration = Duration::from_secs(24 * 3600);

/// The most events one replay from the console sends; a larger one is `mesh audit replay`'s.
pub(crate) const MAX_REPLAY: u64 = 10_000;

/// The replay rate, events a second, unless the form says otherwise.
const DEFAULT_RATE: u32 = 1_000;

/// The window of a request: `since` (default a day ago) and `until`.
fn window(p: &Params) -> Result<(Timestamp, Option<Timestamp>), Fail> {
    let since = match p.get("since") {
        Some(text) => time("since", text)?,
        None => Timestamp::now()
            .checked_sub(DEFAULT_WINDOW)
            .unwrap_or_else(Timestamp::now),
    };
    let until = p.get("until").map(|t| time("until", t)).transpose()?;
    Ok((since, until))
}

/// The bindings, or why they are not known (shown on the page).
async fn bindings(c: &Console) -> (Vec<Binding>, Option<String>) {
    let Some(broker) = &c.broker else {
        return (
            Vec::new(),
            Some(
                "No management API is configured: the receiving queues are not known \
                 (start the console with the broker's management API)."
                    .to_owned(),
            ),
        );
    };
    match broker.bindings().await {
        Ok(bindings) => (bindings, None),
        Err(e) => {
            warn!(error = %mesh_core::text::EscapedDisplay(&e), "reading the bindings failed");
            (
                Vec::new(),
                Some(format!("The management API did not list the bindings: {e}")),
            )
        }
    }
}

pub(crate) async fn map(State(c): Shared, RawQuery(raw): RawQuery) -> Page {
    let p = Params::parse(raw.as_deref());
    let (since, until) = window(&p)?;
    let flows = c
        .store
        .rolled_up_flows(since, until)
        .await
        .map_err(|e| unavailable("reading the rollups", &e))?;
    let (bindings, note) = bindings(&c).await;
    let map = SystemMap::new(flows, &bindings);
    let since_text = since.to_string();
    let until_text = until.map(|t| t.to_string());
    let mut window_pairs: Vec<(&str, &str)> = vec![("since", since_text.as_str())];
    if let Some(until) = &until_text {
        window_pairs.push(("until", until.as_str()));
    }
    page(
        "System map",
        html! {
            h1 { "System map" }
            p.note {
                "Who emitted which keys in the minutes from " (when::time(&since)) " to "
                @if let Some(until) = &until { (when::time(until)) } @else { "now" }
                " (the audit store's rollups), and which module queues receive them (their \
                 bindings). "
                "Audit loggers, bound to every key, are left out."
            }
            @if let Some(note) = &note { p.error { (note) } }
            @if map.flows.is_empty() && map.receivers.is_empty() {
                p.note { "Nothing to draw: no event in the window and no module queue." }
            } @else {
                (svg::map(&map, &window_pairs))
                h2 { "Modules" }
                p.note {
                    "Which module depends on which: an edge from the module that emitted events to \
                     each module whose queues received them, wider with more events."
                }
                @let edges = module_graph::module_edges(&map);
                @if edges.is_empty() { p.note { "No event reached a module queue in the window." } }
                @else { (module_graph::view(&edges, &window_pairs)) }
                h2 { "Flows" }
                table.flows {
                    tr { th { "Source" } th { "Key" } th.num { "Events" } th { "Received by" } }
                    @for flow in &map.flows {
                        tr {
                            td { (flow.source) }
                            td { (flow.key) }
                            td.num {
                                a href=(link("/events", flow_pairs(flow, &window_pairs))) { (flow.events) }
                            }
                            td {
                                @match map.routes.get(&flow.key) {
                                    Some(to) => @for (i, (queue, via)) in to.iter().enumerate() {
                                        @if i > 0 { ", " }
                                        a.receiver href=(under("/modules", queue)) title=(format!("bound on {via}")) { (queue) }
                                    },
                                    None => span.note { "no module queue" },
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// The query pairs of a flow's events: its source, its key, the window.
pub(crate) fn flow_pairs<'a>(
    flow: &'a Flow,
    window: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    let mut pairs = vec![("source", flow.source.as_str()), ("key", flow.key.as_str())];
    pairs.extend_from_slice(window);
    pairs
}

/// A consumer queue named in a path: 404 unless it is one (`<node>.<module>.events`).
fn module_queue(name: &str) -> Result<String, Fail> {
    if naming::is_consumer_queue(name) {
        Ok(name.to_owned())
    } else {
        Err(missing(format!(
            "`{}` is not a module queue (<node>.<module>.events or shared.<module>.events)",
            shown(name)
        )))
    }
}

/// How many dead letters of `queue` were never re-driven.
async fn pending_dead_letters(c: &Console, queue: &str) -> Result<u64, Fail> {
    c.store
        .count_dead_letters(&DeadLetterQuery::new().queue(queue).redriven(false))
        .await
        .map_err(|e| unavailable("counting dead letters", &e))
}

pub(crate) async fn module(State(c): Shared, Path(name): Path<String>) -> Page {
    let queue = module_queue(&name)?;
    let (bindings, note) = bindings(&c).await;
    let patterns: Vec<&Binding> = bindings.iter().filter(|b| b.queue == queue).collect();
    let stats: Option<ModuleQueue> = match &c.broker {
        Some(broker) => broker
            .module_queues()
            .await
            .map_err(|e| warn!(error = %mesh_core::text::EscapedDisplay(&e), "listing the queues failed"))
            .ok()
            .and_then(|queues| queues.into_iter().find(|q| q.name == queue)),
        None => None,
    };
    let pending = pending_dead_letters(&c, &queue).await?;
    let since = Timestamp::now()
        .checked_sub(DEFAULT_WINDOW)
        .unwrap_or_else(Timestamp::now)
        .to_string();
    page(
        &queue,
        html! {
            h1 { "Module queue " (queue) }
            @if let Some(note) = &note { p.error { (note) } }
            table {
                @if let Some(q) = &stats {
                    tr { th { "Messages" } td.num { (q.messages) } }
                    tr { th { "Unacknowledged" } td.num { (q.unacked) } }
                    tr { th { "Consumers" } td.num { (q.consumers) } }
                    tr { th { "Retrying" } td.num { (q.retrying) } }
                } @else {
                    tr { th { "On the broker" } td { span.note { "not known (no management API, or no such queue)" } } }
                }
                tr { th { "Dead letters pending" } td.num {
                    a href=(link("/dead", [("queue", queue.as_str())])) { (pending) }
                } }
            }
            h2 { "Bound on" }
            @if patterns.is_empty() { p.note { "No binding known." } } @else {
                ul.bindings { @for b in &patterns {
                    li { a href=(link("/events", [("key", b.pattern.as_str()), ("since", since.as_str())])) { (b.pattern) } }
                } }
            }
            @if c.actions() {
                h2 { "Replay" }
                p { "Re-publishes stored events into this queue only, with their ids and headers, \
                     marked as replayed: its handlers see them as redelivered history; no other \
                     module receives them. At most " (MAX_REPLAY) " events at once (more: "
                     code { "mesh audit replay" } ")." }
                form.search method="get" action="/replay" {
                    input type="hidden" name="queue" value=(queue);
                    input name="key" placeholder="key pattern (required)" required
                        value=(patterns.first().map(|b| b.pattern.as_str()).unwrap_or_default());
                    input name="since" placeholder="since (RFC 3339, required)" required value=(since);
                    input name="until" placeholder="until (RFC 3339)";
                    input name="rate" placeholder=(format!("events/s ({DEFAULT_RATE})"));
                    button type="submit" { "Replay…" }
                }
            }
        },
    )
}

/// A replay's form: queue, key, since (required), until, rate; with the pairs naming it.
fn replay_form(p: &Params) -> Result<(Replay, NonZeroU32, Pairs), Fail> {
    let queue = module_queue(p.get("queue").ok_or_else(|| bad("queue: required"))?)
        .map_err(|e| bad(e.message().to_owned()))?;
    let key = pattern(
        p.get("key")
            .ok_or_else(|| bad("key: a pattern is required"))?,
    )?;
    let since_text = p
        .get("since")
        .ok_or_else(|| bad("since: a start time is required"))?;
    let since = time("since", since_text)?;
    let mut query = EventQuery::new().pattern(key.clone()).since(since);
    let mut pairs = vec![
        ("queue".to_owned(), queue.clone()),
        ("key".to_owned(), key),
        ("since".to_owned(), since_text.to_owned()),
    ];
    if let Some(text) = p.get("until").filter(|t| !t.is_empty()) {
        query = query.until(time("until", text)?);
        pairs.push(("until".to_owned(), text.to_owned()));
    }
    let rate = match p.get("rate").filter(|t| !t.is_empty()) {
        None => NonZeroU32::new(DEFAULT_RATE).unwrap_or(NonZeroU32::MIN),
        Some(text) => text
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=100_000).contains(n))
            .and_then(NonZeroU32::new)
            .ok_or_else(|| bad(format!("rate: `{}` is not 1 to 100000", shown(text))))?,
    };
    pairs.push(("rate".to_owned(), rate.to_string()));
    let limit = usize::try_from(MAX_REPLAY).unwrap_or(usize::MAX);
    Ok((
        Replay::new(query.limit(limit), queue).rate(rate),
        rate,
        pairs,
    ))
}

pub(crate) async fn replay_confirm(State(c): Shared, RawQuery(raw): RawQuery) -> Page {
    if let Some(refused) = actions_refused(&c) {
        return Err(refused);
    }
    let p = Params::parse(raw.as_deref());
    let (replay, rate, pairs) = replay_form(&p)?;
    let plan = c
        .store
        .replay_plan(&replay)
        .await
        .map_err(|e| unavailable("planning a replay", &e))?;
    let total: u64 = plan.by_key.iter().map(|(_, n)| n).sum();
    page(
        "Replay",
        html! {
            h1 { "Replay " (plan.events) " event(s) to " (plan.queue) "?" }
            @if total > plan.events {
                p.error { (total) " events match: only the oldest " (plan.events)
                    " would be replayed (use " code { "mesh audit replay" } " for more)." }
            }
            @if c.transport.is_none() {
                p.error { "The console has no broker connection: a replay would fail." }
            }
            p { "At most " (rate) " a second, into " (plan.queue) " only." }
            table.plan {
                tr { th { "Key" } th { "Events" } }
                @for (key, n) in &plan.by_key { tr { td { (key) } td.num { (n) } } }
            }
            @if plan.events > 0 { (confirm_form("/replay", &pairs, "Replay")) }
        },
    )
}

pub(crate) async fn replay(State(c): Shared, headers: HeaderMap, body: Bytes) -> Page {
    let form = Params::from_bytes(&body);
    let who = guard(&c, "replay", &headers, &form)?;
    let (replay, _rate, _pairs) = replay_form(&form)?;
    let Some(transport) = c.transport.clone() else {
        return Err(Fail::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the console has no broker connection to replay through",
        ));
    };
    let report = c
        .store
        .replay(transport.as_ref(), &replay)
        .await
        .map_err(|e| unavailable("replaying", &e))?;
    info!(
        who = %mesh_core::text::EscapedDisplay(&who),
        action = "replay",
        queue = replay.queue(),
        replayed = report.replayed,
        failed = report.failed.is_some(),
        "console action"
    );
    let queue = replay.queue().to_owned();
    page(
        "Replayed",
        html! {
            h1 { "Replayed: " span.replayed { (report.replayed) } }
            p { "into " (queue) }
            @if let Some((id, at, e)) = &report.failed {
                p.error { "Stopped at event " (id) " (" (at) "): " (e) ". A replay again from "
                    (at) " sends what was not confirmed (and maybe some again)." }
            }
            p { a href=(under("/modules", &queue)) { "Back to the module queue" } }
        },
    )
}

/// The overview's part about the broker: module queues and audit loggers.
pub(crate) async fn broker_overview(
    c: &Arc<Console>,
    pending: &BTreeMap<Option<String>, u64>,
) -> Markup {
    let Some(broker) = &c.broker else {
        return html! {
            p.note { "No management API is configured: queue depths and the audit loggers' \
                      readiness are not shown." }
        };
    };
    let queues = match broker.module_queues().await {
        Ok(queues) => queues,
        Err(e) => {
            warn!(error = %mesh_core::text::EscapedDisplay(&e), "listing the queues failed");
            return html! { p.error { "The management API did not list the queues: " (e) } };
        }
    };
    let (loggers, modules): (Vec<&ModuleQueue>, Vec<&ModuleQueue>) =
        queues.iter().partition(|q| q.is_audit_logger());
    let (scheduled, modules): (Vec<&ModuleQueue>, Vec<&ModuleQueue>) =
        modules.into_iter().partition(|q| q.is_schedule_queue());
    html! {
        h2 { "Scheduled events waiting, by module" }
        @if scheduled.is_empty() { p.note { "None: no module forwards scheduled events." } } @else {
            table.scheduled {
                tr { th { "Module" } th.num { "Waiting" } th.num { "Forwarders" } th {} }
                @for q in &scheduled {
                    tr {
                        td { (q.module) }
                        // In the schedule queue and on its hops; a copy is counted where it is.
                        td.num { (q.messages + q.retrying) }
                        td.num { (q.consumers) }
                        td { @if q.consumers == 0 { span.error { "no forwarder: they wait" } } }
                    }
                }
            }
            p.note { "Counted by the broker: a scheduled event waits on the broker as one copy, \
                      moving between its module's schedule queue and the hops of its ladder, \
                      where no reader can list it without taking it. The audit store records \
                      it once it is emitted, when due; an event scheduled in a service's outbox \
                      waits in that service's database, not here." }
        }
        h2 { "Module queues" }
        @if modules.is_empty() { p.note { "None." } } @else {
            table.queues {
                tr { th { "Queue" } th.num { "Messages" } th.num { "Unacked" } th.num { "Consumers" }
                     th.num { "Retrying" } th.num { "Dead letters pending" } th {} }
                @for q in &modules {
                    tr {
                        td { a.queue href=(under("/modules", &q.name)) { (q.name) } }
                        td.num { (q.messages) } td.num { (q.unacked) } td.num { (q.consumers) }
                        td.num { (q.retrying) }
                        td.num {
                            a href=(link("/dead", [("queue", q.name.as_str())])) {
                                (pending.get(&Some(q.name.clone())).copied().unwrap_or(0))
                            }
                        }
                        td { @if q.consumers == 0 { span.error { "no consumer" } } }
                    }
                }
            }
        }
        h2 { "Audit loggers" }
        @if loggers.is_empty() {
            p.error { "No audit logger queue: events are not being recorded." }
        } @else {
            table.loggers {
                tr { th { "Node" } th { "Ready" } th.num { "Backlog" } }
                @for q in &loggers {
                    tr {
                        td { (q.node) }
                        td { @if q.consumers > 0 { span.ok { "ready" } } @else { span.error { "not consuming" } } }
                        td.num { (q.messages) }
                    }
                }
            }
        }
    }
}
