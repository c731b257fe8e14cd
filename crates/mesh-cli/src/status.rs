//! `mesh status`: can this node reach the broker, and how are its modules' queues doing.
//!
//! The connection is checked over AMQP (URL, credentials, vhost: what every service needs);
//! queues, depths and consumers come from the management API, which AMQP cannot enumerate.

use anyhow::Context as _;
use mesh::raw::naming::{self, RETIRED_DEAD_QUEUE};
use mesh::raw::Name;
use mesh_audit::{DeadLetterQuery, Store};
use serde_json::{json, Value};

use crate::cli::{Global, StatusArgs};
use crate::config;
use crate::exit::Code;
use crate::management::QueueRow;
use crate::output::{self, paint, BAD, DIM, GOOD, NAME, WARN};
use crate::store;

/// One module queue of the node.
#[derive(Debug)]
struct ModuleQueue<'a> {
    module: &'a str,
    queue: &'a QueueRow,
    /// Retry copies waiting in its retry queues (and in retired delay queues).
    retrying: u64,
    /// Its dead letters not re-driven yet, when an audit store is there to count them.
    dead: Option<u64>,
}

/// Runs `mesh status`.
pub(crate) async fn run(global: &Global, args: &StatusArgs) -> anyhow::Result<Code> {
    let node = config::node(global)?;
    let options = config::amqp_options(global)?;
    let shown = options.to_string();
    let transport = config::connect(options).await?;
    let health = transport.health();
    transport.close().await;
    if !global.json {
        output::line(format!(
            "broker    {} {}",
            paint(NAME, &shown),
            if health.blocked {
                paint(WARN, "connected, publishing blocked by a broker alarm")
            } else {
                paint(GOOD, "connected")
            }
        ))?;
        output::line(format!("node      {}", paint(NAME, node.as_str())))?;
    }

    let management = config::management(global)?;
    let version = management.overview().await.ok().and_then(|o| {
        o.get("rabbitmq_version")
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let queues = management.queues().await?;
    let mut modules = module_queues(&queues, &node);
    let store = store::open_if_any(global, &args.store).await?;
    if let Some(store) = &store {
        for m in &mut modules {
            m.dead = Some(pending_dead_letters(store, &m.queue.name).await?);
        }
        store.close().await;
    }
    // Dead letters wait in this node's audit logger queue until it stores them.
    let dead_queue = naming::audit_dead_queue(&node);
    let dead = queues.iter().find(|q| q.name == dead_queue);
    let dead_count = dead.and_then(|q| q.messages);
    let retired = queues.iter().find(|q| q.name == RETIRED_DEAD_QUEUE);

    if global.json {
        output::json(&json!({
            "broker": shown,
            "connected": health.connected,
            "blocked": health.blocked,
            "rabbitmq_version": version,
            "node": node.as_str(),
            "modules": modules.iter().map(|m| json!({
                "module": m.module,
                "queue": m.queue.name,
                "type": m.queue.kind,
                "messages": m.queue.messages,
                "ready": m.queue.messages_ready,
                "unacked": m.queue.messages_unacknowledged,
                "consumers": m.queue.consumers,
                "retrying": m.retrying,
                "dead_letters": m.dead,
            })).collect::<Vec<_>>(),
            "dead_letters_queue": dead_queue,
            "dead_letters": dead_count,
            "retired_dead_letters": retired.map(|q| q.messages),
        }))?;
        return Ok(Code::Ok);
    }
    if let Some(version) = version {
        output::line(format!("rabbitmq  {version}"))?;
    }
    if modules.is_empty() {
        output::line(format!(
            "modules   {}",
            paint(
                DIM,
                format!("none: no queue {node}.<module>.events in this vhost")
            )
        ))?;
    } else {
        output::line(format!(
            "{:<20} {:<8} {:>8} {:>8} {:>9} {:>9} {:>6}",
            "module", "type", "ready", "unacked", "consumers", "retrying", "dead"
        ))?;
        for m in &modules {
            let consumers = m.queue.consumers.unwrap_or(0);
            output::line(format!(
                "{:<20} {:<8} {:>8} {:>8} {:>9} {:>9} {:>6}",
                m.module,
                m.queue.kind.as_deref().unwrap_or("?"),
                count(m.queue.messages_ready),
                count(m.queue.messages_unacknowledged),
                if consumers == 0 {
                    paint(BAD, format!("{consumers:>9}"))
                } else {
                    format!("{consumers:>9}")
                },
                m.retrying,
                count(m.dead),
            ))?;
        }
    }
    output::line(format!(
        "dead letters waiting for the audit logger in {dead_queue}: {}",
        match dead_count {
            Some(0) => paint(GOOD, 0),
            Some(n) => paint(BAD, n),
            None if dead.is_some() => "not sampled yet".to_owned(),
            None => paint(DIM, "no such queue"),
        }
    ))?;
    if let Some(retired) = retired {
        output::line(format!(
            "retired queue {RETIRED_DEAD_QUEUE} still exists ({}): an audit logger stores \
             what it holds and deletes it at its next start",
            match retired.messages {
                Some(n) => format!("{n} message(s)"),
                None => "not sampled yet".to_owned(),
            }
        ))?;
    }
    output::line(paint(
        DIM,
        "(counts are the management API's last statistics sample, every 5 s by default)",
    ))?;
    Ok(Code::Ok)
}

/// The module queues of `node` among `queues` (`<node>.<module>.events`), each with the retry
/// copies waiting beside it; dead letters are counted later, from the store.
fn module_queues<'a>(queues: &'a [QueueRow], node: &Name) -> Vec<ModuleQueue<'a>> {
    let prefix = format!("{node}.");
    let mut modules: Vec<ModuleQueue<'_>> = Vec::new();
    for queue in queues {
        let Some(module) = queue
            .name
            .strip_prefix(&prefix)
            .and_then(|rest| rest.strip_suffix(".events"))
        else {
            continue;
        };
        if module.contains('.') {
            continue;
        }
        // Retry queues, and the retired delay queues still draining.
        let retry_prefix = format!("{}.retry.", queue.name);
        let delay_prefix = format!("{}.delay.", queue.name);
        let retrying = queues
            .iter()
            .filter(|q| q.name.starts_with(&retry_prefix) || q.name.starts_with(&delay_prefix))
            .filter_map(|q| q.messages)
            .sum();
        modules.push(ModuleQueue {
            module,
            queue,
            retrying,
            dead: None,
        });
    }
    modules
}

fn count(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// Dead letters of `queue` not re-driven yet.
async fn pending_dead_letters(store: &Store, queue: &str) -> anyhow::Result<u64> {
    store
        .count_dead_letters(&DeadLetterQuery::new().queue(queue).redriven(false))
        .await
        .with_context(|| format!("counting the dead letters of {queue}"))
}
