//! The unconfirmed window as a state machine: which message the broker's `basic.ack`,
//! `basic.nack` and `basic.return` are about, what a lost channel sends again and in which
//! order, what is not sent again, and when the broker looks stalled.
//!
//! It does no I/O and owns no task, lock or timer: the publish task ([`super`]) feeds it
//! what happened (a message taken in, a frame sent, a confirm, a return, a lost or refused
//! channel), with the time as a value where time matters, and performs what it says: answer
//! a settled message's caller ([`Window::poll_settled`]), replace the channel
//! ([`Progress::reopen`]), report the link blocked or unblocked. So every ordering a broker
//! can produce is tested in microseconds (the unit tests below and the property tests of
//! `props`), without one.
//!
//! A message `M` is the shell's (with its caller's answer and its room in the window); the
//! machine only reads what [`Message`] asks of it. It holds each message exactly once: in
//! the *backlog* (to be published, in publish order) or *in flight* (published on the
//! current channel, by sequence number); a settled message leaves both before the shell
//! learns its outcome, so nothing is retained after settling.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::error::BrokerClose;

/// How long the broker may nack every publish on a channel, acking none, before the channel
/// is replaced (see the publisher's module docs).
pub(crate) const NACK_RUN_REOPEN: Duration = Duration::from_secs(1);

/// How long messages may wait for a confirm, with none coming, before the publishing
/// connection is reported blocked (see the publisher's module docs).
pub(crate) const STALL_AFTER: Duration = Duration::from_secs(5);

/// How long messages may wait for a confirm, with none coming and the broker not saying it
/// blocks the connection, before the publishing connection is given up as stuck and replaced
/// (see the publisher's module docs, "Stuck").
pub(crate) const STUCK_AFTER: Duration = Duration::from_secs(10);

/// What the window reads of a message.
pub(crate) trait Message {
    /// Published again after a lost channel (`false`: fails instead, RPC requests).
    fn resend(&self) -> bool;
    /// Returned by the broker when no queue takes it.
    fn mandatory(&self) -> bool;
    /// The exchange it is published to.
    fn exchange(&self) -> &str;
    /// The routing key it is published with.
    fn routing_key(&self) -> &str;
    /// Its body's size in bytes (what the broker's size limit counts).
    fn size(&self) -> usize;
}

/// How a message left the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// `basic.ack`: the broker has it.
    Acked,
    /// `basic.ack` after a `basic.return`: no queue took it.
    Unroutable(BrokerClose),
    /// `basic.nack`.
    Nacked,
    /// Its channel was lost and it is not published again (`resend = false`).
    NotResent,
    /// The broker refused it as too large, closing the channel.
    TooLarge,
    /// The broker refused its exchange (gone and not ours, or forbidden).
    Refused,
    /// The window was closed.
    Closed,
}

/// A message waiting to be published, or taken out to be.
#[derive(Debug)]
pub(crate) struct Queued<M> {
    pub(crate) message: M,
    /// How many times it was published before.
    pub(crate) sent: u32,
}

/// A message published on the current channel, waiting for the broker.
#[derive(Debug)]
struct InFlight<M> {
    seq: u64,
    queued: Queued<M>,
    /// A `basic.return` came for it: its ack means "unroutable".
    returned: Option<BrokerClose>,
}

/// What a confirm (`basic.ack` or `basic.nack`) did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Progress {
    /// It came on a replaced channel and was ignored.
    pub(crate) stale: bool,
    /// The link was reported blocked (a stall): report it unblocked.
    pub(crate) unblocked: bool,
    /// The broker has nacked everything on the channel for [`NACK_RUN_REOPEN`]: the channel
    /// is given up (its unsettled messages are back in the backlog); open another one later.
    pub(crate) reopen: bool,
}

/// What a `basic.return` matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Returned {
    /// An unsettled message, whose ack now means "unroutable".
    Matched,
    /// Nothing unsettled (the shell counts it).
    Unmatched,
    /// It came on a replaced channel and was ignored.
    Stale,
}

/// The unconfirmed window; see the module docs.
#[derive(Debug)]
pub(crate) struct Window<M> {
    /// The generation of the channel messages are numbered on (`None`: no channel).
    channel: Option<u64>,
    /// The sequence number the broker gives the next publish on the channel (1, 2, …
    /// from `confirm.select`).
    next_seq: u64,
    /// Published on the channel and unsettled, by sequence number, ascending.
    in_flight: VecDeque<InFlight<M>>,
    /// Waiting to be published, in publish order.
    backlog: VecDeque<Queued<M>>,
    /// Settled, for the shell to answer.
    settled: VecDeque<(M, Outcome)>,
    /// Since when the channel's confirms have all been nacks (`None` after an ack, or on a
    /// new channel).
    nacked_since: Option<Instant>,
    /// When the broker last settled anything, or the window last started to fill.
    progress_at: Instant,
    /// Reported blocked for want of confirms.
    stalled: bool,
}

impl<M: Message> Window<M> {
    pub(crate) fn new(now: Instant) -> Self {
        Window {
            channel: None,
            next_seq: 1,
            in_flight: VecDeque::new(),
            backlog: VecDeque::new(),
            settled: VecDeque::new(),
            nacked_since: None,
            progress_at: now,
            stalled: false,
        }
    }

    /// Messages published on the channel and not yet settled.
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Messages waiting to be published.
    pub(crate) fn backlog(&self) -> usize {
        self.backlog.len()
    }

    /// Nothing is unsettled: neither in flight nor waiting.
    pub(crate) fn is_idle(&self) -> bool {
        self.in_flight.is_empty() && self.backlog.is_empty()
    }

    /// Whether `generation` is the channel messages are numbered on.
    pub(crate) fn is_current(&self, generation: u64) -> bool {
        self.channel == Some(generation)
    }

    /// Takes in a new message, behind everything waiting.
    pub(crate) fn push(&mut self, message: M) {
        self.backlog.push_back(Queued { message, sent: 0 });
    }

    /// A channel in confirm mode is open, as `generation`: the broker numbers its publishes
    /// from 1.
    pub(crate) fn channel_opened(&mut self, generation: u64) {
        // Whatever a previous channel held is in the backlog already (`channel_lost`).
        debug_assert!(self.in_flight.is_empty());
        self.channel = Some(generation);
        self.next_seq = 1;
        self.nacked_since = None;
    }

    /// The oldest message waiting, to publish it now: hand it back with
    /// [`sent`](Self::sent) or, if its frame did not leave, [`unsent`](Self::unsent).
    pub(crate) fn pop_unsent(&mut self) -> Option<Queued<M>> {
        self.backlog.pop_front()
    }

    /// `queued` was published on the current channel: it waits for the broker under the
    /// next sequence number, which is returned.
    pub(crate) fn sent(&mut self, mut queued: Queued<M>, now: Instant) -> u64 {
        if self.in_flight.is_empty() {
            // The stall clock starts when something starts waiting.
            self.progress_at = now;
        }
        queued.sent += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        self.in_flight.push_back(InFlight {
            seq,
            queued,
            returned: None,
        });
        seq
    }

    /// `queued` could not be published (the channel is unusable): it goes back to the
    /// front; the shell gives the channel up next ([`channel_lost`](Self::channel_lost)).
    pub(crate) fn unsent(&mut self, queued: Queued<M>) {
        self.backlog.push_front(queued);
    }

    /// `basic.ack` of `tag` (and, with `multiple`, of everything before it) on channel
    /// `generation`.
    pub(crate) fn on_ack(
        &mut self,
        generation: u64,
        tag: u64,
        multiple: bool,
        now: Instant,
    ) -> Progress {
        if !self.is_current(generation) {
            return Progress {
                stale: true,
                ..Progress::default()
            };
        }
        self.nacked_since = None;
        let unblocked = self.on_progress(now);
        self.settle(tag, multiple, true);
        Progress {
            unblocked,
            ..Progress::default()
        }
    }

    /// `basic.nack` of `tag` (and, with `multiple`, of everything before it) on channel
    /// `generation`. A channel whose confirms have all been nacks for [`NACK_RUN_REOPEN`]
    /// is given up ([`Progress::reopen`]): RabbitMQ can tie a channel to a quorum queue's
    /// dead leader, while a new channel reaches the new one.
    pub(crate) fn on_nack(
        &mut self,
        generation: u64,
        tag: u64,
        multiple: bool,
        now: Instant,
    ) -> Progress {
        if !self.is_current(generation) {
            return Progress {
                stale: true,
                ..Progress::default()
            };
        }
        let unblocked = self.on_progress(now);
        self.settle(tag, multiple, false);
        let since = *self.nacked_since.get_or_insert(now);
        let reopen = now.saturating_duration_since(since) >= NACK_RUN_REOPEN;
        if reopen {
            self.channel_lost();
        }
        Progress {
            stale: false,
            unblocked,
            reopen,
        }
    }

    /// How long the current nack run has lasted (`None`: the last confirm was an ack).
    #[cfg(test)]
    pub(crate) fn nack_run(&self, now: Instant) -> Option<Duration> {
        self.nacked_since
            .map(|since| now.saturating_duration_since(since))
    }

    /// A `basic.return` on channel `generation`. It carries no sequence number, so it is
    /// matched to the oldest unsettled, not yet returned, mandatory message for which
    /// `matches` holds (the shell compares exchange, routing key, ids and body): returns come
    /// in publish order, and messages equal in all of that are interchangeable.
    pub(crate) fn on_return(
        &mut self,
        generation: u64,
        mut matches: impl FnMut(&M) -> bool,
        close: BrokerClose,
    ) -> Returned {
        if !self.is_current(generation) {
            return Returned::Stale;
        }
        let found = self.in_flight.iter_mut().find(|entry| {
            let message = &entry.queued.message;
            entry.returned.is_none() && message.mandatory() && matches(message)
        });
        match found {
            Some(entry) => {
                entry.returned = Some(close);
                Returned::Matched
            }
            None => Returned::Unmatched,
        }
    }

    /// The channel is gone (closed by the broker, given up, or with its connection): what
    /// was unsettled on it may or may not have reached a queue, so it goes back to the front
    /// of the backlog, in publish order, to be published again on the next channel;
    /// messages that are not resent settle as [`Outcome::NotResent`] instead.
    pub(crate) fn channel_lost(&mut self) {
        self.channel = None;
        self.nacked_since = None;
        // Everything in flight was published before anything in the backlog.
        while let Some(entry) = self.in_flight.pop_back() {
            self.backlog.push_front(entry.queued);
        }
        if self.backlog.iter().all(|q| q.message.resend()) {
            return;
        }
        let (kept, failed): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.backlog)
            .into_iter()
            .partition(|q| q.message.resend());
        self.backlog = kept;
        self.settled
            .extend(failed.into_iter().map(|q| (q.message, Outcome::NotResent)));
    }

    /// The connection is gone: its channel with it, and the stall clock starts over on the
    /// next connection (going down ends a block).
    pub(crate) fn connection_lost(&mut self) {
        self.channel_lost();
        self.stalled = false;
    }

    /// The broker closed the channel refusing a message of `size` bytes as too large (after
    /// [`channel_lost`](Self::channel_lost)): the oldest waiting message of that size
    /// settles as [`Outcome::TooLarge`] and is not sent again. Whether one was found.
    pub(crate) fn refuse_too_large(&mut self, size: usize) -> bool {
        let culprit = self.backlog.iter().position(|q| q.message.size() == size);
        match culprit.and_then(|at| self.backlog.remove(at)) {
            Some(queued) => {
                self.settled.push_back((queued.message, Outcome::TooLarge));
                true
            }
            None => false,
        }
    }

    /// The broker closed the channel refusing `exchange` (after
    /// [`channel_lost`](Self::channel_lost)): every waiting message to it settles as
    /// [`Outcome::Refused`]. How many.
    pub(crate) fn refuse_exchange(&mut self, exchange: &str) -> usize {
        let (refused, kept): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.backlog)
            .into_iter()
            .partition(|q| q.message.exchange() == exchange);
        self.backlog = kept;
        let count = refused.len();
        self.settled
            .extend(refused.into_iter().map(|q| (q.message, Outcome::Refused)));
        count
    }

    /// The broker closed the channel refusing a topic of `exchange` (after
    /// [`channel_lost`](Self::channel_lost)): every waiting message to `exchange` under `key`
    /// settles as [`Outcome::Refused`] (the broker would refuse each again); the rest stays
    /// to be resent. How many.
    pub(crate) fn refuse_topic(&mut self, exchange: &str, key: &str) -> usize {
        let (refused, kept): (VecDeque<_>, VecDeque<_>) = std::mem::take(&mut self.backlog)
            .into_iter()
            .partition(|q| q.message.exchange() == exchange && q.message.routing_key() == key);
        self.backlog = kept;
        let count = refused.len();
        self.settled
            .extend(refused.into_iter().map(|q| (q.message, Outcome::Refused)));
        count
    }

    /// The broker refused the `user-id` every message carries (after
    /// [`channel_lost`](Self::channel_lost)): every waiting message settles as
    /// [`Outcome::Refused`]. How many.
    pub(crate) fn refuse_all(&mut self) -> usize {
        let refused = std::mem::take(&mut self.backlog);
        let count = refused.len();
        self.settled
            .extend(refused.into_iter().map(|q| (q.message, Outcome::Refused)));
        count
    }

    /// When the window will have waited too long for a confirm, if it is waiting: messages
    /// are in flight on a live connection and the link is not reported blocked yet.
    pub(crate) fn stall_at(&self, connected: bool) -> Option<Instant> {
        (!self.stalled && !self.in_flight.is_empty() && connected)
            .then_some(self.progress_at + STALL_AFTER)
    }

    /// When the window will have waited so long for a confirm that its connection counts as
    /// stuck, if it is waiting: messages are in flight on a live connection (which the
    /// broker does not say it blocks) and nothing was confirmed for [`STUCK_AFTER`].
    pub(crate) fn stuck_at(&self, connected: bool) -> Option<Instant> {
        (!self.in_flight.is_empty() && connected).then_some(self.progress_at + STUCK_AFTER)
    }

    /// The stall time came: the link is to be reported blocked until the next confirm.
    pub(crate) fn stall(&mut self) {
        self.stalled = true;
    }

    /// Whether the link is reported blocked for want of confirms.
    #[cfg(test)]
    pub(crate) fn stalled(&self) -> bool {
        self.stalled
    }

    /// Every message, settled as [`Outcome::Closed`]: in flight first, then the backlog.
    pub(crate) fn close(&mut self) {
        self.channel = None;
        let in_flight = std::mem::take(&mut self.in_flight);
        let backlog = std::mem::take(&mut self.backlog);
        self.settled.extend(
            in_flight
                .into_iter()
                .map(|entry| entry.queued)
                .chain(backlog)
                .map(|q| (q.message, Outcome::Closed)),
        );
    }

    /// Every message held, in the order it goes out again: in flight by sequence number,
    /// then the backlog.
    #[cfg(test)]
    pub(crate) fn held(&self) -> impl Iterator<Item = &M> {
        self.in_flight
            .iter()
            .map(|entry| &entry.queued.message)
            .chain(self.backlog.iter().map(|q| &q.message))
    }

    /// The next settled message and its outcome, for the shell to answer its caller.
    pub(crate) fn poll_settled(&mut self) -> Option<(M, Outcome)> {
        self.settled.pop_front()
    }

    /// The broker settled something: it reads and confirms again. Whether that ends a
    /// reported stall.
    fn on_progress(&mut self, now: Instant) -> bool {
        self.progress_at = now;
        std::mem::replace(&mut self.stalled, false)
    }

    /// Settles `tag` (and, with `multiple`, everything before it): acked or nacked.
    fn settle(&mut self, tag: u64, multiple: bool, acked: bool) {
        let outcome = |entry: InFlight<M>| {
            let outcome = match (acked, entry.returned) {
                (true, None) => Outcome::Acked,
                (true, Some(close)) => Outcome::Unroutable(close),
                (false, _) => Outcome::Nacked,
            };
            (entry.queued.message, outcome)
        };
        // In sequence order; the broker mostly settles the front.
        let upto = self.in_flight.partition_point(|entry| entry.seq <= tag);
        if multiple {
            let settled = self.in_flight.drain(..upto).map(outcome);
            self.settled.extend(settled);
        } else if let Some(at) = upto.checked_sub(1) {
            if self.in_flight[at].seq == tag {
                if let Some(entry) = self.in_flight.remove(at) {
                    self.settled.push_back(outcome(entry));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A message of the tests: its number, and what the window reads.
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub(crate) struct Msg {
        pub(crate) id: u64,
        pub(crate) resend: bool,
        pub(crate) mandatory: bool,
        pub(crate) exchange: &'static str,
        pub(crate) key: &'static str,
        pub(crate) size: usize,
    }

    impl Msg {
        fn new(id: u64) -> Msg {
            Msg {
                id,
                resend: true,
                mandatory: true,
                exchange: "mesh.events",
                key: "module.a.x",
                size: 10,
            }
        }
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
            self.key
        }
        fn size(&self) -> usize {
            self.size
        }
    }

    fn settled(window: &mut Window<Msg>) -> Vec<(u64, Outcome)> {
        std::iter::from_fn(|| window.poll_settled())
            .map(|(m, o)| (m.id, o))
            .collect()
    }

    /// Publishes everything waiting on the current channel; the sequence numbers given.
    fn send_all(window: &mut Window<Msg>, now: Instant) -> Vec<u64> {
        let mut seqs = Vec::new();
        while let Some(queued) = window.pop_unsent() {
            seqs.push(window.sent(queued, now));
        }
        seqs
    }

    fn close(code: u16) -> BrokerClose {
        BrokerClose {
            code,
            text: "NO_ROUTE".to_owned(),
        }
    }

    /// A window with messages `1..=n` published on channel 1.
    fn published(n: u64, now: Instant) -> Window<Msg> {
        let mut window = Window::new(now);
        for id in 1..=n {
            window.push(Msg::new(id));
        }
        window.channel_opened(1);
        assert_eq!(send_all(&mut window, now), (1..=n).collect::<Vec<_>>());
        window
    }

    #[test]
    fn publishes_are_numbered_from_one_on_each_channel() {
        let now = Instant::now();
        let mut window = published(3, now);
        assert_eq!(window.in_flight(), 3);
        window.channel_lost();
        window.push(Msg::new(4));
        window.channel_opened(2);
        // Renumbered from 1, in publish order, the new one last.
        assert_eq!(send_all(&mut window, now), [1, 2, 3, 4]);
        window.on_ack(2, 4, true, now);
        assert_eq!(
            settled(&mut window),
            (1..=4).map(|id| (id, Outcome::Acked)).collect::<Vec<_>>()
        );
        assert!(window.is_idle());
    }

    #[test]
    fn a_single_ack_settles_only_its_tag() {
        let now = Instant::now();
        let mut window = published(3, now);
        window.on_ack(1, 2, false, now);
        assert_eq!(settled(&mut window), [(2, Outcome::Acked)]);
        assert_eq!(window.in_flight(), 2);
        // An ack of a tag not in flight (settled already) settles nothing.
        window.on_ack(1, 2, false, now);
        assert!(settled(&mut window).is_empty());
        window.on_ack(1, 3, false, now);
        window.on_ack(1, 1, false, now);
        assert_eq!(
            settled(&mut window),
            [(3, Outcome::Acked), (1, Outcome::Acked)]
        );
    }

    #[test]
    fn a_multiple_ack_settles_everything_up_to_its_tag() {
        let now = Instant::now();
        let mut window = published(5, now);
        window.on_ack(1, 2, false, now);
        window.on_ack(1, 4, true, now);
        assert_eq!(
            settled(&mut window),
            [
                (2, Outcome::Acked),
                (1, Outcome::Acked),
                (3, Outcome::Acked),
                (4, Outcome::Acked)
            ]
        );
        assert_eq!(window.in_flight(), 1);
    }

    #[test]
    fn nacks_single_and_multiple_settle_as_nacked() {
        let now = Instant::now();
        let mut window = published(4, now);
        window.on_nack(1, 3, false, now);
        assert_eq!(settled(&mut window), [(3, Outcome::Nacked)]);
        window.on_nack(1, 4, true, now);
        assert_eq!(
            settled(&mut window),
            [
                (1, Outcome::Nacked),
                (2, Outcome::Nacked),
                (4, Outcome::Nacked)
            ]
        );
        assert!(window.is_idle());
    }

    #[test]
    fn a_return_before_the_ack_makes_it_unroutable() {
        let now = Instant::now();
        let mut window = published(3, now);
        let matched = window.on_return(1, |m| m.id >= 2, close(312));
        assert_eq!(matched, Returned::Matched);
        // The oldest matching one, and only once.
        assert_eq!(
            window.on_return(1, |m| m.id == 2, close(312)),
            Returned::Unmatched
        );
        window.on_ack(1, 3, true, now);
        assert_eq!(
            settled(&mut window),
            [
                (1, Outcome::Acked),
                (2, Outcome::Unroutable(close(312))),
                (3, Outcome::Acked)
            ]
        );
    }

    #[test]
    fn a_return_matches_only_mandatory_messages() {
        let now = Instant::now();
        let mut window = Window::new(now);
        window.push(Msg {
            mandatory: false,
            ..Msg::new(1)
        });
        window.channel_opened(1);
        send_all(&mut window, now);
        assert_eq!(
            window.on_return(1, |_| true, close(312)),
            Returned::Unmatched
        );
        window.on_ack(1, 1, false, now);
        assert_eq!(settled(&mut window), [(1, Outcome::Acked)]);
    }

    #[test]
    fn a_returned_message_that_is_nacked_is_nacked() {
        let now = Instant::now();
        let mut window = published(1, now);
        window.on_return(1, |_| true, close(312));
        window.on_nack(1, 1, false, now);
        assert_eq!(settled(&mut window), [(1, Outcome::Nacked)]);
    }

    #[test]
    fn a_return_is_forgotten_with_its_channel() {
        let now = Instant::now();
        let mut window = published(1, now);
        window.on_return(1, |_| true, close(312));
        window.channel_lost();
        window.channel_opened(2);
        send_all(&mut window, now);
        window.on_ack(2, 1, false, now);
        assert_eq!(settled(&mut window), [(1, Outcome::Acked)]);
    }

    #[test]
    fn confirms_and_returns_of_a_replaced_channel_are_ignored() {
        let now = Instant::now();
        let mut window = published(2, now);
        window.channel_lost();
        window.channel_opened(2);
        send_all(&mut window, now);
        assert!(window.on_ack(1, 2, true, now).stale);
        assert!(window.on_nack(1, 2, true, now).stale);
        assert_eq!(window.on_return(1, |_| true, close(312)), Returned::Stale);
        assert!(settled(&mut window).is_empty());
        assert_eq!(window.in_flight(), 2);
        // Without a channel every confirm is stale.
        window.channel_lost();
        assert!(window.on_ack(2, 2, true, now).stale);
        assert_eq!(window.backlog(), 2);
    }

    #[test]
    fn a_lost_channel_puts_the_window_before_the_backlog_in_publish_order() {
        let now = Instant::now();
        let mut window = published(4, now);
        window.on_ack(1, 2, false, now);
        window.push(Msg::new(5));
        window.push(Msg::new(6));
        window.channel_lost();
        assert_eq!(window.in_flight(), 0);
        assert_eq!(window.backlog(), 5);
        window.channel_opened(2);
        let order: Vec<(u64, u32)> = std::iter::from_fn(|| window.pop_unsent())
            .map(|q| (q.message.id, q.sent))
            .collect();
        // 1, 3 and 4 were sent once before; 5 and 6 never.
        assert_eq!(order, [(1, 1), (3, 1), (4, 1), (5, 0), (6, 0)]);
    }

    #[test]
    fn a_lost_channel_fails_what_is_not_resent() {
        let now = Instant::now();
        let mut window = Window::new(now);
        window.push(Msg::new(1));
        window.push(Msg {
            resend: false,
            ..Msg::new(2)
        });
        window.channel_opened(1);
        send_all(&mut window, now);
        // Waiting, not yet sent: an RPC request fails as well (its reply queue is gone).
        window.push(Msg {
            resend: false,
            ..Msg::new(3)
        });
        window.push(Msg::new(4));
        window.connection_lost();
        assert_eq!(
            settled(&mut window),
            [(2, Outcome::NotResent), (3, Outcome::NotResent)]
        );
        window.channel_opened(2);
        let ids: Vec<u64> = std::iter::from_fn(|| window.pop_unsent())
            .map(|q| q.message.id)
            .collect();
        assert_eq!(ids, [1, 4]);
    }

    #[test]
    fn an_unsent_message_goes_back_to_the_front() {
        let now = Instant::now();
        let mut window = Window::new(now);
        window.push(Msg::new(1));
        window.push(Msg::new(2));
        window.channel_opened(1);
        let first = window.pop_unsent().map(|q| window.sent(q, now));
        assert_eq!(first, Some(1));
        if let Some(second) = window.pop_unsent() {
            window.unsent(second);
        }
        window.channel_lost();
        window.channel_opened(2);
        assert_eq!(send_all(&mut window, now), [1, 2]);
        window.on_ack(2, 1, false, now);
        assert_eq!(settled(&mut window), [(1, Outcome::Acked)]);
    }

    #[test]
    fn a_message_refused_as_too_large_is_not_resent() {
        let now = Instant::now();
        let mut window = Window::new(now);
        for (id, size) in [(1, 10), (2, 900), (3, 900), (4, 10)] {
            window.push(Msg {
                size,
                ..Msg::new(id)
            });
        }
        window.channel_opened(1);
        send_all(&mut window, now);
        window.channel_lost();
        assert!(window.refuse_too_large(900));
        assert!(!window.refuse_too_large(5000));
        // The oldest of that size, only.
        assert_eq!(settled(&mut window), [(2, Outcome::TooLarge)]);
        window.channel_opened(2);
        assert_eq!(send_all(&mut window, now), [1, 2, 3]);
    }

    #[test]
    fn a_refused_exchange_fails_every_message_to_it() {
        let now = Instant::now();
        let mut window = Window::new(now);
        for (id, exchange) in [(1, "a"), (2, "gone"), (3, "a"), (4, "gone")] {
            window.push(Msg {
                exchange,
                ..Msg::new(id)
            });
        }
        window.channel_opened(1);
        let first = window.pop_unsent().map(|q| window.sent(q, now));
        assert_eq!(first, Some(1));
        if let Some(second) = window.pop_unsent() {
            window.sent(second, now);
        }
        window.channel_lost();
        assert_eq!(window.refuse_exchange("gone"), 2);
        assert_eq!(
            settled(&mut window),
            [(2, Outcome::Refused), (4, Outcome::Refused)]
        );
        assert_eq!(window.backlog(), 2);
    }

    #[test]
    fn a_refused_topic_fails_only_the_messages_under_it() {
        let now = Instant::now();
        let mut window = Window::new(now);
        for (id, exchange, key) in [
            (1, "mesh.events", "module.umami.x"),
            (2, "mesh.events", "module.billing.x"),
            (3, "mesh.rpc", "module.billing.x"),
            (4, "mesh.events", "module.billing.x"),
            (5, "mesh.events", "module.umami.y"),
        ] {
            window.push(Msg {
                exchange,
                key,
                ..Msg::new(id)
            });
        }
        window.channel_opened(1);
        while let Some(queued) = window.pop_unsent() {
            window.sent(queued, now);
        }
        window.channel_lost();
        assert_eq!(window.refuse_topic("mesh.events", "module.billing.x"), 2);
        assert_eq!(
            settled(&mut window),
            [(2, Outcome::Refused), (4, Outcome::Refused)]
        );
        // The others go out again, in their order.
        window.channel_opened(2);
        let mut resent = Vec::new();
        while let Some(queued) = window.pop_unsent() {
            resent.push(queued.message.id);
            window.sent(queued, now);
        }
        assert_eq!(resent, [1, 3, 5]);
        window.channel_lost();
        assert_eq!(window.refuse_all(), 3);
        assert_eq!(window.backlog(), 0);
    }

    #[test]
    fn a_run_of_nacks_gives_the_channel_up_after_the_reopen_delay() {
        let start = Instant::now();
        let mut window = published(4, start);
        assert!(!window.on_nack(1, 1, false, start).reopen);
        let later = start + NACK_RUN_REOPEN / 2;
        assert!(!window.on_nack(1, 2, false, later).reopen);
        assert_eq!(window.nack_run(later), Some(NACK_RUN_REOPEN / 2));
        let progress = window.on_nack(1, 3, false, start + NACK_RUN_REOPEN);
        assert!(progress.reopen);
        // 4 is unsettled: back in the backlog, the channel gone.
        assert_eq!(window.in_flight(), 0);
        assert_eq!(window.backlog(), 1);
        assert!(!window.is_current(1));
        assert_eq!(window.nack_run(start + NACK_RUN_REOPEN), None);
    }

    #[test]
    fn an_ack_ends_a_nack_run() {
        let start = Instant::now();
        let mut window = published(4, start);
        window.on_nack(1, 1, false, start);
        window.on_ack(1, 2, false, start + NACK_RUN_REOPEN / 2);
        assert_eq!(window.nack_run(start + NACK_RUN_REOPEN), None);
        assert!(!window.on_nack(1, 3, false, start + NACK_RUN_REOPEN).reopen);
        assert!(window.is_current(1));
        // A new channel starts a new run too.
        window.channel_lost();
        window.channel_opened(2);
        assert_eq!(window.nack_run(start + NACK_RUN_REOPEN * 3), None);
    }

    #[test]
    fn a_window_without_confirms_stalls_and_the_next_confirm_ends_it() {
        let start = Instant::now();
        let mut window: Window<Msg> = Window::new(start);
        // Nothing waits: no stall.
        assert_eq!(window.stall_at(true), None);
        window.push(Msg::new(1));
        window.push(Msg::new(2));
        window.channel_opened(1);
        let sent_at = start + Duration::from_secs(7);
        send_all(&mut window, sent_at);
        // The clock starts when something starts waiting, and only while connected.
        assert_eq!(window.stall_at(true), Some(sent_at + STALL_AFTER));
        assert_eq!(window.stall_at(false), None);
        window.stall();
        assert!(window.stalled());
        assert_eq!(window.stall_at(true), None);
        let confirmed_at = sent_at + STALL_AFTER + Duration::from_secs(1);
        assert!(window.on_ack(1, 1, false, confirmed_at).unblocked);
        assert!(!window.stalled());
        // The clock runs from the last confirm.
        assert_eq!(window.stall_at(true), Some(confirmed_at + STALL_AFTER));
        assert!(!window.on_ack(1, 2, false, confirmed_at).unblocked);
        assert_eq!(window.stall_at(true), None);
    }

    #[test]
    fn a_window_without_confirms_is_stuck_after_its_own_time_and_a_new_channel_starts_over() {
        let start = Instant::now();
        let empty: Window<Msg> = Window::new(start);
        assert_eq!(empty.stuck_at(true), None);
        let mut window = published(3, start);
        // Only while something waits on a live connection, from the last progress, later
        // than the stall is reported.
        assert_eq!(window.stuck_at(true), Some(start + STUCK_AFTER));
        assert_eq!(window.stuck_at(false), None);
        assert!(STUCK_AFTER > STALL_AFTER);
        window.stall();
        assert_eq!(window.stuck_at(true), Some(start + STUCK_AFTER));
        let confirmed_at = start + Duration::from_secs(3);
        window.on_ack(1, 1, false, confirmed_at);
        assert_eq!(window.stuck_at(true), Some(confirmed_at + STUCK_AFTER));
        // The stuck channel is given up: what it held waits unsent (no clock), then goes out
        // on the next channel, whose clock starts with that send.
        window.channel_lost();
        assert_eq!(window.stuck_at(true), None);
        assert_eq!(window.backlog(), 2);
        window.channel_opened(2);
        let resent_at = confirmed_at + STUCK_AFTER;
        send_all(&mut window, resent_at);
        assert_eq!(window.in_flight(), 2);
        assert_eq!(window.stuck_at(true), Some(resent_at + STUCK_AFTER));
    }

    #[test]
    fn a_nack_ends_a_stall_and_going_down_forgets_it() {
        let start = Instant::now();
        let mut window = published(3, start);
        window.stall();
        assert!(window.on_nack(1, 1, false, start).unblocked);
        window.stall();
        window.connection_lost();
        assert!(!window.stalled());
    }

    #[test]
    fn closing_settles_everything_as_closed() {
        let now = Instant::now();
        let mut window = published(2, now);
        window.push(Msg::new(3));
        window.close();
        assert_eq!(
            settled(&mut window),
            (1..=3).map(|id| (id, Outcome::Closed)).collect::<Vec<_>>()
        );
        assert!(window.is_idle());
    }
}
