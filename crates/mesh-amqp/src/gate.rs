//! A channel's gate: who may still send a method on a channel once its close began, whoever
//! began it.
//!
//! A method sent on a channel after its close began is at best discarded and at worst a
//! *connection* error. The broker frees a channel's number once the `channel.close` /
//! `channel.close-ok` pair is through, and answers any later method on it with `504
//! CHANNEL_ERROR - expected 'channel.open'`, which closes the connection and every channel
//! on it: every consumer of the consume connection. The client library checks nothing: a
//! `basic.ack` sent a moment after the close-ok it wrote for a broker's `channel.close` goes
//! out. So the frames of a consumer channel (the ack tracker's acks and releases, the pump's
//! `basic.cancel`, and the close of either) pass through its gate:
//!
//! - a sender takes the gate, checks that no close began, *enqueues* its frames (the client
//!   library's writer sends a connection's frames in the order they were enqueued), and lets
//!   the gate go; it never holds the gate across a round trip, so nothing waits on it for
//!   the broker;
//! - whoever closes the channel marks the close begun under the gate first: the client
//!   before it sends `channel.close`, and the broker's close callback (which the client
//!   library runs before it writes the `channel.close-ok`) before it returns.
//!
//! So every frame sent on the channel is enqueued before the close-ok or the client's
//! `channel.close`, where the broker at worst discards it, and none after.
//!
//! The bookkeeping is the I/O-free [`Gate`] (its interleavings with the ack tracker and the
//! pump are checked exhaustively by the consumer's `interleave` tests); [`ChannelGate`] is
//! its shell, one per channel, shared through the channel's `CloseSlot`.

use std::future::Future;
use std::sync::Arc;

/// Who began a channel's close.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Closer {
    /// The broker sent `channel.close` (a channel error, a consumer timeout, a forced
    /// close of the connection's channels).
    Broker,
    /// mesh sent `channel.close` (the ack tracker or the pump, done with the channel).
    Client,
}

/// Whether a channel may still carry methods; see the module docs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub(crate) struct Gate {
    closing: Option<Closer>,
}

impl Gate {
    /// Whether a method may be sent: no close began.
    pub(crate) fn may_send(&self) -> bool {
        self.closing.is_none()
    }

    /// A close began, by `by`. `true` if it is the first: the client sends its
    /// `channel.close` only then (a close the broker began is answered by the client
    /// library's close-ok).
    pub(crate) fn close_began(&mut self, by: Closer) -> bool {
        if self.closing.is_some() {
            return false;
        }
        self.closing = Some(by);
        true
    }

    /// Who began the close, if anyone did.
    #[cfg(test)]
    pub(crate) fn closer(&self) -> Option<Closer> {
        self.closing
    }
}

/// The shell of one channel's [`Gate`]: held by a sender while it enqueues its frames, and by
/// whoever marks the close begun.
#[derive(Debug, Clone, Default)]
pub(crate) struct ChannelGate {
    gate: Arc<tokio::sync::Mutex<Gate>>,
}

impl ChannelGate {
    /// Runs `send` (which must only enqueue frames, never wait for an answer) under the
    /// gate, unless a close began or the client library knows the channel closed: `None`
    /// then, and nothing was sent.
    pub(crate) async fn send<T>(
        &self,
        channel: &amqprs::channel::Channel,
        send: impl Future<Output = T>,
    ) -> Option<T> {
        let gate = self.gate.lock().await;
        if !gate.may_send() || !channel.is_open() {
            return None;
        }
        let sent = send.await;
        drop(gate);
        Some(sent)
    }

    /// Marks the close begun by `by`, once every send under way has enqueued its frames;
    /// `true` if it is the first close.
    pub(crate) async fn close_began(&self, by: Closer) -> bool {
        self.gate.lock().await.close_began(by)
    }

    /// Whether a close began (a glance: a sender still checks under the gate).
    pub(crate) fn is_closing(&self) -> bool {
        match self.gate.try_lock() {
            Ok(gate) => !gate.may_send(),
            // Held: by a sender, or by a close being marked. Either way the sender checks.
            Err(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_close_wins_and_nothing_is_sent_after_it() {
        let mut gate = Gate::default();
        assert!(gate.may_send());
        assert!(gate.close_began(Closer::Broker));
        assert!(!gate.may_send());
        assert!(
            !gate.close_began(Closer::Client),
            "the broker's close is answered by the client library; no second close"
        );
        assert_eq!(gate.closer(), Some(Closer::Broker));
    }
}
