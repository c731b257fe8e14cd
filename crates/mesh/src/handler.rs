//! Handlers, type-erased: what the dispatcher calls for a matching delivery.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use mesh_core::{DeadReason, Envelope, TopicPattern};

use crate::error::HandlerError;
use crate::event::Event;
use crate::incoming::{Incoming, Meta};
use crate::schema::Schema;

/// What became of one handler call.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Done: the event may be acked.
    Done,
    /// Failed, worth retrying.
    Retry(String),
    /// Failed for good.
    GiveUp(DeadReason, String),
}

pub(crate) type ErasedHandler = Arc<dyn Fn(Meta) -> BoxFuture<'static, Outcome> + Send + Sync>;

/// A handler as the builder holds it: its patterns, the function, and what it declares
/// about the bodies it reads.
pub(crate) struct HandlerDecl {
    pub(crate) patterns: Vec<String>,
    pub(crate) call: ErasedHandler,
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
            call: typed::<E, F, Fut>(handler),
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
            call: raw(handler),
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
    pub(crate) call: ErasedHandler,
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

fn outcome(result: Result<(), HandlerError>) -> Outcome {
    match result {
        Ok(()) => Outcome::Done,
        Err(e) if e.is_permanent() => Outcome::GiveUp(DeadReason::Permanent, e.to_string()),
        Err(e) => Outcome::Retry(e.to_string()),
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
            return Box::pin(std::future::ready(Outcome::GiveUp(
                DeadReason::UnreadSchema,
                reason,
            )));
        }
        match serde_json::from_slice::<E>(&envelope.body) {
            Ok(event) => {
                let handler = Arc::clone(&handler);
                Box::pin(async move { outcome(handler(Incoming { event, meta }).await) })
            }
            Err(e) => Box::pin(std::future::ready(Outcome::GiveUp(
                DeadReason::Undecodable,
                format!("body does not fit `{}`: {e}", std::any::type_name::<E>()),
            ))),
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
        Box::pin(async move { outcome(handler(Incoming { event, meta }).await) })
    })
}
