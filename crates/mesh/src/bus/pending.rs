//! An emit whose confirm is awaited later: [`PendingEmit`], what
//! [`Bus::emit_nowait`](crate::Bus::emit_nowait) returns.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use mesh_core::EventId;
use tokio_util::task::TaskTracker;

use crate::error::{Error, ErrorKind};
use crate::telemetry::record::{self, Source};

/// An emit the broker has not confirmed yet: a future resolving to the event's id once it
/// has.
///
/// The event is published whether this is awaited or not; [`Bus::drain`](crate::Bus::drain)
/// waits for its confirm either way (dropped unresolved, it hands the wait to the bus). On a
/// bus with a spool ([`BusBuilder::spool`](crate::BusBuilder::spool)) the event was kept by
/// the spool when this was returned, and it resolves to `Ok` at once.
///
/// # Cancel safety
///
/// Cancel safe: dropping it, resolved or not, loses nothing; awaiting it again is not
/// possible once it resolved.
#[must_use = "an emit is confirmed only when this resolves to Ok"]
pub struct PendingEmit {
    id: EventId,
    state: State,
}

/// Where a [`PendingEmit`] stands.
enum State {
    /// Handed to the transport; the confirm is awaited.
    Waiting(Waiting),
    /// Kept by the bus's spool: resolves to `Ok` at once.
    Kept,
    /// Resolved.
    Done,
}

/// What an unresolved [`PendingEmit`] holds.
struct Waiting {
    confirm: mesh_core::Confirm,
    since: Instant,
    source: Source,
    /// Where the wait goes when the `PendingEmit` is dropped unresolved, so `drain` waits
    /// for it. (A held one is not counted there: `drain` would wait for its holder, who may
    /// be waiting for `drain`; the transport's flush covers it.)
    confirms: TaskTracker,
}

impl Waiting {
    fn finish(self, confirmed: &Result<(), mesh_core::TransportError>) {
        record::confirmed(&self.source, self.since, confirmed);
    }
}

impl std::fmt::Debug for PendingEmit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingEmit")
            .field("id", &self.id)
            .field("resolved", &matches!(self.state, State::Done))
            .finish()
    }
}

impl PendingEmit {
    /// An emit the bus's spool kept: resolves to `Ok` at once.
    pub(crate) fn kept(id: EventId) -> PendingEmit {
        PendingEmit {
            id,
            state: State::Kept,
        }
    }

    /// An emit the transport took at `since`, whose `confirm` is awaited; dropped unresolved,
    /// it hands the wait to `confirms`, which the bus's drain waits for.
    pub(crate) fn waiting(
        id: EventId,
        confirm: mesh_core::Confirm,
        since: Instant,
        source: Source,
        confirms: TaskTracker,
    ) -> PendingEmit {
        PendingEmit {
            id,
            state: State::Waiting(Waiting {
                confirm,
                since,
                source,
                confirms,
            }),
        }
    }

    /// The event's id.
    pub fn id(&self) -> EventId {
        self.id
    }
}

impl Future for PendingEmit {
    type Output = Result<EventId, Error>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let id = self.id;
        let waiting = match &mut self.state {
            State::Waiting(waiting) => waiting,
            State::Kept => {
                self.state = State::Done;
                return Poll::Ready(Ok(id));
            }
            State::Done => return Poll::Ready(Err(Error::new(ErrorKind::Closed))),
        };
        let confirmed = std::task::ready!(Pin::new(&mut waiting.confirm).poll(cx));
        if let State::Waiting(waiting) = std::mem::replace(&mut self.state, State::Done) {
            waiting.finish(&confirmed);
        }
        Poll::Ready(confirmed.map(|()| id).map_err(Error::from))
    }
}

impl Drop for PendingEmit {
    /// Nobody will await the confirm: the bus does, so it is counted and `drain` waits.
    fn drop(&mut self) {
        let State::Waiting(waiting) = std::mem::replace(&mut self.state, State::Done) else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime left to wait on: the transport still resends and settles it.
            return;
        };
        let confirms = waiting.confirms.clone();
        runtime.spawn(confirms.track_future(async move {
            let mut waiting = waiting;
            let confirmed = (&mut waiting.confirm).await;
            waiting.finish(&confirmed);
        }));
    }
}
