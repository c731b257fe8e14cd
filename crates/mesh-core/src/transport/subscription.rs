//! [`Subscription`]: a stream of deliveries from one queue, fed either through a buffer or
//! straight from the transport's own [`DeliveryFeed`].

use std::task::{Context, Poll};

use tokio::sync::mpsc;

use super::Delivery;

/// A source of deliveries that a transport polls itself, for a [`Subscription`] that reads
/// straight from the transport's own stream instead of through a buffer another task feeds
/// (one task hand-off less per delivery).
pub trait DeliveryFeed: Send + 'static {
    /// The next delivery: `Ready(None)` once the subscription ended. Must be cancel safe:
    /// a delivery is either returned or still there for the next poll.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Delivery>>;
}

/// Where a subscription's deliveries come from.
enum Feed {
    /// A buffer the transport's task fills.
    Buffer(mpsc::Receiver<Delivery>),
    /// The transport's stream, polled by the reader.
    Direct(Box<dyn DeliveryFeed>),
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Feed::Buffer(buffer) => f.debug_tuple("Buffer").field(buffer).finish(),
            Feed::Direct(_) => f.write_str("Direct"),
        }
    }
}

/// A stream of deliveries from one queue.
///
/// The transport keeps it fed across reconnects. [`cancel`](Subscription::cancel) stops
/// new deliveries; those already buffered (for a broker: sent before it confirmed the
/// cancel) are still returned by [`next`](Subscription::next) and must be settled
/// (dropping them releases them).
#[derive(Debug)]
pub struct Subscription {
    queue: String,
    feed: Feed,
    cancel: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Subscription {
    /// A subscription reading from `deliveries`; the transport stops feeding it when
    /// `cancel` fires or is dropped.
    pub fn new(
        queue: String,
        deliveries: mpsc::Receiver<Delivery>,
        cancel: tokio::sync::oneshot::Sender<()>,
    ) -> Subscription {
        Subscription {
            queue,
            feed: Feed::Buffer(deliveries),
            cancel: Some(cancel),
        }
    }

    /// A subscription reading from the transport's own `feed`; the transport stops
    /// consuming when `cancel` fires or is dropped, and `feed` then ends once what was
    /// delivered before is returned.
    pub fn from_feed(
        queue: String,
        feed: impl DeliveryFeed,
        cancel: tokio::sync::oneshot::Sender<()>,
    ) -> Subscription {
        Subscription {
            queue,
            feed: Feed::Direct(Box::new(feed)),
            cancel: Some(cancel),
        }
    }

    /// The queue's name (server-named queues: the name the broker gave).
    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// The next delivery; `None` once the subscription ended (cancelled and drained, or
    /// the transport closed).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a delivery is never lost when this future is dropped before it
    /// completes.
    pub async fn next(&mut self) -> Option<Delivery> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// Polls for the next delivery; see [`next`](Subscription::next).
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        match &mut self.feed {
            Feed::Buffer(buffer) => buffer.poll_recv(cx),
            Feed::Direct(feed) => feed.poll_next(cx),
        }
    }

    /// Stops new deliveries (a consumer cancel on a broker).
    pub fn cancel(&mut self) {
        if let Some(cancel) = self.cancel.take() {
            let _ = cancel.send(());
        }
        if let Feed::Buffer(buffer) = &mut self.feed {
            buffer.close();
        }
    }
}
