//! The relay's window for one source: which rows are in flight, in publish order, and which
//! of them may be marked sent. No I/O, no tasks, no clock: the relay's source task
//! ([`crate::relay`]) feeds it what happened (a batch published, a confirm, a failure, a
//! mark committed) and performs what it hands out (the marks, the seqs the next read must
//! skip).
//!
//! A row enters the window when it is published (or given up in its place), and leaves it
//! when its mark committed or when it is forgotten. The rules that make the relay
//! at-least-once and in order per source:
//!
//! - marks are handed out in publish order, and only for the **resolved prefix**: rows
//!   confirmed by the broker, or given up (never to be published), with every row before
//!   them resolved too. A row confirmed after one still unconfirmed waits;
//! - a failure (a publish refused or timed out, a nack, a lost lease) forgets the
//!   **unconfirmed suffix**: every row from the first unconfirmed one on, even those
//!   confirmed since. They stay unsent in the table and are read and published again, after
//!   the failed one (a duplicate, never a reordering). What was handed out to be marked
//!   stays, and is marked;
//! - a failed mark forgets every row still in the window: a mark after a failed one would
//!   let a later row be sent while an earlier one is published again after it;
//! - every row in the window is skipped by the next read ([`Window::in_flight`]), by its
//!   seq and not by a high-water mark: on PostgreSQL a lower seq may commit after a higher
//!   one was published, and must still be read then;
//! - at most `max_batches` batches await confirms at once: a read opens a batch only
//!   below that ([`Window::open_batch`]).

use std::collections::VecDeque;

/// The rows of one read, published together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Batch(u64);

/// What the relay must mark, in order: a run of confirmed rows, or one row given up with
/// its reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mark {
    pub(crate) seqs: Vec<i64>,
    /// `None`: sent; `Some(reason)`: given up.
    pub(crate) error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum State {
    /// Published, its confirm awaited.
    Published,
    /// Confirmed by the broker, not yet handed out to be marked.
    Confirmed,
    /// Never to be published (given up with this reason), not yet handed out.
    GivenUp(String),
    /// Handed out to be marked; leaves the window when the mark committed.
    Marking,
}

#[derive(Debug)]
struct Slot<T> {
    seq: i64,
    batch: u64,
    state: State,
    item: T,
}

/// The rows of one source in flight, in publish order; `T` is what the relay keeps with
/// each row (its stored size, for a spool) and gets back when its mark committed.
#[derive(Debug)]
pub(crate) struct Window<T> {
    slots: VecDeque<Slot<T>>,
    max_batches: usize,
    next_batch: u64,
}

impl<T> Window<T> {
    /// An empty window that lets `max_batches` (at least 1) batches await confirms at once.
    pub(crate) fn new(max_batches: usize) -> Self {
        Window {
            slots: VecDeque::new(),
            max_batches: max_batches.max(1),
            next_batch: 0,
        }
    }

    /// Whether no row is in flight (published, confirmed or being marked).
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Rows whose confirm is awaited.
    #[cfg(test)]
    pub(crate) fn unconfirmed(&self) -> usize {
        self.slots
            .iter()
            .filter(|s| s.state == State::Published)
            .count()
    }

    /// Batches with a row whose confirm is awaited.
    pub(crate) fn batches_awaiting(&self) -> usize {
        let mut count = 0;
        let mut last = None;
        for slot in self.slots.iter().filter(|s| s.state == State::Published) {
            if last != Some(slot.batch) {
                count += 1;
                last = Some(slot.batch);
            }
        }
        count
    }

    /// Whether a new batch may be read and published now.
    pub(crate) fn can_open(&self) -> bool {
        self.batches_awaiting() < self.max_batches
    }

    /// A new batch, if fewer than `max_batches` batches await confirms.
    pub(crate) fn open_batch(&mut self) -> Option<Batch> {
        if !self.can_open() {
            return None;
        }
        let batch = Batch(self.next_batch);
        self.next_batch += 1;
        Some(batch)
    }

    /// The seqs in flight, which the next read must skip.
    pub(crate) fn in_flight(&self) -> Vec<i64> {
        self.slots.iter().map(|s| s.seq).collect()
    }

    fn position(&self, seq: i64) -> Option<usize> {
        self.slots.iter().position(|s| s.seq == seq)
    }

    /// Row `seq` of `batch` was published; its confirm is awaited.
    pub(crate) fn published(&mut self, batch: Batch, seq: i64, item: T) {
        self.push(batch, seq, State::Published, item);
    }

    /// Row `seq` of `batch` will never be published (not an event, too large): it is given
    /// up in its place, marked with `reason` after the rows before it.
    pub(crate) fn given_up(&mut self, batch: Batch, seq: i64, item: T, reason: String) {
        self.push(batch, seq, State::GivenUp(reason), item);
    }

    fn push(&mut self, batch: Batch, seq: i64, state: State, item: T) {
        // A row already in flight is never read again; if the shell did anyway, keeping
        // the first is what the rules above need.
        if self.position(seq).is_none() {
            self.slots.push_back(Slot {
                seq,
                batch: batch.0,
                state,
                item,
            });
        }
    }

    /// The broker confirmed row `seq` (ignored for a row not awaiting its confirm, e.g.
    /// forgotten since).
    pub(crate) fn confirmed(&mut self, seq: i64) {
        if let Some(i) = self.position(seq) {
            if self.slots[i].state == State::Published {
                self.slots[i].state = State::Confirmed;
            }
        }
    }

    /// The broker refused row `seq` for good (a message no broker takes): it is given up in
    /// its place.
    pub(crate) fn refused(&mut self, seq: i64, reason: String) {
        if let Some(i) = self.position(seq) {
            if self.slots[i].state == State::Published {
                self.slots[i].state = State::GivenUp(reason);
            }
        }
    }

    /// A publish failed or the lease was lost: forgets the unconfirmed suffix (every row
    /// from the first one awaiting its confirm on) and returns its seqs, in order.
    pub(crate) fn fail(&mut self) -> Vec<i64> {
        match self.slots.iter().position(|s| s.state == State::Published) {
            Some(first) => self.slots.drain(first..).map(|s| s.seq).collect(),
            None => Vec::new(),
        }
    }

    /// A mark failed: forgets every row still in the window and returns their seqs.
    pub(crate) fn mark_failed(&mut self) -> Vec<i64> {
        self.slots.drain(..).map(|s| s.seq).collect()
    }

    /// The marks of the resolved rows not handed out yet, in publish order; their rows stay
    /// in the window (skipped by reads) until [`Window::marked`].
    pub(crate) fn take_marks(&mut self) -> Vec<Mark> {
        let mut marks: Vec<Mark> = Vec::new();
        for slot in self.slots.iter_mut() {
            match std::mem::replace(&mut slot.state, State::Marking) {
                State::Marking => {}
                State::Confirmed => match marks.last_mut() {
                    Some(last) if last.error.is_none() => last.seqs.push(slot.seq),
                    _ => marks.push(Mark {
                        seqs: vec![slot.seq],
                        error: None,
                    }),
                },
                State::GivenUp(reason) => marks.push(Mark {
                    seqs: vec![slot.seq],
                    error: Some(reason),
                }),
                State::Published => {
                    slot.state = State::Published;
                    break;
                }
            }
        }
        marks
    }

    /// The marks of these rows committed: they leave the window; returns what was kept with
    /// each (of the rows it knew).
    pub(crate) fn marked(&mut self, seqs: &[i64]) -> Vec<T> {
        let mut items = Vec::with_capacity(seqs.len());
        for &seq in seqs {
            // Marks commit in order, so the row is nearly always at the front.
            let found = match self.slots.front() {
                Some(front) if front.seq == seq => Some(0),
                _ => self.position(seq),
            };
            if let Some(i) = found {
                if self.slots[i].state == State::Marking {
                    if let Some(slot) = self.slots.remove(i) {
                        items.push(slot.item);
                    }
                }
            }
        }
        items
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn publish(window: &mut Window<()>, seqs: &[i64]) -> Batch {
        let batch = window.open_batch().expect("a batch may open");
        for &seq in seqs {
            window.published(batch, seq, ());
        }
        batch
    }

    fn seqs(marks: &[Mark]) -> Vec<i64> {
        marks.iter().flat_map(|m| m.seqs.iter().copied()).collect()
    }

    #[test]
    fn marks_follow_publish_order_and_wait_for_the_rows_before() {
        let mut w = Window::new(2);
        publish(&mut w, &[1, 2, 3]);
        w.confirmed(2);
        w.confirmed(3);
        assert!(w.take_marks().is_empty(), "row 1 is unconfirmed");
        w.confirmed(1);
        let marks = w.take_marks();
        assert_eq!(
            marks,
            vec![Mark {
                seqs: vec![1, 2, 3],
                error: None
            }]
        );
        assert!(w.take_marks().is_empty(), "handed out once");
        assert_eq!(w.in_flight(), vec![1, 2, 3], "skipped until marked");
        assert_eq!(w.marked(&[1, 2, 3]).len(), 3);
        assert!(w.is_empty());
    }

    #[test]
    fn at_most_max_batches_await_confirms() {
        let mut w = Window::new(2);
        publish(&mut w, &[1]);
        publish(&mut w, &[2]);
        assert!(w.open_batch().is_none());
        w.confirmed(1);
        // Confirmed but not marked: the batch no longer awaits anything.
        assert!(w.can_open());
        publish(&mut w, &[3]);
        assert_eq!(w.batches_awaiting(), 2);
        assert_eq!(w.in_flight(), vec![1, 2, 3]);
    }

    #[test]
    fn a_failure_forgets_the_unconfirmed_suffix_and_keeps_what_was_handed_out() {
        let mut w = Window::new(2);
        publish(&mut w, &[1, 2, 3]);
        publish(&mut w, &[7, 5]);
        w.confirmed(1);
        let first = w.take_marks();
        w.confirmed(2);
        w.confirmed(7); // after the unconfirmed 3: forgotten with it
        assert_eq!(w.fail(), vec![3, 7, 5]);
        assert_eq!(seqs(&first), vec![1]);
        assert_eq!(seqs(&w.take_marks()), vec![2]);
        w.confirmed(5); // a confirm of a forgotten row changes nothing
        assert!(w.take_marks().is_empty());
        assert_eq!(w.in_flight(), vec![1, 2]);
    }

    #[test]
    fn a_row_given_up_is_marked_in_its_place_with_its_reason() {
        let mut w = Window::new(2);
        let batch = publish(&mut w, &[1]);
        w.given_up(batch, 2, (), "corrupt: bad headers".to_owned());
        publish(&mut w, &[3, 4]);
        w.confirmed(3);
        w.refused(4, "too-large: 200 MiB".to_owned());
        assert!(w.take_marks().is_empty(), "row 1 is unconfirmed");
        w.confirmed(1);
        assert_eq!(
            w.take_marks(),
            vec![
                Mark {
                    seqs: vec![1],
                    error: None
                },
                Mark {
                    seqs: vec![2],
                    error: Some("corrupt: bad headers".to_owned())
                },
                Mark {
                    seqs: vec![3],
                    error: None
                },
                Mark {
                    seqs: vec![4],
                    error: Some("too-large: 200 MiB".to_owned())
                },
            ]
        );
    }

    #[test]
    fn a_failed_mark_forgets_everything() {
        let mut w = Window::new(2);
        publish(&mut w, &[1, 2]);
        w.confirmed(1);
        let _ = w.take_marks();
        assert_eq!(w.mark_failed(), vec![1, 2]);
        assert!(w.is_empty());
        assert!(w.marked(&[1]).is_empty(), "a late report changes nothing");
    }

    #[test]
    fn a_row_read_twice_is_kept_once() {
        let mut w = Window::new(2);
        let batch = publish(&mut w, &[1]);
        w.published(batch, 1, ());
        assert_eq!(w.in_flight(), vec![1]);
    }

    mod random {
        //! Random interleavings of publishes, confirms, refusals, failures and marks,
        //! against the rules in the module's docs.

        use std::collections::HashMap;

        use proptest::prelude::*;

        use super::super::*;

        #[derive(Debug, Clone)]
        enum Op {
            /// A read of `rows` rows: fresh ones, or forgotten ones read again; the row at
            /// `poison` (if any) is given up instead of published, and ends the batch.
            Publish {
                rows: usize,
                again: bool,
                poison: Option<usize>,
            },
            Confirm(usize),
            Refuse(usize),
            Fail,
            Take,
            MarkDone,
            MarkFail,
        }

        fn op() -> impl Strategy<Value = Op> {
            prop_oneof![
                3 => (1usize..6, any::<bool>(), proptest::option::weighted(0.2, 0usize..6))
                    .prop_map(|(rows, again, poison)| Op::Publish { rows, again, poison }),
                6 => any::<usize>().prop_map(Op::Confirm),
                1 => any::<usize>().prop_map(Op::Refuse),
                1 => Just(Op::Fail),
                3 => Just(Op::Take),
                3 => Just(Op::MarkDone),
                1 => Just(Op::MarkFail),
            ]
        }

        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        enum Is {
            Awaiting,
            Confirmed,
            GivenUp,
            Handed,
        }

        /// What the window should hold: entries in publish order, each a row's stay in the
        /// window (a row forgotten and read again is a new entry).
        #[derive(Default)]
        struct Model {
            entries: Vec<(u64, i64, u64, Is)>, // (entry, seq, batch, state)
            next_entry: u64,
            next_seq: i64,
            forgotten: Vec<i64>,
            /// Jobs handed out, not yet reported back.
            jobs: Vec<Vec<i64>>,
            /// The entry of every row handed out so far, in hand-out order.
            handed: Vec<u64>,
        }

        proptest! {
            #[test]
            fn the_window_keeps_order_and_at_least_once(
                max_batches in 1usize..4,
                ops in proptest::collection::vec(op(), 0..80),
            ) {
                let mut w: Window<i64> = Window::new(max_batches);
                let mut m = Model::default();
                for op in ops {
                    match op {
                        Op::Publish { rows, again, poison } => {
                            let Some(batch) = w.open_batch() else {
                                prop_assert!(w.batches_awaiting() >= max_batches);
                                continue;
                            };
                            // A read: forgotten rows first (lower seqs), then fresh ones.
                            let mut seqs: Vec<i64> = Vec::new();
                            if again {
                                m.forgotten.sort_unstable();
                                let n = rows.min(m.forgotten.len());
                                seqs.extend(m.forgotten.drain(..n));
                            }
                            while seqs.len() < rows {
                                m.next_seq += 1;
                                seqs.push(m.next_seq);
                            }
                            for (i, seq) in seqs.iter().copied().enumerate() {
                                let entry = m.next_entry;
                                m.next_entry += 1;
                                if poison == Some(i) {
                                    w.given_up(batch, seq, seq, format!("poison {seq}"));
                                    m.entries.push((entry, seq, batch.0, Is::GivenUp));
                                    // The rest of the read is not published: read again later.
                                    m.forgotten.extend(&seqs[i + 1..]);
                                    break;
                                }
                                w.published(batch, seq, seq);
                                m.entries.push((entry, seq, batch.0, Is::Awaiting));
                            }
                        }
                        Op::Confirm(pick) | Op::Refuse(pick) => {
                            let awaiting: Vec<usize> = (0..m.entries.len())
                                .filter(|&i| m.entries[i].3 == Is::Awaiting)
                                .collect();
                            if awaiting.is_empty() {
                                continue;
                            }
                            let i = awaiting[pick % awaiting.len()];
                            let seq = m.entries[i].1;
                            if matches!(op, Op::Confirm(_)) {
                                w.confirmed(seq);
                                m.entries[i].3 = Is::Confirmed;
                            } else {
                                w.refused(seq, format!("refused {seq}"));
                                m.entries[i].3 = Is::GivenUp;
                            }
                        }
                        Op::Fail => {
                            let first = m.entries.iter().position(|e| e.3 == Is::Awaiting);
                            let expected: Vec<i64> = match first {
                                Some(first) => m.entries.drain(first..).map(|e| e.1).collect(),
                                None => Vec::new(),
                            };
                            let forgotten = w.fail();
                            // Exactly the suffix from the first unconfirmed row, in order.
                            prop_assert_eq!(&forgotten, &expected);
                            m.forgotten.extend(forgotten);
                        }
                        Op::Take => {
                            let marks = w.take_marks();
                            let states: HashMap<i64, Is> =
                                m.entries.iter().map(|e| (e.1, e.3)).collect();
                            for mark in &marks {
                                prop_assert!(!mark.seqs.is_empty());
                                for seq in &mark.seqs {
                                    // Nothing unconfirmed is marked sent, nothing
                                    // published is marked given up.
                                    let want = if mark.error.is_some() { Is::GivenUp } else { Is::Confirmed };
                                    prop_assert_eq!(states.get(seq), Some(&want), "row {} marked", seq);
                                }
                                if mark.error.is_some() {
                                    prop_assert_eq!(mark.seqs.len(), 1);
                                }
                            }
                            let handed: Vec<i64> = marks.iter().flat_map(|k| k.seqs.clone()).collect();
                            // The whole resolved prefix is handed out, nothing after it.
                            let expected: Vec<i64> = m
                                .entries
                                .iter()
                                .skip_while(|e| e.3 == Is::Handed)
                                .take_while(|e| matches!(e.3, Is::Confirmed | Is::GivenUp))
                                .map(|e| e.1)
                                .collect();
                            prop_assert_eq!(&handed, &expected);
                            for e in m.entries.iter_mut() {
                                if handed.contains(&e.1) {
                                    e.3 = Is::Handed;
                                    m.handed.push(e.0);
                                }
                            }
                            m.jobs.extend(marks.into_iter().map(|k| k.seqs));
                        }
                        Op::MarkDone => {
                            if m.jobs.is_empty() {
                                continue;
                            }
                            let job = m.jobs.remove(0);
                            let items = w.marked(&job);
                            let gone: Vec<i64> = m
                                .entries
                                .iter()
                                .filter(|e| job.contains(&e.1) && e.3 == Is::Handed)
                                .map(|e| e.1)
                                .collect();
                            prop_assert_eq!(&items, &gone);
                            m.entries.retain(|e| !(job.contains(&e.1) && e.3 == Is::Handed));
                        }
                        Op::MarkFail => {
                            let expected: Vec<i64> = m.entries.drain(..).map(|e| e.1).collect();
                            let forgotten = w.mark_failed();
                            prop_assert_eq!(&forgotten, &expected);
                            m.forgotten.extend(forgotten);
                            m.jobs.clear();
                        }
                    }
                    // After every step: the order of marks is the order of publish, the
                    // window skips exactly the rows in flight, and no more batches await
                    // confirms than allowed.
                    prop_assert!(m.handed.windows(2).all(|p| p[0] < p[1]), "marks out of order: {:?}", m.handed);
                    let in_flight: Vec<i64> = m.entries.iter().map(|e| e.1).collect();
                    prop_assert_eq!(w.in_flight(), in_flight);
                    prop_assert!(w.batches_awaiting() <= max_batches);
                    prop_assert_eq!(
                        w.unconfirmed(),
                        m.entries.iter().filter(|e| e.3 == Is::Awaiting).count()
                    );
                    for seq in &m.forgotten {
                        prop_assert!(!w.in_flight().contains(seq), "forgotten row {} still skipped", seq);
                    }
                }
            }
        }
    }
}
