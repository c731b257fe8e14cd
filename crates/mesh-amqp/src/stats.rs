//! The transport's counters and gauges, as [`AmqpTransport::stats`](crate::AmqpTransport::stats)
//! returns them.

use std::time::Duration;

/// Counters and gauges of the transport: what recovery did, what is in flight, and things
/// that went wrong quietly. A snapshot; see [`AmqpTransport::stats`](crate::AmqpTransport::stats).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AmqpStats {
    /// RPC replies that arrived for no waiting call (late or duplicate), dropped.
    pub late_replies: u64,
    /// `basic.return`s that matched no unsettled mandatory publish.
    pub unmatched_returns: u64,
    /// Publishes accepted and not yet settled by the broker (a gauge; at most the confirm
    /// window).
    pub unconfirmed: usize,
    /// Their body bytes (a gauge; at most `max_unconfirmed_bytes`).
    pub unconfirmed_bytes: usize,
    /// How long the broker blocked a connection (memory or disk alarm), in all, including a
    /// block going on now.
    pub blocked_time: Duration,
    /// Connections re-established after a loss (publish and consume counted alike).
    pub reconnects: u64,
    /// Publishes sent again, on a new channel, after their channel or connection was lost.
    pub resent: u64,
    /// Channels the broker closed while their connection stayed up.
    pub channel_closes: u64,
    /// Of those, closes for an unknown delivery tag (`406 PRECONDITION_FAILED - unknown
    /// delivery tag`): an ack sent on a channel the delivery did not come on. Always 0
    /// unless there is a bug.
    pub unknown_delivery_tag_closes: u64,
    /// Consumers that stopped without being asked to (cancelled by the broker, channel
    /// closed, connection lost); retry forwarders are not counted.
    pub consumer_cancels: u64,
    /// Consumers attached again after stopping; retry forwarders are not counted.
    pub reattached: u64,
    /// Publishing channels replaced because the broker had nacked every publish on them
    /// for a second (a quorum queue's channel tied to a dead leader; see the publisher's
    /// docs).
    pub nack_run_reopens: u64,
    /// Publishing channels replaced because nothing was confirmed on them for 10 s while the
    /// broker did not say it blocks the connection (RabbitMQ 3.10's channel stuck on a quorum
    /// queue's unreachable leader; see the publisher's docs).
    pub stuck_reopens: u64,
    /// Deliveries that came to a consumer's queue by a path mesh sends no event by (an
    /// exchange-to-exchange binding, a foreign publisher), dead-lettered `foreign-path`, and
    /// replies that came to the reply queue by another way than `mesh.replies` (or the
    /// retired `mesh.reply`) under its reply key, dropped: never handed on.
    pub foreign_deliveries: u64,
    /// Declarations sent to the broker (exchanges, queues, bindings and unbindings, passive
    /// ones included): each distinct object once when it is first asked for, and once per
    /// replay after a reconnect.
    pub declarations: u64,
}
