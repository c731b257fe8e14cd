//! A fake AMQP peer: a TCP listener that answers the client's handshake and requests with
//! frames it writes byte by byte, reads the client's frames with the fork's own decoder
//! (`Frame::decode`), and sends whatever a test injects, in order with its answers.
//!
//! Each test runs on a current-thread runtime, so the library's tasks (reader, writer,
//! dispatchers) run on the test's thread: a panic hook that records the thread tells each
//! test the panics of its own tasks, even with tests running in parallel.

use std::{
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, Once,
    },
    thread::ThreadId,
    time::Duration,
};

use bytes::{Buf, BytesMut};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{mpsc, oneshot},
};

use crate::{
    connection::{Connection, OpenConnectionArguments},
    frame::{Frame, FRAME_CONTENT_BODY, FRAME_CONTENT_HEADER, FRAME_END, FRAME_METHOD},
};

/// How long a test waits for what must happen at once; a bound, never a pause.
pub(super) const WAIT: Duration = Duration::from_secs(10);

static PANICS: Mutex<Vec<(ThreadId, String)>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();

/// Records every panic with its thread, then prints it as the default hook does.
pub(super) fn watch_panics() {
    HOOK.call_once(|| {
        let print = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Ok(mut seen) = PANICS.lock() {
                seen.push((std::thread::current().id(), info.to_string()));
            }
            print(info);
        }));
    });
}

/// The panics of this thread's tasks so far.
pub(super) fn panics_here() -> Vec<String> {
    let here = std::thread::current().id();
    PANICS
        .lock()
        .map(|seen| {
            seen.iter()
                .filter(|(thread, _)| *thread == here)
                .map(|(_, text)| text.clone())
                .collect()
        })
        .unwrap_or_default()
}

/// One frame's bytes.
pub(super) fn frame(frame_type: u8, channel: u16, payload: &[u8]) -> Vec<u8> {
    let mut buf = vec![frame_type];
    buf.extend_from_slice(&channel.to_be_bytes());
    buf.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    buf.extend_from_slice(payload);
    buf.push(FRAME_END);
    buf
}

/// A method frame: class, method, then its arguments already encoded.
pub(super) fn method(channel: u16, class: u16, method: u16, args: &[u8]) -> Vec<u8> {
    let mut payload = class.to_be_bytes().to_vec();
    payload.extend_from_slice(&method.to_be_bytes());
    payload.extend_from_slice(args);
    frame(FRAME_METHOD, channel, &payload)
}

pub(super) fn shortstr(s: &str) -> Vec<u8> {
    let mut buf = vec![u8::try_from(s.len()).unwrap()];
    buf.extend_from_slice(s.as_bytes());
    buf
}

pub(super) fn longstr(s: &str) -> Vec<u8> {
    let mut buf = u32::try_from(s.len()).unwrap().to_be_bytes().to_vec();
    buf.extend_from_slice(s.as_bytes());
    buf
}

/// A field table of `(key, type octet, encoded value)` entries.
pub(super) fn table(entries: &[(&str, u8, Vec<u8>)]) -> Vec<u8> {
    let mut body = Vec::new();
    for (key, kind, value) in entries {
        body.extend(shortstr(key));
        body.push(*kind);
        body.extend_from_slice(value);
    }
    let mut buf = u32::try_from(body.len()).unwrap().to_be_bytes().to_vec();
    buf.extend(body);
    buf
}

/// A `basic` content header announcing `body_size` bytes, no properties.
pub(super) fn header(channel: u16, body_size: u64) -> Vec<u8> {
    let mut payload = 60u16.to_be_bytes().to_vec();
    payload.extend_from_slice(&0u16.to_be_bytes());
    payload.extend_from_slice(&body_size.to_be_bytes());
    payload.extend_from_slice(&0u16.to_be_bytes());
    frame(FRAME_CONTENT_HEADER, channel, &payload)
}

pub(super) fn body(channel: u16, bytes: &[u8]) -> Vec<u8> {
    frame(FRAME_CONTENT_BODY, channel, bytes)
}

/// `basic.deliver` to the consumer tagged [`TAG`].
pub(super) fn deliver(channel: u16, delivery_tag: u64) -> Vec<u8> {
    let mut args = shortstr(TAG);
    args.extend_from_slice(&delivery_tag.to_be_bytes());
    args.push(0);
    args.extend(shortstr(""));
    args.extend(shortstr("q"));
    method(channel, 60, 60, &args)
}

/// `basic.return` 312 NO_ROUTE.
pub(super) fn basic_return(channel: u16) -> Vec<u8> {
    let mut args = 312u16.to_be_bytes().to_vec();
    args.extend(shortstr("NO_ROUTE"));
    args.extend(shortstr(""));
    args.extend(shortstr("nowhere"));
    method(channel, 60, 50, &args)
}

/// `basic.get-ok` for delivery tag 1, no message left.
pub(super) fn get_ok(channel: u16) -> Vec<u8> {
    let mut args = 1u64.to_be_bytes().to_vec();
    args.push(0);
    args.extend(shortstr(""));
    args.extend(shortstr("q"));
    args.extend_from_slice(&0u32.to_be_bytes());
    method(channel, 60, 71, &args)
}

/// `basic.get-empty`.
pub(super) fn get_empty(channel: u16) -> Vec<u8> {
    method(channel, 60, 72, &shortstr(""))
}

/// `channel.close` from the server, 406 PRECONDITION_FAILED.
pub(super) fn channel_close(channel: u16) -> Vec<u8> {
    let mut args = 406u16.to_be_bytes().to_vec();
    args.extend(shortstr("PRECONDITION_FAILED - unknown delivery tag 9"));
    args.extend_from_slice(&60u16.to_be_bytes());
    args.extend_from_slice(&80u16.to_be_bytes());
    method(channel, 20, 40, &args)
}

pub(super) fn channel_close_ok(channel: u16) -> Vec<u8> {
    method(channel, 20, 41, &[])
}

/// The consumer tag the peer answers every `basic.consume` with.
pub(super) const TAG: &str = "c";

enum Inject {
    Bytes(Vec<u8>, oneshot::Sender<()>),
    HangUp(Vec<u8>),
}

/// The client's connection to a fake peer.
pub(super) struct Peer {
    pub connection: Connection,
    inject: mpsc::UnboundedSender<Inject>,
    /// Every frame the client sent after the handshake.
    received: mpsc::UnboundedReceiver<(u16, Frame)>,
    /// While set, the peer leaves a client's `channel.close` unanswered.
    hold_channel_close: Arc<AtomicBool>,
    /// While set, the peer answers a `basic.get` with its content only, no `get-ok`.
    headless_get: Arc<AtomicBool>,
}

impl Peer {
    /// A peer announcing `channel_max`, and the client connected to it.
    pub async fn start(channel_max: u16) -> Peer {
        Peer::start_with(channel_max, &table(&[]))
            .await
            .expect("the handshake with the fake peer")
    }

    /// A peer whose `connection.start` carries `server_properties` (an encoded field
    /// table), and the client's attempt to connect to it.
    pub async fn start_with(
        channel_max: u16,
        server_properties: &[u8],
    ) -> Result<Peer, crate::error::Error> {
        watch_panics();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (inject, injected) = mpsc::unbounded_channel();
        let (report, received) = mpsc::unbounded_channel();
        let hold_channel_close = Arc::new(AtomicBool::new(false));
        let hold = hold_channel_close.clone();
        let headless_get = Arc::new(AtomicBool::new(false));
        let headless = headless_get.clone();
        let properties = server_properties.to_vec();
        tokio::spawn(async move {
            let (stream, _) = listener.accept().await.unwrap();
            let answers = Answers { hold, headless };
            serve(stream, channel_max, &properties, injected, report, answers).await;
        });
        let args = OpenConnectionArguments::new("127.0.0.1", port, "guest", "guest");
        let connection = tokio::time::timeout(WAIT, Connection::open(&args))
            .await
            .expect("the client answered the fake peer")?;
        Ok(Peer {
            connection,
            inject,
            received,
            hold_channel_close,
            headless_get,
        })
    }

    /// Sends `frames` to the client; returns once they are written.
    pub async fn send(&self, frames: &[Vec<u8>]) {
        let (done, written) = oneshot::channel();
        self.inject
            .send(Inject::Bytes(frames.concat(), done))
            .unwrap();
        tokio::time::timeout(WAIT, written).await.unwrap().unwrap();
    }

    /// Sends `frames`, then closes the socket.
    pub fn send_and_hang_up(&self, frames: &[Vec<u8>]) {
        self.inject.send(Inject::HangUp(frames.concat())).unwrap();
    }

    pub fn hold_channel_close(&self, hold: bool) {
        self.hold_channel_close.store(hold, Ordering::SeqCst);
    }

    /// Whether the peer answers a `basic.get` with its content only, no `get-ok` before it.
    pub fn headless_get(&self, headless: bool) {
        self.headless_get.store(headless, Ordering::SeqCst);
    }

    /// Waits for the client's next frame that `wanted` accepts.
    pub async fn expect(&mut self, what: &str, wanted: impl Fn(u16, &Frame) -> bool) {
        let found = tokio::time::timeout(WAIT, async {
            while let Some((channel, frame)) = self.received.recv().await {
                if wanted(channel, &frame) {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(found, Ok(true), "the client never sent {what}");
    }
}

struct Wire {
    stream: TcpStream,
    buffer: BytesMut,
}

impl Wire {
    async fn read(&mut self) -> Option<(u16, Frame)> {
        loop {
            if let Some((len, channel, frame)) = Frame::decode(&self.buffer).unwrap() {
                self.buffer.advance(len);
                return Some((channel, frame));
            }
            if self.stream.read_buf(&mut self.buffer).await.ok()? == 0 {
                return None;
            }
        }
    }

    async fn write(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
    }
}

/// How the peer answers, as the test sets it while it runs.
struct Answers {
    /// Leave a client's `channel.close` unanswered.
    hold: Arc<AtomicBool>,
    /// Answer a `basic.get` with its content only.
    headless: Arc<AtomicBool>,
}

async fn serve(
    stream: TcpStream,
    channel_max: u16,
    server_properties: &[u8],
    mut injected: mpsc::UnboundedReceiver<Inject>,
    report: mpsc::UnboundedSender<(u16, Frame)>,
    answers: Answers,
) {
    let mut wire = Wire {
        stream,
        buffer: BytesMut::new(),
    };
    let mut protocol_header = [0u8; 8];
    wire.stream.read_exact(&mut protocol_header).await.unwrap();
    assert_eq!(&protocol_header, b"AMQP\x00\x00\x09\x01");

    // connection.start: 0-9, the server properties, PLAIN, en_US
    let mut start = vec![0, 9];
    start.extend_from_slice(server_properties);
    start.extend(longstr("PLAIN"));
    start.extend(longstr("en_US"));
    wire.write(&method(0, 10, 10, &start)).await;
    // A client that refuses the start hangs up.
    let Some(_start_ok) = wire.read().await else {
        return;
    };
    // connection.tune: channel_max, frame_max 128 KiB, no heartbeat of the server's own
    let mut tune = channel_max.to_be_bytes().to_vec();
    tune.extend_from_slice(&131_072u32.to_be_bytes());
    tune.extend_from_slice(&0u16.to_be_bytes());
    wire.write(&method(0, 10, 30, &tune)).await;
    let _tune_ok = wire.read().await.unwrap();
    let _open = wire.read().await.unwrap();
    wire.write(&method(0, 10, 41, &shortstr(""))).await;

    loop {
        tokio::select! {
            biased;
            inject = injected.recv() => match inject {
                Some(Inject::Bytes(bytes, done)) => {
                    wire.write(&bytes).await;
                    let _ = done.send(());
                }
                Some(Inject::HangUp(bytes)) => {
                    wire.write(&bytes).await;
                    return;
                }
                None => return,
            },
            read = wire.read() => {
                let Some((channel, frame)) = read else { return };
                let answer = match &frame {
                    Frame::OpenChannel(..) => Some(method(channel, 20, 11, &longstr(""))),
                    Frame::CloseChannel(..) if !answers.hold.load(Ordering::SeqCst) => {
                        Some(channel_close_ok(channel))
                    }
                    Frame::Flow(..) => Some(method(channel, 20, 21, &[1])),
                    Frame::Qos(..) => Some(method(channel, 60, 11, &[])),
                    Frame::Consume(..) => Some(method(channel, 60, 21, &shortstr(TAG))),
                    Frame::UpdateSecret(..) => Some(method(channel, 10, 71, &[])),
                    Frame::Get(..) if answers.headless.load(Ordering::SeqCst) => {
                        Some([header(channel, 3), body(channel, b"got")].concat())
                    }
                    Frame::Get(..) => Some([get_ok(channel), header(channel, 3), body(channel, b"got")].concat()),
                    Frame::Close(..) => Some(method(channel, 10, 51, &[])),
                    _ => None,
                };
                if let Some(answer) = answer {
                    wire.write(&answer).await;
                }
                let _ = report.send((channel, frame));
            }
        }
    }
}
