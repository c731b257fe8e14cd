//! The announcement channels: every bus announces its own contract as the event
//! `<origin>.<owner>.contract.announced` (body a [`ModuleContract`], `x-schema`
//! [`CONTRACT_FORMAT`]), so each exported module has that channel and a `send` operation on
//! it, and all of them share one message, `contract.announced.v<format>`.

use mesh_core::contract::{ModuleContract, ANNOUNCED_EVENT, CONTRACT_FORMAT};
use serde_json::{json, Value};

use super::Doc;

/// The announcement key of `owner`: `module.<m>` announces under `module.<m>.…`, a context
/// `context.<c>` under `mesh.<c>.…`, a node under `node.<n>.…`.
pub(crate) fn key(owner: &str) -> String {
    let (origin, name) = owner.split_once('.').unwrap_or((owner, ""));
    let origin = if origin == "context" { "mesh" } else { origin };
    format!("{origin}.{name}.{ANNOUNCED_EVENT}")
}

/// Adds `module`'s announcement channel, the shared message and its `send` operation.
pub(super) fn add(doc: &mut Doc, module: &ModuleContract) {
    let channel = key(&module.owner);
    let id = format!("{ANNOUNCED_EVENT}.v{CONTRACT_FORMAT}");
    let fresh = !doc.messages.contains_key(&id);
    doc.message(&channel, &id, &id, Some(CONTRACT_FORMAT), Some(&schema()));
    if fresh {
        if let Some(Value::Object(message)) = doc.messages.get_mut(&id) {
            message.insert(
                "title".into(),
                json!(format!("contract announced v{CONTRACT_FORMAT}")),
            );
            message.insert(
                "summary".into(),
                json!("A bus's contract, announced when it starts: what it emits, handles, serves and calls, with the JSON Schemas it declared"),
            );
        }
    }
    doc.operation(
        format!("{}.send.{channel}", module.owner),
        "send",
        &channel,
        &[id],
        None,
        None,
        None,
    );
}

/// The JSON Schema of a [`ModuleContract`] of format [`CONTRACT_FORMAT`] (the shape
/// `mesh_core::contract` serialises).
fn schema() -> Value {
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
