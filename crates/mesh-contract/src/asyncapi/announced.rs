//! The announcement channels: every bus announces its own contract as the event
//! `<origin>.<owner>.contract.announced` (body a `ModuleContract`, `x-schema`
//! [`CONTRACT_FORMAT`]), so each exported module has that channel and a `send` operation on
//! it, and all of them share one message, `contract.announced.v<format>`: its key, id, title
//! and schema, which the exporter writes.

use mesh_core::contract::{ANNOUNCED_EVENT, CONTRACT_FORMAT};
use serde_json::{json, Value};

/// The announcement key of `owner`: `module.<m>` announces under `module.<m>.…`, a context
/// `context.<c>` under `mesh.<c>.…`, a node under `node.<n>.…`.
pub(crate) fn key(owner: &str) -> String {
    let (origin, name) = owner.split_once('.').unwrap_or((owner, ""));
    let origin = if origin == "context" { "mesh" } else { origin };
    format!("{origin}.{name}.{ANNOUNCED_EVENT}")
}

/// The id (and name) of the one message every announcement channel carries.
pub(super) fn message_id() -> String {
    format!("{ANNOUNCED_EVENT}.v{CONTRACT_FORMAT}")
}

/// The message's title.
pub(super) fn title() -> String {
    format!("contract announced v{CONTRACT_FORMAT}")
}

/// The message's summary.
pub(super) const SUMMARY: &str = "A bus's contract, announced when it starts: what it emits, handles, serves and calls, with the JSON Schemas it declared";

/// The JSON Schema of a [`ModuleContract`] of format [`CONTRACT_FORMAT`] (the shape
/// `mesh_core::contract` serialises).
pub(super) fn schema() -> Value {
    let schema_of = |what: &str| json!({"description": format!("The JSON Schema of {what}, when declared (draft-07 style, its shared parts under `definitions`)")});
    let list = |name: &str, what: &str| json!({"type": "array", "description": what, "items": {"$ref": format!("#/definitions/{name}")}});
    json!({
        "title": "ModuleContract",
        "type": "object",
        "required": ["owner", "node"],
        "properties": {
            "owner": {"type": "string", "description": "The owner of its keys: module.<m>, node.<n> or context.<c> (its x-source)"},
            "node": {"type": "string", "description": "The node the bus runs on"},
            "emits": list("MessageContract", "The events it emits"),
            "handles": list("HandlerContract", "The events it handles, one entry per handler pattern"),
            "serves": list("ToolContract", "The tools it serves"),
            "calls": list("ToolContract", "The tools it calls"),
        },
        "definitions": {
            "MessageContract": {
                "type": "object",
                "description": "An emitted event",
                "required": ["key", "version"],
                "properties": {
                    "key": {"type": "string", "description": "The full routing key"},
                    "version": {"type": "integer", "minimum": 0, "description": "The x-schema it writes"},
                    "schema": schema_of("that version's body"),
                },
            },
            "HandlerContract": {
                "type": "object",
                "description": "A handler",
                "required": ["pattern"],
                "properties": {
                    "pattern": {"type": "string", "description": "The topic pattern its queue is bound to"},
                    "version": {"type": "integer", "minimum": 0, "description": "The x-schema a typed handler reads"},
                    "schema": schema_of("the body it reads"),
                },
            },
            "ToolContract": {
                "type": "object",
                "description": "A tool served or called",
                "required": ["tool"],
                "properties": {
                    "tool": {"type": "string", "description": "The tool key"},
                    "request": schema_of("its request"),
                    "reply": schema_of("its reply"),
                },
            },
        },
    })
}
