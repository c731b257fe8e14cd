//! [`Health`]: whether a transport's connections are ready, for readiness checks.

/// The health of a transport's connections, for readiness checks.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Health {
    /// Connected to a broker (always, for the memory transport).
    pub connected: bool,
    /// The broker blocked publishing (a memory or disk alarm).
    pub blocked: bool,
    /// Consumers the transport should have attached: one per subscription (a transport's
    /// helpers, like the RabbitMQ transport's retry forwarders, are not counted).
    pub consumers_expected: usize,
    /// Consumers attached now.
    pub consumers_attached: usize,
}

impl Health {
    /// Connected, not blocked and every consumer attached.
    pub fn is_ready(&self) -> bool {
        self.connected && !self.blocked && self.consumers_attached >= self.consumers_expected
    }
}
