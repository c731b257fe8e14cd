//! What a scenario runs against: the [`Harness`] a transport provides, who it connects as,
//! and the in-memory transport's harness.

use std::sync::Arc;

use futures::future::BoxFuture;
use mesh_core::Transport;

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
