//! The dead letters: read, counted by group, purged, and marked re-driven.

use mesh_core::DeadReason;
use sqlx::QueryBuilder;
use tracing::debug;

use super::rows::{dead_record, now_text, DeadTuple};
use super::sql::{self, Cursor, Dialect, POSTGRES, SQLITE};
use super::{Pool, Store, IDS_PER_STATEMENT};
use crate::error::Error;
use crate::record::{DeadLetterGroup, DeadLetterId, DeadLetterQuery, DeadLetterRecord};

impl Store {
    /// Dead letters matching `query`, in its order, at most its limit.
    pub async fn dead_letters(
        &self,
        query: &DeadLetterQuery,
    ) -> Result<Vec<DeadLetterRecord>, Error> {
        Ok(self
            .dead_letter_page(query, None, query.limit)
            .await?
            .into_iter()
            .map(|(record, _, _)| record)
            .collect())
    }

    /// The dead letters matching `query` (its limit and order aside), counted per queue and
    /// reason, by queue then reason.
    pub async fn dead_letter_groups(
        &self,
        query: &DeadLetterQuery,
    ) -> Result<Vec<DeadLetterGroup>, Error> {
        let rows: Vec<(Option<String>, Option<String>, i64, i64)> = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new(
                "SELECT queue, reason, count(*), \
                     count(CASE WHEN redriven_at IS NULL THEN 1 END) FROM dead_letters",
            );
            sql::push_dead_filters(&mut qb, d, query)?;
            qb.push(" GROUP BY queue, reason ORDER BY queue, reason");
            qb.build_query_as()
                .fetch_all(pool)
                .await
                .map_err(|e| Error::database("counting dead letters by group", e))?
        });
        Ok(rows
            .into_iter()
            .map(|(queue, reason, count, pending)| DeadLetterGroup {
                queue,
                reason: reason.as_deref().and_then(DeadReason::parse),
                count: u64::try_from(count).unwrap_or(0),
                pending: u64::try_from(pending).unwrap_or(0),
            })
            .collect())
    }

    /// The dead letter with this id.
    pub async fn dead_letter(&self, id: DeadLetterId) -> Result<Option<DeadLetterRecord>, Error> {
        Ok(self
            .dead_letter_full(id)
            .await?
            .map(|(record, _, _)| record))
    }

    /// How many dead letters match `query` (its limit and order aside).
    pub async fn count_dead_letters(&self, query: &DeadLetterQuery) -> Result<u64, Error> {
        let count: i64 = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new("SELECT count(*) FROM dead_letters");
            sql::push_dead_filters(&mut qb, d, query)?;
            qb.build_query_scalar()
                .fetch_one(pool)
                .await
                .map_err(|e| Error::database("counting dead letters", e))?
        });
        Ok(u64::try_from(count).unwrap_or(0))
    }

    /// Deletes the recorded dead letters matching `query` (its limit and order aside) and
    /// returns how many were deleted. Only the store's records go: no queue on the broker is
    /// touched.
    pub async fn purge_dead_letters(&self, query: &DeadLetterQuery) -> Result<u64, Error> {
        let deleted: u64 = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new("DELETE FROM dead_letters");
            sql::push_dead_filters(&mut qb, d, query)?;
            qb.build()
                .execute(pool)
                .await
                .map_err(|e| Error::database("purging dead letters", e))?
                .rows_affected()
        });
        Ok(deleted)
    }

    /// Deletes the dead letters of `ids` (those recorded; unknown ids are skipped). Returns how
    /// many were deleted.
    pub async fn purge_dead_letter_ids(&self, ids: &[DeadLetterId]) -> Result<u64, Error> {
        let mut deleted = 0;
        for chunk in ids.chunks(IDS_PER_STATEMENT) {
            deleted += with_pool!(self, |pool, d| {
                let mut qb = QueryBuilder::new("DELETE FROM dead_letters WHERE id IN (");
                push_id_list(&mut qb, d, chunk);
                qb.build()
                    .execute(pool)
                    .await
                    .map_err(|e| Error::database("purging dead letters", e))?
                    .rows_affected()
            });
        }
        Ok(deleted)
    }

    /// How many of `ids` are recorded dead letters.
    pub async fn count_dead_letter_ids(&self, ids: &[DeadLetterId]) -> Result<u64, Error> {
        let mut found = 0;
        for chunk in ids.chunks(IDS_PER_STATEMENT) {
            let n: i64 = with_pool!(self, |pool, d| {
                let mut qb = QueryBuilder::new("SELECT count(*) FROM dead_letters WHERE id IN (");
                push_id_list(&mut qb, d, chunk);
                qb.build_query_scalar()
                    .fetch_one(pool)
                    .await
                    .map_err(|e| Error::database("counting dead letters", e))?
            });
            found += u64::try_from(n).unwrap_or(0);
        }
        Ok(found)
    }

    /// A dead letter with the properties re-drive needs.
    pub(crate) async fn dead_letter_full(
        &self,
        id: DeadLetterId,
    ) -> Result<Option<(DeadLetterRecord, Option<String>, Option<i64>)>, Error> {
        let row: Option<DeadTuple> = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new(format!(
                "SELECT {} FROM dead_letters WHERE id = ",
                d.dead_columns
            ));
            qb.push_bind(id.to_string()).push(d.uuid);
            qb.build_query_as()
                .fetch_optional(pool)
                .await
                .map_err(|e| Error::database("reading a dead letter", e))?
        });
        row.map(dead_record).transpose()
    }

    /// One page of dead letters after `cursor`, with the properties re-drive needs.
    pub(crate) async fn dead_letter_page(
        &self,
        query: &DeadLetterQuery,
        cursor: Option<&DeadLetterRecord>,
        limit: usize,
    ) -> Result<Vec<(DeadLetterRecord, Option<String>, Option<i64>)>, Error> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // The walk's own cursor, else the query's (where a walk starts).
        let cursor = cursor
            .map(|c| (c.dead_at, c.id))
            .or(query.after)
            .map(|(time, id)| -> Result<Cursor, Error> {
                Ok(Cursor {
                    time: crate::convert::time_to_text(time)?,
                    id: id.to_string(),
                })
            })
            .transpose()?;
        let rows: Vec<DeadTuple> = with_pool!(self, |pool, d| {
            let mut qb = QueryBuilder::new(format!("SELECT {} FROM dead_letters", d.dead_columns));
            sql::push_dead_filters(&mut qb, d, query)?;
            sql::push_page(&mut qb, d, "dead_at", query.order, cursor.as_ref(), limit);
            qb.build_query_as()
                .fetch_all(pool)
                .await
                .map_err(|e| Error::database("listing dead letters", e))?
        });
        rows.into_iter().map(dead_record).collect()
    }

    /// Marks dead letters re-driven now (time, and one more in the count).
    pub(crate) async fn mark_redriven(&self, ids: &[DeadLetterId]) -> Result<(), Error> {
        let now = now_text();
        for chunk in ids.chunks(IDS_PER_STATEMENT) {
            with_pool!(self, |pool, d| {
                let mut qb = QueryBuilder::new("UPDATE dead_letters SET redriven_at = ");
                qb.push_bind(now.clone())
                    .push(d.time)
                    .push(", redrive_count = redrive_count + 1 WHERE id IN (");
                let mut list = qb.separated(", ");
                for id in chunk {
                    list.push_bind(id.to_string()).push_unseparated(d.uuid);
                }
                qb.push(")");
                qb.build()
                    .execute(pool)
                    .await
                    .map_err(|e| Error::database("marking dead letters re-driven", e))?;
            });
        }
        debug!(count = ids.len(), "dead letters marked re-driven");
        Ok(())
    }
}

/// `id, id, …)`: the ids bound, each cast as the dialect's id (the list's `(` is the
/// caller's).
fn push_id_list<'a, DB>(qb: &mut QueryBuilder<'a, DB>, d: &Dialect, ids: &[DeadLetterId])
where
    DB: sqlx::Database,
    String: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    let mut list = qb.separated(", ");
    for id in ids {
        list.push_bind(id.to_string()).push_unseparated(d.uuid);
    }
    qb.push(")");
}
