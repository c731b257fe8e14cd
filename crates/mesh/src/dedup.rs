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
    /// Claims in time order; an entry whose id was released or claimed again since is
    /// stale (`at` holds another time, or nothing).
    order: VecDeque<(Instant, EventId)>,
}

impl Seen {
    /// Pops the oldest entries while `forget(len, time)` says so, where `len` is the length
    /// of `order` for a live entry and `None` for a stale one.
    fn forget_while(&mut self, forget: impl Fn(Option<usize>, Instant) -> bool) {
        while let Some(&(at, old)) = self.order.front() {
            let live = self.at.get(&old) == Some(&at);
            if !forget(live.then_some(self.order.len()), at) {
                break;
            }
            self.order.pop_front();
            if live {
                self.at.remove(&old);
            }
        }
    }
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
        // Forget what is older than the window; then, only when an id is added, the oldest
        // until there is room, so at most `capacity` ids are held (a duplicate check
        // forgets nothing).
        seen.forget_while(|seen, at| now.duration_since(at) > self.window || seen.is_none());
        if seen.at.contains_key(&id) {
            return false;
        }
        let capacity = self.capacity;
        seen.forget_while(|seen, _| seen.is_some_and(|len| len >= capacity));
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
///
/// ```
/// # use serde::{Deserialize, Serialize};
/// # #[derive(Serialize, Deserialize)]
/// # struct SiteCreated { site: String }
/// # impl mesh::Event for SiteCreated { const KEY: &'static str = "module.umami.site.created"; }
/// # #[tokio::main] async fn main() -> Result<(), mesh::Error> {
/// use std::sync::Arc;
/// use mesh::{dedup, Bus, Incoming, MemoryDedup, Outgoing};
///
/// let broker = mesh::MemoryBroker::new();
/// let (done, mut sites) = tokio::sync::mpsc::unbounded_channel();
/// let store = Arc::new(MemoryDedup::default()); // ids kept for an hour, 100,000 at most
/// let mailer = Bus::builder().node("anchor").module("mailer")
///     .on(dedup(store, move |e: Incoming<SiteCreated>| {
///         let done = done.clone();
///         async move {
///             let _ = done.send(e.event.site); // the effect, once per event id
///             Ok(())
///         }
///     }))
///     .start(Arc::new(broker.transport()))
///     .await?;
///
/// let umami = Bus::builder().node("anchor").module("umami")
///     .start(Arc::new(broker.transport()))
///     .await?;
/// let id = umami.emit(&SiteCreated { site: "blog".into() }).await?;
/// // The same event again (a publisher's resend): handled once.
/// umami.emit_outgoing(Outgoing::event(&SiteCreated { site: "blog".into() })?.id(id)).await?;
/// umami.emit(&SiteCreated { site: "shop".into() }).await?;
/// assert_eq!(sites.recv().await.as_deref(), Some("blog"));
/// assert_eq!(sites.recv().await.as_deref(), Some("shop"));
/// mailer.drain().await?;
/// # Ok(()) }
/// ```
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
            let id = incoming.meta.id();
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
        // The two newest are remembered, and checking them forgets nothing.
        assert!(!store.claim(c).await, "c is remembered");
        assert!(!store.claim(b).await, "b is remembered");
        assert!(!store.claim(c).await, "c is still remembered");
        // The oldest was forgotten when c came: a third id does not fit in two.
        assert!(
            store.claim(a).await,
            "the oldest is forgotten past capacity"
        );
        assert!(!store.claim(c).await);
        assert!(store.claim(b).await, "b, now the oldest, made room for a");
        store.release(c).await;
        assert!(store.claim(c).await, "released ids may be claimed again");
    }

    #[tokio::test(start_paused = true)]
    async fn memory_is_bounded_by_the_capacity() {
        let store = MemoryDedup::new(Duration::from_secs(3600), 3);
        let first = EventId::new();
        assert!(store.claim(first).await);
        for _ in 0..100 {
            assert!(store.claim(EventId::new()).await);
            let id = EventId::new();
            assert!(store.claim(id).await);
            store.release(id).await;
        }
        {
            let seen = store.seen.lock().unwrap();
            assert!(seen.at.len() <= 3, "{} ids held", seen.at.len());
            assert!(seen.order.len() <= 3, "{} entries held", seen.order.len());
        }
        assert!(store.claim(first).await, "the first id was forgotten");
    }
}
