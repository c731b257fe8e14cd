//! A spool's count of the bytes of its unsent rows, against its bound: raised by each keep
//! (the spool), lowered as rows are marked sent (the relay).

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Notify;

use crate::telemetry;

/// The bytes of a spool's unsent rows, against its bound.
#[derive(Debug)]
pub(crate) struct Pending {
    bytes: AtomicU64,
    limit: u64,
    /// Woken as rows are marked sent, for `drain`.
    changed: Notify,
}

impl Pending {
    /// `bytes` pending already, against a bound of `limit`.
    pub(crate) fn new(bytes: u64, limit: u64) -> Pending {
        Pending {
            bytes: AtomicU64::new(bytes),
            limit,
            changed: Notify::new(),
        }
    }

    /// The bound.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// Counts `size` more bytes, unless that passes the bound.
    pub(crate) fn reserve(&self, size: u64) -> bool {
        let reserved = self
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                now.checked_add(size).filter(|total| *total <= self.limit)
            });
        if let Ok(before) = reserved {
            telemetry::spool_pending(before + size);
        }
        reserved.is_ok()
    }

    /// Counts `size` fewer bytes: rows marked sent, or a keep that wrote nothing.
    pub(crate) fn release(&self, size: u64) {
        let before = self
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
                Some(now.saturating_sub(size))
            })
            .unwrap_or(0);
        telemetry::spool_pending(before.saturating_sub(size));
        self.changed.notify_waiters();
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Acquire)
    }

    /// Resolves once nothing is pending.
    pub(crate) async fn emptied(&self) {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the check, so a release in between is not missed.
            changed.as_mut().enable();
            if self.bytes() == 0 {
                return;
            }
            changed.await;
        }
    }
}
