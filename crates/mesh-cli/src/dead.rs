//! `mesh dead list | show | redrive | purge`: the dead letters the audit logger recorded,
//! read, re-driven and purged through the `mesh-audit` library's store.

use anyhow::Context as _;
use mesh::raw::DeadReason;
use mesh::EventId;
use mesh_audit::{
    DeadLetterId, DeadLetterQuery, DeadLetterRecord, ErrorKind, Order, Redrive, RedriveOptions,
    Store,
};
use serde_json::{json, Value};

use crate::cli::{DeadCommand, Global, RedriveArgs};
use crate::config;
use crate::exit::{fail, fail_with_hint, Code, WithCode};
use crate::output::{self, paint, BAD, DIM, GOOD, NAME};
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
        "untrusted": dead.untrusted,
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

fn dead_line(dead: &DeadLetterRecord) -> impl std::fmt::Display + '_ {
    // Stored text came from the wire: the output gate escapes it, so it cannot forge a line.
    output::lazy(move |f| {
        write!(
            f,
            "{} {} {} {} from {} after {} attempt(s): {}",
            paint(DIM, dead.dead_at),
            paint(DIM, dead.id),
            paint(NAME, &dead.routing_key),
            paint(BAD, dead.reason.map_or("unknown", DeadReason::as_str)),
            dead.queue.as_deref().unwrap_or("?"),
            dead.attempts,
            dead.last_error.as_deref().unwrap_or("-"),
        )?;
        if dead.untrusted {
            write!(
                f,
                "{}",
                paint(BAD, " UNTRUSTED (its publisher does not own that queue)")
            )?;
        }
        if let Some(at) = dead.redriven_at {
            write!(
                f,
                "{}",
                paint(
                    GOOD,
                    format_args!(" re-driven {}x, last {at}", dead.redrive_count)
                )
            )?;
        }
        Ok(())
    })
}

/// `mesh dead show`: the dead letter, its headers and body.
fn show(json: bool, dead: &DeadLetterRecord) -> anyhow::Result<()> {
    let value = dead_json(dead, true);
    if json {
        output::json(&value)?;
        return Ok(());
    }
    output::line(dead_line(dead))?;
    if let Some(user) = &dead.user_id {
        output::line(format_args!("user-id: {user}"))?;
    }
    // JSON escapes C0 control characters only: the gate escapes the rest.
    output::line(format_args!("headers: {}", value["headers"]))?;
    output::line(format_args!("body:    {}", value["body"]))?;
    Ok(())
}

/// The dead letters `dead show ID` names: the one with this id, else those of the event with
/// this id (an event may die in several consumers' queues), oldest first.
async fn show_which(store: &Store, id: DeadLetterId) -> anyhow::Result<Vec<DeadLetterRecord>> {
    if let Some(dead) = store
        .dead_letter(id)
        .await
        .context("reading the dead letter")?
    {
        return Ok(vec![dead]);
    }
    let event: EventId = id
        .to_string()
        .parse()
        .context("reading the id as an event id")?;
    let query = DeadLetterQuery::new()
        .event_id(event)
        .order(Order::Asc)
        .limit(SHOWN_PER_EVENT);
    store
        .dead_letters(&query)
        .await
        .context("listing the event's dead letters")
}

/// How many dead letters of one event `dead show` prints at most.
const SHOWN_PER_EVENT: usize = 100;

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
                output::line(format_args!("purged {deleted} dead letter(s)"))?;
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
            let found = show_which(&store, id).await;
            store.close().await;
            let found = found?;
            if found.is_empty() {
                return Err(fail_with_hint(
                    Code::Error,
                    format!("no dead letter {id}, and no dead letter of an event {id}, in the audit store"),
                    format!(
                        "dead letters have ids of their own: `mesh dead list` shows them (with \
                         the event id of each); `mesh audit trace {id}` shows an event"
                    ),
                ));
            }
            for dead in &found {
                show(global.json, dead)?;
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
            output::line(format_args!(
                "{} {}",
                paint(BAD, "would purge"),
                dead_line(dead)
            ))?;
        }
        if more > 0 {
            output::line(format_args!("… and {more} more"))?;
        }
        output::line(format_args!(
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
    options: RedriveOptions,
) -> anyhow::Result<Code> {
    let mut would: Vec<(String, String)> = Vec::new();
    let mut refused: Vec<(String, String)> = Vec::new();
    for which in which {
        let label = match &which {
            Redrive::One(id) | Redrive::Again(id) => id.to_string(),
            _ => "*".to_owned(),
        };
        match store.redrive_plan_with(which, options).await {
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
            output::line(format_args!(
                "{} {id} -> {}",
                paint(GOOD, "would re-drive"),
                queue
            ))?;
        }
        for (id, error) in &refused {
            output::line(format_args!(
                "{} {}: {}",
                paint(BAD, "would refuse"),
                id,
                error
            ))?;
        }
        output::line(format_args!(
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
            .map(|id| {
                dead_id(id).map(if args.again {
                    Redrive::Again
                } else {
                    Redrive::One
                })
            })
            .collect::<anyhow::Result<_>>()?
    } else {
        return Err(fail(
            Code::Usage,
            "say which: dead-letter ids, --all or --queue Q",
        ));
    };
    let options = RedriveOptions::new().strip_untrusted_claims(args.strip_untrusted_claims);
    let store = open(global, &args.store).await?;
    if args.dry_run {
        let outcome = redrive_dry_run(global, &store, which, options).await;
        store.close().await;
        return outcome;
    }
    let transport = config::connect(config::amqp_options(global)?).await?;
    let mut redriven: Vec<DeadLetterId> = Vec::new();
    let mut failed: Vec<(String, String)> = Vec::new();
    let mut again = 0;
    let mut untrusted = 0;
    for which in which {
        let label = match &which {
            Redrive::One(id) | Redrive::Again(id) => id.to_string(),
            _ => "*".to_owned(),
        };
        match store.redrive_with(&*transport, which, options).await {
            Ok(report) => {
                redriven.extend(report.redriven);
                untrusted += report
                    .failed
                    .iter()
                    .filter(|(_, e)| matches!(e.kind(), ErrorKind::Untrusted))
                    .count();
                failed.extend(
                    report
                        .failed
                        .into_iter()
                        .map(|(id, e)| (id.to_string(), format!("{:#}", anyhow::Error::new(e)))),
                );
            }
            Err(e) => {
                if matches!(e.kind(), ErrorKind::AlreadyRedriven) {
                    again += 1;
                }
                if matches!(e.kind(), ErrorKind::Untrusted) {
                    untrusted += 1;
                }
                failed.push((label, format!("{:#}", anyhow::Error::new(e))));
            }
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
            output::line(format_args!("{} {id}", paint(GOOD, "re-driven")))?;
        }
        for (id, error) in &failed {
            output::line(format_args!("{} {id}: {}", paint(BAD, "failed"), error))?;
        }
        output::line(format_args!(
            "{} re-driven, {} failed",
            redriven.len(),
            failed.len()
        ))?;
    }
    let message = format!("{} dead letter(s) could not be re-driven", failed.len());
    match (failed.is_empty(), again, untrusted) {
        (true, _, _) => Ok(Code::Ok),
        (false, 0, 0) => Err(fail(Code::Error, message)),
        (false, 0, untrusted) => Err(fail_with_hint(
            Code::Error,
            message,
            format!(
                "{untrusted} of them untrusted (check them with `mesh dead show`): give \
                 --strip-untrusted-claims to send them without their x-mesh-* claims"
            ),
        )),
        (false, again, _) => Err(fail_with_hint(
            Code::Error,
            message,
            format!(
                "{again} of them re-driven before: give --again to send them to their \
                 consumers once more"
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::{dead_json, show};
    use crate::output::capture::capture;
    use crate::output::hostile::{all, assert_json_safe, assert_text_safe, CORPUS};
    use mesh_audit::DeadLetterRecord;
    use mesh_core::{DeadReason, Timestamp};
    use serde_json::json;

    /// A dead letter's routing key, queue, error, user, headers and body came from the wire:
    /// `dead list` and `dead show` print them escaped, as text and as JSON.
    #[test]
    fn hostile_dead_letters_are_escaped() {
        let everything = all();
        let mut values: Vec<&str> = CORPUS.to_vec();
        values.push(&everything);
        for value in values {
            let dead = DeadLetterRecord {
                id: "00000000-0000-0000-0000-000000000001".parse().unwrap(),
                event_id: None,
                routing_key: value.to_owned(),
                reason: Some(DeadReason::Permanent),
                attempts: 1,
                last_error: Some(value.to_owned()),
                queue: Some(value.to_owned()),
                dead_at: Timestamp::now(),
                received_at: Timestamp::now(),
                content_type: Some(value.to_owned()),
                headers: json!({ value: value }),
                body: value.as_bytes().to_vec().into(),
                redriven_at: Some(Timestamp::now()),
                redrive_count: 1,
                user_id: Some(value.to_owned()),
                untrusted: true,
            };
            let (printed, out) = capture(|| show(false, &dead));
            printed.unwrap();
            assert_eq!(out.stdout.lines().count(), 4, "{:?}", out.stdout);
            assert_text_safe(&out.stdout, &[value]);
            let (printed, out) = capture(|| show(true, &dead));
            printed.unwrap();
            assert_json_safe(&out.stdout, &[value]);
            let (printed, out) = capture(|| crate::output::json(&dead_json(&dead, false)));
            printed.unwrap();
            assert_json_safe(&out.stdout, &[value]);
        }
    }
}
