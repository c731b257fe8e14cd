//! How a soak runs: the options it is given ([`SoakOptions`]) and the harness's fixed
//! settings (its vhost and queues, paces, heartbeats and the bounds of every wait).

use std::path::PathBuf;
use std::time::Duration;

/// How to run a soak.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    /// How long the load runs (faults are planned within it).
    pub duration: Duration,
    /// The seed of the fault plan.
    pub seed: u64,
    /// The `faults-worker` program (its path).
    pub worker: PathBuf,
    /// The fewest faults that must have been injected for the soak to count.
    pub min_faults: usize,
}

/// The seed the test suite's soak runs with: fixed, so that a landing gate is not a lottery
/// (a plan that once balanced its books, `cargo test -p mesh-faults --test soak`, 232 s).
pub const CI_SEED: u64 = 10_335_749_935_326_308_013;

/// The seed `text` names: a number, or `random` for a fresh one (drawn here, so the caller
/// prints what it got and a failure replays). `None` if it is neither.
pub fn parse_seed(text: &str) -> Option<u64> {
    match text.trim() {
        "random" => Some(rand::random()),
        number => number.parse().ok(),
    }
}

/// The vhost the soak runs in.
pub(super) const VHOST: &str = "soak";
/// The consumers' queue, `<node>.<module>.events`.
pub(super) const CONSUMER_QUEUE: &str = "faults.crowd.events";
/// The audit logger's queue.
pub(super) const AUDIT_QUEUE: &str = "faults.audit-logger.events";
/// The longest a node may take to boot and rejoin.
pub(super) const REJOIN: Duration = Duration::from_secs(150);
/// The longest any single wait of the harness (a child ready, a drain, an RPC loop's end).
pub(super) const WAIT: Duration = Duration::from_secs(90);
/// How long, once the load stopped and the faults were lifted, the queues may take to drain.
pub(super) const SETTLE: Duration = Duration::from_secs(240);
/// How long, once the queues drained, the consumers' last lines may take to be read.
pub(super) const LINES_AFTER_DRAIN: Duration = Duration::from_secs(30);
/// The pace of each emitter's fresh events, and of the RPC calls.
pub(super) const EMIT_PACE: Duration = Duration::from_millis(40);
pub(super) const CALL_PACE: Duration = Duration::from_millis(150);
/// RPC calls in flight at most, and each call's timeout.
pub(super) const CALLS_IN_FLIGHT: usize = 8;
pub(super) const CALL_TIMEOUT: Duration = Duration::from_secs(20);
/// The clients' AMQP heartbeat: short, so that a blackholed connection is noticed soon.
pub(super) const HEARTBEAT_SECS: u64 = 5;
/// The consumers' prefetch.
pub(super) const PREFETCH: u16 = 16;
/// The failure kinds an RPC call may end with under faults: the transport's, all retryable.
pub(super) const RPC_FAILURE_KINDS: [&str; 6] = [
    "ConnectionLost",
    "Timeout",
    "Nacked",
    "Backpressure",
    "NoServer",
    "Unroutable",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_is_a_number_or_random() {
        assert_eq!(parse_seed("42"), Some(42));
        assert_eq!(
            parse_seed(" 18239912604424726370 "),
            Some(18_239_912_604_424_726_370)
        );
        assert_eq!(parse_seed("-1"), None);
        assert_eq!(parse_seed("fresh"), None);
        assert_eq!(parse_seed(""), None);
        // Fresh each time: two draws of 64 bits agree by chance once in 2^64.
        let (a, b) = (parse_seed("random"), parse_seed("random"));
        assert!(a.is_some() && b.is_some() && a != b);
    }
}
