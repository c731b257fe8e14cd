//! What an exported document says of the wire (docs/CONTRACT.md), so a client built from the
//! document alone speaks it: the AMQP bindings of channels and operations (exchange, its type
//! and durability, the routing key, the receiving queue, persistence and acks) and the headers
//! every message carries, with the required ones marked.

use mesh_core::naming::{self, EVENTS_EXCHANGE, RPC_EXCHANGE};
use mesh_core::{Name, ToolKey};
use serde_json::{json, Value};

/// The version of AsyncAPI's AMQP bindings written.
pub(crate) const AMQP_BINDINGS: &str = "0.3.0";

/// The channel binding of an event key: a routing key on the durable topic exchange
/// `mesh.events`.
pub(crate) fn event_channel() -> Value {
    routing_key_on(EVENTS_EXCHANGE)
}

/// The channel binding of a tool's requests: a routing key (the tool key) on `mesh.rpc`.
pub(crate) fn tool_channel() -> Value {
    routing_key_on(RPC_EXCHANGE)
}

fn routing_key_on(exchange: &str) -> Value {
    json!({"amqp": {
        "is": "routingKey",
        "exchange": {"name": exchange, "type": "topic", "durable": true, "autoDelete": false},
        "bindingVersion": AMQP_BINDINGS,
    }})
}

/// The operation binding of a publish: persistent (delivery mode 2), with publisher confirms
/// (`x-mesh-confirmed`, no AMQP binding field says it).
pub(crate) fn send_operation() -> Value {
    json!({"amqp": {"deliveryMode": 2, "bindingVersion": AMQP_BINDINGS}})
}

/// The operation binding of a handler: manual acks, from the module's durable queue
/// `<node>.<module>.events` (the queue in `x-mesh-queue`, as the binding has no field for it).
pub(crate) fn receive_operation() -> Value {
    json!({"amqp": {"ack": true, "bindingVersion": AMQP_BINDINGS}})
}

/// The queue a module's handlers receive from, `<node>.<module>.events`; `None` for an owner
/// whose node or name is no valid name (the contract was checked, so only a hand-made one).
pub(crate) fn events_queue(node: &str, owner: &str) -> Option<String> {
    let name = owner.rsplit('.').next()?;
    Some(naming::consumer_queue(
        &Name::parse(node).ok()?,
        &Name::parse(name).ok()?,
    ))
}

/// The queue a tool's server receives its requests from, `serve.<tool>`.
pub(crate) fn serve_queue(tool: &str) -> Option<String> {
    Some(naming::serve_queue(&ToolKey::parse(tool).ok()?))
}

/// The headers of an event (`version`: the schema version its body has, in `x-schema`).
pub(crate) fn event_headers(version: Option<u32>) -> Value {
    let schema = match version {
        Some(version) => json!({"type": "integer", "const": version,
            "description": "The schema version of the body (absent means 1)"}),
        None => json!({"type": "integer", "minimum": 1,
            "description": "The schema version of the body (absent means 1)"}),
    };
    json!({
        "type": "object",
        "required": ["x-event-id", "x-source", "x-node", "x-time"],
        "properties": {
            "x-event-id": {"type": "string", "format": "uuid",
                "description": "The event's id, one per event: a redelivery or a resend carries the same (mesh writes UUIDv7)"},
            "x-source": {"type": "string",
                "description": "The emitter's name: the key's second word (umami for module.umami.site.created); a module or node event whose x-source is another name is dead-lettered (forged-source)"},
            "x-node": {"type": "string", "description": "The node the event was emitted from"},
            "x-time": {"type": "string", "format": "date-time",
                "description": "When it was emitted, RFC 3339"},
            "x-causation-id": {"type": "string",
                "description": "The event or call that caused this one"},
            "x-schema": schema,
        },
        "description": "AMQP headers. The content type is the AMQP property content_type, application/json; the message is persistent (delivery mode 2). Unknown x- headers are ignored; x-mesh-* headers are the runtime's own and refused on an emit."
    })
}

/// The headers of a tool request.
pub(crate) fn request_headers() -> Value {
    json!({
        "type": "object",
        "required": ["x-event-id", "x-source", "x-node", "x-time", "x-mesh-tool"],
        "properties": {
            "x-event-id": {"type": "string", "format": "uuid", "description": "The call's id"},
            "x-source": {"type": "string", "description": "The caller"},
            "x-node": {"type": "string", "description": "The caller's node"},
            "x-time": {"type": "string", "format": "date-time", "description": "When it was called, RFC 3339"},
            "x-causation-id": {"type": "string", "description": "The event or call that caused this one"},
            "x-mesh-tool": {"type": "string", "description": "The tool key"},
        },
        "description": "AMQP headers; the properties reply_to (the caller's reply key) and correlation_id (the call's id) are required, content_type application/json."
    })
}

/// What `x-mesh-error-code` holds: the tool's own codes, and the runtime's, which a reply
/// may carry whatever the tool (listed from the code, so the document names each one).
fn error_code_description() -> String {
    use mesh_core::codec::RemoteError;
    let runtime = [
        (RemoteError::INVALID_REQUEST, "the request's body does not fit the tool's request type"),
        (RemoteError::SCHEMA_INVALID, "the request does not match the tool's request schema (a server validating schemas; the message names the first violation, paths only)"),
        (RemoteError::FORGED_SOURCE, "the request's x-source is not the caller's validated identity (a server enforcing identity)"),
        (RemoteError::TIMEOUT, "a timeout around the tool gave up"),
        (RemoteError::OVERLOADED, "the server shed the request before the tool ran"),
        (RemoteError::INTERNAL, "the tool panicked or its reply could not be serialized"),
    ];
    let listed: Vec<String> = runtime
        .iter()
        .map(|(code, meaning)| format!("{code}: {meaning}"))
        .collect();
    format!(
        "The error's code (x-mesh-status error): the tool's own, or one of the runtime's: {}",
        listed.join("; ")
    )
}

/// The headers of a tool's reply, a result or the tool's error.
pub(crate) fn reply_headers() -> Value {
    json!({
        "type": "object",
        "required": ["x-mesh-status"],
        "properties": {
            "x-mesh-status": {"type": "string", "enum": ["ok", "error"],
                "description": "ok: the body is the result; error: the tool failed, its code and message in the headers below and no result"},
            "x-mesh-error-code": {"type": "string", "description": error_code_description()},
            "x-mesh-error-message": {"type": "string", "description": "The tool's error message (x-mesh-status error)"},
        },
        "description": "AMQP headers; the property correlation_id is the request's."
    })
}
