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
//!
//! Its rooms: this file (the node and its lifecycle), `options` (its settings and the
//! configuration files they become) and `ports` (free ports, reserved across processes). What
//! any RabbitMQ server process of the kit shares (its files, environment, logs, boot wait) is
//! `crate::server`'s, the watchdog mechanism `crate::watchdog`'s.

mod options;
mod ports;

use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

pub use self::options::{NodeOptions, TlsListener};
pub use self::ports::free_port;
pub(crate) use self::ports::{pick_port, port_open};

use self::options::TLS_FILES;
use crate::admin::{Answer, Management};
use crate::registry::Registry;
use crate::server;
use crate::shared::{self, rabbitmqctl_with_timeout, random_suffix};
use crate::sys::{self, lock, Install, NODE_MARKER};
use crate::watchdog::Watchdog;

/// How long `stop`, `kill` and `Drop` wait for processes to go and ports to close. A
/// graceful `rabbitmqctl stop` takes about 3 s on a quiet machine, but one `.ci/run` saw it
/// pass 30 s with the suite and the checks beside it (the soak's node-stop, 2026-12-07):
/// 90 s is three times that.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(90);
/// Polling interval of every wait in this module.
const POLL: Duration = Duration::from_millis(50);

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

/// Spawns the watchdog of node `node` whose directory is `dir`; see the module docs.
fn spawn_watchdog(node: &str, dir: &Path) -> anyhow::Result<Watchdog> {
    let marker = format!("{NODE_MARKER}={node}");
    Watchdog::spawn(
        WATCHDOG_SCRIPT,
        "mesh-testkit-watchdog",
        &[marker.as_ref(), dir.as_os_str()],
        "node",
    )
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
        *lock(&node.watchdog) = Some(spawn_watchdog(&node.name, &node.dir)?);
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
        server::write_files(
            &self.dir,
            &self.opts.rabbitmq_conf(
                &self.name,
                self.port,
                self.management_port,
                self.tls_port.map(|p| (p, self.dir.as_path())),
            ),
            &self.opts.advanced_config(),
            &self.opts.enabled_plugins(),
        )
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
        server::log_file(&self.dir, &self.name)
    }

    /// The options the node was started with.
    pub fn options(&self) -> &NodeOptions {
        &self.opts
    }

    fn pid_file(&self) -> PathBuf {
        server::pid_file(&self.dir)
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
            let detail = server::diagnostics(&self.dir, &self.name);
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
        let (out, err) = server::output_files(&self.dir)?;
        let mut cmd = Install::get().command("rabbitmq-server");
        // Settings of the test's environment must not leak into the node.
        server::script_env(&mut cmd, &self.name, &self.dir);
        server::server_env(&mut cmd, &self.name, &self.dir);
        cmd.env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            // Erlang distribution on loopback only (it listens on all interfaces otherwise).
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                format!(
                    "{} -kernel inet_dist_use_interface {{127,0,0,1}}",
                    server::QUIET_SCHEDULERS
                ),
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
        server::await_pid_wait(wait, || self.exit_status(), POLL).await?;
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

    /// Creates vhost `name` and gives `guest` every permission on it: through the management
    /// API when the node has it ([`NodeOptions::management`]) and it answers, two HTTP requests;
    /// else two `rabbitmqctl` runs (an Erlang VM booted for each, about a second apiece on a
    /// quiet machine, up to the 60 s limit on a loaded one).
    pub async fn add_vhost(&self, name: &str) -> anyhow::Result<()> {
        if let Some(port) = self.management_port {
            let api = Management::loopback(port);
            let made = api
                .create_vhost(name)
                .await
                .with_context(|| format!("creating vhost {name} on {}", self.name))?;
            if made == Answer::Done {
                api.grant_all(name, "guest")
                    .await
                    .with_context(|| format!("granting guest permissions on {name}"))?;
                return Ok(());
            }
        }
        self.rabbitmqctl(&["add_vhost", name]).await?;
        self.rabbitmqctl(&["set_permissions", "-p", name, "guest", ".*", ".*", ".*"])
            .await?;
        Ok(())
    }

    /// Imports RabbitMQ definitions (users, permissions, topic permissions, …) given as JSON:
    /// through the management API when the node has it ([`NodeOptions::management`]) and it
    /// answers, one HTTP request; else with `rabbitmqctl import_definitions`, one call, where
    /// setting each permission would take one `rabbitmqctl` run (about a second) apiece. The
    /// file is written to the node's directory, readable by the node's owner only.
    pub async fn import_definitions(&self, definitions: &str) -> anyhow::Result<()> {
        if let Some(port) = self.management_port {
            let imported = Management::loopback(port)
                .import_definitions(definitions)
                .await
                .with_context(|| format!("importing definitions on {}", self.name))?;
            if imported == Answer::Done {
                return Ok(());
            }
        }
        server::import_definitions(&self.dir, definitions, |path| async move {
            self.rabbitmqctl(&["import_definitions", &path]).await
        })
        .await
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

/// One node per `key` for the whole test binary, started by the first caller.
///
/// Each `cargo test` binary is one process whose tests run in parallel on separate runtimes;
/// starting a node per test would cost ~10 s each. Tests that only connect, declare and
/// publish can share one: call `shared_node("basic", NodeOptions::default())` from each, and
/// give every test its own queue/exchange names (or its own vhost via
/// [`PrivateNode::add_vhost`]).
///
/// Guidance: never `stop`, `kill`, alarm or close connections on a shared node unless exactly
/// one test uses that key; tests that do such things get a key of their own (or a plain
/// [`PrivateNode::start`], dropped at the end of the test). All callers of one key must pass
/// equal options, else this fails.
///
/// Statics are never dropped, so a shared node lives until the test binary exits; its watchdog
/// (see the module docs) then kills it and removes its directory.
pub async fn shared_node(key: &str, opts: NodeOptions) -> anyhow::Result<Arc<PrivateNode>> {
    static NODES: Registry<NodeOptions, PrivateNode> = Registry::new();
    NODES
        .get_or_start("shared_node", key, opts, PrivateNode::start)
        .await
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;

    /// The crash path without RabbitMQ: a marked process and a directory, the pipe closes as
    /// when the test process dies, and the watchdog cleans both up.
    #[test]
    fn watchdog_kills_marked_processes_and_removes_the_dir_on_eof() {
        let node = format!("watchdog-test-{}@localhost", random_suffix(8));
        let dir = std::env::temp_dir().join(format!("mesh-testkit-{}", random_suffix(8)));
        std::fs::create_dir_all(dir.join("mnesia")).unwrap();
        let watchdog = spawn_watchdog(&node, &dir).unwrap();
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
        spawn_watchdog(&node, &dir).unwrap().disarm();
        assert!(dir.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
