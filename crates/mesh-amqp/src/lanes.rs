//! Declarations in flight together: a bounded number of lanes, each a declare channel of its
//! own, taking the next declaration as soon as the last one was answered.
//!
//! The client library allows one synchronous method outstanding per channel, so declaring
//! on one channel costs a round trip per object: thousands for a large topology (the replay
//! after a reconnect, many subscriptions starting at once). Lanes keep up to [`LANES`]
//! declarations in flight instead, each on its own channel, and every answer is awaited, so
//! a refusal is the same typed error as one declaration at a time: the broker's close of
//! that lane's channel, read by [`crate::declare`], and the lane goes on with a fresh channel.
//!
//! Both users run phases: exchanges, then queues, then bindings (a binding needs its queue
//! and exchange), each phase finished before the next begins; nothing is consumed before
//! its queue and bindings are declared. Each object is declared once: the replay takes the
//! recorded [`Topology`](crate::topology::Topology), a set by name, and a subscription's
//! declarations are distinct by construction. A transport-wide [`tokio::sync::Semaphore`]
//! of [`LANES`] permits (in [`TransportShared`](crate::lifecycle::TransportShared)) bounds
//! the lanes of every subscription starting at once; a lane holds a permit from opening its
//! channel to closing it.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::Mutex;

use mesh_core::{TransportError, TransportErrorKind};
use tokio::sync::Semaphore;

use crate::declare::DeclareChannel;

pub(crate) use crate::lifecycle::DECLARE_LANES as LANES;

/// Runs `work` on every item, up to `width` at once (fewer if `permits` has fewer free),
/// each lane on a declare channel of its own from `open`, reused while it stays open;
/// returns the outcomes in the order of `items`. `work` gets the lane's channel and hands it
/// back (`None` when it is of no further use). The first lane starts with `carried`, if
/// any, and hands its channel back for the next phase (so a caller declaring in phases keeps
/// one channel throughout, as one declaration at a time did); every other lane closes its
/// channel at the end.
pub(crate) async fn in_lanes<T, R, O, OFut, W, WFut>(
    items: Vec<T>,
    width: usize,
    permits: Option<&Semaphore>,
    open: &O,
    carried: Option<DeclareChannel>,
    work: W,
) -> (Vec<Result<R, TransportError>>, Option<DeclareChannel>)
where
    O: Fn() -> OFut,
    OFut: Future<Output = Result<DeclareChannel, TransportError>>,
    W: Fn(DeclareChannel, T) -> WFut,
    WFut: Future<Output = (Result<R, TransportError>, Option<DeclareChannel>)>,
{
    let count = items.len();
    if count == 0 {
        return (Vec::new(), carried);
    }
    let queue: Mutex<VecDeque<(usize, T)>> = Mutex::new(items.into_iter().enumerate().collect());
    let outcomes: Mutex<Vec<Option<Result<R, TransportError>>>> =
        Mutex::new((0..count).map(|_| None).collect());
    let next = || queue.lock().ok().and_then(|mut q| q.pop_front());
    let record = |index: usize, outcome: Result<R, TransportError>| {
        if let Ok(mut outcomes) = outcomes.lock() {
            if let Some(slot) = outcomes.get_mut(index) {
                *slot = Some(outcome);
            }
        }
    };
    let work = &work;
    let lane = |mut channel: Option<DeclareChannel>, keep: bool| async move {
        // A semaphore never closed; were it, the lane runs unbounded rather than not at all.
        let _permit = match permits {
            Some(permits) => permits.acquire().await.ok(),
            None => None,
        };
        while let Some((index, item)) = next() {
            let declare = match channel.take() {
                Some(declare) if declare.is_open() => declare,
                stale => {
                    if let Some(stale) = stale {
                        stale.close().await;
                    }
                    match open().await {
                        Ok(declare) => declare,
                        Err(error) => {
                            record(index, Err(error));
                            continue;
                        }
                    }
                }
            };
            let (outcome, back) = work(declare, item).await;
            channel = back;
            record(index, outcome);
        }
        match channel {
            Some(declare) if keep && declare.is_open() => Some(declare),
            Some(declare) => {
                declare.close().await;
                None
            }
            None => None,
        }
    };
    let lanes = width.clamp(1, count);
    let mut carried = Some(carried);
    let kept = futures::future::join_all((0..lanes).map(|i| {
        let keep = i == 0;
        lane(carried.take().flatten(), keep)
    }))
    .await;
    let kept = kept.into_iter().flatten().next();
    let outcomes = outcomes
        .into_inner()
        .unwrap_or_default()
        .into_iter()
        .map(|outcome| {
            outcome.unwrap_or_else(|| {
                Err(TransportError::new(
                    TransportErrorKind::Protocol,
                    "a declaration was not run",
                ))
            })
        })
        .collect();
    (outcomes, kept)
}

/// The first failure of `outcomes`, in their order.
pub(crate) fn first_failure<R>(
    outcomes: Vec<Result<R, TransportError>>,
) -> Result<Vec<R>, TransportError> {
    outcomes.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_failure_is_the_first_in_order() {
        let outcomes: Vec<Result<u8, TransportError>> = vec![
            Ok(1),
            Err(TransportError::new(TransportErrorKind::Protocol, "second")),
            Err(TransportError::new(TransportErrorKind::Protocol, "third")),
        ];
        let error = first_failure(outcomes).unwrap_err();
        assert!(error.to_string().contains("second"), "{error}");
    }
}
