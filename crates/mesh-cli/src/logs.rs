//! `mesh logs tail`: follows the records processes ship to the `mesh.logs` exchange.
//!
//! The queue is server-named, exclusive and auto-deleted (at-most-once, like `tail`): nothing
//! of it outlives the process, and an unread log never fills the broker.

use crate::cli::{Global, LogsCommand, LogsTailArgs};
use crate::config;
use crate::exit::{Code, WithCode};
use crate::output;
use crate::process;

/// Runs `mesh logs …`.
pub(crate) async fn run(global: &Global, command: &LogsCommand) -> anyhow::Result<Code> {
    match command {
        LogsCommand::Tail(args) => tail(global, args).await,
    }
}

async fn tail(global: &Global, args: &LogsTailArgs) -> anyhow::Result<Code> {
    mesh::raw::TopicPattern::parse(&args.pattern).coded(Code::Usage, || {
        format!("invalid pattern `{}`", args.pattern)
    })?;
    let options = config::amqp_options(global)?;
    let mut records = mesh_logs::tail_with(&options, &args.pattern)
        .await
        .coded(Code::Unreachable, || "could not follow the logs".to_owned())?;
    // Before saying it follows: whoever waits for that line may stop it with SIGTERM next.
    let mut signals = process::Signals::register()?;
    output::note(format!(
        "following mesh.logs on {} (queue {}, removed when this exits)",
        args.pattern,
        records.queue()
    ));
    let mut seen: u64 = 0;
    let followed = async {
        while args.count.is_none_or(|count| seen < count) {
            tokio::select! {
                _ = signals.recv() => break,
                next = records.next() => match next {
                    None => return Err(crate::exit::fail(Code::Error, "the connection to the broker was lost")),
                    Some(record) => {
                        seen += 1;
                        if global.json {
                            output::json(&serde_json::to_value(&record)?)?;
                        } else {
                            output::line(record.to_string())?;
                        }
                    }
                }
            }
        }
        Ok(Code::Ok)
    }
    .await;
    // Closed whatever the outcome, before `main` drops the runtime: nothing may still be
    // closing by then.
    records.close().await;
    followed
}
