//! Options of the store and of the logger: `Default`, consuming setters, and `FromStr` for a
//! store URL. Nothing here reads the environment; the binary does.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use mesh_core::{naming, Name};

use crate::error::Error;

/// The default store of [`StoreOptions::default`]: a SQLite file in the working directory,
/// created if missing. The binaries (`mesh audit run`, `mesh-audit run` and the reading
/// commands) default to `$XDG_DATA_HOME/mesh/audit.db` instead (`~/.local/share/mesh/audit.db`).
pub const DEFAULT_STORE_URL: &str = "sqlite://mesh-audit.db?mode=rwc";

/// Which database a store URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// `sqlite:` URLs: one file (or `sqlite::memory:`).
    Sqlite,
    /// `postgres:` and `postgresql:` URLs.
    Postgres,
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
        })
    }
}

/// Where and how the audit store keeps its rows.
///
/// ```
/// # use mesh_audit::{Backend, StoreOptions};
/// let options: StoreOptions = "postgres://postgres@127.0.0.1/audit".parse()?;
/// assert_eq!(options.backend(), Backend::Postgres);
/// let options = StoreOptions::default().max_connections(2);
/// assert_eq!(options.backend(), Backend::Sqlite);
/// # Ok::<(), mesh_audit::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct StoreOptions {
    url: String,
    backend: Backend,
    max_connections: u32,
    sqlite_synchronous_full: bool,
    create_if_missing: bool,
}

impl fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A PostgreSQL URL may carry a password.
        f.debug_struct("StoreOptions")
            .field("url", &redact(&self.url))
            .field("backend", &self.backend)
            .field("max_connections", &self.max_connections)
            .field("create_if_missing", &self.create_if_missing)
            .finish_non_exhaustive()
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            url: DEFAULT_STORE_URL.to_owned(),
            backend: Backend::Sqlite,
            max_connections: 4,
            sqlite_synchronous_full: true,
            create_if_missing: false,
        }
    }
}

impl StoreOptions {
    /// The default: [`DEFAULT_STORE_URL`].
    pub fn new() -> StoreOptions {
        StoreOptions::default()
    }

    /// Options for `url` (`sqlite://path?mode=rwc`, `postgres://…`).
    pub fn url(url: &str) -> Result<StoreOptions, Error> {
        url.parse()
    }

    /// Connections in the pool, at most (default 4).
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max.max(1);
        self
    }

    /// SQLite only: whether a commit waits for the disk (`synchronous = FULL`, the default),
    /// so an acked event survives a power cut, not just a crash of the process. `false`
    /// selects `NORMAL`, which in WAL mode still survives a crash of the process.
    pub fn sqlite_synchronous_full(mut self, full: bool) -> Self {
        self.sqlite_synchronous_full = full;
        self
    }

    /// SQLite only: create the file, and its directory where it can, when they do not
    /// exist (default `false`: opening a missing file fails, with a hint). A URL that says
    /// `mode=ro`, `mode=rw` or `mode=memory` keeps its mode; `mode=rwc` creates the file
    /// either way. The audit logger's command sets it: the logger creates its own store.
    pub fn create_if_missing(mut self, create: bool) -> Self {
        self.create_if_missing = create;
        self
    }

    /// See [`StoreOptions::create_if_missing`].
    pub fn get_create_if_missing(&self) -> bool {
        self.create_if_missing
    }

    /// The backend the URL names.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The URL.
    pub fn get_url(&self) -> &str {
        &self.url
    }

    /// The URL with any password replaced by `***`, for logs.
    pub fn redacted_url(&self) -> String {
        redact(&self.url)
    }

    pub(crate) fn get_max_connections(&self) -> u32 {
        self.max_connections
    }

    pub(crate) fn get_sqlite_synchronous_full(&self) -> bool {
        self.sqlite_synchronous_full
    }
}

impl FromStr for StoreOptions {
    type Err = Error;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        let scheme = url.split_once(':').map(|(scheme, _)| scheme);
        let backend = match scheme {
            Some("sqlite") => Backend::Sqlite,
            Some("postgres" | "postgresql") => Backend::Postgres,
            _ => {
                return Err(Error::options(format!(
                    "store URL `{}` is neither `sqlite:` nor `postgres:`",
                    redact(url)
                ))
                .with_hint(STORE_URL_HINT))
            }
        };
        Ok(StoreOptions {
            url: url.to_owned(),
            backend,
            ..StoreOptions::default()
        })
    }
}

/// What a store URL looks like, for hints.
pub(crate) const STORE_URL_HINT: &str = "give a store URL of the form sqlite://PATH (created \
     by the audit logger when missing) or postgres://USER@HOST[:PORT]/DB";

/// `scheme://user:password@host` → `scheme://user:***@host`.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{host}{path}"),
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// The default prefetch of the logger's queues: larger than a handler's (32), because
/// deliveries wait in a batch rather than in a handler.
pub const DEFAULT_PREFETCH: u16 = 1000;
/// The default batch size: rows per transaction.
pub const DEFAULT_BATCH_SIZE: usize = 500;
/// The default time a batch stays open after its first message.
pub const DEFAULT_BATCH_WAIT: Duration = Duration::from_millis(50);
/// The largest batch size [`AuditOptions::validate`] accepts.
pub const MAX_BATCH_SIZE: usize = 100_000;
/// The longest batch wait [`AuditOptions::validate`] accepts: an hour.
pub const MAX_BATCH_WAIT: Duration = Duration::from_secs(3600);
/// The longest user prefix [`AuditOptions::validate`] accepts, in bytes (as the access
/// plan's `user_prefix`).
pub const MAX_USER_PREFIX_LEN: usize = 100;

/// How the audit logger consumes and batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditOptions {
    node: Option<String>,
    batch_size: usize,
    batch_wait: Duration,
    prefetch: u16,
    delivery_limit: Option<u32>,
    enforce_identity: Option<String>,
    shared: bool,
    // Boxed: the options travel inside the logger, kept small.
    retain: Option<Box<crate::retention::Retention>>,
}

/// The `x-delivery-limit` mesh-amqp declares quorum queues with by default
/// (`AmqpOptions::delivery_limit`; a test holds the two equal): the crate reads the store
/// without the transport when its `service` feature is off.
const DEFAULT_DELIVERY_LIMIT: u32 = 20;

impl Default for AuditOptions {
    fn default() -> Self {
        AuditOptions {
            node: None,
            batch_size: DEFAULT_BATCH_SIZE,
            batch_wait: DEFAULT_BATCH_WAIT,
            prefetch: DEFAULT_PREFETCH,
            delivery_limit: Some(DEFAULT_DELIVERY_LIMIT),
            enforce_identity: None,
            shared: false,
            retain: None,
        }
    }
}

impl AuditOptions {
    /// Defaults, without a node (which [`AuditOptions::node`] must set).
    pub fn new() -> AuditOptions {
        AuditOptions::default()
    }

    /// The node the logger runs on: its queue is `<node>.audit-logger.events` (unless
    /// [`shared`](AuditOptions::shared)). Required; `shared` and `scheduled` are the
    /// contract's and refused ([`mesh_core::naming::node_name`]).
    pub fn node(mut self, node: impl Into<String>) -> Self {
        self.node = Some(node.into());
        self
    }

    /// Shared loggers (default `false`: one logger per node, each with its own full copy).
    /// With `true` the logger consumes `shared.audit-logger.events` (bound to `#`) and
    /// `shared.audit-logger.dead` (bound to `#` on `mesh.events.dead`) instead of its node's
    /// queues: every shared logger of the deployment competes on those two queues, so each
    /// event and each dead letter reaches one of them, and they share the load. Run shared
    /// loggers into one store (PostgreSQL: several writers); the store keeps each event
    /// id once whichever logger writes it, so a redelivery after a crash is absorbed as with
    /// one logger (see decision 0026 in the repository's `docs/decisions`). The node still
    /// names the process (logs, its broker user). Never mix both shapes on one store: a
    /// per-node logger beside shared ones records everything a second time over.
    pub fn shared(mut self, shared: bool) -> Self {
        self.shared = shared;
        self
    }

    /// See [`AuditOptions::shared`].
    pub fn get_shared(&self) -> bool {
        self.shared
    }

    /// The queue of events and the queue of dead letters the logger consumes: its node's
    /// `<node>.audit-logger.events` and `<node>.audit-logger.dead`, or with
    /// [`shared`](AuditOptions::shared) `shared.audit-logger.events` and
    /// `shared.audit-logger.dead`. Fails as [`validate`](AuditOptions::validate) does.
    pub fn queues(&self) -> Result<(String, String), Error> {
        let node = self.validate()?;
        Ok(if self.shared {
            (
                naming::shared_audit_queue(),
                naming::shared_audit_dead_queue(),
            )
        } else {
            (naming::audit_queue(&node), naming::audit_dead_queue(&node))
        })
    }

    /// The `x-delivery-limit` mesh's quorum consumer queues were declared with (default
    /// mesh-amqp's, 20; `None` when unknown). A dead letter the broker made for that limit
    /// carries no count of its deliveries, so its attempts are read as this limit + 1 (the
    /// number RabbitMQ delivers such a message); with `None`, as 0. Exact when every
    /// process of the deployment declares queues with the same limit (RabbitMQ refuses to
    /// declare a queue again with another).
    pub fn delivery_limit(mut self, limit: Option<u32>) -> Self {
        self.delivery_limit = limit;
        self
    }

    /// See [`AuditOptions::delivery_limit`].
    pub fn get_delivery_limit(&self) -> Option<u32> {
        self.delivery_limit
    }

    /// Broker-enforced identity (default off): with `Some(user_prefix)`, an event is stored
    /// only when its validated user ([`mesh_core::codec::validated_user`], the `user-id`
    /// RabbitMQ checked) is the broker user owning its key,
    /// [`mesh_core::naming::owner_user`] with this prefix (the access plan's
    /// `user_prefix`, `""` for none): `module.umami.…` from `<prefix>module.umami`. Any other
    /// event is dead-lettered with reason `forged-source`, as a bus with
    /// `enforce_identity(true)` does. Turn it on only where every publisher connects as its
    /// own user under the access plan (see `docs/SECURITY.md`). `None` stores every
    /// well-formed event, recording its validated user whatever it is.
    ///
    /// With it, each dead letter's provenance is judged too
    /// ([`mesh_core::provenance::dead_letter_trusted`]): one whose publisher is not the owner of
    /// the queue it names is stored as untrusted, and never re-driven with its claims.
    pub fn enforce_identity(mut self, user_prefix: Option<String>) -> Self {
        self.enforce_identity = user_prefix;
        self
    }

    /// See [`AuditOptions::enforce_identity`]: the user prefix when identity is enforced.
    pub fn get_enforce_identity(&self) -> Option<&str> {
        self.enforce_identity.as_deref()
    }

    /// Retention (default none: everything is kept): what arrived longer ago than it is
    /// removed continuously, a bounded step at a time between batches, by arrival
    /// (`received_at`), never by an event's `x-time` (see [`crate::Retention`]).
    pub fn retain(mut self, retention: Option<crate::retention::Retention>) -> Self {
        self.retain = retention.map(Box::new);
        self
    }

    /// See [`AuditOptions::retain`].
    pub fn get_retain(&self) -> Option<&crate::retention::Retention> {
        self.retain.as_deref()
    }

    /// Rows per transaction, at most (default 500; 1 to [`MAX_BATCH_SIZE`]). A batch closes at this size or after
    /// [`batch_wait`](AuditOptions::batch_wait), whichever comes first.
    pub fn batch_size(mut self, size: usize) -> Self {
        self.batch_size = size;
        self
    }

    /// How long a batch stays open after its first message (default 50 ms, at most
    /// [`MAX_BATCH_WAIT`]), so a trickle of events is stored promptly.
    pub fn batch_wait(mut self, wait: Duration) -> Self {
        self.batch_wait = wait;
        self
    }

    /// Unacked deliveries per queue, at most (default 1,000). Keep it at least the batch
    /// size, or batches close on time only.
    pub fn prefetch(mut self, prefetch: u16) -> Self {
        self.prefetch = prefetch;
        self
    }

    /// The batch size.
    pub fn get_batch_size(&self) -> usize {
        self.batch_size
    }

    /// The batch wait.
    pub fn get_batch_wait(&self) -> Duration {
        self.batch_wait
    }

    /// The prefetch.
    pub fn get_prefetch(&self) -> u16 {
        self.prefetch
    }

    /// Checks the options and returns the node's name.
    pub fn validate(&self) -> Result<Name, Error> {
        let node = self
            .node
            .as_deref()
            .ok_or_else(|| Error::options("the audit logger needs a node name"))?;
        let node = naming::node_name(node).map_err(|e| match e {
            e @ mesh_core::KeyError::ReservedNode { .. } => {
                Error::options(format!("`{node}` cannot be the logger's node")).with_source(e)
            }
            e => Error::options(format!("node name `{node}` is not a valid name")).with_source(e),
        })?;
        if self.batch_size == 0 {
            return Err(Error::options("the batch size must be at least 1"));
        }
        if self.batch_size > MAX_BATCH_SIZE {
            return Err(Error::options(format!(
                "the batch size must be at most {MAX_BATCH_SIZE}"
            )));
        }
        if self.batch_wait > MAX_BATCH_WAIT {
            return Err(Error::options("the batch wait must be at most an hour"));
        }
        if self.prefetch == 0 {
            return Err(Error::options("the prefetch must be at least 1"));
        }
        if let Some(retention) = &self.retain {
            retention.validate()?;
        }
        if let Some(prefix) = &self.enforce_identity {
            if prefix.len() > MAX_USER_PREFIX_LEN || prefix.chars().any(char::is_control) {
                return Err(Error::options(format!(
                    "the user prefix must be at most {MAX_USER_PREFIX_LEN} bytes, with no \
                     control character"
                )));
            }
        }
        Ok(node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_delivery_limit_is_the_transports() {
        assert_eq!(
            DEFAULT_DELIVERY_LIMIT,
            mesh::amqp::AmqpOptions::default().get_delivery_limit()
        );
    }

    #[test]
    fn store_urls_name_their_backend() {
        let sqlite: StoreOptions = "sqlite://audit.db?mode=rwc".parse().unwrap();
        assert_eq!(sqlite.backend(), Backend::Sqlite);
        let pg: StoreOptions = "postgresql://u:secret@db/audit".parse().unwrap();
        assert_eq!(pg.backend(), Backend::Postgres);
        assert_eq!(pg.redacted_url(), "postgresql://u:***@db/audit");
        assert!(!format!("{pg:?}").contains("secret"));
        let err = "mysql://db".parse::<StoreOptions>().unwrap_err();
        assert_eq!(err.kind(), &crate::ErrorKind::InvalidOptions);
        assert!("audit.db".parse::<StoreOptions>().is_err());
    }

    #[test]
    fn audit_options_are_checked() {
        assert!(AuditOptions::new().validate().is_err(), "no node");
        assert!(AuditOptions::new().node("a.b").validate().is_err());
        assert!(AuditOptions::new()
            .node("n")
            .batch_size(0)
            .validate()
            .is_err());
        assert!(AuditOptions::new()
            .node("n")
            .prefetch(0)
            .validate()
            .is_err());
        assert!(AuditOptions::new()
            .node("n")
            .batch_size(MAX_BATCH_SIZE + 1)
            .validate()
            .is_err());
        assert!(AuditOptions::new()
            .node("n")
            .batch_wait(Duration::MAX)
            .validate()
            .is_err());
        assert!(AuditOptions::new()
            .node("n")
            .batch_size(MAX_BATCH_SIZE)
            .batch_wait(MAX_BATCH_WAIT)
            .validate()
            .is_ok());
        assert!(AuditOptions::new()
            .node("n")
            .enforce_identity(Some("x".repeat(MAX_USER_PREFIX_LEN + 1)))
            .validate()
            .is_err());
        assert!(AuditOptions::new()
            .node("n")
            .enforce_identity(Some("a\nb/".into()))
            .validate()
            .is_err());
        assert!(AuditOptions::new()
            .node("n")
            .enforce_identity(Some("x".repeat(MAX_USER_PREFIX_LEN)))
            .validate()
            .is_ok());
        let node = AuditOptions::new().node("anchor").validate().unwrap();
        assert_eq!(node.as_str(), "anchor");
    }

    #[test]
    fn a_shared_logger_consumes_the_shared_queues_and_no_node_is_named_shared() {
        let per_node = AuditOptions::new().node("n1");
        assert!(!per_node.get_shared(), "the per-node shape is the default");
        assert_eq!(
            per_node.queues().unwrap(),
            (
                "n1.audit-logger.events".into(),
                "n1.audit-logger.dead".into()
            )
        );
        let shared = per_node.shared(true);
        assert_eq!(
            shared.queues().unwrap(),
            (
                "shared.audit-logger.events".into(),
                "shared.audit-logger.dead".into()
            )
        );
        // A node named `shared` would declare the shared queue as its own.
        for reserved in ["shared", "scheduled"] {
            for options in [
                AuditOptions::new().node(reserved),
                AuditOptions::new().node(reserved).shared(true),
            ] {
                let err = options.validate().unwrap_err();
                assert_eq!(err.kind(), &crate::ErrorKind::InvalidOptions);
                let source = std::error::Error::source(&err).expect("a source");
                assert!(
                    matches!(
                        source.downcast_ref::<mesh_core::KeyError>(),
                        Some(mesh_core::KeyError::ReservedNode { .. })
                    ),
                    "{source:?}"
                );
                assert!(options.queues().is_err());
            }
        }
    }
}
