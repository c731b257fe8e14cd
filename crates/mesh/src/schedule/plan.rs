//! What to do with a scheduled event now, from its due time and the hops of its ladder: no
//! I/O, no clock of its own (the caller says what time it is).

use std::time::Duration;

use mesh_core::{codec, Timestamp, WireMessage};

/// The hops of a schedule queue's ladder, the shortest first: its retry steps
/// (`scheduled.<module>.events.retry.<hop>`). A copy waits on the longest hop that does not
/// pass its due time, comes back, and is looked at again; within the shortest hop of its
/// due time it is held by the forwarder itself until it is due.
pub const HOPS: [Duration; 5] = [
    Duration::from_secs(1),
    Duration::from_secs(5),
    Duration::from_secs(30),
    Duration::from_secs(120),
    Duration::from_secs(600),
];

/// The shortest hop a bus accepts as its longest: the ladder needs one.
pub const MIN_LONGEST_HOP: Duration = Duration::from_secs(1);

/// The longest hop a bus accepts: a hop is a copy held unacked by a retry forwarder, whose
/// steps are at most 15 minutes (RabbitMQ's default consumer timeout is 30).
pub const MAX_LONGEST_HOP: Duration = Duration::from_secs(15 * 60);

/// The hops of [`HOPS`] no longer than `longest` (which must be at least [`MIN_LONGEST_HOP`]).
pub fn hops_up_to(longest: Duration) -> Vec<Duration> {
    HOPS.iter().copied().filter(|hop| *hop <= longest).collect()
}

/// What a forwarder does with a scheduled copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Due: emit it to `mesh.events`, then ack it.
    Emit,
    /// Due within the shortest hop: hold it (unacked) for this long, then look again.
    Hold(Duration),
    /// Send it down hop `n` of the ladder (a copy, confirmed, then the ack).
    Hop(usize),
}

/// What to do with a copy due at `due` when it is `now`, on a ladder of `hops` (the shortest
/// first, not empty). Never [`Next::Emit`] before `due`; a hop never ends past `due`.
pub fn next(due: Timestamp, now: Timestamp, hops: &[Duration]) -> Next {
    let left = due.unix_nanos() - now.unix_nanos();
    if left <= 0 {
        return Next::Emit;
    }
    let left = Duration::from_nanos(u64::try_from(left).unwrap_or(u64::MAX));
    match hops.iter().rposition(|hop| *hop <= left) {
        Some(n) => Next::Hop(n),
        None => Next::Hold(left),
    }
}

/// Why a copy in a schedule queue is not a scheduled event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DueError {
    /// It has no `x-mesh-due`.
    #[error("no `x-mesh-due` header")]
    Missing,
    /// Its `x-mesh-due` is not an RFC 3339 time within range.
    #[error("`x-mesh-due` is not an RFC 3339 time")]
    Malformed,
}

/// The due time a copy carries (`x-mesh-due`).
pub fn due_of(message: &WireMessage) -> Result<Timestamp, DueError> {
    let value = message.header(codec::DUE).ok_or(DueError::Missing)?;
    let text = value.as_str().ok_or(DueError::Malformed)?;
    Timestamp::parse(text).map_err(|_| DueError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use mesh_core::HeaderValue;
    use proptest::prelude::*;

    fn at(seconds: i64, nanos: u64) -> Timestamp {
        Timestamp::from_unix_seconds(seconds)
            .and_then(|t| t.checked_add(Duration::from_nanos(nanos)))
            .expect("in range")
    }

    #[test]
    fn a_copy_takes_the_longest_hop_that_ends_before_it_is_due() {
        let now = at(1_000_000, 0);
        let after = |d: Duration| now.checked_add(d).expect("in range");
        assert_eq!(next(now, now, &HOPS), Next::Emit);
        assert_eq!(next(at(999_999, 0), now, &HOPS), Next::Emit);
        assert_eq!(
            next(after(Duration::from_millis(300)), now, &HOPS),
            Next::Hold(Duration::from_millis(300))
        );
        assert_eq!(
            next(after(Duration::from_secs(1)), now, &HOPS),
            Next::Hop(0)
        );
        assert_eq!(
            next(after(Duration::from_secs(29)), now, &HOPS),
            Next::Hop(1)
        );
        assert_eq!(
            next(after(Duration::from_secs(86_400)), now, &HOPS),
            Next::Hop(4)
        );
        let short = hops_up_to(Duration::from_secs(5));
        assert_eq!(short, vec![Duration::from_secs(1), Duration::from_secs(5)]);
        assert_eq!(
            next(after(Duration::from_secs(86_400)), now, &short),
            Next::Hop(1)
        );
    }

    #[test]
    fn the_due_time_is_read_from_its_header_or_refused() {
        let mut message = WireMessage::new("module.a.b", "{}");
        assert_eq!(due_of(&message), Err(DueError::Missing));
        message
            .properties
            .headers
            .insert(codec::DUE.to_owned(), HeaderValue::Str("tomorrow".into()));
        assert_eq!(due_of(&message), Err(DueError::Malformed));
        message
            .properties
            .headers
            .insert(codec::DUE.to_owned(), HeaderValue::Int(5));
        assert_eq!(due_of(&message), Err(DueError::Malformed));
        message.properties.headers.insert(
            codec::DUE.to_owned(),
            HeaderValue::Str("2026-12-07T10:00:00.250Z".into()),
        );
        assert_eq!(
            due_of(&message).map(|t| t.unix_nanos()),
            Ok(i128::from(1_796_637_600_i64) * 1_000_000_000 + 250_000_000)
        );
    }

    proptest! {
        /// Never emitted early, and a hop never carries a copy past its due time.
        #[test]
        fn never_early_and_no_hop_past_due(
            now_s in 0i64..4_000_000_000,
            now_ns in 0u64..1_000_000_000,
            ahead_ns in -10_000_000_000_000i64..10_000_000_000_000,
            longest_s in 1u64..=900,
        ) {
            let now = at(now_s, now_ns);
            let due = if ahead_ns >= 0 {
                now.checked_add(Duration::from_nanos(ahead_ns.unsigned_abs()))
            } else {
                now.checked_sub(Duration::from_nanos(ahead_ns.unsigned_abs()))
            };
            let Some(due) = due else { return Ok(()) };
            let hops = hops_up_to(Duration::from_secs(longest_s));
            let left = due.unix_nanos() - now.unix_nanos();
            match next(due, now, &hops) {
                Next::Emit => prop_assert!(left <= 0),
                Next::Hold(d) => {
                    prop_assert!(left > 0);
                    prop_assert_eq!(i128::try_from(d.as_nanos()).ok(), Some(left));
                    prop_assert!(d < hops[0]);
                }
                Next::Hop(n) => {
                    prop_assert!(i128::try_from(hops[n].as_nanos()).is_ok_and(|h| h <= left));
                    prop_assert!(hops.get(n + 1).is_none_or(|h| i128::try_from(h.as_nanos()).is_ok_and(|h| h > left)));
                }
            }
        }

        /// Any header value: a due time or a typed refusal, never a panic.
        #[test]
        fn any_due_header_is_read_or_refused(text in ".{0,64}") {
            let mut message = WireMessage::new("module.a.b", "{}");
            message.properties.headers.insert(codec::DUE.to_owned(), HeaderValue::Str(text));
            let _ = due_of(&message);
        }
    }
}
