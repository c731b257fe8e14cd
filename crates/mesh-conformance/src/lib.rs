//! The conformance suite: scenarios written against the SDK and the [`Harness`]
//! abstraction only, so every transport runs the very same test code.
//!
//! A transport's test file instantiates the suite with [`suite!`] and a harness factory;
//! each scenario gets a fresh harness (an isolated broker: a new in-memory broker, or a
//! new vhost on RabbitMQ). Timings use real time with short delays, since a suite on a
//! paused clock cannot run against a broker.

mod harness;
mod kit;
pub mod scenarios;

pub use harness::{Harness, MemoryHarness, Role, SUITE_MODULES, SUITE_NODE};

/// Instantiates every scenario as a `#[tokio::test]`, each with a harness from `$make`
/// (an expression evaluating to a future of a [`Harness`]).
#[macro_export]
macro_rules! suite {
    ($make:expr) => {
        $crate::suite!(@tests $make;
            competing_consumers_get_each_event_once,
            handlers_of_one_module_share_one_queue,
            a_handler_that_fails_twice_is_called_three_times,
            a_handler_that_always_fails_is_dead_lettered_after_max_attempts,
            a_permanent_error_dead_letters_after_one_call,
            an_undecodable_message_is_dead_lettered,
            an_unread_schema_version_is_dead_lettered,
            an_emit_under_another_module_is_refused,
            an_ephemeral_listener_sees_only_later_events_and_leaves_nothing,
            drain_waits_for_an_in_flight_handler,
            drain_confirms_emits_nobody_awaited,
            dedup_runs_the_effect_once,
            rpc_round_trip_and_remote_error,
            rpc_timeout_and_no_server,
            shared_workers_on_two_nodes_compete_on_one_queue,
            ack_all_settles_exactly_the_deliveries_given
        );
    };
    (@tests $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let harness = $make.await;
                $crate::scenarios::$name(&harness).await;
            }
        )*
    };
}
