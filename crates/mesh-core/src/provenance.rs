//! A dead letter's provenance: whether what it claims (the queue that gave up on it, and so
//! where a re-drive sends it, and the original publisher in `x-mesh-user`) may be believed.
//!
//! Under the access plan an identity may publish to `mesh.events.dead` only under the names of
//! its own queues that dead-letter (`<node>.<module>.events`, `shared.<module>.events`, their
//! retry queues, `serve.<owner>.…`), and the
//! broker validates every `user-id`. So a dead letter mesh made (it carries
//! `x-mesh-dead-reason`) is believed when its `user-id` is the owner of the queue its
//! `x-mesh-dead-queue` names (for a serve queue, the module, context or node it serves for);
//! one the broker made (no mesh reason, an `x-death` entry: a
//! delivery limit, an expiry) keeps the original publisher's `user-id`, and is believed when
//! the key it was delivered under is its queue's own name or a key no identity may publish a
//! dead letter under (only the broker, dead-lettering, and the operator can). Anything else
//! is untrusted: stored and shown as such, never re-driven without stripping its claims.

use crate::codec::{read_dead_letter, DEAD_KEY, DEAD_REASON};
use crate::key::{Name, Origin};
use crate::naming::{self, AUDIT_MODULE, SHARED_NODE};
use crate::wire::{HeaderValue, WireMessage};

/// The broker user owning the consumer queue `queue` (or one of its retry queues
/// `<queue>.retry.<step>`) under the access plan (with `user_prefix`):
/// `<prefix>module.<module>` for `<node>.<module>.events` and `shared.<module>.events`,
/// `<prefix>audit-logger.<node>` for `<node>.audit-logger.events`. `None` for any other name
/// ([`naming::is_consumer_queue`]).
pub fn queue_owner_user(user_prefix: &str, queue: &str) -> Option<String> {
    let queue = match queue.split_once(".events.retry.") {
        Some((base, step)) if !step.is_empty() && !step.contains('.') => {
            &queue[..base.len() + ".events".len()]
        }
        _ => queue,
    };
    if !naming::is_consumer_queue(queue) {
        return None;
    }
    let mut words = queue.split('.');
    let node = words.next()?;
    let module = Name::parse(words.next()?).ok()?;
    if module.as_str() == AUDIT_MODULE {
        if node == SHARED_NODE {
            return None;
        }
        return Some(naming::audit_user(user_prefix, &Name::parse(node).ok()?));
    }
    Some(naming::owner_user(user_prefix, Origin::Module, &module))
}

/// Whether an identity may publish a dead letter under `key` under the access plan (its topic
/// write permission on `mesh.events.dead`): the name of a queue that dead-letters, a consumer
/// queue `<word>.<module>.events`, one of its retry queues `….retry.<step>`, or a serve queue
/// `serve.…`.
fn identity_may_write(key: &str) -> bool {
    let words: Vec<&str> = key.split('.').collect();
    match words.as_slice() {
        ["serve", ..] => true,
        [a, b, "events"] | [a, b, "events", "retry", _] => !a.is_empty() && !b.is_empty(),
        _ => false,
    }
}

/// Whether `user` owns the serve queue `serve.<owner>.<tool>`: the module, context or node
/// named `<owner>` (each may serve its own tools).
fn serves(user_prefix: &str, queue: &str, user: &str) -> bool {
    let Some(owner) = queue
        .strip_prefix("serve.")
        .and_then(|rest| rest.split('.').next())
        .and_then(|owner| Name::parse(owner).ok())
    else {
        return false;
    };
    [Origin::Module, Origin::Mesh, Origin::Node]
        .into_iter()
        .any(|origin| naming::owner_user(user_prefix, origin, &owner) == user)
}

/// Whether a dead letter's claims may be believed (see the [module docs](self)), its users
/// named with `user_prefix` (the access plan's `[access] user_prefix`, `""` for none).
/// Reads the key it was delivered under from [`DEAD_KEY`] (set by the receiving transport),
/// else its routing key.
pub fn dead_letter_trusted(message: &WireMessage, user_prefix: &str) -> bool {
    let headers = &message.properties.headers;
    let Some(note) = read_dead_letter(message) else {
        return false;
    };
    let mesh_made = headers
        .get(DEAD_REASON)
        .and_then(HeaderValue::as_str)
        .and_then(crate::DeadReason::parse)
        .is_some();
    if mesh_made {
        let Some(user) = message.properties.user_id.as_deref() else {
            return false;
        };
        return match queue_owner_user(user_prefix, &note.queue) {
            Some(owner) => owner == user,
            None => serves(user_prefix, &note.queue, user),
        };
    }
    let delivered_key = headers
        .get(DEAD_KEY)
        .and_then(HeaderValue::as_str)
        .unwrap_or(&message.routing_key);
    naming::is_consumer_queue(&note.queue)
        && (delivered_key == note.queue || !identity_may_write(delivered_key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{mark_dead, DeadLetterNote, BROKER_DEATH};
    use crate::{DeadReason, Timestamp};

    fn mesh_made(queue: &str, user: &str, key: &str) -> WireMessage {
        let mut message = WireMessage::new("module.shop.order.placed", &b"{}"[..]);
        message.properties.user_id = Some("module.shop".into());
        mark_dead(
            &mut message,
            &DeadLetterNote {
                reason: DeadReason::Permanent,
                attempts: 1,
                last_error: None,
                queue: queue.into(),
                time: Timestamp::now(),
            },
        );
        message.properties.user_id = Some(user.into());
        message
            .properties
            .headers
            .insert(DEAD_KEY.into(), HeaderValue::Str(key.into()));
        message
    }

    fn broker_made(queue: &str, key: &str) -> WireMessage {
        let mut message = WireMessage::new("module.shop.order.placed", &b"{}"[..]);
        message.properties.user_id = Some("module.shop".into());
        let mut death = crate::wire::Headers::new();
        death.insert("reason".into(), HeaderValue::Str("delivery_limit".into()));
        death.insert("queue".into(), HeaderValue::Str(queue.into()));
        message.properties.headers.insert(
            BROKER_DEATH.into(),
            HeaderValue::Array(vec![HeaderValue::Table(death)]),
        );
        message
            .properties
            .headers
            .insert(DEAD_KEY.into(), HeaderValue::Str(key.into()));
        message
    }

    #[test]
    fn owners_of_consumer_queues() {
        assert_eq!(
            queue_owner_user("", "n1.billing.events").as_deref(),
            Some("module.billing")
        );
        assert_eq!(
            queue_owner_user("acme/", "shared.billing.events").as_deref(),
            Some("acme/module.billing")
        );
        assert_eq!(
            queue_owner_user("", "n1.audit-logger.events").as_deref(),
            Some("audit-logger.n1")
        );
        assert_eq!(queue_owner_user("", "serve.billing.pay"), None);
        assert_eq!(
            queue_owner_user("", "n1.billing.events.retry.1s").as_deref(),
            Some("module.billing")
        );
        assert_eq!(queue_owner_user("", "n1.billing.events.retry."), None);
        assert_eq!(queue_owner_user("", "n1.billing.events.retry.1s.x"), None);
    }

    #[test]
    fn a_mesh_made_dead_letter_is_believed_from_its_queue_owner_only() {
        let genuine = mesh_made("n1.billing.events", "module.billing", "n1.billing.events");
        assert!(dead_letter_trusted(&genuine, ""));
        assert!(!dead_letter_trusted(&genuine, "acme/"));
        let forged = mesh_made("n1.billing.events", "module.umami", "n1.umami.events");
        assert!(!dead_letter_trusted(&forged, ""));
        let mut anonymous = genuine.clone();
        anonymous.properties.user_id = None;
        assert!(!dead_letter_trusted(&anonymous, ""));
        // A serve queue's dead letter (a request by a foreign path) from its server.
        let served = mesh_made("serve.billing.pay", "module.billing", "serve.billing.pay");
        assert!(dead_letter_trusted(&served, ""));
        let foreign = mesh_made("serve.billing.pay", "module.umami", "serve.umami.x");
        assert!(!dead_letter_trusted(&foreign, ""));
    }

    #[test]
    fn a_broker_made_dead_letter_is_believed_under_a_key_no_other_module_writes() {
        // Under the queue's own name (a retry copy, a re-driven one), or the original key.
        assert!(dead_letter_trusted(
            &broker_made("n1.billing.events", "n1.billing.events"),
            ""
        ));
        assert!(dead_letter_trusted(
            &broker_made("n1.billing.events", "module.shop.order.placed"),
            ""
        ));
        // Published by umami under its own queue's name, naming billing's queue.
        assert!(!dead_letter_trusted(
            &broker_made("n1.billing.events", "n1.umami.events"),
            ""
        ));
        assert!(!dead_letter_trusted(
            &broker_made("n1.billing.events", "serve.umami.x"),
            ""
        ));
        assert!(!dead_letter_trusted(
            &broker_made("serve.billing.pay", "module.shop.order.placed"),
            ""
        ));
        // No annotation at all.
        let plain = WireMessage::new("n1.umami.events", &b"{}"[..]);
        assert!(!dead_letter_trusted(&plain, ""));
    }
}
