//! The live tail: `/live` is a page whose script (`/assets/live.js`) opens `/live/stream`, a stream of
//! Server-Sent Events fed by an ephemeral, at-most-once subscription of the console's own
//! (an exclusive, auto-delete, server-named queue, as `mesh tail` uses), so events reach the
//! page as the broker routes them, whether an audit logger runs or not.
//!
//! The stream sends `ready` once its queue is bound, then one `event` per event (its
//! envelope, the body cut to [`BODY_PREVIEW`] characters), and a `skipped` for a message
//! that breaks the contract. At most [`MAX_STREAMS`](crate::console::MAX_STREAMS) streams are open at once; the queue
//! goes when the page does (or the console stops).

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::stream::{self, StreamExt};
use maud::html;
use mesh_core::{codec, QueueSpec, Subscription, SubscriptionSpec, TopicPattern};
use serde_json::json;
use tokio::sync::OwnedSemaphorePermit;
use tracing::{info, warn};

use crate::assets::LIVE_SCRIPT;
use crate::console::MAX_STREAMS;
use crate::params::{link, Params};
use crate::respond::{bad, page, shown, Fail, Page, Shared};

/// Patterns one stream follows, at most.
const MAX_PATTERNS: usize = 8;

/// The characters of a body the page shows.
const BODY_PREVIEW: usize = 200;

/// How often a quiet stream sends a comment: keeps proxies from closing it, and finds a
/// page that went (its slot and queue are freed then at the latest).
const KEEP_ALIVE: Duration = Duration::from_secs(5);

/// Rows the page keeps (older ones are dropped).
const ROWS_KEPT: usize = 500;

/// The patterns of a request: every `key` (at most [`MAX_PATTERNS`]), `#` when none.
fn patterns(p: &Params) -> Result<Vec<TopicPattern>, Fail> {
    let given = p.all("key");
    if given.iter().flat_map(|g| g.split_whitespace()).count() > MAX_PATTERNS {
        return Err(bad(format!("at most {MAX_PATTERNS} key patterns at once")));
    }
    if given.is_empty() {
        return Ok(vec![
            TopicPattern::parse("#").map_err(|e| bad(e.to_string()))?
        ]);
    }
    given
        .into_iter()
        .flat_map(str::split_whitespace)
        .map(|text| {
            TopicPattern::parse(text).map_err(|e| {
                bad(format!(
                    "key: `{}` is not a topic pattern: {e}",
                    shown(text)
                ))
            })
        })
        .collect()
}

pub(crate) async fn live(State(c): Shared, RawQuery(raw): RawQuery) -> Page {
    let p = Params::parse(raw.as_deref());
    let patterns = patterns(&p)?;
    let texts: Vec<&str> = patterns.iter().map(TopicPattern::as_str).collect();
    let stream = link("/live/stream", texts.iter().map(|t| ("key", *t)));
    let shown_patterns = texts.join(" ");
    page(
        "Live",
        html! {
            h1 { "Live" }
            form.search method="get" action="/live" {
                input name="key" placeholder="key pattern (module.billing.#)" value=(shown_patterns);
                button type="submit" { "Follow" }
            }
            @if c.transport.is_none() {
                p.error { "The console has no broker connection: nothing can be followed." }
            } @else {
                p {
                    "Events matching " code { (shown_patterns) } " as the broker routes them, "
                    "newest first (at most once each; the newest " (ROWS_KEPT) " kept): "
                    span #status { "connecting…" } ", " span #seen { "0" } " seen."
                }
                div.controls {
                    button #pause type="button" aria-pressed="false" { "Pause" }
                    " "
                    button #clear type="button" { "Clear" }
                    " "
                    input #filter type="search" placeholder="show only keys matching (module.*.order.#)" aria-label="key filter";
                    " "
                    span #held.note {}
                }
                table #live data-stream=(stream) data-kept=(ROWS_KEPT) {
                    thead {
                        tr { th { "Time" } th { "Key" } th { "Source" } th { "Node" } th { "Id" } th { "Body" } }
                    }
                    tbody #rows {}
                }
                script src=(LIVE_SCRIPT) {}
            }
        },
    )
}

/// What the stream walks: the subscription, and the slot it holds until the page goes.
struct Tail {
    subscription: Subscription,
    _slot: OwnedSemaphorePermit,
}

pub(crate) async fn stream(State(c): Shared, RawQuery(raw): RawQuery) -> Result<Response, Fail> {
    let p = Params::parse(raw.as_deref());
    let patterns = patterns(&p)?;
    let Some(transport) = c.transport.clone() else {
        return Err(Fail::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "the console has no broker connection to follow events through",
        ));
    };
    let Ok(slot) = c.live_slots.clone().try_acquire_owned() else {
        warn!("live stream refused: {MAX_STREAMS} already open");
        return Err(Fail::new(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{MAX_STREAMS} live tails are open already: close one and try again"),
        ));
    };
    let texts: Vec<String> = patterns.iter().map(ToString::to_string).collect();
    let subscription = transport
        .subscribe(SubscriptionSpec {
            queue: QueueSpec::Ephemeral,
            patterns,
            prefetch: 32,
            retry_delays: Vec::new(),
        })
        .await
        .map_err(|e| {
            warn!(error = %mesh_core::text::EscapedDisplay(&e), "live stream: subscribing failed");
            Fail::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "the broker refused the live tail's queue (see the console's log)",
            )
        })?;
    info!(patterns = %mesh_core::text::EscapedDisplay(texts.join(" ")), queue = subscription.queue(), "live stream opened");
    let tail = Tail {
        subscription,
        _slot: slot,
    };
    let ready = stream::once(async {
        Ok::<_, Infallible>(Event::default().event("ready").data("listening"))
    });
    let events = stream::unfold(tail, |mut tail| async move {
        let delivery = tail.subscription.next().await?;
        Some((Ok(to_event(&delivery.message)), tail))
    });
    let shutdown = c.shutdown.clone();
    let body = ready
        .chain(events)
        .take_until(async move { shutdown.cancelled().await });
    Ok(Sse::new(body)
        .keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
        .into_response())
}

/// One message as an SSE event: `event` with its envelope, or `skipped` with why.
fn to_event(message: &mesh_core::WireMessage) -> Event {
    match codec::decode(message) {
        Ok(envelope) => {
            let body = codec::cut(&String::from_utf8_lossy(&envelope.body), BODY_PREVIEW);
            let data = json!({
                "id": envelope.id.to_string(),
                "key": envelope.key.as_str(),
                "source": envelope.source,
                "node": envelope.node,
                "time": crate::when::fixed(&envelope.time),
                "datetime": envelope.time.text(),
                "causation_id": envelope.causation_id,
                "body": body,
            });
            Event::default().event("event").data(data.to_string())
        }
        // As a JSON string: no line of the error can end the event early.
        Err(e) => Event::default()
            .event("skipped")
            .data(json!(codec::cut(&e.to_string(), BODY_PREVIEW)).to_string()),
    }
}
