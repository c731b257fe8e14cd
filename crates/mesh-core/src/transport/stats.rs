//! [`TransportStats`]: a transport's counters and gauges, for metrics.

use std::time::Duration;

/// Counters and gauges of a transport's connections, for metrics. Counters only grow over
/// the transport's life.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransportStats {
    /// Publishes sent and not yet confirmed (gauge).
    pub unconfirmed: u64,
    /// Their bytes (gauge).
    pub unconfirmed_bytes: u64,
    /// Reconnects of any of its connections (counter).
    pub reconnects: u64,
    /// Publishes sent again after a lost channel or connection (counter).
    pub resent: u64,
    /// Time spent blocked by the broker (counter).
    pub blocked_time: Duration,
    /// Consumers re-attached after a loss (counter).
    pub reattached: u64,
    /// RPC replies nobody waited for any more (counter).
    pub late_replies: u64,
}
