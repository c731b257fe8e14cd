//! The outbox's rows as the SQL reads and writes them: a leaf both the statements and the
//! scheduled events' SQL use, so neither imports the other's parent for them.

use crate::row::MessageColumns;

/// An outbox row to write.
#[derive(Debug)]
pub struct NewRow {
    pub(crate) source: String,
    pub(crate) event_id: String,
    pub(crate) columns: MessageColumns,
}

/// An unsent outbox row, read by a relay.
#[derive(Debug)]
pub struct StoredRow {
    pub(crate) seq: i64,
    pub(crate) columns: MessageColumns,
}
