//! The event being handled, so that what a handler emits or calls names it as its cause
//! without the handler passing it along.

use std::future::Future;

tokio::task_local! {
    static CAUSE: String;
}

/// Runs `future` with `cause` as the causation id of what it emits or calls.
pub(crate) async fn scope<F: Future>(cause: String, future: F) -> F::Output {
    CAUSE.scope(cause, future).await
}

/// The id of the event the current task is handling, if any.
pub(crate) fn current() -> Option<String> {
    CAUSE.try_with(Clone::clone).ok()
}
