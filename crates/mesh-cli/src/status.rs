//! `mesh status`: can this node reach the broker, and how are its modules' queues doing.
//!
//! The connection is checked over AMQP (URL, credentials, vhost: what every service needs);
//! queues, depths and consumers come from the management API, which AMQP cannot enumerate.

use anstyle::Style;
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

/// What `mesh status` found, to print as text or JSON.
struct Status<'a> {
    /// The broker's URL as shown (no password).
    broker: String,
    connected: bool,
    blocked: bool,
    version: Option<String>,
    node: &'a Name,
    modules: Vec<ModuleQueue<'a>>,
    /// The other nodes with module queues in this vhost, by name (where to look instead).
    other_nodes: Vec<&'a str>,
    /// This node's audit logger dead-letter queue, and that queue if it exists.
    dead_queue: String,
    dead: Option<&'a QueueRow>,
    retired: Option<&'a QueueRow>,
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
        print_connection(&shown, health.blocked, &node, global.node.is_none())?;
    }

    let management = config::management(global)?;
    let version = management.overview().await.ok().and_then(|o| {
        o.get("rabbitmq_version")
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    let queues = management.queues().await?;
    let mut modules = module_queues(&queues, &node);
    let other_nodes = other_nodes(&queues, &node);
    let store = store::open_if_any(global, &args.store).await?;
    if let Some(store) = &store {
        for m in &mut modules {
            m.dead = Some(pending_dead_letters(store, &m.queue.name).await?);
        }
        store.close().await;
    }
    // Dead letters wait in this node's audit logger queue until it stores them.
    let dead_queue = naming::audit_dead_queue(&node);
    let status = Status {
        broker: shown,
        connected: health.connected,
        blocked: health.blocked,
        version,
        node: &node,
        modules,
        other_nodes,
        dead: queues.iter().find(|q| q.name == dead_queue),
        dead_queue,
        retired: queues.iter().find(|q| q.name == RETIRED_DEAD_QUEUE),
    };
    if global.json {
        output::json(&status_json(&status))?;
    } else {
        print_queues(&status)?;
    }
    Ok(Code::Ok)
}

/// The first lines: the broker and the node (and, when none was given, that it is the host
/// name's), printed before the management API is asked.
fn print_connection(
    broker: &str,
    blocked: bool,
    node: &Name,
    from_host: bool,
) -> anyhow::Result<()> {
    output::line(format_args!(
        "broker    {} {}",
        paint(NAME, broker),
        if blocked {
            paint(WARN, "connected, publishing blocked by a broker alarm")
        } else {
            paint(GOOD, "connected")
        }
    ))?;
    output::line(format_args!(
        "node      {}{}",
        paint(NAME, node.as_str()),
        paint(
            DIM,
            if from_host {
                " (the host name's: --node, MESH_NODE or a context names another)"
            } else {
                ""
            }
        )
    ))?;
    Ok(())
}

fn status_json(status: &Status<'_>) -> Value {
    json!({
        "broker": status.broker,
        "connected": status.connected,
        "blocked": status.blocked,
        "rabbitmq_version": status.version,
        "node": status.node.as_str(),
        "other_nodes": status.other_nodes,
        "modules": status.modules.iter().map(|m| json!({
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
        "dead_letters_queue": status.dead_queue,
        "dead_letters": status.dead.and_then(|q| q.messages),
        "retired_dead_letters": status.retired.map(|q| q.messages),
    })
}

/// Everything after the connection lines: module names come from queue names, which a module
/// may choose in part; the output gate escapes them.
fn print_queues(status: &Status<'_>) -> anyhow::Result<()> {
    if let Some(version) = &status.version {
        output::line(format_args!("rabbitmq  {version}"))?;
    }
    if status.modules.is_empty() {
        output::line(format_args!(
            "modules   {}",
            paint(
                DIM,
                format_args!(
                    "none: no queue {}.<module>.events in this vhost",
                    status.node
                )
            )
        ))?;
        if !status.other_nodes.is_empty() {
            output::line(format_args!(
                "          other nodes have module queues here: {} (give --node {} to see \
                 its modules)",
                paint(NAME, status.other_nodes.join(", ")),
                status.other_nodes[0]
            ))?;
        }
    } else {
        output::line(format_args!(
            "{:<20} {:<8} {:>8} {:>8} {:>9} {:>9} {:>6}",
            "module", "type", "ready", "unacked", "consumers", "retrying", "dead"
        ))?;
        for m in &status.modules {
            let consumers = m.queue.consumers.unwrap_or(0);
            output::line(format_args!(
                "{:<20} {:<8} {:>8} {:>8} {:>9} {:>9} {:>6}",
                m.module,
                m.queue.kind.as_deref().unwrap_or("?"),
                count(m.queue.messages_ready),
                count(m.queue.messages_unacknowledged),
                paint(
                    if consumers == 0 { BAD } else { Style::new() },
                    format_args!("{consumers:>9}")
                ),
                m.retrying,
                count(m.dead),
            ))?;
        }
    }
    let (style, waiting) = match status.dead.map(|q| q.messages) {
        Some(Some(0)) => (GOOD, "0".to_owned()),
        Some(Some(n)) => (BAD, n.to_string()),
        Some(None) => (Style::new(), "not sampled yet".to_owned()),
        None => (DIM, "no such queue".to_owned()),
    };
    output::line(format_args!(
        "dead letters waiting for the audit logger in {}: {}",
        status.dead_queue,
        paint(style, waiting)
    ))?;
    if let Some(retired) = status.retired {
        output::line(format_args!(
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
    Ok(())
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

/// The nodes other than `node` with a module queue (`<node>.<module>.events`) among
/// `queues`, by name, once each.
fn other_nodes<'a>(queues: &'a [QueueRow], node: &Name) -> Vec<&'a str> {
    let mut nodes: Vec<&str> = queues
        .iter()
        .filter(|q| naming::is_consumer_queue(&q.name))
        .filter_map(|q| q.name.split('.').next())
        // `shared.<module>.events` is a shared queue, not a node's.
        .filter(|n| *n != node.as_str() && *n != "shared")
        .collect();
    nodes.sort_unstable();
    nodes.dedup();
    nodes
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

#[cfg(test)]
mod tests {
    use super::{module_queues, print_queues, status_json, Status};
    use crate::management::QueueRow;
    use crate::output::capture::capture;
    use crate::output::hostile::{all, assert_json_safe, assert_text_safe, CORPUS};
    use mesh::raw::Name;

    fn row(name: &str, messages: u64) -> QueueRow {
        serde_json::from_value(serde_json::json!({
            "name": name, "durable": true, "type": "quorum\u{9b}2J",
            "messages": messages, "messages_ready": messages, "consumers": 0,
        }))
        .expect("a queue row")
    }

    /// Queue names are the broker's, and a module chooses part of its own: whatever they
    /// hold, status shows them escaped, as text and as JSON.
    #[test]
    fn hostile_queue_names_are_escaped() {
        let node = Name::parse("n1").unwrap();
        let mut names: Vec<String> = CORPUS.iter().map(|m| format!("n1.{m}.events")).collect();
        names.push(format!("n1.{}.events", all()));
        let queues: Vec<QueueRow> = names.iter().map(|n| row(n, 3)).collect();
        let modules = module_queues(&queues, &node);
        assert_eq!(modules.len(), names.len());
        let status = Status {
            broker: "amqp://h/\u{1b}]52;c;x\u{7}".to_owned(),
            connected: true,
            blocked: false,
            version: Some("3.10\r\nforged".to_owned()),
            node: &node,
            modules,
            other_nodes: vec!["n2\u{9b}2J"],
            dead_queue: "n1.audit-logger.dead".to_owned(),
            dead: queues.first(),
            retired: None,
        };
        let (printed, out) = capture(|| print_queues(&status));
        printed.unwrap();
        let mut shown: Vec<&str> = CORPUS.to_vec();
        let everything = all();
        shown.extend(["3.10\r\nforged", everything.as_str(), "quorum\u{9b}2J"]);
        assert_text_safe(&out.stdout, &shown);

        let (printed, out) = capture(|| crate::output::json(&status_json(&status)));
        printed.unwrap();
        shown.push("amqp://h/\u{1b}]52;c;x\u{7}");
        assert_json_safe(&out.stdout, &shown);
    }
}
