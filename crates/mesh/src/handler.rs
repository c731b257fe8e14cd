//! Handlers, type-erased: what the dispatcher calls for a matching delivery.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use mesh_core::{DeadReason, Envelope, TopicPattern};

use crate::error::HandlerError;
use crate::event::Event;
use crate::incoming::{Incoming, Meta};
use crate::layer::{ErasedHandler, HandlerService, Stack};
use crate::schema::Schema;

/// What became of one handler call.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Done: the event may be acked.
    Done,
    /// Refused by a layer before it ran (load shed, not ready): released back to its queue,
    /// its attempt not counted.
    Release(String),
    /// Failed, worth retrying.
    Retry(String),
    /// Failed for good.
    GiveUp(DeadReason, String),
}

/// How the consumer loop calls a handler.
#[derive(Clone)]
pub(crate) enum HandlerCall {
    /// No layer: the handler itself, called directly.
    Plain(ErasedHandler),
    /// The handler in the user's layers.
    Layered(Arc<Stack<HandlerService>>),
}

impl HandlerCall {
    /// The call of `service`: direct when no layer wraps it.
    pub(crate) fn of(service: HandlerService) -> HandlerCall {
        match service.as_plain() {
            Some(call) => HandlerCall::Plain(Arc::clone(call)),
            None => HandlerCall::Layered(Arc::new(Stack::new(service))),
        }
    }
}

/// A handler as the builder holds it: its patterns, the service, and what it declares
/// about the bodies it reads.
pub(crate) struct HandlerDecl {
    pub(crate) patterns: Vec<String>,
    /// The handler as a service, in its own layers if it has some.
    pub(crate) service: HandlerService,
    /// The schema version it reads (a typed handler's [`Event::SCHEMA`]).
    pub(crate) version: Option<u32>,
    /// The JSON Schema of the bodies it reads, when declared.
    pub(crate) schema: Option<Schema>,
    /// What it reads, for messages: a type's name or the patterns.
    pub(crate) subject: String,
}

impl HandlerDecl {
    /// A typed handler of `E`: its key, version and declared schema.
    pub(crate) fn typed<E, F, Fut>(handler: F) -> HandlerDecl
    where
        E: Event,
        F: Fn(Incoming<E>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        HandlerDecl {
            patterns: vec![E::KEY.to_owned()],
            service: HandlerService::plain(typed::<E, F, Fut>(handler)),
            version: Some(E::SCHEMA),
            schema: E::json_schema(),
            subject: format!("`{}` version {}", std::any::type_name::<E>(), E::SCHEMA),
        }
    }

    /// A raw handler of `patterns`, with the schema it declares, if any.
    pub(crate) fn raw<F, Fut>(patterns: Vec<String>, schema: Option<Schema>, handler: F) -> Self
    where
        F: Fn(Incoming<Bytes>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
    {
        HandlerDecl {
            subject: format!("the handler of `{}`", patterns.join("`, `")),
            patterns,
            service: HandlerService::plain(raw(handler)),
            version: None,
            schema,
        }
    }
}

/// A registered `on` handler: its patterns, the function, and (with validation on and a
/// declared schema) the check its bodies pass first.
#[derive(Clone)]
pub(crate) struct HandlerEntry {
    pub(crate) patterns: Vec<TopicPattern>,
    pub(crate) call: HandlerCall,
    #[cfg(feature = "schemas")]
    pub(crate) check: Option<Arc<crate::schema::Check>>,
}

impl std::fmt::Debug for HandlerEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerEntry")
            .field("patterns", &self.patterns)
            .finish_non_exhaustive()
    }
}

/// A delivery's body parsed once for every handler that checks it.
#[derive(Debug, Default)]
pub(crate) struct ParsedBody {
    #[cfg(feature = "schemas")]
    value: Option<Result<serde_json::Value, String>>,
}

impl HandlerEntry {
    pub(crate) fn matches(&self, key: &str) -> bool {
        self.patterns.iter().any(|p| p.matches(key))
    }

    /// Why this handler must not see the body (it fails the handler's schema), checked
    /// before anything deserializes it; `None` when it may.
    #[cfg(feature = "schemas")]
    pub(crate) fn refusal(&self, envelope: &Envelope, parsed: &mut ParsedBody) -> Option<String> {
        let check = self.check.as_ref()?;
        if !check.applies(envelope.schema_or_default().0) {
            return None;
        }
        let value = parsed
            .value
            .get_or_insert_with(|| crate::schema::parse(&envelope.body));
        match value {
            Ok(value) => check.check(value).err(),
            Err(e) => Some(check.describe(e)),
        }
    }

    /// Why this handler must not see the body: without the `schemas` feature, never.
    #[cfg(not(feature = "schemas"))]
    pub(crate) fn refusal(&self, _envelope: &Envelope, _parsed: &mut ParsedBody) -> Option<String> {
        None
    }
}

/// What a handler's result means for its delivery.
pub(crate) fn outcome(result: Result<(), HandlerError>) -> Outcome {
    match result {
        Ok(()) => Outcome::Done,
        Err(e) => failure(&e),
    }
}

/// What a handler's error means for its delivery: a dead letter for a permanent one, a
/// retry otherwise.
pub(crate) fn failure(error: &HandlerError) -> Outcome {
    match error.dead_reason() {
        Some(reason) => Outcome::GiveUp(reason, error.to_string()),
        None => Outcome::Retry(error.to_string()),
    }
}

/// Wraps a typed handler: checks the schema version, deserializes, calls.
fn typed<E, F, Fut>(handler: F) -> ErasedHandler
where
    E: Event,
    F: Fn(Incoming<E>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    let handler = Arc::new(handler);
    Arc::new(move |meta: Meta| {
        let envelope = meta.envelope();
        let version = envelope.schema_or_default();
        if !E::reads(version.0) {
            let reason = format!(
                "schema version {version} of `{}` is not read by this consumer",
                envelope.key
            );
            return Box::pin(std::future::ready(Err(HandlerError::refused(
                DeadReason::UnreadSchema,
                reason,
            ))));
        }
        match serde_json::from_slice::<E>(&envelope.body) {
            Ok(event) => {
                let handler = Arc::clone(&handler);
                // Called in the future, not here: a panic in its synchronous part is caught
                // with the future's.
                Box::pin(async move { handler(Incoming { event, meta }).await })
            }
            Err(e) => Box::pin(std::future::ready(Err(HandlerError::refused(
                DeadReason::Undecodable,
                format!("body does not fit `{}`: {e}", std::any::type_name::<E>()),
            )))),
        }
    })
}

/// Wraps a raw handler, which receives the JSON body as bytes.
fn raw<F, Fut>(handler: F) -> ErasedHandler
where
    F: Fn(Incoming<Bytes>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), HandlerError>> + Send + 'static,
{
    let handler = Arc::new(handler);
    Arc::new(move |meta: Meta| {
        let event = meta.envelope().body.clone();
        let handler = Arc::clone(&handler);
        Box::pin(async move { handler(Incoming { event, meta }).await })
    })
}
