//! What a layered handler's result does to its delivery, through the consumer loop's own
//! dispatch: a refusal (load shed, not ready) releases the delivery uncounted, a timeout is a
//! counted retry, a layer's permanent `HandlerFailed` dead-letters it; and how errors found
//! along a chain are read.

use std::error::Error as StdError;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use mesh_core::{
    codec, AckFailed, Acker, BoxError, Delivery, Envelope, EventId, Headers, RemoteError,
    RetryPolicy, RoutingKey, Timestamp, TopicPattern, TransportError, WireMessage,
};
use tower::load_shed::LoadShedLayer;
use tower::timeout::error::Elapsed;

use super::{ack_failed, Dispatcher};
use crate::error::HandlerError;
use crate::handler::{HandlerCall, HandlerDecl, HandlerEntry};
use crate::incoming::Meta;
use crate::layer::{chain, kind, HandlerFailed, HandlerLayer, Kind, Layer, Service};
use crate::telemetry::record::Queue;

const KEY: &str = "module.billing.invoice.paid";

/// How a delivery was settled, with the attempt a retry copy or dead letter carries.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Settled {
    Acked,
    Retried(u32),
    DeadLettered(String),
    Released,
}

struct Recording(Arc<Mutex<Vec<Settled>>>);

impl Recording {
    fn push(&self, settled: Settled) {
        if let Ok(mut all) = self.0.lock() {
            all.push(settled);
        }
    }
}

fn ready() -> BoxFuture<'static, Result<(), TransportError>> {
    Box::pin(std::future::ready(Ok(())))
}

impl Acker for Recording {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>> {
        self.push(Settled::Acked);
        ready()
    }

    fn ack_detached(self: Box<Self>, _failed: AckFailed) -> Option<BoxFuture<'static, ()>> {
        self.push(Settled::Acked);
        None
    }

    fn retry(
        self: Box<Self>,
        copy: WireMessage,
        _step: usize,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        self.push(Settled::Retried(codec::attempts(&copy)));
        ready()
    }

    fn dead_letter(
        self: Box<Self>,
        copy: WireMessage,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        let reason = copy
            .header(codec::DEAD_REASON)
            .map(|v| format!("{v:?}"))
            .unwrap_or_default();
        self.push(Settled::DeadLettered(reason));
        ready()
    }

    fn reply(
        self: Box<Self>,
        _reply: WireMessage,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        ready()
    }

    fn release(self: Box<Self>) {
        self.push(Settled::Released);
    }
}

/// Never ready: `poll_ready` stays pending, or fails with `fails`.
#[derive(Clone)]
struct Refusing {
    fails: bool,
}

impl<R: Send + 'static> Service<R> for Refusing {
    type Response = ();
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<(), BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        if self.fails {
            Poll::Ready(Err("the circuit is open".into()))
        } else {
            Poll::Pending
        }
    }

    fn call(&mut self, _request: R) -> Self::Future {
        Box::pin(std::future::ready(Ok(())))
    }
}

/// A layer that replaces what it wraps by `service`.
struct Replace<S>(S);

impl<S: Clone, T> Layer<T> for Replace<S> {
    type Service = S;

    fn layer(&self, _inner: T) -> S {
        self.0.clone()
    }
}

/// Fails every call with `error`, as a layer returning it would.
#[derive(Clone)]
struct Failing(fn() -> BoxError);

impl Service<Meta> for Failing {
    type Response = ();
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<(), BoxError>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _meta: Meta) -> Self::Future {
        Box::pin(std::future::ready(Err((self.0)())))
    }
}

/// Dispatches one first delivery of an event to a handler wrapped in `layer`; how it was
/// settled.
fn settle(layer: &impl HandlerLayer) -> Vec<Settled> {
    let decl = HandlerDecl::raw(vec![KEY.to_owned()], None, |_| async { Ok(()) });
    let queue = Queue::new("test.ledger.events");
    let dispatcher = Dispatcher {
        handlers: vec![HandlerEntry {
            patterns: vec![TopicPattern::parse(KEY).unwrap_or_else(|e| panic!("{e}"))],
            call: HandlerCall::of(layer.wrap_handler(decl.service)),
            #[cfg(feature = "schemas")]
            check: None,
        }],
        enforce_identity: None,
        retry: RetryPolicy::default(),
        queue: queue.clone(),
        unmatched: Mutex::default(),
        ack_failed: ack_failed(queue),
    };
    let envelope = Envelope {
        id: EventId::new(),
        key: RoutingKey::parse(KEY).unwrap_or_else(|e| panic!("{e}")),
        source: "billing".to_owned(),
        node: "test".to_owned(),
        time: Timestamp::now(),
        causation_id: None,
        schema: None,
        extra_headers: Headers::new(),
        body: bytes::Bytes::from_static(b"{}"),
    };
    let settled = Arc::new(Mutex::new(Vec::new()));
    let delivery = Delivery::new(
        codec::encode(&envelope),
        false,
        None,
        "test.ledger.events".to_owned(),
        Box::new(Recording(Arc::clone(&settled))),
    );
    futures::executor::block_on(dispatcher.handle(delivery));
    settled.lock().map(|all| all.clone()).unwrap_or_default()
}

#[test]
fn a_shed_delivery_is_released_uncounted() {
    let shed = (LoadShedLayer::new(), Replace(Refusing { fails: false }));
    assert_eq!(settle(&shed), [Settled::Released]);
}

#[test]
fn a_refusal_to_be_ready_releases_the_delivery_uncounted() {
    assert_eq!(
        settle(&Replace(Refusing { fails: true })),
        [Settled::Released]
    );
}

#[test]
fn a_timeout_is_a_counted_retry() {
    let timeout = Replace(Failing(|| Box::new(Elapsed::new())));
    assert_eq!(settle(&timeout), [Settled::Retried(1)]);
}

#[test]
fn a_layers_own_error_is_a_counted_retry_and_its_permanent_one_a_dead_letter() {
    let other = Replace(Failing(|| "the tenant is unknown".into()));
    assert_eq!(settle(&other), [Settled::Retried(1)]);
    let permanent = Replace(Failing(|| {
        Box::new(HandlerFailed::from(HandlerError::permanent("no tenant")))
    }));
    let settled = settle(&permanent);
    assert!(
        matches!(&settled[..], [Settled::DeadLettered(reason)] if reason.contains("permanent")),
        "{settled:?}"
    );
}

#[test]
fn a_layer_passing_through_acks_and_no_layer_calls_the_handler_directly() {
    assert_eq!(settle(&()), [Settled::Acked]);
    let decl = HandlerDecl::raw(vec![KEY.to_owned()], None, |_| async { Ok(()) });
    assert!(matches!(
        HandlerCall::of(decl.service),
        HandlerCall::Plain(_)
    ));
}

#[test]
fn errors_are_found_along_their_chain() {
    #[derive(Debug)]
    struct Wrapped(BoxError);
    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a layer's wrapper")
        }
    }
    impl StdError for Wrapped {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(&*self.0)
        }
    }
    let wrapped: BoxError = Box::new(Wrapped(Box::new(Elapsed::new())));
    assert!(matches!(kind(&wrapped), Kind::TimedOut));
    assert_eq!(chain(&wrapped), "a layer's wrapper: request timed out");
    let remote: BoxError = Box::new(RemoteError::new("unknown-plan", "no plan gold"));
    assert!(matches!(kind(&remote), Kind::Remote(e) if e.code == "unknown-plan"));
    let overloaded: BoxError = Box::new(tower::load_shed::error::Overloaded::new());
    assert!(matches!(kind(&overloaded), Kind::Overloaded));
    let other: BoxError = "no".into();
    assert!(matches!(kind(&other), Kind::Other));
}
