//! What a program can watch while the transport recovers: [`Lifecycle`] events, sent on a
//! broadcast channel ([`AmqpTransport::lifecycle`](crate::AmqpTransport::lifecycle)) and
//! logged with `tracing` where they happen, plus the counters behind
//! [`AmqpStats`](crate::AmqpStats).
//!
//! Events are for watching, not for correctness: a receiver that falls behind loses the
//! oldest ones (`RecvError::Lagged`), and nothing in the transport waits for anyone to read
//! them. [`AmqpTransport::health`](crate::AmqpTransport::health) is the state to act on.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;
use tokio_util::task::TaskTracker;

/// Declarations in flight together at most (per replay, or per transport for the
/// subscriptions starting), each on a channel of its own (see [`crate::lanes`]).
pub(crate) const DECLARE_LANES: usize = 16;

/// How long closing a transport waits for its channels to be closed before it closes the
/// connections anyway: each close is one round trip, so only an unresponsive broker takes
/// this long.
pub(crate) const CHANNELS_CLOSE_WAIT: Duration = Duration::from_secs(10);

/// How many events a slow receiver may fall behind before it loses the oldest.
const EVENT_BUFFER: usize = 1024;

/// Which of the transport's two connections an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Link {
    /// `<prefix>.publish`: publishes and their confirms.
    Publish,
    /// `<prefix>.consume`: declarations, consumers and RPC replies.
    Consume,
}

impl Link {
    /// `publish` or `consume`, as in the connection's name.
    pub const fn as_str(self) -> &'static str {
        match self {
            Link::Publish => "publish",
            Link::Consume => "consume",
        }
    }
}

impl fmt::Display for Link {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Something that happened to the transport's connections or consumers.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Lifecycle {
    /// A connection is up: after a reconnect of the consume connection, the topology has
    /// been declared again (consumers re-attach next, each with its own event).
    Connected {
        /// Which connection.
        link: Link,
        /// The broker node, `host:port`.
        address: String,
        /// Whether this replaces a lost connection (`false` only for the first one).
        reconnect: bool,
    },
    /// A connection was lost; the transport reconnects with backoff.
    Disconnected {
        /// Which connection.
        link: Link,
        /// Why, as far as known: the broker's close, or a network failure or missed heartbeats.
        reason: String,
    },
    /// A reconnect attempt failed; the next one follows after `retry_in`.
    ReconnectFailed {
        /// Which connection.
        link: Link,
        /// Consecutive failed attempts so far.
        attempt: u32,
        /// The delay before the next attempt.
        retry_in: Duration,
        /// Why it failed.
        reason: String,
    },
    /// The broker blocked the connection (a memory or disk alarm): publishes wait in the
    /// unconfirmed window until it unblocks.
    Blocked {
        /// Which connection.
        link: Link,
        /// The broker's reason, e.g. `low on memory`.
        reason: String,
    },
    /// The broker unblocked the connection.
    Unblocked {
        /// Which connection.
        link: Link,
    },
    /// The broker closed a channel while its connection stayed up (a refused declaration, a
    /// message over the broker's size limit, a consumer timeout, …).
    ChannelClosed {
        /// The connection the channel belonged to.
        link: Link,
        /// The AMQP reply code, e.g. 406.
        code: u16,
        /// The broker's text.
        reason: String,
    },
    /// A consumer stopped without being asked to: the broker cancelled it (its queue was
    /// deleted), closed its channel, or the connection was lost. It is re-attached.
    ConsumerCancelled {
        /// The queue it consumed.
        queue: String,
        /// Why, as far as known.
        reason: String,
    },
    /// A consumer is attached again, with its prefetch, and its subscription keeps being fed.
    ConsumerReattached {
        /// The queue it consumes (for an ephemeral subscription: its new server-named queue).
        queue: String,
    },
    /// The transport was closed by its owner.
    Closed,
}

/// The counters behind [`AmqpStats`](crate::AmqpStats) that more than one task updates.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Connections re-established after a loss (both connections).
    pub(crate) reconnects: AtomicU64,
    /// Publishes sent again on a new channel after a loss.
    pub(crate) resent: AtomicU64,
    /// Channels the broker closed while their connection stayed up.
    pub(crate) channel_closes: AtomicU64,
    /// Of those, closes for an ack with a delivery tag the channel does not know.
    pub(crate) unknown_tag_closes: AtomicU64,
    /// Consumers that stopped without being asked to.
    pub(crate) consumer_cancels: AtomicU64,
    /// Consumers attached again after stopping.
    pub(crate) reattached: AtomicU64,
    /// `basic.return`s that matched no unsettled mandatory publish.
    pub(crate) unmatched_returns: AtomicU64,
    /// Publishing channels replaced because the broker nacked everything on them.
    pub(crate) nack_run_reopens: AtomicU64,
    /// Publishing channels replaced because nothing was confirmed on them for a while.
    pub(crate) stuck_reopens: AtomicU64,
    /// Deliveries that came to a consumer's queue by a foreign path (see
    /// `consumer::path`), or to the reply queue by another way than a reply exchange under
    /// its reply key: never handed on.
    pub(crate) foreign_deliveries: AtomicU64,
    /// Declarations sent (exchanges, queues, bindings, passive ones included), shared with
    /// every declare channel's [`CloseSlot`](crate::declare::CloseSlot).
    pub(crate) declarations: Arc<AtomicU64>,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// What every task of one transport shares: the counters, the event channel, and the
/// tasks that close channels of their own.
#[derive(Debug)]
pub(crate) struct TransportShared {
    pub(crate) counters: Counters,
    events: broadcast::Sender<Lifecycle>,
    /// Every task that may close a channel by itself, or hand one out: the consumers'
    /// pumps and ack trackers (until the closing transport made them close their channel),
    /// the reply queue's receiver, and the tasks opening channels for the consume link.
    /// Closing a connection first waits for them (see [`TransportShared::channels_closed`]).
    ///
    /// Why: a channel close is a round trip whose answer (`channel.close-ok`) the client
    /// library hands to the task that asked, and it panics (an `unwrap` in its channel
    /// dispatcher) when that task is gone by then, as it is when the runtime shuts down
    /// right after the program closed its transport. So no close may still be in flight
    /// when `close()` returns; likewise no channel may be dropped open, since the library
    /// then closes it on a task of its own, which nobody waits for.
    pub(crate) channel_tasks: TaskTracker,
    /// Lanes of declarations in flight together for the subscriptions starting (see
    /// [`crate::lanes`]).
    pub(crate) declare_lanes: tokio::sync::Semaphore,
}

impl Default for TransportShared {
    fn default() -> Self {
        TransportShared {
            counters: Counters::default(),
            events: broadcast::channel(EVENT_BUFFER).0,
            channel_tasks: TaskTracker::new(),
            declare_lanes: tokio::sync::Semaphore::new(DECLARE_LANES),
        }
    }
}

impl TransportShared {
    /// Sends `event` to whoever listens (nobody, often: that is fine).
    pub(crate) fn emit(&self, event: Lifecycle) {
        let _ = self.events.send(event);
    }

    /// Resolves once every task of [`channel_tasks`](TransportShared::channel_tasks) is done with
    /// its channel, or after [`CHANNELS_CLOSE_WAIT`] (a broker that stopped answering: its
    /// closes will never be acknowledged, so nothing can arrive late). Call it once the
    /// tasks were told to stop (the transport's shutdown signal).
    pub(crate) async fn channels_closed(&self) {
        self.channel_tasks.close();
        if tokio::time::timeout(CHANNELS_CLOSE_WAIT, self.channel_tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                tasks = self.channel_tasks.len(),
                wait = ?CHANNELS_CLOSE_WAIT,
                "channels still closing; closing the connection anyway"
            );
        }
    }

    /// A new receiver of the events from now on.
    pub(crate) fn subscribe(&self) -> broadcast::Receiver<Lifecycle> {
        self.events.subscribe()
    }
}
