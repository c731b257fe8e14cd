//! How a delivery is settled: manual ackers for durable, serve and dead-letter queues, and
//! the no-op acker of automatic acks.

use std::sync::{Arc, Weak};
use std::time::Duration;

use mesh_core::transport::{Acker, BoxFuture, TransportError};
use mesh_core::WireMessage;
use tracing::debug;

use crate::broker::{MemoryBroker, Shared};
use crate::state::{ConnectionId, Fault, Settlement};

/// Settles one delivery of a queue with manual acks.
///
/// Holds the broker weakly: deliveries sit in subscription channels the broker owns, so a
/// strong reference would keep a dropped broker alive forever.
#[derive(Debug)]
pub(crate) struct MemoryAcker {
    broker: Weak<Shared>,
    queue: String,
    tag: u64,
    connection: ConnectionId,
    retry_delays: Arc<[Duration]>,
    settled: bool,
}

impl MemoryAcker {
    pub(crate) fn new(
        broker: Weak<Shared>,
        queue: &str,
        tag: u64,
        connection: ConnectionId,
        retry_delays: Arc<[Duration]>,
    ) -> MemoryAcker {
        MemoryAcker {
            broker,
            queue: queue.to_owned(),
            tag,
            connection,
            retry_delays,
            settled: false,
        }
    }

    fn settle(&mut self, settlement: Settlement) -> Result<Option<DelayedCopy>, Fault> {
        self.settled = true;
        let broker = MemoryBroker::upgrade(&self.broker).ok_or(Fault::ConnectionLost)?;
        broker.with(|state| state.settle(&self.queue, self.tag, self.connection, settlement))
    }

    /// The delay of a retry step; past the end of the ladder, its last step.
    fn delay(&self, step: usize) -> Duration {
        self.retry_delays
            .get(step)
            .or(self.retry_delays.last())
            .copied()
            .unwrap_or(Duration::ZERO)
    }
}

// Each settlement runs when its future is first polled, not when the method is called: a
// future dropped unpolled drops the acker, which releases the message.
impl Acker for MemoryAcker {
    fn ack(mut self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async move { Ok(self.settle(Settlement::Ack).map(drop)?) })
    }

    fn retry(
        mut self: Box<Self>,
        copy: WireMessage,
        step: usize,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async move {
            let delay = self.delay(step);
            if let Some(delayed) = self.settle(Settlement::Retry { copy, delay })? {
                tokio::spawn(delayed.run(self.broker.clone()));
            }
            Ok(())
        })
    }

    fn dead_letter(
        mut self: Box<Self>,
        copy: WireMessage,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async move { Ok(self.settle(Settlement::DeadLetter(copy)).map(drop)?) })
    }

    fn reply(
        mut self: Box<Self>,
        reply: WireMessage,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        Box::pin(async move { Ok(self.settle(Settlement::Reply(reply)).map(drop)?) })
    }

    fn release(mut self: Box<Self>) {
        if let Err(error) = self.settle(Settlement::Release) {
            debug!(queue = %self.queue, ?error, "release had no effect");
        }
    }
}

impl Drop for MemoryAcker {
    /// A delivery dropped without a decision goes back to its queue.
    fn drop(&mut self) {
        if !self.settled {
            if let Err(error) = self.settle(Settlement::Release) {
                debug!(queue = %self.queue, ?error, "release on drop had no effect");
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

/// A copy on the retry ladder: after its delay it goes to the tail of its queue, the way a
/// TTL retry queue dead-letters back to its consumer's queue through `mesh.retry`.
#[derive(Debug)]
pub(crate) struct DelayedCopy {
    queue: String,
    copy: WireMessage,
    delay: Duration,
}

impl DelayedCopy {
    pub(crate) fn new(queue: &str, copy: WireMessage, delay: Duration) -> DelayedCopy {
        DelayedCopy {
            queue: queue.to_owned(),
            copy,
            delay,
        }
    }

    /// The timer: holds the broker weakly, so a broker dropped meanwhile takes its delayed
    /// copies with it.
    pub(crate) async fn run(self, broker: Weak<Shared>) {
        tokio::time::sleep(self.delay).await;
        if let Some(broker) = MemoryBroker::upgrade(&broker) {
            broker.with(|state| state.return_delayed(&self.queue, self.copy));
        }
    }
}
