//! `mesh topology show | plan | apply`: the contract's exchanges, queues and bindings against
//! the broker's, read (and fixed) through the management API.

mod spec;

use std::collections::BTreeSet;

use serde_json::{json, Value};

use crate::cli::{Global, TopologyArgs, TopologyCommand};
use crate::config;
use crate::exit::{fail, Code};
use crate::management::Management;
use crate::output::{self, paint, BAD, DIM, GOOD, NAME, WARN};
use mesh_admin::topology::{describe_arguments, differences, Actual, Difference, Wanted};
pub(crate) use spec::access_spec;
use spec::wanted;

/// Runs one `topology` command, on a runtime of its own (the management client is async;
/// `main` runs `topology` without the AMQP commands' runtime).
pub(crate) fn run(global: &Global, command: &TopologyCommand) -> anyhow::Result<Code> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run_async(global, command))
}

async fn run_async(global: &Global, command: &TopologyCommand) -> anyhow::Result<Code> {
    let args = match command {
        TopologyCommand::Show(args)
        | TopologyCommand::Plan { args, .. }
        | TopologyCommand::Apply { args, .. } => args,
    };
    let wanted = build_wanted(global, args)?;
    let management = config::management(global)?;
    let actual = read(&management).await?;
    match command {
        TopologyCommand::Show(_) => show(global, &management, &wanted, &actual).await,
        TopologyCommand::Plan { check, .. } => {
            plan(global, &management, &wanted, &actual, *check).await
        }
        TopologyCommand::Apply { force, dry_run, .. } => {
            apply(global, &management, &wanted, &actual, *force, *dry_run).await
        }
    }
}

fn build_wanted(global: &Global, args: &TopologyArgs) -> anyhow::Result<Wanted> {
    let node = match &global.node {
        Some(_) => Some(config::node(global)?),
        None => None,
    };
    wanted(args, global.queue_type, node, || config::node(global))
}

async fn read(management: &Management) -> anyhow::Result<Actual> {
    Ok(Actual {
        exchanges: management.exchanges().await?,
        queues: management.queues().await?,
        bindings: management.bindings().await?,
    })
}

fn sign_style(sign: char) -> anstyle::Style {
    match sign {
        '+' => GOOD,
        '~' => WARN,
        '-' => BAD,
        _ => DIM,
    }
}

fn print_difference(d: &Difference) -> anyhow::Result<()> {
    let sign = d.sign();
    output::line(format!(
        "{} {}",
        paint(sign_style(sign), sign),
        d.describe()
    ))?;
    Ok(())
}

async fn show(
    global: &Global,
    management: &Management,
    wanted: &Wanted,
    actual: &Actual,
) -> anyhow::Result<Code> {
    let diffs = differences(wanted, actual);
    // Entities named by a difference, and their sign.
    let mut marked: Vec<(String, char)> = Vec::new();
    for d in &diffs {
        let key = match d {
            Difference::MissingExchange { name, .. } | Difference::ExchangeDiffers { name, .. } => {
                format!("exchange {name}")
            }
            Difference::MissingQueue { name, .. }
            | Difference::QueueDiffers { name, .. }
            | Difference::RetiredQueue { name, .. }
            | Difference::RetiredDelayQueue { name, .. } => format!("queue {name}"),
            Difference::MissingBinding {
                exchange,
                queue,
                routing_key,
            }
            | Difference::ExtraBinding {
                exchange,
                queue,
                routing_key,
                ..
            } => format!("binding {exchange} {queue} {routing_key}"),
            // A kind of difference this command does not know names nothing it lists.
            _ => continue,
        };
        marked.push((key, d.sign()));
    }
    let state = |key: &str, wanted: bool| -> char {
        match marked.iter().find(|(k, _)| k == key) {
            Some((_, sign)) => *sign,
            None if wanted => '=',
            None => '?',
        }
    };
    let wanted_exchanges: BTreeSet<&str> =
        wanted.exchanges.iter().map(|e| e.name.as_str()).collect();
    let wanted_queues: BTreeSet<&str> = wanted.queues.iter().map(|q| q.name.as_str()).collect();
    let wanted_bindings: BTreeSet<(String, String, String)> = wanted
        .queues
        .iter()
        .flat_map(|q| {
            q.patterns
                .iter()
                .map(|p| (q.exchange.clone(), q.name.clone(), p.clone()))
        })
        .collect();

    let mut exchanges = Vec::new();
    for e in &actual.exchanges {
        if e.name.is_empty() || e.name.starts_with("amq.") {
            continue;
        }
        let key = format!("exchange {}", e.name);
        exchanges.push(json!({
            "name": e.name, "type": e.kind, "durable": e.durable,
            "state": state_name(state(&key, wanted_exchanges.contains(e.name.as_str())))
        }));
    }
    for d in &diffs {
        if let Difference::MissingExchange { name, kind } = d {
            exchanges
                .push(json!({"name": name, "type": kind, "durable": true, "state": "missing"}));
        }
    }
    let mut queues = Vec::new();
    for q in &actual.queues {
        let key = format!("queue {}", q.name);
        queues.push(json!({
            "name": q.name, "type": q.kind, "durable": q.durable, "exclusive": q.exclusive,
            "auto_delete": q.auto_delete, "arguments": q.arguments, "messages": q.messages,
            "consumers": q.consumers,
            "state": state_name(state(&key, wanted_queues.contains(q.name.as_str())))
        }));
    }
    for d in &diffs {
        if let Difference::MissingQueue { name, arguments } = d {
            queues.push(json!({"name": name, "arguments": arguments, "state": "missing"}));
        }
    }
    let mut bindings = Vec::new();
    for b in &actual.bindings {
        if b.source.is_empty() || b.destination_type != "queue" {
            continue;
        }
        let key = format!("binding {} {} {}", b.source, b.destination, b.routing_key);
        let is_wanted = wanted_bindings.contains(&(
            b.source.clone(),
            b.destination.clone(),
            b.routing_key.clone(),
        ));
        bindings.push(json!({
            "exchange": b.source, "queue": b.destination, "routing_key": b.routing_key,
            "state": state_name(state(&key, is_wanted))
        }));
    }
    for d in &diffs {
        if let Difference::MissingBinding {
            exchange,
            queue,
            routing_key,
        } = d
        {
            bindings.push(json!({
                "exchange": exchange, "queue": queue, "routing_key": routing_key, "state": "missing"
            }));
        }
    }

    if global.json {
        output::json(&json!({
            "vhost": management.vhost(), "node": wanted.node.as_str(),
            "exchanges": exchanges, "queues": queues, "bindings": bindings,
            "differences": diffs.iter().map(Difference::to_json).collect::<Vec<_>>(),
        }))?;
        return Ok(Code::Ok);
    }
    output::line(format!(
        "vhost {} for node {}   (= as wanted, + missing, ~ differs, - not wanted, ? outside the spec)",
        paint(NAME, management.vhost()),
        paint(NAME, wanted.node.as_str())
    ))?;
    output::line("exchanges:")?;
    for e in &exchanges {
        let sign = sign_of(e);
        output::line(format!(
            "  {} {} {}",
            paint(sign_style(sign), sign),
            text(&e["name"]),
            paint(
                DIM,
                format!(
                    "({}{})",
                    text(&e["type"]),
                    if e["durable"] == true {
                        ", durable"
                    } else {
                        ""
                    }
                )
            )
        ))?;
    }
    output::line("queues:")?;
    for q in &queues {
        let sign = sign_of(q);
        let mut details = Vec::new();
        if let Some(args) = q["arguments"].as_object() {
            if !args.is_empty() {
                details.push(describe_arguments(args));
            }
        }
        if q["exclusive"] == true {
            details.push("exclusive".into());
        }
        if let Some(m) = q["messages"].as_u64() {
            details.push(format!("{m} messages"));
        }
        if let Some(c) = q["consumers"].as_u64() {
            details.push(format!("{c} consumers"));
        }
        output::line(format!(
            "  {} {} {}",
            paint(sign_style(sign), sign),
            text(&q["name"]),
            paint(DIM, format!("({})", details.join("; ")))
        ))?;
    }
    output::line("bindings:")?;
    for b in &bindings {
        let sign = sign_of(b);
        output::line(format!(
            "  {} {} -> {} on `{}`",
            paint(sign_style(sign), sign),
            text(&b["exchange"]),
            text(&b["queue"]),
            text(&b["routing_key"])
        ))?;
    }
    if !diffs.is_empty() {
        output::line(format!("differences ({}):", diffs.len()))?;
        for d in &diffs {
            output::line(format!(
                "  {} {}",
                paint(sign_style(d.sign()), d.sign()),
                d.describe()
            ))?;
        }
    }
    Ok(Code::Ok)
}

fn state_name(sign: char) -> &'static str {
    match sign {
        '=' => "wanted",
        '+' => "missing",
        '~' => "differs",
        '-' => "not-wanted",
        _ => "outside-spec",
    }
}

fn sign_of(entry: &Value) -> char {
    match entry["state"].as_str() {
        Some("wanted") => '=',
        Some("missing") => '+',
        Some("differs") => '~',
        Some("not-wanted") => '-',
        _ => '?',
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

async fn plan(
    global: &Global,
    management: &Management,
    wanted: &Wanted,
    actual: &Actual,
    check: bool,
) -> anyhow::Result<Code> {
    let diffs = differences(wanted, actual);
    if global.json {
        output::json(&json!({
            "vhost": management.vhost(), "node": wanted.node.as_str(),
            "differences": diffs.iter().map(Difference::to_json).collect::<Vec<_>>(),
        }))?;
    } else if diffs.is_empty() {
        output::line(format!(
            "{} vhost {} agrees with the contract for node {}",
            paint(GOOD, "="),
            management.vhost(),
            wanted.node
        ))?;
    } else {
        for d in &diffs {
            print_difference(d)?;
        }
    }
    Ok(if check && !diffs.is_empty() {
        Code::Drift
    } else {
        Code::Ok
    })
}

/// What apply does about one difference, as reported: done, or (`--dry-run`) to be done.
#[derive(Debug, Clone, Copy)]
enum Action {
    Create,
    Replace,
    LeaveForLogger,
    Delete,
    StillDraining,
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
            (Action::Bind, false) => "bound",
            (Action::Bind, true) => "would bind",
            (Action::Unbind, false) => "unbound",
            (Action::Unbind, true) => "would unbind",
            (Action::BindAgain, false) => "bound again",
            (Action::BindAgain, true) => "would bind again",
        }
    }
}

/// `topology apply`: refuses (changing nothing) what it never does, then fixes each
/// difference; with `dry_run` it reports the same steps and calls no changing endpoint.
async fn apply(
    global: &Global,
    management: &Management,
    wanted: &Wanted,
    actual: &Actual,
    force: bool,
    dry_run: bool,
) -> anyhow::Result<Code> {
    let diffs = differences(wanted, actual);
    // Refuse before changing anything.
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

    let mut done: Vec<Value> = Vec::new();
    let mut report = |d: &Difference, action: Action| -> anyhow::Result<()> {
        let action = action.describe(dry_run);
        if global.json {
            let mut v = d.to_json();
            v["action"] = Value::from(action);
            done.push(v);
            Ok(())
        } else {
            let sign = d.sign();
            output::line(format!(
                "{} {}: {}",
                paint(sign_style(sign), sign),
                d.describe(),
                paint(GOOD, action)
            ))
            .map_err(Into::into)
        }
    };
    // Every changing call goes through `change`: under --dry-run none is made.
    let change = !dry_run;
    let mut replaced: BTreeSet<String> = BTreeSet::new();
    for d in &diffs {
        match d {
            Difference::MissingExchange { name, kind } => {
                if change {
                    management.put_exchange(name, kind, true).await?;
                }
                report(d, Action::Create)?;
            }
            Difference::MissingQueue { name, arguments } => {
                if change {
                    management.put_queue(name, true, arguments).await?;
                }
                report(d, Action::Create)?;
            }
            Difference::QueueDiffers {
                name, arguments, ..
            } => {
                if change {
                    management.delete_queue(name).await?;
                    management.put_queue(name, true, arguments).await?;
                }
                replaced.insert(name.clone());
                report(d, Action::Replace)?;
            }
            // It may hold dead letters: an audit logger drains and deletes it.
            Difference::RetiredQueue { .. } => report(d, Action::LeaveForLogger)?,
            Difference::RetiredDelayQueue { name, .. } if d.is_deletable() => {
                if change {
                    management.delete_queue(name).await?;
                }
                report(d, Action::Delete)?;
            }
            Difference::RetiredDelayQueue { .. } => report(d, Action::StillDraining)?,
            _ => {}
        }
    }
    for d in &diffs {
        match d {
            Difference::MissingBinding {
                exchange,
                queue,
                routing_key,
            } => {
                if change {
                    management.bind(exchange, queue, routing_key).await?;
                }
                report(d, Action::Bind)?;
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
                report(d, Action::Unbind)?;
            }
            _ => {}
        }
    }
    // A replaced queue lost every binding, including the ones that were right.
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
                report(&d, Action::BindAgain)?;
            }
        }
    }
    if global.json {
        output::json(&json!({
            "vhost": management.vhost(), "node": wanted.node.as_str(), "dry_run": dry_run,
            "applied": done
        }))?;
    } else if dry_run {
        output::line(format!(
            "dry run: {} difference(s); nothing was changed on vhost {}",
            diffs.len(),
            management.vhost()
        ))?;
    } else if diffs.is_empty() {
        output::line(format!(
            "{} nothing to do: vhost {} agrees with the contract for node {}",
            paint(GOOD, "="),
            management.vhost(),
            wanted.node
        ))?;
    }
    Ok(Code::Ok)
}
