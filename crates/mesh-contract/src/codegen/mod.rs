//! Typed code from a system's contract: the Rust types of the events and tools a module
//! consumes or calls, as their emitters and servers announce them, so a consumer reads the
//! published shape instead of a hand copy (and `check` still guards it: a breaking change of
//! the emitter is a finding naming the consumer).
//!
//! What is written, for `--module M` (without it: every emitted event and every tool):
//! - each event whose key one of M's handler patterns matches: a struct (or a newtype over
//!   `serde_json::Value` when the emitter declared no schema) deriving `Serialize`,
//!   `Deserialize` and `schemars::JsonSchema`, and its `mesh::Event` impl with the key, the
//!   emitter's schema version and the derived schema;
//! - each tool M calls: its key as a constant, its request and reply types (the server's
//!   schemas; the caller's own where no server announced one).
//!
//! Names: an event `<origin>.<owner>.<event…>` is `<Owner><Event…>` in upper camel case
//! (`module.umami.site.created` → `UmamiSiteCreated`), a tool `t` is `<T>Request` and
//! `<T>Reply`, a schema's definition keeps its name (`2`, `3`… appended for another shape
//! under a name already taken, or a name of the prelude). The output is the same for the same system, byte for byte.

use std::collections::BTreeSet;

use mesh_core::contract::{MessageContract, ToolContract};
use mesh_core::topic_matches;
use serde_json::Value;

use crate::{Error, System};

mod rust;

/// What to generate.
#[derive(Debug, Clone, Default)]
pub struct CodegenOptions {
    /// Only what this module consumes or calls (its owner, e.g. `module.billing`).
    pub module: Option<String>,
}

/// The Rust source of the types `options` asks for, as one file (a module: it needs the
/// crates `mesh` (package `meshbus`), `serde` with `derive` and `schemars` 1).
pub fn rust(system: &System, options: &CodegenOptions) -> Result<String, Error> {
    let (events, tools) = select(system, options.module.as_deref())?;
    let subject = match &options.module {
        Some(owner) => format!("the events and tools {owner} consumes or calls"),
        None => "every event and tool of the system".to_owned(),
    };
    let command = match &options.module {
        Some(owner) => format!("mesh contract codegen rust --module {owner}"),
        None => "mesh contract codegen rust".to_owned(),
    };
    Ok(rust::file(&subject, &command, &events, &tools))
}

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

fn select<'a>(system: &'a System, module: Option<&str>) -> Result<Selection<'a>, Error> {
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
