//! `mesh topology apply`: refuses (changing nothing) what it never does, then fixes each
//! difference through the management API.

use std::collections::BTreeSet;

use mesh_admin::topology::{differences, Actual, Difference, Wanted};
use serde_json::{json, Value};

use super::style::sign_style;
use crate::cli::Global;
use crate::exit::{fail, Code};
use crate::management::Management;
use crate::output::{self, paint, GOOD};

/// What apply does about one difference, as reported: done, or (`--dry-run`) to be done.
#[derive(Debug, Clone, Copy)]
enum Action {
    Create,
    Replace,
    LeaveForLogger,
    Delete,
    StillDraining,
    StillUsed,
    Bind,
    Unbind,
    BindAgain,
}

impl Action {
    fn describe(self, dry_run: bool) -> &'static str {
        match (self, dry_run) {
            (Action::Create, false) => "created",
            (Action::Create, true) => "would create",
            (Action::Replace, false) => "replaced",
            (Action::Replace, true) => "would replace (its messages would be lost)",
            (Action::LeaveForLogger, _) => "left for an audit logger",
            (Action::Delete, false) => "deleted",
            (Action::Delete, true) => "would delete",
            (Action::StillDraining, _) => "still draining",
            (Action::StillUsed, _) => "kept while callers of an earlier version use it",
            (Action::Bind, false) => "bound",
            (Action::Bind, true) => "would bind",
            (Action::Unbind, false) => "unbound",
            (Action::Unbind, true) => "would unbind",
            (Action::BindAgain, false) => "bound again",
            (Action::BindAgain, true) => "would bind again",
        }
    }
}

/// Reports each step: a line as it is done, or (`--json`) an entry of the final document.
struct Report {
    json: bool,
    dry_run: bool,
    done: Vec<Value>,
}

impl Report {
    fn step(&mut self, d: &Difference, action: Action) -> anyhow::Result<()> {
        let action = action.describe(self.dry_run);
        if self.json {
            let mut v = d.to_json();
            v["action"] = Value::from(action);
            self.done.push(v);
            Ok(())
        } else {
            let sign = d.sign();
            output::line(format_args!(
                "{} {}: {}",
                paint(sign_style(sign), sign),
                d.describe(),
                paint(GOOD, action)
            ))
            .map_err(Into::into)
        }
    }
}

/// `topology apply`: refuses (changing nothing) what it never does, then fixes each
/// difference; with `dry_run` it reports the same steps and calls no changing endpoint.
pub(super) async fn apply(
    global: &Global,
    management: &Management,
    wanted: &Wanted,
    actual: &Actual,
    force: bool,
    dry_run: bool,
) -> anyhow::Result<Code> {
    let diffs = differences(wanted, actual);
    // Refuse before changing anything.
    refuse(&diffs, force)?;
    let mut report = Report {
        json: global.json,
        dry_run,
        done: Vec::new(),
    };
    // Every changing call goes through `change`: under --dry-run none is made.
    let change = !dry_run;
    let replaced = fix_entities(management, &diffs, change, &mut report).await?;
    fix_bindings(management, &diffs, &replaced, change, &mut report).await?;
    bind_again(management, wanted, &diffs, &replaced, change, &mut report).await?;
    // Last, once `mesh.replies` exists: the retired `mesh.reply` goes with its bindings.
    for d in &diffs {
        if let Difference::RetiredExchange { name, .. } = d {
            if !d.is_deletable() {
                report.step(d, Action::StillUsed)?;
                continue;
            }
            if change {
                management.delete_exchange(name).await?;
            }
            report.step(d, Action::Delete)?;
        }
    }
    if global.json {
        output::json(&json!({
            "vhost": management.vhost(), "node": wanted.node.as_str(), "dry_run": dry_run,
            "applied": report.done
        }))?;
    } else if dry_run {
        output::line(format_args!(
            "dry run: {} difference(s); nothing was changed on vhost {}",
            diffs.len(),
            management.vhost()
        ))?;
    } else if diffs.is_empty() {
        output::line(format_args!(
            "{} nothing to do: vhost {} agrees with the contract for node {}",
            paint(GOOD, "="),
            management.vhost(),
            wanted.node
        ))?;
    }
    Ok(Code::Ok)
}

/// An error if apply would replace an exchange (never), or a queue without `force`.
fn refuse(diffs: &[Difference], force: bool) -> anyhow::Result<()> {
    let exchanges: Vec<String> = diffs
        .iter()
        .filter(|d| matches!(d, Difference::ExchangeDiffers { .. }))
        .map(Difference::describe)
        .collect();
    if !exchanges.is_empty() {
        return Err(fail(
            Code::Error,
            format!(
                "refusing to apply, nothing was changed: {}; mesh never replaces an exchange \
                 (every binding to it would go): delete it by hand if nothing else uses it",
                exchanges.join("; ")
            ),
        ));
    }
    let incompatible: Vec<&Difference> = diffs
        .iter()
        .filter(|d| matches!(d, Difference::QueueDiffers { .. }))
        .collect();
    if !incompatible.is_empty() && !force {
        let list: Vec<String> = incompatible.iter().map(|d| d.describe()).collect();
        return Err(fail(
            Code::Error,
            format!(
                "refusing to replace {} queue(s) whose arguments differ, nothing was changed: {}; \
                 run again with --force to delete and re-create them",
                incompatible.len(),
                list.join("; ")
            ),
        ));
    }
    Ok(())
}

/// Creates the missing exchanges and queues, replaces the differing queues and deletes the
/// empty retired delay queues; returns the queues replaced.
async fn fix_entities(
    management: &Management,
    diffs: &[Difference],
    change: bool,
    report: &mut Report,
) -> anyhow::Result<BTreeSet<String>> {
    let mut replaced: BTreeSet<String> = BTreeSet::new();
    for d in diffs {
        match d {
            Difference::MissingExchange { name, kind } => {
                if change {
                    management.put_exchange(name, kind, true).await?;
                }
                report.step(d, Action::Create)?;
            }
            Difference::MissingQueue { name, arguments } => {
                if change {
                    management.put_queue(name, true, arguments).await?;
                }
                report.step(d, Action::Create)?;
            }
            Difference::QueueDiffers {
                name, arguments, ..
            } => {
                if change {
                    management.delete_queue(name).await?;
                    management.put_queue(name, true, arguments).await?;
                }
                replaced.insert(name.clone());
                report.step(d, Action::Replace)?;
            }
            // It may hold dead letters: an audit logger drains and deletes it.
            Difference::RetiredQueue { .. } => report.step(d, Action::LeaveForLogger)?,
            Difference::RetiredDelayQueue { name, .. } if d.is_deletable() => {
                if change {
                    management.delete_queue(name).await?;
                }
                report.step(d, Action::Delete)?;
            }
            Difference::RetiredDelayQueue { .. } => report.step(d, Action::StillDraining)?,
            _ => {}
        }
    }
    Ok(replaced)
}

/// Adds the missing bindings and removes the unwanted ones (a replaced queue has none left).
async fn fix_bindings(
    management: &Management,
    diffs: &[Difference],
    replaced: &BTreeSet<String>,
    change: bool,
    report: &mut Report,
) -> anyhow::Result<()> {
    for d in diffs {
        match d {
            Difference::MissingBinding {
                exchange,
                queue,
                routing_key,
            } => {
                if change {
                    management.bind(exchange, queue, routing_key).await?;
                }
                report.step(d, Action::Bind)?;
            }
            Difference::ExtraBinding {
                exchange,
                queue,
                properties_key,
                ..
            } if !replaced.contains(queue) => {
                if change {
                    management.unbind(exchange, queue, properties_key).await?;
                }
                report.step(d, Action::Unbind)?;
            }
            Difference::ForeignBinding(b) => {
                if change {
                    crate::access::remove_foreign(management, b).await?;
                }
                report.step(d, Action::Unbind)?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// A replaced queue lost every binding, including the ones that were right: binds them again.
async fn bind_again(
    management: &Management,
    wanted: &Wanted,
    diffs: &[Difference],
    replaced: &BTreeSet<String>,
    change: bool,
    report: &mut Report,
) -> anyhow::Result<()> {
    for queue in wanted.queues.iter().filter(|q| replaced.contains(&q.name)) {
        for pattern in &queue.patterns {
            let already = diffs.iter().any(|d| {
                matches!(d, Difference::MissingBinding { queue: q, routing_key, .. }
                    if q == &queue.name && routing_key == pattern)
            });
            if !already {
                if change {
                    management
                        .bind(&queue.exchange, &queue.name, pattern)
                        .await?;
                }
                let d = Difference::MissingBinding {
                    exchange: queue.exchange.clone(),
                    queue: queue.name.clone(),
                    routing_key: pattern.clone(),
                };
                report.step(&d, Action::BindAgain)?;
            }
        }
    }
    Ok(())
}
