//! The operator's console: a web application over the audit store ([`mesh_audit::Store`]), the
//! broker (a [`Transport`]: re-drive, replay, the live tail) and its management API
//! ([`Console::management`]: queues and bindings).
//!
//! Server-rendered HTML with a small embedded stylesheet, one small inline script (the live
//! page's) and no front-end build:
//!
//! - `/`: the store's counts, events of the last hour by key prefix and by source (bar
//!   charts in inline SVG), the module queues (depth, consumers, retrying, pending dead
//!   letters) and the audit loggers' readiness, and the dead letters pending per queue;
//! - `/events?key=&source=&since=&until=&id=&order=&after=`: the event search, a keyset
//!   pagination (`after` is the id of the last event of the page before); a page reads at
//!   most [`Console::search_reads`] stored events, so a pattern no index serves (`*.*.paid`)
//!   pages through the store a bounded walk at a time instead of scanning it whole;
//! - `/events/{id}`: an event's headers, body, and its causation tree as an SVG graph;
//! - `/dead`, `/dead?queue=&reason=`, `/dead/{id}`: dead letters grouped by queue and
//!   reason, a group's list, one dead letter;
//! - `/dead/redrive` and `/dead/purge`: a confirmation page on `GET` (how many, to where,
//!   from [`Store::redrive_plan`] and the counts), the action on `POST`;
//! - `/live?key=`: a live tail, fed by `/live/stream` (Server-Sent Events from an ephemeral
//!   queue of the console's own; at most 16 open at once);
//! - `/map?since=&until=`: the system map, emitters → keys → receiving module queues;
//! - `/modules/{queue}`: a module queue, and `/replay` (confirmation on `GET`, the action on
//!   `POST`): stored events re-published into that queue only ([`Store::replay`]).
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
//! Every action is logged (`tracing`, info) with the token's name and what it did. Pages and
//! errors never show a token. Every stored value is rendered escaped (the templates escape
//! whatever they interpolate). Bad input is a 400 or 404 page, never a 500.
//!
//! # Architecture invariant
//!
//! The console publishes nothing itself: a re-drive goes through [`Store::redrive`] and a
//! replay through [`Store::replay`], which publish only to a mesh consumer queue; a purge is
//! [`Store::purge_dead_letters`]. The management API is only read.

mod auth;
mod broker;
mod live;
mod map;
mod pages;
mod params;
mod svg;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use mesh_admin::management::ManagementClient;
use mesh_audit::Store;
use mesh_core::Transport;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

pub use auth::{TokenError, Tokens, MIN_TOKEN_LEN};

/// The default address: loopback only.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8642";

/// The console: a store, the transport re-drives publish through, and who may act.
#[derive(Clone)]
pub struct Console {
    pub(crate) store: Store,
    pub(crate) transport: Option<Arc<dyn Transport>>,
    pub(crate) tokens: Tokens,
    pub(crate) read_only: bool,
    pub(crate) origins: Vec<String>,
    pub(crate) broker: Option<broker::Broker>,
    pub(crate) live_slots: Arc<Semaphore>,
    pub(crate) search_reads: usize,
    pub(crate) shutdown: CancellationToken,
}

impl fmt::Debug for Console {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Console")
            .field("backend", &self.store.backend())
            .field("transport", &self.transport.is_some())
            .field("tokens", &self.tokens)
            .field("read_only", &self.read_only)
            .field("origins", &self.origins)
            .field("broker", &self.broker.as_ref().map(|b| b.client.url()))
            .finish()
    }
}

/// The most stored events one page of event search reads by default
/// ([`Console::search_reads`]).
pub const DEFAULT_SEARCH_READS: usize = 10_000;

impl Console {
    /// A console over `store`: no transport (re-drive unavailable), no token (every action
    /// refused), not read-only, no origin allowed but those [`serve`] adds.
    pub fn new(store: Store) -> Console {
        Console {
            store,
            transport: None,
            tokens: Tokens::none(),
            read_only: false,
            origins: Vec::new(),
            broker: None,
            live_slots: live::slots(),
            search_reads: DEFAULT_SEARCH_READS,
            shutdown: CancellationToken::new(),
        }
    }

    /// The management API of the broker's vhost `vhost`: the overview's module queues and
    /// audit loggers, the system map's receiving queues, a module queue's page. Without it
    /// those parts say they are not known.
    pub fn management(mut self, client: ManagementClient, vhost: impl Into<String>) -> Console {
        self.broker = Some(broker::Broker {
            client,
            vhost: vhost.into(),
        });
        self
    }

    /// The transport re-drives and replays publish through, and the live tail follows
    /// events on (the broker).
    pub fn transport(mut self, transport: Arc<dyn Transport>) -> Console {
        self.transport = Some(transport);
        self
    }

    /// The tokens that may act.
    pub fn tokens(mut self, tokens: Tokens) -> Console {
        self.tokens = tokens;
        self
    }

    /// The most stored events one page of event search reads (default
    /// [`DEFAULT_SEARCH_READS`], at least 1). A key pattern no index serves, such as
    /// `*.*.shipped`, is matched on each event read, so one that matches few events would read
    /// the whole store for a page; the page instead stops after this many, shows what it
    /// found, and links to the search going on from there.
    pub fn search_reads(mut self, rows: usize) -> Console {
        self.search_reads = rows.max(1);
        self
    }

    /// Read-only: every action hidden and refused.
    pub fn read_only(mut self, read_only: bool) -> Console {
        self.read_only = read_only;
        self
    }

    /// One more origin (`scheme://host[:port]`, as browsers send it) actions may come from:
    /// the address operators reach the console by, behind a proxy or on another interface.
    pub fn allow_origin(mut self, origin: impl Into<String>) -> Console {
        let origin = origin.into().trim_end_matches('/').to_owned();
        if !self.origins.contains(&origin) {
            self.origins.push(origin);
        }
        self
    }

    /// Allows the origins of the address the console listens on: the address itself, and
    /// `localhost` and both loopback addresses when it is a loopback or unspecified one.
    pub fn allow_own_origins(mut self, addr: SocketAddr) -> Console {
        let port = addr.port();
        let ip = addr.ip();
        if ip.is_loopback() || ip.is_unspecified() {
            for host in ["127.0.0.1", "localhost", "[::1]"] {
                self = self.allow_origin(format!("http://{host}:{port}"));
            }
        }
        if !ip.is_unspecified() {
            self = self.allow_origin(format!("http://{addr}"));
        }
        self
    }

    /// Whether actions (re-drive, purge) are offered: not read-only, a token to check.
    pub(crate) fn actions(&self) -> bool {
        !self.read_only && !self.tokens.is_empty()
    }

    /// The application.
    pub fn router(self) -> Router {
        let state = Arc::new(self);
        Router::new()
            .route("/", get(pages::overview))
            .route("/style.css", get(pages::style))
            .route("/events", get(pages::events))
            .route("/events/{id}", get(pages::event))
            .route("/dead", get(pages::dead))
            .route(
                "/dead/redrive",
                get(pages::redrive_confirm).post(pages::redrive),
            )
            .route("/dead/purge", get(pages::purge_confirm).post(pages::purge))
            .route("/dead/{id}", get(pages::dead_letter))
            .route("/live", get(live::live))
            .route("/live/stream", get(live::stream))
            .route("/map", get(map::map))
            .route("/modules/{queue}", get(map::module))
            .route("/replay", get(map::replay_confirm).post(map::replay))
            .fallback(pages::not_found)
            .layer(axum::middleware::from_fn_with_state(
                state.clone(),
                pages::known_host,
            ))
            .with_state(state)
    }
}

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
