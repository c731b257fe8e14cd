//! Isolation on the shared broker, and `rabbitmqctl` helpers that work on any node.
//!
//! This module owns everything a test does on the machine's long-lived RabbitMQ (by default
//! `127.0.0.1:5672`, `guest`/`guest`): a throw-away vhost per test ([`TestVhost`]), the
//! [`rabbitmqctl`] runner, and typed views of what a vhost holds ([`list_queues`],
//! [`list_exchanges`], [`list_bindings`], [`list_connections`]) plus [`close_connections`].
//! The listing and closing helpers take `node: Option<&str>`: `None` is the shared broker,
//! `Some(name)` a [`crate::node::PrivateNode`].
//!
//! Tests must never stop, restart or alarm the shared broker; anything destructive belongs on a
//! private node.
//!
//! # Environment
//!
//! - `MESH_TEST_AMQP_URL`: where the shared broker listens, e.g.
//!   `amqp://guest:guest@127.0.0.1:5672` (scheme, credentials, host and port are used; a path
//!   is ignored). Default: `amqp://guest:guest@127.0.0.1:5672`.
//! - `MESH_TEST_RABBITMQ_NODE`: the Erlang node name of the shared broker, passed to
//!   `rabbitmqctl -n`. Default: none, i.e. `rabbitmqctl`'s own default (`rabbit@<host>`, or
//!   `NODENAME` from `/etc/rabbitmq/rabbitmq-env.conf`).
//! - `MESH_TEST_RABBITMQ_SBIN`: a directory holding `rabbitmqctl` and `rabbitmq-server`, for
//!   installs other than Debian's `/usr/lib/rabbitmq/bin`; they then run as the current user.
//! - `MESH_TEST_MANAGEMENT_URL` ([`MANAGEMENT_URL_ENV`]): the shared broker's management API,
//!   `http://host:port`. Default: `http://127.0.0.1:15672`. [`TestVhost`] makes and deletes
//!   its vhost, its permissions and its users there (one HTTP request each; `rabbitmqctl`
//!   boots an Erlang VM per command, which under load overran its 60 s limit), and falls back
//!   to `rabbitmqctl` only when nothing listens there.
//!
//! `rabbitmqctl` must share the broker's Erlang cookie. On Debian, run as root, the kit runs it
//! as the `rabbitmq` user with `HOME=/var/lib/rabbitmq` (what Debian's `/usr/sbin/rabbitmqctl`
//! wrapper does, minus its `su` and shell re-quoting), so it uses
//! `/var/lib/rabbitmq/.erlang.cookie` like the broker.

use std::collections::HashMap;
use std::io::Read;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use rand::Rng;
use serde_json::Value;

use crate::admin::{Answer, Management};
use crate::sys::Install;

/// Env var overriding the shared broker's URL (scheme, credentials, host, port).
pub const AMQP_URL_ENV: &str = "MESH_TEST_AMQP_URL";
/// Env var naming the shared broker's Erlang node for `rabbitmqctl -n`.
pub const NODE_ENV: &str = "MESH_TEST_RABBITMQ_NODE";
pub use crate::admin::MANAGEMENT_URL_ENV;

const DEFAULT_URL: &str = "amqp://guest:guest@127.0.0.1:5672";
/// Each `rabbitmqctl` boots an Erlang VM (~0.8 s here); a minute means "it hangs".
const CTL_TIMEOUT: Duration = Duration::from_secs(60);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The shared broker as named by [`AMQP_URL_ENV`] (or the default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerUrl {
    /// `amqp` or `amqps`.
    pub scheme: String,
    /// User name, as written in the URL (percent-encoded if it needs to be).
    pub user: String,
    /// Password, as written in the URL.
    pub password: String,
    /// Host name or IP address (an IPv6 address keeps its brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl BrokerUrl {
    /// Reads [`AMQP_URL_ENV`], falling back to `amqp://guest:guest@127.0.0.1:5672`.
    pub fn from_env() -> anyhow::Result<BrokerUrl> {
        match std::env::var(AMQP_URL_ENV) {
            Ok(url) if !url.trim().is_empty() => {
                BrokerUrl::parse(url.trim()).with_context(|| format!("bad {AMQP_URL_ENV}"))
            }
            _ => BrokerUrl::parse(DEFAULT_URL),
        }
    }

    /// Parses `amqp[s]://[user[:password]@]host[:port][/anything]`.
    pub fn parse(url: &str) -> anyhow::Result<BrokerUrl> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| anyhow!("`{url}` is not a URL (no `://`)"))?;
        if scheme != "amqp" && scheme != "amqps" {
            bail!("`{url}`: scheme must be amqp or amqps");
        }
        let authority = rest.split('/').next().unwrap_or_default();
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            Some(u) => match u.split_once(':') {
                Some((user, pass)) => (user.to_owned(), pass.to_owned()),
                None => (u.to_owned(), String::new()),
            },
            None => ("guest".to_owned(), "guest".to_owned()),
        };
        let default_port = if scheme == "amqps" { 5671 } else { 5672 };
        // `[::1]:5672` keeps its brackets; a bare `host:port` splits on the last colon.
        let (host, port) = if let Some(end) = hostport.find(']') {
            let host = &hostport[..=end];
            match hostport[end + 1..].strip_prefix(':') {
                Some(p) => (host, p.parse().context("bad port")?),
                None => (host, default_port),
            }
        } else {
            match hostport.rsplit_once(':') {
                Some((h, p)) => (h, p.parse().context("bad port")?),
                None => (hostport, default_port),
            }
        };
        if host.is_empty() {
            bail!("`{url}` has no host");
        }
        Ok(BrokerUrl {
            scheme: scheme.to_owned(),
            user,
            password,
            host: host.to_owned(),
            port,
        })
    }

    /// The URL of `vhost` on this broker, the vhost percent-encoded.
    pub fn with_vhost(&self, vhost: &str) -> String {
        format!(
            "{}://{}:{}@{}:{}/{}",
            self.scheme,
            self.user,
            self.password,
            self.host,
            self.port,
            percent_encode(vhost)
        )
    }

    /// Resolves the host and checks that something accepts TCP connections there, failing
    /// with a hint on how to start a broker.
    pub async fn ensure_reachable(&self) -> anyhow::Result<SocketAddr> {
        let hostport = format!("{}:{}", self.host, self.port);
        let hint = || {
            format!(
                "no RabbitMQ on {hostport}: start one with `rabbitmq-server -detached` \
                 (Debian package rabbitmq-server), or point {AMQP_URL_ENV} at one"
            )
        };
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host(&hostport)
            .await
            .with_context(hint)?
            .collect();
        for addr in &addrs {
            if let Ok(Ok(_)) =
                tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(addr)).await
            {
                return Ok(*addr);
            }
        }
        Err(anyhow!(hint()))
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters, as a vhost needs in an
/// AMQP URL's path (`/` itself must become `%2F`).
pub fn percent_encode(s: &str) -> String {
    const UNRESERVED_COMPLEMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');
    percent_encoding::utf8_percent_encode(s, UNRESERVED_COMPLEMENT).to_string()
}

/// A short random lowercase alphanumeric string for unique names.
pub(crate) fn random_suffix(len: usize) -> String {
    const CHARS: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut rng = rand::thread_rng();
    (0..len)
        .map(|_| CHARS[rng.gen_range(0..CHARS.len())] as char)
        .collect()
}

/// A vhost of its own on the shared broker, for one test.
///
/// Created as `mesh-test-<prefix>-<random>` with full permissions for the URL's user (guest by
/// default), so tests running in parallel never see each other's queues or exchanges, and a
/// crashed test leaves nothing that a later one trips over. Deleted by [`TestVhost::delete`] or,
/// failing that, on drop (a blocking `DELETE` to the management API, which also runs when the
/// test panics).
#[derive(Debug)]
pub struct TestVhost {
    name: String,
    broker: BrokerUrl,
    addr: SocketAddr,
    /// Where the vhost is made and deleted (see [`crate::admin`]).
    management: Management,
    deleted: bool,
    /// Users made for this vhost's test ([`TestVhost::own_user`]), deleted with it (users
    /// are global to a broker).
    users: Vec<String>,
}

impl TestVhost {
    /// Creates a fresh vhost on the shared broker (see the module docs for the environment).
    ///
    /// Fails with "no RabbitMQ on 127.0.0.1:5672: start one with `rabbitmq-server -detached`
    /// (Debian package rabbitmq-server)" when nothing listens there. Two requests to the
    /// management API ([`MANAGEMENT_URL_ENV`]), a few milliseconds; two `rabbitmqctl` runs
    /// (~2 s) on a broker without it.
    pub async fn create(prefix: &str) -> anyhow::Result<TestVhost> {
        let broker = BrokerUrl::from_env()?;
        let addr = broker.ensure_reachable().await?;
        let prefix: String = prefix
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let name = format!("mesh-test-{prefix}-{}", random_suffix(8));
        let management = Management::from_env(
            &percent_decode(&broker.user),
            &percent_decode(&broker.password),
        )?;
        let node = shared_node_name();
        let created = management
            .create_vhost(&name)
            .await
            .with_context(|| format!("creating vhost {name}"))?;
        if created == Answer::NoApi {
            rabbitmqctl(node.as_deref(), &["add_vhost", &name])
                .await
                .with_context(|| format!("creating vhost {name}"))?;
        }
        // From here on, Drop deletes the vhost whatever happens.
        let vhost = TestVhost {
            name,
            broker,
            addr,
            management,
            deleted: false,
            users: Vec::new(),
        };
        let user = percent_decode(&vhost.broker.user);
        let granted = vhost
            .management
            .grant_all(&vhost.name, &user)
            .await
            .with_context(|| format!("granting {user} permissions on {}", vhost.name))?;
        if granted == Answer::NoApi {
            rabbitmqctl(
                node.as_deref(),
                &[
                    "set_permissions",
                    "-p",
                    &vhost.name,
                    &user,
                    ".*",
                    ".*",
                    ".*",
                ],
            )
            .await
            .with_context(|| format!("granting {user} permissions on {}", vhost.name))?;
        }
        Ok(vhost)
    }

    /// The vhost's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `amqp://guest:guest@127.0.0.1:5672/<percent-encoded vhost>` (credentials, host and port
    /// as in `MESH_TEST_AMQP_URL`).
    pub fn url(&self) -> String {
        self.broker.with_vhost(&self.name)
    }

    /// Takes charge of a user made for this test (users are global to a broker): it is
    /// deleted with the vhost. Give such users a name starting with the vhost's, so no two
    /// tests share one.
    pub fn own_user(&mut self, name: impl Into<String>) {
        self.users.push(name.into());
    }

    /// The URL of this vhost as `user` with `password` (percent-encoded here).
    pub fn url_as(&self, user: &str, password: &str) -> String {
        let mut broker = self.broker.clone();
        broker.user = percent_encode(user);
        broker.password = percent_encode(password);
        broker.with_vhost(&self.name)
    }

    /// The broker's address as resolved and found reachable at creation, e.g. to put a
    /// [`crate::relay::Relay`] in front of it.
    pub fn broker_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL of this vhost reached through `addr` instead (typically a relay's address).
    pub fn url_via(&self, addr: SocketAddr) -> String {
        let mut broker = self.broker.clone();
        broker.host = addr.ip().to_string();
        if addr.is_ipv6() {
            broker.host = format!("[{}]", addr.ip());
        }
        broker.port = addr.port();
        broker.with_vhost(&self.name)
    }

    /// Queues of this vhost; see [`list_queues`].
    pub async fn list_queues(&self) -> anyhow::Result<Vec<QueueInfo>> {
        list_queues(shared_node_name().as_deref(), &self.name).await
    }

    /// Exchanges of this vhost; see [`list_exchanges`].
    pub async fn list_exchanges(&self) -> anyhow::Result<Vec<ExchangeInfo>> {
        list_exchanges(shared_node_name().as_deref(), &self.name).await
    }

    /// Bindings of this vhost; see [`list_bindings`].
    pub async fn list_bindings(&self) -> anyhow::Result<Vec<BindingInfo>> {
        list_bindings(shared_node_name().as_deref(), &self.name).await
    }

    /// Client connections to this vhost; see [`list_connections`].
    pub async fn list_connections(&self) -> anyhow::Result<Vec<ConnectionInfo>> {
        list_connections(shared_node_name().as_deref(), Some(&self.name)).await
    }

    /// Closes this vhost's connections whose `connection_name` contains `name_filter` (all of
    /// them with `None`); see [`close_connections`].
    pub async fn close_connections(
        &self,
        name_filter: Option<&str>,
        reason: &str,
    ) -> anyhow::Result<usize> {
        close_connections(
            shared_node_name().as_deref(),
            Some(&self.name),
            name_filter,
            reason,
        )
        .await
    }

    /// Deletes the vhost now, reporting failure (drop only logs it).
    pub async fn delete(mut self) -> anyhow::Result<()> {
        self.deleted = true;
        let node = shared_node_name();
        for user in std::mem::take(&mut self.users) {
            let deleted = self
                .management
                .delete_user(&user)
                .await
                .with_context(|| format!("deleting user {user}"))?;
            if deleted == Answer::NoApi {
                rabbitmqctl(node.as_deref(), &["delete_user", &user])
                    .await
                    .with_context(|| format!("deleting user {user}"))?;
            }
        }
        let deleted = self
            .management
            .delete_vhost(&self.name)
            .await
            .with_context(|| format!("deleting vhost {}", self.name))?;
        if deleted == Answer::NoApi {
            rabbitmqctl(node.as_deref(), &["delete_vhost", &self.name])
                .await
                .with_context(|| format!("deleting vhost {}", self.name))?;
        }
        Ok(())
    }
}

impl Drop for TestVhost {
    fn drop(&mut self) {
        let node = shared_node_name();
        for user in std::mem::take(&mut self.users) {
            let deleted = match self.management.delete_user_blocking(&user) {
                Ok(Answer::NoApi) => {
                    rabbitmqctl_blocking(node.as_deref(), &["delete_user", &user]).map(|_| ())
                }
                other => other.map(|_| ()),
            };
            if let Err(e) = deleted {
                eprintln!("mesh-testkit: could not delete user {user}: {e:#}");
            }
        }
        if self.deleted {
            return;
        }
        let deleted = match self.management.delete_vhost_blocking(&self.name) {
            Ok(Answer::NoApi) => {
                rabbitmqctl_blocking(node.as_deref(), &["delete_vhost", &self.name]).map(|_| ())
            }
            other => other.map(|_| ()),
        };
        if let Err(e) = deleted {
            tracing::warn!(vhost = %self.name, error = %e, "could not delete test vhost");
            eprintln!("mesh-testkit: could not delete vhost {}: {e:#}", self.name);
        }
    }
}

/// The shared broker's node name from [`NODE_ENV`], if set.
fn shared_node_name() -> Option<String> {
    std::env::var(NODE_ENV)
        .ok()
        .filter(|s| !s.trim().is_empty())
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            if let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn ctl_command(tool: &str, node: Option<&str>, args: &[&str]) -> Command {
    let mut cmd = Install::get().command(tool);
    if let Some(node) = node {
        cmd.arg("-n").arg(node);
    }
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn describe(tool: &str, node: Option<&str>, args: &[&str]) -> String {
    match node {
        Some(n) => format!("{tool} -n {n} {}", args.join(" ")),
        None => format!("{tool} {}", args.join(" ")),
    }
}

fn check_output(
    tool: &str,
    node: Option<&str>,
    args: &[&str],
    status: std::process::ExitStatus,
    stdout: &[u8],
    stderr: &[u8],
) -> anyhow::Result<String> {
    let stdout = String::from_utf8_lossy(stdout).into_owned();
    if status.success() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(stderr);
    bail!(
        "`{}` failed ({status}): {}{}",
        describe(tool, node, args),
        stderr.trim(),
        if stdout.trim().is_empty() {
            String::new()
        } else {
            format!("\nstdout: {}", stdout.trim())
        }
    )
}

/// Runs `rabbitmqctl [-n NODE] ARGS...` and returns its stdout; a failure's error holds the
/// exit status and stderr. `node: None` targets the shared broker (see [`NODE_ENV`]).
///
/// Arguments reach the tool verbatim (no shell in between). Each run boots an Erlang VM: count
/// ~0.8 s. Killed after 60 s.
pub async fn rabbitmqctl(node: Option<&str>, args: &[&str]) -> anyhow::Result<String> {
    rabbitmqctl_with_timeout(node, args, CTL_TIMEOUT).await
}

/// [`rabbitmqctl`] with a caller-chosen time limit.
pub(crate) async fn rabbitmqctl_with_timeout(
    node: Option<&str>,
    args: &[&str],
    timeout: Duration,
) -> anyhow::Result<String> {
    run_tool("rabbitmqctl", node, args, timeout).await
}

/// Runs RabbitMQ's CLI `tool` (`rabbitmqctl`, `rabbitmq-queues`) as `tool [-n NODE] ARGS...`
/// and returns its stdout; killed after `timeout`. A failure's error holds the exit status
/// and stderr.
pub(crate) async fn run_tool(
    tool: &str,
    node: Option<&str>,
    args: &[&str],
    timeout: Duration,
) -> anyhow::Result<String> {
    let mut cmd = tokio::process::Command::from(ctl_command(tool, node, args));
    cmd.kill_on_drop(true);
    let output = tokio::time::timeout(timeout, cmd.output())
        .await
        .map_err(|_| {
            anyhow!(
                "`{}` timed out after {timeout:?}",
                describe(tool, node, args)
            )
        })?
        .with_context(|| format!("spawning `{}`", describe(tool, node, args)))?;
    check_output(
        tool,
        node,
        args,
        output.status,
        &output.stdout,
        &output.stderr,
    )
}

/// A blocking [`rabbitmqctl`] for `Drop` implementations, with the same 60 s limit.
pub(crate) fn rabbitmqctl_blocking(node: Option<&str>, args: &[&str]) -> anyhow::Result<String> {
    let mut child = ctl_command("rabbitmqctl", node, args)
        .spawn()
        .with_context(|| format!("spawning `{}`", describe("rabbitmqctl", node, args)))?;
    // Drain the pipes on threads so a chatty command cannot block on a full pipe while we poll.
    let drain = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let deadline = Instant::now() + CTL_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!(
                "`{}` timed out after {CTL_TIMEOUT:?}",
                describe("rabbitmqctl", node, args)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    check_output("rabbitmqctl", node, args, status, &stdout, &stderr)
}

/// Runs a `list_*` command with `--formatter json` and returns its rows.
pub(crate) async fn list_json(node: Option<&str>, args: &[&str]) -> anyhow::Result<Vec<Value>> {
    let mut full: Vec<&str> = args.to_vec();
    full.extend(["--formatter", "json", "--quiet"]);
    let out = rabbitmqctl(node, &full).await?;
    parse_rows(&out).with_context(|| format!("parsing `{}`", describe("rabbitmqctl", node, &full)))
}

/// The rows of a JSON array printed by a RabbitMQ tool, after any informational line.
pub(crate) fn parse_rows(out: &str) -> anyhow::Result<Vec<Value>> {
    // Skip any informational line before the JSON array.
    let start = out
        .find('[')
        .ok_or_else(|| anyhow!("no JSON array in output: {out}"))?;
    match serde_json::from_str(&out[start..])? {
        Value::Array(rows) => Ok(rows),
        other => bail!("expected a JSON array, got {other}"),
    }
}

pub(crate) fn str_field(row: &Value, key: &str) -> String {
    match row.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn bool_field(row: &Value, key: &str) -> bool {
    match row.get(key) {
        Some(Value::Bool(b)) => *b,
        Some(Value::String(s)) => s == "true",
        _ => false,
    }
}

pub(crate) fn u64_field(row: &Value, key: &str) -> u64 {
    match row.get(key) {
        Some(Value::Number(n)) => n.as_u64().unwrap_or(0),
        Some(Value::String(s)) => s.parse().unwrap_or(0),
        _ => 0,
    }
}

/// `rabbitmqctl` prints an empty argument table as `[]` and a non-empty one as an object (or,
/// in some versions, a list of `[key, value]` pairs): always hand back an object.
fn arguments_field(row: &Value) -> Value {
    match row.get("arguments") {
        Some(Value::Object(map)) => Value::Object(map.clone()),
        Some(Value::Array(items)) => {
            let mut map = serde_json::Map::new();
            for item in items {
                match item {
                    Value::Array(pair) if pair.len() >= 2 => {
                        let key = pair[0].as_str().map(str::to_owned);
                        if let Some(key) = key {
                            map.insert(key, pair[pair.len() - 1].clone());
                        }
                    }
                    Value::Object(o) => map.extend(o.clone()),
                    _ => {}
                }
            }
            Value::Object(map)
        }
        _ => Value::Object(serde_json::Map::new()),
    }
}

/// One queue as `rabbitmqctl list_queues` sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueInfo {
    /// Queue name.
    pub name: String,
    /// Survives a broker restart.
    pub durable: bool,
    /// Deleted when its last consumer goes.
    pub auto_delete: bool,
    /// Owned by one connection, deleted with it.
    pub exclusive: bool,
    /// `x-*` arguments as a JSON object keyed by argument name (empty object when none).
    pub arguments: Value,
    /// Messages ready plus unacknowledged (0 if the broker could not tell, e.g. a queue
    /// whose process is down).
    pub messages: u64,
    /// Consumers attached.
    pub consumers: u64,
}

/// One exchange as `rabbitmqctl list_exchanges` sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExchangeInfo {
    /// Exchange name (`""` is the default exchange).
    pub name: String,
    /// `direct`, `topic`, `fanout`, `headers`, ...
    pub kind: String,
    /// Survives a broker restart.
    pub durable: bool,
    /// Deleted when its last binding goes.
    pub auto_delete: bool,
    /// Cannot be published to directly.
    pub internal: bool,
    /// Arguments (e.g. `alternate-exchange`) as a JSON object.
    pub arguments: Value,
}

impl ExchangeInfo {
    /// Whether the broker creates this exchange in every vhost (`""` and `amq.*`).
    pub fn is_builtin(&self) -> bool {
        self.name.is_empty() || self.name.starts_with("amq.")
    }
}

/// One binding as `rabbitmqctl list_bindings` sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct BindingInfo {
    /// Source exchange (`""` for the default exchange's implicit bindings).
    pub source: String,
    /// Destination queue or exchange.
    pub destination: String,
    /// `queue` or `exchange`.
    pub destination_kind: String,
    /// Binding key.
    pub routing_key: String,
    /// Binding arguments as a JSON object.
    pub arguments: Value,
}

/// One client connection as `rabbitmqctl list_connections` sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ConnectionInfo {
    /// The connection's Erlang pid as `rabbitmqctl close_connection` wants it, e.g.
    /// `<rabbit@localhost.1796085542.2260.0>`.
    pub pid: String,
    /// The broker's name for it, `client-ip:port -> server-ip:port`.
    pub name: String,
    /// The vhost it is open on.
    pub vhost: String,
    /// The client-provided `connection_name` property, if any.
    pub connection_name: Option<String>,
    /// All client properties, as printed.
    pub client_properties: Value,
}

/// Queues of `vhost` with flags, arguments, message and consumer counts.
pub async fn list_queues(node: Option<&str>, vhost: &str) -> anyhow::Result<Vec<QueueInfo>> {
    let rows = list_json(
        node,
        &[
            "list_queues",
            "-p",
            vhost,
            "name",
            "durable",
            "auto_delete",
            "exclusive",
            "arguments",
            "messages",
            "consumers",
        ],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| QueueInfo {
            name: str_field(r, "name"),
            durable: bool_field(r, "durable"),
            auto_delete: bool_field(r, "auto_delete"),
            exclusive: bool_field(r, "exclusive"),
            arguments: arguments_field(r),
            messages: u64_field(r, "messages"),
            consumers: u64_field(r, "consumers"),
        })
        .collect())
}

/// Exchanges of `vhost` (including the built-in ones; see [`ExchangeInfo::is_builtin`]).
pub async fn list_exchanges(node: Option<&str>, vhost: &str) -> anyhow::Result<Vec<ExchangeInfo>> {
    let rows = list_json(
        node,
        &[
            "list_exchanges",
            "-p",
            vhost,
            "name",
            "type",
            "durable",
            "auto_delete",
            "internal",
            "arguments",
        ],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| ExchangeInfo {
            name: str_field(r, "name"),
            kind: str_field(r, "type"),
            durable: bool_field(r, "durable"),
            auto_delete: bool_field(r, "auto_delete"),
            internal: bool_field(r, "internal"),
            arguments: arguments_field(r),
        })
        .collect())
}

/// Bindings of `vhost` (including the default exchange's implicit ones, whose source is `""`).
pub async fn list_bindings(node: Option<&str>, vhost: &str) -> anyhow::Result<Vec<BindingInfo>> {
    let rows = list_json(
        node,
        &[
            "list_bindings",
            "-p",
            vhost,
            "source_name",
            "destination_name",
            "destination_kind",
            "routing_key",
            "arguments",
        ],
    )
    .await?;
    Ok(rows
        .iter()
        .map(|r| BindingInfo {
            source: str_field(r, "source_name"),
            destination: str_field(r, "destination_name"),
            destination_kind: str_field(r, "destination_kind"),
            routing_key: str_field(r, "routing_key"),
            arguments: arguments_field(r),
        })
        .collect())
}

/// Client connections of the node, of one vhost if `vhost` is given.
///
/// Two `rabbitmqctl` runs: the JSON formatter prints pids as `#PID<12576.2260.0>`, relative
/// to the CLI's own Erlang node and useless to `close_connection`, so the pids come from a
/// second, tab-separated listing (`<rabbit@host.1796085542.2260.0>`), matched by connection
/// name. A connection that appears in only one listing (it opened or closed in between) is
/// left out.
pub async fn list_connections(
    node: Option<&str>,
    vhost: Option<&str>,
) -> anyhow::Result<Vec<ConnectionInfo>> {
    let rows = list_json(
        node,
        &["list_connections", "name", "vhost", "client_properties"],
    )
    .await?;
    let table = rabbitmqctl(node, &["list_connections", "name", "pid", "--silent"]).await?;
    let pids: HashMap<&str, &str> = table
        .lines()
        .filter_map(|line| line.rsplit_once('\t'))
        .map(|(name, pid)| (name.trim(), pid.trim()))
        .collect();
    Ok(rows
        .iter()
        .filter_map(|r| {
            let name = str_field(r, "name");
            let pid = pids.get(name.as_str())?.to_string();
            let props = r.get("client_properties").cloned().unwrap_or(Value::Null);
            Some(ConnectionInfo {
                pid,
                name,
                vhost: str_field(r, "vhost"),
                connection_name: client_property(&props, "connection_name"),
                client_properties: props,
            })
        })
        .filter(|c| vhost.is_none_or(|v| c.vhost == v))
        .collect())
}

/// Finds a string property in `client_properties`, which `rabbitmqctl` prints either as an
/// object or as a list of `[name, type, value]` triples.
pub(crate) fn client_property(props: &Value, name: &str) -> Option<String> {
    match props {
        Value::Object(map) => map.get(name).and_then(|v| v.as_str()).map(str::to_owned),
        Value::Array(items) => items.iter().find_map(|item| match item {
            Value::Array(t) if t.first().and_then(Value::as_str) == Some(name) => {
                t.last().and_then(Value::as_str).map(str::to_owned)
            }
            _ => None,
        }),
        _ => None,
    }
}

/// Closes client connections, as a broker-side failure would: those of `vhost` (all vhosts
/// with `None`) whose client-provided `connection_name` contains `name_filter` (all with
/// `None`). Returns how many were closed; the clients get a `connection.close` with code 320
/// and `reason`.
///
/// `rabbitmqctl close_connection` wants the connection's pid, hence the listing first; each
/// close is one more `rabbitmqctl` run (~0.8 s).
pub async fn close_connections(
    node: Option<&str>,
    vhost: Option<&str>,
    name_filter: Option<&str>,
    reason: &str,
) -> anyhow::Result<usize> {
    let connections = list_connections(node, vhost).await?;
    let mut closed = 0;
    for conn in connections {
        let matches = match name_filter {
            None => true,
            Some(f) => conn
                .connection_name
                .as_deref()
                .is_some_and(|n| n.contains(f)),
        };
        if !matches {
            continue;
        }
        match rabbitmqctl(node, &["close_connection", &conn.pid, reason]).await {
            Ok(_) => closed += 1,
            // The connection may have gone on its own since the listing; that is fine.
            Err(e) => tracing::debug!(pid = %conn.pid, error = %e, "close_connection failed"),
        }
    }
    Ok(closed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let u = BrokerUrl::parse("amqp://guest:guest@127.0.0.1:5672").unwrap();
        assert_eq!(
            u,
            BrokerUrl {
                scheme: "amqp".into(),
                user: "guest".into(),
                password: "guest".into(),
                host: "127.0.0.1".into(),
                port: 5672
            }
        );
        let u = BrokerUrl::parse("amqps://me:p%40ss@[::1]/vh").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("[::1]", 5671));
        assert_eq!(percent_decode(&u.password), "p@ss");
        let u = BrokerUrl::parse("amqp://localhost:5673/").unwrap();
        assert_eq!((u.user.as_str(), u.port), ("guest", 5673));
        assert!(BrokerUrl::parse("http://x").is_err());
        assert!(BrokerUrl::parse("127.0.0.1:5672").is_err());
    }

    #[test]
    fn builds_vhost_urls() {
        let u = BrokerUrl::parse(DEFAULT_URL).unwrap();
        assert_eq!(
            u.with_vhost("mesh-test-a/b c"),
            "amqp://guest:guest@127.0.0.1:5672/mesh-test-a%2Fb%20c"
        );
        assert_eq!(u.with_vhost("/"), "amqp://guest:guest@127.0.0.1:5672/%2F");
    }

    #[test]
    fn normalises_arguments() {
        let row: Value = serde_json::json!({"arguments": []});
        assert_eq!(arguments_field(&row), serde_json::json!({}));
        let row: Value = serde_json::json!({"arguments": {"x-max-length": 3}});
        assert_eq!(
            arguments_field(&row),
            serde_json::json!({"x-max-length": 3})
        );
        let row: Value = serde_json::json!({"arguments": [["x-max-length", "long", 3]]});
        assert_eq!(
            arguments_field(&row),
            serde_json::json!({"x-max-length": 3})
        );
    }

    #[test]
    fn finds_client_properties_in_both_shapes() {
        let obj = serde_json::json!({"connection_name": "svc-a"});
        assert_eq!(
            client_property(&obj, "connection_name").as_deref(),
            Some("svc-a")
        );
        let list = serde_json::json!([
            ["product", "longstr", "x"],
            ["connection_name", "longstr", "svc-b"]
        ]);
        assert_eq!(
            client_property(&list, "connection_name").as_deref(),
            Some("svc-b")
        );
        assert_eq!(client_property(&list, "nope"), None);
    }

    #[test]
    fn parses_rows_after_a_banner() {
        let rows = parse_rows("Listing queues ...\n[\n{\"name\":\"q\"}\n]\n").unwrap();
        assert_eq!(rows.len(), 1);
        assert!(parse_rows("nothing").is_err());
    }
}
