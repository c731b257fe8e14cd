//! The clock scheduled events are due by: the system's, or, on the test harness's
//! in-memory broker, tokio's, so that a paused test clock (`start_paused = true`) moves
//! due times as it moves the ladder's hops.

use mesh_core::Timestamp;
use tokio::time::Instant;

/// What "now" is for a bus's scheduled events: the time `emit_after` counts from and the
/// time its forwarder compares due times with.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) enum Clock {
    /// The system's wall clock ([`Timestamp::now`]).
    #[default]
    System,
    /// The wall time `wall` at tokio's instant `at`, moved on by tokio's clock since: under
    /// a paused runtime it advances with the paused clock (and with real time otherwise).
    Tokio {
        /// The wall time when the clock was made.
        wall: Timestamp,
        /// tokio's instant when the clock was made.
        at: Instant,
    },
}

impl Clock {
    /// A clock that follows tokio's from now on.
    #[cfg_attr(not(feature = "testing"), allow(dead_code))]
    pub(crate) fn tokio() -> Clock {
        Clock::Tokio {
            wall: Timestamp::now(),
            at: Instant::now(),
        }
    }

    /// The time now by this clock.
    pub(crate) fn now(&self) -> Timestamp {
        match self {
            Clock::System => Timestamp::now(),
            Clock::Tokio { wall, at } => wall
                .checked_add(at.elapsed())
                .unwrap_or_else(Timestamp::now),
        }
    }
}
