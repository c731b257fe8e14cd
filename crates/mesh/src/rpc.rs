//! Request/reply: `call` a tool, `serve` one. Requests ride `mesh.rpc`, never
//! `mesh.events`, so a `#` subscription on events stays a pure record of what happened.

use mesh_core::text::{Escaped, EscapedDisplay};
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::stream::FuturesUnordered;
use futures::FutureExt;
use futures::StreamExt;
use mesh_core::codec::{self, RemoteError, RequestMeta};
use mesh_core::{
    Delivery, EventId, ServeSpec, Subscription, Timestamp, ToolKey, Transport, WireMessage,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn, Instrument};

use crate::emitter::Emitter;
use crate::error::{Error, ErrorKind};
use crate::layer::{self, ErasedServe, Failed, Kind, Stack, ToolRequest, ToolService};
#[cfg(feature = "schemas")]
use crate::schema;
use crate::schema::Schema;
use crate::telemetry::{propagation, record};

/// A tool server as the builder holds it: its tool, its service (in its own layers if it has
/// some) and its declared schemas.
pub(crate) struct ServeEntry {
    pub(crate) tool: String,
    pub(crate) service: ToolService,
    /// The JSON Schemas of its request and reply, when declared.
    pub(crate) request: Option<Schema>,
    pub(crate) reply: Option<Schema>,
    /// With validation on, its request schema compiled: a request that does not match it
    /// is refused (`schema-invalid`) before the tool runs.
    #[cfg(feature = "schemas")]
    pub(crate) check: Option<Arc<schema::Check>>,
}

/// A tool server as its loop runs it.
pub(crate) struct Serving {
    pub(crate) tool: String,
    pub(crate) call: ToolCall,
    /// With identity enforced, the access plan's user prefix: a request whose `x-source` is
    /// not its validated user's identity is refused (`forged-source`).
    pub(crate) enforce_identity: Option<String>,
    /// With validation on, the tool's request schema compiled (see [`ServeEntry::check`]).
    #[cfg(feature = "schemas")]
    pub(crate) check: Option<Arc<schema::Check>>,
}

/// How a server's loop calls its tool.
pub(crate) enum ToolCall {
    /// No layer: the server itself, called directly.
    Plain(ErasedServe),
    /// The server in the user's layers.
    Layered(Stack<ToolService>),
}

impl ToolCall {
    /// The call of `service`: direct when no layer wraps it.
    pub(crate) fn of(service: ToolService) -> ToolCall {
        match service.as_plain() {
            Some(call) => ToolCall::Plain(Arc::clone(call)),
            None => ToolCall::Layered(Stack::new(service)),
        }
    }

    /// Answers `request`: the tool's reply, or the error its stack's result means (see
    /// `crate::layer`).
    async fn answer(&self, request: ToolRequest) -> Result<Bytes, RemoteError> {
        let stack = match self {
            ToolCall::Plain(call) => return call(request).await,
            ToolCall::Layered(stack) => stack,
        };
        match stack.call(request).await {
            Ok(reply) => Ok(reply),
            Err(Failed::NotReady(e)) => Err(RemoteError::new(
                RemoteError::OVERLOADED,
                format!("the tool's server was not ready: {}", layer::chain(&e)),
            )),
            Err(Failed::Error(e)) => Err(match layer::kind(&e) {
                Kind::Remote(remote) => remote.clone(),
                Kind::TimedOut => RemoteError::new(
                    RemoteError::TIMEOUT,
                    format!("the tool's server timed out: {}", layer::chain(&e)),
                ),
                Kind::Overloaded => RemoteError::new(
                    RemoteError::OVERLOADED,
                    format!("the tool's server shed the load: {}", layer::chain(&e)),
                ),
                Kind::Handler(_) | Kind::Other => {
                    RemoteError::new(RemoteError::INTERNAL, layer::chain(&e))
                }
            }),
        }
    }
}

impl ServeEntry {
    pub(crate) fn new<Req, Resp, F, Fut>(tool: String, handler: F) -> ServeEntry
    where
        Req: DeserializeOwned + Send + 'static,
        Resp: Serialize + Send + 'static,
        F: Fn(Req, RequestMeta) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, RemoteError>> + Send + 'static,
    {
        let handler = Arc::new(handler);
        let call: ErasedServe = Arc::new(move |ToolRequest { body, meta }| {
            let request = match serde_json::from_slice::<Req>(&body) {
                Ok(request) => request,
                Err(e) => {
                    return Box::pin(std::future::ready(Err(RemoteError::new(
                        RemoteError::INVALID_REQUEST,
                        e.to_string(),
                    ))))
                }
            };
            let handler = Arc::clone(&handler);
            Box::pin(async move {
                let response = handler(request, meta).await?;
                serde_json::to_vec(&response).map(Bytes::from).map_err(|e| {
                    RemoteError::new(
                        RemoteError::INTERNAL,
                        format!("reply could not be serialized: {e}"),
                    )
                })
            })
        });
        ServeEntry {
            tool,
            service: ToolService::plain(call),
            request: None,
            reply: None,
            #[cfg(feature = "schemas")]
            check: None,
        }
    }

    /// Declares the JSON Schemas of its request and reply.
    #[cfg(feature = "schemas")]
    pub(crate) fn with_schemas(mut self, request: Option<Schema>, reply: Option<Schema>) -> Self {
        self.request = request;
        self.reply = reply;
        self
    }
}

/// Subscribes to the requests of `entry`'s tool.
pub(crate) async fn subscribe(
    transport: &dyn Transport,
    tool: &str,
    prefetch: u16,
) -> Result<Subscription, Error> {
    let tool = ToolKey::parse(tool)?;
    Ok(transport.serve(ServeSpec { tool, prefetch }).await?)
}

/// Serves `subscription` until `stop` fires, as the event dispatcher consumes: requests are
/// answered on this task, concurrently up to the prefetch (the subscription holds no more),
/// with no task per request. On `stop`, requests not yet started are released and those
/// started are answered before this returns.
pub(crate) async fn serve_loop(
    entry: Arc<Serving>,
    mut subscription: Subscription,
    stop: CancellationToken,
) {
    let mut running = FuturesUnordered::new();
    let mut open = true;
    while open {
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            Some(()) = running.next(), if !running.is_empty() => {}
            request = subscription.next() => match request {
                Some(request) => running.push(answer(&entry, request)),
                None => open = false,
            },
        }
    }
    subscription.cancel();
    while running.next().await.is_some() {}
    debug!(tool = %entry.tool, "server stopped");
}

/// Whether, with identity enforced, a request's `x-source` is not its validated user's.
fn forged_caller(entry: &Serving, meta: &RequestMeta) -> bool {
    entry
        .enforce_identity
        .as_deref()
        .is_some_and(|prefix| !codec::caller_is(&meta.source, meta.user.as_deref(), prefix))
}

/// With validation on, why a request's body does not match the tool's request schema (its
/// first violation, paths only, bounded); `None` when it matches or nothing is checked.
#[cfg(feature = "schemas")]
fn invalid_body(entry: &Serving, body: &[u8]) -> Option<String> {
    let check = entry.check.as_deref()?;
    match schema::parse(body) {
        Ok(value) => check.check(&value).err(),
        Err(e) => Some(check.describe(&e)),
    }
}

#[cfg(not(feature = "schemas"))]
fn invalid_body(_entry: &Serving, _body: &[u8]) -> Option<String> {
    None
}

async fn answer(entry: &Serving, request: Delivery) {
    let result = match codec::decode_request(&request.message) {
        Err(e) => Err(RemoteError::new(
            RemoteError::INVALID_REQUEST,
            e.to_string(),
        )),
        Ok(meta) if forged_caller(entry, &meta) => {
            warn!(
                tool = %entry.tool,
                source = %Escaped(&meta.source),
                user = %Escaped(meta.user.as_deref().unwrap_or("")),
                "request refused: its x-source is not its validated user's identity"
            );
            Err(RemoteError::new(
                RemoteError::FORGED_SOURCE,
                format!(
                    "the request claims `{}` as its caller, but its validated user is {}",
                    mesh_core::text::escape(&meta.source),
                    meta.user.as_deref().map_or_else(
                        || "none".to_owned(),
                        |u| format!("`{}`", mesh_core::text::escape(u))
                    ),
                ),
            ))
        }
        Ok(meta) => match invalid_body(entry, &request.message.body) {
            Some(problem) => {
                debug!(
                    tool = %entry.tool,
                    problem = %Escaped(&problem),
                    "request refused: schema-invalid"
                );
                Err(RemoteError::new(RemoteError::SCHEMA_INVALID, problem))
            }
            None => serve_one(entry, &request.message, meta).await,
        },
    };
    record::served(&entry.tool, if result.is_ok() { "ok" } else { "error" });
    if request.message.properties.reply_to.is_none() {
        // Nobody waits for an answer: the work is done, so the request is.
        warn!(tool = %entry.tool, "request without reply_to handled; reply dropped");
        if let Err(e) = request.ack().await {
            warn!(error = %EscapedDisplay(&e), "ack of a request failed");
        }
        return;
    }
    if let Err(e) = request.reply(codec::encode_reply(&result)).await {
        // Not acked: the request is redelivered and answered again.
        warn!(tool = %entry.tool, error = %EscapedDisplay(&e), "reply could not be sent");
    }
}

/// Calls the tool on a request that passed the runtime's checks, in its span and causation
/// scope: its reply, or its error (a panic answered `internal`).
async fn serve_one(
    entry: &Serving,
    request: &WireMessage,
    meta: RequestMeta,
) -> Result<Bytes, RemoteError> {
    let span = tracing::info_span!(
        "mesh.serve",
        otel.kind = "server",
        tool = %entry.tool,
        id = %meta.id,
        causation_id = meta.causation_id.as_deref(),
        source = %Escaped(&meta.source),
    );
    propagation::set_parent(&span, &request.properties.headers);
    let cause = meta.id;
    let call = entry.call.answer(ToolRequest {
        body: request.body.clone(),
        meta,
    });
    match AssertUnwindSafe(crate::causation::scope(cause, call))
        .catch_unwind()
        .instrument(span)
        .await
    {
        Ok(result) => result,
        Err(_) => Err(RemoteError::new(
            RemoteError::INTERNAL,
            "the tool's handler panicked",
        )),
    }
}

/// Calls tool `tool` with a JSON body (checked to be JSON) in the emitter's name and waits up
/// to `timeout` for the reply (see [`Bus::call`](crate::Bus::call)).
pub(crate) async fn call(
    emitter: &Emitter,
    tool: &str,
    body: Bytes,
    timeout: Duration,
) -> Result<Bytes, Error> {
    let tool = ToolKey::parse(tool)?;
    serde_json::from_slice::<serde::de::IgnoredAny>(&body)
        .map_err(|e| Error::with_source(ErrorKind::Payload, e))?;
    let meta = RequestMeta {
        id: EventId::new(),
        source: emitter.identity().owner(emitter.node()).to_string(),
        node: emitter.node().to_string(),
        time: Timestamp::now(),
        causation_id: crate::causation::current(),
        user: None,
    };
    let span = tracing::info_span!(
        "mesh.call",
        otel.kind = "client",
        %tool,
        id = %meta.id,
        causation_id = meta.causation_id.as_deref(),
    );
    let started = Instant::now();
    let result = async {
        let mut request = codec::encode_request(&tool, &meta, body);
        propagation::inject(&span, &mut request.properties.headers);
        let reply = emitter.transport().call(&tool, request, timeout).await?;
        debug!("reply received");
        match codec::decode_reply(&reply)? {
            Ok(body) => Ok(body),
            Err(remote) => Err(Error::new(ErrorKind::Remote {
                code: remote.code,
                message: remote.message,
            })),
        }
    }
    .instrument(span.clone())
    .await;
    let outcome = match &result {
        Ok(_) => "ok",
        Err(e) => match e.kind() {
            ErrorKind::Remote { .. } => "remote-error",
            ErrorKind::Transport(kind) => record::reason(kind),
            ErrorKind::Closed => "closed",
            _ => "invalid-reply",
        },
    };
    record::called(tool.as_str(), started.elapsed(), outcome);
    result
}
