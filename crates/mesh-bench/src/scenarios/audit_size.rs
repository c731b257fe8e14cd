//! Bytes on disk per million events: the audit logger stores `--audit-size-events` events
//! (the bench's 256-byte JSON bodies with the contract's four headers, one routing key and
//! source) into a new SQLite file and a new PostgreSQL database, then the bench measures what
//! each store holds, table, indexes and rollups apart, and scales it to a million events (a
//! straight extrapolation: the tables and indexes grow with their rows; the rollups do not,
//! they grow with minutes × keys × sources, so their figure is what this run's minutes took).
//!
//! - SQLite: the pages of each b-tree from `dbstat` (table, and its indexes with the
//!   primary key's), and the file's size after a `wal_checkpoint(TRUNCATE)`;
//! - PostgreSQL: `pg_table_size` (heap, TOAST, free-space and visibility maps) and
//!   `pg_indexes_size`, summed over the leaf partitions of `events` (`pg_partition_tree`);
//!   `event_ids` (the id table that keeps each id once, decision 0022) and `event_rollups`
//!   apart; and `pg_database_size`, which includes the catalogs of an empty database.

use std::fmt::Write as _;

use serde::Serialize;

use super::audit;
use super::audit_db::Database;
use super::{Ctx, Db};

/// One measured part of a store.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Part {
    pub(crate) name: &'static str,
    pub(crate) bytes: u64,
}

/// What one store held after `events` events.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Sizes {
    pub(crate) queue: &'static str,
    pub(crate) store: &'static str,
    pub(crate) events: u64,
    /// Events per second of the ingest that filled it.
    pub(crate) ingest_rate: f64,
    pub(crate) parts: Vec<Part>,
}

/// Fills a store of `db`'s kind through the logger and measures it.
pub(crate) async fn run(ctx: &Ctx, db: Db) -> anyhow::Result<Sizes> {
    let events = ctx.plan.audit_size_events;
    let (run, temp) = audit::ingest(ctx, db, events).await?;
    let database = Database::connect(db, temp.url()).await?;
    let parts = measure(&database).await;
    database.close().await;
    let mut parts = parts?;
    if let Some(path) = temp.sqlite_path() {
        parts.push(Part {
            name: "file (after a checkpoint)",
            bytes: std::fs::metadata(path)?.len(),
        });
    }
    Ok(Sizes {
        queue: ctx.kind.as_str(),
        store: match db {
            Db::Sqlite => "SQLite",
            Db::Postgres => "PostgreSQL",
        },
        events,
        ingest_rate: run.metrics.get("events/s").copied().unwrap_or(0.0),
        parts,
    })
}

fn bytes(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

async fn measure(database: &Database) -> anyhow::Result<Vec<Part>> {
    let mut parts = Vec::new();
    match database {
        Database::Sqlite(pool) => {
            sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
                .execute(pool)
                .await?;
            let rows: Vec<(String, String, i64)> = sqlx::query_as(
                "SELECT m.tbl_name, m.type, sum(s.pgsize) FROM dbstat s \
                 JOIN sqlite_master m ON m.name = s.name \
                 WHERE m.tbl_name IN ('events', 'event_rollups') GROUP BY 1, 2",
            )
            .fetch_all(pool)
            .await?;
            let of = |table: &str, kind: &str| {
                rows.iter()
                    .filter(|(t, k, _)| t == table && k == kind)
                    .map(|(_, _, n)| bytes(*n))
                    .sum::<u64>()
            };
            parts.push(Part {
                name: "events: table",
                bytes: of("events", "table"),
            });
            parts.push(Part {
                name: "events: indexes (with the primary key)",
                bytes: of("events", "index"),
            });
            parts.push(Part {
                name: "rollups: table and key",
                bytes: of("event_rollups", "table") + of("event_rollups", "index"),
            });
        }
        Database::Postgres(pool) => {
            let (table, indexes): (i64, i64) = sqlx::query_as(
                "SELECT coalesce(sum(pg_table_size(relid)), 0)::int8, \
                 coalesce(sum(pg_indexes_size(relid)), 0)::int8 \
                 FROM pg_partition_tree('events') WHERE isleaf",
            )
            .fetch_one(pool)
            .await?;
            parts.push(Part {
                name: "events: table (partitions)",
                bytes: bytes(table),
            });
            parts.push(Part {
                name: "events: indexes (partitions, with the key)",
                bytes: bytes(indexes),
            });
            for (relation, name_table, name_indexes) in [
                ("event_ids", "event_ids: table", "event_ids: indexes"),
                (
                    "event_rollups",
                    "rollups: table",
                    "rollups: indexes (the key)",
                ),
            ] {
                let (table, indexes): (i64, i64) = sqlx::query_as(
                    "SELECT pg_table_size($1::regclass)::int8, pg_indexes_size($1::regclass)::int8",
                )
                .bind(relation)
                .fetch_one(pool)
                .await?;
                parts.push(Part {
                    name: name_table,
                    bytes: bytes(table),
                });
                parts.push(Part {
                    name: name_indexes,
                    bytes: bytes(indexes),
                });
            }
            let database: i64 = sqlx::query_scalar("SELECT pg_database_size(current_database())")
                .fetch_one(pool)
                .await?;
            parts.push(Part {
                name: "database (with an empty database's catalogs)",
                bytes: bytes(database),
            });
        }
    }
    Ok(parts)
}

/// The table of every store measured: bytes, and bytes per million events.
pub(crate) fn table(sizes: &[Sizes]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| queue | store | part | bytes | per event | per 1,000,000 events (extrapolated) |"
    );
    let _ = writeln!(out, "|---|---|---|---:|---:|---:|");
    for s in sizes {
        for part in &s.parts {
            let per_event = part.bytes as f64 / s.events.max(1) as f64;
            let _ = writeln!(
                out,
                "| {} | {} ({} events, ingested at {:.0}/s) | {} | {} | {:.1} B | {:.1} MiB |",
                s.queue,
                s.store,
                s.events,
                s.ingest_rate,
                part.name,
                part.bytes,
                per_event,
                per_event * 1_000_000.0 / (1024.0 * 1024.0)
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_scaled_to_a_million_events() {
        let sizes = [Sizes {
            queue: "quorum",
            store: "SQLite",
            events: 200_000,
            ingest_rate: 20_000.0,
            parts: vec![Part {
                name: "events: table",
                bytes: 200_000 * 512,
            }],
        }];
        let text = table(&sizes);
        // 512 bytes an event: 488.3 MiB a million.
        assert!(text.contains("| 512.0 B | 488.3 MiB |"), "{text}");
    }
}
