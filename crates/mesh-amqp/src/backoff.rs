//! Exponential backoff with jitter, for reconnects and re-attaches.
//!
//! The delay doubles from the minimum up to the maximum with each consecutive failure, and
//! each delay is drawn at random from its upper half ("equal jitter"): a broker that drops a
//! thousand clients at once is not hit by a thousand reconnects in the same millisecond,
//! while no client waits much less than the schedule says.

use std::time::Duration;

use crate::options::AmqpOptions;

/// A backoff schedule and how far along it is.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    min: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    pub(crate) fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max: max.max(min),
            failures: 0,
        }
    }

    /// The schedule of [`AmqpOptions::reconnect_backoff`].
    pub(crate) fn from_options(options: &AmqpOptions) -> Backoff {
        let (min, max) = options.get_reconnect_backoff();
        Backoff::new(min, max)
    }

    /// The delay before the next attempt; counts one more failure.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let doubled = self
            .min
            .saturating_mul(1u32 << self.failures.min(31))
            .min(self.max);
        self.failures = self.failures.saturating_add(1);
        jitter(doubled)
    }

    /// Consecutive failures so far.
    pub(crate) fn failures(&self) -> u32 {
        self.failures
    }

    /// Back to the start of the schedule (after a success).
    pub(crate) fn reset(&mut self) {
        self.failures = 0;
    }
}

/// A delay drawn uniformly from `[base / 2, base]`.
fn jitter(base: Duration) -> Duration {
    let half = base / 2;
    half + (base - half).mul_f64(random_unit())
}

/// A random number in `[0, 1]`. A v4 UUID is 122 random bits from the OS, which saves a
/// dependency for a value that only needs to differ between clients.
fn random_unit() -> f64 {
    let bits = uuid::Uuid::new_v4().as_u128() as u64;
    bits as f64 / u64::MAX as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_within_jitter_up_to_the_maximum() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(5));
        let mut base = Duration::from_millis(100);
        for _ in 0..12 {
            let delay = backoff.next_delay();
            assert!(
                delay >= base / 2 && delay <= base,
                "{delay:?} not in [{:?}, {base:?}]",
                base / 2
            );
            base = (base * 2).min(Duration::from_secs(5));
        }
        assert_eq!(backoff.failures(), 12);
        // Capped: many failures later the delay is still at most the maximum.
        for _ in 0..100 {
            assert!(backoff.next_delay() <= Duration::from_secs(5));
        }
    }

    #[test]
    fn reset_starts_over() {
        let mut backoff = Backoff::new(Duration::from_millis(10), Duration::from_secs(1));
        for _ in 0..5 {
            backoff.next_delay();
        }
        backoff.reset();
        assert_eq!(backoff.failures(), 0);
        assert!(backoff.next_delay() <= Duration::from_millis(10));
    }

    #[test]
    fn jitter_spreads_delays() {
        let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(1));
        let delays: std::collections::BTreeSet<Duration> =
            (0..20).map(|_| backoff.next_delay()).collect();
        assert!(delays.len() > 10, "{delays:?}");
    }
}
