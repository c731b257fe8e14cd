//! The event being handled, so that what a handler emits or calls names it as its cause
//! without the handler passing it along.

use std::future::Future;

use mesh_core::EventId;

tokio::task_local! {
    // The id itself: written out as text only when something is emitted or called under it.
    static CAUSE: EventId;
}

/// Runs `future` with `cause` as the causation id of what it emits or calls.
pub(crate) fn scope<F: Future>(cause: EventId, future: F) -> impl Future<Output = F::Output> {
    CAUSE.scope(cause, future)
}

/// The id of the event the current task is handling, if any.
pub(crate) fn current() -> Option<String> {
    CAUSE.try_with(EventId::text).ok()
}
