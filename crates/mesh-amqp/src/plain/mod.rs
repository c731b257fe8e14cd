//! Fire-and-forget messages on one topic exchange, for crates that must speak to the broker
//! without naming the client library (mesh-logs): a supervised connection ([`PlainLink`]),
//! its publishers ([`PlainPublisher`]: transient, no confirms) and its followers
//! ([`PlainFollower`]: an exclusive, auto-delete, server-named queue bound to a pattern,
//! consumed with automatic acks).
//!
//! Nothing here is at-least-once, on purpose: no confirm is awaited, no delivery acked, no
//! message kept on disk. What it guarantees is that nobody waits on the broker longer than a
//! bounded round trip, and that a lost connection comes back by itself.
//!
//! **Who owns what.** The connection is a consume link (`link`): its supervisor owns it,
//! reconnects with the options' backoff, and declares the link's exchange again on every new
//! connection, exactly as for the transport's consume side. Publishers and followers only
//! hold channels the supervisor handed out; once the connection is lost theirs fail (a
//! publish returns `ConnectionLost`, a follower's stream ends), and a publisher is replaced
//! with [`PlainLink::publisher_retrying`], which waits for the supervisor's next connection.
//! The connection is named `<prefix>.consume` after the options' connection-name prefix.

use mesh_core::text::EscapedDisplay;
use std::sync::{Arc, Mutex};

use mesh_core::{TopicPattern, TransportError};

use crate::connection::backoff::Backoff;
use crate::connection::link::{ConsumeLink, LinkStatus};
use crate::connection::state::sleep_opt;
use crate::convert::check_short;
use crate::lifecycle::TransportShared;
use crate::options::AmqpOptions;
use crate::topology::{ExchangeDecl, Topology};

mod client;

pub use client::CLIENT_LOG_TARGET;

/// A supervised connection for transient messages on one durable topic exchange.
///
/// Cheap to clone; every clone handles the same connection. [`close`](PlainLink::close)
/// closes it for all of them.
#[derive(Debug, Clone)]
pub struct PlainLink {
    link: ConsumeLink,
    exchange: ExchangeDecl,
    options: AmqpOptions,
}

impl PlainLink {
    /// Opens the connection `<prefix>.consume` to the first node of `options` that answers,
    /// declares `exchange` (a durable topic exchange) and starts the connection's owner,
    /// which reconnects after a loss and declares the exchange again.
    ///
    /// Fails if no node answers (`ConnectionLost`, retryable), the login is refused
    /// (`AccessRefused`) or the exchange cannot be declared (`Incompatible` if it exists
    /// with other arguments).
    pub async fn open(options: &AmqpOptions, exchange: &str) -> Result<PlainLink, TransportError> {
        check_short("an exchange name", exchange)?;
        let exchange = ExchangeDecl {
            name: exchange.to_owned(),
            kind: "topic".to_owned(),
            durable: true,
        };
        let mut topology = Topology::new();
        topology.add_exchange(exchange.clone());
        let link = ConsumeLink::start(
            options,
            Arc::new(TransportShared::default()),
            Arc::new(Mutex::new(topology)),
        )
        .await?;
        let plain = PlainLink {
            link,
            exchange,
            options: options.clone(),
        };
        // The supervisor declares the topology after a reconnect, not on the first connection.
        if let Err(error) = plain.declare_exchange().await {
            plain.close().await;
            return Err(error);
        }
        Ok(plain)
    }

    /// As [`open`](PlainLink::open), trying again after each failure, on the options'
    /// [reconnect backoff](AmqpOptions::reconnect_backoff), until it succeeds: for a
    /// background task that must not give up (each failure is logged). Drop the future to
    /// stop trying.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped attempt leaves no connection behind.
    pub async fn open_retrying(options: &AmqpOptions, exchange: &str) -> PlainLink {
        let mut backoff = Backoff::from_options(options);
        loop {
            match PlainLink::open(options, exchange).await {
                Ok(plain) => return plain,
                Err(error) => {
                    let delay = backoff.next_delay();
                    tracing::warn!(
                        exchange = %EscapedDisplay(&exchange),
                        error = %EscapedDisplay(&error),
                        retry_in = ?delay,
                        attempt = backoff.failures(),
                        "cannot open the connection; retrying"
                    );
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }

    /// The exchange it publishes to and follows.
    pub fn exchange(&self) -> &str {
        &self.exchange.name
    }

    /// Whether its connection is up now.
    pub fn is_connected(&self) -> bool {
        self.link.state().connected()
    }

    /// A publisher on a channel of the current connection (the exchange declared again on
    /// it, in case it was deleted). Fails at once with `ConnectionLost` while the connection
    /// is down.
    pub async fn publisher(&self) -> Result<PlainPublisher, TransportError> {
        self.declare_exchange().await?;
        let (channel, closed) = self.link.channel("plain publish").await?;
        Ok(PlainPublisher {
            channel: client::Publisher::new(channel, closed),
            exchange: self.exchange.name.clone(),
        })
    }

    /// A publisher, waiting for one as long as it takes: after a failure, until the
    /// connection's owner has a new connection up, or the next backoff delay passed
    /// (a channel-level refusal while the connection stays up). Failures are logged.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is lost; a later call starts over.
    pub async fn publisher_retrying(&self) -> PlainPublisher {
        let mut backoff = Backoff::from_options(&self.options);
        let mut status = self.link.status();
        loop {
            let seen = status.borrow_and_update().generation;
            match self.publisher().await {
                Ok(publisher) => return publisher,
                Err(error) => {
                    let delay = backoff.next_delay();
                    tracing::debug!(error = %EscapedDisplay(&error), retry_in = ?delay, "no publishing channel yet");
                    let retry_at = Some(tokio::time::Instant::now() + delay);
                    tokio::select! {
                        () = newer(&mut status, seen) => {}
                        () = sleep_opt(retry_at) => {}
                    }
                }
            }
        }
    }

    /// Follows the messages published to the exchange under routing keys `pattern` matches:
    /// an exclusive, auto-delete, server-named queue holding at most `max_length` messages
    /// (`x-max-length`: past it the oldest are dropped), bound to `pattern`, consumed with
    /// automatic acks. The queue goes with the follower's channel or connection.
    pub async fn follow(
        &self,
        pattern: &TopicPattern,
        max_length: u32,
    ) -> Result<PlainFollower, TransportError> {
        let (channel, closed) = self.link.channel("plain follow").await?;
        let (channel, queue) =
            client::Follower::start(channel, closed, &self.exchange.name, pattern, max_length)
                .await?;
        tracing::debug!(queue = %EscapedDisplay(&queue), pattern = %EscapedDisplay(&pattern), exchange = %EscapedDisplay(&self.exchange.name), "following");
        Ok(PlainFollower { channel, queue })
    }

    /// Closes the connection and stops its owner; publishers and followers fail or end.
    /// Close them first ([`PlainPublisher::close`], [`PlainFollower::close`]): a channel
    /// still open is dropped with its connection, unacknowledged.
    pub async fn close(&self) {
        // Channels being opened for this link are closed by their tasks if nobody wants
        // them any more: wait for that before the connection goes.
        self.link.shared().channels_closed().await;
        self.link.close().await;
    }

    /// Makes sure the exchange exists, declaring it only when it is missing (a module user
    /// of the access plan may not declare it, see [`crate::declare::ensure_exchange`]).
    async fn declare_exchange(&self) -> Result<(), TransportError> {
        let (declared, declare) =
            crate::declare::ensure_exchange(None, &self.exchange, || self.link.declare_channel())
                .await;
        if let Some(declare) = declare {
            declare.close().await;
        }
        declared
    }
}

/// Resolves once the link is up on a connection newer than `seen`.
async fn newer(status: &mut tokio::sync::watch::Receiver<LinkStatus>, seen: u64) {
    if status
        .wait_for(|s| s.connected && s.generation > seen)
        .await
        .is_err()
    {
        // The supervisor is gone (the link was closed): nothing newer will come.
        std::future::pending::<()>().await;
    }
}

/// Publishes transient messages, without confirms, to its link's exchange, on one channel.
///
/// A publish returns once the message is written to the connection: the broker may still
/// lose it (a message routed to no queue is dropped, by design). After a failed publish the
/// channel is gone: get another from [`PlainLink::publisher_retrying`].
pub struct PlainPublisher {
    channel: client::Publisher,
    exchange: String,
}

impl std::fmt::Debug for PlainPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainPublisher")
            .field("exchange", &self.exchange)
            .field("channel", &self.channel.channel_id())
            .finish_non_exhaustive()
    }
}

impl PlainPublisher {
    /// Publishes `body` under `routing_key`, transient (delivery mode 1), with
    /// `content_type` and the current time as its timestamp. Fails with `ConnectionLost`
    /// when the channel or the connection is gone, or with what the broker said if it
    /// closed the channel.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped publish may or may not have been written.
    pub async fn publish(
        &self,
        routing_key: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> Result<(), TransportError> {
        check_short("a routing key", routing_key)?;
        self.channel
            .publish(&self.exchange, routing_key, content_type, body)
            .await
    }

    /// Closes the channel; what was published before is on the wire ahead of the close, so
    /// the broker has it once the close is acknowledged.
    pub async fn close(self) {
        self.channel.close().await;
    }
}

/// One message a [`PlainFollower`] received.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct PlainMessage {
    /// The routing key it was published under.
    pub routing_key: String,
    /// Its body.
    pub body: Vec<u8>,
}

/// The messages of a pattern on a link's exchange, from the moment
/// [`PlainLink::follow`] returned. At most once: nothing is redelivered.
///
/// The broker pushes without waiting for acks, and the client library buffers what the
/// reader has not taken yet: read promptly, or bound the backlog on the broker with the
/// queue's `max_length`.
pub struct PlainFollower {
    channel: client::Follower,
    queue: String,
}

impl std::fmt::Debug for PlainFollower {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlainFollower")
            .field("queue", &self.queue)
            .field("channel", &self.channel.channel_id())
            .finish_non_exhaustive()
    }
}

impl PlainFollower {
    /// The broker-named queue it reads.
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The next message; `None` once the channel or the connection is gone.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: no message is lost when this future is dropped before it completes.
    pub async fn next(&mut self) -> Option<PlainMessage> {
        let (routing_key, body) = self.channel.next().await?;
        Some(PlainMessage { routing_key, body })
    }

    /// Closes the channel: the broker deletes the queue with it.
    pub async fn close(self) {
        self.channel.close().await;
    }
}
