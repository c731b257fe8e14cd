//! The reconnect and re-attach backoff: the workspace's one schedule
//! ([`mesh_core::backoff::Backoff`]), set from [`AmqpOptions::reconnect_backoff`].
//!
//! A thin wrapper so the connection owners keep one constructor from their options; the
//! schedule itself (doubling, capped, equal jitter) and its tests live in mesh-core.

use std::time::Duration;

use crate::options::AmqpOptions;

/// A backoff schedule and how far along it is.
#[derive(Debug, Clone)]
pub(crate) struct Backoff(mesh_core::backoff::Backoff);

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Backoff {
        Backoff(mesh_core::backoff::Backoff::new(min, max))
    }

    /// The schedule of [`AmqpOptions::reconnect_backoff`].
    pub(crate) fn from_options(options: &AmqpOptions) -> Backoff {
        let (min, max) = options.get_reconnect_backoff();
        Backoff::new(min, max)
    }

    /// The delay before the next attempt; counts one more failure.
    pub(crate) fn next_delay(&mut self) -> Duration {
        self.0.next_delay()
    }

    /// Consecutive failures so far.
    pub(crate) fn failures(&self) -> u32 {
        self.0.failures()
    }

    /// Back to the start of the schedule (after a success).
    pub(crate) fn reset(&mut self) {
        self.0.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_set_the_schedule() {
        let options = AmqpOptions::default()
            .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(80));
        let mut backoff = Backoff::from_options(&options);
        for base in [20, 40, 80, 80] {
            let base = Duration::from_millis(base);
            let delay = backoff.next_delay();
            assert!(delay >= base / 2 && delay <= base, "{delay:?} for {base:?}");
        }
        assert_eq!(backoff.failures(), 4);
        backoff.reset();
        assert_eq!(backoff.failures(), 0);
    }
}
