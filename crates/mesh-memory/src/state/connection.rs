//! What a connection holds at the broker: its reply queue and the calls waiting on it.

use std::collections::HashMap;

use mesh_core::WireMessage;
use tokio::sync::oneshot;

/// What a connection holds at the broker.
#[derive(Debug, Default)]
pub(crate) struct Connection {
    pub(crate) closed: bool,
    pub(crate) reply_queue: Option<String>,
    /// Calls waiting for their reply, by correlation id.
    pub(crate) pending: HashMap<String, oneshot::Sender<WireMessage>>,
    /// Replies that found no call waiting for them.
    pub(crate) late_replies: u64,
}

impl Connection {
    /// Closes it; returns the calls that were waiting, which will get no reply.
    pub(crate) fn close(&mut self) -> Vec<oneshot::Sender<WireMessage>> {
        self.closed = true;
        self.reply_queue = None;
        self.pending.drain().map(|(_, call)| call).collect()
    }
}
