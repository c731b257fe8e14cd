//! Property tests of the ack tracker: random interleavings of the broker delivering, the
//! reader handing deliveries out, handlers acking (one by one or as a batch) and releasing
//! them, tracker flushes, and channels lost and replaced (a reconnect) while deliveries of
//! the old channel are still held, checked against a model of the broker's channels.
//!
//! The broker model refuses what RabbitMQ would: an ack or a release of a tag it does not
//! hold (`PRECONDITION_FAILED - unknown delivery tag`), and a `multiple` ack that would
//! settle a delivery its handler has not decided, or released. After every step: nothing is
//! settled twice, every tag is in exactly one place, the tracker holds no more than the
//! prefetch; after a flush nothing decided is retained. At the end, everything decided on a
//! live channel has reached the broker, and every decision on a lost one failed.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use proptest::prelude::*;
use proptest::test_runner::Config;

use super::ack::{AckTracker, Frame};
use crate::proptesting;

/// The consumer's prefetch: the broker never has more unsettled deliveries on a channel.
const PREFETCH: usize = 6;

#[derive(Debug, Clone)]
enum Op {
    /// The broker sends the next delivery on the current channel.
    Deliver,
    /// The reader hands the oldest buffered delivery out.
    Read,
    /// A handler acks a delivery it holds (of any channel, the current or a lost one).
    Ack { pick: usize },
    /// A handler acks several deliveries of one channel at once (`Delivery::ack_all`).
    AckAll { pick: usize, mask: u32 },
    /// A handler releases a delivery (or drops it undecided).
    Release { pick: usize },
    /// A channel's tracker task runs.
    Flush { pick: usize },
    /// The current channel is lost (or its connection); the consumer re-attaches on a new
    /// channel with a new tracker.
    Lose,
}

/// The op a random number stands for (drawn as numbers: see the window's property tests).
fn decode(raw: u32) -> Op {
    let select = raw % 16;
    let pick = (raw / 16) as usize;
    match select {
        0..=3 => Op::Deliver,
        4..=6 => Op::Read,
        7..=9 => Op::Ack { pick },
        10 => Op::AckAll {
            pick: pick % 8,
            mask: raw / 128,
        },
        11 => Op::Release { pick },
        12..=14 => Op::Flush { pick },
        _ => Op::Lose,
    }
}

/// One channel: the broker's side, the tracker, and the handlers'.
struct Chan {
    tracker: AckTracker<u64>,
    open: bool,
    next_tag: u64,
    /// Delivered by the broker and not settled there.
    outstanding: BTreeSet<u64>,
    /// Sent by the broker, not read yet.
    buffered: VecDeque<u64>,
    /// Handed out, not decided.
    undecided: BTreeSet<u64>,
    /// Decided, not sent yet.
    to_ack: BTreeSet<u64>,
    to_release: BTreeSet<u64>,
    /// Settled at the broker.
    acked: BTreeSet<u64>,
    released: BTreeSet<u64>,
    /// Requeued by the broker when the channel was lost.
    requeued: BTreeSet<u64>,
    /// Buffered when the channel was lost: dropped by the reader, never handed out.
    dropped: BTreeSet<u64>,
    /// Decisions of a lost channel, failed.
    failed: BTreeSet<u64>,
    /// Who waits, for which tags.
    waiters: BTreeMap<u64, Vec<u64>>,
}

impl Chan {
    fn new() -> Chan {
        Chan {
            tracker: AckTracker::default(),
            open: true,
            next_tag: 1,
            outstanding: BTreeSet::new(),
            buffered: VecDeque::new(),
            undecided: BTreeSet::new(),
            to_ack: BTreeSet::new(),
            to_release: BTreeSet::new(),
            acked: BTreeSet::new(),
            released: BTreeSet::new(),
            requeued: BTreeSet::new(),
            dropped: BTreeSet::new(),
            failed: BTreeSet::new(),
            waiters: BTreeMap::new(),
        }
    }

    /// Runs the tracker task once and applies its frames to the broker.
    fn flush(&mut self) -> Result<(), TestCaseError> {
        let flush = self.tracker.flush(self.open);
        let answered: BTreeSet<u64> = flush.waiters.iter().copied().collect();
        let waiting: BTreeSet<u64> = self.waiters.keys().copied().collect();
        prop_assert_eq!(&answered, &waiting, "every waiter is answered once");
        prop_assert!(self.tracker.is_flushed(), "nothing decided is retained");
        if flush.lost {
            prop_assert!(!self.open);
            prop_assert!(
                flush.frames.is_empty(),
                "a lost channel's tags are never sent"
            );
            // The broker requeued them with the channel; the handlers learn it.
            self.failed.extend(std::mem::take(&mut self.to_ack));
            self.failed.extend(std::mem::take(&mut self.to_release));
            self.waiters.clear();
            return Ok(());
        }
        prop_assert!(self.open);
        let mut acking = false;
        for frame in flush.frames {
            match frame {
                Frame::Release(tag) => {
                    prop_assert!(!acking, "a release after an ack of the same batch");
                    prop_assert!(
                        self.outstanding.remove(&tag),
                        "unknown delivery tag {}",
                        tag
                    );
                    prop_assert!(self.to_release.remove(&tag), "{} released undecided", tag);
                    self.released.insert(tag);
                }
                Frame::Ack { tag, multiple } => {
                    acking = true;
                    let covered: Vec<u64> = if multiple {
                        self.outstanding.range(..=tag).copied().collect()
                    } else {
                        prop_assert!(
                            self.outstanding.contains(&tag),
                            "unknown delivery tag {}",
                            tag
                        );
                        vec![tag]
                    };
                    prop_assert!(!covered.is_empty(), "a multiple ack of nothing");
                    for tag in covered {
                        prop_assert!(self.to_ack.remove(&tag), "{} acked undecided", tag);
                        self.outstanding.remove(&tag);
                        self.acked.insert(tag);
                    }
                }
            }
        }
        prop_assert!(
            self.to_ack.is_empty(),
            "decided acks not sent: {:?}",
            self.to_ack
        );
        prop_assert!(self.to_release.is_empty());
        for tags in std::mem::take(&mut self.waiters).into_values() {
            for tag in tags {
                prop_assert!(self.acked.contains(&tag), "{} answered but not acked", tag);
            }
        }
        Ok(())
    }

    fn check_invariants(&self) -> Result<(), TestCaseError> {
        prop_assert_eq!(self.tracker.undecided(), self.undecided.len());
        prop_assert!(self.outstanding.len() <= PREFETCH);
        let delivered = self.next_tag - 1;
        // At the broker, every delivered tag is in exactly one place.
        exactly_once(
            &[
                &self.outstanding,
                &self.acked,
                &self.released,
                &self.requeued,
            ],
            delivered,
        )?;
        // On the consumer's side too (`acked` and `released` went through frames).
        let buffered: BTreeSet<u64> = self.buffered.iter().copied().collect();
        exactly_once(
            &[
                &buffered,
                &self.undecided,
                &self.to_ack,
                &self.to_release,
                &self.acked,
                &self.released,
                &self.dropped,
                &self.failed,
            ],
            delivered,
        )?;
        if self.open {
            // What the broker holds is exactly what is not settled there.
            let held: BTreeSet<u64> = buffered
                .iter()
                .chain(&self.undecided)
                .chain(&self.to_ack)
                .chain(&self.to_release)
                .copied()
                .collect();
            prop_assert_eq!(&self.outstanding, &held);
        } else {
            prop_assert!(self.outstanding.is_empty() && self.buffered.is_empty());
        }
        Ok(())
    }
}

/// `places` are disjoint and hold tags `1..=delivered` between them: nothing in two places
/// (settled twice), nothing missing (lost).
fn exactly_once(places: &[&BTreeSet<u64>], delivered: u64) -> Result<(), TestCaseError> {
    let mut seen = BTreeSet::new();
    let mut count = 0;
    for place in places {
        count += place.len();
        seen.extend(place.iter().copied());
    }
    prop_assert_eq!(count, seen.len(), "a tag in two places");
    // `delivered` distinct tags, all in `1..=delivered`: every one of them.
    prop_assert_eq!(seen.len() as u64, delivered, "a tag lost");
    prop_assert!(seen.first().is_none_or(|first| *first >= 1));
    prop_assert!(seen.last().is_none_or(|last| *last <= delivered));
    Ok(())
}

struct Model {
    /// Every channel so far; the last one is current.
    channels: Vec<Chan>,
    next_waiter: u64,
}

impl Model {
    fn current(&mut self) -> &mut Chan {
        let last = self.channels.len() - 1;
        &mut self.channels[last]
    }

    /// A channel with a held (undecided) delivery, picked by `pick`, and the delivery.
    fn held(&mut self, pick: usize) -> Option<(usize, u64)> {
        let holders: Vec<usize> = (0..self.channels.len())
            .filter(|at| !self.channels[*at].undecided.is_empty())
            .collect();
        let at = *holders.get(pick % holders.len().max(1))?;
        let undecided = &self.channels[at].undecided;
        let tag = *undecided.iter().nth((pick / 7) % undecided.len())?;
        Some((at, tag))
    }

    /// Applies `op`; the channel it changed (or the current one).
    fn step(&mut self, op: &Op) -> Result<usize, TestCaseError> {
        let current = self.channels.len() - 1;
        match op {
            Op::Deliver => {
                let chan = self.current();
                if chan.outstanding.len() < PREFETCH {
                    let tag = chan.next_tag;
                    chan.next_tag += 1;
                    chan.outstanding.insert(tag);
                    chan.buffered.push_back(tag);
                }
            }
            Op::Read => {
                // Only the current channel is read: what an old one still buffers is dropped
                // by the reader (see `Reader::delivery`) and was requeued with it.
                let chan = self.current();
                if let Some(tag) = chan.buffered.pop_front() {
                    chan.tracker.delivered(tag);
                    chan.undecided.insert(tag);
                }
            }
            Op::Ack { pick } => {
                let Some((at, tag)) = self.held(*pick) else {
                    return Ok(current);
                };
                let waiter = self.next_waiter;
                self.next_waiter += 1;
                let chan = &mut self.channels[at];
                chan.undecided.remove(&tag);
                chan.to_ack.insert(tag);
                chan.tracker.ack(tag, waiter);
                chan.waiters.insert(waiter, vec![tag]);
                return Ok(at);
            }
            Op::AckAll { pick, mask } => {
                let Some((at, _)) = self.held(*pick) else {
                    return Ok(current);
                };
                let waiter = self.next_waiter;
                self.next_waiter += 1;
                let chan = &mut self.channels[at];
                let tags: Vec<u64> = chan
                    .undecided
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| mask & (1 << (i % 32)) != 0)
                    .map(|(_, tag)| *tag)
                    .collect();
                if tags.is_empty() {
                    return Ok(at);
                }
                for tag in &tags {
                    chan.undecided.remove(tag);
                    chan.to_ack.insert(*tag);
                }
                // In the order the handlers decided: not sorted.
                chan.tracker.ack_many(tags.iter().rev().copied(), waiter);
                chan.waiters.insert(waiter, tags);
                return Ok(at);
            }
            Op::Release { pick } => {
                let Some((at, tag)) = self.held(*pick) else {
                    return Ok(current);
                };
                let chan = &mut self.channels[at];
                chan.undecided.remove(&tag);
                chan.to_release.insert(tag);
                chan.tracker.release(tag);
                return Ok(at);
            }
            Op::Flush { pick } => {
                let at = pick % self.channels.len();
                self.channels[at].flush()?;
                return Ok(at);
            }
            Op::Lose => {
                let chan = self.current();
                chan.open = false;
                // The broker requeues everything unsettled on the channel, and the reader
                // drops what it had not handed out.
                // Handlers keep what they hold: deciding it later must fail.
                let outstanding = std::mem::take(&mut chan.outstanding);
                chan.requeued.extend(outstanding);
                let buffered = std::mem::take(&mut chan.buffered);
                chan.dropped.extend(buffered);
                self.channels.push(Chan::new());
                return Ok(current);
            }
        }
        Ok(current)
    }
}

#[test]
fn the_ack_tracker_settles_every_delivery_once_in_any_interleaving() {
    let config = Config {
        cases: 10_000,
        failure_persistence: None,
        ..Config::default()
    };
    proptesting::run(
        "ack tracker",
        config,
        prop::collection::vec(any::<u32>(), 1..100),
        |raw| {
            let ops: Vec<Op> = raw.into_iter().map(decode).collect();
            let mut model = Model {
                channels: vec![Chan::new()],
                next_waiter: 0,
            };
            let run = ops
                .iter()
                .try_for_each(|op| {
                    // The channel the op changed; the others did not change.
                    let at = model.step(op)?;
                    model.channels[at].check_invariants()
                })
                .and_then(|()| {
                    // Every tracker task runs once more: nothing decided is left anywhere.
                    for chan in &mut model.channels {
                        chan.flush()?;
                        chan.check_invariants()?;
                        prop_assert!(chan.to_ack.is_empty() && chan.to_release.is_empty());
                    }
                    Ok(())
                });
            run.map_err(|error| TestCaseError::fail(format!("{error}\nops: {ops:#?}")))
        },
    );
}
