//! `mesh dead list | show | redrive | purge`: the dead letters the audit logger recorded,
//! read, re-driven and purged through the `mesh-audit` library's store.

use anyhow::Context as _;
use mesh::raw::DeadReason;
use mesh_audit::{DeadLetterId, DeadLetterQuery, DeadLetterRecord, Order, Redrive, Store};
use serde_json::{json, Value};

use crate::cli::{DeadCommand, Global, RedriveArgs};
use crate::config;
use crate::exit::{fail, Code, WithCode};
use crate::output::{self, escape, paint, BAD, DIM, GOOD, NAME};
use crate::store::open;

fn dead_json(dead: &DeadLetterRecord, with_body: bool) -> Value {
    let mut value = json!({
        "id": dead.id.to_string(),
        "event_id": dead.event_id.map(|id| id.to_string()),
        "key": dead.routing_key,
        "reason": dead.reason.map(DeadReason::as_str),
        "attempts": dead.attempts,
        "last_error": dead.last_error,
        "queue": dead.queue,
        "dead_at": dead.dead_at.to_string(),
        "redriven_at": dead.redriven_at.map(|t| t.to_string()),
        "redrive_count": dead.redrive_count,
    });
    if with_body {
        value["headers"] = dead.headers.clone();
        value["content_type"] = json!(dead.content_type);
        value["user_id"] = json!(dead.user_id);
        value["body"] = serde_json::from_slice(&dead.body)
            .unwrap_or_else(|_| Value::from(String::from_utf8_lossy(&dead.body).into_owned()));
    }
    value
}

fn dead_line(dead: &DeadLetterRecord) -> String {
    let redriven = match dead.redriven_at {
        Some(at) => paint(
            GOOD,
            format!(" re-driven {}x, last {at}", dead.redrive_count),
        ),
        None => String::new(),
    };
    format!(
        "{} {} {} {} from {} after {} attempt(s): {}{redriven}",
        paint(DIM, dead.dead_at),
        paint(DIM, dead.id),
        paint(NAME, escape(&dead.routing_key)),
        paint(BAD, dead.reason.map_or("unknown", DeadReason::as_str)),
        escape(dead.queue.as_deref().unwrap_or("?")),
        dead.attempts,
        escape(dead.last_error.as_deref().unwrap_or("-")),
    )
}

fn dead_id(text: &str) -> anyhow::Result<DeadLetterId> {
    text.parse()
        .coded(Code::Usage, || format!("`{text}` is not a dead-letter id"))
}

/// Runs one `dead` command.
pub(crate) async fn run(global: &Global, command: &DeadCommand) -> anyhow::Result<Code> {
    match command {
        DeadCommand::Purge {
            store,
            queue,
            reason,
            redriven,
            all,
            dry_run,
        } => {
            if queue.is_none() && reason.is_none() && !*redriven && !*all {
                return Err(fail(
                    Code::Usage,
                    "purge needs a filter (--queue, --reason, --redriven) or --all",
                ));
            }
            let mut query = DeadLetterQuery::new();
            if let Some(queue) = queue {
                query = query.queue(queue.clone());
            }
            if let Some(reason) = reason {
                query = query.reason(DeadReason::from(*reason));
            }
            if *redriven {
                query = query.redriven(true);
            }
            let store = open(global, store).await?;
            if *dry_run {
                let outcome = purge_dry_run(global, &store, query).await;
                store.close().await;
                return outcome;
            }
            let deleted = store
                .purge_dead_letters(&query)
                .await
                .context("purging dead letters")?;
            if global.json {
                output::json(&serde_json::json!({ "purged": deleted }))?;
            } else {
                output::line(format!("purged {deleted} dead letter(s)"))?;
            }
            Ok(Code::Ok)
        }
        DeadCommand::List {
            store,
            queue,
            reason,
            pending,
            since,
            limit,
        } => {
            let mut query = DeadLetterQuery::new().limit(*limit);
            if let Some(queue) = queue {
                query = query.queue(queue.clone());
            }
            if let Some(reason) = reason {
                query = query.reason(DeadReason::from(*reason));
            }
            if *pending {
                query = query.redriven(false);
            }
            if let Some(since) = since {
                query = query.since(*since);
            }
            let store = open(global, store).await?;
            let found = store
                .dead_letters(&query)
                .await
                .context("listing dead letters");
            store.close().await;
            for dead in &found? {
                if global.json {
                    output::json(&dead_json(dead, false))?;
                } else {
                    output::line(dead_line(dead))?;
                }
            }
            Ok(Code::Ok)
        }
        DeadCommand::Show { store, id } => {
            let id = dead_id(id)?;
            let store = open(global, store).await?;
            let found = store
                .dead_letter(id)
                .await
                .context("reading the dead letter");
            store.close().await;
            let Some(dead) = found? else {
                return Err(fail(
                    Code::Error,
                    format!("no dead letter {id} in the audit store"),
                ));
            };
            let value = dead_json(&dead, true);
            if global.json {
                output::json(&value)?;
            } else {
                output::line(dead_line(&dead))?;
                if let Some(user) = &dead.user_id {
                    output::line(format!("user-id: {}", escape(user)))?;
                }
                // JSON escapes control characters but not bidi or zero-width ones.
                output::line(format!(
                    "headers: {}",
                    escape(&value["headers"].to_string())
                ))?;
                output::line(format!("body:    {}", escape(&value["body"].to_string())))?;
            }
            Ok(Code::Ok)
        }
        DeadCommand::Redrive(args) => redrive(global, args).await,
    }
}

/// How many of the dead letters a purge would delete `--dry-run` lists (all are counted).
const PURGE_DRY_RUN_SHOWN: usize = 1000;

/// `mesh dead purge --dry-run`: how many records the purge would delete, and the first
/// [`PURGE_DRY_RUN_SHOWN`] of them, oldest first; nothing is deleted.
async fn purge_dry_run(
    global: &Global,
    store: &Store,
    query: DeadLetterQuery,
) -> anyhow::Result<Code> {
    let total = store
        .count_dead_letters(&query)
        .await
        .context("counting the dead letters to purge")?;
    let shown = store
        .dead_letters(&query.limit(PURGE_DRY_RUN_SHOWN).order(Order::Asc))
        .await
        .context("listing the dead letters to purge")?;
    let more = total.saturating_sub(shown.len() as u64);
    if global.json {
        output::json(&json!({
            "dry_run": true,
            "would_purge": total,
            "dead_letters": shown.iter().map(|d| dead_json(d, false)).collect::<Vec<_>>(),
            "not_shown": more,
        }))?;
    } else {
        for dead in &shown {
            output::line(format!("{} {}", paint(BAD, "would purge"), dead_line(dead)))?;
        }
        if more > 0 {
            output::line(format!("… and {more} more"))?;
        }
        output::line(format!(
            "dry run: {total} dead letter(s) would be purged; nothing was deleted"
        ))?;
    }
    Ok(Code::Ok)
}

/// `mesh dead redrive --dry-run`: what would be re-driven where, and what refused; nothing is
/// published or marked, and the broker is not contacted.
async fn redrive_dry_run(
    global: &Global,
    store: &Store,
    which: Vec<Redrive>,
) -> anyhow::Result<Code> {
    let mut would: Vec<(String, String)> = Vec::new();
    let mut refused: Vec<(String, String)> = Vec::new();
    for which in which {
        let label = match &which {
            Redrive::One(id) => id.to_string(),
            _ => "*".to_owned(),
        };
        match store.redrive_plan(which).await {
            Ok(plan) => {
                would.extend(plan.redrive.into_iter().map(|(id, q)| (id.to_string(), q)));
                refused.extend(
                    plan.refused
                        .into_iter()
                        .map(|(id, e)| (id.to_string(), format!("{:#}", anyhow::Error::new(e)))),
                );
            }
            Err(e) => refused.push((label, format!("{:#}", anyhow::Error::new(e)))),
        }
    }
    if global.json {
        output::json(&json!({
            "dry_run": true,
            "would_redrive": would.iter().map(|(id, q)| json!({"id": id, "queue": q})).collect::<Vec<_>>(),
            "refused": refused.iter().map(|(id, e)| json!({"id": id, "error": e})).collect::<Vec<_>>(),
        }))?;
    } else {
        for (id, queue) in &would {
            output::line(format!(
                "{} {id} -> {}",
                paint(GOOD, "would re-drive"),
                escape(queue)
            ))?;
        }
        for (id, error) in &refused {
            output::line(format!(
                "{} {}: {}",
                paint(BAD, "would refuse"),
                escape(id),
                escape(error)
            ))?;
        }
        output::line(format!(
            "dry run: {} would be re-driven, {} refused; nothing was published",
            would.len(),
            refused.len()
        ))?;
    }
    if refused.is_empty() {
        Ok(Code::Ok)
    } else {
        Err(fail(
            Code::Error,
            format!("{} dead letter(s) would be refused", refused.len()),
        ))
    }
}

async fn redrive(global: &Global, args: &RedriveArgs) -> anyhow::Result<Code> {
    let which: Vec<Redrive> = if args.all {
        vec![Redrive::All]
    } else if let Some(queue) = &args.queue {
        vec![Redrive::Matching(
            DeadLetterQuery::new()
                .queue(queue.clone())
                .limit(usize::MAX),
        )]
    } else if !args.ids.is_empty() {
        args.ids
            .iter()
            .map(|id| dead_id(id).map(Redrive::One))
            .collect::<anyhow::Result<_>>()?
    } else {
        return Err(fail(
            Code::Usage,
            "say which: dead-letter ids, --all or --queue Q",
        ));
    };
    let store = open(global, &args.store).await?;
    if args.dry_run {
        let outcome = redrive_dry_run(global, &store, which).await;
        store.close().await;
        return outcome;
    }
    let transport = config::connect(config::amqp_options(global)?).await?;
    let mut redriven: Vec<DeadLetterId> = Vec::new();
    let mut failed: Vec<(String, String)> = Vec::new();
    for which in which {
        let label = match &which {
            Redrive::One(id) => id.to_string(),
            _ => "*".to_owned(),
        };
        match store.redrive(&*transport, which).await {
            Ok(report) => {
                redriven.extend(report.redriven);
                failed.extend(
                    report
                        .failed
                        .into_iter()
                        .map(|(id, e)| (id.to_string(), format!("{:#}", anyhow::Error::new(e)))),
                );
            }
            Err(e) => failed.push((label, format!("{:#}", anyhow::Error::new(e)))),
        }
    }
    transport.close().await;
    store.close().await;
    if global.json {
        output::json(&json!({
            "redriven": redriven.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "failed": failed.iter().map(|(id, e)| json!({"id": id, "error": e})).collect::<Vec<_>>(),
        }))?;
    } else {
        for id in &redriven {
            output::line(format!("{} {id}", paint(GOOD, "re-driven")))?;
        }
        for (id, error) in &failed {
            output::line(format!("{} {id}: {}", paint(BAD, "failed"), escape(error)))?;
        }
        output::line(format!(
            "{} re-driven, {} failed",
            redriven.len(),
            failed.len()
        ))?;
    }
    if failed.is_empty() {
        Ok(Code::Ok)
    } else {
        Err(fail(
            Code::Error,
            format!("{} dead letter(s) could not be re-driven", failed.len()),
        ))
    }
}
