//! The keyset walk over events (or conflicts) whose pattern the SQL only narrows.

use std::str::FromStr;

use mesh_core::{EventId, Timestamp};

use super::sql::{self, Cursor};
use crate::convert::time_from_text;
use crate::error::Error;
use crate::record::EventQuery;

/// What a [`Walk`] ended with.
pub(crate) struct Walked<R> {
    pub(crate) found: Vec<R>,
    /// Rows read.
    pub(crate) read: u64,
    /// The last row read, when the read limit stopped the walk.
    pub(crate) stopped_after: Option<(Timestamp, EventId)>,
}

/// A keyset walk over rows ordered by time, then id, for a query whose pattern the SQL only
/// narrows: pages are fetched until the limit is filled with matching rows, the rows run out,
/// or the query's read limit is reached (shared by `Store::search` and
/// `Store::conflicts`).
pub(crate) struct Walk<'q, R> {
    query: &'q EventQuery,
    /// Rows per page: when the matcher may drop rows, over-fetched so one page usually
    /// fills the limit.
    page: usize,
    /// The last row seen.
    pub(crate) cursor: Option<Cursor>,
    pub(crate) found: Vec<R>,
    /// Rows read so far.
    pub(crate) read: usize,
    /// The limit is filled or the rows ran out.
    done: bool,
}

impl<'q, R> Walk<'q, R> {
    pub(crate) fn new(query: &'q EventQuery) -> Result<Walk<'q, R>, Error> {
        // SQL decides the pattern alone: none, an exact key, or one resolved to stored keys.
        let exact = query.keys.is_some()
            || query
                .pattern
                .as_deref()
                .is_none_or(|p| sql::key_prefilter(p).is_exact());
        // The page before ended on this event: start after it.
        let cursor = query
            .after
            .map(|(time, id)| -> Result<Cursor, Error> {
                Ok(Cursor {
                    time: crate::convert::time_to_text(time)?,
                    id: id.to_string(),
                })
            })
            .transpose()?;
        Ok(Walk {
            query,
            page: if exact {
                query.limit
            } else {
                query.limit.saturating_mul(2).clamp(200, 5000)
            },
            cursor,
            found: Vec::new(),
            read: 0,
            done: query.limit == 0,
        })
    }

    /// The rows the read limit still allows.
    pub(crate) fn readable(&self) -> usize {
        self.query
            .read_limit
            .map_or(usize::MAX, |limit| limit.saturating_sub(self.read))
    }

    /// Whether another page is wanted.
    pub(crate) fn more(&self) -> bool {
        !self.done && self.readable() > 0
    }

    /// Rows to fetch for the next page.
    pub(crate) fn page_size(&self) -> usize {
        self.page.min(self.readable())
    }

    /// Takes a fetched page of [`Walk::page_size`] rows at most: each row's `(time, id,
    /// routing key)` moves the cursor, and a row whose key the pattern matches becomes a
    /// record, until the limit.
    pub(crate) fn take<T>(
        &mut self,
        rows: Vec<T>,
        key: impl Fn(&T) -> (&String, &String, &String),
        record: impl Fn(T) -> Result<R, Error>,
    ) -> Result<(), Error> {
        self.done = rows.len() < self.page_size();
        for row in rows {
            self.read += 1;
            let (time, id, routing_key) = key(&row);
            self.cursor = Some(Cursor {
                time: time.clone(),
                id: id.clone(),
            });
            if sql::key_passes(self.query.pattern.as_deref(), routing_key) {
                self.found.push(record(row)?);
                if self.found.len() == self.query.limit {
                    self.done = true;
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// What was found, how many rows were read, and where the read limit stopped the walk,
    /// if it did.
    pub(crate) fn finish(self) -> Result<Walked<R>, Error> {
        let stopped_after = match (&self.cursor, self.done) {
            (Some(cursor), false) => Some((
                time_from_text(&cursor.time)?,
                EventId::from_str(&cursor.id).map_err(|e| {
                    Error::corrupt(format!("stored id `{}`", cursor.id)).with_source(e)
                })?,
            )),
            _ => None,
        };
        Ok(Walked {
            found: self.found,
            read: u64::try_from(self.read).unwrap_or(u64::MAX),
            stopped_after,
        })
    }
}
