//! What a file is written from: the events and tools selected from the system (with their
//! emitters and servers), and the names every generated item gets from a key or a tool.

use std::collections::BTreeSet;

use mesh_core::contract::{MessageContract, ToolContract};
use mesh_core::topic_matches;
use serde_json::Value;

use crate::{Error, System};

/// An event to write: its emitter and what it announced.
pub(crate) struct EventSource<'a> {
    pub(crate) emitter: &'a str,
    pub(crate) message: &'a MessageContract,
}

/// A tool to write: its server (if any announced one) and the contract whose schemas are
/// used.
pub(crate) struct ToolSource<'a> {
    pub(crate) server: Option<&'a str>,
    pub(crate) contract: &'a ToolContract,
}

type Selection<'a> = (Vec<EventSource<'a>>, Vec<ToolSource<'a>>);

pub(super) fn select<'a>(system: &'a System, module: Option<&str>) -> Result<Selection<'a>, Error> {
    let consumer = match module {
        Some(owner) => Some(system.module(owner).ok_or_else(|| {
            Error::new(crate::ErrorKind::UnknownModule {
                owner: owner.to_owned(),
            })
        })?),
        None => None,
    };
    let mut events = Vec::new();
    let mut seen = BTreeSet::new();
    for emitter in system.modules() {
        for message in &emitter.emits {
            let wanted = consumer.is_none_or(|c| {
                c.handles
                    .iter()
                    .any(|h| topic_matches(&h.pattern, &message.key))
            });
            if wanted && seen.insert(message.key.as_str()) {
                events.push(EventSource {
                    emitter: &emitter.owner,
                    message,
                });
            }
        }
    }
    events.sort_by(|a, b| a.message.key.cmp(&b.message.key));
    let wanted_tools: BTreeSet<&str> = match consumer {
        Some(c) => c.calls.iter().map(|t| t.tool.as_str()).collect(),
        None => system
            .modules()
            .flat_map(|m| m.serves.iter().chain(&m.calls))
            .map(|t| t.tool.as_str())
            .collect(),
    };
    let mut tools = Vec::new();
    for tool in wanted_tools {
        let served = system.modules().find_map(|m| {
            m.serves
                .iter()
                .find(|t| t.tool == tool)
                .map(|t| (m.owner.as_str(), t))
        });
        let source = match served {
            Some((server, contract)) => ToolSource {
                server: Some(server),
                contract,
            },
            None => {
                let called = system
                    .modules()
                    .flat_map(|m| &m.calls)
                    .find(|t| t.tool == tool);
                let Some(contract) = called else { continue };
                ToolSource {
                    server: None,
                    contract,
                }
            }
        };
        tools.push(source);
    }
    Ok((events, tools))
}

/// `site.created` → `SiteCreated`: the words of `text` (split at anything not a letter or
/// digit), each with its first letter upper case (the rest lower case in a word of capitals
/// only); a leading digit gets a `T` before it.
pub(crate) fn camel(text: &str) -> String {
    let mut out = String::new();
    for word in text.split(|c: char| !c.is_ascii_alphanumeric()) {
        // An all-capitals word (`FR`, `HTTP`) is a word, not a run of initials: `Fr`.
        let shouting = word.len() > 1 && !word.chars().any(|c| c.is_ascii_lowercase());
        let mut chars = word.chars();
        if let Some(first) = chars.next() {
            out.push(first.to_ascii_uppercase());
            if shouting {
                out.extend(chars.map(|c| c.to_ascii_lowercase()));
            } else {
                out.extend(chars);
            }
        }
    }
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'T');
    }
    out
}

/// The schema of `value` when it is one (an object or a boolean).
pub(crate) fn schema_of(value: Option<&Value>) -> Option<&Value> {
    value.filter(|v| v.is_object() || v.is_boolean())
}
