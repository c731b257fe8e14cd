//! Policies as plain data: how often and how late a failed event is retried.

use std::time::Duration;

/// How a retryable failure is retried before the event is dead-lettered.
///
/// `max_attempts` counts handler calls, the first one included: with 5, a handler that
/// always fails is called 5 times and the event is then dead-lettered. The delay before
/// retry `n` (1-based) is `delays[n - 1]`, or the last step once the list runs out, so the
/// list is also the set of retry queues a broker-backed transport declares. The RabbitMQ
/// transport takes steps of at most 15 minutes (a retry forwarder holds a copy unacked for
/// its step; see `docs/CONTRACT.md`, "Retry forwarders").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    max_attempts: u32,
    delays: Vec<Duration>,
}

/// Why a retry policy was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// `max_attempts` must be at least 1.
    #[error("max attempts must be at least 1")]
    NoAttempts,
    /// A policy that retries needs at least one delay step.
    #[error("a policy that retries needs at least one delay step")]
    NoDelays,
    /// Delay steps must be at least a millisecond (a broker TTL is in milliseconds).
    #[error("delay step {index} is shorter than a millisecond")]
    DelayTooShort {
        /// The step's index.
        index: usize,
    },
    /// Too many distinct steps (each is a queue on the broker).
    #[error("{steps} delay steps, at most {max} are allowed")]
    TooManySteps {
        /// Steps given.
        steps: usize,
        /// The limit.
        max: usize,
    },
}

impl RetryPolicy {
    /// The most delay steps a policy may have: each becomes a retry queue.
    pub const MAX_STEPS: usize = 16;

    /// A policy with the given attempts and delay steps.
    pub fn new(max_attempts: u32, delays: Vec<Duration>) -> Result<RetryPolicy, PolicyError> {
        if max_attempts == 0 {
            return Err(PolicyError::NoAttempts);
        }
        if max_attempts > 1 && delays.is_empty() {
            return Err(PolicyError::NoDelays);
        }
        if delays.len() > Self::MAX_STEPS {
            return Err(PolicyError::TooManySteps {
                steps: delays.len(),
                max: Self::MAX_STEPS,
            });
        }
        if let Some(index) = delays.iter().position(|d| d.as_millis() == 0) {
            return Err(PolicyError::DelayTooShort { index });
        }
        Ok(RetryPolicy {
            max_attempts,
            delays,
        })
    }

    /// Exponential steps: `initial`, `initial × factor`, … capped at `max`, one per retry
    /// that `max_attempts` allows.
    pub fn exponential(
        max_attempts: u32,
        initial: Duration,
        factor: u32,
        max: Duration,
    ) -> Result<RetryPolicy, PolicyError> {
        let retries = max_attempts.saturating_sub(1) as usize;
        let mut delays = Vec::with_capacity(retries.min(Self::MAX_STEPS));
        let mut delay = initial;
        for _ in 0..retries.min(Self::MAX_STEPS) {
            let step = delay.min(max);
            if delays.last() != Some(&step) {
                delays.push(step);
            }
            delay = delay.saturating_mul(factor.max(1));
        }
        RetryPolicy::new(max_attempts, delays)
    }

    /// No retries: the first failure dead-letters.
    pub fn no_retries() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 1,
            delays: Vec::new(),
        }
    }

    /// Handler calls allowed, the first included.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The delay steps.
    pub fn delays(&self) -> &[Duration] {
        &self.delays
    }

    /// What to do after the handler failed for the `attempts`-th time (1-based): retry at
    /// step `Some(index)` of [`delays`](Self::delays), or give up with `None`.
    pub fn next_step(&self, attempts: u32) -> Option<usize> {
        if attempts >= self.max_attempts || self.delays.is_empty() {
            return None;
        }
        let index = (attempts.max(1) - 1) as usize;
        Some(index.min(self.delays.len() - 1))
    }
}

impl Default for RetryPolicy {
    /// 5 attempts, retried after 1 s, 5 s, 25 s and 2 min.
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            delays: vec![
                Duration::from_secs(1),
                Duration::from_secs(5),
                Duration::from_secs(25),
                Duration::from_secs(120),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_five_attempts_with_growing_delays() {
        let policy = RetryPolicy::default();
        assert_eq!(policy.max_attempts(), 5);
        assert_eq!(policy.next_step(1), Some(0));
        assert_eq!(policy.next_step(4), Some(3));
        assert_eq!(policy.next_step(5), None);
        assert!(policy.delays().windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn the_last_step_repeats_when_steps_run_out() {
        let policy = RetryPolicy::new(10, vec![Duration::from_secs(1)]).unwrap();
        assert_eq!(policy.next_step(1), Some(0));
        assert_eq!(policy.next_step(9), Some(0));
        assert_eq!(policy.next_step(10), None);
    }

    #[test]
    fn exponential_is_bounded() {
        let policy = RetryPolicy::exponential(
            8,
            Duration::from_millis(100),
            2,
            Duration::from_millis(1000),
        )
        .unwrap();
        assert_eq!(
            policy.delays(),
            &[100, 200, 400, 800, 1000].map(Duration::from_millis)
        );
    }

    #[test]
    fn bad_policies_are_refused() {
        assert_eq!(RetryPolicy::new(0, vec![]), Err(PolicyError::NoAttempts));
        assert_eq!(RetryPolicy::new(3, vec![]), Err(PolicyError::NoDelays));
        assert_eq!(
            RetryPolicy::new(3, vec![Duration::ZERO]),
            Err(PolicyError::DelayTooShort { index: 0 })
        );
        assert!(RetryPolicy::new(1, vec![]).is_ok());
        assert_eq!(RetryPolicy::no_retries().next_step(1), None);
    }
}
