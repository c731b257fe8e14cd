//! The options themselves: [`AmqpOptions`] with its defaults, consuming setters, getters
//! and validation, and the values it holds ([`QueueType`], [`BrokerAddress`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use mesh_core::{TransportError, TransportErrorKind};

use crate::tls::TlsOptions;

use super::auth::AuthMechanism;

/// The environment variable [`AmqpOptions::from_env`] reads.
pub const URL_ENV: &str = "MESH_URL";

pub(super) const DEFAULT_PORT: u16 = 5672;
const DEFAULT_MANAGEMENT_PORT: u16 = 15672;
const DEFAULT_MANAGEMENT_TLS_PORT: u16 = 15671;
/// The largest confirm window (see [`AmqpOptions::validate`]).
const MAX_CONFIRM_WINDOW: usize = 8192;
/// The largest byte bound of the unconfirmed window: a message takes its size in permits of
/// a semaphore, which counts them in `u32`.
const MAX_UNCONFIRMED_BYTES: usize = u32::MAX as usize;

/// The queue type of the durable queues mesh declares (consumer, delay, dead-letter and serve
/// queues). Exclusive queues (ephemeral subscriptions, RPC replies) are always classic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum QueueType {
    /// Replicated, and the broker counts deliveries (`x-delivery-count`), which bounds a poison
    /// message with `x-delivery-limit`. The default.
    #[default]
    Quorum,
    /// A single-node queue: no delivery count, no delivery limit, and no at-least-once
    /// dead-lettering of expired retry copies (the broker dead-letters them at most once). A
    /// message that crashes its consumer every time is redelivered forever; the transport
    /// warns once, when it first declares a classic consumer queue.
    Classic,
}

impl QueueType {
    /// The value of `x-queue-type`.
    pub const fn as_str(self) -> &'static str {
        match self {
            QueueType::Quorum => "quorum",
            QueueType::Classic => "classic",
        }
    }
}

impl fmt::Display for QueueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for QueueType {
    type Err = TransportError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "quorum" => Ok(QueueType::Quorum),
            "classic" => Ok(QueueType::Classic),
            other => Err(invalid(format!(
                "queue type `{other}` is neither `quorum` nor `classic`"
            ))),
        }
    }
}

/// One broker node to connect to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BrokerAddress {
    /// A host name or IP address; an IPv6 address keeps its brackets (`[::1]`).
    pub host: String,
    /// The AMQP port.
    pub port: u16,
}

impl BrokerAddress {
    /// An address.
    pub fn new(host: impl Into<String>, port: u16) -> BrokerAddress {
        BrokerAddress {
            host: host.into(),
            port,
        }
    }
}

impl fmt::Display for BrokerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// The settings of an [`AmqpTransport`](crate::AmqpTransport).
///
/// ```
/// use std::time::Duration;
/// use mesh_amqp::{AmqpOptions, QueueType};
///
/// // One node, vhost `/` (`%2F`):
/// let options: AmqpOptions = "amqp://mesh:secret@rabbit.local:5672/%2F".parse().unwrap();
/// assert_eq!(options.get_vhost(), "/");
///
/// // A cluster: several `host:port` separated by commas, tried in turn.
/// let options: AmqpOptions = "amqp://mesh:secret@r1:5672,r2:5673,r3/prod".parse().unwrap();
/// assert_eq!(options.get_addresses().len(), 3);
///
/// let options = options
///     .queue_type(QueueType::Classic)
///     .confirm_window(256)
///     .max_unconfirmed_bytes(16 * 1024 * 1024)
///     .heartbeat(Duration::from_secs(5))
///     .reconnect_backoff(Duration::from_millis(100), Duration::from_secs(5))
///     .connection_name("anchor.umami");
/// # let _ = options;
/// ```
///
/// # URL syntax
///
/// `amqp[s]://[user[:password]@]host[:port][,host[:port]…][/vhost][?param=value&…]`
///
/// - user and password are percent-decoded; without them `guest`/`guest` is used; a `/`,
///   `?`, `#` or `%` in the password must be percent-encoded (better: keep the password out
///   of the URL, see [`AmqpOptions::password_file`]);
/// - several comma-separated addresses name the nodes of a cluster, tried in order (after a
///   lost connection, starting with the node after the lost one);
/// - the vhost is the percent-decoded path (`%2F` is `/`); an empty path is `/`; a literal
///   `/` inside the vhost must be written `%2F`;
/// - `amqps` connects with TLS ([`TlsOptions`]), port 5671 by default;
/// - parameters: `heartbeat` (seconds), `connection_timeout` (milliseconds), and for `amqps`
///   RabbitMQ's TLS parameters: `cacertfile`, `certfile`, `keyfile` (PEM file paths,
///   percent-decoded), `verify` (`verify_peer`, the default, or `verify_none`) and
///   `server_name_indication`. The files are read when the options are validated and again at
///   every (re)connect;
/// - `auth_mechanism`: `plain` (the default) or `external`, a login by the client
///   certificate alone ([`AuthMechanism::External`]: no password is read or sent; the URL's
///   user must be the one the certificate logs in as, since every message carries it as
///   `user-id`): `amqps://module.billing@rabbit/prod?auth_mechanism=external&certfile=…&keyfile=…`.
#[derive(Clone, PartialEq, Eq)]
pub struct AmqpOptions {
    // `pub(super)`: what a URL says, which the URL parser (`url`) sets.
    pub(super) addresses: Vec<BrokerAddress>,
    pub(super) user: String,
    pub(super) password: String,
    pub(super) vhost: String,
    queue_type: QueueType,
    confirm_window: usize,
    delivery_limit: u32,
    pub(super) heartbeat: Duration,
    connection_name: String,
    management_url: Option<String>,
    publish_deadline: Option<Duration>,
    max_message_size: usize,
    pub(super) connect_timeout: Duration,
    max_unconfirmed_bytes: usize,
    reconnect_min: Duration,
    reconnect_max: Duration,
    pub(super) tls: Option<TlsOptions>,
    password_file: Option<PathBuf>,
    pub(super) auth_mechanism: AuthMechanism,
}

impl Default for AmqpOptions {
    /// `amqp://guest:guest@localhost:5672/`, quorum queues, a window of 1,024 unconfirmed
    /// publishes holding at most 64 MiB, delivery limit 20, heartbeat 10 s, connection names
    /// `mesh.*`, publish deadline 30 s, messages up to 128 MiB, connect timeout 10 s,
    /// reconnects after 100 ms doubling to 5 s.
    fn default() -> Self {
        AmqpOptions {
            addresses: vec![BrokerAddress::new("localhost", DEFAULT_PORT)],
            user: "guest".to_owned(),
            password: "guest".to_owned(),
            vhost: "/".to_owned(),
            queue_type: QueueType::Quorum,
            confirm_window: 1024,
            delivery_limit: 20,
            heartbeat: Duration::from_secs(10),
            connection_name: "mesh".to_owned(),
            management_url: None,
            publish_deadline: Some(Duration::from_secs(30)),
            max_message_size: 128 * 1024 * 1024,
            connect_timeout: Duration::from_secs(10),
            max_unconfirmed_bytes: 64 * 1024 * 1024,
            reconnect_min: Duration::from_millis(100),
            reconnect_max: Duration::from_secs(5),
            tls: None,
            password_file: None,
            auth_mechanism: AuthMechanism::Plain,
        }
    }
}

impl AmqpOptions {
    /// The defaults (see [`Default`]).
    pub fn new() -> AmqpOptions {
        AmqpOptions::default()
    }

    /// Parses the URL in `MESH_URL`. The environment is read here and nowhere else.
    pub fn from_env() -> Result<AmqpOptions, TransportError> {
        match std::env::var(URL_ENV) {
            Ok(url) if !url.trim().is_empty() => url.trim().parse(),
            Ok(_) => Err(invalid(format!("{URL_ENV} is empty"))),
            Err(std::env::VarError::NotPresent) => Err(invalid(format!("{URL_ENV} is not set"))),
            Err(e) => Err(invalid(format!("{URL_ENV} is unreadable")).with_source(e)),
        }
    }

    /// Connect to this one node only.
    pub fn address(mut self, host: impl Into<String>, port: u16) -> Self {
        self.addresses = vec![BrokerAddress::new(host, port)];
        self
    }

    /// Connect to the first of these nodes that answers, in order.
    pub fn addresses(mut self, addresses: impl IntoIterator<Item = BrokerAddress>) -> Self {
        self.addresses = addresses.into_iter().collect();
        self
    }

    /// The user name and password (also used for the management API).
    pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = user.into();
        self.password = password.into();
        self
    }

    /// The password alone (the user name stays).
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = password.into();
        self
    }

    /// Read the password from this file (its content, without one trailing line break) at
    /// every (re)connect, instead of the password set otherwise: a rotated password takes
    /// effect at the next connect, and it appears in no URL or command line.
    pub fn password_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.password_file = Some(path.into());
        self
    }

    /// How to log in: a password ([`AuthMechanism::Plain`], the default) or the client
    /// certificate alone ([`AuthMechanism::External`], which needs [`tls`](Self::tls) with a
    /// client certificate; the broker names the user after the certificate, and the user set
    /// here must be that name: every message carries it as `user-id`, which the broker
    /// checks).
    pub fn auth_mechanism(mut self, mechanism: AuthMechanism) -> Self {
        self.auth_mechanism = mechanism;
        self
    }

    /// Connect with TLS (`amqps`). The addresses keep their ports: give 5671, RabbitMQ's
    /// TLS port, where the URL would default to it.
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Connect without TLS (the default).
    pub fn no_tls(mut self) -> Self {
        self.tls = None;
        self
    }

    /// The virtual host.
    pub fn vhost(mut self, vhost: impl Into<String>) -> Self {
        self.vhost = vhost.into();
        self
    }

    /// The type of the durable queues mesh declares; [`QueueType::Quorum`] by default.
    pub fn queue_type(mut self, queue_type: QueueType) -> Self {
        self.queue_type = queue_type;
        self
    }

    /// How many publishes may wait for their broker confirm at once (default 1,024, at most
    /// 8,192). Waiting for room in this window is the backpressure of `publish`.
    pub fn confirm_window(mut self, window: usize) -> Self {
        self.confirm_window = window;
        self
    }

    /// The `x-delivery-limit` of quorum queues (default 20): a backstop against a message
    /// that kills its consumer before it can be settled. On RabbitMQ 3.10, a limit of `L`
    /// allows `L + 1` deliveries; the next rejection dead-letters the message to
    /// `mesh.events.dead`. Classic queues refuse the argument, so it is not set there.
    pub fn delivery_limit(mut self, limit: u32) -> Self {
        self.delivery_limit = limit;
        self
    }

    /// The AMQP heartbeat (default 10 s; whole seconds, 0 disables it).
    pub fn heartbeat(mut self, heartbeat: Duration) -> Self {
        self.heartbeat = heartbeat;
        self
    }

    /// The prefix of the client-provided connection names: connections are named
    /// `<prefix>.publish` and `<prefix>.consume` (default prefix `mesh`), which is how an
    /// operator, or a test, finds and closes them.
    pub fn connection_name(mut self, prefix: impl Into<String>) -> Self {
        self.connection_name = prefix.into();
        self
    }

    /// The management API's base URL, e.g. `http://rabbit.local:15672` (`http` or `https`).
    /// By default it is derived from the first AMQP address, port 15672, with the same
    /// credentials. It is used to find bindings a durable queue no longer asks for.
    pub fn management_url(mut self, url: impl Into<String>) -> Self {
        self.management_url = Some(url.into());
        self
    }

    /// The deadline of a publish whose `PublishOptions::deadline` is `None`: waiting for room
    /// in the window plus waiting for the confirm (default 30 s). `None` waits as long as it
    /// takes.
    pub fn publish_deadline(mut self, deadline: Option<Duration>) -> Self {
        self.publish_deadline = deadline;
        self
    }

    /// The largest message body accepted (default 128 MiB, RabbitMQ's default
    /// `max_message_size`). A larger one is refused as `TooLarge` without being published.
    pub fn max_message_size(mut self, bytes: usize) -> Self {
        self.max_message_size = bytes;
        self
    }

    /// How long one connection attempt to one address may take (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How many body bytes the unconfirmed window may hold, in all (default 64 MiB, at most
    /// 4 GiB). Together with [`confirm_window`](AmqpOptions::confirm_window) it bounds the
    /// memory a long outage or a broker alarm can cost: a publish waits for room, up to its
    /// deadline, then fails with `Backpressure`. A single message larger than the bound takes
    /// the whole of it (it waits until the window holds no other bytes).
    pub fn max_unconfirmed_bytes(mut self, bytes: usize) -> Self {
        self.max_unconfirmed_bytes = bytes;
        self
    }

    /// The delays between reconnect (and re-attach) attempts: `min` after the first failure,
    /// doubling up to `max`, each drawn at random from the upper half of its step (default
    /// 100 ms to 5 s).
    pub fn reconnect_backoff(mut self, min: Duration, max: Duration) -> Self {
        self.reconnect_min = min;
        self.reconnect_max = max;
        self
    }

    /// The nodes, in the order they are tried.
    pub fn get_addresses(&self) -> &[BrokerAddress] {
        &self.addresses
    }

    /// The user name.
    pub fn get_user(&self) -> &str {
        &self.user
    }

    /// The password given in the URL or with [`credentials`](AmqpOptions::credentials) (not
    /// the one of a [password file](AmqpOptions::password_file): see
    /// [`load_password`](AmqpOptions::load_password)).
    pub fn get_password(&self) -> &str {
        &self.password
    }

    /// The password file, if set.
    pub fn get_password_file(&self) -> Option<&Path> {
        self.password_file.as_deref()
    }

    /// The password to log in with now: the password file's content, read now, if one is set;
    /// else the password given. Fails with `InvalidOptions` naming the file if it cannot be
    /// read, is not UTF-8, or is empty; its source is then the
    /// [`mesh_files::FileError`] (the file is larger than [`mesh_files::MAX_SECRET`], a FIFO or
    /// device gave nothing within [`mesh_files::DEADLINE`], …).
    ///
    /// Synchronous: it may take up to the deadline (a FIFO), so an async caller runs it with
    /// `spawn_blocking`, as connecting does.
    pub fn load_password(&self) -> Result<String, TransportError> {
        let Some(path) = &self.password_file else {
            return Ok(self.password.clone());
        };
        let text =
            mesh_files::read_bounded_text(path, mesh_files::MAX_SECRET, mesh_files::DEADLINE)
                .map_err(|e| {
                    invalid(format!(
                        "cannot read the password file `{}`",
                        path.display()
                    ))
                    .with_source(e)
                })?;
        let password = text
            .strip_suffix('\n')
            .map(|t| t.strip_suffix('\r').unwrap_or(t))
            .unwrap_or(&text);
        if password.is_empty() {
            return Err(invalid(format!(
                "the password file `{}` is empty",
                path.display()
            )));
        }
        Ok(password.to_owned())
    }

    /// How the connection logs in.
    pub fn get_auth_mechanism(&self) -> AuthMechanism {
        self.auth_mechanism
    }

    /// The TLS settings, if connecting with TLS.
    pub fn get_tls(&self) -> Option<&TlsOptions> {
        self.tls.as_ref()
    }

    /// The virtual host.
    pub fn get_vhost(&self) -> &str {
        &self.vhost
    }

    /// The queue type of durable queues.
    pub fn get_queue_type(&self) -> QueueType {
        self.queue_type
    }

    /// The unconfirmed window.
    pub fn get_confirm_window(&self) -> usize {
        self.confirm_window
    }

    /// The quorum delivery limit.
    pub fn get_delivery_limit(&self) -> u32 {
        self.delivery_limit
    }

    /// The heartbeat.
    pub fn get_heartbeat(&self) -> Duration {
        self.heartbeat
    }

    /// The connection name prefix.
    pub fn get_connection_name(&self) -> &str {
        &self.connection_name
    }

    /// The management API's base URL: as set, or derived from the first address (`https` on
    /// port 15671 when connecting with TLS, so the credentials never travel in clear where
    /// the broker was reached with TLS; `http` on 15672 otherwise).
    pub fn get_management_url(&self) -> Option<String> {
        match &self.management_url {
            Some(url) => Some(url.clone()),
            None => self.addresses.first().map(|a| match self.tls {
                Some(_) => format!("https://{}:{DEFAULT_MANAGEMENT_TLS_PORT}", a.host),
                None => format!("http://{}:{DEFAULT_MANAGEMENT_PORT}", a.host),
            }),
        }
    }

    /// The default publish deadline.
    pub fn get_publish_deadline(&self) -> Option<Duration> {
        self.publish_deadline
    }

    /// The largest message body accepted.
    pub fn get_max_message_size(&self) -> usize {
        self.max_message_size
    }

    /// The timeout of one connection attempt.
    pub fn get_connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The byte bound of the unconfirmed window.
    pub fn get_max_unconfirmed_bytes(&self) -> usize {
        self.max_unconfirmed_bytes
    }

    /// The reconnect backoff, `(min, max)`.
    pub fn get_reconnect_backoff(&self) -> (Duration, Duration) {
        (self.reconnect_min, self.reconnect_max)
    }

    /// Checks what would otherwise fail late (or, in the client library, panic): AMQP short
    /// strings are at most 255 bytes, a window of zero would never publish, and so on.
    pub fn validate(&self) -> Result<(), TransportError> {
        if self.addresses.is_empty() {
            return Err(invalid("no broker address"));
        }
        if let Some(a) = self.addresses.iter().find(|a| a.host.is_empty()) {
            return Err(invalid(format!("empty host in address `{a}`")));
        }
        if self.vhost.len() > 255 {
            return Err(invalid("the vhost is longer than 255 bytes"));
        }
        if self.user.len() > 255 {
            return Err(invalid("the user name is longer than 255 bytes"));
        }
        if self.confirm_window == 0 {
            return Err(invalid("the confirm window must hold at least one publish"));
        }
        // Unconfirmed publishes may all sit in the client library's outgoing buffer (8,192
        // frames) while the broker blocks the connection; a larger window would block the
        // publish task on that buffer instead of making callers wait for room.
        if self.confirm_window > MAX_CONFIRM_WINDOW {
            return Err(invalid(format!(
                "the confirm window is larger than {MAX_CONFIRM_WINDOW}"
            )));
        }
        if self.heartbeat.as_secs() > u64::from(u16::MAX) {
            return Err(invalid("the heartbeat is longer than 65,535 s"));
        }
        // Room for `.publish` / `.consume` within a reasonable name.
        if self.connection_name.len() > 200 {
            return Err(invalid(
                "the connection name prefix is longer than 200 bytes",
            ));
        }
        if self.max_message_size == 0 {
            return Err(invalid("the maximum message size must be positive"));
        }
        if self.connect_timeout.is_zero() {
            return Err(invalid("the connect timeout must be positive"));
        }
        if self.max_unconfirmed_bytes == 0 {
            return Err(invalid("the unconfirmed byte bound must be positive"));
        }
        if self.max_unconfirmed_bytes > MAX_UNCONFIRMED_BYTES {
            return Err(invalid(format!(
                "the unconfirmed byte bound is larger than {MAX_UNCONFIRMED_BYTES}"
            )));
        }
        if self.reconnect_min.is_zero() || self.reconnect_max < self.reconnect_min {
            return Err(invalid("the reconnect backoff needs 0 < min <= max"));
        }
        if self.auth_mechanism == AuthMechanism::External
            && self
                .tls
                .as_ref()
                .and_then(TlsOptions::get_cert_file)
                .is_none()
        {
            return Err(invalid(
                "auth_mechanism external logs in with the client certificate: it needs \
                 amqps:// with certfile and keyfile",
            ));
        }
        // Read the files now, so a missing or malformed one is reported before connecting;
        // they are read again at every connect. A certificate login sends no password.
        if self.password_file.is_some() && self.auth_mechanism == AuthMechanism::Plain {
            self.load_password()?;
        }
        if let Some(tls) = &self.tls {
            tls.check()?;
        }
        Ok(())
    }
}

impl fmt::Debug for AmqpOptions {
    /// Like the struct, with the password redacted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmqpOptions")
            .field("addresses", &self.addresses)
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .field("vhost", &self.vhost)
            .field("queue_type", &self.queue_type)
            .field("confirm_window", &self.confirm_window)
            .field("delivery_limit", &self.delivery_limit)
            .field("heartbeat", &self.heartbeat)
            .field("connection_name", &self.connection_name)
            .field("management_url", &self.management_url)
            .field("publish_deadline", &self.publish_deadline)
            .field("max_message_size", &self.max_message_size)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_unconfirmed_bytes", &self.max_unconfirmed_bytes)
            .field("reconnect_min", &self.reconnect_min)
            .field("reconnect_max", &self.reconnect_max)
            .field("tls", &self.tls)
            .field("password_file", &self.password_file)
            .field("auth_mechanism", &self.auth_mechanism)
            .finish()
    }
}

pub(super) fn invalid(context: impl Into<String>) -> TransportError {
    TransportError::new(TransportErrorKind::InvalidOptions, context)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setters_and_validation() {
        let o = AmqpOptions::default()
            .address("x", 1)
            .queue_type(QueueType::Classic)
            .confirm_window(8)
            .management_url("http://m:8080");
        assert_eq!(o.get_queue_type(), QueueType::Classic);
        assert_eq!(o.get_confirm_window(), 8);
        assert_eq!(o.get_management_url().as_deref(), Some("http://m:8080"));
        assert!(o.clone().validate().is_ok());
        assert!(o.clone().confirm_window(0).validate().is_err());
        assert!(o.clone().confirm_window(8193).validate().is_err());
        assert!(o.clone().addresses([]).validate().is_err());
        assert!(o.clone().max_message_size(0).validate().is_err());
        assert!(o.clone().max_unconfirmed_bytes(0).validate().is_err());
        assert!(o
            .clone()
            .max_unconfirmed_bytes(u32::MAX as usize + 1)
            .validate()
            .is_err());
        assert!(o
            .clone()
            .reconnect_backoff(Duration::ZERO, Duration::from_secs(1))
            .validate()
            .is_err());
        assert!(o
            .clone()
            .reconnect_backoff(Duration::from_secs(2), Duration::from_secs(1))
            .validate()
            .is_err());
        let o = o
            .max_unconfirmed_bytes(1024)
            .reconnect_backoff(Duration::from_millis(10), Duration::from_secs(1));
        assert!(o.validate().is_ok());
        assert_eq!(o.get_max_unconfirmed_bytes(), 1024);
        assert_eq!(
            o.get_reconnect_backoff(),
            (Duration::from_millis(10), Duration::from_secs(1))
        );
        assert_eq!("classic".parse::<QueueType>().unwrap(), QueueType::Classic);
    }
}
