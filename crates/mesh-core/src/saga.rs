//! A saga's transitions as events, for whoever traces what an event did (the console's
//! event page).
//!
//! A saga (the `meshbus-saga` library) built with `Saga::emit_transitions` emits, for each
//! event it applies to an instance, the event `<its prefix>saga.transition` (for a module
//! `module.<m>.saga.transition`): `x-causation-id` the applied event's id, `x-schema`
//! [`TRANSITION_FORMAT`], body [`SagaTransition`] as JSON, the instance's state after the
//! event. It is written to the outbox in the transaction that stores that state, so it is
//! published if and only if the state committed, once per applied event (a redelivery that
//! changes nothing emits nothing). The audit logger records it like any event; a reader finds
//! the transitions an event caused among its effects ([`is_transition_key`]).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The event name of a transition, after the saga's bus's own prefix.
pub const TRANSITION_EVENT: &str = "saga.transition";

/// The `x-schema` of a transition's body: the version of [`SagaTransition`]'s shape.
pub const TRANSITION_FORMAT: u32 = 1;

/// One applied event's effect on one saga instance: the instance after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SagaTransition {
    /// The saga's name.
    pub saga: String,
    /// The instance's correlation key.
    pub key: String,
    /// The instance's version after the event: 1 when it started, one more per event.
    pub version: u64,
    /// Whether the event completed the instance.
    #[serde(default)]
    pub completed: bool,
    /// The instance's state after the event, as the saga stores it.
    pub state: Value,
}

/// Whether `routing_key` is a saga's transition: `<origin>.<owner>.saga.transition`.
pub fn is_transition_key(routing_key: &str) -> bool {
    let mut words = routing_key.split('.');
    let (Some(_origin), Some(owner)) = (words.next(), words.next()) else {
        return false;
    };
    !owner.is_empty() && words.eq(TRANSITION_EVENT.split('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transition_key_is_an_owners_saga_transition() {
        assert!(is_transition_key("module.orders.saga.transition"));
        assert!(is_transition_key("mesh.billing.saga.transition"));
        for not in [
            "module.orders.saga.transition.more",
            "module.orders.saga",
            "module..saga.transition",
            "module.orders.order.transition",
            "saga.transition",
            "",
        ] {
            assert!(!is_transition_key(not), "{not}");
        }
    }

    #[test]
    fn a_transition_reads_back_and_defaults_what_is_absent() {
        let t = SagaTransition {
            saga: "order".into(),
            key: "7".into(),
            version: 2,
            completed: false,
            state: serde_json::json!({"stage": "AwaitingShipment"}),
        };
        let text = serde_json::to_string(&t).expect("serializes");
        assert_eq!(serde_json::from_str::<SagaTransition>(&text).ok(), Some(t));
        let sparse: SagaTransition =
            serde_json::from_str(r#"{"saga": "s", "key": "k", "version": 1, "state": null}"#)
                .expect("a sparse body reads");
        assert!(!sparse.completed);
    }
}
