//! W3C trace context across the broker: the context of the emitting span goes into a
//! message's `traceparent`/`tracestate` headers, and a delivery's span takes it as parent.
//!
//! With the `otel` feature, through `tracing-opentelemetry`: a span has an OpenTelemetry
//! context only when the binary installed an `OpenTelemetryLayer`; without one nothing is
//! injected and nothing is parented, at the cost of a lookup. Without the feature these are
//! no-ops. The propagator is always W3C's `TraceContextPropagator`, not the process's global
//! one, because the header names are part of the wire contract (`mesh_core::codec`).

use mesh_core::Headers;

/// Writes the trace context of `span` (of the current span when `span` is disabled) into
/// `headers`, replacing any trace context already there.
#[cfg(feature = "otel")]
pub(crate) fn inject(span: &tracing::Span, headers: &mut Headers) {
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    let context = if span.is_disabled() {
        tracing::Span::current().context()
    } else {
        span.context()
    };
    if !context.span().span_context().is_valid() {
        return;
    }
    // A forwarder may have copied an older context from the event it handles: ours wins.
    for name in mesh_core::codec::TRACE_CONTEXT_HEADERS {
        headers.remove(name);
    }
    opentelemetry_sdk::propagation::TraceContextPropagator::new()
        .inject_context(&context, &mut HeaderInjector(headers));
}

/// Makes the trace context in `headers`, if any, the parent of `span`. Call it right after
/// creating the span, before it is entered.
#[cfg(feature = "otel")]
pub(crate) fn set_parent(span: &tracing::Span, headers: &Headers) {
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    if span.is_disabled() {
        return;
    }
    let context = opentelemetry_sdk::propagation::TraceContextPropagator::new()
        .extract(&HeaderExtractor(headers));
    if context.span().span_context().is_valid() {
        // Fails only without an OpenTelemetry layer, where there is nothing to parent.
        let _ = span.set_parent(context);
    }
}

#[cfg(not(feature = "otel"))]
pub(crate) fn inject(_span: &tracing::Span, _headers: &mut Headers) {}

#[cfg(not(feature = "otel"))]
pub(crate) fn set_parent(_span: &tracing::Span, _headers: &Headers) {}

/// Writes only the headers the codec names as trace context.
#[cfg(feature = "otel")]
struct HeaderInjector<'a>(&'a mut Headers);

#[cfg(feature = "otel")]
impl opentelemetry::propagation::Injector for HeaderInjector<'_> {
    fn set(&mut self, key: &str, value: String) {
        if let Some(name) = mesh_core::codec::TRACE_CONTEXT_HEADERS
            .iter()
            .find(|name| **name == key)
        {
            self.0.insert((*name).to_owned(), value.into());
        }
    }
}

#[cfg(feature = "otel")]
struct HeaderExtractor<'a>(&'a Headers);

#[cfg(feature = "otel")]
impl opentelemetry::propagation::Extractor for HeaderExtractor<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(mesh_core::HeaderValue::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

#[cfg(all(test, feature = "otel"))]
mod tests {
    use super::*;
    use opentelemetry::trace::TracerProvider as _;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn a_span_context_round_trips_through_headers() {
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, || {
            use opentelemetry::trace::TraceContextExt;
            use tracing_opentelemetry::OpenTelemetrySpanExt;

            let emit = tracing::info_span!("emit");
            let mut headers = Headers::new();
            headers.insert("traceparent".to_owned(), "stale".into());
            inject(&emit, &mut headers);
            let written = headers
                .get(mesh_core::codec::TRACEPARENT)
                .and_then(mesh_core::HeaderValue::as_str)
                .unwrap()
                .to_owned();
            let emitted = emit.context().span().span_context().clone();
            assert_eq!(
                written,
                format!("00-{}-{}-01", emitted.trace_id(), emitted.span_id())
            );

            let handle = tracing::info_span!(parent: None, "handle");
            set_parent(&handle, &headers);
            let handled = handle.context();
            assert_eq!(handled.span().span_context().trace_id(), emitted.trace_id());
        });
    }

    #[test]
    fn nothing_is_injected_without_an_opentelemetry_layer() {
        let subscriber = tracing_subscriber::registry();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("emit");
            let mut headers = Headers::new();
            inject(&span, &mut headers);
            assert!(headers.is_empty());
        });
    }
}
