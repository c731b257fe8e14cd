//! Private RabbitMQ nodes for destructive tests.
//!
//! This module owns every RabbitMQ node a test starts itself: [`PrivateNode`] (start, stop,
//! crash, restart with the same data, memory alarm, forced connection closes), its
//! [`NodeOptions`], the process-wide [`shared_node`] registry, and the clean-up that keeps a
//! crashed or killed test binary from leaking running nodes.
//!
//! # Cost
//!
//! A start (or [`PrivateNode::start_again`]) takes ~10 s on this project's 2-core machines,
//! almost all of it Erlang booting RabbitMQ; a graceful [`PrivateNode::stop`] ~3 s; a
//! [`PrivateNode::kill`] well under a second. Keep node tests few and share a node between the
//! tests of one binary that do not stop, kill or alarm it ([`shared_node`]).
//!
//! # How a node runs
//!
//! Each node gets a unique name `mesh-test-<random>@localhost`, a fresh directory
//! `$TMPDIR/mesh-test-<random>` (config, data, logs, pid file), and free ports on `127.0.0.1`
//! for AMQP and Erlang distribution (and management, if enabled). It runs the installed
//! `rabbitmq-server` script with `RABBITMQ_NODENAME`, `RABBITMQ_NODE_PORT`,
//! `RABBITMQ_DIST_PORT`, `RABBITMQ_MNESIA_BASE`, `RABBITMQ_LOG_BASE`, `RABBITMQ_PID_FILE`,
//! `RABBITMQ_CONFIG_FILE`, `RABBITMQ_ADVANCED_CONFIG_FILE`, `RABBITMQ_ENABLED_PLUGINS_FILE` and
//! `RABBITMQ_CONF_ENV_FILE` (an empty file, so the machine's `/etc/rabbitmq/rabbitmq-env.conf`
//! cannot rename or re-port the node). On Debian, as root, the script runs as the `rabbitmq`
//! user with `HOME=/var/lib/rabbitmq`, exactly as Debian's `/usr/sbin` wrappers would, so the
//! node and `rabbitmqctl` share that home's Erlang cookie; the directory is `chown`ed to it.
//!
//! # Never leaking a node
//!
//! Every process of a node carries the environment variable `MESH_TESTKIT_NODE=<node name>`.
//! Killing "every process with that marker" is exact (nothing else has it) and complete: Erlang's
//! helper processes (`erl_child_setup`, `inet_gethost`) start sessions of their own, so a
//! process-group kill would miss them. `epmd`, which a first node may start and which then
//! serves every node of the machine, is spared.
//!
//! [`Drop`] kills the node and removes its directory, also when the test panics. But statics are
//! never dropped, and a test binary can die by SIGKILL or Ctrl-C, so each node also gets a
//! *watchdog*: a tiny `sh` in its own process group (so Ctrl-C does not reach it) whose stdin
//! is a pipe from the test process. The test process never writes to it; when the process ends
//! in any way, the kernel closes the pipe, `read` sees end-of-file, and the watchdog kills the
//! node's processes and removes its directory. A pipe rather than polling the parent pid: no
//! latency, no pid-reuse race, no timer. `Drop` disarms the watchdog after cleaning up itself.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use rand::Rng;

use crate::certs::CertFiles;
use crate::shared::{self, rabbitmqctl_with_timeout, random_suffix};
use crate::sys::{self, Install, NODE_MARKER};

/// How long `stop`, `kill` and `Drop` wait for processes to go and ports to close.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Polling interval of every wait in this module.
const POLL: Duration = Duration::from_millis(50);
/// Ports are drawn from here: below Linux's ephemeral range (32768-60999), so the kernel never
/// hands one to an outgoing connection, which could otherwise steal a stopped node's port
/// before [`PrivateNode::start_again`]; and away from 5672/15672/25672 in practice (those are
/// checked like any other port anyway).
const PORT_RANGE: std::ops::Range<u16> = 20000..32000;

/// Settings of a private node. `Default` is RabbitMQ's defaults, no plugins, 60 s boot timeout.
///
/// ```
/// use mesh_testkit::node::NodeOptions;
/// let opts = NodeOptions::default()
///     .heartbeat(2)
///     .consumer_timeout_ms(5_000)
///     .channel_tick_interval_ms(1_000);
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeOptions {
    heartbeat: Option<u32>,
    max_message_size: Option<u64>,
    consumer_timeout_ms: Option<u64>,
    channel_tick_interval_ms: Option<u64>,
    extra_conf: Vec<String>,
    management: bool,
    tls: Option<TlsListener>,
    boot_timeout: Duration,
}

/// A TLS listener of a private node (see [`NodeOptions::tls`]): RabbitMQ's `ssl_options`.
/// The files are copied into the node's directory when it starts, so the node's user can
/// read them and they outlive the [`TestPki`](crate::TestPki) that made them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsListener {
    /// The CA that signs the client certificates the node accepts (`ssl_options.cacertfile`).
    pub ca_file: PathBuf,
    /// The server's certificate (`ssl_options.certfile`).
    pub server_cert: PathBuf,
    /// The server's private key (`ssl_options.keyfile`).
    pub server_key: PathBuf,
    /// Refuse a client without a certificate (`ssl_options.fail_if_no_peer_cert`); either
    /// way the node asks for one and verifies what it gets (`ssl_options.verify =
    /// verify_peer`).
    pub require_client_cert: bool,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            heartbeat: None,
            max_message_size: None,
            consumer_timeout_ms: None,
            channel_tick_interval_ms: None,
            extra_conf: Vec::new(),
            management: false,
            tls: None,
            boot_timeout: Duration::from_secs(60),
        }
    }
}

impl NodeOptions {
    /// The heartbeat the server proposes, in seconds (`heartbeat` in `rabbitmq.conf`; 0
    /// disables). Clients negotiate the smaller non-zero value.
    pub fn heartbeat(mut self, secs: u32) -> Self {
        self.heartbeat = Some(secs);
        self
    }

    /// Largest message body accepted, in bytes (`max_message_size`).
    pub fn max_message_size(mut self, bytes: u64) -> Self {
        self.max_message_size = Some(bytes);
        self
    }

    /// How long a delivery may stay unacknowledged before the broker closes the channel, in
    /// milliseconds (`consumer_timeout`). The broker only checks on its channel tick, so pair
    /// a short timeout with [`NodeOptions::channel_tick_interval_ms`].
    pub fn consumer_timeout_ms(mut self, ms: u64) -> Self {
        self.consumer_timeout_ms = Some(ms);
        self
    }

    /// The channel tick, in milliseconds (`rabbit.channel_tick_interval` in
    /// `advanced.config`; RabbitMQ's default is 60000).
    pub fn channel_tick_interval_ms(mut self, ms: u64) -> Self {
        self.channel_tick_interval_ms = Some(ms);
        self
    }

    /// Appends a raw line to `rabbitmq.conf` (sysctl format), e.g.
    /// `"disk_free_limit.absolute = 1MB"`.
    pub fn extra_conf(mut self, line: impl Into<String>) -> Self {
        self.extra_conf.push(line.into());
        self
    }

    /// Enables `rabbitmq_management` on a free port (see [`PrivateNode::management_port`]).
    /// Adds a few seconds to each boot.
    pub fn management(mut self, enabled: bool) -> Self {
        self.management = enabled;
        self
    }

    /// Serves the management API over HTTPS too, on `127.0.0.1:port` (take one from
    /// [`free_port`]), with `server`'s certificate and key and `ca_file` as its CA
    /// (`management.ssl.*`); implies [`NodeOptions::management`]. The files are read where
    /// they are, so they must outlive the node.
    pub fn management_tls(self, port: u16, ca_file: &Path, server: &CertFiles) -> Self {
        self.management(true)
            .extra_conf(format!("management.ssl.port = {port}"))
            .extra_conf("management.ssl.ip = 127.0.0.1")
            .extra_conf(format!("management.ssl.cacertfile = {}", ca_file.display()))
            .extra_conf(format!(
                "management.ssl.certfile = {}",
                server.cert.display()
            ))
            .extra_conf(format!("management.ssl.keyfile = {}", server.key.display()))
    }

    /// Adds a TLS listener on a free port of its own (see [`PrivateNode::tls_port`]), beside
    /// the plain AMQP one.
    pub fn tls(mut self, listener: TlsListener) -> Self {
        self.tls = Some(listener);
        self
    }

    /// How long a boot may take before `start`/`start_again` give up (default 60 s).
    pub fn boot_timeout(mut self, timeout: Duration) -> Self {
        self.boot_timeout = timeout;
        self
    }

    /// The boot timeout set with [`NodeOptions::boot_timeout`].
    pub fn get_boot_timeout(&self) -> Duration {
        self.boot_timeout
    }

    fn rabbitmq_conf(
        &self,
        name: &str,
        port: u16,
        management_port: Option<u16>,
        tls: Option<(u16, &Path)>,
    ) -> String {
        let mut conf = format!(
            "# Written by mesh-testkit for private node {name}.\n\
             listeners.tcp.1 = 127.0.0.1:{port}\n"
        );
        if let (Some(listener), Some((tls_port, dir))) = (&self.tls, tls) {
            let d = |file: &str| dir.join(file).display().to_string();
            conf.push_str(&format!(
                "listeners.ssl.1 = 127.0.0.1:{tls_port}\n\
                 ssl_options.cacertfile = {}\n\
                 ssl_options.certfile = {}\n\
                 ssl_options.keyfile = {}\n\
                 ssl_options.verify = verify_peer\n\
                 ssl_options.fail_if_no_peer_cert = {}\n",
                d(TLS_FILES[0]),
                d(TLS_FILES[1]),
                d(TLS_FILES[2]),
                listener.require_client_cert
            ));
        }
        if let Some(v) = self.heartbeat {
            conf.push_str(&format!("heartbeat = {v}\n"));
        }
        if let Some(v) = self.max_message_size {
            conf.push_str(&format!("max_message_size = {v}\n"));
        }
        if let Some(v) = self.consumer_timeout_ms {
            conf.push_str(&format!("consumer_timeout = {v}\n"));
        }
        if let Some(p) = management_port {
            conf.push_str(&format!(
                "management.tcp.port = {p}\nmanagement.tcp.ip = 127.0.0.1\n"
            ));
        }
        for line in &self.extra_conf {
            conf.push_str(line);
            conf.push('\n');
        }
        conf
    }

    fn advanced_config(&self) -> String {
        match self.channel_tick_interval_ms {
            Some(ms) => format!("[{{rabbit, [{{channel_tick_interval, {ms}}}]}}].\n"),
            None => "[].\n".to_owned(),
        }
    }

    fn enabled_plugins(&self) -> &'static str {
        if self.management {
            "[rabbitmq_management].\n"
        } else {
            "[].\n"
        }
    }
}

/// The names of a TLS listener's files in the node's directory: CA, certificate, key.
const TLS_FILES: [&str; 3] = ["tls-ca.pem", "tls-server.pem", "tls-server.key"];

/// Ports handed out by this process, each with the locked file that reserves it from every
/// other process (see [`reserve_across_processes`]), so two nodes started at once, in this
/// test binary or in another running beside it, never pick the same one.
fn reserved_ports() -> MutexGuard<'static, HashMap<u16, File>> {
    static RESERVED: OnceLock<Mutex<HashMap<u16, File>>> = OnceLock::new();
    RESERVED
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// Reserves `port` for this process's lifetime against the other processes that draw ports
/// here (test binaries run side by side): an exclusive lock on a file named after it, in a
/// directory of the system's temporary dir, held until the process exits (the kernel lets
/// it go even on SIGKILL). `None` when another process holds it.
///
/// A port checked free is not taken until the node that gets it binds it, seconds later; the
/// lock closes that window between processes, as the map does within one.
fn reserve_across_processes(port: u16) -> anyhow::Result<Option<File>> {
    let dir = std::env::temp_dir().join("mesh-testkit-ports");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(port.to_string());
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
}

/// A port no one listens on, for a listener a test configures itself (a private node's
/// `management.ssl.port`, a server of its own): checked free on loopback and on all
/// interfaces, drawn at random from the range private nodes use and never handed out twice,
/// in this process (to the test or to a node) or in another test binary running beside it.
///
/// # Panics
///
/// When no port of the range is free.
pub fn free_port() -> u16 {
    pick_port().expect("a free port")
}

/// A port no one listens on (checked by binding it on loopback and on all interfaces), drawn
/// at random from [`PORT_RANGE`] and reserved for this process's lifetime, against the other
/// processes too.
pub(crate) fn pick_port() -> anyhow::Result<u16> {
    let mut rng = rand::thread_rng();
    let mut reserved = reserved_ports();
    for _ in 0..500 {
        let port = rng.gen_range(PORT_RANGE);
        if reserved.contains_key(&port) {
            continue;
        }
        let Some(lock) = reserve_across_processes(port)? else {
            continue;
        };
        let free = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
            && TcpListener::bind((Ipv4Addr::UNSPECIFIED, port)).is_ok();
        if free {
            reserved.insert(port, lock);
            return Ok(port);
        }
    }
    bail!("no free port found in {PORT_RANGE:?}")
}

/// Whether something accepts TCP connections on `127.0.0.1:port`.
async fn port_open(port: u16) -> bool {
    matches!(
        tokio::time::timeout(
            Duration::from_secs(1),
            tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)),
        )
        .await,
        Ok(Ok(_))
    )
}

/// The watchdog script; `$1` is `MESH_TESTKIT_NODE=<node>`, `$2` the node's directory.
///
/// It ignores the signals a terminal or a test runner sends around, waits for end-of-file (or a
/// `disarm` line) on stdin, then kills every live, non-epmd process carrying the marker until
/// none is left, and removes the directory. Zombies are skipped: where PID 1 does not reap,
/// the node's orphaned script would otherwise look alive forever.
const WATCHDOG_SCRIPT: &str = r#"
trap '' INT TERM HUP QUIT
while read -r line; do
  [ "$line" = disarm ] && exit 0
done
i=0
while [ "$i" -lt 100 ]; do
  found=
  for f in $(grep -lzxF -- "$1" /proc/[0-9]*/environ 2>/dev/null); do
    p=${f#/proc/}; p=${p%/environ}
    read -r comm < "/proc/$p/comm" 2>/dev/null || continue
    [ "$comm" = epmd ] && continue
    read -r stat < "/proc/$p/stat" 2>/dev/null || continue
    state=${stat##*) }; state=${state%% *}
    [ "$state" = Z ] && continue
    kill -9 "$p" 2>/dev/null && found=1
  done
  [ -z "$found" ] && break
  i=$((i + 1))
  sleep 0.1
done
rm -rf -- "$2"
"#;

/// The watchdog of one node: see the module docs.
#[derive(Debug)]
struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Watchdog {
    fn spawn(node: &str, dir: &Path) -> anyhow::Result<Watchdog> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("mesh-testkit-watchdog")
            .arg(format!("{NODE_MARKER}={node}"))
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("spawning the node watchdog (sh)")?;
        let stdin = child.stdin.take();
        Ok(Watchdog { child, stdin })
    }

    /// Tells the watchdog that clean-up was done, and reaps it.
    fn disarm(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"disarm\n");
        }
        wait_child(&mut self.child, Duration::from_secs(5));
    }

    /// Closes the pipe as a dying test process would, and waits for the watchdog to finish.
    #[cfg(test)]
    fn trigger(mut self) {
        drop(self.stdin.take());
        wait_child(&mut self.child, Duration::from_secs(30));
    }
}

/// Blocking wait for `child` with a limit; kills it past the limit.
fn wait_child(child: &mut Child, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A RabbitMQ node of the test's own, on its own ports and data directory.
///
/// All methods take `&self` so a node can sit in an `Arc` (see [`shared_node`]); lifecycle
/// calls (`stop`, `kill`, `start_again`) are serialised.
///
/// ```no_run
/// # async fn demo() -> anyhow::Result<()> {
/// use mesh_testkit::node::{NodeOptions, PrivateNode};
/// let node = PrivateNode::start(NodeOptions::default().heartbeat(2)).await?;
/// let url = node.url(); // amqp://guest:guest@127.0.0.1:<port>/
/// // ... connect, declare a durable queue, publish persistent messages ...
/// node.kill().await?; // crash: SIGKILL
/// node.start_again().await?; // same name, port and data
/// # let _ = url;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct PrivateNode {
    name: String,
    port: u16,
    dist_port: u16,
    management_port: Option<u16>,
    tls_port: Option<u16>,
    dir: PathBuf,
    opts: NodeOptions,
    /// Serialises start/stop/kill.
    lifecycle: tokio::sync::Mutex<()>,
    /// The running `rabbitmq-server` script (the beam process is its child).
    process: Mutex<Option<Child>>,
    watchdog: Mutex<Option<Watchdog>>,
}

impl PrivateNode {
    /// Starts a new node and waits until it accepts AMQP connections (~10 s; fails after the
    /// boot timeout, 60 s by default, with the tail of the node's log).
    pub async fn start(opts: NodeOptions) -> anyhow::Result<PrivateNode> {
        let install = Install::get();
        if !install.has("rabbitmq-server") || !install.has("rabbitmqctl") {
            bail!(
                "rabbitmq-server/rabbitmqctl not found (looked in {}): install the Debian \
                 package rabbitmq-server, or set {} to the directory holding them",
                install.program("rabbitmq-server").display(),
                crate::sys::SBIN_ENV
            );
        }
        let began = Instant::now();
        let short = format!("mesh-test-{}", random_suffix(10));
        let name = format!("{short}@localhost");
        let port = pick_port()?;
        let dist_port = pick_port()?;
        let management_port = if opts.management {
            Some(pick_port()?)
        } else {
            None
        };
        let tls_port = if opts.tls.is_some() {
            Some(pick_port()?)
        } else {
            None
        };
        let dir = std::env::temp_dir().join(&short);
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        // From here on Drop owns the clean-up, whatever fails next.
        let node = PrivateNode {
            name,
            port,
            dist_port,
            management_port,
            tls_port,
            dir,
            opts,
            lifecycle: tokio::sync::Mutex::new(()),
            process: Mutex::new(None),
            watchdog: Mutex::new(None),
        };
        *lock(&node.watchdog) = Some(Watchdog::spawn(&node.name, &node.dir)?);
        node.write_files()?;
        install
            .chown_tree(&node.dir)
            .with_context(|| format!("chown of {}", node.dir.display()))?;
        {
            let _guard = node.lifecycle.lock().await;
            node.boot().await?;
        }
        tracing::info!(node = %node.name, port, elapsed = ?began.elapsed(), "private RabbitMQ node started");
        Ok(node)
    }

    fn write_files(&self) -> anyhow::Result<()> {
        let write = |file: &str, text: &str| {
            std::fs::write(self.dir.join(file), text)
                .with_context(|| format!("writing {}", self.dir.join(file).display()))
        };
        if let Some(listener) = &self.opts.tls {
            let sources = [
                &listener.ca_file,
                &listener.server_cert,
                &listener.server_key,
            ];
            for (source, file) in sources.into_iter().zip(TLS_FILES) {
                std::fs::copy(source, self.dir.join(file))
                    .with_context(|| format!("copying {}", source.display()))?;
            }
        }
        write(
            "rabbitmq.conf",
            &self.opts.rabbitmq_conf(
                &self.name,
                self.port,
                self.management_port,
                self.tls_port.map(|p| (p, self.dir.as_path())),
            ),
        )?;
        write("advanced.config", &self.opts.advanced_config())?;
        write("enabled_plugins", self.opts.enabled_plugins())?;
        write(
            "rabbitmq-env.conf",
            "# Empty on purpose: keeps /etc/rabbitmq/rabbitmq-env.conf out of this node.\n",
        )?;
        for sub in ["mnesia", "log"] {
            std::fs::create_dir_all(self.dir.join(sub))?;
        }
        Ok(())
    }

    /// The node's Erlang name, `mesh-test-<random>@localhost`, for `rabbitmqctl -n`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The AMQP port on 127.0.0.1; stays the same across `stop`/`kill`/`start_again`.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`, e.g. to put a [`crate::relay::Relay`] in front of the node.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from((Ipv4Addr::LOCALHOST, self.port))
    }

    /// The Erlang distribution port.
    pub fn dist_port(&self) -> u16 {
        self.dist_port
    }

    /// The TLS port on 127.0.0.1, if [`NodeOptions::tls`] was set.
    pub fn tls_port(&self) -> Option<u16> {
        self.tls_port
    }

    /// The management HTTP port, if [`NodeOptions::management`] was set.
    pub fn management_port(&self) -> Option<u16> {
        self.management_port
    }

    /// `amqp://guest:guest@127.0.0.1:<port>/`: the default vhost `/` as guest (guest may log
    /// in from loopback, RabbitMQ's default). amqprs reads the lone `/` as vhost `/`; a strict
    /// RFC-style parser would want `%2F` instead.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/", self.port)
    }

    /// The node's directory (config, `mnesia/`, `log/`, pid file); removed on drop.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The node's main log file, handy when a test fails.
    pub fn log_file(&self) -> PathBuf {
        self.dir.join("log").join(format!("{}.log", self.name))
    }

    /// The options the node was started with.
    pub fn options(&self) -> &NodeOptions {
        &self.opts
    }

    fn pid_file(&self) -> PathBuf {
        self.dir.join("pid")
    }

    /// Whether the node's OS process is running (it may still be booting).
    pub fn is_running(&self) -> bool {
        match lock(&self.process).as_mut() {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Spawns `rabbitmq-server` and waits until it boots and accepts TCP; kills it on failure.
    /// Callers hold `lifecycle`.
    async fn boot(&self) -> anyhow::Result<()> {
        let began = Instant::now();
        // A stale pid file from a killed run would make `rabbitmqctl wait` watch a dead pid.
        let _ = std::fs::remove_file(self.pid_file());
        let child = self.spawn_server()?;
        *lock(&self.process) = Some(child);
        let timeout = self.opts.boot_timeout;
        let result = tokio::time::timeout(timeout, self.await_boot())
            .await
            .unwrap_or_else(|_| Err(anyhow!("boot timed out after {timeout:?}")));
        if let Err(e) = result {
            let detail = self.diagnostics();
            self.kill_now().await;
            return Err(e.context(format!(
                "private RabbitMQ node {} (port {}) did not boot\n{detail}",
                self.name, self.port
            )));
        }
        tracing::debug!(node = %self.name, elapsed = ?began.elapsed(), "node booted");
        Ok(())
    }

    fn spawn_server(&self) -> anyhow::Result<Child> {
        let d = |sub: &str| self.dir.join(sub);
        let out = File::options()
            .create(true)
            .append(true)
            .open(d("stdout.log"))?;
        let err = File::options()
            .create(true)
            .append(true)
            .open(d("stderr.log"))?;
        let mut cmd = Install::get().command("rabbitmq-server");
        // Settings of the test's environment must not leak into the node.
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("RABBITMQ_") {
                cmd.env_remove(key);
            }
        }
        cmd.env(NODE_MARKER, &self.name)
            .env("RABBITMQ_NODENAME", &self.name)
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", d("mnesia"))
            .env("RABBITMQ_LOG_BASE", d("log"))
            .env("RABBITMQ_PID_FILE", self.pid_file())
            .env("RABBITMQ_CONFIG_FILE", d("rabbitmq.conf"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", d("advanced.config"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d("enabled_plugins"))
            .env("RABBITMQ_CONF_ENV_FILE", d("rabbitmq-env.conf"))
            // Erlang distribution on loopback only (it listens on all interfaces otherwise).
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                "-kernel inet_dist_use_interface {127,0,0,1}",
            )
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Its own process group: a Ctrl-C aimed at the test runner must not reach it
            // (the watchdog decides when it dies).
            .process_group(0);
        cmd.spawn().with_context(|| {
            format!(
                "spawning {}",
                Install::get().program("rabbitmq-server").display()
            )
        })
    }

    async fn await_boot(&self) -> anyhow::Result<()> {
        let pid_file = self.pid_file();
        let pid_file = pid_file.to_string_lossy();
        // `rabbitmqctl wait` gives up after 10 s unless told otherwise, and a boot takes ~10 s.
        let secs = self.opts.boot_timeout.as_secs().max(1).to_string();
        let args = ["wait", &pid_file, "--timeout", &secs];
        let wait = rabbitmqctl_with_timeout(
            Some(&self.name),
            &args,
            self.opts.boot_timeout + Duration::from_secs(5),
        );
        // If the node dies before writing its pid file, `wait` would wait for nothing.
        let died = async {
            loop {
                if let Some(status) = self.exit_status() {
                    return anyhow!("rabbitmq-server exited during boot ({status})");
                }
                tokio::time::sleep(POLL).await;
            }
        };
        tokio::select! {
            res = wait => { res?; }
            err = died => return Err(err),
        }
        for port in std::iter::once(self.port).chain(self.tls_port) {
            while !port_open(port).await {
                if let Some(status) = self.exit_status() {
                    bail!("rabbitmq-server exited before opening its port {port} ({status})");
                }
                tokio::time::sleep(POLL).await;
            }
        }
        Ok(())
    }

    /// The exit status of the server script, if it has exited.
    fn exit_status(&self) -> Option<std::process::ExitStatus> {
        lock(&self.process)
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    fn diagnostics(&self) -> String {
        format!(
            "--- {} (last lines) ---\n{}\n--- stderr ---\n{}",
            self.log_file().display(),
            sys::tail(&self.log_file(), 25),
            sys::tail(&self.dir.join("stderr.log"), 10)
        )
    }

    /// Stops the node gracefully (`rabbitmqctl stop`, ~3 s) and waits until its processes are
    /// gone and its port is closed. Its data stays, for [`PrivateNode::start_again`].
    /// A no-op if the node is not running.
    pub async fn stop(&self) -> anyhow::Result<()> {
        let _guard = self.lifecycle.lock().await;
        if !self.is_running() {
            return Ok(());
        }
        let pid_file = self.pid_file();
        rabbitmqctl_with_timeout(
            Some(&self.name),
            &["stop", &pid_file.to_string_lossy()],
            SHUTDOWN_TIMEOUT,
        )
        .await?;
        self.await_down().await
    }

    /// Crashes the node: SIGKILL to the Erlang VM whose pid is in the pid file, as a power cut
    /// or OOM kill would. Waits until every process of the node is gone and the port is
    /// closed. Data written to disk stays, for [`PrivateNode::start_again`].
    pub async fn kill(&self) -> anyhow::Result<()> {
        let _guard = self.lifecycle.lock().await;
        if !self.is_running() {
            return Ok(());
        }
        let beam = std::fs::read_to_string(self.pid_file())
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        if let Some(pid) = beam {
            sys::sigkill(pid);
            let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
            while sys::pid_alive(pid) {
                if Instant::now() >= deadline {
                    bail!("beam pid {pid} of {} survived SIGKILL", self.name);
                }
                tokio::time::sleep(POLL).await;
            }
        }
        // The script and Erlang's helpers die on their own once the VM is gone; this makes
        // sure (and covers a node killed before it wrote its pid file).
        self.kill_now().await;
        self.await_down().await
    }

    /// SIGKILLs every process of the node and reaps the script; no waiting for the port.
    async fn kill_now(&self) {
        let name = self.name.clone();
        let left =
            tokio::task::spawn_blocking(move || sys::kill_node_processes(&name, SHUTDOWN_TIMEOUT))
                .await
                .unwrap_or_default();
        if !left.is_empty() {
            tracing::warn!(node = %self.name, ?left, "processes survived SIGKILL");
        }
        self.reap().await;
    }

    /// Waits for the server script to exit (it follows the VM) and reaps it.
    async fn reap(&self) {
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        loop {
            {
                let mut process = lock(&self.process);
                match process.as_mut().map(|c| c.try_wait()) {
                    None | Some(Ok(Some(_))) | Some(Err(_)) => {
                        *process = None;
                        return;
                    }
                    Some(Ok(None)) if Instant::now() >= deadline => {
                        if let Some(mut c) = process.take() {
                            let _ = c.kill();
                            let _ = c.wait();
                        }
                        return;
                    }
                    Some(Ok(None)) => {}
                }
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// After a stop or kill: waits until no process of the node is left and the port is closed.
    async fn await_down(&self) -> anyhow::Result<()> {
        self.reap().await;
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        loop {
            let left = sys::marked_pids(&self.name);
            let open = port_open(self.port).await;
            if left.is_empty() && !open {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!(
                    "node {} still has processes {left:?} or port {} open after {SHUTDOWN_TIMEOUT:?}",
                    self.name,
                    self.port
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Starts the node again after `stop` or `kill`: same name, ports and data directory, so
    /// durable queues and persistent messages that reached the disk are back. Fails if it is
    /// running.
    pub async fn start_again(&self) -> anyhow::Result<()> {
        let _guard = self.lifecycle.lock().await;
        if self.is_running() {
            bail!("node {} is already running", self.name);
        }
        self.boot().await
    }

    /// Runs `rabbitmqctl -n <this node> ARGS...` and returns stdout.
    pub async fn rabbitmqctl(&self, args: &[&str]) -> anyhow::Result<String> {
        shared::rabbitmqctl(Some(&self.name), args).await
    }

    /// Imports RabbitMQ definitions (users, permissions, topic permissions, …) given as JSON,
    /// with `rabbitmqctl import_definitions`: one call, where setting each permission would
    /// take one `rabbitmqctl` run (about a second) apiece. The file is written to the node's
    /// directory, readable by the node's owner only.
    pub async fn import_definitions(&self, definitions: &str) -> anyhow::Result<()> {
        let path = self
            .dir
            .join(format!("definitions-{}.json", shared::random_suffix(8)));
        {
            use std::io::Write as _;
            #[cfg(unix)]
            use std::os::unix::fs::OpenOptionsExt as _;
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create_new(true);
            #[cfg(unix)]
            options.mode(0o600);
            let mut file = options.open(&path)?;
            file.write_all(definitions.as_bytes())?;
        }
        // `rabbitmqctl` runs as the node's owner.
        Install::get().chown_tree(&path)?;
        let path_text = path.to_string_lossy().into_owned();
        let imported = self.rabbitmqctl(&["import_definitions", &path_text]).await;
        let _ = std::fs::remove_file(&path);
        imported.map(|_| ())
    }

    /// Raises (`true`) or clears (`false`) the memory alarm, by setting the high watermark to
    /// a millionth of RAM and back to RabbitMQ's default 0.4. The alarm state changes before
    /// this returns; publishing connections are then blocked (`connection.blocked`) until it is
    /// cleared.
    pub async fn set_memory_alarm(&self, on: bool) -> anyhow::Result<()> {
        let watermark = if on { "0.000001" } else { "0.4" };
        self.rabbitmqctl(&["set_vm_memory_high_watermark", watermark])
            .await
            .map(|_| ())
    }

    /// Closes this node's client connections (of every vhost) whose client-provided
    /// `connection_name` contains `name_filter` (all with `None`). Returns how many.
    pub async fn close_connections(&self, name_filter: Option<&str>) -> anyhow::Result<usize> {
        shared::close_connections(
            Some(&self.name),
            None,
            name_filter,
            "closed by mesh-testkit",
        )
        .await
    }

    /// Queues of `vhost` on this node; see [`shared::list_queues`].
    pub async fn list_queues(&self, vhost: &str) -> anyhow::Result<Vec<shared::QueueInfo>> {
        shared::list_queues(Some(&self.name), vhost).await
    }
}

impl Drop for PrivateNode {
    fn drop(&mut self) {
        let left = sys::kill_node_processes(&self.name, SHUTDOWN_TIMEOUT);
        if let Some(mut child) = lock(&self.process).take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                eprintln!("mesh-testkit: could not remove {}: {e}", self.dir.display());
            }
        }
        if left.is_empty() {
            if let Some(w) = lock(&self.watchdog).take() {
                w.disarm();
            }
        } else {
            // Leave the watchdog armed: it retries when this process exits.
            eprintln!("mesh-testkit: node {} left processes {left:?}", self.name);
        }
    }
}

/// Locks a std mutex, recovering from poisoning (a panicking test must not also break clean-up).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

type SharedCell = Arc<tokio::sync::OnceCell<Arc<PrivateNode>>>;

/// One node per `key` for the whole test binary, started by the first caller.
///
/// Each `cargo test` binary is one process whose tests run in parallel on separate runtimes;
/// starting a node per test would cost ~10 s each. Tests that only connect, declare and
/// publish can share one: call `shared_node("basic", NodeOptions::default())` from each, and
/// give every test its own queue/exchange names (or its own vhost via
/// `node.rabbitmqctl(&["add_vhost", ..])`).
///
/// Guidance: never `stop`, `kill`, alarm or close connections on a shared node unless exactly
/// one test uses that key; tests that do such things get a key of their own (or a plain
/// [`PrivateNode::start`], dropped at the end of the test). All callers of one key must pass
/// equal options, else this fails.
///
/// Statics are never dropped, so a shared node lives until the test binary exits; its watchdog
/// (see the module docs) then kills it and removes its directory.
pub async fn shared_node(key: &str, opts: NodeOptions) -> anyhow::Result<Arc<PrivateNode>> {
    static NODES: OnceLock<Mutex<HashMap<String, (NodeOptions, SharedCell)>>> = OnceLock::new();
    let cell = {
        let mut nodes = lock(NODES.get_or_init(Default::default));
        let (first_opts, cell) = nodes
            .entry(key.to_owned())
            .or_insert_with(|| (opts.clone(), Arc::default()));
        if *first_opts != opts {
            bail!("shared_node({key:?}) called with options {opts:?}, but it was first created with {first_opts:?}");
        }
        cell.clone()
    };
    cell.get_or_try_init(|| async { PrivateNode::start(opts).await.map(Arc::new) })
        .await
        .cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_tls_listener() {
        let opts = NodeOptions::default().tls(TlsListener {
            ca_file: "/x/ca.pem".into(),
            server_cert: "/x/s.pem".into(),
            server_key: "/x/s.key".into(),
            require_client_cert: true,
        });
        let conf = opts.rabbitmq_conf("n", 1, None, Some((2, Path::new("/d"))));
        for line in [
            "listeners.ssl.1 = 127.0.0.1:2",
            "ssl_options.cacertfile = /d/tls-ca.pem",
            "ssl_options.certfile = /d/tls-server.pem",
            "ssl_options.keyfile = /d/tls-server.key",
            "ssl_options.verify = verify_peer",
            "ssl_options.fail_if_no_peer_cert = true",
        ] {
            assert!(conf.lines().any(|l| l == line), "{line} in:\n{conf}");
        }
        assert!(!NodeOptions::default()
            .rabbitmq_conf("n", 1, None, None)
            .contains("ssl"));
    }

    #[test]
    fn writes_config_from_options() {
        let opts = NodeOptions::default()
            .heartbeat(2)
            .max_message_size(1024)
            .consumer_timeout_ms(5000)
            .channel_tick_interval_ms(500)
            .extra_conf("disk_free_limit.absolute = 1MB")
            .management(true);
        let conf = opts.rabbitmq_conf("n@localhost", 20001, Some(20002), None);
        for line in [
            "listeners.tcp.1 = 127.0.0.1:20001",
            "heartbeat = 2",
            "max_message_size = 1024",
            "consumer_timeout = 5000",
            "management.tcp.port = 20002",
            "disk_free_limit.absolute = 1MB",
        ] {
            assert!(
                conf.lines().any(|l| l == line),
                "missing {line:?} in\n{conf}"
            );
        }
        assert_eq!(
            opts.advanced_config(),
            "[{rabbit, [{channel_tick_interval, 500}]}].\n"
        );
        assert_eq!(opts.enabled_plugins(), "[rabbitmq_management].\n");
        let https = NodeOptions::default().management_tls(
            20003,
            Path::new("/pki/ca.pem"),
            &CertFiles {
                cert: "/pki/m.pem".into(),
                key: "/pki/m.key".into(),
            },
        );
        assert_eq!(https.enabled_plugins(), "[rabbitmq_management].\n");
        let conf = https.rabbitmq_conf("n@localhost", 20001, Some(20002), None);
        for line in [
            "management.tcp.port = 20002",
            "management.ssl.port = 20003",
            "management.ssl.ip = 127.0.0.1",
            "management.ssl.cacertfile = /pki/ca.pem",
            "management.ssl.certfile = /pki/m.pem",
            "management.ssl.keyfile = /pki/m.key",
        ] {
            assert!(
                conf.lines().any(|l| l == line),
                "missing {line:?} in\n{conf}"
            );
        }
        let plain = NodeOptions::default();
        assert_eq!(plain.advanced_config(), "[].\n");
        assert_eq!(plain.enabled_plugins(), "[].\n");
        assert!(!plain
            .rabbitmq_conf("n", 1, None, None)
            .contains("heartbeat"));
    }

    #[test]
    fn picked_ports_are_distinct_and_free() {
        let a = pick_port().unwrap();
        let b = pick_port().unwrap();
        assert_ne!(a, b);
        assert!(PORT_RANGE.contains(&a) && PORT_RANGE.contains(&b));
        TcpListener::bind((Ipv4Addr::LOCALHOST, a)).unwrap();
        // Another process's draw opens the port's file again: the lock refuses it (a second
        // open file takes flock's part of another process, even in this one).
        assert!(reserve_across_processes(a).unwrap().is_none());
        assert!(reserve_across_processes(b).unwrap().is_none());
    }

    /// The crash path without RabbitMQ: a marked process and a directory, the pipe closes as
    /// when the test process dies, and the watchdog cleans both up.
    #[test]
    fn watchdog_kills_marked_processes_and_removes_the_dir_on_eof() {
        let node = format!("watchdog-test-{}@localhost", random_suffix(8));
        let dir = std::env::temp_dir().join(format!("mesh-testkit-{}", random_suffix(8)));
        std::fs::create_dir_all(dir.join("mnesia")).unwrap();
        let watchdog = Watchdog::spawn(&node, &dir).unwrap();
        let mut victim = Command::new("sh")
            .args(["-c", "sleep 300 & sleep 300"])
            .env(NODE_MARKER, &node)
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while sys::marked_pids(&node).len() < 2 {
            assert!(Instant::now() < deadline, "victims did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        watchdog.trigger();
        victim.wait().unwrap();
        assert!(sys::marked_pids(&node).is_empty());
        assert!(!dir.exists());
    }

    #[test]
    fn a_disarmed_watchdog_leaves_everything_alone() {
        let node = format!("watchdog-test-{}@localhost", random_suffix(8));
        let dir = std::env::temp_dir().join(format!("mesh-testkit-{}", random_suffix(8)));
        std::fs::create_dir_all(&dir).unwrap();
        Watchdog::spawn(&node, &dir).unwrap().disarm();
        assert!(dir.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
