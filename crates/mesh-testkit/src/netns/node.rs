//! One node of a [`NetnsCluster`](super::NetnsCluster) in its network namespace: its
//! settings ([`NetnsOptions`]), the commands that run in its namespace as the scripts' user,
//! its own `epmd`, its boot, and `rabbitmqctl` against it from inside the namespace.

use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};

use crate::server;
use crate::shared::random_suffix;
use crate::sys::{lock, Install};

/// The `net_ticktime` nodes get unless told otherwise, in seconds: the shortest RabbitMQ
/// allows comfortably (a partition is seen after 5–6.25 s), so that a flapping link is seen
/// and every detection costs a test seconds, not minutes.
pub const DEFAULT_NET_TICKTIME: u32 = 5;
/// The AMQP port of every node (each in its own namespace, so all use the standard one).
pub const AMQP_PORT: u16 = 5672;
/// How long one `rabbitmqctl` (or `rabbitmq-queues`) run may take.
pub(super) const CTL_TIMEOUT: Duration = Duration::from_secs(60);
/// Polling interval of the waits here that look at the network (a TCP connect).
pub(super) const FAST_POLL: Duration = Duration::from_millis(50);
/// The prefix of the CLI's own Erlang node names (the names of the network are the
/// network's, see `super::network`).
const CLI_PREFIX: &str = "mshp";

/// Settings of a [`NetnsCluster`](super::NetnsCluster).
///
/// ```
/// use mesh_testkit::netns::NetnsOptions;
/// let opts = NetnsOptions::default().net_ticktime(5).heartbeat(5);
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetnsOptions {
    net_ticktime: u32,
    heartbeat: Option<u32>,
    extra_conf: Vec<String>,
    boot_timeout: Duration,
}

impl Default for NetnsOptions {
    fn default() -> Self {
        NetnsOptions {
            net_ticktime: DEFAULT_NET_TICKTIME,
            heartbeat: None,
            extra_conf: Vec::new(),
            boot_timeout: Duration::from_secs(120),
        }
    }
}

impl NetnsOptions {
    /// The nodes' `net_ticktime` in seconds (default [`DEFAULT_NET_TICKTIME`]).
    pub fn net_ticktime(mut self, secs: u32) -> Self {
        self.net_ticktime = secs.max(1);
        self
    }

    /// The heartbeat the nodes propose to clients, in seconds.
    pub fn heartbeat(mut self, secs: u32) -> Self {
        self.heartbeat = Some(secs);
        self
    }

    /// Appends a raw line to every node's `rabbitmq.conf`.
    pub fn extra_conf(mut self, line: impl Into<String>) -> Self {
        self.extra_conf.push(line.into());
        self
    }

    /// How long each node's boot may take (default 120 s: three boot at once).
    pub fn boot_timeout(mut self, timeout: Duration) -> Self {
        self.boot_timeout = timeout;
        self
    }

    fn rabbitmq_conf(&self, client_ip: Ipv4Addr) -> String {
        let mut conf = format!(
            "# Written by mesh-testkit (netns).\n\
             listeners.tcp.1 = {client_ip}:{AMQP_PORT}\n\
             loopback_users = none\n\
             cluster_partition_handling = pause_minority\n"
        );
        if let Some(h) = self.heartbeat {
            conf.push_str(&format!("heartbeat = {h}\n"));
        }
        for line in &self.extra_conf {
            conf.push_str(line);
            conf.push('\n');
        }
        conf
    }
}

/// One node of a [`NetnsCluster`](super::NetnsCluster).
#[derive(Debug)]
pub(super) struct NsNode {
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) client_ip: Ipv4Addr,
    pub(super) inter_ip: Ipv4Addr,
    pub(super) dir: PathBuf,
    pub(super) process: Mutex<Option<Child>>,
}

impl NsNode {
    pub(super) fn log_file(&self) -> PathBuf {
        server::log_file(&self.dir, &self.name)
    }

    pub(super) fn exit_status(&self) -> Option<std::process::ExitStatus> {
        lock(&self.process)
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// Where clients in the root namespace reach the node: `<client address>:5672`.
    pub(super) fn addr(&self) -> SocketAddr {
        SocketAddr::from((self.client_ip, AMQP_PORT))
    }

    /// Whether the node accepts TCP connections on its AMQP port.
    pub(super) async fn is_listening(&self) -> bool {
        matches!(
            tokio::time::timeout(
                Duration::from_secs(1),
                tokio::net::TcpStream::connect(self.addr()),
            )
            .await,
            Ok(Ok(_))
        )
    }

    /// Writes the node's configuration files (the caller hands the tree to the scripts'
    /// user).
    pub(super) fn write_files(&self, opts: &NetnsOptions) -> anyhow::Result<()> {
        server::write_files(
            &self.dir,
            &opts.rabbitmq_conf(self.client_ip),
            "[].\n",
            "[].\n",
        )
    }

    /// A command running `program` in the node's namespace, as the scripts' user, with the
    /// node's environment.
    pub(super) fn command_for(&self, program: &Path) -> Command {
        let install = Install::get();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.namespace]);
        if let Some(run_as) = &install.run_as {
            cmd.arg("setpriv")
                .arg(format!("--reuid={}", run_as.uid))
                .arg(format!("--regid={}", run_as.gid))
                .arg("--init-groups")
                .env("HOME", &run_as.home)
                .current_dir(&run_as.home);
        }
        cmd.arg(program);
        // The machine's `/etc/rabbitmq/rabbitmq-env.conf` is for the shared broker (it may
        // bind epmd and distribution to loopback): every script here reads an empty one.
        server::script_env(&mut cmd, &self.name, &self.dir);
        cmd.env("RABBITMQ_USE_LONGNAME", "true")
            .env_remove("ERL_FLAGS")
            .env_remove("ERL_EPMD_ADDRESS")
            .env_remove("ERL_EPMD_PORT");
        cmd
    }

    /// A command running RabbitMQ's `script` in the node's namespace.
    fn command(&self, script: &str) -> Command {
        self.command_for(&Install::get().program(script))
    }

    /// Starts `epmd` in the node's namespace and waits until it accepts connections. The node
    /// would start one itself, but under load its check of `epmd` can come before the daemon
    /// listens, and the boot fails (`epmd error ... address`).
    async fn start_epmd(&self) -> anyhow::Result<()> {
        let mut cmd = tokio::process::Command::from(self.command_for("epmd".as_ref()));
        cmd.arg("-daemon")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        // The daemon forks; the command returns once it did.
        let status = tokio::time::timeout(CTL_TIMEOUT, cmd.status())
            .await
            .map_err(|_| anyhow!("`epmd -daemon` in {} timed out", self.namespace))?
            .context("spawning epmd (is Erlang installed?)")?;
        if !status.success() {
            bail!("`epmd -daemon` in {} failed ({status})", self.namespace);
        }
        let epmd = SocketAddr::from((self.client_ip, 4369));
        let deadline = Instant::now() + CTL_TIMEOUT;
        loop {
            let open = matches!(
                tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(epmd))
                    .await,
                Ok(Ok(_))
            );
            if open {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("epmd in {} does not listen", self.namespace);
            }
            tokio::time::sleep(FAST_POLL).await;
        }
    }

    /// Spawns the node and waits until it boots and listens for AMQP.
    pub(super) async fn boot(&self, opts: &NetnsOptions) -> anyhow::Result<()> {
        self.start_epmd().await?;
        let (out, err) = server::output_files(&self.dir)?;
        let ip = self.inter_ip.octets();
        let mut cmd = self.command("rabbitmq-server");
        server::server_env(&mut cmd, &self.name, &self.dir);
        // Distribution on the inter-node address only: a cut of that link is a partition.
        cmd.env(
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
            format!(
                "{} -kernel net_ticktime {} -kernel inet_dist_use_interface {{{},{},{},{}}}",
                server::QUIET_SCHEDULERS,
                opts.net_ticktime,
                ip[0],
                ip[1],
                ip[2],
                ip[3]
            ),
        )
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
        let child = cmd
            .spawn()
            .with_context(|| format!("spawning rabbitmq-server in {}", self.namespace))?;
        *lock(&self.process) = Some(child);
        let timeout = opts.boot_timeout;
        let result = tokio::time::timeout(timeout, self.await_boot(opts))
            .await
            .unwrap_or_else(|_| Err(anyhow!("boot timed out after {timeout:?}")));
        result.with_context(|| {
            format!(
                "node {} in {} did not boot\n{}",
                self.name,
                self.namespace,
                server::diagnostics(&self.dir, &self.name)
            )
        })
    }

    async fn await_boot(&self, opts: &NetnsOptions) -> anyhow::Result<()> {
        let pid_file = server::pid_file(&self.dir).to_string_lossy().into_owned();
        let secs = opts.boot_timeout.as_secs().max(1).to_string();
        let args = ["wait", pid_file.as_str(), "--timeout", secs.as_str()];
        let wait = async {
            loop {
                match self
                    .ctl(
                        "rabbitmqctl",
                        &args,
                        opts.boot_timeout + Duration::from_secs(5),
                        opts,
                    )
                    .await
                {
                    // Read while the server was still writing it: read it again (the
                    // caller bounds the boot as a whole).
                    Err(e) if format!("{e:#}").contains("garbage_in_pid_file") => {
                        tokio::time::sleep(FAST_POLL).await;
                    }
                    done => return done,
                }
            }
        };
        server::await_pid_wait(wait, || self.exit_status(), FAST_POLL).await?;
        while !self.is_listening().await {
            if let Some(status) = self.exit_status() {
                bail!("rabbitmq-server exited before listening ({status})");
            }
            tokio::time::sleep(FAST_POLL).await;
        }
        Ok(())
    }

    /// Runs RabbitMQ's CLI `script` (`rabbitmqctl`, `rabbitmq-queues`) against the node from
    /// inside its namespace, killed after `timeout`.
    pub(super) async fn ctl(
        &self,
        script: &str,
        args: &[&str],
        timeout: Duration,
        opts: &NetnsOptions,
    ) -> anyhow::Result<String> {
        let mut cmd = tokio::process::Command::from(self.command(script));
        // The CLI's own node is named after the namespace's inter-node address (by default it
        // would be `...@<hostname>`, which the other namespaces resolve to themselves: a listing
        // whose rows other nodes send to the CLI would hang), and ticks like the nodes, so a
        // node never drops a quiet CLI connection.
        cmd.env(
            "ERL_FLAGS",
            format!(
                "-name {CLI_PREFIX}cli-{}@{} -kernel net_ticktime {}",
                random_suffix(10),
                self.inter_ip,
                opts.net_ticktime
            ),
        );
        cmd.arg("-l")
            .arg("-n")
            .arg(&self.name)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let describe = || format!("{script} -n {} {}", self.name, args.join(" "));
        let output = tokio::time::timeout(timeout, cmd.output())
            .await
            .map_err(|_| anyhow!("`{}` timed out after {timeout:?}", describe()))?
            .with_context(|| format!("spawning `{}`", describe()))?;
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if !output.status.success() {
            bail!(
                "`{}` failed ({}): {} {}",
                describe(),
                output.status,
                String::from_utf8_lossy(&output.stderr).trim(),
                stdout.trim()
            );
        }
        Ok(stdout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_pause_minority_and_the_client_listener() {
        let conf = NetnsOptions::default()
            .heartbeat(5)
            .extra_conf("x = 1")
            .rabbitmq_conf(Ipv4Addr::new(10, 200, 0, 10));
        for line in [
            "listeners.tcp.1 = 10.200.0.10:5672",
            "cluster_partition_handling = pause_minority",
            "loopback_users = none",
            "heartbeat = 5",
            "x = 1",
        ] {
            assert!(conf.lines().any(|l| l == line), "{line} in\n{conf}");
        }
    }
}
