//! One consumer of a queue: its channel, its prefetch and what it holds unsettled.

use std::sync::Arc;
use std::time::Duration;

use mesh_core::transport::Delivery;
use tokio::sync::{mpsc, oneshot};

use super::effect::ConnectionId;

/// One consumer of a queue.
#[derive(Debug)]
pub(crate) struct Consumer {
    pub(crate) id: u64,
    pub(crate) connection: ConnectionId,
    pub(crate) tx: mpsc::Sender<Delivery>,
    /// Fires (or closes) when the subscription is cancelled or dropped.
    cancel: oneshot::Receiver<()>,
    /// Unsettled deliveries allowed; `None` is unlimited (prefetch 0, or automatic acks).
    pub(crate) limit: Option<usize>,
    pub(crate) auto_ack: bool,
    pub(crate) in_flight: usize,
    pub(crate) retry_delays: Arc<[Duration]>,
    /// The broker waits for room in the channel on its behalf (only when the channel, not
    /// the prefetch, is what holds deliveries back).
    pub(crate) waiting_for_room: bool,
}

impl Consumer {
    /// A consumer for one subscription; the state gives it its id when it is attached.
    pub(crate) fn new(
        connection: ConnectionId,
        tx: mpsc::Sender<Delivery>,
        cancel: oneshot::Receiver<()>,
        limit: Option<usize>,
        auto_ack: bool,
        retry_delays: Arc<[Duration]>,
    ) -> Consumer {
        Consumer {
            id: 0,
            connection,
            tx,
            cancel,
            limit,
            auto_ack,
            in_flight: 0,
            retry_delays,
            waiting_for_room: false,
        }
    }

    /// The subscription was cancelled or dropped.
    pub(crate) fn ended(&mut self) -> bool {
        self.tx.is_closed()
            || !matches!(
                self.cancel.try_recv(),
                Err(oneshot::error::TryRecvError::Empty)
            )
    }

    /// Under its prefetch.
    pub(crate) fn below_limit(&self) -> bool {
        self.limit.is_none_or(|limit| self.in_flight < limit)
    }

    /// A slot in its channel for one delivery, if it may take one now: under its prefetch,
    /// with room in the channel. The slot is reserved here, under the lock, so deliveries
    /// decided by later transitions cannot take it before the broker sends this one.
    pub(crate) fn reserve(&self) -> Option<mpsc::OwnedPermit<Delivery>> {
        if !self.below_limit() {
            return None;
        }
        // The clone is never the channel's last sender (`self.tx` outlives it), so dropping
        // it on failure drops no delivery.
        self.tx.clone().try_reserve_owned().ok()
    }
}
