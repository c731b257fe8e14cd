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

/// Runs `mesh call`.
pub(crate) async fn run(global: &Global, args: &CallArgs) -> anyhow::Result<Code> {
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
            if global.json {
                // The reply is JSON already (the SDK checks it); print it on one line.
                let value: serde_json::Value =
                    serde_json::from_slice(&reply).context("the reply is not JSON")?;
                output::json(&value)?;
            } else {
                output::line(String::from_utf8_lossy(&reply))?;
            }
            Ok(Code::Ok)
        }
        Err(error) => {
            if let (true, Some(remote)) = (global.json, error.remote()) {
                output::json(&json!({"error": {"code": remote.code, "message": remote.message}}))?;
            }
            if error.is_no_server() {
                // One sentence: what the transport found (no serve queue, or nothing
                // consuming it), without the SDK's "transport failed" around it.
                let found = std::error::Error::source(&error)
                    .map_or_else(|| error.to_string(), ToString::to_string);
                return Err(exit::fail_with_hint(
                    Code::NoServer,
                    format!("cannot call `{}`: {found}", args.tool),
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
