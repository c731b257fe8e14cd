//! Ports for private nodes and for listeners tests configure themselves: drawn at random,
//! checked free, and never handed out twice, in this process or in another test binary
//! running beside it.

use std::collections::HashMap;
use std::fs::File;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use anyhow::bail;
use rand::Rng;

/// Ports are drawn from here: below Linux's ephemeral range (32768-60999), so the kernel never
/// hands one to an outgoing connection, which could otherwise steal a stopped node's port
/// before [`PrivateNode::start_again`]; and away from 5672/15672/25672 in practice (those are
/// checked like any other port anyway).
const PORT_RANGE: std::ops::Range<u16> = 20000..32000;

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
    crate::sys::lock_file("mesh-testkit-ports", &port.to_string())
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
pub(crate) async fn port_open(port: u16) -> bool {
    matches!(
        tokio::time::timeout(
            Duration::from_secs(1),
            tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port)),
        )
        .await,
        Ok(Ok(_))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
