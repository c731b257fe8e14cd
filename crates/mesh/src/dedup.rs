//! Dedup by event id: delivery is at-least-once, so a handler whose effect must happen once
//! wraps itself in [`dedup`].
//!
//! The store is pluggable ([`DedupStore`]); [`MemoryDedup`] keeps ids for a time window and
//! up to a count, which absorbs redeliveries and publisher resends that arrive within the
//! window. A durable store (a table keyed by event id, written in the same transaction as
//! the effect) gives exactly-once effects across restarts.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use mesh_core::EventId;
use tokio::time::Instant;

use crate::error::HandlerError;
use crate::incoming::Incoming;

/// Remembers which events were handled.
pub trait DedupStore: Send + Sync + 'static {
    /// Claims `id`: `true` if it was not seen (or was released) and the caller may run the
    /// effect; `false` if it is handled or being handled.
    fn claim(&self, id: EventId) -> BoxFuture<'_, bool>;

    /// Gives up a claim after the effect failed, so a retry runs it again.
    fn release(&self, id: EventId) -> BoxFuture<'_, ()>;
}

/// A bounded in-memory store: ids are remembered for `window`, at most `capacity` of them
/// (the oldest are forgotten first).
#[derive(Debug)]
pub struct MemoryDedup {
    window: Duration,
    capacity: usize,
    seen: Mutex<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    at: HashMap<EventId, Instant>,
    order: VecDeque<(Instant, EventId)>,
}

impl MemoryDedup {
    /// A store remembering ids for `window`, at most `capacity` of them.
    pub fn new(window: Duration, capacity: usize) -> MemoryDedup {
        MemoryDedup {
            window,
            capacity: capacity.max(1),
            seen: Mutex::new(Seen::default()),
        }
    }

    fn claim_now(&self, id: EventId) -> bool {
        let now = Instant::now();
        // A poisoned lock only means another claim panicked mid-way; the map is still a
        // valid set of ids.
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(&(at, old)) = seen.order.front() {
            let expired = now.duration_since(at) > self.window;
            if !(expired || seen.order.len() > self.capacity) {
                break;
            }
            seen.order.pop_front();
            if seen.at.get(&old) == Some(&at) {
                seen.at.remove(&old);
            }
        }
        if seen.at.contains_key(&id) {
            return false;
        }
        seen.at.insert(id, now);
        seen.order.push_back((now, id));
        true
    }
}

impl Default for MemoryDedup {
    /// One hour, 100,000 ids.
    fn default() -> Self {
        MemoryDedup::new(Duration::from_secs(3600), 100_000)
    }
}

impl DedupStore for MemoryDedup {
    fn claim(&self, id: EventId) -> BoxFuture<'_, bool> {
        let claimed = self.claim_now(id);
        Box::pin(std::future::ready(claimed))
    }

    fn release(&self, id: EventId) -> BoxFuture<'_, ()> {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.at.remove(&id);
        Box::pin(std::future::ready(()))
    }
}

/// Wraps `handler` so it runs at most once per event id known to `store`: a duplicate is
/// acknowledged without calling it; a failure releases the claim so the retry runs it.
pub fn dedup<T, F, Fut>(
    store: Arc<dyn DedupStore>,
    handler: F,
) -> impl Fn(Incoming<T>) -> BoxFuture<'static, Result<(), HandlerError>> + Send + Sync + 'static
where
    T: Send + 'static,
    F: Fn(Incoming<T>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    let handler = Arc::new(handler);
    move |incoming: Incoming<T>| {
        let store = Arc::clone(&store);
        let handler = Arc::clone(&handler);
        Box::pin(async move {
            let id = incoming.meta.id;
            if !store.claim(id).await {
                tracing::debug!(%id, "duplicate event skipped");
                return Ok(());
            }
            let result = handler(incoming).await;
            if result.is_err() {
                store.release(id).await;
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn ids_are_forgotten_after_the_window_or_past_capacity() {
        let store = MemoryDedup::new(Duration::from_secs(10), 2);
        let (a, b, c) = (EventId::new(), EventId::new(), EventId::new());
        assert!(store.claim(a).await);
        assert!(!store.claim(a).await);
        tokio::time::advance(Duration::from_secs(11)).await;
        assert!(store.claim(a).await, "forgotten after the window");
        assert!(store.claim(b).await);
        assert!(store.claim(c).await);
        assert!(store.claim(a).await || !store.claim(a).await);
        store.release(c).await;
        assert!(store.claim(c).await, "released ids may be claimed again");
    }
}
