//! mesh_saga: sagas for mesh — long-running processes that keep state per correlation key,
//! wait for timeouts, and apply each event once.
//!
//! A saga is a state type and, for each event type it handles, the event's correlation key
//! and a transition: given the instance's state and the event, the new state and what to
//! do ([`Step`]: emit events, schedule or cancel timeouts, complete). Transitions are plain
//! functions with no I/O; the [`SagaService`] applies them, each delivery in one database
//! transaction that
//!
//! - records the event's id in the outbox crate's inbox (a redelivered event is acked and
//!   changes nothing),
//! - writes the instance's new state under its version (a transition that raced another
//!   update of the instance is thrown away and run again on the fresh state: no update is
//!   lost),
//! - writes the events it emits to the outbox (published if and only if the state commits),
//! - schedules its timeouts as cancellable outbox events, and cancels them (on request, on
//!   replacement, on completion); a timeout that arrives after it was cancelled is ignored.
//!
//! ```no_run
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Serialize, Deserialize)] struct OrderPlaced { order: u64 }
//! # impl mesh::Event for OrderPlaced { const KEY: &'static str = "module.shop.order.placed"; }
//! # #[derive(Serialize, Deserialize)] struct PaymentTimedOut { order: u64 }
//! # impl mesh::Event for PaymentTimedOut { const KEY: &'static str = "module.orders.payment.timed-out"; }
//! # async fn demo(transport: std::sync::Arc<dyn mesh::raw::Transport>) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use mesh_saga::{Saga, SagaStore};
//!
//! #[derive(Serialize, Deserialize)]
//! enum Order { AwaitingPayment, Cancelled }
//!
//! let saga = Saga::<Order>::new("order")
//!     .starts(|e: &OrderPlaced| e.order.to_string(), |e, step| {
//!         step.schedule("payment", Duration::from_secs(900), &PaymentTimedOut { order: e.order });
//!         Order::AwaitingPayment
//!     })
//!     .on_timeout(|e: &PaymentTimedOut| e.order.to_string(), |order, _e, step| {
//!         *order = Order::Cancelled;
//!         step.complete();
//!     });
//!
//! let pool = sqlx::PgPool::connect("postgres://localhost/orders").await?;
//! let service = saga.service(SagaStore::new(pool.clone()).await?);
//! let bus = service.wire(mesh::Bus::builder().node("n1").module("orders")).start(transport).await?;
//! service.attach(&bus);
//! // A relay publishes what the saga emits and schedules.
//! let relay = mesh_outbox::Outbox::new(pool).await?
//!     .start_relay([bus.clone()], Default::default()).await?;
//! # Ok(()) }
//! ```
//!
//! Exactly once means: each event's effect on the instance (its state, its emitted events,
//! its timeouts) commits once, whatever the redeliveries. A transition may *run* more than
//! once (a lost race), so it must not act on the world itself; what it emits is published
//! at least once by the outbox's relay, with the same event id each time.
//!
//! Time is the saga's bus's clock ([`Bus::now`](mesh::Bus::now)): timeouts are due by it,
//! and a relay whose bus is on the test harness's clock compares due times with it, so a test
//! moves a timeout of hours on with `Harness::advance`. With [`Saga::emit_transitions`] each
//! applied event also emits the instance after it (`module.<m>.saga.transition`), which the
//! console shows on the event's page.
//!
//! Architecture invariant: the saga's logic (transitions, [`Step`]) knows no database and no
//! bus; only `service.rs` and `store/` do, and the store's SQL is written once for both
//! backends.

#![warn(missing_docs)]

mod error;
mod route;
mod service;
mod step;
mod store;

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use mesh::Event;
use serde::de::DeserializeOwned;
use serde::Serialize;

pub use error::{Error, ErrorKind};
pub use service::SagaService;
pub use step::Step;
pub use store::{Database, Instance, PendingTimeout, SagaStore};

use route::{EventRoute, Route};

/// A saga's definition: its name, its state type `S` and how each event type it handles
/// starts or moves an instance. Bound to a store with [`Saga::service`].
pub struct Saga<S> {
    name: String,
    /// Whether each applied event emits the instance's state ([`Saga::emit_transitions`]).
    transitions: bool,
    routes: Vec<Box<dyn Route<S>>>,
    by_type: HashMap<TypeId, usize>,
}

impl<S> fmt::Debug for Saga<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Saga")
            .field("name", &self.name)
            .field("transitions", &self.transitions)
            .field("events", &self.routes.len())
            .finish()
    }
}

impl<S> Saga<S>
where
    S: Serialize + DeserializeOwned + Send + Sync + 'static,
{
    /// A saga named `name` (its instances are stored under it; keep it stable).
    pub fn new(name: impl Into<String>) -> Saga<S> {
        Saga {
            name: name.into(),
            transitions: false,
            routes: Vec::new(),
            by_type: HashMap::new(),
        }
    }

    /// The saga's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Events of type `E` start an instance, keyed by `key(event)`, in the state `start`
    /// returns. An `E` whose instance exists already changes nothing, unless `E` is also
    /// registered with [`Saga::on`].
    pub fn starts<E: Event>(
        self,
        key: impl Fn(&E) -> String + Send + Sync + 'static,
        start: impl Fn(&E, &mut Step) -> S + Send + Sync + 'static,
    ) -> Self {
        self.route(key, |r: &mut EventRoute<S, E>| {
            r.start = Some(Arc::new(start))
        })
    }

    /// Events of type `E` move the started instance `key(event)` on with `transition`. An
    /// `E` before its instance started fails and is retried by the bus (it may have
    /// overtaken the event that starts it, unless `E` also [starts](Saga::starts) one);
    /// one after the instance completed changes nothing.
    pub fn on<E: Event>(
        self,
        key: impl Fn(&E) -> String + Send + Sync + 'static,
        transition: impl Fn(&mut S, &E, &mut Step) + Send + Sync + 'static,
    ) -> Self {
        self.route(key, |r: &mut EventRoute<S, E>| {
            r.on = Some(Arc::new(transition))
        })
    }

    /// Events of type `E` are the saga's timeouts ([`Step::schedule`]): as [`Saga::on`],
    /// but applied only while the arriving event is one of the instance's pending timeouts
    /// (one cancelled, replaced or outlived by its instance's completion changes nothing).
    pub fn on_timeout<E: Event>(
        self,
        key: impl Fn(&E) -> String + Send + Sync + 'static,
        transition: impl Fn(&mut S, &E, &mut Step) + Send + Sync + 'static,
    ) -> Self {
        self.route(key, |r: &mut EventRoute<S, E>| {
            r.on = Some(Arc::new(transition));
            r.timeout = true;
        })
    }

    /// Each event applied to an instance also emits the instance after it, as the event
    /// `<the bus's prefix>saga.transition` (`module.<m>.saga.transition`): body
    /// [`SagaTransition`](mesh::raw::saga::SagaTransition) (the saga, the key, the version,
    /// whether completed, the state as JSON), caused by the applied event, written to the
    /// outbox with the state (published if and only if it commits, once per applied event).
    /// The audit logger records it, and the console shows it on the page of the event that
    /// caused it. Off by default: the state goes to every reader of the module's events.
    pub fn emit_transitions(mut self) -> Self {
        self.transitions = true;
        self
    }

    /// Binds the saga to `store`: the service that wires its handlers into a bus.
    pub fn service<DB: Database>(self, store: SagaStore<DB>) -> SagaService<S, DB> {
        SagaService::new(self.name, self.transitions, self.routes, store)
    }

    /// The route of `E`, made on first use, with `set` applied.
    fn route<E: Event>(
        mut self,
        key: impl Fn(&E) -> String + Send + Sync + 'static,
        set: impl FnOnce(&mut EventRoute<S, E>),
    ) -> Self {
        let at = *self.by_type.entry(TypeId::of::<E>()).or_insert_with(|| {
            self.routes.push(Box::new(EventRoute::<S, E> {
                key: Arc::new(|_: &E| String::new()),
                start: None,
                on: None,
                timeout: false,
            }));
            self.routes.len() - 1
        });
        if let Some(route) = self.routes[at]
            .as_any_mut()
            .downcast_mut::<EventRoute<S, E>>()
        {
            route.key = Arc::new(key);
            set(route);
        }
        self
    }
}
