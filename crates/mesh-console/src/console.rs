//! [`Console`]: what the pages share — the store, the transport, who may act — and its
//! settings.

use std::fmt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use mesh_admin::management::ManagementClient;
use mesh_audit::Store;
use mesh_core::Transport;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::auth::Tokens;
use crate::broker;

/// Live streams open at once, at most; one more is refused with 503.
pub(crate) const MAX_STREAMS: usize = 16;

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
    pub(crate) search_budget: Duration,
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

/// The most stored events one walk of an event search reads by default
/// ([`Console::search_reads`]).
pub const DEFAULT_SEARCH_READS: usize = 10_000;

/// How long one page of event search goes on walking by default
/// ([`Console::search_budget`]).
pub const DEFAULT_SEARCH_BUDGET: Duration = Duration::from_secs(1);

impl Console {
    /// A console over `store`: no transport (re-drive unavailable), no token (every action
    /// refused), not read-only, no origin allowed but those [`serve`](crate::serve) adds.
    pub fn new(store: Store) -> Console {
        Console {
            store,
            transport: None,
            tokens: Tokens::none(),
            read_only: false,
            origins: Vec::new(),
            broker: None,
            live_slots: Arc::new(Semaphore::new(MAX_STREAMS)),
            search_reads: DEFAULT_SEARCH_READS,
            search_budget: DEFAULT_SEARCH_BUDGET,
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

    /// The most stored events one walk of an event search reads (default
    /// [`DEFAULT_SEARCH_READS`], at least 1). A key pattern no index serves, such as
    /// `*.*.shipped`, is matched on each event read, so one that matches few events would read
    /// the whole store for a page; the page reads it a walk at a time instead, as long as
    /// [`Console::search_budget`] allows.
    pub fn search_reads(mut self, rows: usize) -> Console {
        self.search_reads = rows.max(1);
        self
    }

    /// How long one page of event search goes on walking the store (default
    /// [`DEFAULT_SEARCH_BUDGET`]; one walk at least, whatever the budget). A page the budget
    /// stops before it fills says how much it searched and links on (`a.next.auto`), and the
    /// console's script follows that link by itself, appending what it finds.
    pub fn search_budget(mut self, budget: Duration) -> Console {
        self.search_budget = budget;
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
}
