//! The network of a [`NetnsCluster`](super::NetnsCluster)'s slot: the names and addresses a
//! slot gives its namespaces, bridges and links ([`Layout`]), reserving a slot, creating its
//! network, and removing it all again (by the cluster's `Drop`, by its watchdog when the test
//! process dies, or by the next start for a slot whose owner could not clean up).

use std::fs::File;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use rand::Rng;

use crate::cluster::CLUSTER_SIZE;
use crate::sys;
use crate::watchdog::Watchdog;

/// The prefix of every name this harness gives a namespace, link, directory or CLI node.
pub(super) const PREFIX: &str = "mshp";
/// Slots are drawn below this.
const SLOTS: u16 = 1000;
/// How long one `ip` run may take.
const IP_TIMEOUT: Duration = Duration::from_secs(20);
/// How long killing a namespace's processes may take.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// The names and addresses of one slot.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    pub(super) slot: u16,
}

impl Layout {
    pub(super) fn base(&self) -> String {
        format!("{PREFIX}{}", self.slot)
    }
    pub(super) fn namespace(&self, i: usize) -> String {
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
    pub(super) fn inter_veth(&self, i: usize) -> String {
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
    pub(super) fn client_ip(&self, i: usize) -> Ipv4Addr {
        let [a, b, c] = self.client_subnet();
        Ipv4Addr::new(a, b, c, 10 + i as u8)
    }
    pub(super) fn inter_ip(&self, i: usize) -> Ipv4Addr {
        let [a, b, c] = self.inter_subnet();
        Ipv4Addr::new(a, b, c, 10 + i as u8)
    }
    pub(super) fn dir(&self) -> PathBuf {
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
    sys::lock_file("mesh-testkit-netns", &slot.to_string())
}

/// Runs `ip ARGS...` (blocking) and returns stdout; fails with its stderr.
pub(super) fn ip(args: &[&str]) -> anyhow::Result<String> {
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
pub(super) fn kill_namespace(ns: &str, timeout: Duration) -> Vec<i32> {
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
pub(super) fn remove_slot(layout: &Layout) -> Vec<String> {
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
pub(super) fn remove_stale() {
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
pub(super) fn reserve_slot() -> anyhow::Result<(Layout, File)> {
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

/// Spawns the watchdog of slot `layout`; see the module docs of [`crate::watchdog`].
pub(super) fn spawn_watchdog(layout: &Layout) -> anyhow::Result<Watchdog> {
    let base = layout.base();
    let dir = layout.dir();
    Watchdog::spawn(
        WATCHDOG_SCRIPT,
        "mesh-testkit-netns-watchdog",
        &[base.as_ref(), dir.as_os_str()],
        "netns",
    )
}

/// Creates slot `layout`'s bridges, namespaces, veths and addresses.
pub(super) fn create_network(layout: &Layout) -> anyhow::Result<()> {
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
    fn link_names_strip_the_peer() {
        let out = "1: lo: <LOOPBACK,UP> mtu 65536\n7: mshp3i0@if3: <BROADCAST> mtu 1500\n";
        assert_eq!(link_names(out).collect::<Vec<_>>(), vec!["lo", "mshp3i0"]);
    }
}
