//! The saga's engine: applies each delivery in one transaction (the inbox record, the
//! instance's new state under its version, the timeouts, the emitted events), retried from
//! the fresh state when another update of the instance won the race.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::future::BoxFuture;
use mesh::raw::saga::{SagaTransition, TRANSITION_EVENT, TRANSITION_FORMAT};
use mesh::{Bus, BusBuilder, Outgoing};
use mesh_outbox::{cancel_in, record_in, EmitIn, ScheduleIn};
use serde::de::DeserializeOwned;
use serde::Serialize;
use sqlx::Transaction;
use tokio::sync::watch;
use tracing::debug;

use crate::error::{Error, ErrorKind};
use crate::route::{Apply, Delivery, Route};
use crate::step::Step;
use crate::store::sql::{StoredInstance, TimeoutRow};
use crate::store::{event_id, Database, SagaStore};

/// How many times one delivery is tried against fresh state before it goes back to the bus
/// (which retries it later, on its ladder).
const TRIES: u32 = 64;

/// A saga bound to its store: wires its handlers into a bus ([`SagaService::wire`]) and
/// applies what they receive. Cheap to clone.
///
/// Several services of one saga may run at once (processes of one module, consuming one
/// queue): each event is applied once, and no update of an instance is lost.
pub struct SagaService<S, DB: Database> {
    engine: Arc<Engine<S, DB>>,
    routes: Arc<Vec<Box<dyn Route<S>>>>,
}

impl<S, DB: Database> Clone for SagaService<S, DB> {
    fn clone(&self) -> Self {
        SagaService {
            engine: Arc::clone(&self.engine),
            routes: Arc::clone(&self.routes),
        }
    }
}

impl<S, DB: Database> fmt::Debug for SagaService<S, DB> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SagaService")
            .field("saga", &self.engine.name)
            .field("events", &self.routes.len())
            .finish_non_exhaustive()
    }
}

struct Engine<S, DB: Database> {
    name: String,
    /// Whether each applied event emits the instance after it (`Saga::emit_transitions`).
    transitions: bool,
    /// The inbox's consumer name of this saga.
    consumer: String,
    store: SagaStore<DB>,
    bus: watch::Sender<Option<Bus>>,
    conflicts: AtomicU64,
    _state: std::marker::PhantomData<fn() -> S>,
}

/// What became of one delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Applied,
    Duplicate,
    Ignored(&'static str),
}

impl<S, DB> SagaService<S, DB>
where
    S: Serialize + DeserializeOwned + Send + Sync + 'static,
    DB: Database,
{
    pub(crate) fn new(
        name: String,
        transitions: bool,
        routes: Vec<Box<dyn Route<S>>>,
        store: SagaStore<DB>,
    ) -> Self {
        SagaService {
            engine: Arc::new(Engine {
                consumer: format!("saga:{name}"),
                name,
                transitions,
                store,
                bus: watch::Sender::new(None),
                conflicts: AtomicU64::new(0),
                _state: std::marker::PhantomData,
            }),
            routes: Arc::new(routes),
        }
    }

    /// Registers a handler for each event type of the saga on `builder`. Events that arrive
    /// before [`SagaService::attach`] wait for it.
    pub fn wire(&self, builder: BusBuilder) -> BusBuilder {
        let apply: Arc<dyn Apply<S>> = Arc::clone(&self.engine) as Arc<dyn Apply<S>>;
        self.routes.iter().fold(builder, |builder, route| {
            route.wire(builder, Arc::clone(&apply))
        })
    }

    /// The bus the saga emits and schedules through: the one its handlers were wired into
    /// (its module owns the saga's events and timeouts). A relay of the store's outbox must
    /// publish through a bus of the same identity.
    pub fn attach(&self, bus: &Bus) {
        self.engine.bus.send_replace(Some(bus.clone()));
    }

    /// The saga's name.
    pub fn name(&self) -> &str {
        &self.engine.name
    }

    /// The store.
    pub fn store(&self) -> &SagaStore<DB> {
        &self.engine.store
    }

    /// How many times a delivery found its instance changed under it and was applied again
    /// to the fresh state, since this service started.
    pub fn conflicts(&self) -> u64 {
        self.engine.conflicts.load(Ordering::Relaxed)
    }
}

impl<S, DB> Apply<S> for Engine<S, DB>
where
    S: Serialize + DeserializeOwned + Send + Sync + 'static,
    DB: Database,
{
    fn apply(&self, delivery: Delivery<S>) -> BoxFuture<'_, Result<(), Error>> {
        Box::pin(async move {
            let bus = self.bus().await?;
            for _ in 0..TRIES {
                match self.try_apply(&bus, &delivery).await? {
                    Some(outcome) => {
                        debug!(saga = %self.name, key = %delivery.key, id = %delivery.id, ?outcome, "saga event");
                        return Ok(());
                    }
                    None => {
                        self.conflicts.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Err(Error::new(
                ErrorKind::Contended,
                format!(
                    "instance {:?} of saga {:?} changed under each of {TRIES} tries",
                    delivery.key, self.name
                ),
            ))
        })
    }
}

impl<S, DB> Engine<S, DB>
where
    S: Serialize + DeserializeOwned + Send + Sync + 'static,
    DB: Database,
{
    async fn bus(&self) -> Result<Bus, Error> {
        let mut attached = self.bus.subscribe();
        let bus = attached
            .wait_for(Option::is_some)
            .await
            .map_err(|_| Error::new(ErrorKind::Transition, "the saga service is gone"))?;
        bus.as_ref()
            .cloned()
            .ok_or_else(|| Error::new(ErrorKind::Transition, "the saga service has no bus"))
    }

    /// One try: `None` when the instance changed under it (rolled back; try again).
    async fn try_apply(&self, bus: &Bus, d: &Delivery<S>) -> Result<Option<Outcome>, Error> {
        let failed = |e| Error::database("applying a saga event", e);
        let mut tx = self.store.pool().begin().await.map_err(failed)?;
        // First, so that on SQLite the transaction is the writer from its first statement
        // (a read first could not become a write if another wrote meanwhile).
        if !record_in(&mut tx, &self.consumer, d.id)
            .await
            .map_err(|e| Error::outbox("recording the event in the inbox", e))?
        {
            tx.rollback().await.map_err(failed)?;
            return Ok(Some(Outcome::Duplicate));
        }
        let row = DB::load(&mut tx, &self.name, &d.key)
            .await
            .map_err(failed)?;
        let mut step = Step::default();
        let (state, previous, mut pending) = match (row, &d.start, &d.on) {
            (None, Some(start), _) => (start(&mut step), None, Vec::new()),
            (None, None, _) => {
                return Err(Error::new(
                    ErrorKind::NotStarted,
                    format!("no instance {:?} of saga {:?} yet", d.key, self.name),
                ))
            }
            (Some(row), _, _) if row.completed => {
                return self.ignore(tx, "completed").await;
            }
            (Some(_), _, None) => return self.ignore(tx, "started before").await,
            (Some(row), _, Some(on)) => {
                let mut pending = DB::timeouts(&mut tx, &self.name, &d.key)
                    .await
                    .map_err(failed)?;
                if d.timeout {
                    let id = d.id.to_string();
                    let Some(at) = pending.iter().position(|t| t.event_id == id) else {
                        return self.ignore(tx, "timeout cancelled").await;
                    };
                    let arrived = pending.remove(at);
                    DB::delete_timeout(&mut tx, &self.name, &d.key, &arrived.name)
                        .await
                        .map_err(failed)?;
                }
                let mut state: S = serde_json::from_str(&row.state).map_err(|e| {
                    Error::with_source(ErrorKind::State, "reading an instance's state", e)
                })?;
                on(&mut state, &mut step);
                (state, Some(row), pending)
            }
        };
        if let Some(e) = step.failed.take() {
            return Err(e);
        }
        // The state first: the optimistic check, and on PostgreSQL the row's lock for the
        // rest of the transaction.
        let Some(version) = self
            .write(&mut tx, bus, &d.key, &state, previous, step.complete)
            .await?
        else {
            tx.rollback().await.map_err(failed)?;
            return Ok(None);
        };
        self.timeouts(&mut tx, bus, d, &mut pending, &mut step)
            .await?;
        let transition = if self.transitions {
            Some(self.transition(bus, &d.key, &state, version, step.complete)?)
        } else {
            None
        };
        let emits = std::mem::take(&mut step.emits)
            .into_iter()
            .chain(transition)
            .map(|e| e.causation_id(d.id.to_string()));
        bus.emit_all_in(&mut tx, emits)
            .await
            .map_err(|e| Error::outbox("emitting a saga's events", e))?;
        tx.commit().await.map_err(failed)?;
        Ok(Some(Outcome::Applied))
    }

    /// Commits the inbox record alone: the event is acknowledged and changes nothing.
    async fn ignore(
        &self,
        tx: Transaction<'static, DB>,
        why: &'static str,
    ) -> Result<Option<Outcome>, Error> {
        tx.commit()
            .await
            .map_err(|e| Error::database("applying a saga event", e))?;
        Ok(Some(Outcome::Ignored(why)))
    }

    /// The event of a transition (`Saga::emit_transitions`): the instance after it.
    fn transition(
        &self,
        bus: &Bus,
        key: &str,
        state: &S,
        version: i64,
        completed: bool,
    ) -> Result<Outgoing, Error> {
        let failed = |e| Error::with_source(ErrorKind::Transition, "emitting a transition", e);
        let body = SagaTransition {
            saga: self.name.clone(),
            key: key.to_owned(),
            version: u64::try_from(version).unwrap_or(0),
            completed,
            state: serde_json::to_value(state).map_err(|e| {
                Error::with_source(ErrorKind::State, "writing an instance's state", e)
            })?,
        };
        let routing_key = format!(
            "{}.{}.{TRANSITION_EVENT}",
            bus.identity().origin(),
            bus.identity().owner(bus.node())
        );
        let body = serde_json::to_vec(&body)
            .map_err(|e| Error::with_source(ErrorKind::State, "writing a transition", e))?;
        Ok(Outgoing::raw(&routing_key, body)
            .map_err(failed)?
            .schema(TRANSITION_FORMAT))
    }

    /// Writes the new state: its version, `None` when the instance changed since it was read.
    async fn write(
        &self,
        tx: &mut Transaction<'static, DB>,
        bus: &Bus,
        key: &str,
        state: &S,
        previous: Option<StoredInstance>,
        complete: bool,
    ) -> Result<Option<i64>, Error> {
        let failed = |e| Error::database("writing a saga instance", e);
        let json = serde_json::to_string(state)
            .map_err(|e| Error::with_source(ErrorKind::State, "writing an instance's state", e))?;
        // The bus's clock, as for the timeouts: the test harness's moves both.
        let now = bus.now().text();
        match previous {
            None => {
                let row = StoredInstance {
                    saga: self.name.clone(),
                    key: key.to_owned(),
                    state: json,
                    version: 1,
                    completed: complete,
                    created_at: now.clone(),
                    updated_at: now,
                };
                let written = DB::insert_instance(tx, &row).await.map_err(failed)?;
                Ok(written.then_some(row.version))
            }
            Some(previous) => {
                let row = StoredInstance {
                    state: json,
                    version: previous.version + 1,
                    completed: complete,
                    updated_at: now,
                    ..previous
                };
                let written = DB::update(tx, &row, row.version - 1)
                    .await
                    .map_err(failed)?;
                Ok(written.then_some(row.version))
            }
        }
    }

    /// Cancels, schedules and (on completion) cancels every remaining timeout.
    async fn timeouts(
        &self,
        tx: &mut Transaction<'static, DB>,
        bus: &Bus,
        d: &Delivery<S>,
        pending: &mut Vec<TimeoutRow>,
        step: &mut Step,
    ) -> Result<(), Error> {
        let mut cancel: Vec<String> = std::mem::take(&mut step.cancels);
        cancel.extend(step.schedules.iter().map(|t| t.name.clone()));
        if step.complete {
            cancel.extend(pending.iter().map(|t| t.name.clone()));
        }
        for name in cancel {
            let Some(at) = pending.iter().position(|t| t.name == name) else {
                continue;
            };
            let gone = pending.remove(at);
            // `false` when the relay moved it already: it arrives, finds no row, and is
            // ignored; either way it never reaches the instance.
            cancel_in(tx, event_id(&gone.event_id)?)
                .await
                .map_err(|e| Error::outbox("cancelling a saga timeout", e))?;
            DB::delete_timeout(tx, &self.name, &d.key, &gone.name)
                .await
                .map_err(|e| Error::database("cancelling a saga timeout", e))?;
        }
        if step.complete {
            // A completed instance waits for nothing: a timeout it scheduled now is moot.
            return Ok(());
        }
        for timeout in std::mem::take(&mut step.schedules) {
            // Due by the bus's clock (the system's; the test harness's under it, so a test
            // moves a timeout of hours on with `Harness::advance`), as the relay that
            // publishes it compares.
            let due = bus.now().checked_add(timeout.after).ok_or_else(|| {
                Error::new(
                    ErrorKind::Transition,
                    format!("timeout {:?} is past the year 9999", timeout.name),
                )
            })?;
            let event = timeout.event.causation_id(d.id.to_string());
            let id = bus
                .emit_outgoing_at_in(tx, due, event)
                .await
                .map_err(|e| Error::outbox("scheduling a saga timeout", e))?;
            let row = TimeoutRow {
                name: timeout.name,
                event_id: id.to_string(),
                due_at: due.text(),
            };
            DB::put_timeout(tx, &self.name, &d.key, &row)
                .await
                .map_err(|e| Error::database("scheduling a saga timeout", e))?;
            pending.push(row);
        }
        Ok(())
    }
}
