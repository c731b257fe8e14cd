//! Every exchange and queue name of the contract, derived from identities.
//!
//! Modules never see these names: the SDK derives them from the node, the module and the
//! subscription's kind, and transports declare them.

use std::time::Duration;

#[cfg(test)]
use crate::key::MAX_NAME_LEN;
use crate::key::{Name, Origin, ToolKey};

/// The durable topic exchange every event rides.
pub const EVENTS_EXCHANGE: &str = "mesh.events";
/// The durable topic exchange tool invocations ride.
pub const RPC_EXCHANGE: &str = "mesh.rpc";
/// The dead-letter exchange (topic): events set aside for inspection.
pub const DEAD_EXCHANGE: &str = "mesh.events.dead";
/// The retry exchange (topic): a consumer publishes a retry copy here under the name of its
/// retry queue (`<queue>.retry.<step>`), each retry queue is bound on its own name, and the
/// queue's retry forwarders publish a copy back through it, after its step, under the
/// consumer queue's name, on which that queue alone is bound. Routing retries through an exchange of mesh's own
/// (rather than the default exchange, which writes into any queue) lets the broker's topic
/// permissions keep each module to its own retry queues.
pub const RETRY_EXCHANGE: &str = "mesh.retry";
/// The logs exchange (topic, durable; its messages are transient): log records, never
/// events, under `<node>.<source>.<level>` (see `mesh_logs`). Every transport makes sure it
/// exists with the others, so no module needs `configure` permission to ship its logs.
pub const LOGS_EXCHANGE: &str = "mesh.logs";
/// The reply exchange (topic): a caller binds its server-named reply queue under its reply
/// key, `<user>.<queue>` ([`reply_key`]), and a server publishes the reply here under the
/// request's `reply_to`, that key. It spares servers the default exchange, which writes into
/// any queue, and, being a topic exchange whose keys start with the caller's broker user,
/// lets the access plan keep each user to binding its own replies (see `docs/SECURITY.md`).
pub const REPLY_EXCHANGE: &str = "mesh.replies";
/// The retired reply exchange (direct, bound on the reply queue's own name): anyone who
/// learned a caller's reply queue could bind under it and overhear its replies. Nothing
/// declares it any more; `mesh topology apply` deletes it, and until then a caller binds its
/// reply key there too and a server answers a caller of an earlier version (a `reply_to`
/// naming a queue, [`is_legacy_reply_to`]) there (see `docs/CONTRACT.md`, "From mesh.reply to
/// mesh.replies").
pub const RETIRED_REPLY_EXCHANGE: &str = "mesh.reply";
/// The retired dead-letter queue: mesh once declared it bound to [`DEAD_EXCHANGE`] on `#`,
/// and every reader of dead letters competed on it. Nothing declares it any more; an audit
/// logger that finds it unbinds it, stores what it holds and deletes it once empty (see
/// `docs/CONTRACT.md`, "What became of mesh.dead-letters").
pub const RETIRED_DEAD_QUEUE: &str = "mesh.dead-letters";
/// The node name reserved for shared queues (`shared.<module>.events`).
pub const SHARED_NODE: &str = "shared";
/// The node name reserved for schedule queues (`scheduled.<module>.events`).
pub const SCHEDULE_NODE: &str = "scheduled";
/// The module name of the audit logger.
pub const AUDIT_MODULE: &str = "audit-logger";

/// `<node>.<module>.events`: a module's durable queue on a node.
pub fn consumer_queue(node: &Name, module: &Name) -> String {
    format!("{node}.{module}.events")
}

/// `shared.<module>.events`: one queue for the workers of a module on every node.
pub fn shared_queue(module: &Name) -> String {
    format!("{SHARED_NODE}.{module}.events")
}

/// `scheduled.<module>.events`: a module's schedule queue. A scheduled event waits there and
/// on its retry ladder (`scheduled.<module>.events.retry.<hop>`) until it is due; its
/// module's buses that forward scheduled events take it from there and emit it (see
/// `docs/CONTRACT.md`, "Scheduled events"). It reaches the queue only through
/// [`RETRY_EXCHANGE`] under the queue's own name, which the access plan lets only its module
/// write.
pub fn schedule_queue(module: &Name) -> String {
    format!("{SCHEDULE_NODE}.{module}.events")
}

/// `<node>.audit-logger.events`: the audit logger's queue, bound to `#`.
pub fn audit_queue(node: &Name) -> String {
    format!("{node}.{AUDIT_MODULE}.events")
}

/// `shared.audit-logger.events`: the one queue that shared audit loggers (on any node)
/// consume as competing consumers, bound to `#`; [`shared_queue`] of the audit logger.
pub fn shared_audit_queue() -> String {
    format!("{SHARED_NODE}.{AUDIT_MODULE}.events")
}

/// `shared.audit-logger.dead`: the shared audit loggers' one queue of dead letters, bound to
/// [`DEAD_EXCHANGE`] on `#`, which they consume as competing consumers (the shared
/// counterpart of [`audit_dead_queue`]).
pub fn shared_audit_dead_queue() -> String {
    format!("{SHARED_NODE}.{AUDIT_MODULE}.dead")
}

/// The node names the contract keeps for queues of its own, with what for: a node so named
/// would declare `<node>.<module>.events` over a queue of the contract's.
pub const CONTRACT_NODES: [(&str, &str); 2] = [
    (SHARED_NODE, "shared queues"),
    (SCHEDULE_NODE, "schedule queues"),
];

/// `text` as a node name: a valid [`Name`] that is none of [`CONTRACT_NODES`] (`shared`,
/// `scheduled`), which fail with [`KeyError::ReservedNode`](crate::KeyError::ReservedNode).
/// Every node the runtime or the audit logger runs as is checked here.
pub fn node_name(text: &str) -> Result<Name, crate::KeyError> {
    let name = Name::parse(text)?;
    match CONTRACT_NODES
        .iter()
        .find(|(node, _)| *node == name.as_str())
    {
        Some((node, purpose)) => Err(crate::KeyError::ReservedNode {
            name: (*node).to_owned(),
            purpose,
        }),
        None => Ok(name),
    }
}

/// Node names a consumer queue never carries, because the broker's names start with them:
/// `mesh.…` (the contract's own queues), `serve.…` (tool queues) and `amq.…` (the server's).
pub const RESERVED_NODES: [&str; 3] = ["mesh", "serve", "amq"];

/// Whether `queue` is a mesh consumer queue: `<node>.<module>.events` (the audit logger's
/// `<node>.audit-logger.events` included) or `shared.<module>.events`, where node and module
/// are valid [`Name`]s and the node is none of [`RESERVED_NODES`]. A retry queue
/// (`<queue>.retry.<step>`), a retired delay queue, a serve queue, a queue of dead letters or any other name is
/// not. This is where a re-driven dead letter may go.
pub fn is_consumer_queue(queue: &str) -> bool {
    let mut words = queue.split('.');
    match (words.next(), words.next(), words.next(), words.next()) {
        (Some(node), Some(module), Some("events"), None) => {
            !RESERVED_NODES.contains(&node)
                && Name::parse(node).is_ok()
                && Name::parse(module).is_ok()
        }
        _ => false,
    }
}

/// `<node>.audit-logger.dead`: the audit logger's own durable queue of dead letters, bound
/// to [`DEAD_EXCHANGE`] on `#`, so every logger records every dead letter, and one that is
/// down finds them waiting.
pub fn audit_dead_queue(node: &Name) -> String {
    format!("{node}.{AUDIT_MODULE}.dead")
}

/// The broker user that owns the keys `<origin>.<owner>.…` under the access plan:
/// `<prefix><origin>.<owner>`, e.g. `module.umami`, `node.n1`, `mesh.billing-ctx`, or
/// `acme/module.umami` with the prefix `acme/` (users are global to a broker, so deployments
/// sharing one tell theirs apart by a prefix). With identity enforced, an event under
/// `<origin>.<owner>.…` is believed only from this user (see `docs/SECURITY.md`).
pub fn owner_user(prefix: &str, origin: Origin, owner: &Name) -> String {
    format!("{prefix}{origin}.{owner}")
}

/// The broker user of the audit logger of `node` under the access plan:
/// `<prefix>audit-logger.<node>`.
pub fn audit_user(prefix: &str, node: &Name) -> String {
    format!("{prefix}{AUDIT_MODULE}.{node}")
}

/// The operator's broker user under the access plan: `<prefix>operator`. It declares the
/// topology and re-drives dead letters (through the default exchange).
pub fn operator_user(prefix: &str) -> String {
    format!("{prefix}operator")
}

/// `<user>.<queue>`: the key a caller's replies travel under on [`REPLY_EXCHANGE`], its
/// broker user followed by its server-named reply queue, e.g. `module.billing.amq.gen-Xy`.
/// The access plan lets a user bind on `mesh.replies` only under its own name, so no other
/// user can bind a queue under it.
pub fn reply_key(user: &str, queue: &str) -> String {
    format!("{user}.{queue}")
}

/// Whether a request's `reply_to` is a caller's of an earlier version: the name of its reply
/// queue (server-named, `amq.…`), bound on [`RETIRED_REPLY_EXCHANGE`], rather than a
/// [`reply_key`].
pub fn is_legacy_reply_to(reply_to: &str) -> bool {
    reply_to.starts_with("amq.")
}

/// `serve.<key>`: the shared, durable queue the servers of a tool compete on.
pub fn serve_queue(tool: &ToolKey) -> String {
    format!("serve.{tool}")
}

/// `<queue>.retry.<step>`: the retry queue of one retry step, e.g. `a.b.events.retry.5s`,
/// bound to [`RETRY_EXCHANGE`] on its own name.
pub fn retry_queue(queue: &str, delay: Duration) -> String {
    format!("{queue}.retry.{}", delay_label(delay))
}

/// Whether `name` is a retired delay queue, `<queue>.delay.<step>` of a consumer queue: mesh
/// once published retry copies to these through the default exchange. Nothing publishes to
/// them any more; what they hold still expires back into its queue, and `mesh topology apply`
/// deletes one once it is empty (see `docs/CONTRACT.md`, "From delay queues to retry
/// queues").
pub fn is_retired_delay_queue(name: &str) -> bool {
    match name.rsplit_once(".delay.") {
        Some((queue, step)) => {
            is_consumer_queue(queue)
                && !step.is_empty()
                && !step.contains('.')
                && step.bytes().all(|b| b.is_ascii_alphanumeric())
        }
        None => false,
    }
}

/// A short, exact label of a delay: `500ms`, `5s`, `2m`, `1h`.
pub fn delay_label(delay: Duration) -> String {
    let ms = delay.as_millis();
    if ms > 0 && ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms > 0 && ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms > 0 && ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> Name {
        Name::parse(s).unwrap()
    }

    #[test]
    fn the_contracts_node_names_are_refused_with_a_typed_error() {
        assert_eq!(node_name("n1"), Ok(name("n1")));
        assert_eq!(
            node_name("shared"),
            Err(crate::KeyError::ReservedNode {
                name: "shared".into(),
                purpose: "shared queues"
            })
        );
        let err = node_name("scheduled").unwrap_err();
        assert!(
            matches!(err, crate::KeyError::ReservedNode { .. }),
            "{err:?}"
        );
        assert_eq!(
            err.to_string(),
            "node name `scheduled` is reserved for schedule queues"
        );
        // Case matters, as in queue names: `Shared` is not reserved.
        assert_eq!(node_name("Shared"), Ok(name("Shared")));
        assert!(matches!(
            node_name("a.b"),
            Err(crate::KeyError::DottedName { .. })
        ));
        // The shared audit logger's queues are what a node `shared` would have declared.
        assert_eq!(shared_audit_queue(), "shared.audit-logger.events");
        assert_eq!(shared_audit_queue(), shared_queue(&name(AUDIT_MODULE)));
        assert_eq!(shared_audit_dead_queue(), "shared.audit-logger.dead");
        assert!(is_consumer_queue(&shared_audit_queue()));
        assert!(!is_consumer_queue(&shared_audit_dead_queue()));
    }

    #[test]
    fn users_follow_the_access_plan() {
        assert_eq!(
            owner_user("", Origin::Module, &name("umami")),
            "module.umami"
        );
        assert_eq!(
            owner_user("acme/", Origin::Node, &name("n1")),
            "acme/node.n1"
        );
        assert_eq!(owner_user("", Origin::Mesh, &name("ctx")), "mesh.ctx");
        assert_eq!(audit_user("", &name("n1")), "audit-logger.n1");
        assert_eq!(operator_user("p-"), "p-operator");
    }

    #[test]
    fn names_follow_the_contract() {
        assert_eq!(
            consumer_queue(&name("anchor"), &name("umami")),
            "anchor.umami.events"
        );
        assert_eq!(shared_queue(&name("umami")), "shared.umami.events");
        assert_eq!(schedule_queue(&name("umami")), "scheduled.umami.events");
        assert_eq!(audit_queue(&name("anchor")), "anchor.audit-logger.events");
        assert_eq!(
            audit_dead_queue(&name("anchor")),
            "anchor.audit-logger.dead"
        );
        assert_eq!(
            serve_queue(&ToolKey::parse("umami.sites.create").unwrap()),
            "serve.umami.sites.create"
        );
        assert_eq!(
            retry_queue("anchor.umami.events", Duration::from_secs(5)),
            "anchor.umami.events.retry.5s"
        );
    }

    #[test]
    fn consumer_queues_are_told_from_every_other_queue() {
        for queue in [
            "anchor.umami.events",
            "shared.umami.events",
            "anchor.audit-logger.events",
            "n1.billing-v2.events",
        ] {
            assert!(is_consumer_queue(queue), "{queue}");
        }
        for queue in [
            "serve.umami.events",
            "serve.x",
            "serve.umami.sites.create",
            "mesh.dead-letters",
            "mesh.x.events",
            "amq.gen.events",
            "anchor.umami.events.delay.5s",
            "anchor.audit-logger.dead",
            "anchor.umami",
            "umami.events",
            ".umami.events",
            "anchor..events",
            "anchor.um*mi.events",
            "anchor.um#.events",
            "anchor.umami.events.",
            "anchor.umami.Events",
            "anchor.um\nami.events",
            "",
            "foreign-queue",
        ] {
            assert!(!is_consumer_queue(queue), "{queue:?}");
        }
        let long = "x".repeat(MAX_NAME_LEN + 1);
        assert!(!is_consumer_queue(&format!("{long}.m.events")));
    }

    #[test]
    fn retired_delay_queues_are_those_of_consumer_queues() {
        for queue in [
            "anchor.umami.events.delay.5s",
            "shared.umami.events.delay.1500ms",
            "anchor.audit-logger.events.delay.2m",
        ] {
            assert!(is_retired_delay_queue(queue), "{queue}");
        }
        for queue in [
            "anchor.umami.events.retry.5s",
            "anchor.umami.events.delay.",
            "anchor.umami.events.delay.5.s",
            "serve.umami.events.delay.5s",
            "mesh.dead-letters",
            "anchor.umami.events",
            "foreign.delay.5s",
            "anchor.umami.events.delay.5s\n",
        ] {
            assert!(!is_retired_delay_queue(queue), "{queue:?}");
        }
    }

    #[test]
    fn a_reply_key_starts_with_its_user_and_a_queue_name_is_of_old() {
        let key = reply_key("acme/module.billing", "amq.gen-Xy_z");
        assert_eq!(key, "acme/module.billing.amq.gen-Xy_z");
        assert!(!is_legacy_reply_to(&key));
        assert!(is_legacy_reply_to("amq.gen-Xy_z"));
    }

    #[test]
    fn delay_labels_are_exact() {
        assert_eq!(delay_label(Duration::from_millis(1500)), "1500ms");
        assert_eq!(delay_label(Duration::from_secs(120)), "2m");
        assert_eq!(delay_label(Duration::from_secs(7200)), "2h");
        assert_eq!(delay_label(Duration::from_millis(250)), "250ms");
    }
}
