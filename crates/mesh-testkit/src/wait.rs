//! Polling waits with a deadline, the only way tests here wait for a condition.
//!
//! This module owns [`eventually`]. Tests never sleep to let something happen: they poll a
//! condition until it holds, and fail with a message naming what they waited for once the
//! timeout passes.

use std::future::Future;
use std::time::Duration;

/// The first pause between polls; it doubles up to [`MAX_INTERVAL`].
const FIRST_INTERVAL: Duration = Duration::from_millis(10);
/// Polls at least this often, so a condition that turns true is seen promptly.
const MAX_INTERVAL: Duration = Duration::from_millis(200);

/// Polls `f` until it returns `Some(value)` and returns the value; panics with `what` once
/// `timeout` passes (a single slow call of `f` is cut off by the timeout too).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// use mesh_testkit::wait::eventually;
/// use std::time::Duration;
/// let mut calls = 0;
/// let n = eventually(Duration::from_secs(5), "the third call", || {
///     calls += 1;
///     let n = calls;
///     async move { (n >= 3).then_some(n) }
/// })
/// .await;
/// assert_eq!(n, 3);
/// # }
/// ```
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let poll = async {
        let mut interval = FIRST_INTERVAL;
        loop {
            if let Some(value) = f().await {
                return value;
            }
            tokio::time::sleep(interval).await;
            interval = (interval * 2).min(MAX_INTERVAL);
        }
    };
    match tokio::time::timeout(timeout, poll).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {timeout:?} waiting for {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn returns_the_first_some() {
        let calls = Arc::new(AtomicUsize::new(0));
        let v = eventually(Duration::from_secs(5), "a value", || {
            let calls = calls.clone();
            async move {
                let n = calls.fetch_add(1, Ordering::SeqCst) + 1;
                (n == 4).then(|| format!("call {n}"))
            }
        })
        .await;
        assert_eq!(v, "call 4");
    }

    #[tokio::test]
    #[should_panic(expected = "waiting for the impossible")]
    async fn panics_with_what_on_timeout() {
        eventually(Duration::from_millis(100), "the impossible", || async {
            None::<()>
        })
        .await;
    }

    #[tokio::test]
    #[should_panic(expected = "waiting for a hanging check")]
    async fn a_hanging_check_still_times_out() {
        eventually(Duration::from_millis(100), "a hanging check", || {
            std::future::pending::<Option<()>>()
        })
        .await;
    }
}
