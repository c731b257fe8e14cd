//! The operator's console: a web application over the audit store ([`mesh_audit::Store`]).
//!
//! Server-rendered HTML with a small embedded stylesheet, no script and no front-end build:
//!
//! - `/`: the store's counts, events of the last hour by key prefix and by source (bar
//!   charts in inline SVG), and the dead letters pending per queue;
//! - `/events?key=&source=&since=&until=&id=&order=&after=`: the event search, a keyset
//!   pagination (`after` is the id of the last event of the page before);
//! - `/events/{id}`: an event's headers, body, and its causation tree as an SVG graph;
//! - `/dead`, `/dead?queue=&reason=`, `/dead/{id}`: dead letters grouped by queue and
//!   reason, a group's list, one dead letter;
//! - `/dead/redrive` and `/dead/purge`: a confirmation page on `GET` (how many, to where,
//!   from [`Store::redrive_plan`] and the counts), the action on `POST`.
//!
//! # Safe by default
//!
//! Every `POST` is refused with 403, and changes nothing, unless
//!
//! 1. the console is not read-only ([`Console::read_only`]: actions are hidden and refused),
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
//! The console publishes nothing itself: a re-drive goes through [`Store::redrive`], which
//! publishes only to a mesh consumer queue; a purge is [`Store::purge_dead_letters`].

mod auth;
mod pages;
mod params;
mod svg;

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::get;
use axum::Router;
use mesh_audit::Store;
use mesh_core::Transport;
use tokio::net::TcpListener;
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
}

impl fmt::Debug for Console {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Console")
            .field("backend", &self.store.backend())
            .field("transport", &self.transport.is_some())
            .field("tokens", &self.tokens)
            .field("read_only", &self.read_only)
            .field("origins", &self.origins)
            .finish()
    }
}

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
        }
    }

    /// The transport re-drives publish through (the broker).
    pub fn transport(mut self, transport: Arc<dyn Transport>) -> Console {
        self.transport = Some(transport);
        self
    }

    /// The tokens that may act.
    pub fn tokens(mut self, tokens: Tokens) -> Console {
        self.tokens = tokens;
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
    let app = console.allow_own_origins(addr).router();
    tracing::info!(%addr, "console listening");
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}
