//! `mesh call`: one request/reply, with a distinct exit code for each way it can fail.

use anyhow::Context as _;
use bytes::Bytes;
use mesh::raw::ToolKey;
use mesh::Bus;
use serde_json::json;

use crate::cli::{CallArgs, Global};
use crate::config;
use crate::exit::{self, Code, WithCode};
use crate::output;
use crate::tail::CLI_CONTEXT;

/// Prints a tool's reply, the peer's own text: escaped by the output gate, or as JSON.
fn print_reply(json: bool, reply: &[u8]) -> anyhow::Result<()> {
    if json {
        // The reply is JSON already (the SDK checks it); print it on one line.
        let value: serde_json::Value =
            serde_json::from_slice(reply).context("the reply is not JSON")?;
        output::json(&value)?;
    } else {
        output::line(String::from_utf8_lossy(reply))?;
    }
    Ok(())
}

/// One sentence for a call nobody serves, without the layers under it (the SDK's
/// "transport failed", the unroutable publish, the broker's reply code 312, which read like a
/// lost connection): no serve queue at all (the request was unroutable), or what the
/// transport found (a serve queue nothing consumes, or one that is gone).
fn no_server(tool: &ToolKey, error: &mesh::Error) -> String {
    let found = std::error::Error::source(error);
    let unroutable = found.and_then(std::error::Error::source).is_some();
    match found {
        Some(_) if unroutable => format!(
            "no server for `{tool}`: no service serving it has started (its queue `{}` does \
             not exist)",
            mesh::raw::naming::serve_queue(tool)
        ),
        Some(found) => format!("cannot call `{tool}`: {found}"),
        None => format!("cannot call `{tool}`: {error}"),
    }
}

/// Runs `mesh call`.
pub(crate) async fn run(global: &Global, args: &CallArgs) -> anyhow::Result<Code> {
    let tool =
        ToolKey::parse(&args.tool).coded(Code::Usage, || format!("cannot call `{}`", args.tool))?;
    serde_json::from_str::<serde::de::IgnoredAny>(&args.data)
        .coded(Code::Usage, || "--data is not JSON".to_owned())?;
    let node = config::node(global)?;
    let transport = config::connect(config::amqp_options(global)?).await?;
    let bus = Bus::builder()
        .node(node.as_str())
        .context(CLI_CONTEXT)
        .start(transport)
        .await?;
    let result = bus
        .call_raw(&args.tool, Bytes::from(args.data.clone()), args.timeout)
        .await;
    bus.close().await;
    match result {
        Ok(reply) => {
            print_reply(global.json, &reply)?;
            Ok(Code::Ok)
        }
        Err(error) => {
            if let (true, Some(remote)) = (global.json, error.remote()) {
                output::json(&json!({"error": {"code": remote.code, "message": remote.message}}))?;
            }
            if error.is_no_server() {
                return Err(exit::fail_with_hint(
                    Code::NoServer,
                    no_server(&tool, &error),
                    error.hint().unwrap_or_default(),
                ));
            }
            let what = if error.is_timeout() {
                format!(
                    "no reply from `{}` within {}",
                    args.tool,
                    humantime::format_duration(args.timeout)
                )
            } else {
                format!("calling `{}`", args.tool)
            };
            Err(anyhow::Error::new(error).context(what))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::print_reply;
    use crate::output::capture::capture;
    use crate::output::hostile::{all, assert_json_safe, assert_text_safe, CORPUS};

    /// A reply is the serving module's text: printed escaped, as text and as JSON.
    #[test]
    fn hostile_replies_are_escaped() {
        let everything = all();
        let mut values: Vec<&str> = CORPUS.to_vec();
        values.push(&everything);
        for value in values {
            let reply = serde_json::to_vec(&serde_json::json!({ "text": value })).unwrap();
            let (printed, out) = capture(|| print_reply(false, &reply));
            printed.unwrap();
            assert_eq!(out.stdout.lines().count(), 1, "{:?}", out.stdout);
            assert_text_safe(&out.stdout, &[]);
            let (printed, out) = capture(|| print_reply(true, &reply));
            printed.unwrap();
            assert_json_safe(&out.stdout, &[value]);
        }
    }
}
