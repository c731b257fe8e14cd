//! A three-node RabbitMQ cluster whose nodes each live in a network namespace of their own,
//! so that a test can cut one node off from the others while clients still reach it: network
//! partitions.
//!
//! This module owns [`NetnsCluster`] (the namespaces, bridges and links, three nodes joined into
//! one cluster, cutting and healing a node's inter-node link, and what tests ask of the cluster
//! while it is partitioned), its [`NetnsOptions`], and the clean-up that keeps a failed or killed
//! test from leaking namespaces, links or nodes.
//!
//! # The network
//!
//! Each node `i` runs in namespace `mshp<slot>n<i>` with two interfaces (veth pairs whose other
//! ends are ports of two bridges in the root namespace):
//!
//! - `cl`, on the *client* bridge `mshp<slot>c`, subnet `10.(200+slot/250).(slot%250).0/24`:
//!   the root namespace has `.1` on the bridge, node `i` has `.(10+i)` and listens for AMQP
//!   there (port 5672, its own namespace's). Test clients in the root namespace connect to node
//!   `i` at [`NetnsCluster::addr`].
//! - `in`, on the *inter-node* bridge `mshp<slot>i`, subnet
//!   `10.(204+slot/250).(slot%250).0/24`, node `i` at `.(10+i)`; the root namespace has no
//!   address on it. Erlang distribution runs here only: the node is named
//!   `rabbit@<inter-node address>` (long names, `RABBITMQ_USE_LONGNAME`), listens for
//!   distribution on that address only, and runs its own `epmd` in its namespace.
//!
//! [`NetnsCluster::cut`] takes the root-namespace end of node `i`'s inter-node veth down:
//! node `i` then hears nothing from the others (no reset, no error: packets are dropped), while
//! its client link is untouched. [`NetnsCluster::heal`] brings it back up. No firewall is
//! needed (the machines here have neither iptables nor nftables).
//!
//! Nodes run with `cluster_partition_handling = pause_minority` and a short `net_ticktime`
//! ([`DEFAULT_NET_TICKTIME`], 5 s): a node cut off from the other two sees them down after
//! 5–6.25 s, finds itself in a minority and pauses (stops its app and its listeners: clients
//! are disconnected and refused), and resumes once it sees a majority again. RabbitMQ's default
//! 60 s would hide any partition shorter than a minute (a flapping link) and make every test
//! wait over a minute per detection. `loopback_users = none` lets `guest` log in over the client
//! bridge (these nodes are the test's own).
//!
//! # Names, slots and clean-up
//!
//! Everything a cluster creates is named after its *slot*, a number below 1000 reserved for the
//! process's lifetime by an exclusive lock on a file in `$TMPDIR/mesh-testkit-netns/` (the
//! kernel drops the lock when the process dies in any way), so test binaries running side by
//! side never collide. A slot whose subnets overlap an address or route of the machine is
//! skipped: existing interfaces are never touched. Interface names stay within the kernel's 15
//! characters.
//!
//! [`Drop`] kills every process in the three namespaces (the nodes, their `epmd`s and helpers),
//! deletes the namespaces (which deletes their veths) and the bridges, and removes the
//! directory `$TMPDIR/mshp<slot>` (config, data, logs). A watchdog (a `sh` reading a pipe from
//! the test process, as for [`crate::node`]) does the same if the process dies without
//! dropping it. And each start first removes the leftovers of any slot whose lock is free: a
//! run that could not clean up (a power cut) is cleaned up by the next.
//!
//! # Requirements
//!
//! Root (namespaces, links), `ip` (iproute2) and `setpriv` (util-linux; both on a fresh Debian),
//! and RabbitMQ's scripts as for [`crate::node`]. Only RabbitMQ 3.10.8 with Erlang 25 is tested.

use std::fs::File;
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use rand::Rng;
use serde_json::Value;

use crate::cluster::{
    ClusterConnection, MemberStatus, QuorumQueueInfo, CLUSTER_SIZE, COUNT_REFRESH,
};
use crate::shared::{client_property, percent_encode, random_suffix, str_field, u64_field};
use crate::sys::{self, Install, NODE_MARKER};

/// The `net_ticktime` nodes get unless told otherwise, in seconds: the shortest RabbitMQ
/// allows comfortably (a partition is seen after 5–6.25 s), so that a flapping link is seen
/// and every detection costs a test seconds, not minutes.
pub const DEFAULT_NET_TICKTIME: u32 = 5;
/// The AMQP port of every node (each in its own namespace, so all use the standard one).
pub const AMQP_PORT: u16 = 5672;
/// The prefix of every name this module gives a namespace, link or directory.
const PREFIX: &str = "mshp";
/// Slots are drawn below this.
const SLOTS: u16 = 1000;
/// How long one `rabbitmqctl` (or `rabbitmq-queues`) run may take.
const CTL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one `ip` run may take.
const IP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long killing a namespace's processes may take.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);
/// Polling interval of the waits here that look at the network (a TCP connect).
const FAST_POLL: Duration = Duration::from_millis(50);
/// Polling interval of the waits that run `rabbitmqctl` (~1 s each anyway).
const POLL: Duration = Duration::from_millis(250);

/// Settings of a [`NetnsCluster`].
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

/// The names and addresses of one slot.
#[derive(Debug, Clone)]
struct Layout {
    slot: u16,
}

impl Layout {
    fn base(&self) -> String {
        format!("{PREFIX}{}", self.slot)
    }
    fn namespace(&self, i: usize) -> String {
        format!("{}n{i}", self.base())
    }
    fn client_bridge(&self) -> String {
        format!("{}c", self.base())
    }
    fn inter_bridge(&self) -> String {
        format!("{}i", self.base())
    }
    fn client_veth(&self, i: usize) -> String {
        format!("{}c{i}", self.base())
    }
    fn inter_veth(&self, i: usize) -> String {
        format!("{}i{i}", self.base())
    }
    fn octets(&self) -> (u8, u8) {
        ((self.slot / 250) as u8, (self.slot % 250) as u8)
    }
    fn client_subnet(&self) -> [u8; 3] {
        let (a, b) = self.octets();
        [10, 200 + a, b]
    }
    fn inter_subnet(&self) -> [u8; 3] {
        let (a, b) = self.octets();
        [10, 204 + a, b]
    }
    fn host_client_ip(&self) -> Ipv4Addr {
        let [a, b, c] = self.client_subnet();
        Ipv4Addr::new(a, b, c, 1)
    }
    fn client_ip(&self, i: usize) -> Ipv4Addr {
        let [a, b, c] = self.client_subnet();
        Ipv4Addr::new(a, b, c, 10 + i as u8)
    }
    fn inter_ip(&self, i: usize) -> Ipv4Addr {
        let [a, b, c] = self.inter_subnet();
        Ipv4Addr::new(a, b, c, 10 + i as u8)
    }
    fn dir(&self) -> PathBuf {
        std::env::temp_dir().join(self.base())
    }
}

/// The slot in a name made by [`Layout`] (`mshp12n0` → 12), if it is one.
fn slot_of(name: &str) -> Option<u16> {
    let rest = name.strip_prefix(PREFIX)?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let tail = &rest[digits.len()..];
    let known = [
        "c", "i", "n0", "n1", "n2", "c0", "c1", "c2", "i0", "i1", "i2",
    ];
    if digits.is_empty() || !known.contains(&tail) {
        return None;
    }
    digits.parse().ok().filter(|s| *s < SLOTS)
}

/// Locks slot `slot`'s file; `None` if another open file holds it (another process, or this
/// one).
fn lock_slot(slot: u16) -> anyhow::Result<Option<File>> {
    let dir = std::env::temp_dir().join("mesh-testkit-netns");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(slot.to_string());
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

/// Runs `ip ARGS...` (blocking) and returns stdout; fails with its stderr.
fn ip(args: &[&str]) -> anyhow::Result<String> {
    let mut child = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running `ip {}` (is iproute2 installed?)", args.join(" ")))?;
    let deadline = Instant::now() + IP_TIMEOUT;
    loop {
        if child.try_wait()?.is_some() {
            break;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            bail!("`ip {}` timed out after {IP_TIMEOUT:?}", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let output = child.wait_with_output()?;
    if !output.status.success() {
        bail!(
            "`ip {}` failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The pids of the processes in namespace `ns` (empty if it does not exist).
fn namespace_pids(ns: &str) -> Vec<i32> {
    ip(&["netns", "pids", ns])
        .map(|out| {
            out.split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// SIGKILLs every process in namespace `ns` until none is left or `timeout` passes; returns
/// those left.
fn kill_namespace(ns: &str, timeout: Duration) -> Vec<i32> {
    let deadline = Instant::now() + timeout;
    loop {
        let pids: Vec<i32> = namespace_pids(ns)
            .into_iter()
            .filter(|p| sys::pid_alive(*p))
            .collect();
        if pids.is_empty() || Instant::now() >= deadline {
            return pids;
        }
        for pid in &pids {
            sys::sigkill(*pid);
        }
        // Polling interval while the kernel tears the processes down.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Removes everything of slot `layout`: processes, namespaces (and their veths), bridges,
/// directory. Missing pieces are fine. Returns what could not be removed.
fn remove_slot(layout: &Layout) -> Vec<String> {
    let mut problems = Vec::new();
    let existing = ip(&["netns", "list"]).unwrap_or_default();
    for i in 0..CLUSTER_SIZE {
        let ns = layout.namespace(i);
        if !existing
            .lines()
            .any(|l| l.split_whitespace().next() == Some(ns.as_str()))
        {
            continue;
        }
        let left = kill_namespace(&ns, SHUTDOWN_TIMEOUT);
        if !left.is_empty() {
            problems.push(format!("processes {left:?} in {ns}"));
        }
        if let Err(e) = ip(&["netns", "delete", &ns]) {
            problems.push(format!("{e:#}"));
        }
    }
    let links = ip(&["-o", "link", "show"]).unwrap_or_default();
    let mut ours: Vec<String> = vec![layout.client_bridge(), layout.inter_bridge()];
    for i in 0..CLUSTER_SIZE {
        ours.push(layout.client_veth(i));
        ours.push(layout.inter_veth(i));
    }
    for name in ours {
        if link_names(&links).any(|l| l == name) {
            if let Err(e) = ip(&["link", "delete", &name]) {
                // A veth goes with its namespace's end: gone meanwhile is fine.
                let now = ip(&["-o", "link", "show"]).unwrap_or_default();
                if link_names(&now).any(|l| l == name) {
                    problems.push(format!("{e:#}"));
                }
            }
        }
    }
    let dir = layout.dir();
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            problems.push(format!("removing {}: {e}", dir.display()));
        }
    }
    problems
}

/// The interface names in `ip -o link show` output (`3: name@peer: <...`).
fn link_names(out: &str) -> impl Iterator<Item = &str> {
    out.lines().filter_map(|l| {
        let name = l.split(':').nth(1)?.trim();
        Some(name.split('@').next().unwrap_or(name))
    })
}

/// Removes the leftovers of every slot that no live process holds (a run killed before its
/// clean-up). Best effort: failures are printed, not returned.
fn remove_stale() {
    let mut slots: Vec<u16> = Vec::new();
    let namespaces = ip(&["netns", "list"]).unwrap_or_default();
    for line in namespaces.lines() {
        if let Some(slot) = line.split_whitespace().next().and_then(slot_of) {
            slots.push(slot);
        }
    }
    let links = ip(&["-o", "link", "show"]).unwrap_or_default();
    slots.extend(link_names(&links).filter_map(slot_of));
    if let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(rest) = name.strip_prefix(PREFIX) {
                if let Ok(slot) = rest.parse::<u16>() {
                    if slot < SLOTS {
                        slots.push(slot);
                    }
                }
            }
        }
    }
    slots.sort_unstable();
    slots.dedup();
    for slot in slots {
        // Held by a live process (this one included): not stale.
        let Ok(Some(_lock)) = lock_slot(slot) else {
            continue;
        };
        let problems = remove_slot(&Layout { slot });
        if !problems.is_empty() {
            eprintln!("mesh-testkit: stale netns slot {slot} not fully removed: {problems:?}");
        }
    }
}

/// Whether the machine has an address or route in subnet `net` (`a.b.c.0/24`).
fn subnet_in_use(addrs_and_routes: &str, net: [u8; 3]) -> bool {
    let prefix = format!("{}.{}.{}.", net[0], net[1], net[2]);
    addrs_and_routes
        .split(|c: char| c.is_whitespace() || c == '/')
        .any(|word| word.starts_with(&prefix))
}

/// Reserves a free slot whose subnets the machine does not use; cleans up its leftovers first.
fn reserve_slot() -> anyhow::Result<(Layout, File)> {
    let start = rand::thread_rng().gen_range(0..SLOTS);
    for k in 0..SLOTS {
        let slot = (start + k) % SLOTS;
        let Some(lock) = lock_slot(slot)? else {
            continue;
        };
        let layout = Layout { slot };
        let problems = remove_slot(&layout);
        if !problems.is_empty() {
            continue;
        }
        let used = format!(
            "{}\n{}",
            ip(&["-4", "-o", "addr", "show"])?,
            ip(&["-4", "route", "show", "table", "all"])?
        );
        if subnet_in_use(&used, layout.client_subnet())
            || subnet_in_use(&used, layout.inter_subnet())
        {
            continue;
        }
        return Ok((layout, lock));
    }
    bail!("no free network slot (all {SLOTS} are taken or their subnets are in use)")
}

/// The watchdog script; `$1` is the slot's base name, `$2` its directory. On end-of-file (the
/// test process is gone) it kills every process in the namespaces, deletes them and the
/// bridges, and removes the directory; a `disarm` line ends it quietly.
const WATCHDOG_SCRIPT: &str = r#"
trap '' INT TERM HUP QUIT
while read -r line; do
  [ "$line" = disarm ] && exit 0
done
for i in 0 1 2; do
  ns="$1n$i"
  n=0
  while [ "$n" -lt 100 ]; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -z "$pids" ] && break
    kill -9 $pids 2>/dev/null
    n=$((n + 1))
    sleep 0.1
  done
  ip netns delete "$ns" 2>/dev/null
done
ip link delete "$1c" 2>/dev/null
ip link delete "$1i" 2>/dev/null
rm -rf -- "$2"
"#;

#[derive(Debug)]
struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Watchdog {
    fn spawn(layout: &Layout) -> anyhow::Result<Watchdog> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(WATCHDOG_SCRIPT)
            .arg("mesh-testkit-netns-watchdog")
            .arg(layout.base())
            .arg(layout.dir())
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .context("spawning the netns watchdog (sh)")?;
        let stdin = child.stdin.take();
        Ok(Watchdog { child, stdin })
    }

    fn disarm(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"disarm\n");
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One node of a [`NetnsCluster`].
#[derive(Debug)]
struct NsNode {
    namespace: String,
    name: String,
    client_ip: Ipv4Addr,
    inter_ip: Ipv4Addr,
    dir: PathBuf,
    process: Mutex<Option<Child>>,
}

impl NsNode {
    fn pid_file(&self) -> PathBuf {
        self.dir.join("pid")
    }

    fn log_file(&self) -> PathBuf {
        self.dir.join("log").join(format!("{}.log", self.name))
    }

    fn exit_status(&self) -> Option<std::process::ExitStatus> {
        lock(&self.process)
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }
}

/// Three RabbitMQ nodes, each in a network namespace of its own, joined into one cluster; see
/// the [module docs](self).
///
/// ```no_run
/// # async fn demo() -> anyhow::Result<()> {
/// use std::time::Duration;
/// use mesh_testkit::netns::{NetnsCluster, NetnsOptions};
/// let cluster = NetnsCluster::start(NetnsOptions::default()).await?; // ~30 s
/// cluster.add_vhost("orders").await?;
/// let url = cluster.url_in_order(&[0, 1, 2], "orders"); // clients reach every node
/// cluster.cut(0)?; // node 0 hears nothing from 1 and 2; clients still reach it
/// cluster.await_paused(0, Duration::from_secs(30)).await?; // pause_minority
/// cluster.heal(0)?;
/// cluster.await_whole(Duration::from_secs(120)).await?;
/// # let _ = url;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct NetnsCluster {
    layout: Layout,
    nodes: Vec<NsNode>,
    opts: NetnsOptions,
    cut: Mutex<[bool; CLUSTER_SIZE]>,
    watchdog: Mutex<Option<Watchdog>>,
    /// Held for the cluster's lifetime: the slot is ours.
    _slot: File,
}

impl NetnsCluster {
    /// Creates the network, boots the three nodes at once and joins the second and third to
    /// the first (~30 s on 2 cores). Fails (removing everything) if a step fails; when not root,
    /// or `ip` or RabbitMQ is missing, with a hint saying so.
    pub async fn start(opts: NetnsOptions) -> anyhow::Result<NetnsCluster> {
        let began = Instant::now();
        if !nix::unistd::getuid().is_root() {
            bail!("a network-namespace cluster needs root (namespaces, links)");
        }
        let install = Install::get();
        if !install.has("rabbitmq-server") || !install.has("rabbitmqctl") {
            bail!(
                "rabbitmq-server/rabbitmqctl not found (looked in {}): install the Debian \
                 package rabbitmq-server",
                install.program("rabbitmq-server").display()
            );
        }
        ip(&["-V"]).context("iproute2's `ip` is needed (Debian: apt-get install iproute2)")?;
        let (layout, slot) = tokio::task::spawn_blocking(|| {
            remove_stale();
            reserve_slot()
        })
        .await
        .context("reserving a network slot")??;
        let nodes = (0..CLUSTER_SIZE)
            .map(|i| NsNode {
                namespace: layout.namespace(i),
                name: format!("rabbit@{}", layout.inter_ip(i)),
                client_ip: layout.client_ip(i),
                inter_ip: layout.inter_ip(i),
                dir: layout.dir().join(format!("n{i}")),
                process: Mutex::new(None),
            })
            .collect();
        // From here on Drop owns the clean-up, whatever fails next.
        let cluster = NetnsCluster {
            watchdog: Mutex::new(Some(Watchdog::spawn(&layout)?)),
            layout,
            nodes,
            opts,
            cut: Mutex::new([false; CLUSTER_SIZE]),
            _slot: slot,
        };
        {
            let layout = cluster.layout.clone();
            tokio::task::spawn_blocking(move || create_network(&layout))
                .await
                .context("creating the network")??;
        }
        cluster.write_files()?;
        let (a, b, c) = tokio::join!(cluster.boot(0), cluster.boot(1), cluster.boot(2));
        a.and(b).and(c)?;
        let booted = began.elapsed();
        let seed = cluster.nodes[0].name.clone();
        for i in 1..CLUSTER_SIZE {
            cluster.rabbitmqctl(i, &["stop_app"]).await?;
            cluster
                .rabbitmqctl(i, &["join_cluster", &seed])
                .await
                .with_context(|| format!("joining {} to {seed}", cluster.nodes[i].name))?;
            cluster.rabbitmqctl(i, &["start_app"]).await?;
            cluster.rabbitmqctl(i, &["await_startup"]).await?;
        }
        cluster
            .await_whole(Duration::from_secs(60))
            .await
            .context("the cluster after the joins")?;
        tracing::info!(
            slot = cluster.layout.slot,
            ?booted,
            elapsed = ?began.elapsed(),
            "network-namespace RabbitMQ cluster formed"
        );
        Ok(cluster)
    }

    fn write_files(&self) -> anyhow::Result<()> {
        let install = Install::get();
        let base = self.layout.dir();
        std::fs::create_dir_all(&base).with_context(|| format!("creating {}", base.display()))?;
        for node in &self.nodes {
            let write = |file: &str, text: &str| {
                std::fs::write(node.dir.join(file), text)
                    .with_context(|| format!("writing {}", node.dir.join(file).display()))
            };
            for sub in ["mnesia", "log"] {
                std::fs::create_dir_all(node.dir.join(sub))?;
            }
            write("rabbitmq.conf", &self.opts.rabbitmq_conf(node.client_ip))?;
            write("advanced.config", "[].\n")?;
            write("enabled_plugins", "[].\n")?;
            write(
                "rabbitmq-env.conf",
                "# Empty on purpose: keeps /etc/rabbitmq/rabbitmq-env.conf out of this node.\n",
            )?;
        }
        install
            .chown_tree(&base)
            .with_context(|| format!("chown of {}", base.display()))
    }

    /// A command running RabbitMQ's `script` in node `i`'s namespace, as the scripts' user,
    /// with the node's environment.
    fn command(&self, i: usize, script: &str) -> Command {
        self.command_for(i, &Install::get().program(script))
    }

    /// A command running `program` in node `i`'s namespace, as the scripts' user, with the
    /// node's environment.
    fn command_for(&self, i: usize, program: &std::path::Path) -> Command {
        let node = &self.nodes[i];
        let install = Install::get();
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &node.namespace]);
        if let Some(run_as) = &install.run_as {
            cmd.arg("setpriv")
                .arg(format!("--reuid={}", run_as.uid))
                .arg(format!("--regid={}", run_as.gid))
                .arg("--init-groups")
                .env("HOME", &run_as.home)
                .current_dir(&run_as.home);
        }
        cmd.arg(program);
        for (key, _) in std::env::vars_os() {
            if key.to_string_lossy().starts_with("RABBITMQ_") {
                cmd.env_remove(key);
            }
        }
        // The machine's `/etc/rabbitmq/rabbitmq-env.conf` is for the shared broker (it may
        // bind epmd and distribution to loopback): every script here reads an empty one.
        cmd.env(NODE_MARKER, &node.name)
            .env("RABBITMQ_USE_LONGNAME", "true")
            .env("RABBITMQ_CONF_ENV_FILE", node.dir.join("rabbitmq-env.conf"))
            .env_remove("ERL_FLAGS")
            .env_remove("ERL_EPMD_ADDRESS")
            .env_remove("ERL_EPMD_PORT");
        cmd
    }

    /// Starts `epmd` in node `i`'s namespace and waits until it accepts connections. The node
    /// would start one itself, but under load its check of `epmd` can come before the daemon
    /// listens, and the boot fails (`epmd error ... address`).
    async fn start_epmd(&self, i: usize) -> anyhow::Result<()> {
        let mut cmd = tokio::process::Command::from(self.command_for(i, "epmd".as_ref()));
        cmd.arg("-daemon")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        // The daemon forks; the command returns once it did.
        let status = tokio::time::timeout(CTL_TIMEOUT, cmd.status())
            .await
            .map_err(|_| anyhow!("`epmd -daemon` in {} timed out", self.nodes[i].namespace))?
            .context("spawning epmd (is Erlang installed?)")?;
        if !status.success() {
            bail!(
                "`epmd -daemon` in {} failed ({status})",
                self.nodes[i].namespace
            );
        }
        let epmd = SocketAddr::from((self.nodes[i].client_ip, 4369));
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
                bail!("epmd in {} does not listen", self.nodes[i].namespace);
            }
            tokio::time::sleep(FAST_POLL).await;
        }
    }

    /// Spawns node `i` and waits until it boots and listens for AMQP.
    async fn boot(&self, i: usize) -> anyhow::Result<()> {
        self.start_epmd(i).await?;
        let node = &self.nodes[i];
        let d = |sub: &str| node.dir.join(sub);
        let out = File::options()
            .create(true)
            .append(true)
            .open(d("stdout.log"))?;
        let err = File::options()
            .create(true)
            .append(true)
            .open(d("stderr.log"))?;
        let ip = node.inter_ip.octets();
        let mut cmd = self.command(i, "rabbitmq-server");
        cmd.env("RABBITMQ_NODENAME", &node.name)
            .env("RABBITMQ_MNESIA_BASE", d("mnesia"))
            .env("RABBITMQ_LOG_BASE", d("log"))
            .env("RABBITMQ_PID_FILE", node.pid_file())
            .env("RABBITMQ_CONFIG_FILE", d("rabbitmq.conf"))
            .env("RABBITMQ_ADVANCED_CONFIG_FILE", d("advanced.config"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d("enabled_plugins"))
            // Distribution on the inter-node address only: a cut of that link is a partition.
            .env(
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS",
                format!(
                    "-kernel net_ticktime {} -kernel inet_dist_use_interface {{{},{},{},{}}}",
                    self.opts.net_ticktime, ip[0], ip[1], ip[2], ip[3]
                ),
            )
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = cmd
            .spawn()
            .with_context(|| format!("spawning rabbitmq-server in {}", node.namespace))?;
        *lock(&node.process) = Some(child);
        let timeout = self.opts.boot_timeout;
        let result = tokio::time::timeout(timeout, self.await_boot(i))
            .await
            .unwrap_or_else(|_| Err(anyhow!("boot timed out after {timeout:?}")));
        result.with_context(|| {
            format!(
                "node {} in {} did not boot\n--- {} (last lines) ---\n{}\n--- stderr ---\n{}",
                node.name,
                node.namespace,
                node.log_file().display(),
                sys::tail(&node.log_file(), 25),
                sys::tail(&node.dir.join("stderr.log"), 10)
            )
        })
    }

    async fn await_boot(&self, i: usize) -> anyhow::Result<()> {
        let node = &self.nodes[i];
        let pid_file = node.pid_file().to_string_lossy().into_owned();
        let secs = self.opts.boot_timeout.as_secs().max(1).to_string();
        let args = ["wait", pid_file.as_str(), "--timeout", secs.as_str()];
        let wait = async {
            loop {
                match self
                    .ctl_with_timeout(
                        i,
                        "rabbitmqctl",
                        &args,
                        self.opts.boot_timeout + Duration::from_secs(5),
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
        let died = async {
            loop {
                if let Some(status) = node.exit_status() {
                    return anyhow!("rabbitmq-server exited during boot ({status})");
                }
                tokio::time::sleep(FAST_POLL).await;
            }
        };
        tokio::select! {
            res = wait => { res?; }
            err = died => return Err(err),
        }
        while !self.is_listening(i).await {
            if let Some(status) = node.exit_status() {
                bail!("rabbitmq-server exited before listening ({status})");
            }
            tokio::time::sleep(FAST_POLL).await;
        }
        Ok(())
    }

    async fn ctl_with_timeout(
        &self,
        i: usize,
        script: &str,
        args: &[&str],
        timeout: Duration,
    ) -> anyhow::Result<String> {
        let node = &self.nodes[i];
        let mut cmd = tokio::process::Command::from(self.command(i, script));
        // The CLI's own node is named after the namespace's inter-node address (by default it
        // would be `...@<hostname>`, which the other namespaces resolve to themselves: a listing
        // whose rows other nodes send to the CLI would hang), and ticks like the nodes, so a
        // node never drops a quiet CLI connection.
        cmd.env(
            "ERL_FLAGS",
            format!(
                "-name {PREFIX}cli-{}@{} -kernel net_ticktime {}",
                random_suffix(10),
                node.inter_ip,
                self.opts.net_ticktime
            ),
        );
        cmd.arg("-l")
            .arg("-n")
            .arg(&node.name)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let describe = || format!("{script} -n {} {}", node.name, args.join(" "));
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

    /// Runs `rabbitmqctl ARGS...` against node `i`, from inside its namespace (so it works
    /// while the node is cut off). Killed after 60 s.
    pub async fn rabbitmqctl(&self, i: usize, args: &[&str]) -> anyhow::Result<String> {
        self.ctl_with_timeout(i, "rabbitmqctl", args, CTL_TIMEOUT)
            .await
    }

    /// Runs `rabbitmqctl ARGS...` against the first node that answers, nodes that are not cut
    /// off first (cluster-wide commands: vhosts, listings).
    pub async fn rabbitmqctl_any(&self, args: &[&str]) -> anyhow::Result<String> {
        let mut last = None;
        for i in self.preferred_order() {
            match self.rabbitmqctl(i, args).await {
                Ok(out) => return Ok(out),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow!("no node answered")))
    }

    /// Node indexes, those not cut off first.
    fn preferred_order(&self) -> Vec<usize> {
        let cut = *lock(&self.cut);
        let mut order: Vec<usize> = (0..CLUSTER_SIZE).filter(|&i| !cut[i]).collect();
        order.extend((0..CLUSTER_SIZE).filter(|&i| cut[i]));
        order
    }

    async fn list_json(&self, args: &[&str]) -> anyhow::Result<Vec<Value>> {
        let mut full: Vec<&str> = args.to_vec();
        full.extend(["--formatter", "json", "--quiet"]);
        let out = self.rabbitmqctl_any(&full).await?;
        parse_rows(&out)
    }

    /// Node `i`'s Erlang name, `rabbit@<its inter-node address>`.
    pub fn name(&self, i: usize) -> &str {
        &self.nodes[i].name
    }

    /// Node `i`'s namespace.
    pub fn namespace(&self, i: usize) -> &str {
        &self.nodes[i].namespace
    }

    /// Node `i`'s main log file, handy when a test fails.
    pub fn log_file(&self, i: usize) -> PathBuf {
        self.nodes[i].log_file()
    }

    /// What node `i` says about itself, for a failure report: the Erlang nodes it is connected
    /// to, whether its app runs, and the last `lines` lines of its log.
    pub async fn diagnostics(&self, i: usize, lines: usize) -> String {
        let ask = |expr: &'static str| async move {
            match self.rabbitmqctl(i, &["eval", expr]).await {
                Ok(out) => out.trim().to_owned(),
                Err(e) => format!("{e:#}"),
            }
        };
        format!(
            "node {i} ({}): nodes() = {}; rabbit running: {}\n--- {} (last lines) ---\n{}",
            self.nodes[i].name,
            ask("nodes().").await,
            ask("rabbit:is_running().").await,
            self.log_file(i).display(),
            sys::tail(&self.log_file(i), lines)
        )
    }

    /// The index of the node named `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }

    /// The index of the node whose client address is `ip`.
    pub fn index_of_client_ip(&self, ip: Ipv4Addr) -> Option<usize> {
        self.nodes.iter().position(|n| n.client_ip == ip)
    }

    /// Where clients in the root namespace reach node `i`: `<client address>:5672`.
    pub fn addr(&self, i: usize) -> SocketAddr {
        SocketAddr::from((self.nodes[i].client_ip, AMQP_PORT))
    }

    /// Every node's [`NetnsCluster::addr`], in node order.
    pub fn addrs(&self) -> Vec<SocketAddr> {
        (0..CLUSTER_SIZE).map(|i| self.addr(i)).collect()
    }

    /// The addresses of the nodes in `order`.
    pub fn addrs_in_order(&self, order: &[usize]) -> Vec<SocketAddr> {
        order.iter().map(|&i| self.addr(i)).collect()
    }

    /// `amqp://guest:guest@<a0>,<a1>,<a2>/<vhost>` with the nodes in `order`.
    pub fn url_in_order(&self, order: &[usize], vhost: &str) -> String {
        let hosts: Vec<String> = self
            .addrs_in_order(order)
            .iter()
            .map(SocketAddr::to_string)
            .collect();
        format!(
            "amqp://guest:guest@{}/{}",
            hosts.join(","),
            percent_encode(vhost)
        )
    }

    /// Cuts node `i` off from the other two (its client link stays): the root-namespace end of
    /// its inter-node veth goes down. Returns when the link is down.
    pub fn cut(&self, i: usize) -> anyhow::Result<()> {
        ip(&["link", "set", "dev", &self.layout.inter_veth(i), "down"])?;
        lock(&self.cut)[i] = true;
        Ok(())
    }

    /// Brings node `i`'s inter-node link back up.
    pub fn heal(&self, i: usize) -> anyhow::Result<()> {
        ip(&["link", "set", "dev", &self.layout.inter_veth(i), "up"])?;
        lock(&self.cut)[i] = false;
        Ok(())
    }

    /// Heals every cut link.
    pub fn heal_all(&self) -> anyhow::Result<()> {
        for i in 0..CLUSTER_SIZE {
            self.heal(i)?;
        }
        Ok(())
    }

    /// Whether node `i` is cut off now.
    pub fn is_cut(&self, i: usize) -> bool {
        lock(&self.cut)[i]
    }

    /// Whether node `i` accepts TCP connections on its AMQP port (a node paused by
    /// `pause_minority` does not).
    pub async fn is_listening(&self, i: usize) -> bool {
        matches!(
            tokio::time::timeout(
                Duration::from_secs(1),
                tokio::net::TcpStream::connect(self.addr(i)),
            )
            .await,
            Ok(Ok(_))
        )
    }

    /// Kills node `i` (every process of its namespace, its `epmd` included) and boots it
    /// again on its data, as an operator restarts a node: the way out of a node that does
    /// not resume after a partition healed (RabbitMQ 3.10.8 on Erlang 25.1 and later,
    /// rabbitmq-server#6034).
    pub async fn restart(&self, i: usize) -> anyhow::Result<()> {
        let ns = self.nodes[i].namespace.clone();
        let left =
            tokio::task::spawn_blocking(move || kill_namespace(&ns, Duration::from_secs(10)))
                .await?;
        if !left.is_empty() {
            bail!(
                "processes {left:?} of {} outlived SIGKILL",
                self.nodes[i].namespace
            );
        }
        let child = lock(&self.nodes[i].process).take();
        if let Some(mut child) = child {
            // Killed above: this only reaps it.
            let _ = child.try_wait();
        }
        self.boot(i).await
    }

    /// Whether node `i`'s server process runs (paused or not).
    pub fn is_running(&self, i: usize) -> bool {
        self.nodes[i].exit_status().is_none() && lock(&self.nodes[i].process).is_some()
    }

    /// Waits until node `i` stops listening for AMQP (it paused) while its process runs;
    /// returns when it was first seen closed.
    pub async fn await_paused(&self, i: usize, timeout: Duration) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            if !self.is_running(i) {
                bail!("node {} exited", self.nodes[i].name);
            }
            if !self.is_listening(i).await {
                return Ok(Instant::now());
            }
            if Instant::now() >= deadline {
                bail!(
                    "node {} still listens {timeout:?} later (not paused)",
                    self.nodes[i].name
                );
            }
            tokio::time::sleep(FAST_POLL).await;
        }
    }

    /// Waits until node `i` listens for AMQP again (it resumed); returns when it was first
    /// seen open.
    pub async fn await_listening(&self, i: usize, timeout: Duration) -> anyhow::Result<Instant> {
        let deadline = Instant::now() + timeout;
        loop {
            if self.is_listening(i).await {
                return Ok(Instant::now());
            }
            if !self.is_running(i) {
                bail!("node {} exited", self.nodes[i].name);
            }
            if Instant::now() >= deadline {
                bail!(
                    "node {} does not listen {timeout:?} later",
                    self.nodes[i].name
                );
            }
            tokio::time::sleep(FAST_POLL).await;
        }
    }

    /// The running nodes (indexes) and the partitions node `i` reports (`cluster_status`).
    pub async fn cluster_view(&self, i: usize) -> anyhow::Result<(Vec<usize>, Value)> {
        let out = self
            .rabbitmqctl(i, &["cluster_status", "--formatter", "json"])
            .await?;
        let start = out
            .find('{')
            .ok_or_else(|| anyhow!("no JSON object in cluster_status output: {out}"))?;
        let status: Value = serde_json::from_str(&out[start..])
            .with_context(|| format!("parsing cluster_status output: {out}"))?;
        let mut running: Vec<usize> = status
            .get("running_nodes")
            .and_then(Value::as_array)
            .map(|nodes| {
                nodes
                    .iter()
                    .filter_map(Value::as_str)
                    .filter_map(|n| self.index_of(n))
                    .collect()
            })
            .unwrap_or_default();
        running.sort_unstable();
        let partitions = status.get("partitions").cloned().unwrap_or(Value::Null);
        Ok((running, partitions))
    }

    /// Whether the cluster is whole: every node listens, sees all three running and reports
    /// no partition. `Err` says why not.
    pub async fn is_whole(&self) -> anyhow::Result<()> {
        for i in 0..CLUSTER_SIZE {
            if !self.is_listening(i).await {
                bail!("node {i} does not listen");
            }
        }
        for i in 0..CLUSTER_SIZE {
            let (running, partitions) = self.cluster_view(i).await?;
            let no_partition = match &partitions {
                Value::Object(m) => m.is_empty(),
                Value::Array(a) => a.is_empty(),
                Value::Null => true,
                _ => false,
            };
            if running.len() != CLUSTER_SIZE || !no_partition {
                bail!("node {i} sees running {running:?}, partitions {partitions}");
            }
        }
        Ok(())
    }

    /// Waits until [`NetnsCluster::is_whole`] holds.
    pub async fn await_whole(&self, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.is_whole().await {
                Ok(()) => return Ok(()),
                Err(e) if Instant::now() >= deadline => {
                    return Err(e.context(format!("the cluster was not whole within {timeout:?}")))
                }
                Err(_) => {}
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Creates vhost `name` and gives `guest` every permission on it.
    pub async fn add_vhost(&self, name: &str) -> anyhow::Result<()> {
        self.rabbitmqctl_any(&["add_vhost", name]).await?;
        self.rabbitmqctl_any(&["set_permissions", "-p", name, "guest", ".*", ".*", ".*"])
            .await?;
        Ok(())
    }

    /// Imports RabbitMQ definitions (JSON) through node 0, as
    /// [`crate::PrivateNode::import_definitions`] does.
    pub async fn import_definitions(&self, definitions: &str) -> anyhow::Result<()> {
        let path = self
            .layout
            .dir()
            .join(format!("definitions-{}.json", random_suffix(8)));
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)?;
            file.write_all(definitions.as_bytes())?;
        }
        Install::get().chown_tree(&path)?;
        let text = path.to_string_lossy().into_owned();
        let imported = self.rabbitmqctl_any(&["import_definitions", &text]).await;
        let _ = std::fs::remove_file(&path);
        imported.map(|_| ())
    }

    /// The quorum queues of `vhost` with their leader, members and online members.
    pub async fn quorum_queues(&self, vhost: &str) -> anyhow::Result<Vec<QuorumQueueInfo>> {
        let rows = self
            .list_json(&[
                "list_queues",
                "-p",
                vhost,
                "name",
                "type",
                "leader",
                "members",
                "online",
                "messages",
            ])
            .await?;
        Ok(rows
            .iter()
            .filter(|r| str_field(r, "type") == "quorum")
            .map(|r| QuorumQueueInfo {
                name: str_field(r, "name"),
                leader: self.index_of(&str_field(r, "leader")),
                members: self.indexes(r.get("members")),
                online: self.indexes(r.get("online")),
                messages: u64_field(r, "messages"),
            })
            .collect())
    }

    fn indexes(&self, names: Option<&Value>) -> Vec<usize> {
        let mut found: Vec<usize> = match names {
            Some(Value::Array(items)) => items
                .iter()
                .filter_map(Value::as_str)
                .filter_map(|n| self.index_of(n))
                .collect(),
            Some(Value::String(one)) => self.index_of(one).into_iter().collect(),
            _ => Vec::new(),
        };
        found.sort_unstable();
        found.dedup();
        found
    }

    /// `messages_unacknowledged` of queue `queue` of `vhost` (deliveries a consumer holds).
    pub async fn unacked(&self, vhost: &str, queue: &str) -> anyhow::Result<u64> {
        let rows = self
            .list_json(&[
                "list_queues",
                "-p",
                vhost,
                "name",
                "messages_unacknowledged",
            ])
            .await?;
        rows.iter()
            .find(|r| str_field(r, "name") == queue)
            .map(|r| u64_field(r, "messages_unacknowledged"))
            .ok_or_else(|| anyhow!("no queue {queue:?} in vhost {vhost:?}"))
    }

    /// The members of quorum queue `queue` with their Raft state and log indexes.
    pub async fn quorum_status(
        &self,
        vhost: &str,
        queue: &str,
    ) -> anyhow::Result<Vec<MemberStatus>> {
        let args = ["quorum_status", "-p", vhost, queue, "--formatter", "json"];
        let mut last = None;
        for i in self.preferred_order() {
            let out = match self
                .ctl_with_timeout(i, "rabbitmq-queues", &args, CTL_TIMEOUT)
                .await
            {
                Ok(out) => out,
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            };
            let rows = parse_rows(&out)?;
            return Ok(rows
                .iter()
                .filter_map(|r| {
                    Some(MemberStatus {
                        node: self.index_of(&str_field(r, "Node Name"))?,
                        raft_state: str_field(r, "Raft State"),
                        log_index: u64_field(r, "Log Index"),
                        commit_index: u64_field(r, "Commit Index"),
                    })
                })
                .collect());
        }
        Err(last.unwrap_or_else(|| anyhow!("no node answered")))
    }

    /// Waits until every quorum queue of `vhost` has a leader, every member online, and every
    /// member at the leader's commit and log index.
    pub async fn await_queues_in_sync(
        &self,
        vhost: &str,
        timeout: Duration,
    ) -> anyhow::Result<Vec<QuorumQueueInfo>> {
        let deadline = Instant::now() + timeout;
        loop {
            let why = match self.queues_in_sync(vhost).await {
                Ok((queues, None)) => return Ok(queues),
                Ok((_, Some(why))) => why,
                Err(e) => format!("{e:#}"),
            };
            if Instant::now() >= deadline {
                bail!("the quorum queues of vhost {vhost:?} were not in sync within {timeout:?}: {why}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    async fn queues_in_sync(
        &self,
        vhost: &str,
    ) -> anyhow::Result<(Vec<QuorumQueueInfo>, Option<String>)> {
        let queues = self.quorum_queues(vhost).await?;
        for q in &queues {
            if !q.is_whole() || q.online.len() != CLUSTER_SIZE {
                return Ok((queues.clone(), Some(format!("{q:?}"))));
            }
        }
        for q in &queues {
            let members = self.quorum_status(vhost, &q.name).await?;
            let leader = members.iter().find(|m| m.raft_state == "leader");
            let caught_up = leader.is_some_and(|l| {
                members.len() == q.members.len()
                    && members
                        .iter()
                        .all(|m| m.commit_index == l.commit_index && m.log_index == l.log_index)
            });
            if !caught_up {
                return Ok((queues.clone(), Some(format!("{}: {members:?}", q.name))));
            }
        }
        Ok((queues, None))
    }

    /// Waits until the queues of `vhost` hold no message, seen so for [`COUNT_REFRESH`] (a
    /// quorum queue's count is refreshed on its tick); returns how long it took.
    pub async fn await_drained(&self, vhost: &str, timeout: Duration) -> anyhow::Result<Duration> {
        let began = Instant::now();
        let deadline = began + timeout;
        let mut empty_since: Option<Instant> = None;
        loop {
            let rows = self
                .list_json(&["list_queues", "-p", vhost, "name", "messages"])
                .await;
            let empty = rows
                .as_ref()
                .is_ok_and(|rows| rows.iter().all(|r| u64_field(r, "messages") == 0));
            if empty {
                let since = *empty_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= COUNT_REFRESH {
                    return Ok(since - began);
                }
            } else {
                empty_since = None;
            }
            if Instant::now() >= deadline {
                let left: Vec<(String, u64)> = rows
                    .map(|rows| {
                        rows.iter()
                            .map(|r| (str_field(r, "name"), u64_field(r, "messages")))
                            .filter(|(_, m)| *m > 0)
                            .collect()
                    })
                    .unwrap_or_default();
                bail!(
                    "the queues of vhost {vhost:?} still hold messages after {timeout:?}: {left:?}"
                );
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Every client connection the answering node knows of, with the node it is on (found by
    /// the server address in its name).
    pub async fn connections(&self) -> anyhow::Result<Vec<ClusterConnection>> {
        let rows = self
            .list_json(&["list_connections", "name", "vhost", "client_properties"])
            .await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                let name = str_field(r, "name");
                let node = server_ip(&name).and_then(|ip| self.index_of_client_ip(ip))?;
                let props = r.get("client_properties").cloned().unwrap_or(Value::Null);
                Some(ClusterConnection {
                    connection_name: client_property(&props, "connection_name"),
                    name,
                    vhost: str_field(r, "vhost"),
                    node,
                })
            })
            .collect())
    }

    /// The node the connection whose client-provided name is `connection_name` is on, if the
    /// answering node lists it.
    pub async fn node_of_connection(&self, connection_name: &str) -> anyhow::Result<Option<usize>> {
        Ok(self
            .connections()
            .await?
            .into_iter()
            .find(|c| c.connection_name.as_deref() == Some(connection_name))
            .map(|c| c.node))
    }

    /// Kills every process in every namespace and removes the network and the directory;
    /// returns what could not be removed.
    fn remove_all(&self) -> Vec<String> {
        let problems = remove_slot(&self.layout);
        for node in &self.nodes {
            if let Some(mut child) = lock(&node.process).take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        problems
    }
}

impl Drop for NetnsCluster {
    fn drop(&mut self) {
        let problems = self.remove_all();
        if problems.is_empty() {
            if let Some(w) = lock(&self.watchdog).take() {
                w.disarm();
            }
        } else {
            // Leave the watchdog armed: it retries when this process exits.
            eprintln!(
                "mesh-testkit: netns slot {} not fully removed: {problems:?}",
                self.layout.slot
            );
        }
    }
}

/// Creates slot `layout`'s bridges, namespaces, veths and addresses.
fn create_network(layout: &Layout) -> anyhow::Result<()> {
    let host_ip = format!("{}/24", layout.host_client_ip());
    for bridge in [layout.client_bridge(), layout.inter_bridge()] {
        ip(&["link", "add", "name", &bridge, "type", "bridge"])?;
        ip(&["link", "set", "dev", &bridge, "up"])?;
    }
    ip(&["addr", "add", &host_ip, "dev", &layout.client_bridge()])?;
    for i in 0..CLUSTER_SIZE {
        let ns = layout.namespace(i);
        ip(&["netns", "add", &ns])?;
        ip(&["-n", &ns, "link", "set", "dev", "lo", "up"])?;
        for (host_end, inner, bridge, addr) in [
            (
                layout.client_veth(i),
                "cl",
                layout.client_bridge(),
                layout.client_ip(i),
            ),
            (
                layout.inter_veth(i),
                "in",
                layout.inter_bridge(),
                layout.inter_ip(i),
            ),
        ] {
            ip(&[
                "link", "add", "name", &host_end, "type", "veth", "peer", "name", inner, "netns",
                &ns,
            ])?;
            ip(&["link", "set", "dev", &host_end, "master", &bridge])?;
            ip(&["link", "set", "dev", &host_end, "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                inner,
            ])?;
            ip(&["-n", &ns, "link", "set", "dev", inner, "up"])?;
        }
    }
    Ok(())
}

/// The server address of a connection named `client-ip:port -> server-ip:port`.
fn server_ip(name: &str) -> Option<Ipv4Addr> {
    let (_, server) = name.split_once("->")?;
    server.trim().rsplit_once(':')?.0.parse().ok()
}

fn parse_rows(out: &str) -> anyhow::Result<Vec<Value>> {
    let start = out
        .find('[')
        .ok_or_else(|| anyhow!("no JSON array in output: {out}"))?;
    match serde_json::from_str(&out[start..])? {
        Value::Array(rows) => Ok(rows),
        other => bail!("expected a JSON array, got {other}"),
    }
}

impl NetnsCluster {
    /// The cluster's directory (`$TMPDIR/mshp<slot>`: each node's config, data and logs).
    pub fn dir(&self) -> PathBuf {
        self.layout.dir()
    }

    /// The slot's base name, `mshp<slot>`, which every namespace and link name starts with.
    pub fn base_name(&self) -> String {
        self.layout.base()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_the_kernels_limit_and_parse_back() {
        let layout = Layout { slot: SLOTS - 1 };
        for i in 0..CLUSTER_SIZE {
            for name in [
                layout.namespace(i),
                layout.client_veth(i),
                layout.inter_veth(i),
                layout.client_bridge(),
                layout.inter_bridge(),
            ] {
                assert!(name.len() <= 15, "{name}");
                assert_eq!(slot_of(&name), Some(SLOTS - 1), "{name}");
            }
        }
        assert_eq!(slot_of("mshp12"), None);
        assert_eq!(slot_of("mshp12x"), None);
        assert_eq!(slot_of("eth0"), None);
        assert_eq!(slot_of("mshp5000c"), None);
    }

    #[test]
    fn subnets_are_distinct_per_slot() {
        let a = Layout { slot: 0 };
        let b = Layout { slot: 250 };
        let c = Layout { slot: 999 };
        assert_eq!(a.client_subnet(), [10, 200, 0]);
        assert_eq!(b.client_subnet(), [10, 201, 0]);
        assert_eq!(c.inter_subnet(), [10, 207, 249]);
        assert_ne!(a.client_subnet(), a.inter_subnet());
        assert_eq!(a.client_ip(2), Ipv4Addr::new(10, 200, 0, 12));
        assert_eq!(a.host_client_ip(), Ipv4Addr::new(10, 200, 0, 1));
    }

    #[test]
    fn finds_subnets_in_use() {
        let used = "2: eth0    inet 10.200.3.7/24 brd 10.200.3.255 scope global eth0\n\
                    default via 192.0.2.1 dev eth0";
        assert!(subnet_in_use(used, [10, 200, 3]));
        assert!(!subnet_in_use(used, [10, 200, 30]));
        assert!(!subnet_in_use(used, [10, 204, 3]));
    }

    #[test]
    fn finds_the_server_address_of_a_connection_name() {
        assert_eq!(
            server_ip("10.200.0.1:51234 -> 10.200.0.11:5672"),
            Some(Ipv4Addr::new(10, 200, 0, 11))
        );
        assert_eq!(server_ip("nonsense"), None);
        assert_eq!(server_ip("a -> b"), None);
    }

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

    #[test]
    fn link_names_strip_the_peer() {
        let out = "1: lo: <LOOPBACK,UP> mtu 65536\n7: mshp3i0@if3: <BROADCAST> mtu 1500\n";
        assert_eq!(link_names(out).collect::<Vec<_>>(), vec!["lo", "mshp3i0"]);
    }
}
