//! `mesh topology remove`: deletes the durable queues of one module on one node, after showing
//! what each holds, through the management API.
//!
//! A module's queues, by the contract's names (`mesh_core::naming`): its consumer queue
//! `<node>.<module>.events` with its retry queues `<queue>.retry.<step>` and any retired delay
//! queue `<queue>.delay.<step>`; for the audit logger also `<node>.audit-logger.dead` and its
//! own; and the serve queues `serve.<module>.<…>` of the tools it owns. Serve queues are shared
//! by every node of the module: one that another node's server still consumes has a consumer,
//! so it is refused like any queue in use.
//!
//! A queue with a consumer (its module still runs and would declare it again, or lose its
//! channel) or holding messages (ready or unacked: events not handled yet, retries waiting,
//! requests not answered) is not deleted without `--force`; the refusal changes nothing,
//! whichever queue it is about. The check reads the management API's counts, which the broker
//! refreshes every few seconds, and a message published between it and the delete goes with
//! the queue: stop the module first (a queue gone has no binding left, so nothing routes to
//! it afterwards).

use mesh::amqp::management::ManagementErrorKind;
use mesh::raw::naming::{self, AUDIT_MODULE};
use mesh::raw::{Name, ToolKey};
use serde_json::{json, Value};

use crate::cli::Global;
use crate::config;
use crate::exit::{fail, Code, WithCode};
use crate::management::{Management, QueueRow};
use crate::output::{self, escape, paint, BAD, DIM, GOOD, NAME, WARN};

/// What `topology remove` was asked.
#[derive(Debug, Clone, Copy)]
pub(super) struct Request<'a> {
    /// The module whose queues go.
    pub(super) module: &'a str,
    /// Delete queues in use or holding messages too.
    pub(super) force: bool,
    /// Show, refuse or not, and change nothing.
    pub(super) dry_run: bool,
}

/// One queue of the module, as the broker listed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Found {
    pub(super) name: String,
    pub(super) ready: u64,
    pub(super) unacked: u64,
    pub(super) consumers: u64,
}

impl Found {
    fn from_row(row: &QueueRow) -> Found {
        let ready = row.messages_ready.unwrap_or(0);
        // Some listings carry only the total.
        let unacked = row
            .messages_unacknowledged
            .unwrap_or_else(|| row.messages.unwrap_or(0).saturating_sub(ready));
        Found {
            name: row.name.clone(),
            ready,
            unacked,
            consumers: row.consumers.unwrap_or(0),
        }
    }

    /// Whether deleting it would lose messages or pull a queue from under a consumer.
    fn is_busy(&self) -> bool {
        self.ready > 0 || self.unacked > 0 || self.consumers > 0
    }

    fn holds(&self) -> String {
        format!(
            "{} ready, {} unacked, {} consumer(s)",
            self.ready, self.unacked, self.consumers
        )
    }
}

/// Whether `name` is `base` itself, or `base.retry.<step>` / `base.delay.<step>` with `step`
/// one non-empty word (no dot).
fn is_queue_or_ladder_of(name: &str, base: &str) -> bool {
    if name == base {
        return true;
    }
    let Some(rest) = name.strip_prefix(base) else {
        return false;
    };
    [".retry.", ".delay."].iter().any(|infix| {
        rest.strip_prefix(infix)
            .is_some_and(|step| !step.is_empty() && !step.contains('.'))
    })
}

/// Whether `name` is the serve queue of a tool `module` owns: `serve.<module>.<…>`, a valid
/// tool key after `serve.`.
fn is_serve_queue_of(name: &str, module: &Name) -> bool {
    name.strip_prefix("serve.")
        .filter(|tool| ToolKey::parse(tool).is_ok())
        .and_then(|tool| tool.strip_prefix(module.as_str()))
        .is_some_and(|rest| rest.starts_with('.'))
}

/// The queues of `module` on `node` among `queues`: its consumer queue with its retry (and
/// retired delay) queues, the audit logger's queue of dead letters with its own, and the
/// serve queues of its tools; in that order, each group sorted by name.
pub(super) fn module_queues(node: &Name, module: &Name, queues: &[QueueRow]) -> Vec<Found> {
    let mut bases = vec![naming::consumer_queue(node, module)];
    if module.as_str() == AUDIT_MODULE {
        bases.push(naming::audit_dead_queue(node));
    }
    let mut found: Vec<(usize, Found)> = queues
        .iter()
        .filter_map(|row| {
            let group = bases
                .iter()
                .position(|base| is_queue_or_ladder_of(&row.name, base))
                .or_else(|| is_serve_queue_of(&row.name, module).then_some(bases.len()))?;
            Some((group, Found::from_row(row)))
        })
        .collect();
    found.sort_by(|(ga, a), (gb, b)| ga.cmp(gb).then_with(|| a.name.cmp(&b.name)));
    found.into_iter().map(|(_, f)| f).collect()
}

/// `topology remove`: lists the module's queues with what they hold, refuses (changing
/// nothing) if one is busy and not `force`, then deletes each (none under `dry_run`).
pub(super) async fn remove(
    global: &Global,
    management: &Management,
    request: Request<'_>,
) -> anyhow::Result<Code> {
    let module = Name::parse(request.module).coded(Code::Usage, || {
        format!("invalid module name `{}`", escape(request.module))
    })?;
    let node = config::node(global)?;
    let queues = management.queues().await?;
    let found = module_queues(&node, &module, &queues);
    let busy: Vec<&Found> = found.iter().filter(|f| f.is_busy()).collect();
    let refused = !busy.is_empty() && !request.force;

    let action = |f: &Found| -> &'static str {
        match (refused, request.dry_run, f.is_busy()) {
            (true, _, _) => "kept",
            (false, true, true) => "would remove, with what it holds",
            (false, true, false) => "would remove",
            (false, false, _) => "removed",
        }
    };

    let mut entries: Vec<Value> = Vec::new();
    for f in &found {
        if !refused && !request.dry_run {
            delete(management, &f.name).await?;
        }
        if global.json {
            entries.push(json!({
                "queue": f.name, "messages_ready": f.ready, "messages_unacknowledged": f.unacked,
                "consumers": f.consumers, "action": action(f),
            }));
        } else {
            let sign = if refused {
                paint(DIM, '=')
            } else {
                paint(BAD, '-')
            };
            let holds = if f.is_busy() {
                paint(WARN, f.holds())
            } else {
                paint(DIM, f.holds())
            };
            output::line(format!(
                "{sign} queue {} ({holds}): {}",
                paint(NAME, escape(&f.name)),
                paint(if refused { WARN } else { GOOD }, action(f))
            ))?;
        }
    }
    if global.json {
        output::json(&json!({
            "vhost": management.vhost(), "node": node.as_str(), "module": module.as_str(),
            "dry_run": request.dry_run, "refused": refused, "queues": entries,
        }))?;
    }
    if refused {
        return Err(refusal(&busy));
    }
    if !global.json {
        summary(management, &node, &module, found.len(), request.dry_run)?;
    }
    Ok(Code::Ok)
}

/// Deletes one queue; one already gone (another remover, an auto-delete) counts as removed.
async fn delete(management: &Management, name: &str) -> anyhow::Result<()> {
    match management
        .client()
        .delete_queue(management.vhost(), name)
        .await
    {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.kind(), ManagementErrorKind::NotFound) => Ok(()),
        Err(e) => Err(management
            .error(e)
            .context(format!("deleting queue `{}`", escape(name)))),
    }
}

fn refusal(busy: &[&Found]) -> anyhow::Error {
    let list: Vec<String> = busy
        .iter()
        .map(|f| format!("{} ({})", escape(&f.name), f.holds()))
        .collect();
    fail(
        Code::Error,
        format!(
            "refusing to remove {} queue(s) in use or holding messages, nothing was changed: {}; \
             stop the module (and let its queues drain, or re-drive what they hold), or run \
             again with --force to delete them with their messages",
            busy.len(),
            list.join("; ")
        ),
    )
}

fn summary(
    management: &Management,
    node: &Name,
    module: &Name,
    count: usize,
    dry_run: bool,
) -> anyhow::Result<()> {
    let vhost = escape(management.vhost());
    let line = if count == 0 {
        format!(
            "{} nothing to remove: vhost {vhost} has no queue of module {module} on node {node}",
            paint(GOOD, "=")
        )
    } else if dry_run {
        format!("dry run: {count} queue(s) of module {module} on node {node}; nothing was changed on vhost {vhost}")
    } else {
        format!("removed {count} queue(s) of module {module} on node {node} from vhost {vhost}")
    };
    output::line(line)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, ready: u64, unacked: u64, consumers: u64) -> QueueRow {
        serde_json::from_value(json!({
            "name": name, "durable": true, "messages_ready": ready,
            "messages_unacknowledged": unacked, "consumers": consumers,
        }))
        .unwrap()
    }

    fn names(found: &[Found]) -> Vec<&str> {
        found.iter().map(|f| f.name.as_str()).collect()
    }

    fn name(s: &str) -> Name {
        Name::parse(s).unwrap()
    }

    #[test]
    fn a_module_has_its_queue_its_ladder_and_its_serve_queues_and_nothing_else() {
        let queues: Vec<QueueRow> = [
            "serve.billing.quote",
            "n1.billing.events.retry.5s",
            "n1.billing.events",
            "n1.billing.events.delay.1s",
            "n1.billing.events.retry.1500ms",
            // Not billing's on n1:
            "n2.billing.events",
            "n2.billing.events.retry.5s",
            "n1.billing-v2.events",
            "n1.mailer.events",
            "n1.mailer.events.retry.5s",
            "serve.billing-v2.quote",
            "serve.mailer.send",
            "serve.billing",
            "n1.billing.events.retry.",
            "n1.billing.events.retry.5s.x",
            "n1.billing.eventsx",
            "n1.billing.events.other.5s",
            "shared.billing.events",
            "amq.gen-abc",
            "mesh.dead-letters",
        ]
        .iter()
        .map(|n| row(n, 0, 0, 0))
        .collect();
        let found = module_queues(&name("n1"), &name("billing"), &queues);
        assert_eq!(
            names(&found),
            [
                "n1.billing.events",
                "n1.billing.events.delay.1s",
                "n1.billing.events.retry.1500ms",
                "n1.billing.events.retry.5s",
                "serve.billing.quote",
            ]
        );
        let shared = module_queues(&name("shared"), &name("billing"), &queues);
        assert_eq!(
            names(&shared),
            ["shared.billing.events", "serve.billing.quote"]
        );
    }

    #[test]
    fn the_audit_logger_has_its_queue_of_dead_letters_too() {
        let queues: Vec<QueueRow> = [
            "n1.audit-logger.events",
            "n1.audit-logger.dead",
            "n1.audit-logger.dead.retry.1s",
            "n2.audit-logger.dead",
            "mesh.dead-letters",
        ]
        .iter()
        .map(|n| row(n, 0, 0, 0))
        .collect();
        let found = module_queues(&name("n1"), &name(AUDIT_MODULE), &queues);
        assert_eq!(
            names(&found),
            [
                "n1.audit-logger.events",
                "n1.audit-logger.dead",
                "n1.audit-logger.dead.retry.1s",
            ]
        );
    }

    #[test]
    fn busy_means_a_message_or_a_consumer() {
        let queues = [
            row("n1.m.events", 0, 0, 0),
            row("n1.m.events.retry.1s", 1, 0, 0),
            row("n1.m.events.retry.2s", 0, 1, 0),
            row("serve.m.tool", 0, 0, 1),
        ];
        let busy: Vec<bool> = module_queues(&name("n1"), &name("m"), &queues)
            .iter()
            .map(Found::is_busy)
            .collect();
        assert_eq!(busy, [false, true, true, true]);
    }

    proptest::proptest! {
        /// Any queue name is judged without a panic, and one taken is the module's by the
        /// contract's names.
        #[test]
        fn any_listing_is_judged_by_the_contract(queue in "[a-z.*#-]{0,40}") {
            let found = module_queues(&name("n1"), &name("m"), &[row(&queue, 0, 0, 0)]);
            for f in &found {
                let ours = f.name == "n1.m.events"
                    || f.name.starts_with("n1.m.events.retry.")
                    || f.name.starts_with("n1.m.events.delay.")
                    || f.name.starts_with("serve.m.");
                proptest::prop_assert!(ours, "{}", f.name);
            }
        }
    }
}
