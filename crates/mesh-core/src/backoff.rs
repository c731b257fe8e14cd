//! The one backoff schedule of the workspace: exponential, capped, with jitter, as plain data.
//!
//! Every loop in mesh that waits between attempts (a connection's owner reconnecting, a
//! consumer re-attaching, the audit logger retrying its database or its broker, the fault
//! scenarios' load generator) draws its delays here; the loops themselves own the waiting.
//!
//! The delay doubles from the minimum up to the maximum with each consecutive failure, and
//! each delay is drawn at random from its upper half ("equal jitter"): a broker that drops a
//! thousand clients at once is not hit by a thousand reconnects in the same millisecond,
//! while no client waits much less than the schedule says.
//!
//! No I/O: the randomness is a v4 UUID's bits, which the `uuid` crate already draws for
//! event ids.

use std::time::Duration;

/// A backoff schedule and how far along it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    failures: u32,
}

impl Backoff {
    /// A schedule from `min`, doubling up to `max` (a `max` below `min` is `min`).
    pub fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max: max.max(min),
            failures: 0,
        }
    }

    /// The delay before the next attempt; counts one more failure.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.delay_after(self.failures);
        self.failures = self.failures.saturating_add(1);
        delay
    }

    /// The delay the schedule gives after `failures` earlier consecutive failures (`0` for
    /// the first wait), jittered, without counting anything: for a caller that counts
    /// failures itself (shared between tasks, say).
    pub fn delay_after(&self, failures: u32) -> Duration {
        let doubled = self
            .min
            .saturating_mul(1u32 << failures.min(31))
            .min(self.max);
        jitter(doubled)
    }

    /// Consecutive failures so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Back to the start of the schedule (after a success).
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

/// A delay drawn uniformly from `[base / 2, base]`.
fn jitter(base: Duration) -> Duration {
    let half = base / 2;
    half + (base - half).mul_f64(random_unit())
}

/// A random number in `[0, 1]`. A v4 UUID is 122 random bits, which saves a dependency for
/// a value that only needs to differ between clients.
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

    #[test]
    fn delay_after_follows_the_schedule_without_counting() {
        let backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(1));
        for (failures, base) in [(0, 50), (1, 100), (4, 800), (5, 1_000), (40, 1_000)] {
            let base = Duration::from_millis(base);
            let delay = backoff.delay_after(failures);
            assert!(
                delay >= base / 2 && delay <= base,
                "after {failures}: {delay:?} not in [{:?}, {base:?}]",
                base / 2
            );
        }
        assert_eq!(backoff.failures(), 0);
    }

    #[test]
    fn a_maximum_below_the_minimum_is_the_minimum() {
        let mut backoff = Backoff::new(Duration::from_secs(2), Duration::from_secs(1));
        for _ in 0..5 {
            let delay = backoff.next_delay();
            assert!(delay >= Duration::from_secs(1) && delay <= Duration::from_secs(2));
        }
    }
}
