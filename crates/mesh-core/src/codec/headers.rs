//! The header names mesh reads and writes (the contract's and mesh's own bookkeeping), and
//! which of them a message may carry from whom.

use crate::wire::Headers;

/// `x-event-id`: the event's unique id.
pub const EVENT_ID: &str = "x-event-id";
/// `x-source`: the emitter.
pub const SOURCE: &str = "x-source";
/// `x-node`: the node it was emitted from.
pub const NODE: &str = "x-node";
/// `x-time`: emit time, RFC 3339.
pub const TIME: &str = "x-time";
/// `x-causation-id`: what caused it.
pub const CAUSATION_ID: &str = "x-causation-id";
/// `x-schema`: the version of the body's shape.
pub const SCHEMA: &str = "x-schema";
/// `content-type` as a header, accepted from foreign publishers that do not set the property.
pub const CONTENT_TYPE_HEADER: &str = "content-type";
/// The only content type of an event body.
pub const CONTENT_TYPE_JSON: &str = "application/json";

/// `x-mesh-attempts`: how many times handlers already failed on this event (retry ladder).
pub const ATTEMPTS: &str = "x-mesh-attempts";
/// `x-mesh-user`: on a copy the runtime publishes on someone else's behalf (a retry copy, a
/// dead letter, a re-driven dead letter), the broker-validated user of the original, since
/// the copy's own `user-id` must be its publisher's ([`hand_over_user`](crate::codec::hand_over_user), [`validated_user`](crate::codec::validated_user)).
pub const USER: &str = "x-mesh-user";
/// `x-mesh-replayed`: on a stored event the audit store replays into one consumer's queue
/// (`mesh audit replay`), when it was replayed (RFC 3339). Believed only on a delivery
/// through the default exchange, like every `x-mesh-*` header ([`mesh_headers_trusted_from`]);
/// read with [`replayed_at`](crate::codec::replayed_at).
pub const REPLAYED: &str = "x-mesh-replayed";
/// `x-mesh-dead-reason`: why the event was dead-lettered.
pub const DEAD_REASON: &str = "x-mesh-dead-reason";
/// `x-mesh-dead-attempts`: how many attempts were made.
pub const DEAD_ATTEMPTS: &str = "x-mesh-dead-attempts";
/// `x-mesh-dead-error`: the last error.
pub const DEAD_ERROR: &str = "x-mesh-dead-error";
/// `x-mesh-dead-queue`: the queue of the consumer that gave up.
pub const DEAD_QUEUE: &str = "x-mesh-dead-queue";
/// `x-mesh-dead-time`: when it was dead-lettered, RFC 3339.
pub const DEAD_TIME: &str = "x-mesh-dead-time";
/// `x-mesh-dead-key`: on a dead letter as a reader received it, the routing key it was
/// delivered under on `mesh.events.dead` (before the transport restored its own key from
/// `x-mesh-routing-key`). Set by the receiving transport, which replaces any value a
/// publisher sent: what provenance is judged on ([`dead_letter_trusted`](crate::provenance::dead_letter_trusted)).
pub const DEAD_KEY: &str = "x-mesh-dead-key";
/// `x-death`: the broker's own dead-letter history (delivery limit, rejection, expiry).
pub const BROKER_DEATH: &str = "x-death";

/// `x-mesh-status`: `ok` or `error` on an RPC reply.
pub const REPLY_STATUS: &str = "x-mesh-status";
/// `x-mesh-error-code`: the remote error's code.
pub const REPLY_ERROR_CODE: &str = "x-mesh-error-code";
/// `x-mesh-error-message`: the remote error's message.
pub const REPLY_ERROR_MESSAGE: &str = "x-mesh-error-message";
/// `x-mesh-tool`: the tool key a request was sent to.
pub const TOOL: &str = "x-mesh-tool";
/// `x-mesh-due`: on a scheduled event while it waits (in its module's schedule queue and on
/// that queue's retry ladder, all through `mesh.retry`), when it is due, RFC 3339. Removed
/// before the event is emitted to `mesh.events`, where no `x-mesh-*` header is believed.
pub const DUE: &str = "x-mesh-due";
/// `x-due`: on an event a schedule emitted (a module's schedule forwarder, or the outbox's
/// relay for a scheduled row), the time it was due, RFC 3339 (its `x-time` is the same). Set
/// by the runtime only: an emit may not set it ([`is_reserved_header`]). It says the event was
/// scheduled; a reader shows it (the console's event page), nothing decides on it.
pub const SCHEDULED_DUE: &str = "x-due";
/// `x-mesh-routing-key`: a message's own routing key while it travels under another one
/// (a retry copy through a retry queue, a re-driven dead letter sent straight to a queue:
/// the broker rewrites the key on both paths). A transport restores it on delivery.
pub const ROUTING_KEY: &str = "x-mesh-routing-key";

/// `traceparent`: the W3C trace context of the span that emitted or called (an extension of
/// the wire contract; optional, carried in `extra_headers` so every consumer passes it on).
pub const TRACEPARENT: &str = "traceparent";
/// `tracestate`: the W3C vendor-specific trace state that goes with `traceparent`.
pub const TRACESTATE: &str = "tracestate";
/// The W3C trace context headers, the only ones a trace propagator may write.
pub const TRACE_CONTEXT_HEADERS: [&str; 2] = [TRACEPARENT, TRACESTATE];

/// The header names the wire contract defines; everything else lands in `extra_headers`.
/// [`encode`](crate::codec::encode) writes them from the envelope, over any same-named extra
/// header.
pub const CONTRACT_HEADERS: [&str; 7] = [
    EVENT_ID,
    SOURCE,
    NODE,
    TIME,
    CAUSATION_ID,
    SCHEMA,
    CONTENT_TYPE_HEADER,
];

/// Whether a header is the runtime's alone, so an emitter may not set it: the contract
/// headers (`x-event-id`, `x-source`, `x-node`, `x-time`, `x-causation-id`, `x-schema`,
/// `content-type`), every `x-mesh-*` header, the W3C trace context (`traceparent`,
/// `tracestate`, written from the emitting span), the broker's `x-death` and
/// `x-delivery-count`, and `x-due` (a schedule's). Names are compared ignoring ASCII case, so a look-alike is refused
/// too.
pub fn is_reserved_header(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    is_mesh_header(&lower)
        || CONTRACT_HEADERS.contains(&lower.as_str())
        || TRACE_CONTEXT_HEADERS.contains(&lower.as_str())
        || lower == BROKER_DEATH
        || lower == DELIVERY_COUNT
        || lower == SCHEDULED_DUE
}

/// `x-delivery-count`: how many times a quorum queue delivered the message before.
pub const DELIVERY_COUNT: &str = "x-delivery-count";

/// Whether a header is one of mesh's own bookkeeping headers (`x-mesh-*`, ignoring ASCII
/// case).
pub fn is_mesh_header(name: &str) -> bool {
    const MESH_PREFIX: &[u8] = b"x-mesh-";
    name.as_bytes()
        .get(..MESH_PREFIX.len())
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case(MESH_PREFIX))
}

/// Whether mesh's own headers on a message delivered through `exchange` can be mesh's.
///
/// mesh never puts an `x-mesh-*` header on what it publishes to `mesh.events` or
/// `mesh.rpc` (an emit or a call refuses them, [`is_reserved_header`]); it sets them only on
/// a retry copy (published to `mesh.retry` under its retry queue's name, which the broker
/// dead-letters back through `mesh.retry`), a reply (through `mesh.replies`, or the retired
/// `mesh.reply` to a caller of an earlier version), a re-driven dead
/// letter (through the default exchange, by an operator) and the dead letters it publishes to
/// `mesh.events.dead`. So they are believed on a delivery from one of those four exchanges
/// (`mesh.retry`, `mesh.replies` or `mesh.reply`, `""`, `mesh.events.dead`), and on no other: there, anyone
/// who could publish could have written them. Who may write to the four is the broker's
/// permissions' business: with the access plan (`docs/SECURITY.md`), a module writes only
/// its own retry queues' keys to `mesh.retry`, and no module writes to the default exchange.
pub fn mesh_headers_trusted_from(exchange: &str) -> bool {
    exchange.is_empty()
        || exchange == crate::naming::DEAD_EXCHANGE
        || exchange == crate::naming::RETRY_EXCHANGE
        || exchange == crate::naming::REPLY_EXCHANGE
        || exchange == crate::naming::RETIRED_REPLY_EXCHANGE
}

/// Removes every `x-mesh-*` header from a message delivered through `exchange` when mesh
/// cannot have set it there ([`mesh_headers_trusted_from`]); returns how many it removed.
///
/// Transports call it on every delivery before anything reads a header, so a publisher to
/// `mesh.events` can neither change the key a handler sees (`x-mesh-routing-key`), skip
/// retries (`x-mesh-attempts`) nor give the dead-letter copy its own annotations
/// (`x-mesh-dead-*`): they are dropped, as unknown headers of no meaning would be.
pub fn remove_unearned_mesh_headers(exchange: &str, headers: &mut Headers) -> usize {
    if mesh_headers_trusted_from(exchange) {
        return 0;
    }
    let before = headers.len();
    headers.retain(|name, _| !is_mesh_header(name));
    before - headers.len()
}
