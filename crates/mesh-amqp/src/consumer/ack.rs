//! The ack tracker of one consumer channel as a state machine: which delivery tags are
//! handed out and not yet decided, which are decided, and the `basic.ack` / `basic.nack`
//! frames that settle them.
//!
//! It does no I/O and owns no task or lock: the channel's tracker task ([`super`]) feeds it
//! what the reader handed out and what handlers decided, asks it for the frames to send
//! ([`AckTracker::flush`]), sends them, and answers who waits for them. So every ordering
//! of deliveries, decisions and channel losses is tested without a broker (the unit tests
//! below and the property tests of `props`).
//!
//! The rules it keeps:
//!
//! - a delivery is never acked before it is decided: a `multiple` ack covers only the run
//!   below the oldest undecided tag (everything the broker still holds there is decided:
//!   settled earlier, released, or in this batch), and the tags above it go one by one;
//! - releases (`basic.nack` with requeue) go before the acks of the same batch, so a
//!   `multiple` ack never covers one;
//! - a tag belongs to its channel: once the channel is gone, nothing more is sent for it
//!   (the broker has requeued its messages), and whoever waits learns the channel is lost.

use std::collections::BTreeSet;

/// A frame that settles deliveries on the channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Frame {
    /// `basic.nack(tag, multiple = false, requeue = true)`.
    Release(u64),
    /// `basic.ack(tag, multiple)`.
    Ack { tag: u64, multiple: bool },
}

/// What to do after a batch of decisions.
#[derive(Debug)]
pub(crate) struct Flush<W> {
    /// The frames to send, in order (releases first). Empty if the channel is gone.
    pub(crate) frames: Vec<Frame>,
    /// Who waits for the acks among them: answer `Ok` once every ack frame is sent (or the
    /// failure), or, with `lost`, at once that the channel is gone.
    pub(crate) waiters: Vec<W>,
    /// The channel is gone: the decisions died with it.
    pub(crate) lost: bool,
}

/// The ack tracker of one channel; see the module docs. `W` is whoever waits for an ack to
/// be sent (the shell's answer channel).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct AckTracker<W> {
    /// Delivery tags handed out and not yet decided.
    undecided: BTreeSet<u64>,
    /// Acks decided since the last flush.
    acks: Vec<u64>,
    /// Who waits for them.
    waiters: Vec<W>,
    /// Releases decided since the last flush.
    releases: Vec<u64>,
    /// A batch of acks ([`AckTracker::ack_many`]) was decided since the last flush.
    batched: bool,
    /// The channel is gone.
    lost: bool,
}

impl<W> Default for AckTracker<W> {
    fn default() -> Self {
        AckTracker {
            undecided: BTreeSet::new(),
            acks: Vec::new(),
            waiters: Vec::new(),
            releases: Vec::new(),
            batched: false,
            lost: false,
        }
    }
}

impl<W> AckTracker<W> {
    /// The reader handed out delivery `tag`: the right to settle it exists now.
    pub(crate) fn delivered(&mut self, tag: u64) {
        self.undecided.insert(tag);
    }

    /// `tag` is decided: ack it; `waiter` waits for the frame.
    pub(crate) fn ack(&mut self, tag: u64, waiter: W) {
        self.undecided.remove(&tag);
        self.acks.push(tag);
        self.waiters.push(waiter);
    }

    /// `tags` are decided together: ack them all; `waiter` waits for their frames. They go
    /// at the next flush, with no wait for company: its caller gathered them already.
    pub(crate) fn ack_many(&mut self, tags: impl IntoIterator<Item = u64>, waiter: W) {
        for tag in tags {
            self.undecided.remove(&tag);
            self.acks.push(tag);
        }
        self.waiters.push(waiter);
        self.batched = true;
    }

    /// `tag` is decided: requeue it.
    pub(crate) fn release(&mut self, tag: u64) {
        self.undecided.remove(&tag);
        self.releases.push(tag);
    }

    /// Whether to hold the acks decided so far back for more to join them: only acks wait
    /// (a release, a batch of acks, or a channel known lost, goes at once: a batch is what
    /// the wait would gather, and its caller, who gathered it, waits for it), fewer than
    /// `linger_acks` of them, and either handlers still run on other deliveries, or nobody
    /// waits for these acks (`awaited` is false: every one was handed on detached, so
    /// holding it back delays no caller, only the broker's count of unacked messages, while
    /// the next deliveries may already be on their way). A consumer awaiting each ack while
    /// handling one delivery at a time never waits. The shell bounds the wait.
    pub(crate) fn should_linger(&self, linger_acks: usize, awaited: bool) -> bool {
        !self.lost
            && self.releases.is_empty()
            && !self.batched
            && !self.acks.is_empty()
            && self.acks.len() < linger_acks
            && (!awaited || !self.undecided.is_empty())
    }

    /// Tags handed out and not yet decided.
    #[cfg(test)]
    pub(crate) fn undecided(&self) -> usize {
        self.undecided.len()
    }

    /// The frames that send what was decided since the last flush, on a channel that is
    /// `open` or not: a channel once gone stays gone, and its decisions are dropped.
    pub(crate) fn flush(&mut self, open: bool) -> Flush<W> {
        self.lost |= !open;
        self.batched = false;
        let waiters = std::mem::take(&mut self.waiters);
        if self.lost {
            self.acks.clear();
            self.releases.clear();
            return Flush {
                frames: Vec::new(),
                waiters,
                lost: true,
            };
        }
        let mut frames: Vec<Frame> = self.releases.drain(..).map(Frame::Release).collect();
        self.acks.sort_unstable();
        frames.extend(
            ack_frames(&self.acks, &self.undecided)
                .into_iter()
                .map(|(tag, multiple)| Frame::Ack { tag, multiple }),
        );
        self.acks.clear();
        Flush {
            frames,
            waiters,
            lost: false,
        }
    }

    /// Nothing decided is waiting to be sent.
    #[cfg(test)]
    pub(crate) fn is_flushed(&self) -> bool {
        self.acks.is_empty() && self.waiters.is_empty() && self.releases.is_empty()
    }
}

/// The `basic.ack` frames (tag, multiple) that settle `sorted` (decided tags, ascending)
/// while `undecided` tags are still with their handlers: one `multiple` ack for the run below
/// the oldest undecided tag (everything the broker still holds below it is decided: settled
/// earlier, released, or in this batch), then one ack per tag above it.
fn ack_frames(sorted: &[u64], undecided: &BTreeSet<u64>) -> Vec<(u64, bool)> {
    let oldest_undecided = undecided.first().copied().unwrap_or(u64::MAX);
    let below = sorted.partition_point(|tag| *tag < oldest_undecided);
    let mut frames = Vec::with_capacity(sorted.len() - below + 1);
    match below {
        0 => {}
        1 => frames.push((sorted[0], false)),
        n => frames.push((sorted[n - 1], true)),
    }
    frames.extend(sorted[below..].iter().map(|tag| (*tag, false)));
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ack(tag: u64, multiple: bool) -> Frame {
        Frame::Ack { tag, multiple }
    }

    #[test]
    fn awaited_acks_linger_only_while_other_deliveries_are_with_their_handlers() {
        let mut tracker = AckTracker::default();
        assert!(
            !tracker.should_linger(2, true),
            "nothing decided, nothing to wait for"
        );
        for tag in 1..=4 {
            tracker.delivered(tag);
        }
        tracker.ack(1, 'a');
        assert!(
            tracker.should_linger(2, true),
            "2, 3 and 4 are still with their handlers"
        );
        tracker.ack(2, 'b');
        assert!(!tracker.should_linger(2, true), "enough acks for one frame");
        assert_eq!(tracker.flush(true).frames, [ack(2, true)]);
        tracker.ack(3, 'c');
        assert!(tracker.should_linger(2, true));
        tracker.release(4);
        assert!(!tracker.should_linger(2, true), "a release goes at once");
        let flush = tracker.flush(true);
        assert_eq!(flush.frames, [Frame::Release(4), ack(3, false)]);

        // A consumer awaiting each ack, handling one delivery at a time, never waits.
        tracker.delivered(5);
        tracker.ack(5, 'd');
        assert!(!tracker.should_linger(16, true));

        // Nor does a channel known lost.
        tracker.delivered(6);
        tracker.delivered(7);
        assert!(tracker.flush(false).lost);
        tracker.ack(6, 'e');
        assert!(!tracker.should_linger(16, true));
        assert!(!tracker.should_linger(16, false));
    }

    #[test]
    fn detached_acks_linger_for_a_frame_even_with_no_delivery_left_with_a_handler() {
        let mut tracker = AckTracker::default();
        assert!(!tracker.should_linger(2, false), "nothing decided");
        tracker.delivered(1);
        tracker.ack(1, 'a');
        // Nobody waits for it, and the next delivery may be on its way: it waits for
        // company, up to the shell's bound.
        assert!(tracker.should_linger(2, false));
        tracker.delivered(2);
        tracker.ack(2, 'b');
        assert!(
            !tracker.should_linger(2, false),
            "enough acks for one frame"
        );
        assert_eq!(tracker.flush(true).frames, [ack(2, true)]);

        // A release still goes at once.
        tracker.delivered(3);
        tracker.delivered(4);
        tracker.ack(3, 'c');
        tracker.release(4);
        assert!(!tracker.should_linger(16, false));
        assert_eq!(
            tracker.flush(true).frames,
            [Frame::Release(4), ack(3, false)]
        );
    }

    #[test]
    fn consecutive_decided_tags_are_acked_with_one_frame() {
        assert_eq!(ack_frames(&[1, 2, 3, 4], &BTreeSet::new()), [(4, true)]);
        assert_eq!(ack_frames(&[7], &BTreeSet::new()), [(7, false)]);
        assert!(ack_frames(&[], &BTreeSet::new()).is_empty());
    }

    #[test]
    fn an_undecided_tag_is_never_covered_by_a_multiple_ack() {
        // 3 is still with its handler: 1-2 go as one, 4 and 5 one by one.
        let undecided = BTreeSet::from([3]);
        assert_eq!(
            ack_frames(&[1, 2, 4, 5], &undecided),
            [(2, true), (4, false), (5, false)]
        );
        // Nothing below the oldest undecided: no multiple at all.
        let undecided = BTreeSet::from([1]);
        assert_eq!(ack_frames(&[2, 3], &undecided), [(2, false), (3, false)]);
        for frame in ack_frames(&[1, 2, 4, 5, 9], &BTreeSet::from([3, 6])) {
            if frame.1 {
                assert!(frame.0 < 3);
            }
        }
    }

    #[test]
    fn acks_decided_out_of_order_are_coalesced_once_the_gap_is_decided() {
        let mut tracker = AckTracker::default();
        for tag in 1..=4 {
            tracker.delivered(tag);
        }
        tracker.ack(3, 'a');
        tracker.ack(2, 'b');
        let flush = tracker.flush(true);
        // 1 is undecided: 2 and 3 one by one.
        assert_eq!(flush.frames, [ack(2, false), ack(3, false)]);
        assert_eq!(flush.waiters, ['a', 'b']);
        assert!(!flush.lost);
        tracker.ack(4, 'c');
        tracker.ack(1, 'd');
        assert_eq!(tracker.flush(true).frames, [ack(4, true)]);
        assert_eq!(tracker.undecided(), 0);
        assert!(tracker.is_flushed());
    }

    #[test]
    fn releases_go_before_the_acks_of_their_batch() {
        let mut tracker = AckTracker::default();
        for tag in 1..=3 {
            tracker.delivered(tag);
        }
        tracker.ack(1, ());
        tracker.release(2);
        tracker.ack(3, ());
        // 2 is requeued first, so the multiple ack at 3 cannot cover it.
        assert_eq!(
            tracker.flush(true).frames,
            [Frame::Release(2), ack(3, true)]
        );
    }

    #[test]
    fn an_ack_batch_is_one_decision_with_one_waiter() {
        let mut tracker = AckTracker::default();
        for tag in 1..=5 {
            tracker.delivered(tag);
        }
        tracker.ack_many([2, 1, 4], "batch");
        let flush = tracker.flush(true);
        assert_eq!(flush.frames, [ack(2, true), ack(4, false)]);
        assert_eq!(flush.waiters, ["batch"]);
        assert_eq!(tracker.undecided(), 2);
    }

    #[test]
    fn a_batch_of_acks_goes_at_once_even_while_other_deliveries_are_undecided() {
        let mut tracker = AckTracker::default();
        for tag in 1..=8 {
            tracker.delivered(tag);
        }
        // One ack among undecided deliveries waits for company...
        tracker.ack(1, "one");
        assert!(tracker.should_linger(16, true));
        assert!(tracker.should_linger(16, false));
        // ...but a batch is the company: it goes, taking the waiting ack along.
        tracker.ack_many([2, 3], "batch");
        assert!(!tracker.should_linger(16, true));
        assert!(!tracker.should_linger(16, false));
        let flush = tracker.flush(true);
        assert_eq!(flush.frames, [ack(3, true)]);
        assert_eq!(flush.waiters, ["one", "batch"]);
        // The flush ends it: a single ack after it waits again.
        tracker.ack(4, "four");
        assert!(tracker.should_linger(16, true));
    }

    #[test]
    fn nothing_decided_sends_nothing() {
        let mut tracker: AckTracker<()> = AckTracker::default();
        tracker.delivered(1);
        let flush = tracker.flush(true);
        assert!(flush.frames.is_empty());
        assert!(flush.waiters.is_empty());
        assert_eq!(tracker.undecided(), 1);
    }

    #[test]
    fn a_lost_channel_sends_nothing_more_and_fails_its_waiters() {
        let mut tracker = AckTracker::default();
        for tag in 1..=3 {
            tracker.delivered(tag);
        }
        tracker.ack(1, 1);
        tracker.release(2);
        let flush = tracker.flush(false);
        assert!(flush.lost);
        assert!(flush.frames.is_empty());
        assert_eq!(flush.waiters, [1]);
        // Gone for good, even if asked as open again.
        tracker.ack(3, 2);
        let flush = tracker.flush(true);
        assert!(flush.lost);
        assert!(flush.frames.is_empty());
        assert_eq!(flush.waiters, [2]);
        assert!(tracker.is_flushed());
    }
}
