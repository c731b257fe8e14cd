//! `/dead/redrive`: the re-drive's confirmation (`GET`: how many, to which queue, which would
//! be refused, which were re-driven before) and the re-drive itself (`POST`).
//!
//! A selection of ticked dead letters goes in one request. A whole filter (a group, or a
//! list's "all matching") is fixed when its confirmation is made (`until`: those set aside
//! later are not part of it) and goes in batches: the confirmation's script
//! (`/assets/redrive.js`) posts one batch at a time (`batch=N`, `after=ID`, the last dead
//! letter of the batch before) and shows the progress; each batch is a request of its own
//! with the same checks (read-only, origin, token), answered with a JSON report. Without the
//! script the form posts once and the whole filter goes in that request.
//!
//! A dead letter re-driven before goes again only when asked for (`again=yes`, offered by a
//! link on the confirmation, which then says so): without it a selection refuses it and a
//! filter leaves it out. An untrusted one needs the override (`strip_untrusted_claims=yes`)
//! the same way.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use maud::{html, Markup};
use mesh_audit::{DeadLetterId, ErrorKind, Order, Redrive, RedriveOptions, RedrivePlan};
use mesh_core::Timestamp;
use tracing::info;

use crate::actions::{actions_refused, confirm_form, guard, Pairs};
use crate::dead_letters::{pairs_ref, selection, Filter, Selection};
use crate::input::dead_id;
use crate::params::{link, under, Params};
use crate::respond::{bad, missing, page, shown, unavailable, Fail, Page, Shared};
use crate::Console;

/// The override a re-drive asks for: `strip_untrusted_claims=yes` re-drives untrusted dead
/// letters with their `x-mesh-*` claims stripped (refused otherwise).
const STRIP: &str = "strip_untrusted_claims";
/// The confirmation a second re-drive asks for: `again=yes` re-drives those re-driven before
/// too (refused, or left out, otherwise).
const AGAIN: &str = "again";

/// The dead letters one batch of a filter's re-drive takes.
pub(crate) const BATCH: usize = 200;
/// The most one batch may take.
const MAX_BATCH: usize = 1000;
/// The most refusals a confirmation lists one by one.
const REFUSALS_SHOWN: usize = 20;

/// The re-drive's options, and the pairs naming its dead letters with the overrides kept.
fn options(p: &Params, mut pairs: Pairs) -> (RedriveOptions, Pairs) {
    let strip = p.get(STRIP) == Some("yes");
    let again = p.get(AGAIN) == Some("yes");
    if strip {
        pairs.push((STRIP.to_owned(), "yes".to_owned()));
    }
    if again {
        pairs.push((AGAIN.to_owned(), "yes".to_owned()));
    }
    let options = RedriveOptions::new()
        .strip_untrusted_claims(strip)
        .again(again);
    (options, pairs)
}

/// What a confirmation shows.
#[derive(Default)]
struct Planned {
    /// Dead letters per queue they go to.
    to: BTreeMap<String, u64>,
    /// Refused, with why (those re-driven before aside).
    refused: Vec<(DeadLetterId, String)>,
    untrusted: usize,
    /// Re-driven before: left out or refused unless asked for again, else going again.
    before: u64,
}

impl Planned {
    fn add(&mut self, plan: RedrivePlan) {
        for (_, queue) in plan.redrive {
            *self.to.entry(queue).or_default() += 1;
        }
        for (id, e) in plan.refused {
            match e.kind() {
                ErrorKind::AlreadyRedriven => self.before += 1,
                kind => {
                    if matches!(kind, ErrorKind::Untrusted) {
                        self.untrusted += 1;
                    }
                    self.refused.push((id, e.to_string()));
                }
            }
        }
    }

    fn total(&self) -> u64 {
        self.to.values().sum()
    }
}

async fn plan(c: &Console, which: &Selection, options: RedriveOptions) -> Result<Planned, Fail> {
    let fail = |e: mesh_audit::Error| {
        if e.is_not_found() {
            missing(e.to_string())
        } else {
            unavailable("planning a re-drive", &e)
        }
    };
    let mut planned = Planned::default();
    match which {
        Selection::Ids(ids) => {
            for id in ids {
                // Planned as a first re-drive, so those re-driven before are known as such;
                // asked for again, they are planned once more as a second one.
                let first = options.again(false);
                let mut plan = c
                    .store
                    .redrive_plan_with(Redrive::One(*id), first)
                    .await
                    .map_err(fail)?;
                let before = plan
                    .refused
                    .iter()
                    .any(|(_, e)| matches!(e.kind(), ErrorKind::AlreadyRedriven));
                if before && options.again {
                    planned.before += 1;
                    plan = c
                        .store
                        .redrive_plan_with(Redrive::Again(*id), options)
                        .await
                        .map_err(fail)?;
                }
                planned.add(plan);
            }
        }
        Selection::Filter(filter) => {
            let query = filter.query().order(Order::Asc).limit(usize::MAX);
            let plan = c
                .store
                .redrive_plan_with(Redrive::Matching(query.clone()), options)
                .await
                .map_err(fail)?;
            planned.add(plan);
            planned.before = c
                .store
                .count_dead_letters(&query.redriven(true))
                .await
                .map_err(|e| unavailable("counting dead letters", &e))?;
        }
    }
    Ok(planned)
}

pub(crate) async fn redrive_confirm(State(c): Shared, RawQuery(raw): RawQuery) -> Page {
    if let Some(refused) = actions_refused(&c) {
        return Err(refused);
    }
    let p = Params::parse(raw.as_deref());
    let (mut which, _) = selection(&p, "re-drive")?;
    // A filter's set is fixed now: those set aside later are not part of it.
    if let Selection::Filter(filter) = &mut which {
        filter.until.get_or_insert_with(Timestamp::now);
    }
    let plain = match &which {
        Selection::Filter(filter) => filter.pairs(),
        Selection::Ids(ids) => ids
            .iter()
            .map(|id| ("id".to_owned(), id.to_string()))
            .collect(),
    };
    let (options, pairs) = options(&p, plain.clone());
    let planned = plan(&c, &which, options).await?;
    let total = planned.total();
    let overridden = |name: &str| {
        let mut pairs = pairs.clone();
        if !pairs.iter().any(|(k, _)| k == name) {
            pairs.push((name.to_owned(), "yes".to_owned()));
        }
        link("/dead/redrive", pairs_ref(&pairs))
    };
    let filter = matches!(which, Selection::Filter(_));
    let one = planned.before == 1;
    page(
        "Re-drive",
        html! {
            h1 { "Re-drive " (total) " dead letter(s)?" }
            @if let Selection::Filter(filter) = &which {
                p.note { "The dead letters of " (filter.describe()) " set aside until "
                    (crate::when::time(&filter.until.unwrap_or_else(Timestamp::now)))
                    " (those set aside later are not part of this re-drive)." }
            }
            @if c.transport.is_none() {
                p.error { "The console has no broker connection: a re-drive would fail." }
            }
            table.plan {
                tr { th { "To queue" } th { "Dead letters" } }
                @for (queue, n) in &planned.to { tr { td { (queue) } td.num { (n) } } }
            }
            @if planned.before > 0 && !options.again {
                p.warning.redriven-before {
                    span.before { (planned.before) }
                    @if one { " of these was re-driven before: it is " } @else { " of these were re-driven before: they are " }
                    @if filter { "left out" } @else { "not re-driven again" }
                    ", as a second re-drive hands each to its consumer once more. "
                    a.again href=(overridden(AGAIN)) {
                        @if one { "Re-drive it again too…" } @else { "Re-drive them again too…" }
                    }
                }
            }
            @if planned.before > 0 && options.again {
                p.warning.again {
                    span.before { (planned.before) }
                    @if one { " of these was re-driven before and goes again" } @else { " of these were re-driven before and go again" }
                    ": each is handed to its consumer once more."
                }
            }
            @if !planned.refused.is_empty() {
                h2 { (planned.refused.len()) " would be refused" }
                ul.refused {
                    @for (id, why) in planned.refused.iter().take(REFUSALS_SHOWN) { li { (id) ": " (why) } }
                    @if planned.refused.len() > REFUSALS_SHOWN {
                        li.note { "and " (planned.refused.len() - REFUSALS_SHOWN) " more" }
                    }
                }
            }
            @if planned.untrusted > 0 && !options.strip_untrusted_claims {
                p.untrusted {
                    (planned.untrusted) " untrusted: "
                    a.action.strip href=(overridden(STRIP)) {
                        "re-drive them too, with their x-mesh-* claims stripped…"
                    }
                }
            }
            @if options.strip_untrusted_claims {
                p.untrusted { "Untrusted dead letters go with every x-mesh-* header removed." }
            }
            @if total > 0 {
                @if filter { (batch_form(&pairs, total)) } @else { (confirm_form("/dead/redrive", &pairs, "Re-drive")) }
            }
        },
    )
}

/// The confirmation of a filter's re-drive: the token, and the progress its script shows
/// while it posts the batches (without the script, the form posts once).
fn batch_form(pairs: &Pairs, total: u64) -> Markup {
    html! {
        form.batches method="post" action="/dead/redrive" data-total=(total) data-batch=(BATCH) {
            @for (name, value) in pairs {
                input type="hidden" name=(name) value=(value);
            }
            p {
                label { "Token " input type="password" name="token" autocomplete="current-password" required; }
                " "
                button.danger type="submit" { "Re-drive" }
            }
        }
        div #progress hidden {
            progress #redrive-progress max=(total) value="0" {}
            p.progress-text {
                "Re-driven " span.redriven { "0" } " of " span.total { (total) }
                "; failed " span.failed { "0" } "; batches " span.batches { "0" } "."
            }
            p.progress-state { "Starting…" }
            ul.failed {}
        }
        script src=(crate::assets::REDRIVE_SCRIPT) defer {}
    }
}

/// A batch's answer.
fn json(status: StatusCode, value: &serde_json::Value) -> axum::response::Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

pub(crate) async fn redrive(State(c): Shared, headers: HeaderMap, body: Bytes) -> Page {
    let form = Params::from_bytes(&body);
    let who = guard(&c, "redrive", &headers, &form)?;
    let (which, pairs) = selection(&form, "re-drive")?;
    let (options, pairs) = options(&form, pairs);
    let Some(transport) = c.transport.clone() else {
        return Err(Fail::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the console has no broker connection to re-drive through",
        ));
    };
    let target: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let target = target.join(" ");
    if let Some(size) = form.get("batch") {
        let Selection::Filter(filter) = which else {
            return Err(bad(
                "batches re-drive a filter (queue=…, reason=…), not ids",
            ));
        };
        return batch(
            &c,
            transport.as_ref(),
            &form,
            size,
            filter,
            options,
            (&who, &target),
        )
        .await;
    }
    let which: Vec<Redrive> = match which {
        Selection::Ids(ids) => ids.into_iter().map(Redrive::One).collect(),
        Selection::Filter(filter) => vec![Redrive::Matching(
            filter.query().order(Order::Asc).limit(usize::MAX),
        )],
    };
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
                h2 { "Not re-driven: " (failed.len()) }
                ul.failed { @for (id, why) in &failed { li { (id) ": " (why) } } }
            }
            p { a href="/dead" { "Back to the dead letters" } }
        },
    )
}

/// One batch of a filter's re-drive: at most `size` dead letters after the form's `after`,
/// oldest first, answered as JSON (`redriven`, `failed`, `next`: the cursor of the next
/// batch, `done`).
async fn batch(
    c: &Console,
    transport: &dyn mesh_core::Transport,
    form: &Params,
    size: &str,
    filter: Filter,
    options: RedriveOptions,
    (who, target): (&str, &str),
) -> Page {
    let size = size
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_BATCH).contains(n))
        .ok_or_else(|| bad(format!("batch: `{}` is not 1 to {MAX_BATCH}", shown(size))))?;
    let mut query = filter.query().order(Order::Asc).limit(size);
    if let Some(after) = form.get("after") {
        let id = dead_id(after)?;
        let last = c
            .store
            .dead_letter(id)
            .await
            .map_err(|e| unavailable("reading a dead letter", &e))?
            .ok_or_else(|| bad("after: the cursor names no recorded dead letter"))?;
        query = query.after(last.dead_at, last.id);
    }
    let report = c
        .store
        .redrive_with(transport, Redrive::Matching(query), options)
        .await
        .map_err(|e| unavailable("re-driving dead letters", &e))?;
    let seen = report.redriven.len() + report.failed.len();
    // Done when the batch was not full, or no dead letter of the set is left after it (one
    // row read: no empty batch at the end).
    let done = match report.last {
        Some((time, id)) if seen >= size => {
            let mut rest = filter.query().order(Order::Asc).limit(1).after(time, id);
            if !options.again {
                rest = rest.redriven(false);
            }
            c.store
                .dead_letters(&rest)
                .await
                .map_err(|e| unavailable("listing dead letters", &e))?
                .is_empty()
        }
        _ => true,
    };
    info!(
        who = %mesh_core::text::EscapedDisplay(who),
        action = "redrive",
        target = %mesh_core::text::EscapedDisplay(target),
        batch = size,
        redriven = report.redriven.len(),
        failed = report.failed.len(),
        "console action"
    );
    let failed: Vec<serde_json::Value> = report
        .failed
        .iter()
        .map(|(id, e)| serde_json::json!({ "id": id.to_string(), "error": e.to_string() }))
        .collect();
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({
            "redriven": report.redriven.len(),
            "failed": failed,
            "next": if done { None } else { report.last.map(|(_, id)| id.to_string()) },
            "done": done,
        }),
    ))
}
