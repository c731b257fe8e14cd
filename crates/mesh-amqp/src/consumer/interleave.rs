//! Every interleaving of what the ack tracker, the pump, the handlers, the broker and the
//! client library's dispatcher do around one consumer channel's close, checked
//! exhaustively against a model of the broker: no frame may reach the broker on a channel
//! whose number it has freed (`504 CHANNEL_ERROR - expected 'channel.open'`, a connection
//! error), and every awaited ack is answered once, `Ok` only if its frame went out.
//!
//! The actors and their atomic steps (a step is what runs between two awaits of the shell,
//! or under the channel's gate):
//!
//! - handlers: ack 1, release 2, ack 3 (delivered and registered beforehand);
//! - the ack tracker ([`super::tracker`]): flush the state machine ([`AckTracker::flush`])
//!   with what it sees of the channel, send the frames; again once the handlers are done
//!   (its commands ended); then close the channel (mark the close begun, then send
//!   `channel.close`);
//! - the pump ([`super::pump`]): `basic.cancel`;
//! - the broker: closes the channel on its own (a channel error, a consumer timeout), or not;
//! - the client library's dispatcher, once the broker's `channel.close` arrived: runs the
//!   close callback (`CloseCatcher`), marks the channel closed, writes `channel.close-ok`,
//!   after which the broker frees the channel.
//!
//! Frames reach the broker in the order they were enqueued (one writer per connection), so
//! a frame is judged when it is enqueued: on an open channel it is taken, on one whose
//! close the broker sent it is discarded (harmless), on a freed one it is the connection
//! error. [`Protocol::Gated`] is the shell's protocol ([`crate::gate`]); [`Protocol::Ungated`]
//! is the one before it (the tracker looked at the channel when it flushed, and sent
//! later), which the checker must find the race in.

use std::collections::{BTreeMap, HashSet};

use super::ack::{AckTracker, Frame};
use crate::gate::{Closer, Gate};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Protocol {
    /// Before the gate: the tracker checks the channel when it flushes, sends afterwards,
    /// and the broker's close callback marks nothing.
    Ungated,
    /// With the gate: sends and closes as `crate::gate` describes.
    Gated,
}

/// The channel as the broker sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Broker {
    Open,
    /// The broker sent `channel.close`: it discards what comes until the close-ok.
    Closing,
    /// The close is through (either side's): the channel's number is free.
    Freed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Actor {
    Handlers,
    Tracker,
    Pump,
    Broker,
    Dispatcher,
}

const ACTORS: [Actor; 5] = [
    Actor::Handlers,
    Actor::Tracker,
    Actor::Pump,
    Actor::Broker,
    Actor::Dispatcher,
];

/// The steps of each actor, in order.
fn steps(actor: Actor) -> usize {
    match actor {
        Actor::Handlers => 3,
        // flush, send, final flush, final send, mark the close, send the close
        Actor::Tracker => 6,
        Actor::Pump => 1,
        Actor::Broker => 1,
        // callback, mark closed, close-ok
        Actor::Dispatcher => 3,
    }
}

/// One scenario: whether the broker closes the channel, whether the pump cancels.
#[derive(Debug, Clone, Copy)]
struct Scenario {
    protocol: Protocol,
    broker_closes: bool,
    pump_cancels: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct World {
    tracker: AckTracker<u64>,
    gate: Gate,
    /// The client library's `is_open`.
    open: bool,
    broker: Broker,
    /// The broker's `channel.close` reached the dispatcher.
    close_arrived: bool,
    /// The tracker flushed, and has not sent yet: the frames, who waits, whether lost.
    pending: Option<(Vec<Frame>, Vec<u64>, bool)>,
    /// The tracker's close is the first (it sends `channel.close`).
    tracker_closes: bool,
    /// Each awaited ack's answer (its waiter is its tag): sent or failed.
    answers: BTreeMap<u64, Vec<bool>>,
    /// Acks whose frame was enqueued (a `multiple` one covers what is below it).
    acked_frames: Vec<(u64, bool)>,
    /// Where each actor is in its steps.
    at: [usize; 5],
}

impl World {
    fn new() -> World {
        let mut tracker = AckTracker::default();
        for tag in 1..=3 {
            tracker.delivered(tag);
        }
        World {
            tracker,
            gate: Gate::default(),
            open: true,
            broker: Broker::Open,
            close_arrived: false,
            pending: None,
            tracker_closes: false,
            answers: BTreeMap::new(),
            acked_frames: Vec::new(),
            at: [0; 5],
        }
    }

    fn done(&self, actor: Actor) -> bool {
        self.at[actor as usize] >= steps(actor)
    }

    /// Whether `actor`'s next step can run now.
    fn enabled(&self, actor: Actor) -> bool {
        if self.done(actor) {
            return false;
        }
        match (actor, self.at[actor as usize]) {
            // The final flush: the tracker's commands ended once the handlers are done.
            (Actor::Tracker, 2) => self.done(Actor::Handlers),
            (Actor::Dispatcher, _) => self.close_arrived,
            _ => true,
        }
    }

    /// A frame enqueued on the channel, judged by the broker when it reads it.
    fn enqueue(&mut self, what: &str) -> Result<(), String> {
        match self.broker {
            Broker::Open | Broker::Closing => Ok(()),
            Broker::Freed => Err(format!(
                "{what} reached the broker after the channel's close: 504 CHANNEL_ERROR, \
                 the connection is closed"
            )),
        }
    }

    /// Runs `actor`'s next step.
    fn step(&mut self, actor: Actor, scenario: Scenario) -> Result<(), String> {
        let gated = scenario.protocol == Protocol::Gated;
        let at = self.at[actor as usize];
        self.at[actor as usize] += 1;
        match (actor, at) {
            (Actor::Handlers, 0) => self.tracker.ack(1, 1),
            (Actor::Handlers, 1) => self.tracker.release(2),
            (Actor::Handlers, _) => self.tracker.ack(3, 3),
            (Actor::Tracker, 0 | 2) => {
                let open = if gated {
                    self.open && self.gate.may_send()
                } else {
                    self.open
                };
                let flush = self.tracker.flush(open);
                self.pending = Some((flush.frames, flush.waiters, flush.lost));
            }
            (Actor::Tracker, 1 | 3) => {
                let (frames, waiters, lost) = self.pending.take().unwrap_or_default();
                // Gated: under the gate, nothing if a close began.
                let refused = lost || (gated && !(self.gate.may_send() && self.open));
                if !refused {
                    for frame in &frames {
                        self.enqueue(&format!("{frame:?}"))?;
                        if let Frame::Ack { tag, multiple } = frame {
                            self.acked_frames.push((*tag, *multiple));
                        }
                    }
                }
                for waiter in waiters {
                    self.answers.entry(waiter).or_default().push(!refused);
                }
            }
            (Actor::Tracker, 4) => {
                self.tracker_closes = if gated {
                    self.gate.close_began(Closer::Client)
                } else {
                    true
                };
            }
            (Actor::Tracker, _) => {
                // `Channel::close`: the client library's compare-and-swap of `is_open`.
                if self.tracker_closes && self.open {
                    self.open = false;
                    self.enqueue("channel.close")?;
                    // The broker answers close-ok and frees the channel, unless its own
                    // close crossed ours (it then waits for our close-ok).
                    if self.broker == Broker::Open {
                        self.broker = Broker::Freed;
                    }
                }
            }
            (Actor::Pump, _) => {
                if scenario.pump_cancels {
                    let may = if gated {
                        self.gate.may_send() && self.open
                    } else {
                        self.open
                    };
                    if may {
                        self.enqueue("basic.cancel")?;
                    }
                }
            }
            (Actor::Broker, _) => {
                if scenario.broker_closes && self.broker == Broker::Open {
                    self.broker = Broker::Closing;
                    self.close_arrived = true;
                } else {
                    // No close of the broker's: the dispatcher has nothing to answer.
                    self.at[Actor::Dispatcher as usize] = steps(Actor::Dispatcher);
                }
            }
            (Actor::Dispatcher, 0) => {
                if gated {
                    self.gate.close_began(Closer::Broker);
                }
            }
            (Actor::Dispatcher, 1) => self.open = false,
            (Actor::Dispatcher, _) => {
                // The close-ok: the broker frees the channel.
                self.enqueue("channel.close-ok")?;
                self.broker = Broker::Freed;
            }
        }
        Ok(())
    }

    /// What must hold once every actor is done.
    fn check_end(&self) -> Result<(), String> {
        for waiter in [1, 3] {
            let answers = self.answers.get(&waiter).map(Vec::as_slice).unwrap_or(&[]);
            if answers.len() != 1 {
                return Err(format!("ack {waiter} answered {} times", answers.len()));
            }
            let covered = self
                .acked_frames
                .iter()
                .any(|(tag, multiple)| *tag == waiter || (*multiple && waiter < *tag));
            if answers[0] && !covered {
                return Err(format!("ack {waiter} answered Ok, but no frame carried it"));
            }
        }
        Ok(())
    }
}

/// Explores every interleaving of `scenario`; the first violation found, with the steps
/// that led to it. Returns how many distinct states were visited.
fn explore(scenario: Scenario) -> Result<usize, String> {
    let mut seen = HashSet::new();
    let mut trail = Vec::new();
    visit(&World::new(), scenario, &mut seen, &mut trail)?;
    Ok(seen.len())
}

fn visit(
    world: &World,
    scenario: Scenario,
    seen: &mut HashSet<World>,
    trail: &mut Vec<(Actor, usize)>,
) -> Result<(), String> {
    if !seen.insert(world.clone()) {
        return Ok(());
    }
    let mut moved = false;
    for actor in ACTORS {
        if !world.enabled(actor) {
            continue;
        }
        moved = true;
        let mut next = world.clone();
        trail.push((actor, world.at[actor as usize]));
        next.step(actor, scenario)
            .map_err(|e| format!("{scenario:?}: {e}\n  after {trail:?}"))?;
        visit(&next, scenario, seen, trail)?;
        trail.pop();
    }
    if !moved {
        if ACTORS.iter().any(|actor| !world.done(*actor)) {
            return Err(format!("{scenario:?}: stuck\n  after {trail:?}"));
        }
        world
            .check_end()
            .map_err(|e| format!("{scenario:?}: {e}\n  after {trail:?}"))?;
    }
    Ok(())
}

fn scenarios(protocol: Protocol) -> impl Iterator<Item = Scenario> {
    [(true, true), (true, false), (false, true), (false, false)]
        .into_iter()
        .map(move |(broker_closes, pump_cancels)| Scenario {
            protocol,
            broker_closes,
            pump_cancels,
        })
}

#[test]
fn no_frame_follows_a_channels_close_in_any_interleaving() {
    for scenario in scenarios(Protocol::Gated) {
        match explore(scenario) {
            Ok(states) => println!("{scenario:?}: {states} states, no violation"),
            Err(violation) => panic!("{violation}"),
        }
    }
}

/// The checker is not vacuous: on the tracker as it was before the gate (it looked at the
/// channel when it flushed, and sent afterwards), it finds the race with the broker's close.
#[test]
fn without_the_gate_an_ack_can_follow_the_brokers_close() {
    let scenario = Scenario {
        protocol: Protocol::Ungated,
        broker_closes: true,
        pump_cancels: false,
    };
    let violation = explore(scenario).expect_err("the ungated tracker races the close");
    println!("{violation}");
    assert!(violation.contains("504 CHANNEL_ERROR"), "{violation}");
}
