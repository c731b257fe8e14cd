//! `mesh topology show`: the broker's exchanges, queues and bindings, each marked against the
//! contract, then the differences.

use std::collections::BTreeSet;

use mesh_admin::topology::{describe_arguments, differences, Actual, Difference, Wanted};
use serde_json::{json, Value};

use super::style::sign_style;
use crate::cli::Global;
use crate::exit::Code;
use crate::management::Management;
use crate::output::{self, paint, DIM, NAME};

pub(super) async fn show(
    global: &Global,
    management: &Management,
    wanted: &Wanted,
    actual: &Actual,
) -> anyhow::Result<Code> {
    print(global.json, management.vhost(), wanted, actual)
}

/// Prints the broker's topology against the contract. Every name is the broker's (a module
/// chooses part of its own queue names): the output gate escapes them all.
fn print(json: bool, vhost: &str, wanted: &Wanted, actual: &Actual) -> anyhow::Result<Code> {
    let diffs = differences(wanted, actual);
    let states = States::new(wanted, &diffs);
    let exchanges = exchanges(actual, &diffs, &states);
    let queues = queues(actual, &diffs, &states);
    let bindings = bindings(actual, &diffs, &states);

    if json {
        output::json(&json!({
            "vhost": vhost, "node": wanted.node.as_str(),
            "exchanges": exchanges, "queues": queues, "bindings": bindings,
            "differences": diffs.iter().map(Difference::to_json).collect::<Vec<_>>(),
        }))?;
        return Ok(Code::Ok);
    }
    output::line(format_args!(
        "vhost {} for node {}   (= as wanted, + missing, ~ differs, - not wanted, ? outside the spec)",
        paint(NAME, vhost),
        paint(NAME, wanted.node.as_str())
    ))?;
    print_exchanges(&exchanges)?;
    print_queues(&queues)?;
    print_bindings(&bindings)?;
    print_differences(&diffs)
}

/// What the contract wants, and the sign of each entity a difference names.
struct States<'a> {
    /// Entities named by a difference, and their sign.
    marked: Vec<(String, char)>,
    exchanges: BTreeSet<&'a str>,
    queues: BTreeSet<&'a str>,
    bindings: BTreeSet<(String, String, String)>,
}

impl<'a> States<'a> {
    fn new(wanted: &'a Wanted, diffs: &[Difference]) -> States<'a> {
        let mut marked: Vec<(String, char)> = Vec::new();
        for d in diffs {
            let key = match d {
                Difference::MissingExchange { name, .. }
                | Difference::ExchangeDiffers { name, .. }
                | Difference::RetiredExchange { name, .. } => format!("exchange {name}"),
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
        States {
            marked,
            exchanges: wanted.exchanges.iter().map(|e| e.name.as_str()).collect(),
            queues: wanted.queues.iter().map(|q| q.name.as_str()).collect(),
            bindings: wanted
                .queues
                .iter()
                .flat_map(|q| {
                    q.patterns
                        .iter()
                        .map(|p| (q.exchange.clone(), q.name.clone(), p.clone()))
                })
                .collect(),
        }
    }

    /// The sign of the entity `key`: a difference's, else `=` if wanted, else `?`.
    fn state(&self, key: &str, wanted: bool) -> char {
        match self.marked.iter().find(|(k, _)| k == key) {
            Some((_, sign)) => *sign,
            None if wanted => '=',
            None => '?',
        }
    }
}

fn exchanges(actual: &Actual, diffs: &[Difference], states: &States<'_>) -> Vec<Value> {
    let mut exchanges = Vec::new();
    for e in &actual.exchanges {
        if e.name.is_empty() || e.name.starts_with("amq.") {
            continue;
        }
        let key = format!("exchange {}", e.name);
        exchanges.push(json!({
            "name": e.name, "type": e.kind, "durable": e.durable,
            "state": state_name(states.state(&key, states.exchanges.contains(e.name.as_str())))
        }));
    }
    for d in diffs {
        if let Difference::MissingExchange { name, kind } = d {
            exchanges
                .push(json!({"name": name, "type": kind, "durable": true, "state": "missing"}));
        }
    }
    exchanges
}

fn queues(actual: &Actual, diffs: &[Difference], states: &States<'_>) -> Vec<Value> {
    let mut queues = Vec::new();
    for q in &actual.queues {
        let key = format!("queue {}", q.name);
        queues.push(json!({
            "name": q.name, "type": q.kind, "durable": q.durable, "exclusive": q.exclusive,
            "auto_delete": q.auto_delete, "arguments": q.arguments, "messages": q.messages,
            "consumers": q.consumers,
            "state": state_name(states.state(&key, states.queues.contains(q.name.as_str())))
        }));
    }
    for d in diffs {
        if let Difference::MissingQueue { name, arguments } = d {
            queues.push(json!({"name": name, "arguments": arguments, "state": "missing"}));
        }
    }
    queues
}

fn bindings(actual: &Actual, diffs: &[Difference], states: &States<'_>) -> Vec<Value> {
    let mut bindings = Vec::new();
    for b in &actual.bindings {
        if b.source.is_empty() || b.destination_type != "queue" {
            continue;
        }
        let key = format!("binding {} {} {}", b.source, b.destination, b.routing_key);
        let is_wanted = states.bindings.contains(&(
            b.source.clone(),
            b.destination.clone(),
            b.routing_key.clone(),
        ));
        bindings.push(json!({
            "exchange": b.source, "queue": b.destination, "routing_key": b.routing_key,
            "state": state_name(states.state(&key, is_wanted))
        }));
    }
    for d in diffs {
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
    bindings
}

fn print_exchanges(exchanges: &[Value]) -> anyhow::Result<()> {
    output::line("exchanges:")?;
    for e in exchanges {
        let sign = sign_of(e);
        output::line(format_args!(
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
    Ok(())
}

fn print_queues(queues: &[Value]) -> anyhow::Result<()> {
    output::line("queues:")?;
    for q in queues {
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
        output::line(format_args!(
            "  {} {} {}",
            paint(sign_style(sign), sign),
            text(&q["name"]),
            paint(DIM, format!("({})", details.join("; ")))
        ))?;
    }
    Ok(())
}

fn print_bindings(bindings: &[Value]) -> anyhow::Result<()> {
    output::line("bindings:")?;
    for b in bindings {
        let sign = sign_of(b);
        output::line(format_args!(
            "  {} {} -> {} on `{}`",
            paint(sign_style(sign), sign),
            text(&b["exchange"]),
            text(&b["queue"]),
            text(&b["routing_key"])
        ))?;
    }
    Ok(())
}

fn print_differences(diffs: &[Difference]) -> anyhow::Result<Code> {
    if !diffs.is_empty() {
        output::line(format_args!("differences ({}):", diffs.len()))?;
        for d in diffs {
            output::line(format_args!(
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

#[cfg(test)]
mod tests {
    use super::print;
    use crate::output::capture::capture;
    use crate::output::hostile::{all, assert_json_safe, assert_text_safe, CORPUS};
    use mesh::raw::Name;
    use mesh_admin::topology::{Actual, Wanted, WantedExchange, WantedQueue};
    use serde_json::{json, Map};

    fn row<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> T {
        serde_json::from_value(value).expect("a row")
    }

    /// Every name `topology show` lists is the broker's: hostile ones come out escaped.
    #[test]
    fn hostile_names_are_escaped() {
        let everything = all();
        let mut names: Vec<&str> = CORPUS.to_vec();
        names.push(&everything);
        let wanted = Wanted::new(
            Name::parse("n1").unwrap(),
            vec![WantedExchange::new("mesh.events", "topic")],
            vec![WantedQueue::new(
                "n1.billing.events",
                Map::new(),
                "mesh.events",
                vec!["module.#".to_owned()],
            )],
        );
        let actual = Actual {
            exchanges: names
                .iter()
                .map(|n| row(json!({"name": n, "type": "topic\u{85}", "durable": true})))
                .collect(),
            queues: names
                .iter()
                .map(|n| {
                    row(
                        json!({"name": n, "durable": true, "arguments": {"x-queue-type": n},
                               "messages": 1, "consumers": 0}),
                    )
                })
                .collect(),
            bindings: names
                .iter()
                .map(|n| {
                    row(json!({"source": "mesh.events", "destination": n,
                               "destination_type": "queue", "routing_key": n,
                               "properties_key": "k"}))
                })
                .collect(),
        };
        let (printed, out) = capture(|| print(false, "v\u{1b}[2J", &wanted, &actual));
        printed.unwrap();
        let mut shown = names.clone();
        shown.extend(["v\u{1b}[2J", "topic\u{85}"]);
        assert_text_safe(&out.stdout, &shown);

        let (printed, out) = capture(|| print(true, "v\u{1b}[2J", &wanted, &actual));
        printed.unwrap();
        assert_json_safe(&out.stdout, &shown);
    }
}
