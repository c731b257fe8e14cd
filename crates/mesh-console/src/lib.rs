//! The operator's console: a web application over the audit store ([`mesh_audit::Store`]), the
//! broker (a [`Transport`](mesh_core::Transport): re-drive, replay, the live tail) and its management API
//! ([`Console::management`]: queues and bindings).
//!
//! Server-rendered HTML with a small stylesheet and three small scripts (every page's, which
//! shows each time's local form on hover, runs the opt-in auto-refresh and ticks a page of
//! dead letters; the live page's; and the re-drive confirmation's, which posts a filter's
//! re-drive in batches and shows the progress), embedded in the binary and served as files of their own (`/assets/…`), and no
//! front-end build. Every time is written one way: fixed width, UTC, to the microsecond
//! (`2026-12-07 09:25:03.041200Z`). The stylesheet follows the system's colour scheme (dark
//! mode) and stacks tables into blocks on narrow screens (down to 420 px):
//!
//! - `/`: (refreshed every 5 s when its box is ticked, as the dead letters' pages are) the
//!   store's counts, events of the last hour by key prefix and by source (bar
//!   charts in inline SVG), the module queues (depth, consumers, retrying, pending dead
//!   letters) and the audit loggers' readiness, and the dead letters pending per queue;
//! - `/events?key=&source=&body=&since=&until=&id=&order=&limit=&after=`: the event search,
//!   words in the body found through the store's full-text index, with the number of
//!   matches, times as RFC 3339 or back from now (`2h`) with presets, a page size, and a
//!   keyset pagination (`after` is the id of the last event of the page before);
//!   a wildcard is resolved to the stored keys it matches (the key index); in a store of more
//!   than 1,000 keys a pattern no index serves (`*.*.paid`) is searched a bounded walk
//!   ([`Console::search_reads`]) at a time, for at most [`Console::search_budget`] a page, and
//!   the page's script goes on by itself until the page is full or the store is searched;
//! - `/events/{id}`: an event's headers, body, the dead letters made of it (linked; a dead
//!   letter links back), the saga instances its trace moved (each saga's transition event,
//!   `mesh_core::saga`: the saga, key, version and state after the event), and its causation
//!   tree as an SVG graph;
//! - `/dead`, `/dead?queue=&reason=&event=&limit=&after=`, `/dead/{id}`: dead letters grouped
//!   by queue and reason; a filtered list of any size (with each letter's last error, and its
//!   queue when the list is of every queue), paged by keyset (`after` is the id of the last
//!   dead letter of the page before) with a page size, whose form selects ticked rows or,
//!   with "all matching" (`all=yes`), the whole filter; one dead letter (linked to its event
//!   and to that event's dead letters);
//! - `/dead/redrive` and `/dead/purge`: a confirmation page on `GET` (how many, to where,
//!   from [`Store::redrive_plan`](mesh_audit::Store::redrive_plan) and the counts; those
//!   re-driven before, which go again only with `again=yes`, offered there), the action on
//!   `POST`. A whole filter's re-drive is fixed at its confirmation (`until`) and goes in
//!   batches (`batch=N&after=ID`, each answered as JSON, each passing every check below),
//!   posted by the confirmation's script with a progress bar; without the script, in one
//!   request;
//! - `/live?key=`: a live tail, fed by `/live/stream` (Server-Sent Events from an ephemeral
//!   queue of the console's own; at most 16 open at once), with pause (new rows held back
//!   until resume), clear, and a key filter over the rows shown;
//! - `/map?since=&until=`: the system map, emitters → keys → receiving module queues, and
//!   module → module (an edge when one module's events reached another's queues, weighted by
//!   those events);
//! - `/contracts`: the contracts the modules announced (the newest of each, from the store):
//!   per key its schemas, versions, emitters and readers, per tool its schemas, servers and
//!   callers, as `mesh contract docs` shows them ([`announced_system`]);
//! - `/modules/{queue}`: a module queue, and `/replay` (confirmation on `GET`, the action on
//!   `POST`): stored events re-published into that queue only ([`Store::replay`](mesh_audit::Store::replay)).
//!
//! Apart from the server, [`contract_docs`] renders the contracts of a system
//! ([`mesh_contract::System`]) as one self-contained HTML page (inline style, no script,
//! nothing loaded): `mesh contract docs` writes it.
//!
//! # Safe by default
//!
//! Every `POST` is refused with 403, and changes nothing, unless
//!
//! 1. the console is not read-only ([`Console::read_only`]: actions are hidden and refused;
//!    the live tail, a read, stays),
//! 2. the request comes from the console's own origin: its `Origin` header, or when it has
//!    none its `Referer`, is one of [`Console::allow_origin`]'s (by default those of the
//!    address it listens on, as `http://127.0.0.1:PORT` and `http://localhost:PORT`),
//! 3. it carries a token ([`Tokens`]) as `Authorization: Bearer TOKEN` or as the form field
//!    `token`, which the confirmation page asks the operator to type (the page never holds
//!    it).
//!
//! Every request, reads included, must name one of those origins' hosts in its `Host` header
//! (else 421), so a page on another site whose name resolves to the console's address (DNS
//! rebinding) reads nothing.
//!
//! No other site can frame the console, nor run script or style in it: every response
//! carries a `Content-Security-Policy` (`frame-ancestors 'none'`, scripts and styles from
//! the console only, no inline ones) and `X-Frame-Options: DENY`, so a foreign page cannot
//! show a confirmation inside a frame and have the operator click it. Every link built from
//! data percent-encodes its path segments and query values, so a queue named
//! `n1.a/%2e%2e/dead?x.events` links to its own page.
//!
//! Every action is logged (`tracing`, info) with the token's name and what it did. Pages and
//! errors never show a token. Every stored value is rendered escaped (the templates escape
//! whatever they interpolate). Bad input is a 400 or 404 page, never a 500.
//!
//! # Architecture invariant
//!
//! The console publishes nothing itself: a re-drive goes through [`Store::redrive`](mesh_audit::Store::redrive) and a
//! replay through [`Store::replay`](mesh_audit::Store::replay), which publish only to a mesh consumer queue; a purge is
//! [`Store::purge_dead_letters`](mesh_audit::Store::purge_dead_letters). The management API is only read.

mod actions;
mod assets;
mod auth;
mod broker;
mod console;
mod contract_docs;
mod contracts;
mod dead_letters;
mod headers;
mod input;
mod live;
mod map;
mod module_graph;
mod pages;
mod params;
mod redrive;
mod respond;
mod routes;
mod sagas;
mod search;
mod svg;
mod topology;
mod when;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

pub use auth::{TokenError, Tokens, MIN_TOKEN_LEN};
pub use console::{Console, DEFAULT_SEARCH_BUDGET, DEFAULT_SEARCH_READS};
pub use contract_docs::{contract_docs, DEFAULT_DOCS_TITLE};
pub use contracts::{announced_system, Announced, Skipped, ANNOUNCEMENTS};

/// The default address: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8642";

/// Serves `console` on `listener` until `shutdown` is cancelled, allowing the listener's own
/// origins ([`Console::allow_own_origins`]).
pub async fn serve(
    listener: TcpListener,
    console: Console,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let addr = listener.local_addr()?;
    let mut console = console.allow_own_origins(addr);
    // Live streams end with the console, so the graceful shutdown does not wait for them.
    console.shutdown = shutdown.clone();
    let app = console.router();
    tracing::info!(%addr, "console listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
