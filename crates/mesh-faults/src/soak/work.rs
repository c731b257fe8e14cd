//! The soak's work as its processes share it: which modules emit, consume, serve and call,
//! what each event's sequence number makes of it ([`fate`]), the consumers' retry ladder and
//! the servers' answer. The binary `faults-worker` reads these too (`soak-consume`, `answer`).

use std::time::Duration;

use mesh::RetryPolicy;

/// The emitting modules.
pub const EMITTERS: [&str; 3] = ["source", "press", "mint"];
/// What the consumers bind: every emitter's events.
pub const PATTERNS: [&str; 3] = ["module.source.#", "module.press.#", "module.mint.#"];
/// The competing consumers' module.
pub const CONSUMER: &str = "crowd";
/// The RPC servers' module, and their tool.
pub const SERVER: &str = "server";
/// The tool the caller calls.
pub const TOOL: &str = "server.answer";
/// The caller's module.
pub const CALLER: &str = "caller";
/// The attempts of the consumers' retry ladder.
pub const ATTEMPTS: u32 = 3;

/// What the consumers do with an event, by its sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fate {
    /// Handled at its first attempt.
    Handled,
    /// Its first `n` attempts fail (retryably); the next is handled.
    Fails(u32),
    /// Every attempt fails: it ends dead-lettered after [`ATTEMPTS`].
    Poison,
}

impl Fate {
    /// Whether the handler fails attempt `attempt` (1-based).
    pub fn fails(self, attempt: u32) -> bool {
        match self {
            Fate::Handled => false,
            Fate::Fails(n) => attempt <= n,
            Fate::Poison => true,
        }
    }
}

/// The fate of the event with sequence number `seq`: about 1 % poison, 20 % failing one or
/// two attempts, the rest handled at once.
pub fn fate(seq: u64) -> Fate {
    if seq % 97 == 13 {
        Fate::Poison
    } else if seq % 10 == 3 {
        Fate::Fails(1)
    } else if seq % 10 == 7 {
        Fate::Fails(2)
    } else {
        Fate::Handled
    }
}

/// The consumers' retry ladder: [`ATTEMPTS`] attempts, 300 ms then 600 ms apart.
pub fn retry_policy() -> RetryPolicy {
    RetryPolicy::new(
        ATTEMPTS,
        vec![Duration::from_millis(300), Duration::from_millis(600)],
    )
    .expect("the soak's retry policy is valid")
}

/// The RPC servers' answer to `n`.
pub fn answer(n: u64) -> u64 {
    n.wrapping_mul(2).wrapping_add(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fates_fail_as_planned() {
        assert_eq!(fate(13), Fate::Poison);
        assert_eq!(fate(3), Fate::Fails(1));
        assert_eq!(fate(7), Fate::Fails(2));
        assert_eq!(fate(1), Fate::Handled);
        assert!(Fate::Fails(2).fails(2) && !Fate::Fails(2).fails(3));
        assert!((1..=ATTEMPTS).all(|a| Fate::Poison.fails(a)));
        // Every planned failure ends before the ladder does.
        assert!((0..1_000).all(|s| match fate(s) {
            Fate::Fails(n) => n < ATTEMPTS,
            _ => true,
        }));
        assert_eq!(answer(20), 41);
    }
}
