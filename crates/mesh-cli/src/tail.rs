//! `mesh tail`: an ephemeral, at-most-once subscription printing each event.
//!
//! The listener's queue is server-named, exclusive and auto-deleted (the SDK's `listen`), so
//! nothing of it outlives the process; the bus is closed before exiting all the same.

use bytes::Bytes;
use mesh::raw::TopicPattern;
use mesh::{Bus, Incoming};
use serde_json::{json, Value};

use crate::cli::{Global, TailArgs};
use crate::config;
use crate::exit::{fail, Code, WithCode};
use crate::output::{self, paint, DIM, NAME, WARN};
use crate::process;

/// The identity the CLI listens and calls as: the runtime context `cli`.
pub(crate) const CLI_CONTEXT: &str = "cli";

/// Runs `mesh tail`.
pub(crate) async fn run(global: &Global, args: &TailArgs) -> anyhow::Result<Code> {
    for pattern in &args.patterns {
        TopicPattern::parse(pattern)
            .coded(Code::Usage, || format!("invalid pattern `{pattern}`"))?;
    }
    let node = config::node(global)?;
    let transport = config::connect(config::amqp_options(global)?).await?;
    let bus = Bus::builder()
        .node(node.as_str())
        .context(CLI_CONTEXT)
        .start(transport)
        .await?;
    let telemetry = match args.metrics.metrics_addr {
        Some(addr) => match crate::metrics::serve(addr, &bus).await {
            Ok(telemetry) => Some(telemetry),
            Err(error) => {
                bus.close().await;
                return Err(error);
            }
        },
        None => None,
    };
    let result = follow(global, args, &bus).await;
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    bus.close().await;
    result
}

async fn follow(global: &Global, args: &TailArgs, bus: &Bus) -> anyhow::Result<Code> {
    let mut listener = bus.listen(&args.patterns).await?;
    // Before saying it listens: whoever waits for that line may stop it with SIGTERM next.
    let mut signals = process::Signals::register()?;
    output::note(paint(
        DIM,
        format!(
            "listening on {} (queue {}, removed when tail exits)",
            args.patterns.join(" "),
            listener.queue()
        ),
    ));
    let mut seen: u64 = 0;
    while args.count.is_none_or(|count| seen < count) {
        tokio::select! {
            _ = signals.recv() => break,
            next = listener.next() => match next {
                None => return Err(fail(Code::Error, "the connection to the broker was lost")),
                Some(Ok(incoming)) => {
                    seen += 1;
                    print(global, &incoming)?;
                }
                Some(Err(error)) => {
                    // Listeners are at-most-once: a message that breaks the contract is
                    // reported and skipped.
                    let error = format!("{:#}", anyhow::Error::new(error));
                    output::note(format_args!(
                        "{} skipped a message that breaks the contract: {}",
                        paint(WARN, "warning:"),
                        &error
                    ));
                }
            }
        }
    }
    Ok(Code::Ok)
}

fn print(global: &Global, incoming: &Incoming<Bytes>) -> anyhow::Result<()> {
    let meta = incoming.meta.envelope();
    let body_text = String::from_utf8_lossy(&incoming.event);
    if global.json {
        let body: Value = serde_json::from_slice(&incoming.event)
            .unwrap_or_else(|_| Value::from(body_text.as_ref()));
        output::json(&json!({
            "key": meta.key.to_string(),
            "id": meta.id.to_string(),
            "source": meta.source,
            "node": meta.node,
            "time": meta.time.to_string(),
            "causation_id": meta.causation_id,
            "schema": meta.schema.map(|s| s.0),
            "body": body,
        }))?;
    } else {
        // Every wire field is escaped by the output gate: a CR, an escape sequence or a
        // bidi override in a header or the body cannot forge a line or rewrite the terminal.
        let caused = output::lazy(|f| match &meta.causation_id {
            Some(cause) => write!(f, " {}", paint(DIM, format_args!("(caused by {cause})"))),
            None => Ok(()),
        });
        output::line(format_args!(
            "{} {} {} {}@{} {body_text}{caused}",
            paint(DIM, meta.time),
            paint(NAME, meta.key.as_str()),
            paint(DIM, meta.id),
            meta.source,
            meta.node,
        ))?;
    }
    Ok(())
}
