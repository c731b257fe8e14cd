//! The conformance suite: scenarios written against the SDK and the [`Harness`]
//! abstraction only, so every transport runs the very same test code.
//!
//! A transport's test file instantiates the suite with [`suite!`] and a harness factory;
//! each scenario gets a fresh harness (an isolated broker: a new in-memory broker, or a
//! new vhost on RabbitMQ). Timings use real time with short delays, since a suite on a
//! paused clock cannot run against a broker.

use std::sync::Arc;

use futures::future::BoxFuture;
use mesh_core::Transport;

pub mod scenarios;

/// Who a transport of the suite connects as. On a broker with users (RabbitMQ), each gets
/// the user the access plan gives it for [`SUITE_NODE`] and [`SUITE_MODULES`], with exactly
/// the planned permissions; a broker without users ignores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role<'a> {
    /// A module of [`SUITE_MODULES`].
    Module(&'a str),
    /// The audit logger of [`SUITE_NODE`].
    AuditLogger,
    /// The operator: transport-level checks that play several modules at once.
    Operator,
}

/// The node every scenario runs on.
pub const SUITE_NODE: &str = "n1";

/// The suite's modules and the patterns each binds: the `[[modules]]` of the suite's spec
/// file, from which the access plan gives each module its user. A scenario that binds a
/// pattern not listed here is refused by the broker.
pub const SUITE_MODULES: &[(&str, &[&str])] = &[
    // An ephemeral listener binds like a consumer queue: its patterns are in the spec too.
    ("src", &["module.src.note.#"]),
    ("client", &[]),
    ("calc", &[]),
    ("worker", &["module.src.job.#", "module.src.task.#"]),
    (
        "m",
        &[
            "module.src.a.*",
            "module.src.b.#",
            "module.src.flaky.#",
            "module.src.#",
            "module.src.thing.made",
        ],
    ),
    ("sink", &["module.src.#"]),
];

/// An isolated broker the suite can connect to and inspect.
pub trait Harness: Send + Sync + 'static {
    /// A new connection (transport) to this harness's broker, as `role`.
    fn transport(&self, role: Role<'_>) -> BoxFuture<'_, Arc<dyn Transport>>;

    /// The names of the queues the broker holds now.
    fn queues(&self) -> BoxFuture<'_, Vec<String>>;

    /// Messages in `queue` now, ready and unacknowledged; `None` if there is no such queue.
    fn messages<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Option<u64>>;
}

/// The in-memory transport's harness: one [`mesh_memory::MemoryBroker`] per scenario.
#[derive(Debug, Clone, Default)]
pub struct MemoryHarness {
    broker: mesh_memory::MemoryBroker,
}

impl MemoryHarness {
    /// A harness on a new broker.
    pub fn new() -> MemoryHarness {
        MemoryHarness::default()
    }
}

impl Harness for MemoryHarness {
    fn transport(&self, _role: Role<'_>) -> BoxFuture<'_, Arc<dyn Transport>> {
        let transport: Arc<dyn Transport> = Arc::new(self.broker.transport());
        Box::pin(std::future::ready(transport))
    }

    fn queues(&self) -> BoxFuture<'_, Vec<String>> {
        Box::pin(std::future::ready(self.broker.queue_names()))
    }

    fn messages<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Option<u64>> {
        let ready = self.broker.queue_depth(queue);
        let unacked = self.broker.unacked(queue);
        let total = ready.zip(unacked).map(|(r, u)| (r + u) as u64);
        Box::pin(std::future::ready(total))
    }
}

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
