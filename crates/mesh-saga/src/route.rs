//! Each event type a saga handles, typed as the user wrote it, and the bus handler that
//! turns its delivery into a [`Delivery`]: the event's id and correlation key and its
//! transitions with the event captured, so the engine that applies it knows no event type.

use std::any::Any;
use std::sync::Arc;

use futures::future::BoxFuture;
use mesh::{BusBuilder, Event, EventId, HandlerError, Incoming};

use crate::error::Error;
use crate::step::Step;

/// How an event starts an instance: its first state.
pub(crate) type StartFn<S> = Box<dyn Fn(&mut Step) -> S + Send + Sync>;
/// How an event moves an instance on.
pub(crate) type OnFn<S> = Box<dyn Fn(&mut S, &mut Step) + Send + Sync>;

/// One delivery, as the engine applies it.
pub(crate) struct Delivery<S> {
    pub(crate) id: EventId,
    pub(crate) key: String,
    /// The instance's first state, when the event starts one.
    pub(crate) start: Option<StartFn<S>>,
    /// The transition, when the event moves a started instance on.
    pub(crate) on: Option<OnFn<S>>,
    /// Applied only while it is the instance's pending timeout (not cancelled since).
    pub(crate) timeout: bool,
}

/// What applies deliveries (the service's engine).
pub(crate) trait Apply<S>: Send + Sync + 'static {
    fn apply(&self, delivery: Delivery<S>) -> BoxFuture<'_, Result<(), Error>>;
}

/// One event type's handling, with its type erased.
pub(crate) trait Route<S>: Send + Sync + 'static {
    /// Registers the bus handler of the event type.
    fn wire(&self, builder: BusBuilder, apply: Arc<dyn Apply<S>>) -> BusBuilder;
    /// For merging a second registration of the same type into this one.
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

type KeyFn<E> = Arc<dyn Fn(&E) -> String + Send + Sync>;
type TypedStart<S, E> = Arc<dyn Fn(&E, &mut Step) -> S + Send + Sync>;
type TypedOn<S, E> = Arc<dyn Fn(&mut S, &E, &mut Step) + Send + Sync>;

/// The handling of events of type `E`.
pub(crate) struct EventRoute<S, E> {
    pub(crate) key: KeyFn<E>,
    pub(crate) start: Option<TypedStart<S, E>>,
    pub(crate) on: Option<TypedOn<S, E>>,
    pub(crate) timeout: bool,
}

impl<S: Send + Sync + 'static, E: Event> Route<S> for EventRoute<S, E> {
    fn wire(&self, builder: BusBuilder, apply: Arc<dyn Apply<S>>) -> BusBuilder {
        let key = Arc::clone(&self.key);
        let start = self.start.clone();
        let on = self.on.clone();
        let timeout = self.timeout;
        builder.on(move |incoming: Incoming<E>| {
            let event = Arc::new(incoming.event);
            let delivery = Delivery {
                id: incoming.meta.id(),
                key: key(&event),
                start: start.clone().map(|start| {
                    let event = Arc::clone(&event);
                    Box::new(move |step: &mut Step| start(&event, step)) as StartFn<S>
                }),
                on: on.clone().map(|on| {
                    let event = Arc::clone(&event);
                    Box::new(move |state: &mut S, step: &mut Step| on(state, &event, step))
                        as OnFn<S>
                }),
                timeout,
            };
            let apply = Arc::clone(&apply);
            async move {
                apply.apply(delivery).await.map_err(|e| {
                    if e.is_retryable() {
                        HandlerError::retry(e)
                    } else {
                        HandlerError::permanent(e)
                    }
                })
            }
        })
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}
