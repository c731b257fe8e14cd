//! `mesh audit query | count | replay | prune | trace` over the audit store, and `mesh audit run`
//! (the logger, in [`logger`]), on top of the `mesh-audit` library (its logger service and
//! its store's query and replay API).

mod logger;
mod prune;

use anyhow::Context as _;
use mesh::raw::EventId;
use mesh_audit::{CausationNode, EventQuery, EventRecord, Order, Replay, Store};
use serde_json::{json, Value};

pub(crate) use self::logger::{plan_logger, run_logger};

use crate::cli::{AuditCommand, EventFilter, Global, ReplayArgs};
use crate::config;
use crate::exit::{fail, Code, WithCode};
use crate::output::{self, escape, paint, DIM, GOOD, NAME, WARN};
use crate::store::open;

fn event_query(filter: &EventFilter) -> anyhow::Result<EventQuery> {
    let mut query = EventQuery::new();
    if let Some(key) = &filter.key {
        mesh::raw::TopicPattern::parse(key)
            .coded(Code::Usage, || format!("invalid --key pattern `{key}`"))?;
        query = query.pattern(key.clone());
    }
    if let Some(source) = &filter.source {
        query = query.source(source.clone());
    }
    if let Some(node) = &filter.event_node {
        query = query.node(node.clone());
    }
    if let Some(since) = filter.since {
        query = query.since(since);
    }
    if let Some(until) = filter.until {
        query = query.until(until);
    }
    Ok(query)
}

fn event_json(event: &EventRecord) -> Value {
    json!({
        "id": event.id.to_string(),
        "key": event.routing_key,
        "source": event.source,
        "node": event.node,
        "time": event.time.to_string(),
        "causation_id": event.causation_id,
        "schema": event.schema,
        "received_at": event.received_at.to_string(),
        "publisher": event.publisher,
        "body": event.body_json().unwrap_or_else(|_| Value::from(event.body.clone())),
    })
}

fn event_line(event: &EventRecord) -> impl std::fmt::Display + '_ {
    // Stored text came from the wire: the output gate escapes it, so it cannot forge a line.
    output::lazy(move |f| {
        write!(
            f,
            "{} {} {} {}@{}",
            paint(DIM, event.time),
            paint(NAME, &event.routing_key),
            paint(DIM, event.id),
            event.source,
            event.node,
        )?;
        if let Some(user) = &event.publisher {
            write!(f, " {}", paint(DIM, format_args!("by {user}")))?;
        }
        write!(f, " {}", event.body)
    })
}

/// Runs one `audit` command.
pub(crate) async fn run(global: &Global, command: &AuditCommand) -> anyhow::Result<Code> {
    match command {
        AuditCommand::Run(args) => run_logger(global, args).await,
        AuditCommand::Query {
            store,
            filter,
            limit,
            oldest_first,
            conflicts,
        } => {
            let store = open(global, store).await?;
            let query = event_query(filter)?.limit(*limit).order(if *oldest_first {
                Order::Asc
            } else {
                Order::Desc
            });
            if *conflicts {
                let found = store
                    .conflicts(&query)
                    .await
                    .context("querying id conflicts");
                store.close().await;
                for conflict in &found? {
                    if global.json {
                        let mut value = event_json(&conflict.event);
                        value["conflict_id"] = json!(conflict.id.to_string());
                        value["conflicts_with"] = json!(conflict.event.id.to_string());
                        output::json(&value)?;
                    } else {
                        output::line(format_args!(
                            "{} {}",
                            event_line(&conflict.event),
                            paint(WARN, format!("conflicts with {}", conflict.event.id))
                        ))?;
                    }
                }
                return Ok(Code::Ok);
            }
            let events = store.events(&query).await.context("querying events")?;
            store.close().await;
            for event in &events {
                if global.json {
                    output::json(&event_json(event))?;
                } else {
                    output::line(event_line(event))?;
                }
            }
            Ok(Code::Ok)
        }
        AuditCommand::Count {
            store,
            filter,
            by_key,
        } => {
            let store = open(global, store).await?;
            let query = event_query(filter)?;
            let result = count(global, &store, &query, filter, *by_key).await;
            store.close().await;
            result
        }
        AuditCommand::Replay(args) => replay(global, args).await,
        AuditCommand::Prune {
            store,
            before,
            rollups_before,
            pending_dead_letters,
            dry_run,
        } => {
            prune::prune(
                global,
                prune::PruneArgs {
                    store,
                    before: *before,
                    rollups_before: *rollups_before,
                    pending_dead_letters: *pending_dead_letters,
                    dry_run: *dry_run,
                },
            )
            .await
        }
        AuditCommand::Trace { store, id } => {
            let id: EventId = id
                .parse()
                .coded(Code::Usage, || format!("`{id}` is not an event id"))?;
            let store = open(global, store).await?;
            let tree = store
                .causation_tree(id)
                .await
                .context("reading the causation tree");
            store.close().await;
            let Some(tree) = tree? else {
                return Err(fail(
                    Code::Error,
                    format!("no event {id} in the audit store"),
                ));
            };
            if global.json {
                output::json(&json!({
                    "focus": tree.focus.to_string(),
                    "missing_cause": tree.missing_cause,
                    "truncated": tree.truncated,
                    "root": node_json(&tree.root),
                }))?;
                return Ok(Code::Ok);
            }
            if let Some(cause) = &tree.missing_cause {
                output::line(paint(
                    DIM,
                    format!("caused by {} (not in the store)", cause),
                ))?;
            }
            draw(&tree.root, tree.focus, "", None)?;
            if tree.truncated {
                output::line(paint(
                    WARN,
                    "(truncated: the tree has more events than shown)",
                ))?;
            }
            Ok(Code::Ok)
        }
    }
}

/// `mesh audit replay`: the matching stored events into one consumer queue only.
async fn replay(global: &Global, args: &ReplayArgs) -> anyhow::Result<Code> {
    let filter = EventFilter {
        key: Some(args.key.clone()),
        source: args.source.clone(),
        event_node: None,
        since: Some(args.since),
        until: args.until,
    };
    let query = event_query(&filter)?.limit(usize::MAX);
    let queue = format!("{}.events", args.to);
    if !mesh::raw::naming::is_consumer_queue(&queue) {
        return Err(fail(
            Code::Usage,
            format!(
                "--to `{}` is not <node>.<module> or shared.<module>",
                escape(&args.to)
            ),
        ));
    }
    let replay = Replay::new(query, queue).rate(args.rate);
    let store = open(global, &args.store).await?;
    if args.dry_run {
        let plan = store
            .replay_plan(&replay)
            .await
            .context("planning the replay");
        store.close().await;
        let plan = plan?;
        if global.json {
            output::json(&json!({
                "dry_run": true,
                "queue": plan.queue,
                "events": plan.events,
                "by_key": plan.by_key.iter().map(|(key, n)| json!({"key": key, "events": n})).collect::<Vec<_>>(),
            }))?;
        } else {
            for (key, n) in &plan.by_key {
                output::line(format_args!("{n:>10} {}", paint(NAME, key)))?;
            }
            output::line(format_args!(
                "dry run: {} event(s) would be replayed to {} at most {}/s; nothing was published",
                plan.events, &plan.queue, args.rate
            ))?;
        }
        return Ok(Code::Ok);
    }
    let transport = match config::connect(config::amqp_options(global)?).await {
        Ok(transport) => transport,
        Err(e) => {
            store.close().await;
            return Err(e);
        }
    };
    let report = store.replay(&*transport, &replay).await;
    transport.close().await;
    store.close().await;
    let report = report.context("replaying")?;
    let last = report
        .last
        .map(|(id, time)| json!({"id": id.to_string(), "time": time.to_string()}));
    let failed = report
        .failed
        .map(|(id, time, e)| (id, time, format!("{:#}", anyhow::Error::new(e))));
    if global.json {
        output::json(&json!({
            "queue": replay.queue(),
            "replayed": report.replayed,
            "last": last,
            "failed": failed.as_ref().map(|(id, time, error)| json!({
                "id": id.to_string(),
                "time": time.to_string(),
                "error": error,
            })),
        }))?;
    } else {
        output::line(format_args!(
            "{} {} event(s) to {}",
            paint(GOOD, "replayed"),
            report.replayed,
            replay.queue()
        ))?;
    }
    match failed {
        None => Ok(Code::Ok),
        Some((id, time, error)) => Err(fail(
            Code::Error,
            format!(
                "the replay stopped at event {id} (emitted {time}): {error}; run it again \
                 with --since {time} to resume"
            ),
        )),
    }
}

async fn count(
    global: &Global,
    store: &Store,
    query: &EventQuery,
    filter: &EventFilter,
    by_key: bool,
) -> anyhow::Result<Code> {
    if by_key {
        let rows = store
            .event_counts_by_key(query)
            .await
            .context("counting events")?;
        for (key, n) in rows {
            if global.json {
                output::json(&json!({"key": key, "events": n}))?;
            } else {
                output::line(format_args!("{n:>10} {}", paint(NAME, &key)))?;
            }
        }
        return Ok(Code::Ok);
    }
    if filter.is_empty() {
        let counts = store.counts().await.context("counting")?;
        if global.json {
            output::json(&json!({
                "events": counts.events, "conflicts": counts.conflicts,
                "dead_letters": counts.dead_letters,
                "dead_letters_pending": counts.dead_letters_pending,
            }))?;
        } else {
            output::line(format_args!(
                "{} events, {} id conflicts, {} dead letters ({} not re-driven)",
                counts.events, counts.conflicts, counts.dead_letters, counts.dead_letters_pending
            ))?;
        }
    } else {
        let n = store.count_events(query).await.context("counting events")?;
        if global.json {
            output::json(&json!({ "events": n }))?;
        } else {
            output::line(format_args!("{n} events"))?;
        }
    }
    Ok(Code::Ok)
}

fn node_json(node: &CausationNode) -> Value {
    let mut value = event_json(&node.event);
    value["children"] = node.children.iter().map(node_json).collect();
    value
}

/// Draws the tree: `├─`/`└─` branches, the event asked for marked with `◀`.
fn draw(
    node: &CausationNode,
    focus: EventId,
    prefix: &str,
    last: Option<bool>,
) -> anyhow::Result<()> {
    let (branch, child_prefix) = match last {
        None => (String::new(), String::new()),
        Some(true) => (format!("{prefix}└─ "), format!("{prefix}   ")),
        Some(false) => (format!("{prefix}├─ "), format!("{prefix}│  ")),
    };
    let event = &node.event;
    let mark = (event.id == focus).then(|| paint(GOOD, "◀"));
    output::line(format_args!(
        "{branch}{} {} {}@{} {}{}",
        paint(NAME, &event.routing_key),
        paint(DIM, event.id),
        event.source,
        event.node,
        paint(DIM, event.time),
        output::lazy(|f| match &mark {
            Some(mark) => write!(f, " {mark}"),
            None => Ok(()),
        })
    ))?;
    let n = node.children.len();
    for (i, child) in node.children.iter().enumerate() {
        draw(child, focus, &child_prefix, Some(i + 1 == n))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{draw, event_json, event_line, node_json};
    use crate::output::capture::capture;
    use crate::output::hostile::{all, assert_json_safe, assert_text_safe, CORPUS};
    use mesh_audit::{CausationNode, EventRecord};
    use mesh_core::{EventId, Timestamp};
    use serde_json::json;

    fn event(value: &str) -> EventRecord {
        EventRecord {
            id: EventId::new(),
            routing_key: value.to_owned(),
            source: value.to_owned(),
            node: value.to_owned(),
            time: Timestamp::now(),
            causation_id: Some(value.to_owned()),
            schema: None,
            received_at: Timestamp::now(),
            headers: json!({ value: value }),
            body: value.to_owned(),
            publisher: Some(value.to_owned()),
        }
    }

    /// Stored events came from the wire: `audit query` and `audit trace` print their keys,
    /// sources, nodes, publishers and bodies escaped, as text and as JSON.
    #[test]
    fn hostile_events_are_escaped() {
        let everything = all();
        let mut values: Vec<&str> = CORPUS.to_vec();
        values.push(&everything);
        for value in values {
            let root = CausationNode {
                event: event(value),
                children: vec![CausationNode {
                    event: event(value),
                    children: Vec::new(),
                }],
            };
            let (printed, out) = capture(|| {
                crate::output::line(event_line(&root.event))?;
                draw(&root, root.event.id, "", None)
            });
            printed.unwrap();
            assert_eq!(out.stdout.lines().count(), 3, "{:?}", out.stdout);
            assert_text_safe(&out.stdout, &[value]);
            let (printed, out) = capture(|| {
                crate::output::json(&event_json(&root.event))?;
                crate::output::json(&node_json(&root))
            });
            printed.unwrap();
            assert_json_safe(&out.stdout, &[value]);
        }
    }
}
