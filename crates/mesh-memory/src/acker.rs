//! How a delivery is settled: manual ackers for durable, serve and dead-letter queues, and
//! the no-op acker of automatic acks.
//!
//! An acker reaches the broker through [`Settle`], which the broker implements: this module
//! knows the state's vocabulary (tickets, settlements, faults) and nothing of the broker.

use mesh_core::text::EscapedDisplay;
use std::sync::{Arc, Weak};
use std::time::Duration;

use mesh_core::transport::{Acker, BoxFuture, TransportError};
use mesh_core::WireMessage;
use tracing::debug;

use crate::state::{Fault, Settlement, Ticket};

/// Where an acker settles its delivery: the broker, which runs the settlement as a
/// transition and performs its effects.
pub(crate) trait Settle: Send + Sync + 'static {
    /// Settles the delivery `ticket` describes.
    fn settle(self: Arc<Self>, ticket: &Ticket, settlement: Settlement) -> Result<(), Fault>;
}

/// Settles one delivery of a queue with manual acks.
///
/// Holds the broker weakly: deliveries sit in subscription channels the broker owns, so a
/// strong reference would keep a dropped broker alive forever.
pub(crate) struct MemoryAcker {
    broker: Weak<dyn Settle>,
    ticket: Ticket,
    settled: bool,
}

impl std::fmt::Debug for MemoryAcker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryAcker")
            .field("ticket", &self.ticket)
            .field("settled", &self.settled)
            .finish_non_exhaustive()
    }
}

impl MemoryAcker {
    /// The acker of the delivery `ticket` describes.
    pub(crate) fn new(broker: Weak<dyn Settle>, ticket: Ticket) -> MemoryAcker {
        MemoryAcker {
            broker,
            ticket,
            settled: false,
        }
    }

    fn settle(&mut self, settlement: Settlement) -> Result<(), Fault> {
        self.settled = true;
        let broker = self.broker.upgrade().ok_or(Fault::ConnectionLost)?;
        broker.settle(&self.ticket, settlement)
    }

    /// The delay of a retry step; past the end of the ladder, its last step.
    fn delay(&self, step: usize) -> Duration {
        let delays = &self.ticket.retry_delays;
        delays
            .get(step)
            .or(delays.last())
            .copied()
            .unwrap_or(Duration::ZERO)
    }
}

// Each settlement runs when its future is first polled, not when the method is called: a
// future dropped unpolled drops the acker, which releases the message.
impl Acker for MemoryAcker {
    fn ack(mut self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async move { Ok(self.settle(Settlement::Ack)?) })
    }

    fn retry(
        mut self: Box<Self>,
        copy: WireMessage,
        step: usize,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async move {
            let delay = self.delay(step);
            Ok(self.settle(Settlement::Retry { copy, delay })?)
        })
    }

    fn dead_letter(
        mut self: Box<Self>,
        copy: WireMessage,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async move { Ok(self.settle(Settlement::DeadLetter(copy))?) })
    }

    fn reply(
        mut self: Box<Self>,
        reply: WireMessage,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async move { Ok(self.settle(Settlement::Reply(reply))?) })
    }

    fn release(mut self: Box<Self>) {
        if let Err(error) = self.settle(Settlement::Release) {
            debug!(queue = %EscapedDisplay(&self.ticket.queue), ?error, "release had no effect");
        }
    }
}

impl Drop for MemoryAcker {
    /// A delivery dropped without a decision goes back to its queue.
    fn drop(&mut self) {
        if !self.settled {
            if let Err(error) = self.settle(Settlement::Release) {
                debug!(queue = %EscapedDisplay(&self.ticket.queue), ?error, "release on drop had no effect");
            }
        }
    }
}

/// The acker of a delivery with automatic acks: the message left the queue when it was
/// handed out, so every decision is a no-op.
#[derive(Debug)]
pub(crate) struct AutoAcker;

impl Acker for AutoAcker {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn retry(
        self: Box<Self>,
        _copy: WireMessage,
        _step: usize,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn dead_letter(
        self: Box<Self>,
        _copy: WireMessage,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn reply(
        self: Box<Self>,
        _reply: WireMessage,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn release(self: Box<Self>) {}
}
