//! The pages: each handler checks its input (400 or 404 pages), reads the store, and renders
//! HTML in which the template escapes every interpolated value.

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use maud::html;
use mesh_audit::{DeadLetterId, DeadLetterQuery, Redrive, RedriveOptions};
use mesh_core::{codec, EventId, Timestamp};
use tracing::{info, warn};

use crate::actions::{actions_refused, confirm_form, guard, Pairs};
use crate::input::{dead_id, event_id, reason};
use crate::params::{link, under, Params};
use crate::respond::{auto_refresh, bad, missing, page, unavailable, Fail, Page, Shared};
use crate::{svg, when, Console};

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

fn pretty_json(text: &str) -> String {
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
    let dead_letters = c
        .store
        .dead_letters(
            &DeadLetterQuery::new()
                .event_id(id)
                .limit(EVENT_DEAD_LETTERS),
        )
        .await
        .map_err(|e| unavailable("listing the event's dead letters", &e))?;
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
                @if dead_letters.len() == EVENT_DEAD_LETTERS {
                    p.note { "The newest " (EVENT_DEAD_LETTERS) " are listed." }
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

/// The most dead letters a group's list shows.
const MAX_LIST: usize = 200;

/// The most characters of a dead letter's last error its list shows (the whole on hover and
/// on its page).
const LAST_ERROR_SHOWN: usize = 80;

pub(crate) async fn dead(State(c): Shared, RawQuery(raw): RawQuery) -> Page {
    let p = Params::parse(raw.as_deref());
    let queue = p.get("queue");
    let reason = p.get("reason").map(reason).transpose()?;
    if queue.is_none() && reason.is_none() {
        return dead_groups(&c).await;
    }
    let mut query = DeadLetterQuery::new();
    if let Some(queue) = queue {
        query = query.queue(queue);
    }
    if let Some(reason) = reason {
        query = query.reason(reason);
    }
    let total = c
        .store
        .count_dead_letters(&query)
        .await
        .map_err(|e| unavailable("counting dead letters", &e))?;
    let list = c
        .store
        .dead_letters(&query.clone().limit(MAX_LIST))
        .await
        .map_err(|e| unavailable("listing dead letters", &e))?;
    let reason_text = reason.map(|r| r.as_str()).unwrap_or_default();
    let mut group: Vec<(&str, &str)> = Vec::new();
    if let Some(queue) = queue {
        group.push(("queue", queue));
    }
    if reason.is_some() {
        group.push(("reason", reason_text));
    }
    let title = format!(
        "Dead letters of {} ({})",
        queue.unwrap_or("every queue"),
        reason.map_or("every reason", |r| r.as_str())
    );
    page(
        "Dead letters",
        html! {
            h1 { (title) }
            (auto_refresh())
            div #refreshed {
            p { (total) " dead letter(s)"
                @if total > list.len() as u64 { ", the newest " (list.len()) " shown" } "." }
            @if c.actions() && queue.is_some() {
                p {
                    a.action href=(link("/dead/redrive", group.clone())) { "Re-drive this group…" }
                    " · "
                    a.action href=(link("/dead/purge", group.clone())) { "Purge this group…" }
                }
            }
            form method="get" action="/dead/redrive" {
                table {
                    tr {
                        @if c.actions() { th {} }
                        th { "Dead at" }
                        @if queue.is_none() { th { "Queue" } }
                        th { "Key" } th { "Reason" } th { "Attempts" } th { "Last error" }
                        th { "Re-driven" } th { "Id" } th { "Provenance" }
                    }
                    @for dead in &list {
                        tr {
                            @if c.actions() {
                                td { input type="checkbox" name="id" value=(dead.id); }
                            }
                            td { (when::time(&dead.dead_at)) }
                            @if queue.is_none() {
                                td.queue { (dead.queue.as_deref().unwrap_or("—")) }
                            }
                            td { (dead.routing_key) }
                            td { (dead.reason.map_or("—", |r| r.as_str())) }
                            td.num { (dead.attempts) }
                            td.error-text {
                                @if let Some(error) = &dead.last_error {
                                    span title=(error) { (codec::cut(error, LAST_ERROR_SHOWN)) }
                                } @else { "—" }
                            }
                            td.num { (dead.redrive_count) }
                            td { a.dead href=(under("/dead", dead.id)) { (dead.id) } }
                            td { @if dead.untrusted { span.untrusted { "untrusted" } } }
                        }
                    }
                }
                @if c.actions() && !list.is_empty() {
                    p {
                        button type="submit" { "Re-drive the selected…" }
                        " "
                        button type="submit" formaction="/dead/purge" { "Purge the selected…" }
                    }
                }
            }
            }
        },
    )
}

async fn dead_groups(c: &Console) -> Page {
    let groups = c
        .store
        .dead_letter_groups(&DeadLetterQuery::new())
        .await
        .map_err(|e| unavailable("counting dead letters", &e))?;
    page(
        "Dead letters",
        html! {
            h1 { "Dead letters" }
            (auto_refresh())
            div #refreshed {
            @if groups.is_empty() { p.note { "None recorded." } } @else {
                table.groups {
                    tr { th { "Queue" } th { "Reason" } th { "Count" } th { "Pending" } th {} }
                    @for group in &groups {
                        @let queue = group.queue.as_deref().unwrap_or_default();
                        @let reason = group.reason.map(|r| r.as_str()).unwrap_or_default();
                        @let pairs: Vec<(&str, &str)> = [("queue", queue), ("reason", reason)]
                            .into_iter().filter(|(_, v)| !v.is_empty()).collect();
                        tr {
                            td { @if queue.is_empty() { span.note { "(none recorded)" } } @else { (queue) } }
                            td { @if reason.is_empty() { span.note { "(none recorded)" } } @else { (reason) } }
                            td.num { (group.count) }
                            td.num { (group.pending) }
                            td {
                                @if !pairs.is_empty() {
                                    a.group href=(link("/dead", pairs.clone())) { "list" }
                                }
                                @if c.actions() && !queue.is_empty() && !reason.is_empty() {
                                    " · " a href=(link("/dead/redrive", pairs.clone())) { "re-drive…" }
                                    " · " a href=(link("/dead/purge", pairs.clone())) { "purge…" }
                                }
                            }
                        }
                    }
                }
            }
            }
        },
    )
}

pub(crate) async fn dead_letter(State(c): Shared, Path(id): Path<String>) -> Page {
    let id = dead_id(&id)?;
    let dead = c
        .store
        .dead_letter(id)
        .await
        .map_err(|e| unavailable("reading a dead letter", &e))?
        .ok_or_else(|| missing(format!("no dead letter `{id}` is recorded")))?;
    let headers = serde_json::to_string_pretty(&dead.headers).unwrap_or_default();
    let body = pretty_json(&String::from_utf8_lossy(&dead.body));
    let id_text = id.to_string();
    page(
        "Dead letter",
        html! {
            h1 { "Dead letter " (dead.id) }
            table {
                tr { th { "Key" } td { (dead.routing_key) } }
                tr { th { "Event" } td {
                    @if let Some(event) = dead.event_id {
                        a href=(under("/events", event)) { (event) }
                    } @else { "—" }
                } }
                tr { th { "Queue" } td { (dead.queue.as_deref().unwrap_or("—")) } }
                tr { th { "Reason" } td { (dead.reason.map_or("—", |r| r.as_str())) } }
                tr { th { "Attempts" } td { (dead.attempts) } }
                tr { th { "Last error" } td { pre { (dead.last_error.as_deref().unwrap_or("—")) } } }
                tr { th { "Dead at" } td { (when::time(&dead.dead_at)) } }
                tr { th { "Re-driven" } td {
                    (dead.redrive_count) " time(s)"
                    @if let Some(at) = dead.redriven_at { ", last " (when::time(&at)) }
                } }
                tr { th { "Publisher" } td { (dead.user_id.as_deref().unwrap_or("—")) } }
                tr { th { "Provenance" } td {
                    @if dead.untrusted {
                        span.untrusted { "untrusted: its publisher does not own the queue it names; \
                            re-driven only with its x-mesh-* claims stripped" }
                    } @else { "believed" }
                } }
            }
            @if c.actions() {
                p { a.action href=(link("/dead/redrive", [("id", id_text.as_str())])) { "Re-drive…" } }
            }
            h2 { "Body" }
            pre.body { (body) }
            h2 { "Headers" }
            pre.headers { (headers) }
        },
    )
}

/// The most dead letters one selection names.
const MAX_SELECTION: usize = 1000;

/// Which dead letters a re-drive names: ids (one or more), or a group (a queue, and maybe a
/// reason); with the pairs that name them again in the confirmation's form.
fn redrive_which(p: &Params) -> Result<(Vec<Redrive>, Pairs), Fail> {
    let ids = p.all("id");
    if !ids.is_empty() {
        if ids.len() > MAX_SELECTION {
            return Err(bad(format!(
                "at most {MAX_SELECTION} dead letters at once: re-drive their group instead"
            )));
        }
        let mut which = Vec::with_capacity(ids.len());
        let mut pairs = Vec::with_capacity(ids.len());
        for id in ids {
            let id = dead_id(id)?;
            which.push(Redrive::One(id));
            pairs.push(("id".to_owned(), id.to_string()));
        }
        return Ok((which, pairs));
    }
    let (query, pairs) = group(p)?;
    Ok((vec![Redrive::Matching(query.limit(usize::MAX))], pairs))
}

/// The override a re-drive asks for: `strip_untrusted_claims=yes` re-drives untrusted dead
/// letters with their `x-mesh-*` claims stripped (refused otherwise).
const STRIP: &str = "strip_untrusted_claims";

/// The re-drive's options, and the pairs naming its dead letters with the override kept.
fn redrive_options(p: &Params, mut pairs: Pairs) -> (RedriveOptions, Pairs) {
    let strip = p.get(STRIP) == Some("yes");
    if strip {
        pairs.push((STRIP.to_owned(), "yes".to_owned()));
    }
    (RedriveOptions::new().strip_untrusted_claims(strip), pairs)
}

/// A group of dead letters: `queue` (required), `reason` (optional).
fn group(p: &Params) -> Result<(DeadLetterQuery, Pairs), Fail> {
    let queue = p.get("queue").ok_or_else(|| {
        bad("say which dead letters: id=… (one or more), or queue=Q (and reason=R)")
    })?;
    let mut query = DeadLetterQuery::new().queue(queue);
    let mut pairs = vec![("queue".to_owned(), queue.to_owned())];
    if let Some(text) = p.get("reason") {
        let reason = reason(text)?;
        query = query.reason(reason);
        pairs.push(("reason".to_owned(), reason.as_str().to_owned()));
    }
    Ok((query, pairs))
}

pub(crate) async fn redrive_confirm(State(c): Shared, RawQuery(raw): RawQuery) -> Page {
    if let Some(refused) = actions_refused(&c) {
        return Err(refused);
    }
    let p = Params::parse(raw.as_deref());
    let (which, plain) = redrive_which(&p)?;
    let (options, pairs) = redrive_options(&p, plain.clone());
    let mut to: BTreeMap<String, u64> = BTreeMap::new();
    let mut refused: Vec<(DeadLetterId, String)> = Vec::new();
    let mut untrusted = 0usize;
    for which in which {
        let plan = match c.store.redrive_plan_with(which, options).await {
            Ok(plan) => plan,
            Err(e) if e.is_not_found() => return Err(missing(e.to_string())),
            Err(e) => return Err(unavailable("planning a re-drive", &e)),
        };
        for (_, queue) in plan.redrive {
            *to.entry(queue).or_default() += 1;
        }
        untrusted += plan
            .refused
            .iter()
            .filter(|(_, e)| matches!(e.kind(), mesh_audit::ErrorKind::Untrusted))
            .count();
        refused.extend(plan.refused.into_iter().map(|(id, e)| (id, e.to_string())));
    }
    let total: u64 = to.values().sum();
    let mut stripped = plain;
    stripped.push((STRIP.to_owned(), "yes".to_owned()));
    page(
        "Re-drive",
        html! {
            h1 { "Re-drive " (total) " dead letter(s)?" }
            @if c.transport.is_none() {
                p.error { "The console has no broker connection: a re-drive would fail." }
            }
            table.plan {
                tr { th { "To queue" } th { "Dead letters" } }
                @for (queue, n) in &to { tr { td { (queue) } td.num { (n) } } }
            }
            @if !refused.is_empty() {
                h2 { (refused.len()) " would be refused" }
                ul { @for (id, why) in &refused { li { (id) ": " (why) } } }
            }
            @if untrusted > 0 && !options.strip_untrusted_claims {
                p.untrusted {
                    (untrusted) " untrusted: "
                    a.action href=(link("/dead/redrive", stripped.iter().map(|(k, v)| (k.as_str(), v.as_str())))) {
                        "re-drive them too, with their x-mesh-* claims stripped…"
                    }
                }
            }
            @if options.strip_untrusted_claims {
                p.untrusted { "Untrusted dead letters go with every x-mesh-* header removed." }
            }
            @if total > 0 { (confirm_form("/dead/redrive", &pairs, "Re-drive")) }
        },
    )
}

pub(crate) async fn redrive(State(c): Shared, headers: HeaderMap, body: Bytes) -> Page {
    let form = Params::from_bytes(&body);
    let who = guard(&c, "redrive", &headers, &form)?;
    let (which, pairs) = redrive_which(&form)?;
    let (options, pairs) = redrive_options(&form, pairs);
    let Some(transport) = c.transport.clone() else {
        return Err(Fail::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the console has no broker connection to re-drive through",
        ));
    };
    let target: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let target = target.join(" ");
    let mut redriven: Vec<DeadLetterId> = Vec::new();
    let mut failed: Vec<(String, String)> = Vec::new();
    for which in which {
        let label = match &which {
            Redrive::One(id) => id.to_string(),
            _ => "group".to_owned(),
        };
        match c
            .store
            .redrive_with(transport.as_ref(), which, options)
            .await
        {
            Ok(report) => {
                redriven.extend(report.redriven);
                failed.extend(
                    report
                        .failed
                        .into_iter()
                        .map(|(id, e)| (id.to_string(), e.to_string())),
                );
            }
            Err(e) => failed.push((label, e.to_string())),
        }
    }
    info!(
        who = %mesh_core::text::EscapedDisplay(&who),
        action = "redrive",
        target = %mesh_core::text::EscapedDisplay(&target),
        redriven = redriven.len(),
        failed = failed.len(),
        "console action"
    );
    page(
        "Re-driven",
        html! {
            h1 { "Re-driven: " (redriven.len()) }
            ul.redriven { @for id in &redriven { li { a href=(under("/dead", id)) { (id) } } } }
            @if !failed.is_empty() {
                h2 { "Failed: " (failed.len()) }
                ul { @for (id, why) in &failed { li { (id) ": " (why) } } }
            }
            p { a href="/dead" { "Back to the dead letters" } }
        },
    )
}

/// Which dead letters a purge names: ids (one or more, at most [`MAX_SELECTION`]), or a
/// group; with the pairs that name them again in the confirmation's form.
enum Purge {
    Ids(Vec<DeadLetterId>),
    Group(DeadLetterQuery),
}

fn purge_which(p: &Params) -> Result<(Purge, Pairs), Fail> {
    let ids = p.all("id");
    if ids.is_empty() {
        let (query, pairs) = group(p)?;
        return Ok((Purge::Group(query), pairs));
    }
    if ids.len() > MAX_SELECTION {
        return Err(bad(format!(
            "at most {MAX_SELECTION} dead letters at once: purge their group instead"
        )));
    }
    let ids = ids
        .into_iter()
        .map(dead_id)
        .collect::<Result<Vec<_>, _>>()?;
    let pairs = ids
        .iter()
        .map(|id| ("id".to_owned(), id.to_string()))
        .collect();
    Ok((Purge::Ids(ids), pairs))
}

pub(crate) async fn purge_confirm(State(c): Shared, RawQuery(raw): RawQuery) -> Page {
    if let Some(refused) = actions_refused(&c) {
        return Err(refused);
    }
    let p = Params::parse(raw.as_deref());
    let (which, pairs) = purge_which(&p)?;
    let (n, what) = match &which {
        Purge::Group(query) => {
            let what: Vec<String> = pairs.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let n = c
                .store
                .count_dead_letters(query)
                .await
                .map_err(|e| unavailable("counting dead letters", &e))?;
            (n, format!("the dead letters of {}", what.join(", ")))
        }
        Purge::Ids(ids) => {
            let n = c
                .store
                .count_dead_letter_ids(ids)
                .await
                .map_err(|e| unavailable("counting dead letters", &e))?;
            if n == 0 {
                return Err(missing("none of the selected dead letters is recorded"));
            }
            (n, format!("the {} selected dead letter(s)", ids.len()))
        }
    };
    page(
        "Purge",
        html! {
            h1 { "Purge " (n) " dead letter(s)?" }
            p { "Deletes the store's records of " (what)
                " (re-driven or not). No queue on the broker is touched." }
            @if n > 0 { (confirm_form("/dead/purge", &pairs, "Purge")) }
        },
    )
}

pub(crate) async fn purge(State(c): Shared, headers: HeaderMap, body: Bytes) -> Page {
    let form = Params::from_bytes(&body);
    let who = guard(&c, "purge", &headers, &form)?;
    let (which, pairs) = purge_which(&form)?;
    let purged = match &which {
        Purge::Group(query) => c.store.purge_dead_letters(query).await,
        Purge::Ids(ids) => c.store.purge_dead_letter_ids(ids).await,
    }
    .map_err(|e| unavailable("purging dead letters", &e))?;
    let target: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    info!(who = %mesh_core::text::EscapedDisplay(&who), action = "purge", target = %mesh_core::text::EscapedDisplay(target.join(" ")), purged, "console action");
    page(
        "Purged",
        html! {
            h1 { "Purged: " span.purged { (purged) } }
            p { a href="/dead" { "Back to the dead letters" } }
        },
    )
}
