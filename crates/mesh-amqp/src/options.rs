//! How to reach the broker and how the binding behaves: [`AmqpOptions`].
//!
//! Options are plain data: `Default` plus consuming setters, [`FromStr`] for `amqp://` and
//! `amqps://` URLs, and [`AmqpOptions::from_env`], which is the only place this crate reads
//! the environment.
//!
//! The password never leaves this module in text meant for people: `Debug` and `Display`
//! redact it, and no parse error quotes a part of the URL that may hold it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use mesh_core::{TransportError, TransportErrorKind};

use crate::tls::{TlsOptions, TlsVerify};

/// The environment variable [`AmqpOptions::from_env`] reads.
pub const URL_ENV: &str = "MESH_URL";

const DEFAULT_PORT: u16 = 5672;
const DEFAULT_TLS_PORT: u16 = 5671;
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
///   every (re)connect.
#[derive(Clone, PartialEq, Eq)]
pub struct AmqpOptions {
    addresses: Vec<BrokerAddress>,
    user: String,
    password: String,
    vhost: String,
    queue_type: QueueType,
    confirm_window: usize,
    delivery_limit: u32,
    heartbeat: Duration,
    connection_name: String,
    management_url: Option<String>,
    publish_deadline: Option<Duration>,
    max_message_size: usize,
    connect_timeout: Duration,
    max_unconfirmed_bytes: usize,
    reconnect_min: Duration,
    reconnect_max: Duration,
    tls: Option<TlsOptions>,
    password_file: Option<PathBuf>,
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
    /// read, is not UTF-8, or is empty.
    pub fn load_password(&self) -> Result<String, TransportError> {
        let Some(path) = &self.password_file else {
            return Ok(self.password.clone());
        };
        let text = std::fs::read_to_string(path).map_err(|e| {
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
        // Read the files now, so a missing or malformed one is reported before connecting;
        // they are read again at every connect.
        if self.password_file.is_some() {
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
            .finish()
    }
}

impl fmt::Display for AmqpOptions {
    /// The URL without the password nor the TLS parameters, for logs:
    /// `amqp://user@h1:5672,h2:5672/vhost` (`amqps://` with TLS).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls.is_some() { "amqps" } else { "amqp" };
        write!(f, "{scheme}://{}@", percent_encode(&self.user))?;
        for (i, address) in self.addresses.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{address}")?;
        }
        write!(f, "/{}", percent_encode(&self.vhost))
    }
}

impl FromStr for AmqpOptions {
    type Err = TransportError;

    /// Parses an `amqp://` or `amqps://` URL; see the [type's docs](AmqpOptions#url-syntax).
    ///
    /// No error quotes the user information or anything that may be part of a password.
    fn from_str(url: &str) -> Result<Self, Self::Err> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid("not an amqp:// URL (no `://`)"))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "amqp" => false,
            "amqps" => true,
            // Not quoted: a mistyped URL may start with anything.
            _ => return Err(invalid("the scheme is neither amqp nor amqps")),
        };
        // The authority ends at the first `/`, `?` or `#`. An `@` after that means the user
        // information holds one of them unescaped: refuse, quoting nothing, as the pieces
        // are parts of the password.
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        if !rest[..authority_end].contains('@') && rest[authority_end..].contains('@') {
            return Err(invalid(
                "the URL holds an `@` after its host part: a password holding `/`, `?` or `#` \
                 must percent-encode them (and a vhost or parameter holding `@` must write %40)",
            ));
        }
        if rest.contains('#') {
            return Err(invalid("a URL fragment (`#`) is not allowed"));
        }
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        let (authority, path) = match rest.split_once('/') {
            Some((authority, path)) => (authority, path),
            None => (rest, ""),
        };
        let mut options = AmqpOptions::default();
        let default_port = if tls { DEFAULT_TLS_PORT } else { DEFAULT_PORT };
        let mut tls_options = TlsOptions::new();
        let mut tls_parameters = false;

        let hosts = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => {
                let (user, password) = match userinfo.split_once(':') {
                    Some((user, password)) => (user, password),
                    None => (userinfo, ""),
                };
                options.user = percent_decode(user, "user")?;
                options.password = percent_decode(password, "password")?;
                hosts
            }
            None => authority,
        };
        options.addresses = hosts
            .split(',')
            .map(|host| parse_address(host, default_port))
            .collect::<Result<_, _>>()?;

        options.vhost = if path.is_empty() {
            "/".to_owned()
        } else if path.contains('/') {
            return Err(invalid(
                "the vhost contains `/`; write it percent-encoded as %2F",
            ));
        } else {
            percent_decode(path, "vhost")?
        };

        if let Some(query) = query.filter(|q| !q.is_empty()) {
            for pair in query.split('&') {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                match key {
                    "heartbeat" => {
                        let secs: u64 = value.parse().map_err(|_| {
                            invalid(format!("heartbeat `{value}` is not a number of seconds"))
                        })?;
                        options.heartbeat = Duration::from_secs(secs);
                    }
                    "connection_timeout" => {
                        let ms: u64 = value.parse().map_err(|_| {
                            invalid(format!(
                                "connection_timeout `{value}` is not a number of milliseconds"
                            ))
                        })?;
                        options.connect_timeout = Duration::from_millis(ms);
                    }
                    "cacertfile" => {
                        tls_options = tls_options.ca_file(file_parameter(key, value)?);
                        tls_parameters = true;
                    }
                    "certfile" => {
                        tls_options.set_cert_file(file_parameter(key, value)?);
                        tls_parameters = true;
                    }
                    "keyfile" => {
                        tls_options.set_key_file(file_parameter(key, value)?);
                        tls_parameters = true;
                    }
                    "verify" => {
                        let verify = match value {
                            "verify_peer" => TlsVerify::Peer,
                            "verify_none" => TlsVerify::None,
                            other => {
                                return Err(invalid(format!(
                                    "verify `{other}` is neither `verify_peer` nor `verify_none`"
                                )))
                            }
                        };
                        tls_options = tls_options.verify(verify);
                        tls_parameters = true;
                    }
                    "server_name_indication" => {
                        let name = percent_decode(value, "server_name_indication")?;
                        crate::tls::server_name(&name)?;
                        tls_options = tls_options.server_name(name);
                        tls_parameters = true;
                    }
                    other => {
                        return Err(invalid(format!(
                            "unsupported URL parameter `{other}` (supported: heartbeat, \
                             connection_timeout, cacertfile, certfile, keyfile, verify, \
                             server_name_indication)"
                        )))
                    }
                }
            }
        }
        if tls {
            options.tls = Some(tls_options);
        } else if tls_parameters {
            return Err(invalid(
                "tls parameters (cacertfile, certfile, keyfile, verify, \
                 server_name_indication) need an amqps:// URL",
            ));
        }
        options.validate()?;
        Ok(options)
    }
}

/// `url` with everything between `://` and its last `@` (the user information) replaced by
/// `<redacted>`, without parsing it: for the `Debug` of a URL kept as text, which may be
/// malformed (a password holding an unescaped `/`, `?` or `#` still ends at the last `@`).
///
/// ```
/// assert_eq!(
///     mesh_amqp::redact_url("amqps://u:pa/ss@h:5671/v"),
///     "amqps://<redacted>@h:5671/v"
/// );
/// assert_eq!(mesh_amqp::redact_url("amqp://h/v"), "amqp://h/v");
/// ```
pub fn redact_url(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    match url.rfind('@') {
        Some(at) if at >= start => format!("{}<redacted>{}", &url[..start], &url[at..]),
        _ => url.to_owned(),
    }
}

/// A file path given as a URL parameter, percent-decoded.
fn file_parameter(key: &str, value: &str) -> Result<PathBuf, TransportError> {
    let path = percent_decode(value, key)?;
    if path.is_empty() {
        return Err(invalid(format!("{key} is empty")));
    }
    Ok(PathBuf::from(path))
}

fn parse_address(text: &str, default_port: u16) -> Result<BrokerAddress, TransportError> {
    let text = text.trim();
    let (host, port) = if let Some(end) = text.find(']') {
        if !text.starts_with('[') {
            return Err(invalid(format!("address `{text}` has a stray `]`")));
        }
        let host = &text[..=end];
        match &text[end + 1..] {
            "" => (host, None),
            rest => match rest.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(invalid(format!("address `{text}` is malformed"))),
            },
        }
    } else {
        match text.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(invalid(format!("address `{text}` has no host")));
    }
    let port = match port {
        None | Some("") => default_port,
        Some(port) => port
            .parse()
            .map_err(|_| invalid(format!("port `{port}` of address `{text}` is not a port")))?,
    };
    Ok(BrokerAddress::new(percent_decode(host, "host")?, port))
}

/// Percent-decodes URL text, refusing a malformed escape (a `%` not followed by two hex
/// digits, which the decoder would pass through as it is) or a result that is not UTF-8.
fn percent_decode(text: &str, what: &str) -> Result<String, TransportError> {
    let malformed = text.match_indices('%').any(|(at, _)| {
        !text
            .as_bytes()
            .get(at + 1..at + 3)
            .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    });
    if malformed {
        return Err(invalid(format!("the {what} has a malformed %-escape")));
    }
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(std::borrow::Cow::into_owned)
        .map_err(|_| invalid(format!("the {what} is not UTF-8")))
}

/// Everything but RFC 3986's unreserved characters: what a URL's user, vhost or path
/// segment percent-encodes, so the vhost `/` is `%2F` and a pattern's `#` is `%23`.
pub(crate) const UNRESERVED_COMPLEMENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub(crate) fn percent_encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, UNRESERVED_COMPLEMENT).to_string()
}

fn invalid(context: impl Into<String>) -> TransportError {
    TransportError::new(TransportErrorKind::InvalidOptions, context)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> AmqpOptions {
        url.parse().unwrap()
    }

    fn refused(url: &str) -> String {
        let err = url.parse::<AmqpOptions>().unwrap_err();
        assert_eq!(err.kind(), &TransportErrorKind::InvalidOptions, "{url}");
        err.to_string()
    }

    #[test]
    fn parses_a_single_node_url() {
        let o = parse("amqp://mesh:s3cret@rabbit.local:5673/prod");
        assert_eq!(
            o.get_addresses(),
            &[BrokerAddress::new("rabbit.local", 5673)]
        );
        assert_eq!((o.get_user(), o.get_password()), ("mesh", "s3cret"));
        assert_eq!(o.get_vhost(), "prod");
        assert_eq!(
            o.get_management_url().as_deref(),
            Some("http://rabbit.local:15672")
        );
    }

    #[test]
    fn vhost_is_percent_decoded_and_defaults_to_slash() {
        assert_eq!(parse("amqp://h/%2F").get_vhost(), "/");
        assert_eq!(parse("amqp://h/").get_vhost(), "/");
        assert_eq!(parse("amqp://h").get_vhost(), "/");
        assert_eq!(parse("amqp://h/a%2Fb%20c").get_vhost(), "a/b c");
        assert!(refused("amqp://h/a/b").contains("%2F"));
        assert!(refused("amqp://h/%zz").contains("malformed"));
    }

    #[test]
    fn parses_cluster_addresses() {
        let o = parse("amqp://u:p@h1:5672,h2:5673,h3/v");
        assert_eq!(
            o.get_addresses(),
            &[
                BrokerAddress::new("h1", 5672),
                BrokerAddress::new("h2", 5673),
                BrokerAddress::new("h3", 5672)
            ]
        );
        let o = parse("amqp://[::1]:5673,[fe80::1]/v");
        assert_eq!(
            o.get_addresses(),
            &[
                BrokerAddress::new("[::1]", 5673),
                BrokerAddress::new("[fe80::1]", 5672)
            ]
        );
    }

    #[test]
    fn credentials_default_to_guest_and_are_decoded() {
        let o = parse("amqp://localhost");
        assert_eq!((o.get_user(), o.get_password()), ("guest", "guest"));
        let o = parse("amqp://me%40corp:p%3Ass@h/v");
        assert_eq!((o.get_user(), o.get_password()), ("me@corp", "p:ss"));
    }

    #[test]
    fn refuses_what_cannot_work() {
        assert!(refused("http://h/v").contains("scheme"));
        assert!(refused("h:5672").contains("://"));
        assert!(refused("amqp://h:99999/v").contains("port"));
        assert!(refused("amqp://u:p@/v").contains("no host"));
        assert!(refused("amqp://h,,h2/v").contains("no host"));
        assert!(refused("amqp://h/v?frame_max=1").contains("frame_max"));
        assert!(refused(&format!("amqp://h/{}", "v".repeat(256))).contains("255"));
    }

    #[test]
    fn query_parameters() {
        let o = parse("amqp://h/v?heartbeat=3&connection_timeout=1500");
        assert_eq!(o.get_heartbeat(), Duration::from_secs(3));
        assert_eq!(o.get_connect_timeout(), Duration::from_millis(1500));
    }

    #[test]
    fn debug_and_display_hide_the_password() {
        let o = parse("amqp://u:hunter2@h/v");
        assert!(!format!("{o:?}").contains("hunter2"));
        assert!(!o.to_string().contains("hunter2"));
        assert_eq!(o.to_string(), "amqp://u@h:5672/v");
    }

    /// A directory of PEM files for the TLS tests: a CA, and a client certificate and key.
    struct Files(std::path::PathBuf);

    impl Files {
        fn new(label: &str) -> Files {
            let dir = std::env::temp_dir()
                .join(format!("mesh-amqp-options-{label}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            // A self-signed certificate and its key (ECDSA P-256), generated once for these
            // tests; as a CA it only has to parse.
            std::fs::write(dir.join("ca.pem"), TEST_CERT).unwrap();
            std::fs::write(dir.join("client.pem"), TEST_CERT).unwrap();
            std::fs::write(dir.join("client.key"), TEST_KEY).unwrap();
            std::fs::write(dir.join("garbage.pem"), "not pem at all").unwrap();
            Files(dir)
        }

        fn path(&self, file: &str) -> String {
            self.0.join(file).display().to_string()
        }
    }

    impl Drop for Files {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const TEST_CERT: &str = include_str!("../tests/data/self-signed.pem");
    const TEST_KEY: &str = include_str!("../tests/data/self-signed.key");

    #[test]
    fn amqps_defaults_to_port_5671_and_verify_peer() {
        let files = Files::new("port");
        let o = parse(&format!(
            "amqps://u:p@h1,h2:7000/v?cacertfile={}",
            files.path("ca.pem")
        ));
        assert_eq!(
            o.get_addresses(),
            &[
                BrokerAddress::new("h1", 5671),
                BrokerAddress::new("h2", 7000)
            ]
        );
        let tls = o.get_tls().unwrap();
        assert_eq!(tls.get_verify(), TlsVerify::Peer);
        assert_eq!(tls.get_ca_file(), Some(Path::new(&files.path("ca.pem"))));
        assert_eq!(tls.get_server_name(), None);
        assert_eq!(o.to_string(), "amqps://u@h1:5671,h2:7000/v");
        assert_eq!(o.get_management_url().as_deref(), Some("https://h1:15671"));
        assert!(parse("amqp://h").get_tls().is_none());
    }

    #[test]
    fn parses_every_tls_parameter() {
        let files = Files::new("params");
        let o = parse(&format!(
            "amqps://h/v?cacertfile={}&certfile={}&keyfile={}&verify=verify_none&\
             server_name_indication=rabbit.internal&heartbeat=2",
            files.path("ca.pem"),
            files.path("client.pem"),
            files.path("client.key"),
        ));
        let tls = o.get_tls().unwrap();
        assert_eq!(tls.get_verify(), TlsVerify::None);
        assert_eq!(tls.get_server_name(), Some("rabbit.internal"));
        assert_eq!(
            tls.get_cert_file(),
            Some(Path::new(&files.path("client.pem")))
        );
        assert_eq!(
            tls.get_key_file(),
            Some(Path::new(&files.path("client.key")))
        );
        assert_eq!(o.get_heartbeat(), Duration::from_secs(2));
        // Percent-decoded paths.
        let encoded = files.path("ca.pem").replace('/', "%2F");
        let o = parse(&format!("amqps://h/v?cacertfile={encoded}"));
        assert_eq!(
            o.get_tls().unwrap().get_ca_file(),
            Some(Path::new(&files.path("ca.pem")))
        );
    }

    #[test]
    fn refuses_bad_tls_parameters() {
        let files = Files::new("bad");
        let ca = files.path("ca.pem");
        assert!(refused(&format!("amqps://h/v?cacertfile={ca}&verify=maybe")).contains("maybe"));
        let missing = files.path("missing.pem");
        let text = refused(&format!("amqps://h/v?cacertfile={missing}"));
        assert!(
            text.contains("cannot read the CA file") && text.contains("missing.pem"),
            "{text}"
        );
        let text = refused(&format!(
            "amqps://h/v?cacertfile={}",
            files.path("garbage.pem")
        ));
        assert!(
            text.contains("holds no certificate") && text.contains("garbage.pem"),
            "{text}"
        );
        let text = refused(&format!(
            "amqps://h/v?cacertfile={ca}&certfile={}",
            files.path("client.pem")
        ));
        assert!(text.contains("keyfile"), "{text}");
        let text = refused(&format!(
            "amqps://h/v?cacertfile={ca}&certfile={}&keyfile={}",
            files.path("client.pem"),
            files.path("garbage.pem")
        ));
        assert!(
            text.contains("no PEM private key") && text.contains("garbage.pem"),
            "{text}"
        );
        assert!(refused(&format!("amqp://h/v?cacertfile={ca}")).contains("amqps"));
        assert!(refused(&format!(
            "amqps://h/v?cacertfile={ca}&server_name_indication=a%20b"
        ))
        .contains("server name"));
        assert!(refused("amqps://h/v?cacertfile=").contains("empty"));
        // The builder checks the same at validation.
        let o = AmqpOptions::new().tls(TlsOptions::new().ca_file(&missing));
        assert_eq!(
            o.validate().unwrap_err().kind(),
            &TransportErrorKind::InvalidOptions
        );
    }

    #[test]
    fn no_error_quotes_a_password() {
        for (url, secret) in [
            ("amqp://u:s3cr/et9@h/v", ["s3cr", "et9@h"]),
            ("amqp://u:s3cr?et9@h/v", ["s3cr", "et9@h"]),
            ("amqp://u:s3cr#et9@h/v", ["s3cr", "et9@h"]),
            ("amqp://u:s3cr%zzet9@h/v", ["s3cr", "zzet9"]),
            ("htp://u:s3cret9@h/v", ["s3cr", "u:s3"]),
            ("amqp://u:s3cr/et9@h:notaport/v", ["s3cr", "et9@h"]),
        ] {
            let err = url.parse::<AmqpOptions>().unwrap_err();
            let shown = format!("{err} {err:?} {:?}", std::error::Error::source(&err));
            for s in secret {
                assert!(!shown.contains(s), "{url}: {shown}");
            }
        }
        // A password holding every reserved character works when percent-encoded.
        let o = parse("amqp://u:a%2Fb%3Fc%40d%23e%25f@h/v");
        assert_eq!(o.get_password(), "a/b?c@d#e%f");
        let shown = format!("{o} {o:?}");
        assert!(
            !shown.contains("a/b") && !shown.contains("a%2Fb"),
            "{shown}"
        );
    }

    #[test]
    fn urls_as_text_are_redacted() {
        for (url, shown) in [
            ("amqp://u:s3cret@h/v", "amqp://<redacted>@h/v"),
            ("amqp://u:s3/c?r#et@h/v", "amqp://<redacted>@h/v"),
            ("u:s3cret@h", "<redacted>@h"),
            ("amqp://h:5672/v", "amqp://h:5672/v"),
            ("", ""),
        ] {
            assert_eq!(redact_url(url), shown);
        }
    }

    #[test]
    fn the_password_file_is_read_at_every_load() {
        let files = Files::new("password");
        let path = files.0.join("password");
        std::fs::write(&path, "first\n").unwrap();
        let o = parse("amqp://u:inline@h/v").password_file(&path);
        assert!(o.validate().is_ok());
        assert_eq!(o.load_password().unwrap(), "first");
        std::fs::write(&path, "second\r\n").unwrap();
        assert_eq!(o.load_password().unwrap(), "second");
        assert!(!format!("{o:?}").contains("second"));
        std::fs::write(&path, "").unwrap();
        assert!(o.load_password().unwrap_err().to_string().contains("empty"));
        std::fs::remove_file(&path).unwrap();
        let err = o.validate().unwrap_err();
        assert!(err.to_string().contains("password file"), "{err}");
        assert_eq!(
            parse("amqp://u:inline@h").load_password().unwrap(),
            "inline"
        );
    }

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
