//! For binaries: spans over OTLP/HTTP, through a `tracing-opentelemetry` layer.

use mesh_core::text::EscapedDisplay;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing::Subscriber;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::error::{Error, ErrorKind};

/// Builds a tracing layer that exports spans to an OTLP/HTTP collector at `endpoint`
/// (e.g. `http://127.0.0.1:4318/v1/traces`) as service `service_name`, in batches on a
/// thread of its own. Add it to the binary's subscriber; keep the guard until exit, when
/// dropping it flushes what is buffered.
///
/// It also registers the provider as OpenTelemetry's global one. The endpoint is taken as
/// given: this function reads no environment variable.
///
/// ```no_run
/// use tracing_subscriber::layer::SubscriberExt;
/// use tracing_subscriber::util::SubscriberInitExt;
/// # fn run() -> Result<(), mesh::Error> {
/// let (otlp, _guard) = mesh::telemetry::otlp_layer("billing", "http://127.0.0.1:4318/v1/traces")?;
/// tracing_subscriber::registry().with(otlp).init();
/// # Ok(()) }
/// ```
pub fn otlp_layer<S>(
    service_name: &str,
    endpoint: &str,
) -> Result<(impl Layer<S> + Send + Sync + 'static, OtlpGuard), Error>
where
    S: Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
{
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_endpoint(endpoint)
        .with_timeout(Duration::from_secs(10))
        .build()
        .map_err(|e| Error::with_source(ErrorKind::Telemetry, e))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            Resource::builder()
                .with_service_name(service_name.to_owned())
                .build(),
        )
        .build();
    opentelemetry::global::set_tracer_provider(provider.clone());
    let tracer = provider.tracer("mesh");
    let layer = tracing_opentelemetry::layer().with_tracer(tracer);
    Ok((layer, OtlpGuard { provider }))
}

/// Flushes and shuts the exporter down when dropped.
#[derive(Debug)]
pub struct OtlpGuard {
    provider: SdkTracerProvider,
}

impl Drop for OtlpGuard {
    fn drop(&mut self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %EscapedDisplay(&e), "otlp exporter shutdown failed");
        }
    }
}
