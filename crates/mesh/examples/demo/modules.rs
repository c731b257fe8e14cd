//! The demo's modules: their events, their tools and how each bus is built, apart from
//! the program that runs them, so a test can start them and read their contracts.
//!
//! Every event and tool declares its JSON Schema (`#[derive(JsonSchema)]`), and each bus
//! declares what it emits and calls: the contract each announces when it starts is the
//! whole system's.

use std::time::Duration;

use mesh::{Bus, BusBuilder, Event, HandlerError, Incoming, RemoteError, RetryPolicy, Schema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc::UnboundedSender;

/// The node every demo module runs on.
pub(crate) const NODE: &str = "demo";

/// umami created a site.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub(crate) struct SiteCreated {
    /// The site's name.
    pub(crate) site: String,
    /// Who owns it.
    pub(crate) owner: String,
}

impl Event for SiteCreated {
    const KEY: &'static str = "module.umami.site.created";
    fn json_schema() -> Option<Schema> {
        Some(Schema::of::<Self>())
    }
}

/// The request of tool `billing.quote`; its reply is a price in cents (`u64`).
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub(crate) struct QuoteRequest {
    /// The plan to price.
    pub(crate) plan: String,
}

/// The tool billing serves.
pub(crate) const QUOTE: &str = "billing.quote";

/// billing: handles `site.created` (and reports `billing <id>` on `done`), serves quotes.
pub(crate) fn billing(done: UnboundedSender<String>) -> BusBuilder {
    Bus::builder()
        .node(NODE)
        .module("billing")
        .on(move |incoming: Incoming<SiteCreated>| {
            let done = done.clone();
            async move {
                println!(
                    "   billing handled {} (id {}, from {})",
                    incoming.meta.key(),
                    incoming.meta.id(),
                    incoming.meta.source()
                );
                let _ = done.send(format!("billing {}", incoming.meta.id()));
                Ok(())
            }
        })
        .serve_with_schemas(QUOTE, |request: QuoteRequest, meta| async move {
            println!(
                "   billing serves a quote for plan `{}` asked by {}",
                request.plan, meta.source
            );
            match request.plan.as_str() {
                "basic" => Ok(900_u64),
                other => Err(RemoteError {
                    code: "unknown-plan".into(),
                    message: format!("no plan named `{other}`"),
                }),
            }
        })
}

/// mailer: its mail server is down, so every attempt fails (3 attempts, then dead-lettered;
/// it reports `mailer <id>` on `done` at the last).
pub(crate) fn mailer(done: UnboundedSender<String>) -> anyhow::Result<BusBuilder> {
    let quick_retries = RetryPolicy::new(
        3,
        vec![Duration::from_millis(200), Duration::from_millis(400)],
    )?;
    Ok(Bus::builder()
        .node(NODE)
        .module("mailer")
        .retry(quick_retries)
        .on(move |incoming: Incoming<SiteCreated>| {
            let done = done.clone();
            async move {
                println!(
                    "   mailer attempt {} for {} fails: mail server unreachable",
                    incoming.meta.attempt(),
                    incoming.event.site
                );
                if incoming.meta.attempt() == 3 {
                    let _ = done.send(format!("mailer {}", incoming.meta.id()));
                }
                Err(HandlerError::retry("mail server unreachable"))
            }
        }))
}

/// umami: emits `site.created` and calls `billing.quote`. (The demo's call of a tool nobody
/// serves is a deliberate mistake, not part of the contract.)
pub(crate) fn umami() -> BusBuilder {
    Bus::builder()
        .node(NODE)
        .module("umami")
        .emits::<SiteCreated>()
        .calls::<QuoteRequest, u64>(QUOTE)
}
