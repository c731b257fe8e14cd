//! `mesh emit`: one event, or N pipelined (or paced) with a progress bar.
//!
//! Everything the contract can refuse is refused before connecting: the key, the JSON, the
//! names, and an emitter that does not own the key (checked by the SDK itself, on a bus over
//! the in-memory transport with the same identity, so the error is the SDK's `ForeignKey`).

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use indicatif::{ProgressBar, ProgressStyle};
use mesh::raw::Transport;
use mesh::raw::{Name, Origin, RoutingKey};
use mesh::{Bus, BusBuilder, Outgoing};
use serde_json::json;

use crate::cli::{EmitArgs, Global};
use crate::config;
use crate::exit::{Code, WithCode};
use crate::output::{self, paint, BAD, GOOD, NAME};

/// Who emits, from the key's origin and owner.
#[derive(Debug, Clone)]
struct Emitter {
    origin: Origin,
    owner: String,
    node: Name,
    /// `--source`, when given (it is then the owner).
    source: Option<String>,
}

impl Emitter {
    fn builder(&self) -> BusBuilder {
        let builder = Bus::builder();
        match self.origin {
            Origin::Module => builder.node(self.node.as_str()).module(&self.owner),
            Origin::Mesh => builder.node(self.node.as_str()).context(&self.owner),
            // A node speaks for itself: its name is the owner.
            Origin::Node => builder.node(&self.owner).as_node(),
        }
    }
}

/// The event options shared by every event of one run.
#[derive(Debug, Clone)]
struct Template {
    key: String,
    causation: Option<String>,
    schema: Option<u32>,
}

impl Template {
    fn outgoing(&self, body: Vec<u8>) -> Result<Outgoing, mesh::Error> {
        let mut outgoing = Outgoing::raw(&self.key, body)?;
        if let Some(id) = &self.causation {
            outgoing = outgoing.causation_id(id.clone());
        }
        if let Some(schema) = self.schema {
            outgoing = outgoing.schema(schema);
        }
        Ok(outgoing)
    }
}

/// Runs `mesh emit`.
pub(crate) async fn run(global: &Global, args: &EmitArgs) -> anyhow::Result<Code> {
    let data = read_data(args)?;
    let template = Template {
        key: args.key.clone(),
        causation: args.causation.clone(),
        schema: args.schema,
    };
    // The key and the JSON, as the SDK checks them.
    template
        .outgoing(data.clone().into_bytes())
        .coded(Code::Usage, || format!("cannot emit `{}`", args.key))?;
    let key = RoutingKey::parse(&args.key)
        .coded(Code::Usage, || format!("cannot emit `{}`", args.key))?;
    let node = match key.origin() {
        // The node of a node event is its owner; --node is not needed.
        Origin::Node => {
            Name::parse(key.name()).coded(Code::Usage, || format!("cannot emit `{key}`"))?
        }
        _ => config::node(global)?,
    };
    if (args.at.is_some() || args.after.is_some()) && key.origin() != Origin::Module {
        return Err(anyhow::anyhow!(
            "only a module's key can be scheduled (a schedule queue is a module's)"
        ))
        .coded(Code::Usage, || format!("cannot schedule `{key}`"));
    }
    let emitter = Emitter {
        origin: key.origin(),
        owner: args.source.clone().unwrap_or_else(|| key.name().to_owned()),
        node,
        source: args.source.clone(),
    };
    preflight(&emitter, &template, &data).await?;
    let options = config::amqp_options(global)?;

    let transport = config::connect(options).await?;
    let bus = emitter
        .builder()
        .start(transport)
        .await
        .context("starting the bus")?;
    let due = match (args.at, args.after) {
        (Some(at), _) => Some(at),
        (None, Some(after)) => Some(
            mesh::Timestamp::now()
                .checked_add(after)
                .context("--after reaches past 9999-12-31")
                .coded(Code::Usage, || format!("cannot schedule `{}`", args.key))?,
        ),
        (None, None) => None,
    };
    let result = match args.count {
        None => emit_one(global, &bus, &template, data, due).await,
        Some(count) => emit_many(global, &bus, &template, &data, count, args.rate).await,
    };
    let _ = bus.drain().await;
    result
}

/// Emits once on the in-memory transport with the same identity: the SDK refuses a key the
/// emitter does not own (or an invalid source name) exactly as it would on the broker.
async fn preflight(emitter: &Emitter, template: &Template, data: &str) -> anyhow::Result<()> {
    let memory: Arc<dyn Transport> = Arc::new(mesh::MemoryBroker::new().transport());
    let bus = emitter
        .builder()
        .start(memory)
        .await
        .coded(Code::Usage, || format!("cannot emit `{}`", template.key))?;
    let checked = match template.outgoing(data.as_bytes().to_vec()) {
        Ok(outgoing) => bus.emit_outgoing(outgoing).await.map(|_| ()),
        Err(e) => Err(e),
    };
    bus.close().await;
    checked.coded(Code::Usage, || match &emitter.source {
        Some(source) => format!("--source `{source}` is not the owner of the key"),
        None => format!("cannot emit `{}`", template.key),
    })
}

fn read_data(args: &EmitArgs) -> anyhow::Result<String> {
    let text = if let Some(data) = &args.data {
        data.clone()
    } else if let Some(path) = &args.data_file {
        if path.as_os_str() == "-" {
            read_stdin()?
        } else {
            mesh_files::read_bounded_text(path, config::MAX_BODY_FILE, mesh_files::DEADLINE)
                .coded(Code::Usage, || {
                    format!("cannot read --data-file {}", path.display())
                })?
        }
    } else if std::io::stdin().is_terminal() {
        String::new()
    } else {
        read_stdin()?
    };
    let text = text.trim();
    if text.is_empty() && args.data.is_none() {
        return Ok("{}".to_owned());
    }
    // Compact, so a body from a pretty-printed file is one line in `{"seq", "data"}`.
    let value: serde_json::Value = match serde_json::from_str(text) {
        Ok(value) => value,
        // Left as it is: the SDK refuses it with the contract's error.
        Err(_) => return Ok(text.to_owned()),
    };
    Ok(value.to_string())
}

fn read_stdin() -> anyhow::Result<String> {
    config::read_bounded(std::io::stdin().lock(), config::MAX_BODY_FILE)
        .coded(Code::Usage, || "cannot read the body from stdin".to_owned())
}

async fn emit_one(
    global: &Global,
    bus: &Bus,
    template: &Template,
    data: String,
    due: Option<mesh::Timestamp>,
) -> anyhow::Result<Code> {
    let outgoing = template.outgoing(data.into_bytes())?;
    let id = match due {
        None => bus.emit_outgoing(outgoing).await,
        Some(due) => bus.emit_outgoing_at(due, outgoing).await,
    }
    .coded(Code::NotConfirmed, || {
        format!("`{}` was not confirmed by the broker", template.key)
    })?;
    if global.json {
        let mut line = json!({"id": id.to_string(), "key": template.key});
        if let Some(due) = due {
            line["due"] = json!(due.text());
        }
        output::json(&line)?;
    } else {
        output::line(id)?;
    }
    Ok(Code::Ok)
}

/// `{"seq": n, "data": <data>}`; `data` is JSON already checked.
fn numbered(seq: u64, data: &str) -> Vec<u8> {
    format!("{{\"seq\":{seq},\"data\":{data}}}").into_bytes()
}

fn progress(count: u64) -> ProgressBar {
    if !output::stderr_is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(count);
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} confirmed or failed ({per_sec}, eta {eta})",
    ) {
        bar.set_style(style);
    }
    bar
}

/// What became of the events of one run.
#[derive(Debug, Default)]
struct Tally {
    confirmed: u64,
    failed: u64,
    first_error: Option<mesh::Error>,
}

impl Tally {
    fn settle(&mut self, result: Result<mesh::EventId, mesh::Error>) {
        match result {
            Ok(_) => self.confirmed += 1,
            Err(e) => {
                self.failed += 1;
                self.first_error.get_or_insert(e);
            }
        }
    }
}

async fn emit_many(
    global: &Global,
    bus: &Bus,
    template: &Template,
    data: &str,
    count: u64,
    rate: Option<f64>,
) -> anyhow::Result<Code> {
    let bar = progress(count);
    let started = Instant::now();
    let mut pacing = rate.map(|r| {
        let mut interval = tokio::time::interval(crate::cli::rate_interval(r));
        // Catch up after a stall, so the average rate is the one asked for.
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        interval
    });
    let mut pending = FuturesUnordered::new();
    let mut tally = Tally::default();
    let mut attempted: u64 = 0;
    for seq in 1..=count {
        if let Some(interval) = pacing.as_mut() {
            interval.tick().await;
        }
        let outgoing = template.outgoing(numbered(seq, data))?;
        attempted += 1;
        match bus.emit_nowait(outgoing).await {
            Ok(emit) => pending.push(emit),
            Err(e) => {
                // The transport would not take it (closed, no room before the deadline): the
                // rest would fare no better.
                tally.settle(Err(e));
                break;
            }
        }
        // Count the confirms that already came, without waiting for any.
        while let Some(Some(result)) = pending.next().now_or_never() {
            tally.settle(result);
        }
        bar.set_position(tally.confirmed + tally.failed);
    }
    while let Some(result) = pending.next().await {
        tally.settle(result);
        bar.set_position(tally.confirmed + tally.failed);
    }
    // Events never handed to the transport failed too.
    tally.failed += count - attempted;
    bar.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    let per_second = if seconds > 0.0 {
        tally.confirmed as f64 / seconds
    } else {
        0.0
    };
    if global.json {
        output::json(&json!({
            "key": template.key, "confirmed": tally.confirmed, "failed": tally.failed,
            "seconds": (seconds * 1000.0).round() / 1000.0,
            "rate": per_second.round(),
        }))?;
    } else {
        output::line(format_args!(
            "{} confirmed, {} failed in {:.2} s ({:.0} events/s) to {}",
            paint(GOOD, tally.confirmed),
            paint(if tally.failed > 0 { BAD } else { GOOD }, tally.failed),
            seconds,
            per_second,
            paint(NAME, &template.key)
        ))?;
    }
    match tally.first_error {
        Some(error) => Err(anyhow::Error::new(error).context(crate::exit::Coded {
            code: Code::NotConfirmed,
            message: format!(
                "{} of {count} events were not confirmed; the first failure",
                tally.failed
            ),
            hint: None,
        })),
        None => Ok(Code::Ok),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_bodies_are_json() {
        let body = numbered(7, r#"{"a":[1,2]}"#);
        let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(value, json!({"seq": 7, "data": {"a": [1, 2]}}));
    }

    #[tokio::test]
    async fn preflight_refuses_a_foreign_source_with_the_sdk_error() {
        let emitter = Emitter {
            origin: Origin::Module,
            owner: "billing".into(),
            node: Name::parse("n").unwrap(),
            source: Some("billing".into()),
        };
        let template = Template {
            key: "module.umami.site.created".into(),
            causation: None,
            schema: None,
        };
        let error = preflight(&emitter, &template, "{}").await.unwrap_err();
        assert_eq!(crate::exit::classify(&error), Code::Usage);
        let text = format!("{error:#}");
        assert!(
            text.contains("may not emit `module.umami.site.created`"),
            "{text}"
        );
        let owner = Emitter {
            owner: "umami".into(),
            source: None,
            ..emitter
        };
        preflight(&owner, &template, "{}").await.unwrap();
    }
}
