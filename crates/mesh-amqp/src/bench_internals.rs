//! Entry points into the crate's hot internals for the micro-benchmarks
//! (`crates/mesh-microbench`), and for nothing else.
//!
//! Compiled only with the non-default `bench-internals` feature and hidden from the docs: it
//! is not part of the API and carries no stability promise. Each item is a thin shell over
//! the crate-private code it names, so what a benchmark measures is that code:
//!
//! - [`to_properties`], [`delivered`] and [`header_frame_bound`]: the conversion of a
//!   message to the client library's properties on publish and back on delivery, and the
//!   cheap bound of its content-header frame (the `convert` module);
//! - [`Window`]: the publisher's unconfirmed window (`publisher::window`), holding messages
//!   known by a number;
//! - [`AckTracker`]: a consumer channel's ack tracker (`consumer::ack`).
//!
//! The client library's properties stay opaque ([`ClientProperties`]), as everywhere else in
//! the crate's public items.

use std::time::Instant;

use amqprs::BasicProperties;
use mesh_core::{TransportError, WireMessage};

use crate::consumer::ack;
use crate::publisher::window::{self, Outcome};

/// The properties a message is published with, as the client library carries them.
#[derive(Debug, Clone)]
pub struct ClientProperties {
    inner: BasicProperties,
}

/// The publish-side conversion: `message`'s properties and headers in the client library's
/// types (persistent whatever the message says with `force_persistent`).
pub fn to_properties(
    message: &WireMessage,
    force_persistent: bool,
) -> Result<ClientProperties, TransportError> {
    crate::convert::to_properties(message, force_persistent).map(|inner| ClientProperties { inner })
}

/// The consume-side conversion: a delivery through `exchange` under `routing_key`, in mesh's
/// types (its own routing key restored, unearned `x-mesh-*` headers removed), the client
/// library's properties taken apart as the consumer does (what is left of them is the
/// caller's to drop).
pub fn delivered(
    exchange: &str,
    routing_key: String,
    properties: &mut ClientProperties,
    body: Vec<u8>,
) -> WireMessage {
    crate::convert::delivered(exchange, routing_key, &mut properties.inner, body)
}

/// The upper bound of `message`'s content-header frame the publisher checks before sending.
pub fn header_frame_bound(message: &WireMessage) -> usize {
    crate::convert::header_frame_bound(message)
}

/// A message of the benchmark's window: a number, published persistent and mandatory to
/// `mesh.events` with a 256-byte body.
#[derive(Debug)]
struct Numbered(u64);

impl window::Message for Numbered {
    fn resend(&self) -> bool {
        true
    }
    fn mandatory(&self) -> bool {
        true
    }
    fn exchange(&self) -> &str {
        mesh_core::naming::EVENTS_EXCHANGE
    }
    fn routing_key(&self) -> &str {
        "module.bench.item.created"
    }
    fn size(&self) -> usize {
        256
    }
}

/// The publisher's unconfirmed window, over messages known by a number.
#[derive(Debug)]
pub struct Window {
    inner: window::Window<Numbered>,
}

/// A message taken out of the window's backlog to be published ([`Window::pop_unsent`]).
#[derive(Debug)]
pub struct Unsent {
    inner: window::Queued<Numbered>,
}

impl Window {
    /// An empty window without a channel.
    pub fn new(now: Instant) -> Window {
        Window {
            inner: window::Window::new(now),
        }
    }

    /// A channel in confirm mode is open as `generation`.
    pub fn channel_opened(&mut self, generation: u64) {
        self.inner.channel_opened(generation);
    }

    /// Takes in message `id`, behind everything waiting (a publish).
    pub fn push(&mut self, id: u64) {
        self.inner.push(Numbered(id));
    }

    /// The oldest message waiting, to publish it now.
    pub fn pop_unsent(&mut self) -> Option<Unsent> {
        self.inner.pop_unsent().map(|inner| Unsent { inner })
    }

    /// `unsent` was published on the current channel; its sequence number.
    pub fn sent(&mut self, unsent: Unsent, now: Instant) -> u64 {
        self.inner.sent(unsent.inner, now)
    }

    /// `basic.ack` of `tag` (with `multiple`, of everything up to it) on channel
    /// `generation`; whether it was taken (not from a replaced channel).
    pub fn on_ack(&mut self, generation: u64, tag: u64, multiple: bool, now: Instant) -> bool {
        !self.inner.on_ack(generation, tag, multiple, now).stale
    }

    /// The next settled message: its number, and whether it was acked (rather than nacked,
    /// returned, refused…).
    pub fn poll_settled(&mut self) -> Option<(u64, bool)> {
        self.inner
            .poll_settled()
            .map(|(message, outcome)| (message.0, outcome == Outcome::Acked))
    }

    /// Messages published and not yet settled.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }

    /// Messages waiting to be published.
    pub fn backlog(&self) -> usize {
        self.inner.backlog()
    }
}

/// A frame that settles deliveries on a consumer channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckFrame {
    /// `basic.nack(tag, multiple = false, requeue = true)`.
    Release(u64),
    /// `basic.ack(tag, multiple)`.
    Ack {
        /// The delivery tag.
        tag: u64,
        /// Whether it settles everything up to the tag.
        multiple: bool,
    },
}

/// What [`AckTracker::flush`] said to do.
#[derive(Debug)]
pub struct Flushed {
    /// The frames to send, in order.
    pub frames: Vec<AckFrame>,
    /// The waiters to answer, by the tag (or first tag) they acked.
    pub waiters: Vec<u64>,
    /// The channel is gone.
    pub lost: bool,
}

/// A consumer channel's ack tracker; each waiter is known by the tag it acked.
#[derive(Debug, Default)]
pub struct AckTracker {
    inner: ack::AckTracker<u64>,
}

impl AckTracker {
    /// The reader handed out delivery `tag`.
    pub fn delivered(&mut self, tag: u64) {
        self.inner.delivered(tag);
    }

    /// `tag` is acked.
    pub fn ack(&mut self, tag: u64) {
        self.inner.ack(tag, tag);
    }

    /// `tags` are acked together (`Delivery::ack_all`); the waiter is known by `waiter`.
    pub fn ack_many(&mut self, tags: impl IntoIterator<Item = u64>, waiter: u64) {
        self.inner.ack_many(tags, waiter);
    }

    /// `tag` is released (requeued).
    pub fn release(&mut self, tag: u64) {
        self.inner.release(tag);
    }

    /// The frames that send what was decided since the last flush, on a channel that is
    /// `open` or not.
    pub fn flush(&mut self, open: bool) -> Flushed {
        let flush = self.inner.flush(open);
        Flushed {
            frames: flush
                .frames
                .into_iter()
                .map(|frame| match frame {
                    ack::Frame::Release(tag) => AckFrame::Release(tag),
                    ack::Frame::Ack { tag, multiple } => AckFrame::Ack { tag, multiple },
                })
                .collect(),
            waiters: flush.waiters,
            lost: flush.lost,
        }
    }
}
