//! The trusted-path rule: by which exchange, and under which key, a delivery may reach a
//! queue for mesh to take it for what it claims to be.
//!
//! The broker states in every `basic.deliver` the exchange the message was published to and
//! the key it was published under, which no publisher can set; an exchange-to-exchange
//! binding keeps both (a message published to `mesh.reply` and routed on into `mesh.events`
//! is delivered as from `mesh.reply`). So a consumer's events queue takes a delivery as an
//! event only when it came through `mesh.events` (where the broker checked its key against
//! the publisher's topic permission), through `mesh.retry` under the queue's own name (its
//! retry forwarders), or through the default exchange under the queue's own name (an
//! operator's re-drive or replay); a retry queue takes only what came through `mesh.retry`
//! under its own name; a serve queue takes only what came through `mesh.rpc`. Anything else is dead-lettered `foreign-path` (its `x-mesh-*`
//! headers dropped first), counted, and never handed to a handler.

use mesh_core::naming::{EVENTS_EXCHANGE, RETRY_EXCHANGE, RPC_EXCHANGE};

/// Which paths a queue's deliveries may come by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// Not checked here: queues of dead letters, the retired queue.
    Any,
    /// A serve queue: requests come only through `mesh.rpc`.
    Requests,
    /// A consumer's events queue (durable or ephemeral).
    Events,
    /// A retry queue, consumed by its forwarders.
    RetryCopies,
}

/// Why a delivery through `exchange` under `key` on `queue` may not be taken as what it
/// claims (`None` when it came by a path mesh sends by).
pub(crate) fn foreign(arrival: Arrival, queue: &str, exchange: &str, key: &str) -> Option<String> {
    let own_name = key == queue;
    let trusted = match arrival {
        Arrival::Any => true,
        Arrival::Events => {
            exchange == EVENTS_EXCHANGE
                || (own_name && (exchange == RETRY_EXCHANGE || exchange.is_empty()))
        }
        Arrival::RetryCopies => own_name && exchange == RETRY_EXCHANGE,
        Arrival::Requests => exchange == RPC_EXCHANGE,
    };
    if trusted {
        return None;
    }
    let allowed = match arrival {
        Arrival::Any => "",
        Arrival::Events => {
            "only through `mesh.events`, or through `mesh.retry` or the default exchange \
             under the queue's own name"
        }
        Arrival::RetryCopies => "only through `mesh.retry` under the queue's own name",
        Arrival::Requests => "only through `mesh.rpc`",
    };
    Some(format!(
        "delivered through {} under `{}`: {allowed}",
        if exchange.is_empty() {
            "the default exchange".to_owned()
        } else {
            format!("`{}`", mesh_core::text::escape(exchange))
        },
        mesh_core::text::escape(key),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const Q: &str = "n1.billing.events";

    #[test]
    fn an_events_queue_takes_only_mesh_events_and_its_own_name_on_retry_and_default() {
        assert_eq!(
            foreign(Arrival::Events, Q, "mesh.events", "module.a.b"),
            None
        );
        assert_eq!(foreign(Arrival::Events, Q, "mesh.retry", Q), None);
        assert_eq!(foreign(Arrival::Events, Q, "", Q), None);
        for (exchange, key) in [
            ("mesh.reply", "module.billing.invoice.paid"),
            ("mesh.events.dead", "module.billing.invoice.paid"),
            ("mesh.events.dead", Q),
            ("mesh.reply", Q),
            ("mesh.rpc", Q),
            ("mesh.logs", Q),
            ("x.umami.events", Q),
            ("amq.topic", "module.billing.invoice.paid"),
            // Another queue's name on the retry exchange or the default exchange.
            ("mesh.retry", "n1.umami.events"),
            ("", "n1.umami.events"),
        ] {
            let why = foreign(Arrival::Events, Q, exchange, key);
            assert!(why.is_some(), "{exchange} {key}");
        }
    }

    #[test]
    fn a_retry_queue_takes_only_its_own_name_on_mesh_retry() {
        let q = "n1.billing.events.retry.1s";
        assert_eq!(foreign(Arrival::RetryCopies, q, "mesh.retry", q), None);
        for exchange in ["", "mesh.events", "mesh.events.dead", "mesh.reply"] {
            assert!(foreign(Arrival::RetryCopies, q, exchange, q).is_some());
        }
        assert!(foreign(Arrival::RetryCopies, q, "mesh.retry", Q).is_some());
        assert_eq!(foreign(Arrival::Any, q, "mesh.reply", "x"), None);
        assert_eq!(
            foreign(Arrival::Requests, "serve.b.q", "mesh.rpc", "b.q"),
            None
        );
        for exchange in [
            "",
            "mesh.events",
            "mesh.events.dead",
            "mesh.reply",
            "mesh.retry",
        ] {
            assert!(foreign(Arrival::Requests, "serve.b.q", exchange, "serve.b.q").is_some());
        }
    }
}
