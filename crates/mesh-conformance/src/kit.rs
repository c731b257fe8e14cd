//! The scenarios' tools: the one bound on every wait, and a tally of calls per key that a
//! scenario waits on.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;

/// How long any single wait may take before the scenario fails.
pub(crate) const WAIT: Duration = Duration::from_secs(60);

pub(crate) async fn within<T>(what: &str, future: impl Future<Output = T>) -> T {
    match tokio::time::timeout(WAIT, future).await {
        Ok(value) => value,
        Err(_) => panic!("timed out after {WAIT:?} waiting for {what}"),
    }
}

/// Counts calls per key, with a notification on each.
#[derive(Default)]
pub(crate) struct Tally {
    counts: Mutex<HashMap<String, u32>>,
    changed: Notify,
}

impl Tally {
    pub(crate) fn hit(&self, key: impl Into<String>) {
        *self
            .counts
            .lock()
            .expect("tally lock")
            .entry(key.into())
            .or_default() += 1;
        self.changed.notify_waiters();
    }

    pub(crate) fn get(&self, key: &str) -> u32 {
        self.counts
            .lock()
            .expect("tally lock")
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    pub(crate) fn snapshot(&self) -> HashMap<String, u32> {
        self.counts.lock().expect("tally lock").clone()
    }

    pub(crate) async fn wait_for(
        &self,
        what: &str,
        condition: impl Fn(&HashMap<String, u32>) -> bool,
    ) {
        within(what, async {
            loop {
                let notified = self.changed.notified();
                if condition(&self.counts.lock().expect("tally lock")) {
                    return;
                }
                notified.await;
            }
        })
        .await;
    }
}
