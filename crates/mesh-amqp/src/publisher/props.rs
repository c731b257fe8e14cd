//! Property tests of the unconfirmed window: random interleavings of publishes, sends (and
//! frames that do not leave), acks and nacks (single and `multiple`), returns, confirms of
//! replaced channels, channel closes (plain, too large, refused exchange), lost connections
//! and reconnects, the clock and stalls, checked against a model of what a broker does.
//!
//! After every step: every message is settled at most once, with the outcome the broker's
//! frames call for, or still held; what is held is exactly what is unsettled, in publish
//! order (so a lost channel's messages go out again in publish order); the window never
//! holds more than its bound. At the end the broker confirms everything and nothing is left.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::test_runner::Config;

use super::window::{Message, Outcome, Returned, Window, NACK_RUN_REOPEN, STALL_AFTER};
use crate::error::BrokerClose;
use crate::proptesting;

/// The window's bound in messages (`confirm_window`) and in body bytes.
const BOUND: usize = 8;
const MAX_BYTES: usize = 64;

const EXCHANGES: [&str; 2] = ["mesh.events", "mesh.rpc"];
const SIZES: [usize; 4] = [1, 5, 10, 40];

#[derive(Debug, Clone)]
struct Msg {
    id: u64,
    resend: bool,
    mandatory: bool,
    exchange: &'static str,
    size: usize,
}

impl Message for Msg {
    fn resend(&self) -> bool {
        self.resend
    }
    fn mandatory(&self) -> bool {
        self.mandatory
    }
    fn exchange(&self) -> &str {
        self.exchange
    }
    fn routing_key(&self) -> &str {
        "k"
    }
    fn size(&self) -> usize {
        self.size
    }
}

#[derive(Debug, Clone)]
enum Refusal {
    Other,
    /// The broker refuses the `pick`-th message in flight as too large.
    TooLarge {
        pick: usize,
    },
    Exchange {
        exchange: usize,
    },
}

#[derive(Debug, Clone)]
enum Op {
    Publish {
        resend: bool,
        mandatory: bool,
        exchange: usize,
        size: usize,
    },
    /// The shell publishes up to `count` messages of the backlog.
    Send {
        count: usize,
    },
    /// A frame does not leave: the channel is given up.
    SendFails,
    OpenChannel,
    Ack {
        pick: usize,
        multiple: bool,
    },
    Nack {
        pick: usize,
        multiple: bool,
    },
    Return {
        pick: usize,
    },
    /// A confirm, return or close of a replaced channel arrives late.
    Stale {
        pick: usize,
        tag: u64,
        kind: u8,
    },
    ChannelClosed(Refusal),
    ConnectionLost,
    Reconnect,
    Wait {
        millis: u64,
    },
    Stall,
}

/// The op a random number stands for. Ops are drawn as plain numbers and decoded here
/// because generating them through nested strategies costs a hundred times more (seconds
/// per thousand cases); shrinking still removes ops and moves each toward a publish.
fn decode(raw: u32) -> Op {
    // Weights: how often each op comes, out of 28.
    let select = raw % 28;
    let arg = (raw / 28) as usize;
    let flag = arg % 2 == 1;
    match select {
        0..=4 => Op::Publish {
            // Mostly events (resent); RPC requests now and then.
            resend: arg % 5 != 4,
            mandatory: (arg / 5) % 2 == 1,
            exchange: (arg / 10) % EXCHANGES.len(),
            size: SIZES[(arg / 20) % SIZES.len()],
        },
        5..=8 => Op::Send { count: 1 + arg % 5 },
        9 => Op::SendFails,
        10 | 11 => Op::OpenChannel,
        12..=15 => Op::Ack {
            pick: arg / 2,
            multiple: flag,
        },
        16 | 17 => Op::Nack {
            pick: arg / 2,
            multiple: flag,
        },
        18 | 19 => Op::Return { pick: arg },
        20 => Op::Stale {
            pick: arg / 48,
            tag: 1 + (arg % 12) as u64,
            kind: ((arg / 12) % 4) as u8,
        },
        21 => Op::ChannelClosed(match arg % 3 {
            0 => Refusal::Other,
            1 => Refusal::TooLarge { pick: arg / 3 },
            _ => Refusal::Exchange {
                exchange: (arg / 3) % EXCHANGES.len(),
            },
        }),
        22 => Op::ConnectionLost,
        23 | 24 => Op::Reconnect,
        25 | 26 => Op::Wait {
            // Short waits, and waits around the nack-run delay.
            millis: if flag {
                900 + (arg % 300) as u64
            } else {
                (arg % 300) as u64
            },
        },
        _ => Op::Stall,
    }
}

fn unroutable() -> BrokerClose {
    BrokerClose {
        code: 312,
        text: "NO_ROUTE".to_owned(),
    }
}

/// The broker's view of the current channel.
#[derive(Debug)]
struct Chan {
    generation: u64,
    next_seq: u64,
    /// Published and not confirmed: sequence number → message id.
    unconfirmed: BTreeMap<u64, u64>,
    /// Sequence numbers the broker returned.
    returned: BTreeSet<u64>,
    /// The last id published on the channel.
    last_id: u64,
}

/// The model: the window under test, the broker, and what callers were told.
struct Model {
    window: Window<Msg>,
    now: Instant,
    messages: BTreeMap<u64, Msg>,
    /// Published, not settled.
    outstanding: BTreeSet<u64>,
    settled: BTreeMap<u64, Outcome>,
    /// How many times each message was published.
    sends: BTreeMap<u64, u32>,
    connected: bool,
    generation: u64,
    channel: Option<Chan>,
    replaced: Vec<u64>,
    stalled: bool,
    progress_at: Instant,
    nacked_since: Option<Instant>,
}

impl Model {
    fn new() -> Model {
        let now = Instant::now();
        Model {
            window: Window::new(now),
            now,
            messages: BTreeMap::new(),
            outstanding: BTreeSet::new(),
            settled: BTreeMap::new(),
            sends: BTreeMap::new(),
            connected: true,
            generation: 0,
            channel: None,
            replaced: Vec::new(),
            stalled: false,
            progress_at: now,
            nacked_since: None,
        }
    }

    fn outstanding_bytes(&self) -> usize {
        self.outstanding
            .iter()
            .map(|id| self.messages[id].size.min(MAX_BYTES))
            .sum()
    }

    /// What the window settled since the last call must be `expected` (in any order), and
    /// nothing is settled twice.
    fn expect(&mut self, mut expected: Vec<(u64, Outcome)>) -> Result<(), TestCaseError> {
        let mut got: Vec<(u64, Outcome)> = std::iter::from_fn(|| self.window.poll_settled())
            .map(|(m, o)| (m.id, o))
            .collect();
        got.sort_by_key(|(id, _)| *id);
        expected.sort_by_key(|(id, _)| *id);
        prop_assert_eq!(&got, &expected);
        for (id, outcome) in got {
            prop_assert!(self.outstanding.remove(&id), "{} settled but not held", id);
            prop_assert!(
                self.settled.insert(id, outcome).is_none(),
                "{} settled twice",
                id
            );
        }
        Ok(())
    }

    /// What losing the channel settles: every unsettled message that is not resent, except
    /// those `except`.
    fn not_resent(&self, except: &BTreeSet<u64>) -> Vec<(u64, Outcome)> {
        self.outstanding
            .iter()
            .filter(|id| !self.messages[id].resend && !except.contains(id))
            .map(|id| (*id, Outcome::NotResent))
            .collect()
    }

    fn forget_channel(&mut self) {
        if let Some(chan) = self.channel.take() {
            self.replaced.push(chan.generation);
        }
        self.nacked_since = None;
    }

    /// The broker confirms `pick` (and, with `multiple`, every unconfirmed one before it).
    fn confirm(&mut self, pick: usize, multiple: bool, ack: bool) -> Result<(), TestCaseError> {
        let Some(chan) = &mut self.channel else {
            return Ok(());
        };
        let Some(tag) = chan
            .unconfirmed
            .keys()
            .nth(pick % chan.unconfirmed.len().max(1))
        else {
            return Ok(());
        };
        let tag = *tag;
        let covered: Vec<u64> = if multiple {
            chan.unconfirmed
                .range(..=tag)
                .map(|(seq, _)| *seq)
                .collect()
        } else {
            vec![tag]
        };
        let mut expected = Vec::new();
        let mut confirmed = BTreeSet::new();
        for seq in covered {
            let Some(id) = chan.unconfirmed.remove(&seq) else {
                continue;
            };
            let outcome = match (ack, chan.returned.contains(&seq)) {
                (true, false) => Outcome::Acked,
                (true, true) => Outcome::Unroutable(unroutable()),
                (false, _) => Outcome::Nacked,
            };
            confirmed.insert(id);
            expected.push((id, outcome));
        }
        let generation = chan.generation;
        let progress = if ack {
            self.window.on_ack(generation, tag, multiple, self.now)
        } else {
            self.window.on_nack(generation, tag, multiple, self.now)
        };
        prop_assert!(!progress.stale);
        prop_assert_eq!(progress.unblocked, self.stalled, "unblocked iff stalled");
        self.stalled = false;
        self.progress_at = self.now;
        let reopen = if ack {
            self.nacked_since = None;
            false
        } else {
            let since = *self.nacked_since.get_or_insert(self.now);
            self.now.duration_since(since) >= NACK_RUN_REOPEN
        };
        prop_assert_eq!(progress.reopen, reopen, "reopen after a nack run");
        if reopen {
            expected.extend(self.not_resent(&confirmed));
            self.forget_channel();
        }
        self.expect(expected)
    }

    fn lose_channel(&mut self, refusal: &Refusal) -> Result<(), TestCaseError> {
        let Some(chan) = &self.channel else {
            return Ok(());
        };
        // The broker closes the channel over a message it was sent.
        let too_large = match refusal {
            Refusal::TooLarge { pick } if !chan.unconfirmed.is_empty() => chan
                .unconfirmed
                .values()
                .nth(pick % chan.unconfirmed.len())
                .map(|id| self.messages[id].size),
            _ => None,
        };
        let mut expected = self.not_resent(&BTreeSet::new());
        self.forget_channel();
        self.window.channel_lost();
        self.expect(std::mem::take(&mut expected))?;
        match (refusal, too_large) {
            (Refusal::TooLarge { .. }, Some(size)) => {
                // The oldest unsettled message of that size.
                let culprit = self
                    .outstanding
                    .iter()
                    .find(|id| self.messages[id].size == size)
                    .copied();
                prop_assert_eq!(self.window.refuse_too_large(size), culprit.is_some());
                expected.extend(culprit.map(|id| (id, Outcome::TooLarge)));
            }
            (Refusal::Exchange { exchange }, _) => {
                let exchange = EXCHANGES[*exchange];
                expected.extend(
                    self.outstanding
                        .iter()
                        .filter(|id| self.messages[id].exchange == exchange)
                        .map(|id| (*id, Outcome::Refused)),
                );
                prop_assert_eq!(self.window.refuse_exchange(exchange), expected.len());
            }
            _ => {}
        }
        self.expect(expected)
    }

    fn step(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Publish {
                resend,
                mandatory,
                exchange,
                size,
            } => {
                // The room of the window: a publish without room waits (outside the model).
                if self.outstanding.len() >= BOUND
                    || self.outstanding_bytes() + size.min(&MAX_BYTES) > MAX_BYTES
                {
                    return Ok(());
                }
                let id = self.messages.len() as u64 + 1;
                let message = Msg {
                    id,
                    resend: *resend,
                    mandatory: *mandatory,
                    exchange: EXCHANGES[*exchange],
                    size: *size,
                };
                self.messages.insert(id, message.clone());
                self.outstanding.insert(id);
                self.window.push(message);
            }
            Op::Send { count } => {
                let Some(chan) = &mut self.channel else {
                    return Ok(());
                };
                for _ in 0..*count {
                    let Some(queued) = self.window.pop_unsent() else {
                        break;
                    };
                    let id = queued.message.id;
                    let sends = self.sends.entry(id).or_default();
                    prop_assert_eq!(queued.sent, *sends, "times {} was sent", id);
                    *sends += 1;
                    prop_assert!(id > chan.last_id, "{} sent after {}", id, chan.last_id);
                    chan.last_id = id;
                    if chan.unconfirmed.is_empty() {
                        self.progress_at = self.now;
                    }
                    let seq = self.window.sent(queued, self.now);
                    prop_assert_eq!(seq, chan.next_seq, "the broker's numbering");
                    chan.next_seq += 1;
                    chan.unconfirmed.insert(seq, id);
                }
            }
            Op::SendFails => {
                if self.channel.is_none() {
                    return Ok(());
                }
                if let Some(queued) = self.window.pop_unsent() {
                    self.window.unsent(queued);
                }
                self.lose_channel(&Refusal::Other)?;
            }
            Op::OpenChannel => {
                if !self.connected || self.channel.is_some() {
                    return Ok(());
                }
                self.generation += 1;
                self.window.channel_opened(self.generation);
                self.nacked_since = None;
                self.channel = Some(Chan {
                    generation: self.generation,
                    next_seq: 1,
                    unconfirmed: BTreeMap::new(),
                    returned: BTreeSet::new(),
                    last_id: 0,
                });
            }
            Op::Ack { pick, multiple } => self.confirm(*pick, *multiple, true)?,
            Op::Nack { pick, multiple } => self.confirm(*pick, *multiple, false)?,
            Op::Return { pick } => {
                let Some(chan) = &mut self.channel else {
                    return Ok(());
                };
                // The broker returns a mandatory message before it acks it, once.
                let candidates: Vec<(u64, u64)> = chan
                    .unconfirmed
                    .iter()
                    .filter(|(seq, id)| self.messages[id].mandatory && !chan.returned.contains(seq))
                    .map(|(seq, id)| (*seq, *id))
                    .collect();
                let Some((seq, id)) = candidates.get(pick % candidates.len().max(1)).copied()
                else {
                    return Ok(());
                };
                chan.returned.insert(seq);
                let generation = chan.generation;
                let matched = self
                    .window
                    .on_return(generation, |m| m.id == id, unroutable());
                prop_assert_eq!(matched, Returned::Matched);
            }
            Op::Stale { pick, tag, kind } => {
                let Some(generation) = self.replaced.get(pick % self.replaced.len().max(1)) else {
                    return Ok(());
                };
                let generation = *generation;
                prop_assert!(!self.window.is_current(generation));
                match kind {
                    0 => prop_assert!(self.window.on_ack(generation, *tag, true, self.now).stale),
                    1 => prop_assert!(self.window.on_ack(generation, *tag, false, self.now).stale),
                    2 => prop_assert!(self.window.on_nack(generation, *tag, true, self.now).stale),
                    _ => prop_assert_eq!(
                        self.window.on_return(generation, |_| true, unroutable()),
                        Returned::Stale
                    ),
                }
                self.expect(Vec::new())?;
            }
            Op::ChannelClosed(refusal) => self.lose_channel(refusal)?,
            Op::ConnectionLost => {
                if !self.connected {
                    return Ok(());
                }
                self.connected = false;
                self.stalled = false;
                let expected = self.not_resent(&BTreeSet::new());
                self.forget_channel();
                self.window.connection_lost();
                self.expect(expected)?;
            }
            Op::Reconnect => self.connected = true,
            Op::Wait { millis } => self.now += Duration::from_millis(*millis),
            Op::Stall => {
                if let Some(at) = self.window.stall_at(self.connected) {
                    self.now = self.now.max(at);
                    self.window.stall();
                    self.stalled = true;
                }
            }
        }
        Ok(())
    }

    fn check_invariants(&self) -> Result<(), TestCaseError> {
        // Held is exactly what is unsettled, in publish order.
        let held: Vec<u64> = self.window.held().map(|m| m.id).collect();
        let outstanding: Vec<u64> = self.outstanding.iter().copied().collect();
        prop_assert_eq!(&held, &outstanding);
        let in_flight = self.channel.as_ref().map_or(0, |c| c.unconfirmed.len());
        prop_assert_eq!(self.window.in_flight(), in_flight);
        prop_assert_eq!(self.window.backlog(), held.len() - in_flight);
        prop_assert!(held.len() <= BOUND);
        prop_assert!(self.outstanding_bytes() <= MAX_BYTES);
        prop_assert_eq!(self.window.is_idle(), held.is_empty());
        // The stall clock runs only while something waits on a live connection.
        let stall_at = (!self.stalled && in_flight > 0 && self.connected)
            .then(|| self.progress_at + STALL_AFTER);
        prop_assert_eq!(self.window.stall_at(self.connected), stall_at);
        for generation in &self.replaced {
            prop_assert!(!self.window.is_current(*generation));
        }
        if let Some(chan) = &self.channel {
            prop_assert!(self.window.is_current(chan.generation));
        }
        Ok(())
    }

    /// The connection comes back and the broker acks everything: nothing is left, and every
    /// message was settled exactly once.
    fn drain(&mut self) -> Result<(), TestCaseError> {
        self.step(&Op::Reconnect)?;
        self.step(&Op::OpenChannel)?;
        self.step(&Op::Send { count: BOUND })?;
        self.check_invariants()?;
        let in_flight = self.window.in_flight();
        if in_flight > 0 {
            self.step(&Op::Ack {
                pick: in_flight - 1,
                multiple: true,
            })?;
        }
        self.check_invariants()?;
        prop_assert!(self.window.is_idle());
        prop_assert!(self.outstanding.is_empty());
        prop_assert_eq!(self.settled.len(), self.messages.len());
        Ok(())
    }
}

#[test]
fn the_window_settles_every_message_once_in_any_interleaving() {
    let config = Config {
        cases: 10_000,
        failure_persistence: None,
        ..Config::default()
    };
    proptesting::run(
        "window",
        config,
        prop::collection::vec(any::<u32>(), 1..80),
        |raw| {
            let ops: Vec<Op> = raw.into_iter().map(decode).collect();
            let mut model = Model::new();
            let run = ops
                .iter()
                .try_for_each(|op| {
                    model.step(op)?;
                    model.check_invariants()
                })
                .and_then(|()| model.drain());
            run.map_err(|error| TestCaseError::fail(format!("{error}\nops: {ops:#?}")))
        },
    );
}
