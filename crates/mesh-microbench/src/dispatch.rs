//! The fixtures and check of the consumer loop's dispatch benchmark: a consumer with one
//! handler, and [`BATCH`] deliveries of the typical event whose settling is counted by a
//! transport that does nothing else.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use mesh::bench_internals::Consumer;
use mesh_core::{AckFailed, Acker, BoxFuture, Delivery, TransportError, WireMessage};

use crate::{message, BATCH};

/// The queue the deliveries come from.
const QUEUE: &str = "node-eu-1.ledger.events";

/// How the benchmark's deliveries were settled.
#[derive(Debug, Default)]
pub struct Settles {
    /// Acked.
    pub acked: AtomicU64,
    /// Retried, dead-lettered or released: any other end.
    pub other: AtomicU64,
}

/// Settles a delivery by counting how.
struct Counting(Arc<Settles>);

impl Counting {
    fn other(&self) {
        self.0.other.fetch_add(1, Ordering::Relaxed);
    }
}

impl Acker for Counting {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>> {
        self.0.acked.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::ready(Ok(())))
    }

    fn ack_detached(self: Box<Self>, _failed: AckFailed) -> Option<BoxFuture<'static, ()>> {
        // As the amqp transport does: handed on, nothing left to wait for.
        self.0.acked.fetch_add(1, Ordering::Relaxed);
        None
    }

    fn retry(
        self: Box<Self>,
        _copy: WireMessage,
        _step: usize,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        self.other();
        Box::pin(std::future::ready(Ok(())))
    }

    fn dead_letter(
        self: Box<Self>,
        _copy: WireMessage,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        self.other();
        Box::pin(std::future::ready(Ok(())))
    }

    fn reply(
        self: Box<Self>,
        _reply: WireMessage,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        self.other();
        Box::pin(std::future::ready(Ok(())))
    }

    fn release(self: Box<Self>) {
        self.other();
    }
}

/// A consumer whose one handler takes the events matching `pattern`, [`BATCH`] deliveries of
/// the typical event (without `x-causation-id`), and the record of how they settle.
pub fn consumer_and_deliveries(pattern: &str) -> (Consumer, Vec<Delivery>, Arc<Settles>) {
    let settles = Arc::new(Settles::default());
    let consumer = Consumer::new(QUEUE, pattern);
    let deliveries = (0..BATCH)
        .map(|_| {
            Delivery::new(
                message(false),
                false,
                Some(0),
                QUEUE.to_owned(),
                Box::new(Counting(Arc::clone(&settles))),
            )
        })
        .collect();
    (consumer, deliveries, settles)
}

/// Checks the dispatch benchmark: every delivery was handled and acked, none otherwise.
pub fn check_dispatched(settles: &Settles) {
    assert_eq!(
        settles.acked.load(Ordering::Relaxed),
        BATCH,
        "every delivery acked"
    );
    assert_eq!(
        settles.other.load(Ordering::Relaxed),
        0,
        "no other settling"
    );
}
