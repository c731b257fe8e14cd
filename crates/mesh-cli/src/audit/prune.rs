//! `mesh audit prune`: removes what arrived before a time (by arrival, never by x-time),
//! through the store's retention (`mesh_audit::Store::prune`), or counts it with `--dry-run`.

use anyhow::Context as _;
use mesh::raw::Timestamp;
use mesh_audit::{Prune, Pruned};
use serde_json::json;

use crate::cli::{Global, StoreArg};
use crate::exit::Code;
use crate::output::{self, paint, DIM};
use crate::store::open;

/// What `mesh audit prune` was asked.
pub(crate) struct PruneArgs<'a> {
    pub(crate) store: &'a StoreArg,
    pub(crate) before: Timestamp,
    pub(crate) rollups_before: Option<Timestamp>,
    pub(crate) pending_dead_letters: bool,
    pub(crate) dry_run: bool,
}

/// Runs `mesh audit prune`.
pub(crate) async fn prune(global: &Global, args: PruneArgs<'_>) -> anyhow::Result<Code> {
    let store = open(global, args.store).await?;
    let prune = Prune {
        rollups_before: args.rollups_before,
        pending_dead_letters: args.pending_dead_letters,
        ..Prune::before(args.before)
    };
    let outcome = if args.dry_run {
        store.prune_preview(&prune).await
    } else {
        store.prune(&prune).await
    };
    let oldest = match &outcome {
        Ok(_) if !args.dry_run => store.oldest_arrival().await.ok().flatten(),
        _ => None,
    };
    store.close().await;
    let pruned: Pruned = outcome.context("pruning the audit store")?;
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    if global.json {
        output::json(&json!({
            "dry_run": args.dry_run,
            "before": args.before.to_string(),
            "events": pruned.events,
            "conflicts": pruned.conflicts,
            "dead_letters": pruned.dead_letters,
            "rollups": pruned.rollups,
            "partitions_dropped": pruned.partitions_dropped,
            "oldest_arrival": oldest.map(|t| t.to_string()),
        }))?;
    } else {
        output::line(format_args!(
            "{verb} {} events, {} id conflicts, {} dead letters, {} rollup rows {}",
            pruned.events,
            pruned.conflicts,
            pruned.dead_letters,
            pruned.rollups,
            paint(DIM, format_args!("(arrived before {})", args.before)),
        ))?;
        if let Some(oldest) = oldest {
            output::line(paint(
                DIM,
                format_args!("oldest event kept arrived {oldest}"),
            ))?;
        }
    }
    Ok(Code::Ok)
}
