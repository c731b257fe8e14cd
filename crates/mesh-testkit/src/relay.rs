//! An in-test TCP relay between a client and a broker, to inject network faults.
//!
//! This module owns [`Relay`]: point a client at [`Relay::addr`] instead of the broker and
//! switch the relay between [`Relay::pass`] (forward), [`Relay::blackhole`] (a silent partition:
//! sockets stay open, no byte moves either way, as when packets are dropped) and back, or
//! [`Relay::cut`] every current connection (both sides closed, as when a load balancer or
//! the broker drops them). Unlike closing connections on the broker, the relay also fails
//! connections the broker still believes healthy, and lets heartbeats time out.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// What the relay does with bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelayMode {
    /// Forward in both directions.
    Pass,
    /// Forward nothing; keep every socket open; accept new connections without connecting
    /// them upstream. Bytes already read are held and delivered on the return to `Pass`; bytes
    /// not yet read wait in the kernel's buffers, as in a real partition that heals.
    Blackhole,
}

/// A TCP relay on `127.0.0.1:<random port>` forwarding to one upstream address.
///
/// Must be created inside a Tokio runtime; its tasks run there and stop when the relay is
/// dropped (the listener closes, and every relayed connection is closed on both sides).
///
/// ```no_run
/// # async fn demo(broker: std::net::SocketAddr) -> std::io::Result<()> {
/// use mesh_testkit::relay::Relay;
/// let relay = Relay::start(broker).await?;
/// let url = format!("amqp://guest:guest@127.0.0.1:{}/", relay.port());
/// // ... connect through `url` ...
/// relay.blackhole(); // heartbeats stop flowing: the client should notice within 2 heartbeats
/// relay.pass();
/// relay.cut(); // every current connection is closed; reconnects go through
/// # let _ = url;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Relay {
    addr: SocketAddr,
    upstream: SocketAddr,
    mode: watch::Sender<RelayMode>,
    /// Bumped by `cut`; each connection closes when it sees a value newer than at its accept.
    cuts: watch::Sender<u64>,
    accepted: Arc<AtomicUsize>,
    active: Arc<AtomicUsize>,
    accept_task: JoinHandle<()>,
}

impl Relay {
    /// Listens on a free port of 127.0.0.1 and relays every connection to `upstream`, in
    /// [`RelayMode::Pass`].
    pub async fn start(upstream: SocketAddr) -> io::Result<Relay> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let (mode, mode_rx) = watch::channel(RelayMode::Pass);
        let (cuts, cuts_rx) = watch::channel(0u64);
        let accepted = Arc::new(AtomicUsize::new(0));
        let active = Arc::new(AtomicUsize::new(0));
        let accept_task = tokio::spawn(accept_loop(
            listener,
            upstream,
            mode_rx,
            cuts_rx,
            accepted.clone(),
            active.clone(),
        ));
        Ok(Relay {
            addr,
            upstream,
            mode,
            cuts,
            accepted,
            active,
            accept_task,
        })
    }

    /// The listening address clients should connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The listening port.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Where connections are relayed to.
    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Forward bytes again (and connect upstream the connections accepted while blackholed).
    pub fn pass(&self) {
        self.mode.send_replace(RelayMode::Pass);
    }

    /// Stop forwarding in both directions while keeping every socket open; see
    /// [`RelayMode::Blackhole`].
    pub fn blackhole(&self) {
        self.mode.send_replace(RelayMode::Blackhole);
    }

    /// The current mode.
    pub fn mode(&self) -> RelayMode {
        *self.mode.borrow()
    }

    /// Closes both sides of every connection accepted so far. The mode is unchanged: new
    /// connections are accepted and relayed as usual. Closing is asynchronous but prompt;
    /// [`Relay::active`] drops accordingly.
    pub fn cut(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }

    /// How many client connections the relay has accepted since it started.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// How many client connections are currently open through the relay.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        // Dropping the watch senders (with `self`) ends every connection task.
        self.accept_task.abort();
    }
}

async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    mode: watch::Receiver<RelayMode>,
    cuts: watch::Receiver<u64>,
    accepted: Arc<AtomicUsize>,
    active: Arc<AtomicUsize>,
) {
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(e) => {
                // e.g. EMFILE: back off briefly rather than spin.
                tracing::debug!(error = %e, "relay accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                continue;
            }
        };
        accepted.fetch_add(1, Ordering::SeqCst);
        let _ = client.set_nodelay(true);
        let mut cuts = cuts.clone();
        // Only cuts after this accept concern this connection.
        cuts.borrow_and_update();
        let guard = ActiveGuard::new(active.clone());
        tokio::spawn(relay_connection(
            client,
            upstream,
            mode.clone(),
            cuts,
            guard,
        ));
    }
}

/// Counts a connection as active for as long as it lives.
struct ActiveGuard(Arc<AtomicUsize>);

impl ActiveGuard {
    fn new(active: Arc<AtomicUsize>) -> ActiveGuard {
        active.fetch_add(1, Ordering::SeqCst);
        ActiveGuard(active)
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn relay_connection(
    client: TcpStream,
    upstream: SocketAddr,
    mut mode: watch::Receiver<RelayMode>,
    mut cuts: watch::Receiver<u64>,
    _active: ActiveGuard,
) {
    let work = async {
        // A blackholed relay does not even open the upstream side, like a lost SYN.
        wait_pass(&mut mode).await?;
        let server = TcpStream::connect(upstream).await?;
        let _ = server.set_nodelay(true);
        let (client_r, client_w) = client.into_split();
        let (server_r, server_w) = server.into_split();
        tokio::try_join!(
            pump(client_r, server_w, mode.clone()),
            pump(server_r, client_w, mode.clone())
        )
        .map(|_| ())
    };
    tokio::select! {
        res = work => {
            if let Err(e) = res {
                tracing::debug!(error = %e, "relayed connection ended");
            }
        }
        // A cut, or the relay dropped (sender gone): either way both sockets drop here.
        _ = cuts.changed() => {}
    }
}

fn relay_gone() -> io::Error {
    io::Error::other("relay dropped")
}

/// Returns once the mode is `Pass`.
async fn wait_pass(mode: &mut watch::Receiver<RelayMode>) -> io::Result<()> {
    loop {
        if *mode.borrow_and_update() == RelayMode::Pass {
            return Ok(());
        }
        mode.changed().await.map_err(|_| relay_gone())?;
    }
}

/// Copies one direction, pausing whenever the mode is not `Pass`; propagates end-of-file as a
/// half-close.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut mode: watch::Receiver<RelayMode>,
) -> io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        wait_pass(&mut mode).await?;
        let n = tokio::select! {
            res = from.read(&mut buf) => res?,
            // Mode changed mid-read: re-check it (`read` is cancel-safe, nothing is lost).
            changed = mode.changed() => {
                changed.map_err(|_| relay_gone())?;
                continue;
            }
        };
        // Hold what was read until the relay passes again.
        wait_pass(&mut mode).await?;
        if n == 0 {
            to.shutdown().await?;
            return Ok(());
        }
        to.write_all(&buf[..n]).await?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::sync::mpsc;

    const STEP: Duration = Duration::from_secs(5);
    /// How long "nothing arrives" is watched for.
    const QUIET: Duration = Duration::from_millis(300);

    /// An echo server reporting each connection's open (`true`) and close (`false`).
    async fn echo_server() -> (SocketAddr, mpsc::UnboundedReceiver<bool>) {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            loop {
                let (mut sock, _) = listener.accept().await.unwrap();
                let tx = tx.clone();
                let _ = tx.send(true);
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    loop {
                        match sock.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if sock.write_all(&buf[..n]).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = tx.send(false);
                });
            }
        });
        (addr, rx)
    }

    async fn echo_roundtrip(sock: &mut TcpStream, msg: &[u8]) {
        sock.write_all(msg).await.unwrap();
        let mut buf = vec![0u8; msg.len()];
        tokio::time::timeout(STEP, sock.read_exact(&mut buf))
            .await
            .expect("echo timed out")
            .unwrap();
        assert_eq!(buf, msg);
    }

    async fn expect_event(events: &mut mpsc::UnboundedReceiver<bool>, open: bool) {
        let got = tokio::time::timeout(STEP, events.recv())
            .await
            .expect("no server event")
            .unwrap();
        assert_eq!(got, open);
    }

    /// Reads until end-of-file or a reset, which is how a client sees a cut.
    async fn expect_closed(sock: &mut TcpStream) {
        let mut buf = [0u8; 64];
        let res = tokio::time::timeout(STEP, sock.read(&mut buf))
            .await
            .expect("socket was not closed");
        assert!(matches!(res, Ok(0) | Err(_)), "expected close, got {res:?}");
    }

    async fn expect_silence(sock: &mut TcpStream) {
        let mut buf = [0u8; 64];
        let res = tokio::time::timeout(QUIET, sock.read(&mut buf)).await;
        assert!(res.is_err(), "expected nothing, got {res:?}");
    }

    #[tokio::test]
    async fn pass_forwards_both_ways_and_counts_connections() {
        let (upstream, mut events) = echo_server().await;
        let relay = Relay::start(upstream).await.unwrap();
        assert_eq!(relay.mode(), RelayMode::Pass);
        assert_eq!(relay.upstream(), upstream);
        let mut a = TcpStream::connect(relay.addr()).await.unwrap();
        echo_roundtrip(&mut a, b"hello").await;
        let mut b = TcpStream::connect(("127.0.0.1", relay.port()))
            .await
            .unwrap();
        echo_roundtrip(&mut b, b"world").await;
        expect_event(&mut events, true).await;
        expect_event(&mut events, true).await;
        assert_eq!(relay.accepted(), 2);
        assert_eq!(relay.active(), 2);
        // A client's half-close reaches the server, whose close comes back.
        a.shutdown().await.unwrap();
        expect_event(&mut events, false).await;
        expect_closed(&mut a).await;
    }

    #[tokio::test]
    async fn cut_closes_current_connections_and_accepts_new_ones() {
        let (upstream, mut events) = echo_server().await;
        let relay = Relay::start(upstream).await.unwrap();
        let mut a = TcpStream::connect(relay.addr()).await.unwrap();
        echo_roundtrip(&mut a, b"before").await;
        expect_event(&mut events, true).await;

        relay.cut();
        expect_closed(&mut a).await;
        expect_event(&mut events, false).await;
        crate::wait::eventually(STEP, "active connections to drop to 0", || async {
            (relay.active() == 0).then_some(())
        })
        .await;

        let mut b = TcpStream::connect(relay.addr()).await.unwrap();
        echo_roundtrip(&mut b, b"after").await;
        expect_event(&mut events, true).await;
        assert_eq!(relay.accepted(), 2);
        assert_eq!(relay.mode(), RelayMode::Pass);
    }

    #[tokio::test]
    async fn blackhole_holds_bytes_until_pass_and_keeps_sockets_open() {
        let (upstream, mut events) = echo_server().await;
        let relay = Relay::start(upstream).await.unwrap();
        let mut a = TcpStream::connect(relay.addr()).await.unwrap();
        echo_roundtrip(&mut a, b"ping").await;
        expect_event(&mut events, true).await;

        relay.blackhole();
        assert_eq!(relay.mode(), RelayMode::Blackhole);
        // Writes succeed (the socket is open) but nothing comes back.
        a.write_all(b"lost?").await.unwrap();
        expect_silence(&mut a).await;
        // New connections are accepted but not connected upstream.
        let mut b = TcpStream::connect(relay.addr()).await.unwrap();
        b.write_all(b"new").await.unwrap();
        expect_silence(&mut b).await;
        crate::wait::eventually(STEP, "the relay to accept b", || async {
            (relay.accepted() == 2).then_some(())
        })
        .await;
        assert!(
            events.try_recv().is_err(),
            "upstream saw a connection or a close during the blackhole"
        );

        relay.pass();
        // Held bytes flow again, on the old connection and the new one.
        let mut buf = [0u8; 5];
        tokio::time::timeout(STEP, a.read_exact(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf, b"lost?");
        let mut buf = [0u8; 3];
        tokio::time::timeout(STEP, b.read_exact(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&buf, b"new");
        expect_event(&mut events, true).await;
        echo_roundtrip(&mut a, b"again").await;
    }

    #[tokio::test]
    async fn blackhole_hides_a_close_until_pass() {
        let (upstream, mut events) = echo_server().await;
        let relay = Relay::start(upstream).await.unwrap();
        let mut a = TcpStream::connect(relay.addr()).await.unwrap();
        echo_roundtrip(&mut a, b"x").await;
        expect_event(&mut events, true).await;
        relay.blackhole();
        a.shutdown().await.unwrap();
        expect_silence(&mut a).await;
        assert!(events.try_recv().is_err());
        relay.pass();
        expect_event(&mut events, false).await;
        expect_closed(&mut a).await;
    }

    #[tokio::test]
    async fn drop_stops_listening_and_closes_connections() {
        let (upstream, mut events) = echo_server().await;
        let relay = Relay::start(upstream).await.unwrap();
        let addr = relay.addr();
        let mut a = TcpStream::connect(addr).await.unwrap();
        echo_roundtrip(&mut a, b"x").await;
        expect_event(&mut events, true).await;
        drop(relay);
        expect_closed(&mut a).await;
        expect_event(&mut events, false).await;
        crate::wait::eventually(STEP, "the listener to close", || async {
            TcpStream::connect(addr).await.is_err().then_some(())
        })
        .await;
    }
}
