//! `mesh topology show | plan | apply | remove`: the contract's exchanges, queues and bindings
//! against the broker's, read (and fixed) through the management API; `remove` deletes one
//! module's queues.

mod apply;
mod remove;
mod show;
mod spec;
mod style;

use serde_json::json;

use crate::cli::{Global, TopologyArgs, TopologyCommand};
use crate::config;
use crate::exit::Code;
use crate::management::Management;
use crate::output::{self, paint, GOOD};
use apply::apply;
use mesh_admin::topology::{differences, Actual, Difference, Wanted};
use show::show;
use spec::wanted;
pub(crate) use spec::{access_limits, access_spec};
use style::print_difference;

/// Runs one `topology` command, on a runtime of its own (the management client is async;
/// `main` runs `topology` without the AMQP commands' runtime).
pub(crate) fn run(global: &Global, command: &TopologyCommand) -> anyhow::Result<Code> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run_async(global, command))
}

async fn run_async(global: &Global, command: &TopologyCommand) -> anyhow::Result<Code> {
    let (args, step) = match command {
        TopologyCommand::Show(args) => (args, Step::Show),
        TopologyCommand::Plan { args, check } => (args, Step::Plan { check: *check }),
        TopologyCommand::Apply {
            args,
            force,
            dry_run,
        } => (
            args,
            Step::Apply {
                force: *force,
                dry_run: *dry_run,
            },
        ),
        TopologyCommand::Remove {
            module,
            force,
            dry_run,
        } => {
            let management = config::management(global)?;
            let request = remove::Request {
                module,
                force: *force,
                dry_run: *dry_run,
            };
            return remove::remove(global, &management, request).await;
        }
    };
    let wanted = build_wanted(global, args)?;
    let management = config::management(global)?;
    let actual = read(&management).await?;
    match step {
        Step::Show => show(global, &management, &wanted, &actual).await,
        Step::Plan { check } => plan(global, &management, &wanted, &actual, check).await,
        Step::Apply { force, dry_run } => {
            apply(global, &management, &wanted, &actual, force, dry_run).await
        }
    }
}

/// The commands that compare the broker with the contract.
#[derive(Debug, Clone, Copy)]
enum Step {
    Show,
    Plan { check: bool },
    Apply { force: bool, dry_run: bool },
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
        output::line(format_args!(
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
