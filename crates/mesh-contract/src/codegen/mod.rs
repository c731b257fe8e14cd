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

use crate::{Error, System};

mod rust;
mod source;

/// What to generate.
#[derive(Debug, Clone, Default)]
pub struct CodegenOptions {
    /// Only what this module consumes or calls (its owner, e.g. `module.billing`).
    pub module: Option<String>,
}

/// The Rust source of the types `options` asks for, as one file (a module: it needs the
/// crates `mesh` (package `meshbus`), `serde` with `derive` and `schemars` 1).
pub fn rust(system: &System, options: &CodegenOptions) -> Result<String, Error> {
    let (events, tools) = source::select(system, options.module.as_deref())?;
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
