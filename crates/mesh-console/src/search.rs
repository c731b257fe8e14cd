//! `/events`: the event search. A form (key pattern, source, words in the body, a time range
//! as RFC 3339 or as a duration back from now, `2h`, with presets; an id; the order and the
//! page size), the number of matching events, and a page of them with a keyset cursor to the
//! next. Words in the body are found through the store's full-text index (decision 0030):
//! a phrase of whole words, case ignored, the text taken literally.
//!
//! A pattern no index serves (`*.*.order.special`) is matched on each event read. The page
//! reads walks of [`Console::search_reads`] events until it is full, the store is searched,
//! or [`Console::search_budget`] is spent; then it says how much it searched, and the
//! console's script goes on by itself (the link `a.next.auto`), appending what each further
//! walk finds, so the operator never clicks on to find matches.
//!
//! Bad input (a pattern, a time, an id, a page size) is shown on the page, above the form as
//! it was typed, with status 400.

use std::time::{Duration, Instant};

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use maud::{html, Markup};
use mesh_audit::{EventQuery, EventRecord, Order};
use mesh_core::EventId;

use crate::input::{body, event_id, pattern, time};
use crate::params::{link, under, Params};
use crate::respond::{bad, page, page_with_status, shown, unavailable, Fail, Page, Shared};
use crate::{when, Console};

/// The most events a page of search results holds.
const MAX_PAGE: usize = 500;
/// The page sizes the form offers (any of 1 to [`MAX_PAGE`] is taken from the URL).
const PAGE_SIZES: [usize; 5] = [20, 50, 100, 200, 500];
const DEFAULT_PAGE: usize = 50;
/// The time presets: `since` as a duration back from now.
const PRESETS: [(&str, &str); 5] = [
    ("15m", "last 15 min"),
    ("1h", "last hour"),
    ("24h", "last day"),
    ("7d", "last 7 days"),
    ("30d", "last 30 days"),
];
/// How long counting the matches may take before the page says "at least".
const COUNT_BUDGET: Duration = Duration::from_millis(250);

/// What the form asked, checked.
struct Asked {
    query: EventQuery,
    id: Option<EventId>,
    after: Option<EventId>,
    order: Order,
    limit: usize,
}

fn asked(p: &Params) -> Result<Asked, Fail> {
    let mut query = EventQuery::new();
    if let Some(key) = p.get("key").filter(|k| !k.is_empty()) {
        query = query.pattern(pattern(key)?);
    }
    if let Some(source) = p.get("source").filter(|s| !s.is_empty()) {
        query = query.source(source);
    }
    if let Some(text) = p.get("body").filter(|b| !b.trim().is_empty()) {
        query = query.body(body(text)?);
    }
    if let Some(since) = p.get("since").filter(|s| !s.is_empty()) {
        query = query.since(time("since", since)?);
    }
    if let Some(until) = p.get("until").filter(|s| !s.is_empty()) {
        query = query.until(time("until", until)?);
    }
    let order = match p.get("order") {
        None | Some("desc") => Order::Desc,
        Some("asc") => Order::Asc,
        Some(other) => {
            return Err(bad(format!(
                "order: `{}` is neither `asc` nor `desc`",
                shown(other)
            )))
        }
    };
    let limit = match p.get("limit") {
        None => DEFAULT_PAGE,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| bad(format!("limit: `{}` is not 1 to {MAX_PAGE}", shown(text))))?,
    };
    let id = p
        .get("id")
        .filter(|id| !id.is_empty())
        .map(|id| event_id("id", id))
        .transpose()?;
    let after = p.get("after").map(|a| event_id("after", a)).transpose()?;
    Ok(Asked {
        query: query.order(order),
        id,
        after,
        order,
        limit,
    })
}

/// What a page found.
struct Results {
    found: Vec<EventRecord>,
    /// Where the search goes on: after the page's last event, or after the last event read.
    after: Option<EventId>,
    /// Events read, when the budget stopped the page before it filled.
    stopped: Option<u64>,
    /// Matching events: exact, or at least this many when counting took too long.
    count: Option<(u64, bool)>,
}

async fn run(c: &Console, asked: &Asked) -> Result<Results, Fail> {
    if let Some(id) = asked.id {
        let found: Vec<EventRecord> = c
            .store
            .event(id)
            .await
            .map_err(|e| unavailable("reading an event", &e))?
            .into_iter()
            .collect();
        let count = Some((found.len() as u64, true));
        return Ok(Results {
            found,
            after: None,
            stopped: None,
            count,
        });
    }
    let mut query = asked
        .query
        .clone()
        .limit(asked.limit + 1)
        .read_limit(c.search_reads);
    if let Some(after) = asked.after {
        let last = c
            .store
            .event(after)
            .await
            .map_err(|e| unavailable("reading the cursor's event", &e))?
            .ok_or_else(|| bad("after: the cursor names no stored event"))?;
        query = query.after(last.time, last.id);
    }
    let began = Instant::now();
    let mut found: Vec<EventRecord> = Vec::new();
    let mut read = 0u64;
    // Walks of `search_reads` events until the page is full, the store is searched, or
    // the budget is spent (at least one walk).
    let stopped_after = loop {
        let walk = c
            .store
            .search(&query.clone().limit(asked.limit + 1 - found.len()))
            .await
            .map_err(|e| unavailable("searching events", &e))?;
        read = read.saturating_add(walk.read);
        found.extend(walk.events);
        match walk.stopped_after {
            Some((time, id)) if found.len() <= asked.limit => {
                if began.elapsed() >= c.search_budget {
                    break Some(id);
                }
                query = query.after(time, id);
            }
            _ => break None,
        }
    };
    let more = found.len() > asked.limit;
    found.truncate(asked.limit);
    let after = match (more, found.last(), stopped_after) {
        (true, Some(last), _) => Some(last.id),
        (false, _, Some(last_read)) => Some(last_read),
        _ => None,
    };
    let count = match tokio::time::timeout(COUNT_BUDGET, c.store.count_events(&asked.query)).await {
        Ok(Ok(n)) => Some((n, true)),
        Ok(Err(_)) => None,
        Err(_) => None,
    };
    Ok(Results {
        found,
        after,
        stopped: (!more && stopped_after.is_some()).then_some(read),
        count,
    })
}

pub(crate) async fn events(State(c): Shared, RawQuery(raw): RawQuery) -> Page {
    let p = Params::parse(raw.as_deref());
    let searched = match asked(&p) {
        Ok(asked) => run(&c, &asked).await.map(|r| (asked, r)),
        Err(fail) => Err(fail),
    };
    match searched {
        Ok((asked, results)) => {
            let total = c.store.counts().await.ok().map(|counts| counts.events);
            page(
                "Events",
                html! {
                    h1 { "Events" }
                    (form(&p, asked.order, asked.limit))
                    (listing(&p, &results, total))
                },
            )
        }
        Err(fail) if fail.status() == StatusCode::BAD_REQUEST => page_with_status(
            StatusCode::BAD_REQUEST,
            "Events",
            html! {
                h1 { "Events" }
                p.error.input-error { (fail.message()) }
                (form(&p, Order::Desc, DEFAULT_PAGE))
            },
        ),
        Err(fail) => Err(fail),
    }
}

/// The search form, holding what was typed.
fn form(p: &Params, order: Order, limit: usize) -> Markup {
    let value = |name: &str| p.get(name).unwrap_or_default().to_owned();
    let preset = |since: &str| {
        let mut pairs: Vec<(&str, &str)> = ["key", "source", "body", "order", "limit"]
            .into_iter()
            .filter_map(|k| p.get(k).map(|v| (k, v)))
            .collect();
        pairs.push(("since", since));
        link("/events", pairs)
    };
    html! {
        form.search method="get" action="/events" {
            input name="key" placeholder="key pattern (module.billing.#)" value=(value("key"));
            input name="source" placeholder="source" value=(value("source"));
            input name="body" placeholder="words in the body" value=(value("body"));
            input name="since" placeholder="since (2h, or RFC 3339)" value=(value("since"));
            input name="until" placeholder="until (10m, or RFC 3339)" value=(value("until"));
            input name="id" placeholder="event id" value=(value("id"));
            select name="order" aria-label="order" {
                option value="desc" selected[order == Order::Desc] { "newest first" }
                option value="asc" selected[order == Order::Asc] { "oldest first" }
            }
            select name="limit" aria-label="page size" {
                @for size in PAGE_SIZES {
                    option value=(size) selected[size == limit] { (size) " a page" }
                }
                @if !PAGE_SIZES.contains(&limit) {
                    option value=(limit) selected { (limit) " a page" }
                }
            }
            button type="submit" { "Search" }
        }
        p.presets {
            @for (since, label) in PRESETS {
                a.preset href=(preset(since)) { (label) } " "
            }
        }
    }
}

/// The count, the page of events, and the way on.
fn listing(p: &Params, r: &Results, total: Option<u64>) -> Markup {
    let next = r.after.map(|after| {
        let after = after.to_string();
        let mut pairs: Vec<(&str, &str)> =
            ["key", "source", "body", "since", "until", "order", "limit"]
                .into_iter()
                .filter_map(|k| p.get(k).map(|v| (k, v)))
                .collect();
        pairs.push(("after", &after));
        link("/events", pairs)
    });
    html! {
        p.count {
            @match r.count {
                Some((n, true)) => { span.matches { (n) } " matching event(s)" }
                _ => { "Matching events: not counted (counting took longer than "
                    (COUNT_BUDGET.as_millis()) " ms)" }
            }
            @if let Some(total) = total { " of " (total) " stored." }
        }
        @if let Some(read) = r.stopped {
            p.note.partial {
                "Searched " (read) " stored events"
                @if let Some(total) = total { " of " (total) }
                " without filling this page (a pattern no index serves is matched on each \
                 event); searching on…"
            }
        } @else if r.found.is_empty() {
            p.note.none { "No event matches." }
        }
        table.events hidden[r.found.is_empty()] {
            tr { th { "Time" } th { "Key" } th { "Source" } th { "Node" } th { "Id" } }
            @for event in &r.found {
                tr.event {
                    td { (when::time(&event.time)) }
                    td { (event.routing_key) }
                    td { (event.source) }
                    td { (event.node) }
                    td { a.event href=(under("/events", event.id)) { (event.id) } }
                }
            }
        }
        @if let Some(next) = &next {
            @if r.stopped.is_some() {
                p { a.next.auto rel="next" href=(next) data-limit=(p.get("limit").unwrap_or("50")) { "Search on →" } }
            } @else {
                p { a.next rel="next" href=(next) { "Next page →" } }
            }
        }
    }
}
