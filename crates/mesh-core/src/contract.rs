//! A module's contract: what it emits, the patterns it handles, the tools it serves and
//! calls, each with the JSON Schema of its body where the module declared one.
//!
//! A bus announces its contract when it starts, as the event
//! `<its prefix>contract.announced` (for a module `module.<m>.contract.announced`), body
//! [`ModuleContract`] as JSON, `x-schema` [`CONTRACT_FORMAT`]. The audit logger records it
//! like any event, so the audit store holds every module's contract and its history; the
//! `mesh contract` command reads them from there.
//!
//! Schemas are JSON Schema in the draft-07 style AsyncAPI 3.0 embeds: each is a
//! self-contained document whose shared parts sit under `definitions` and are referenced as
//! `#/definitions/<name>` (the exporter moves them to `components/schemas`).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The event name of the announcement, after the bus's own prefix.
pub const ANNOUNCED_EVENT: &str = "contract.announced";

/// The `x-schema` of the announcement's body: the version of [`ModuleContract`]'s shape.
pub const CONTRACT_FORMAT: u32 = 1;

/// What one bus announces about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModuleContract {
    /// The owner of its keys: `module.<m>`, `node.<n>` or `context.<c>` (its `x-source`).
    pub owner: String,
    /// The node the bus runs on.
    pub node: String,
    /// The events it emits (declared on its builder).
    #[serde(default)]
    pub emits: Vec<MessageContract>,
    /// The events it handles: one entry per handler pattern.
    #[serde(default)]
    pub handles: Vec<HandlerContract>,
    /// The tools it serves.
    #[serde(default)]
    pub serves: Vec<ToolContract>,
    /// The tools it calls (declared on its builder).
    #[serde(default)]
    pub calls: Vec<ToolContract>,
}

/// An emitted event: its key, the schema version it writes and, if declared, that
/// version's JSON Schema.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MessageContract {
    /// The full routing key.
    pub key: String,
    /// The `x-schema` it writes.
    pub version: u32,
    /// The body's JSON Schema, when declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
}

/// A handler: the pattern its queue is bound to and, for a typed handler, the schema
/// version it writes and reads and the JSON Schema it reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HandlerContract {
    /// A topic pattern (a plain key for a typed handler).
    pub pattern: String,
    /// The schema version of the type it reads, when typed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// The JSON Schema of the body it reads, when declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
}

/// A tool served or called, with the JSON Schemas of its request and reply when declared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolContract {
    /// The tool's key, `<owner word>.<tool…>` as in `serve.<key>`.
    pub tool: String,
    /// The request's JSON Schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Value>,
    /// The reply's JSON Schema.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<Value>,
}

impl ModuleContract {
    /// Whether it says anything beyond its name.
    pub fn is_empty(&self) -> bool {
        self.emits.is_empty()
            && self.handles.is_empty()
            && self.serves.is_empty()
            && self.calls.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_reads_a_sparse_body() {
        let contract = ModuleContract {
            owner: "module.umami".into(),
            node: "anchor".into(),
            emits: vec![MessageContract {
                key: "module.umami.site.created".into(),
                version: 2,
                schema: Some(serde_json::json!({"type": "object"})),
            }],
            handles: vec![HandlerContract {
                pattern: "module.billing.#".into(),
                version: None,
                schema: None,
            }],
            serves: Vec::new(),
            calls: Vec::new(),
        };
        let text = serde_json::to_string(&contract).expect("serialises");
        let back: ModuleContract = serde_json::from_str(&text).expect("parses");
        assert_eq!(back, contract);
        let sparse: ModuleContract =
            serde_json::from_str(r#"{"owner":"module.a","node":"n"}"#).expect("parses");
        assert!(sparse.is_empty());
    }
}
