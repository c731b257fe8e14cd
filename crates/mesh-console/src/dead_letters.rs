//! `/dead`: the dead letters grouped by queue and reason, a filtered list of them (a queue, a
//! reason, an event) paged by keyset with a page-size choice and a select-all over the whole
//! filter, one dead letter, and the purge (confirmation and action). The re-drive is
//! [`crate::redrive`]'s.
//!
//! A list pages as the event search does: newest first, the "next page" link carrying
//! `after=ID`, the last dead letter of the page, so a page never skips nor repeats one,
//! however many arrive meanwhile. Its form names what is selected: the ticked rows (`id`,
//! at most [`MAX_SELECTION`]), or with "all matching" ticked (`all=yes`) the whole filter, on
//! every page, which the actions then take as a group.

use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::HeaderMap;
use maud::{html, Markup};
use mesh_audit::{DeadLetterId, DeadLetterQuery};
use mesh_core::{codec, DeadReason, EventId, Timestamp};
use tracing::info;

use crate::actions::{actions_refused, confirm_form, guard, Pairs};
use crate::input::{dead_id, event_id, reason, time};
use crate::pages::pretty_json;
use crate::params::{link, under, Params};
use crate::respond::{auto_refresh, bad, missing, page, shown, unavailable, Fail, Page, Shared};
use crate::{when, Console};

/// The page sizes a list offers (any of 1 to [`MAX_PAGE`] is taken from the URL).
const PAGE_SIZES: [usize; 4] = [50, 100, 200, 500];
const DEFAULT_PAGE: usize = 100;
const MAX_PAGE: usize = 500;

/// The most dead letters one selection of ids names (a page holds at most [`MAX_PAGE`]).
pub(crate) const MAX_SELECTION: usize = 1000;

/// The most characters of a dead letter's last error its list shows (the whole on hover and
/// on its page).
const LAST_ERROR_SHOWN: usize = 80;

/// Which dead letters a list, a select-all or a group action names: at least one of a queue,
/// a reason, an event; and, for a re-drive, the time its plan was made (those set aside
/// later are not part of it).
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    pub(crate) queue: Option<String>,
    pub(crate) reason: Option<DeadReason>,
    pub(crate) event: Option<EventId>,
    pub(crate) until: Option<Timestamp>,
}

impl Filter {
    /// The filter `p` names, or `None` when it names none.
    pub(crate) fn parse(p: &Params) -> Result<Option<Filter>, Fail> {
        let filter = Filter {
            queue: p.get("queue").map(str::to_owned),
            reason: p.get("reason").map(reason).transpose()?,
            event: p.get("event").map(|e| event_id("event", e)).transpose()?,
            until: p.get("until").map(|u| time("until", u)).transpose()?,
        };
        let named = filter.queue.is_some() || filter.reason.is_some() || filter.event.is_some();
        Ok(named.then_some(filter))
    }

    /// Its dead letters, newest first.
    pub(crate) fn query(&self) -> DeadLetterQuery {
        let mut query = DeadLetterQuery::new();
        if let Some(queue) = &self.queue {
            query = query.queue(queue.clone());
        }
        if let Some(reason) = self.reason {
            query = query.reason(reason);
        }
        if let Some(event) = self.event {
            query = query.event_id(event);
        }
        if let Some(until) = self.until {
            query = query.until(until);
        }
        query
    }

    /// The pairs that name it again in a link or a form.
    pub(crate) fn pairs(&self) -> Pairs {
        let mut pairs = Vec::new();
        if let Some(queue) = &self.queue {
            pairs.push(("queue".to_owned(), queue.clone()));
        }
        if let Some(reason) = self.reason {
            pairs.push(("reason".to_owned(), reason.as_str().to_owned()));
        }
        if let Some(event) = self.event {
            pairs.push(("event".to_owned(), event.to_string()));
        }
        if let Some(until) = self.until {
            pairs.push(("until".to_owned(), until.to_string()));
        }
        pairs
    }

    /// In words: `queue n1.billing.events, reason permanent`.
    pub(crate) fn describe(&self) -> String {
        let mut words = Vec::new();
        if let Some(queue) = &self.queue {
            words.push(format!("queue {queue}"));
        }
        if let Some(reason) = self.reason {
            words.push(format!("reason {}", reason.as_str()));
        }
        if let Some(event) = self.event {
            words.push(format!("event {event}"));
        }
        words.join(", ")
    }
}

/// What an action names: ticked dead letters, or a whole filter.
pub(crate) enum Selection {
    Ids(Vec<DeadLetterId>),
    Filter(Filter),
}

/// The selection of an action's query or form: the whole filter when `all=yes` or no id is
/// given, else the ids; with the pairs that name it again in the confirmation's form.
pub(crate) fn selection(p: &Params, verb: &str) -> Result<(Selection, Pairs), Fail> {
    let ids = p.all("id");
    if p.get("all") == Some("yes") || ids.is_empty() {
        let filter = Filter::parse(p)?.ok_or_else(|| {
            bad("say which dead letters: id=… (one or more), or queue=Q and/or reason=R")
        })?;
        let pairs = filter.pairs();
        return Ok((Selection::Filter(filter), pairs));
    }
    if ids.len() > MAX_SELECTION {
        return Err(bad(format!(
            "at most {MAX_SELECTION} dead letters at once: tick \"all matching\" to {verb} \
             their whole list instead"
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
    Ok((Selection::Ids(ids), pairs))
}

pub(crate) async fn dead(State(c): Shared, RawQuery(raw): RawQuery) -> Page {
    let p = Params::parse(raw.as_deref());
    let Some(filter) = Filter::parse(&p)? else {
        return dead_groups(&c).await;
    };
    let limit = match p.get("limit") {
        None => DEFAULT_PAGE,
        Some(text) => text
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| bad(format!("limit: `{}` is not 1 to {MAX_PAGE}", shown(text))))?,
    };
    let mut query = filter.query().limit(limit + 1);
    if let Some(after) = p.get("after") {
        let id = dead_id(after)?;
        let last = c
            .store
            .dead_letter(id)
            .await
            .map_err(|e| unavailable("reading a dead letter", &e))?
            .ok_or_else(|| bad("after: the cursor names no recorded dead letter"))?;
        query = query.after(last.dead_at, last.id);
    }
    let total = c
        .store
        .count_dead_letters(&filter.query())
        .await
        .map_err(|e| unavailable("counting dead letters", &e))?;
    let mut list = c
        .store
        .dead_letters(&query)
        .await
        .map_err(|e| unavailable("listing dead letters", &e))?;
    let more = list.len() > limit;
    list.truncate(limit);
    let limit_text = limit.to_string();
    let mut here = filter.pairs();
    here.push(("limit".to_owned(), limit_text.clone()));
    let pairs = |extra: Option<(&str, String)>| {
        let mut all = here.clone();
        all.extend(extra.map(|(k, v)| (k.to_owned(), v)));
        all
    };
    let next = more
        .then(|| list.last())
        .flatten()
        .map(|last| pairs(Some(("after", last.id.to_string()))));
    let group = filter.pairs();
    let title = match (&filter.event, &filter.queue, filter.reason) {
        (Some(event), _, _) => format!("Dead letters of event {event}"),
        (None, queue, reason) => format!(
            "Dead letters of {} ({})",
            queue.as_deref().unwrap_or("every queue"),
            reason.map_or("every reason", |r| r.as_str())
        ),
    };
    let every_queue = filter.queue.is_none();
    let actions = c.actions();
    page(
        "Dead letters",
        html! {
            h1 { (title) }
            (auto_refresh())
            (size_form(&filter, limit))
            div #refreshed {
            p.count { span.total { (total) } " dead letter(s)."
                @if total > list.len() as u64 { " This page: " span.shown { (list.len()) } "." } }
            @if let Some(event) = filter.event {
                p { a.event href=(under("/events", event)) { "The event" } }
            }
            @if actions && total > 0 {
                p {
                    a.action href=(link("/dead/redrive", pairs_ref(&group))) { "Re-drive all " (total) "…" }
                    " · "
                    a.action href=(link("/dead/purge", pairs_ref(&group))) { "Purge all " (total) "…" }
                }
            }
            form.selection method="get" action="/dead/redrive" {
                @for (name, value) in &group { input type="hidden" name=(name) value=(value); }
                table.dead-list {
                    tr {
                        @if actions { th { input #select-page type="checkbox" aria-label="select this page" title="select this page"; } }
                        th { "Dead at" }
                        @if every_queue { th { "Queue" } }
                        th { "Key" } th { "Reason" } th { "Attempts" } th { "Last error" }
                        th { "Re-driven" } th { "Id" } th { "Provenance" }
                    }
                    @for dead in &list {
                        tr.dead {
                            @if actions {
                                td { input.pick type="checkbox" name="id" value=(dead.id) aria-label="select"; }
                            }
                            td { (when::time(&dead.dead_at)) }
                            @if every_queue {
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
                            td.num.redriven { (dead.redrive_count) }
                            td { a.dead href=(under("/dead", dead.id)) { (dead.id) } }
                            td { @if dead.untrusted { span.untrusted { "untrusted" } } }
                        }
                    }
                }
                @if actions && !list.is_empty() {
                    p.select-all {
                        label {
                            input #select-all type="checkbox" name="all" value="yes";
                            " all " (total) " matching, on every page (not only the ticked ones)"
                        }
                    }
                    p {
                        button type="submit" { "Re-drive the selected…" }
                        " "
                        button type="submit" formaction="/dead/purge" { "Purge the selected…" }
                    }
                }
            }
            p.paging {
                @if p.get("after").is_some() {
                    a.first href=(link("/dead", pairs_ref(&pairs(None)))) { "← First page" }
                    " "
                }
                @if let Some(next) = &next {
                    a.next rel="next" href=(link("/dead", pairs_ref(next))) { "Next page →" }
                }
            }
            }
        },
    )
}

/// Pairs of owned strings as the `(&str, &str)` pairs [`link`] takes.
pub(crate) fn pairs_ref(pairs: &Pairs) -> impl Iterator<Item = (&str, &str)> {
    pairs.iter().map(|(k, v)| (k.as_str(), v.as_str()))
}

/// The page-size choice, keeping the filter.
fn size_form(filter: &Filter, limit: usize) -> Markup {
    html! {
        form.page-size method="get" action="/dead" {
            @for (name, value) in filter.pairs() { input type="hidden" name=(name) value=(value); }
            select name="limit" aria-label="page size" {
                @for size in PAGE_SIZES {
                    option value=(size) selected[size == limit] { (size) " a page" }
                }
                @if !PAGE_SIZES.contains(&limit) {
                    option value=(limit) selected { (limit) " a page" }
                }
            }
            " "
            button type="submit" { "Show" }
        }
    }
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
                        a.event href=(under("/events", event)) { (event) }
                        " · "
                        a.siblings href=(link("/dead", [("event", event.to_string().as_str())])) { "its dead letters" }
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

pub(crate) async fn purge_confirm(State(c): Shared, RawQuery(raw): RawQuery) -> Page {
    if let Some(refused) = actions_refused(&c) {
        return Err(refused);
    }
    let p = Params::parse(raw.as_deref());
    let (which, pairs) = selection(&p, "purge")?;
    let (n, what) = match &which {
        Selection::Filter(filter) => {
            let n = c
                .store
                .count_dead_letters(&filter.query())
                .await
                .map_err(|e| unavailable("counting dead letters", &e))?;
            (n, format!("the dead letters of {}", filter.describe()))
        }
        Selection::Ids(ids) => {
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
    let (which, pairs) = selection(&form, "purge")?;
    let purged = match &which {
        Selection::Filter(filter) => c.store.purge_dead_letters(&filter.query()).await,
        Selection::Ids(ids) => c.store.purge_dead_letter_ids(ids).await,
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
