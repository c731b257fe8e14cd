//! Acks sent together: [`AckBatch`], the transport's [`AckGroup`]s in it, and the
//! [`BatchAckError`] of [`Delivery::ack_all`](super::Delivery::ack_all).

use std::fmt;

use super::future::BoxFuture;
use super::TransportError;
#[cfg(doc)]
use super::{Acker, Delivery};

/// The acks of many deliveries that one transport command can settle (those of one channel,
/// say), built up by [`Acker::ack_into`] and sent by [`Delivery::ack_all`].
pub trait AckGroup: Send + 'static {
    /// How many deliveries it settles.
    fn len(&self) -> usize;

    /// Whether it settles none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sends every ack of the group; resolves once the transport handed them on, or failed
    /// to (then none of the group counts as acked: the broker delivers them again).
    fn send(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>>;
}

/// A group of acks behind a trait object, told apart by its type.
trait AnyGroup: Send {
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any;
    fn len(&self) -> usize;
    fn send(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>>;
}

impl<G: AckGroup> AnyGroup for G {
    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn len(&self) -> usize {
        AckGroup::len(self)
    }

    fn send(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>> {
        AckGroup::send(self)
    }
}

/// Acks on their way to be sent together; see [`Delivery::ack_all`].
#[derive(Default)]
pub struct AckBatch {
    groups: Vec<Box<dyn AnyGroup>>,
    singles: Vec<BoxFuture<'static, Result<(), TransportError>>>,
}

impl AckBatch {
    /// Adds an ack to the group of type `G` that `same` picks, or to a new one made by
    /// `new` when none does.
    pub fn join<G: AckGroup>(
        &mut self,
        same: impl Fn(&G) -> bool,
        new: impl FnOnce() -> G,
        add: impl FnOnce(&mut G),
    ) {
        for group in &mut self.groups {
            if let Some(group) = group.as_any_mut().downcast_mut::<G>() {
                if same(group) {
                    add(group);
                    return;
                }
            }
        }
        let mut group = new();
        add(&mut group);
        self.groups.push(Box::new(group));
    }

    /// Adds an ack that is sent on its own.
    pub fn single(&mut self, ack: BoxFuture<'static, Result<(), TransportError>>) {
        self.singles.push(ack);
    }

    /// How many deliveries it settles.
    pub fn len(&self) -> usize {
        self.groups.iter().map(|g| g.len()).sum::<usize>() + self.singles.len()
    }

    /// Whether it settles none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sends every group and every single ack, all at once.
    pub async fn send(self) -> Result<(), BatchAckError> {
        let sends = self
            .groups
            .into_iter()
            .map(|group| (group.len(), group.send()))
            .chain(self.singles.into_iter().map(|ack| (1, ack)))
            .map(|(len, sent)| async move { (len, sent.await) });
        let mut failed = 0;
        let mut first = None;
        for (len, outcome) in futures::future::join_all(sends).await {
            if let Err(e) = outcome {
                failed += len;
                first.get_or_insert(e);
            }
        }
        match first {
            None => Ok(()),
            Some(error) => Err(BatchAckError { failed, error }),
        }
    }
}

impl fmt::Debug for AckBatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AckBatch")
            .field("groups", &self.groups.len())
            .field("singles", &self.singles.len())
            .finish()
    }
}

/// Acks of [`Delivery::ack_all`] that failed: the broker delivers those messages again.
#[derive(Debug, thiserror::Error)]
#[error("{failed} ack(s) failed: {error}")]
pub struct BatchAckError {
    /// How many deliveries were not acked.
    pub failed: usize,
    /// The first failure.
    pub error: TransportError,
}
