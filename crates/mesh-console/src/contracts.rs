//! `/contracts`: the contracts the modules announced, read from the audit store: per key its
//! schemas, versions, emitters and readers; per tool its schemas, servers and callers. The
//! same model and the same articles as the page `mesh contract docs` writes
//! ([`crate::contract_docs`]), in the console's layout.
//!
//! [`announced_system`] is how both read the store: the newest readable announcement of each
//! owner (`<origin>.<owner>.contract.announced`), an unreadable one skipped and named.

use axum::extract::State;
use maud::html;
use mesh_audit::{EventQuery, EventRecord, Order, Store};
use mesh_contract::{read_announcement, System};
use mesh_core::contract::{ModuleContract, CONTRACT_FORMAT};
use mesh_core::{EventId, Timestamp};

use crate::contract_docs::{key_article, tool_article};
use crate::params::under;
use crate::respond::{page, unavailable, Page, Shared};

/// The announcement keys, whoever announces: `module.<m>.contract.announced`,
/// `node.<n>.…`, `mesh.<c>.…`.
pub const ANNOUNCEMENTS: &str = "*.*.contract.announced";

/// How many of an owner's announcements are read at a time, newest first, while looking for
/// its newest readable one.
const PAGE: usize = 20;

/// An announcement that could not be read, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// The announcement's event.
    pub event: EventId,
    /// Its routing key.
    pub key: String,
    /// Why it was skipped.
    pub reason: String,
}

/// What [`announced_system`] read.
#[derive(Debug, Clone, Default)]
pub struct Announced {
    /// The newest readable contract of each owner.
    pub system: System,
    /// The unreadable announcements met on the way, newest first per key.
    pub skipped: Vec<Skipped>,
    /// Announcement keys with no readable announcement at all.
    pub unreadable_keys: Vec<String>,
}

/// The system of the contracts announced in `store`: under each announcement key (found
/// through the key index, [`Store::routing_keys`]), the newest readable announcement, a page
/// of 20 at a time, newest first, however far back.
pub async fn announced_system(store: &Store) -> Result<Announced, mesh_audit::Error> {
    let mut announced = Announced::default();
    let mut found: Vec<(Timestamp, ModuleContract)> = Vec::new();
    for key in store.routing_keys(Some(ANNOUNCEMENTS)).await? {
        let mut query = EventQuery::new()
            .pattern(key.clone())
            .order(Order::Desc)
            .limit(PAGE);
        let newest = 'pages: loop {
            let events = store.events(&query).await?;
            for event in &events {
                match announcement(event) {
                    Ok(contract) => break 'pages Some((event.time, contract)),
                    Err(reason) => announced.skipped.push(Skipped {
                        event: event.id,
                        key: event.routing_key.clone(),
                        reason,
                    }),
                }
            }
            match events.last() {
                Some(last) if events.len() == PAGE => query = query.after(last.time, last.id),
                _ => break None,
            }
        };
        match newest {
            Some(newest) => found.push(newest),
            None => announced.unreadable_keys.push(key),
        }
    }
    announced.system = System::from_timed(found);
    Ok(announced)
}

/// The contract an announcement holds, or why it cannot be read.
fn announcement(event: &EventRecord) -> Result<ModuleContract, String> {
    // `x-schema` is the announcement's format; absent means 1.
    let format = event.schema.unwrap_or(1);
    if format != CONTRACT_FORMAT {
        return Err(format!(
            "an announcement of format {format}, this version reads {CONTRACT_FORMAT}"
        ));
    }
    let body = event
        .body_json()
        .map_err(|e| format!("the body is not JSON: {e}"))?;
    read_announcement(&event.routing_key, &body).map_err(|e| {
        // The error and its causes, as `{:#}` shows an `anyhow` chain.
        let mut text = e.to_string();
        let mut source = std::error::Error::source(&e);
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        text
    })
}

pub(crate) async fn contracts(State(c): Shared) -> Page {
    let announced = announced_system(&c.store)
        .await
        .map_err(|e| unavailable("reading the contract announcements", &e))?;
    let system = &announced.system;
    let keys = system.key_table();
    let tools = system.tool_table();
    page(
        "Contracts",
        html! {
            h1 { "Contracts" }
            p.summary {
                (system.len()) " module(s), " (keys.len()) " key(s), " (tools.len()) " tool(s), \
                 as the modules last announced them."
            }
            @if !announced.skipped.is_empty() || !announced.unreadable_keys.is_empty() {
                div.skipped {
                    @for skipped in &announced.skipped {
                        p.note {
                            "Skipped the announcement "
                            a href=(under("/events", skipped.event)) { (skipped.event) }
                            " (" (skipped.key) "): " (skipped.reason)
                        }
                    }
                    @for key in &announced.unreadable_keys {
                        p.error { "No readable announcement under " (key) "." }
                    }
                }
            }
            section #keys {
                h2 { "Events" }
                @if keys.is_empty() { p.note { "No key is emitted or handled." } }
                @for row in &keys { (key_article(system, row)) }
            }
            section #tools {
                h2 { "Tools" }
                @if tools.is_empty() { p.note { "No tool is served or called." } }
                @for row in &tools { (tool_article(system, row)) }
            }
        },
    )
}
