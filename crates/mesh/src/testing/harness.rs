//! [`Harness`]: where the modules under test meet, how each is started on a recorded
//! transport, and their drain.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use mesh_core::{DeadQueue, QueueSpec, SubscriptionSpec, Transport};
use tokio::sync::OnceCell;
use tokio::task::JoinHandle;

use super::record::{Log, Record};
use super::transport::RecordingTransport;
use crate::bus::builder::BusBuilder;
use crate::bus::Bus;
use crate::error::Error;
use crate::schedule::clock::Clock;

/// How long an assertion waits by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

/// The node every module of a harness runs on, unless set with [`Harness::node`].
pub const DEFAULT_NODE: &str = "test";

/// Where the harness's modules meet.
enum Broker {
    Memory(mesh_memory::MemoryBroker),
    #[cfg(feature = "amqp")]
    Amqp(Box<mesh_amqp::AmqpOptions>),
}

/// Starts modules' buses on one broker, records what they do, and asserts on it.
///
/// Every module gets a transport of its own on the harness's broker (a connection of its
/// own on RabbitMQ), recorded under the name it was started with. Assertions look at
/// everything recorded since the harness was made, not only from the call on (as
/// MassTransit's `Published.Any<T>()` does). [`records`](Harness::records) is the whole
/// record, for counting or for asserting that something did not happen once something
/// after it did.
pub struct Harness {
    broker: Broker,
    pub(super) log: Arc<Log>,
    node: String,
    pub(super) timeout: Duration,
    /// Every bus started, in order, with the name it was started under: drained by
    /// [`Harness::drain`].
    buses: Mutex<Vec<(String, Bus)>>,
    /// The harness's own reader of dead letters, opened with the first module.
    tap: OnceCell<Tap>,
    /// The clock its in-memory modules' scheduled events are due by: tokio's, made with the
    /// first module, so a paused clock moves due times as it moves the ladder's hops.
    clock: std::sync::OnceLock<Clock>,
}

/// A reader of every dead letter, standing for the audit logger a deployment runs: on
/// RabbitMQ a dead letter is published mandatory to `mesh.events.dead`, and with no queue
/// bound there it is refused and the delivery redelivered, again and again. It reads and
/// drops them (the records come from the modules' transports, which know who gave up).
struct Tap {
    transport: Arc<dyn Transport>,
    reader: JoinHandle<()>,
}

impl Tap {
    async fn open(transport: Arc<dyn Transport>) -> Result<Tap, Error> {
        let spec = SubscriptionSpec {
            queue: QueueSpec::DeadLetters(DeadQueue::Tap),
            patterns: Vec::new(),
            prefetch: crate::bus::DEFAULT_PREFETCH,
            retry_delays: Vec::new(),
        };
        let mut subscription = match transport.subscribe(spec).await {
            Ok(subscription) => subscription,
            Err(e) => {
                transport.close().await;
                return Err(e.into());
            }
        };
        // Automatic acks: taking a dead letter is all there is to do with it.
        let reader = tokio::spawn(async move { while subscription.next().await.is_some() {} });
        Ok(Tap { transport, reader })
    }

    async fn close(&self) {
        self.reader.abort();
        self.transport.close().await;
    }
}

impl std::fmt::Debug for Harness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let broker = match &self.broker {
            Broker::Memory(_) => "memory",
            #[cfg(feature = "amqp")]
            Broker::Amqp(_) => "rabbitmq",
        };
        f.debug_struct("Harness")
            .field("broker", &broker)
            .field("node", &self.node)
            .field("timeout", &self.timeout)
            .field("modules", &self.modules())
            .finish_non_exhaustive()
    }
}

impl Harness {
    fn with(broker: Broker) -> Harness {
        Harness {
            broker,
            log: Arc::new(Log::new()),
            node: DEFAULT_NODE.to_owned(),
            timeout: DEFAULT_TIMEOUT,
            buses: Mutex::new(Vec::new()),
            tap: OnceCell::new(),
            clock: std::sync::OnceLock::new(),
        }
    }

    /// A harness on a new in-memory broker of its own.
    pub fn memory() -> Harness {
        Harness::with(Broker::Memory(mesh_memory::MemoryBroker::new()))
    }

    /// A harness on the RabbitMQ at `url` (`amqp://user:password@host:port/vhost`): each
    /// module connects on its own, its connections named `mesh-testing.<module>`, and the harness
    /// reads every dead letter on a connection of its own (`mesh-testing.dead-letters`), as a
    /// deployment's audit logger does (RabbitMQ refuses a dead letter no queue takes). Give each
    /// test a vhost of its own, so queues left by one test never meet another.
    ///
    /// Time is the broker's: a retry ladder waits its real delays there, so a test meant to
    /// run on both gives its modules a short ladder.
    ///
    /// Fails on a URL that does not parse (the error never shows the password); nothing
    /// connects before a module starts.
    #[cfg(feature = "amqp")]
    pub fn rabbitmq(url: &str) -> Result<Harness, Error> {
        let options: mesh_amqp::AmqpOptions = url.parse()?;
        Ok(Harness::with(Broker::Amqp(Box::new(options))))
    }

    /// The node every module runs on (default [`DEFAULT_NODE`]). Set before any module
    /// starts.
    pub fn node(mut self, node: impl Into<String>) -> Harness {
        self.node = node.into();
        self
    }

    /// How long each assertion waits for what it expects (default [`DEFAULT_TIMEOUT`]).
    ///
    /// On a paused clock the wait is in the clock's time: a harness whose modules retry for
    /// minutes gives its assertions minutes, which pass in milliseconds of wall time.
    pub fn timeout(mut self, timeout: Duration) -> Harness {
        self.timeout = timeout;
        self
    }

    /// Moves the clock of the harness's in-memory modules on by `by`, at once: whatever is
    /// due by then is due now (a retry's hop, a scheduled event, a row an outbox relay
    /// schedules through a bus of the harness, a saga's timeout), as if `by` had passed.
    ///
    /// For a test on real time, one that waits on a database or another process (under
    /// `start_paused = true`, tokio moves a paused clock on whenever the runtime waits on
    /// I/O, and an assertion's timeout passes while a query runs): it pauses tokio's clock,
    /// advances it by `by` and lets it run on again. Every timer of the runtime due by then
    /// fires, an assertion's timeout included, so nothing should be waiting on one. On
    /// RabbitMQ time is the broker's and this moves only the test's timers.
    ///
    /// # Panics
    ///
    /// Outside a current-thread runtime (`#[tokio::test]`'s default), and on a clock paused
    /// already (under `start_paused = true`, call [`tokio::time::advance`]).
    pub async fn advance(&self, by: Duration) {
        tokio::time::pause();
        tokio::time::advance(by).await;
        tokio::time::resume();
    }

    /// The in-memory broker, for what a test wants to check or do on it directly (queue
    /// depths, a message published raw); `None` on RabbitMQ.
    pub fn broker(&self) -> Option<&mesh_memory::MemoryBroker> {
        match &self.broker {
            Broker::Memory(broker) => Some(broker),
            #[cfg(feature = "amqp")]
            Broker::Amqp(_) => None,
        }
    }

    /// Starts module `name`: a bus on the harness's node with module identity `name` and
    /// the contract announcement off (it would be a published event in every record),
    /// configured further by `configure` (handlers, tools, retry policy, …; the module's
    /// own wiring function fits here), on a recorded transport of its own.
    ///
    /// Assertions name the module by `name`. A module with nothing configured stands for
    /// another side of the system: it emits and calls as a test says.
    pub async fn module(
        &self,
        name: &str,
        configure: impl FnOnce(BusBuilder) -> BusBuilder,
    ) -> Result<Bus, Error> {
        let clock = match &self.broker {
            Broker::Memory(_) => *self.clock.get_or_init(Clock::tokio),
            // On RabbitMQ the hops wait on the broker, in real time.
            #[cfg(feature = "amqp")]
            Broker::Amqp(_) => Clock::System,
        };
        let builder = configure(
            Bus::builder()
                .node(self.node.clone())
                .module(name)
                .announce(false)
                .clock(clock),
        );
        self.tap
            .get_or_try_init(|| async { Tap::open(self.connect("dead-letters").await?).await })
            .await?;
        let inner = self.connect(name).await?;
        let transport: Arc<dyn Transport> =
            Arc::new(RecordingTransport::new(inner, Arc::clone(&self.log), name));
        match builder.start(Arc::clone(&transport)).await {
            Ok(bus) => {
                self.lock_buses().push((name.to_owned(), bus.clone()));
                Ok(bus)
            }
            Err(e) => {
                transport.close().await;
                Err(e)
            }
        }
    }

    /// A transport of its own for `name` (on RabbitMQ, its connections are named after it).
    async fn connect(&self, name: &str) -> Result<Arc<dyn Transport>, Error> {
        match &self.broker {
            Broker::Memory(broker) => {
                let _ = name; // the in-memory broker's connections have no names
                Ok(Arc::new(broker.transport()))
            }
            #[cfg(feature = "amqp")]
            Broker::Amqp(options) => {
                let options = (**options)
                    .clone()
                    .connection_name(format!("mesh-testing.{name}"));
                Ok(Arc::new(crate::amqp_admin::connect(options).await?))
            }
        }
    }

    fn lock_buses(&self) -> std::sync::MutexGuard<'_, Vec<(String, Bus)>> {
        self.buses.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The names of the modules started, in order.
    pub fn modules(&self) -> Vec<String> {
        self.lock_buses()
            .iter()
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Everything recorded so far, in order.
    pub fn records(&self) -> Vec<Record> {
        self.log.snapshot()
    }

    /// Drains every module's bus, in the order they started (each finishes its handlers
    /// and waits for its confirms; see [`Bus::drain`]), then closes the harness's reader of
    /// dead letters; the first error, after trying all.
    pub async fn drain(&self) -> Result<(), Error> {
        let buses = std::mem::take(&mut *self.lock_buses());
        let mut first = Ok(());
        for (_, bus) in buses {
            if let Err(e) = bus.drain().await {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        if let Some(tap) = self.tap.get() {
            tap.close().await;
        }
        first
    }
}
