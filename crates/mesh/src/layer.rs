//! Middleware: handlers and tool servers as [`tower`](https://docs.rs/tower) services, and
//! the layers a bus wraps them in.
//!
//! Inside the runtime every handler is a [`HandlerService`] (a `Service<Meta>`) and every
//! tool server a [`ToolService`] (a `Service<ToolRequest>`). A [`tower::Layer`] wraps them:
//! for every handler and server of a bus with [`BusBuilder::layer`], for one with
//! [`BusBuilder::on_layered`], [`BusBuilder::on_raw_layered`] or
//! [`BusBuilder::serve_layered`]. `tower`'s own layers (`TimeoutLayer`,
//! `ConcurrencyLimitLayer`, `RateLimitLayer`, `LoadShedLayer`, …) and a layer of your own
//! work unchanged.
//!
//! # Order
//!
//! The runtime's own concerns run before any layer and are not layers: a delivery is decoded
//! (its contract headers), its source checked ([`BusBuilder::enforce_identity`]), its span
//! (`mesh.handle`) and metrics started, its handlers matched and its body checked against
//! their schemas ([`BusBuilder::validate_schemas`]). A delivery refused there (undecodable,
//! forged, unmatched, schema-invalid) never reaches a layer. Then, for each matching handler,
//! inside the delivery's span and causation scope: the bus's layers in the order they were
//! added (the first is the outermost), then the handler's own layers (likewise), then the
//! handler itself, which deserializes a typed handler's body and calls your function (a
//! [`dedup`](crate::dedup) wrapper is part of that function). A tool's request goes the same
//! way: decoded, its caller checked, its span (`mesh.serve`) started, then the bus's layers,
//! the server's own layers, the request's body deserialized, your function.
//!
//! ```text
//!   delivery ─► decode ─► identity ─► span, metrics ─► match ─► schema check
//!                                                                  │
//!        ┌─────────────────────────────────────────────────────────┘
//!        ▼
//!   bus layer 1 ─► bus layer 2 ─► handler layer ─► body decode ─► your handler
//!        │  (each: poll_ready, then call)                              │
//!        ▼                                                             ▼
//!   outcome ◄──────────────────────────────────────────────── Ok / Err
//!        │
//!        ▼
//!   settle: ack, counted retry, dead letter, or release (uncounted)
//! ```
//!
//! # Outcomes
//!
//! What a layered handler's result means for its delivery:
//!
//! | the stack's result | the delivery |
//! |---|---|
//! | `Ok(())` | acked |
//! | the handler's [`HandlerError`] (as a [`HandlerFailed`]) | as without layers: a retry, or a dead letter `permanent` |
//! | `tower::timeout::error::Elapsed` (a `TimeoutLayer`) | a counted retry down the ladder; past the last attempt, a dead letter `max-attempts` whose last error says it timed out |
//! | `tower::load_shed::error::Overloaded` (a `LoadShedLayer`), or an error from `poll_ready` | released back to its queue at once, its attempt not counted: the layer refused it before it ran |
//! | any other error a layer returns | classified like a handler's: a counted retry (a layer gives up for good by returning [`HandlerFailed`] of a permanent [`HandlerError`]) |
//!
//! The runtime waits for a service to be ready before calling it (`poll_ready`): a
//! `ConcurrencyLimitLayer` or a `RateLimitLayer` makes the deliveries beyond it wait, held and
//! unacked, up to the bus's prefetch (no more are delivered meanwhile). That is the
//! back-pressure a consumer wants; a `LoadShedLayer` instead refuses them, and a refused
//! delivery comes back (on RabbitMQ at once, to any consumer of the queue), so shed only
//! where another consumer can take the work.
//!
//! A tool server's stack answers the caller: its [`RemoteError`] as it is, `Elapsed` as the
//! remote error [`RemoteError::TIMEOUT`], `Overloaded` or a `poll_ready` error as
//! [`RemoteError::OVERLOADED`] (answered, not released: the caller waits for an answer, and
//! learns at once to back off), any other error as [`RemoteError::INTERNAL`] with the error's
//! message. The caller sees each as [`ErrorKind::Remote`](crate::ErrorKind::Remote).
//!
//! A panic anywhere in the stack is a handler's panic: a counted retry, or for a tool the
//! remote error [`RemoteError::INTERNAL`].
//!
//! # Cost
//!
//! A handler or server without layers is called directly, as before. With layers, each
//! service is one instance per bus behind an asynchronous lock taken for `poll_ready` and
//! `call` (not for the response's future), so layers need not be `Clone` and share their
//! state (a concurrency limit's permits, a rate limit's window) across the deliveries.
//!
//! ```
//! # use serde::{Deserialize, Serialize};
//! # #[derive(Serialize, Deserialize)]
//! # struct SiteCreated { site: String }
//! # impl mesh::Event for SiteCreated { const KEY: &'static str = "module.umami.site.created"; }
//! # #[tokio::main] async fn main() -> Result<(), mesh::Error> {
//! use std::{sync::Arc, time::Duration};
//! use mesh::{Bus, HandlerError, Incoming};
//! use tower::limit::ConcurrencyLimitLayer;
//! use tower::timeout::TimeoutLayer;
//!
//! let broker = mesh::MemoryBroker::new();
//! let stats = Bus::builder()
//!     .node("anchor")
//!     .module("stats")
//!     // Every handler and tool server of the bus: a timeout is a counted retry.
//!     .layer(TimeoutLayer::new(Duration::from_secs(5)))
//!     // This handler only: at most two at once, the others wait.
//!     .on_layered(ConcurrencyLimitLayer::new(2), |e: Incoming<SiteCreated>| async move {
//!         println!("{} created", e.event.site);
//!         Ok::<_, HandlerError>(())
//!     })
//!     .start(Arc::new(broker.transport()))
//!     .await?;
//! stats.drain().await?;
//! # Ok(()) }
//! ```
//!
//! [`BusBuilder::layer`]: crate::BusBuilder::layer
//! [`BusBuilder::on_layered`]: crate::BusBuilder::on_layered
//! [`BusBuilder::on_raw_layered`]: crate::BusBuilder::on_raw_layered
//! [`BusBuilder::serve_layered`]: crate::BusBuilder::serve_layered
//! [`BusBuilder::enforce_identity`]: crate::BusBuilder::enforce_identity
//! [`BusBuilder::validate_schemas`]: crate::BusBuilder::validate_schemas
//! [`tower::Layer`]: tower_layer::Layer

use std::error::Error as StdError;
use std::fmt;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::future::BoxFuture;
use mesh_core::{BoxError, RemoteError, RequestMeta};
use tokio::sync::Mutex;

pub use tower_layer::Layer;
pub use tower_service::Service;

use crate::error::HandlerError;
use crate::incoming::Meta;

/// A handler, type-erased: the event's metadata in, its result out (`crate::handler` makes
/// them).
pub(crate) type ErasedHandler =
    std::sync::Arc<dyn Fn(Meta) -> BoxFuture<'static, Result<(), HandlerError>> + Send + Sync>;

/// A service of any type, erased behind the one shape the runtime calls.
trait Erased<Req, Resp>: Send {
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>>;
    fn call(&mut self, request: Req) -> BoxFuture<'static, Result<Resp, BoxError>>;
}

impl<S, Req, Resp> Erased<Req, Resp> for S
where
    S: Service<Req, Response = Resp> + Send,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Service::poll_ready(self, cx).map_err(Into::into)
    }

    fn call(&mut self, request: Req) -> BoxFuture<'static, Result<Resp, BoxError>> {
        let response = Service::call(self, request);
        Box::pin(async move { response.await.map_err(Into::into) })
    }
}

/// What a lock holds, reached through `&mut` (no locking; a poisoned lock's value is still
/// the service).
fn unlocked<T: ?Sized>(lock: &mut std::sync::Mutex<Box<T>>) -> &mut T {
    lock.get_mut()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .as_mut()
}

/// A handler's error as it passes up through layers: a [`std::error::Error`] holding the
/// [`HandlerError`] the handler returned. A layer returns one of its own to fail a delivery as
/// a handler would (`HandlerFailed::from(HandlerError::permanent(…))` dead-letters it), and
/// finds the handler's by downcasting the error it receives.
#[derive(Debug)]
pub struct HandlerFailed(HandlerError);

impl HandlerFailed {
    /// The handler's error.
    pub fn error(&self) -> &HandlerError {
        &self.0
    }

    /// The handler's error, taken out.
    pub fn into_error(self) -> HandlerError {
        self.0
    }
}

impl From<HandlerError> for HandlerFailed {
    fn from(error: HandlerError) -> Self {
        HandlerFailed(error)
    }
}

impl fmt::Display for HandlerFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl StdError for HandlerFailed {}

enum HandlerInner {
    /// The handler itself.
    Plain(ErasedHandler),
    /// The handler in layers (in a lock only so the builder holding it is `Sync`: it is
    /// reached through `&mut`, never locked).
    Layered(std::sync::Mutex<Box<dyn Erased<Meta, ()>>>),
}

/// A handler as a [`Service`]: what a layer wraps. Always ready; its call deserializes a
/// typed handler's body and runs the handler. Its error is a [`BoxError`]: the handler's
/// [`HandlerError`] as a [`HandlerFailed`] (a body that does not decode is one too, permanent).
pub struct HandlerService {
    inner: HandlerInner,
}

impl fmt::Debug for HandlerService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let layered = matches!(self.inner, HandlerInner::Layered(_));
        f.debug_struct("HandlerService")
            .field("layered", &layered)
            .finish()
    }
}

impl HandlerService {
    pub(crate) fn plain(call: ErasedHandler) -> HandlerService {
        HandlerService {
            inner: HandlerInner::Plain(call),
        }
    }

    /// The handler itself when no layer wraps it: the consumer loop calls it directly.
    pub(crate) fn as_plain(&self) -> Option<&ErasedHandler> {
        match &self.inner {
            HandlerInner::Plain(call) => Some(call),
            HandlerInner::Layered(_) => None,
        }
    }

    fn layered<S>(service: S) -> HandlerService
    where
        S: Service<Meta, Response = ()> + Send + 'static,
        S::Error: Into<BoxError>,
        S::Future: Send + 'static,
    {
        HandlerService {
            inner: HandlerInner::Layered(std::sync::Mutex::new(Box::new(service))),
        }
    }
}

impl Service<Meta> for HandlerService {
    type Response = ();
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<(), BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match &mut self.inner {
            HandlerInner::Plain(_) => Poll::Ready(Ok(())),
            HandlerInner::Layered(service) => unlocked(service).poll_ready(cx),
        }
    }

    fn call(&mut self, meta: Meta) -> Self::Future {
        match &mut self.inner {
            HandlerInner::Plain(call) => {
                let handled = call(meta);
                Box::pin(async move {
                    handled
                        .await
                        .map_err(|e| Box::new(HandlerFailed(e)) as BoxError)
                })
            }
            HandlerInner::Layered(service) => unlocked(service).call(meta),
        }
    }
}

/// What a tool server is asked: the request's JSON body and its metadata.
#[derive(Debug, Clone)]
pub struct ToolRequest {
    /// The request's body, as sent (deserialized into the tool's request type innermost).
    pub body: Bytes,
    /// Who asked, when, and in answer to what.
    pub meta: RequestMeta,
}

pub(crate) type ErasedServe = std::sync::Arc<
    dyn Fn(ToolRequest) -> BoxFuture<'static, Result<Bytes, RemoteError>> + Send + Sync,
>;

enum ToolInner {
    Plain(ErasedServe),
    Layered(std::sync::Mutex<Box<dyn Erased<ToolRequest, Bytes>>>),
}

/// A tool server as a [`Service`]: what a layer wraps. Always ready; its call deserializes the
/// request, runs the tool and serializes its reply. Its error is a [`BoxError`]: the tool's
/// [`RemoteError`] (one with code [`RemoteError::INVALID_REQUEST`] for a body that does not
/// fit the request type).
pub struct ToolService {
    inner: ToolInner,
}

impl fmt::Debug for ToolService {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let layered = matches!(self.inner, ToolInner::Layered(_));
        f.debug_struct("ToolService")
            .field("layered", &layered)
            .finish()
    }
}

impl ToolService {
    pub(crate) fn plain(call: ErasedServe) -> ToolService {
        ToolService {
            inner: ToolInner::Plain(call),
        }
    }

    /// The server itself when no layer wraps it.
    pub(crate) fn as_plain(&self) -> Option<&ErasedServe> {
        match &self.inner {
            ToolInner::Plain(call) => Some(call),
            ToolInner::Layered(_) => None,
        }
    }

    fn layered<S>(service: S) -> ToolService
    where
        S: Service<ToolRequest, Response = Bytes> + Send + 'static,
        S::Error: Into<BoxError>,
        S::Future: Send + 'static,
    {
        ToolService {
            inner: ToolInner::Layered(std::sync::Mutex::new(Box::new(service))),
        }
    }
}

impl Service<ToolRequest> for ToolService {
    type Response = Bytes;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Bytes, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match &mut self.inner {
            ToolInner::Plain(_) => Poll::Ready(Ok(())),
            ToolInner::Layered(service) => unlocked(service).poll_ready(cx),
        }
    }

    fn call(&mut self, request: ToolRequest) -> Self::Future {
        match &mut self.inner {
            ToolInner::Plain(call) => {
                let answered = call(request);
                Box::pin(async move { answered.await.map_err(|e| Box::new(e) as BoxError) })
            }
            ToolInner::Layered(service) => unlocked(service).call(request),
        }
    }
}

/// A [`Layer`] that wraps a handler ([`BusBuilder::on_layered`](crate::BusBuilder::on_layered)):
/// implemented for every layer whose service over a [`HandlerService`] is a
/// `Service<Meta, Response = ()>` with an error convertible to a [`BoxError`] and a `Send`
/// future.
pub trait HandlerLayer {
    /// Wraps `service`.
    #[doc(hidden)]
    fn wrap_handler(&self, service: HandlerService) -> HandlerService;
}

impl<L> HandlerLayer for L
where
    L: Layer<HandlerService>,
    L::Service: Service<Meta, Response = ()> + Send + 'static,
    <L::Service as Service<Meta>>::Error: Into<BoxError>,
    <L::Service as Service<Meta>>::Future: Send + 'static,
{
    fn wrap_handler(&self, service: HandlerService) -> HandlerService {
        HandlerService::layered(self.layer(service))
    }
}

/// A [`Layer`] that wraps a tool server
/// ([`BusBuilder::serve_layered`](crate::BusBuilder::serve_layered)): implemented for every
/// layer whose service over a [`ToolService`] is a `Service<ToolRequest, Response = Bytes>`
/// with an error convertible to a [`BoxError`] and a `Send` future.
pub trait ToolLayer {
    /// Wraps `service`.
    #[doc(hidden)]
    fn wrap_tool(&self, service: ToolService) -> ToolService;
}

impl<L> ToolLayer for L
where
    L: Layer<ToolService>,
    L::Service: Service<ToolRequest, Response = Bytes> + Send + 'static,
    <L::Service as Service<ToolRequest>>::Error: Into<BoxError>,
    <L::Service as Service<ToolRequest>>::Future: Send + 'static,
{
    fn wrap_tool(&self, service: ToolService) -> ToolService {
        ToolService::layered(self.layer(service))
    }
}

/// A [`Layer`] for every handler and tool server of a bus
/// ([`BusBuilder::layer`](crate::BusBuilder::layer)): a [`HandlerLayer`] and a [`ToolLayer`]
/// at once, shared by the bus's threads. Generic layers (`tower`'s, or yours written for any
/// request) are; a layer of yours that reads [`Meta`] implements `Service<Meta>` and
/// `Service<ToolRequest>` for its service (or wraps only handlers, per handler).
pub trait BusLayer: HandlerLayer + ToolLayer + Send + Sync + 'static {}

impl<L: HandlerLayer + ToolLayer + Send + Sync + 'static> BusLayer for L {}

/// A service behind the user's layers, called one delivery at a time for readiness.
pub(crate) struct Stack<S>(Mutex<S>);

impl<S> Stack<S> {
    pub(crate) fn new(service: S) -> Stack<S> {
        Stack(Mutex::new(service))
    }
}

/// Why a stack did not answer.
pub(crate) enum Failed {
    /// It refused before it ran: `poll_ready` failed.
    NotReady(BoxError),
    /// It ran and failed.
    Error(BoxError),
}

impl<S> Stack<S> {
    /// Waits for the service to be ready, calls it, and awaits its response (with the lock
    /// held only for readiness and the call).
    pub(crate) async fn call<Req, Resp>(&self, request: Req) -> Result<Resp, Failed>
    where
        S: Service<Req, Response = Resp, Error = BoxError>,
    {
        let response = {
            let mut service = self.0.lock().await;
            if let Err(e) = std::future::poll_fn(|cx| service.poll_ready(cx)).await {
                return Err(Failed::NotReady(e));
            }
            service.call(request)
        };
        response.await.map_err(Failed::Error)
    }
}

/// What a layer's error is, found along its chain of sources.
pub(crate) enum Kind<'a> {
    /// The handler's own error.
    Handler(&'a HandlerError),
    /// A tool's own error.
    Remote(&'a RemoteError),
    /// A timeout layer gave up.
    TimedOut,
    /// A load-shedding layer refused it.
    Overloaded,
    /// Anything else.
    Other,
}

/// What `error` is: the first error of its chain the runtime knows.
pub(crate) fn kind(error: &BoxError) -> Kind<'_> {
    let mut next: Option<&(dyn StdError + 'static)> = Some(error.as_ref());
    while let Some(error) = next {
        if let Some(failed) = error.downcast_ref::<HandlerFailed>() {
            return Kind::Handler(&failed.0);
        }
        if let Some(remote) = error.downcast_ref::<RemoteError>() {
            return Kind::Remote(remote);
        }
        if error.is::<tower::timeout::error::Elapsed>() {
            return Kind::TimedOut;
        }
        if error.is::<tower::load_shed::error::Overloaded>() {
            return Kind::Overloaded;
        }
        next = error.source();
    }
    Kind::Other
}

/// `error` and its sources, as one line.
pub(crate) fn chain(error: &BoxError) -> String {
    use std::fmt::Write as _;
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(cause) = next {
        let _ = write!(text, ": {cause}");
        next = cause.source();
    }
    text
}
