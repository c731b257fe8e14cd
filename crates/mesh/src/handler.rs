//! Handlers, type-erased: what the dispatcher calls for a matching delivery.

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use mesh_core::{DeadReason, TopicPattern};

use crate::error::HandlerError;
use crate::event::Event;
use crate::incoming::{Incoming, Meta};

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

/// A registered `on` handler: its patterns and the function.
#[derive(Clone)]
pub(crate) struct HandlerEntry {
    pub(crate) patterns: Vec<TopicPattern>,
    pub(crate) call: ErasedHandler,
}

impl std::fmt::Debug for HandlerEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HandlerEntry")
            .field("patterns", &self.patterns)
            .finish_non_exhaustive()
    }
}

impl HandlerEntry {
    pub(crate) fn matches(&self, key: &str) -> bool {
        self.patterns.iter().any(|p| p.matches(key))
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
pub(crate) fn typed<E, F, Fut>(handler: F) -> ErasedHandler
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
pub(crate) fn raw<F, Fut>(handler: F) -> ErasedHandler
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
