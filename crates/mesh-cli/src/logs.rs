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
    output::note(format_args!(
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
                        print(global.json, &record)?;
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

/// Prints one record. Any module may publish to `mesh.logs`, so every field is hostile text:
/// the output gate (text) and the JSON writer escape its control and format characters.
fn print(json: bool, record: &mesh_logs::LogRecord) -> anyhow::Result<()> {
    if json {
        output::json(record)?;
    } else {
        output::line(record)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::print;
    use crate::output::capture::capture;
    use crate::output::hostile::{all, assert_json_safe, assert_text_safe, CORPUS};
    use serde_json::json;

    /// Every field of a record is some module's text: shown escaped, as text and as JSON.
    #[test]
    fn hostile_records_are_escaped() {
        let everything = all();
        let mut values: Vec<&str> = CORPUS.to_vec();
        values.push(&everything);
        for value in values {
            let record: mesh_logs::LogRecord = serde_json::from_value(json!({
                "time": value, "node": value, "source": value, "level": value,
                "target": value, "message": value,
                "fields": {value: value},
                "spans": [{"name": value, "fields": {"k": value}}],
            }))
            .expect("a record");
            let (printed, out) = capture(|| print(false, &record));
            printed.unwrap();
            assert_eq!(out.stdout.lines().count(), 1, "{:?}", out.stdout);
            assert_text_safe(&out.stdout, &[value]);
            let (printed, out) = capture(|| print(true, &record));
            printed.unwrap();
            assert_json_safe(&out.stdout, &[value]);
        }
    }
}
