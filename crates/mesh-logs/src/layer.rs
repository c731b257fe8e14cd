//! The tracing layer: each event becomes a [`LogRecord`] in a bounded buffer, or is dropped
//! and counted when the buffer is full. It never waits.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::record::{LogRecord, SpanRecord};

/// Targets whose records are never shipped: shipping them would log the shipping (the client
/// library mesh-amqp speaks through logs every frame).
const SILENT_TARGETS: [&str; 2] = [mesh_amqp::CLIENT_LOG_TARGET, "mesh_logs"];

/// What the layer and the shipper count together; see [`crate::LogsStats`] for what each
/// means and how they add up.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) logged: AtomicU64,
    pub(crate) dropped: AtomicU64,
    pub(crate) published: AtomicU64,
    /// Never published: lost with a connection or the task, or left in the buffer.
    pub(crate) lost: AtomicU64,
}

impl Counters {
    /// Counts `records` lost, here and in the metric.
    pub(crate) fn lose(&self, records: u64) {
        self.lost.fetch_add(records, Ordering::Relaxed);
        metrics::counter!(crate::names::LOST_METRIC).increment(records);
    }
}

/// A `tracing_subscriber::Layer` that ships each event at or above its level to
/// `mesh.logs` through the shipper's bounded buffer. Get it from [`crate::Logs::layer`].
///
/// Cheap to clone. When the buffer is full (the broker is slow, unreachable or blocking),
/// records are dropped and counted in [`crate::LogsStats::dropped`] and the metric
/// `mesh_logs_dropped_total`; the logging call returns at once either way.
#[derive(Clone)]
pub struct LogsLayer {
    inner: Arc<Inner>,
}

struct Inner {
    buffer: mpsc::Sender<LogRecord>,
    node: String,
    source: String,
    level: LevelFilter,
    counters: Arc<Counters>,
}

impl fmt::Debug for LogsLayer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogsLayer")
            .field("node", &self.inner.node)
            .field("source", &self.inner.source)
            .field("level", &self.inner.level)
            .finish_non_exhaustive()
    }
}

impl LogsLayer {
    pub(crate) fn new(
        buffer: mpsc::Sender<LogRecord>,
        node: String,
        source: String,
        level: LevelFilter,
        counters: Arc<Counters>,
    ) -> LogsLayer {
        LogsLayer {
            inner: Arc::new(Inner {
                buffer,
                node,
                source,
                level,
                counters,
            }),
        }
    }

    fn dropped(&self) {
        self.inner.counters.dropped.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(crate::names::DROPPED_METRIC).increment(1);
    }
}

/// The fields of a span, kept in its extensions for the records logged inside it.
struct SpanFields(BTreeMap<String, Value>);

impl<S> Layer<S> for LogsLayer
where
    S: Subscriber + for<'span> LookupSpan<'span>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut fields = FieldVisitor::default();
        attrs.record(&mut fields);
        span.extensions_mut().insert(SpanFields(fields.fields));
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else { return };
        let mut visitor = FieldVisitor::default();
        values.record(&mut visitor);
        let mut extensions = span.extensions_mut();
        match extensions.get_mut::<SpanFields>() {
            Some(SpanFields(fields)) => fields.extend(visitor.fields),
            None => extensions.insert(SpanFields(visitor.fields)),
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let metadata = event.metadata();
        if *metadata.level() > self.inner.level {
            return;
        }
        let target = metadata.target();
        if SILENT_TARGETS.iter().any(|silent| {
            target
                .strip_prefix(silent)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
        }) {
            return;
        }
        self.inner.counters.logged.fetch_add(1, Ordering::Relaxed);
        metrics::counter!(crate::names::LOGGED_METRIC).increment(1);
        // Full: drop before paying for a record nobody will ship.
        if self.inner.buffer.capacity() == 0 {
            self.dropped();
            return;
        }
        let mut record = LogRecord::new(
            self.inner.node.clone(),
            self.inner.source.clone(),
            level_word(*metadata.level()),
            target.to_owned(),
        );
        let mut visitor = FieldVisitor::default();
        event.record(&mut visitor);
        record.message = visitor.message.unwrap_or_default();
        record.fields = visitor.fields;
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                let fields = span
                    .extensions()
                    .get::<SpanFields>()
                    .map(|SpanFields(fields)| fields.clone())
                    .unwrap_or_default();
                record
                    .spans
                    .push(SpanRecord::new(span.name().to_owned(), fields));
            }
        }
        if self.inner.buffer.try_send(record).is_err() {
            // Full since the check above, or the shipper stopped.
            self.dropped();
        }
    }
}

fn level_word(level: Level) -> &'static str {
    match level {
        Level::ERROR => "error",
        Level::WARN => "warn",
        Level::INFO => "info",
        Level::DEBUG => "debug",
        Level::TRACE => "trace",
    }
}

/// Collects fields as JSON values; `message` apart.
#[derive(Default)]
struct FieldVisitor {
    message: Option<String>,
    fields: BTreeMap<String, Value>,
}

impl FieldVisitor {
    fn put(&mut self, field: &Field, value: Value) {
        if field.name() == "message" {
            self.message = Some(match value {
                Value::String(text) => text,
                other => other.to_string(),
            });
        } else {
            self.fields.insert(field.name().to_owned(), value);
        }
    }
}

impl Visit for FieldVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, Value::from(value));
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, Value::from(value));
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, Value::from(value));
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, Value::from(value));
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, Value::from(value));
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        // The chain, as the mesh's dead-letter errors are written.
        let mut text = value.to_string();
        let mut next = value.source();
        while let Some(cause) = next {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            next = cause.source();
        }
        self.put(field, Value::from(text));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, Value::from(format!("{value:?}")));
    }
}
