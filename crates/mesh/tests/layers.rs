//! Middleware: `tower` layers around handlers and tool servers (`BusBuilder::layer`,
//! `on_layered`, `serve_layered`), on the in-memory broker under a paused clock and on
//! RabbitMQ in real time:
//!
//! - a `TimeoutLayer` of 50 ms turns a slow handler's delivery into counted retries and then a
//!   dead letter `max-attempts` whose last error says it timed out;
//! - a `ConcurrencyLimitLayer(2)` never lets a third handler run at once (an atomic
//!   high-water mark);
//! - a layer of our own sees every delivery's `Meta` (retries included) and adds a tracing
//!   span with a field of its own, inside the runtime's `mesh.handle`;
//! - the same for a tool server: a timeout answers the caller with the remote error
//!   `timeout`, a concurrency limit holds, our layer sees every request's metadata.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use mesh::layer::{Layer, Service, ToolRequest};
use mesh::testing::Harness;
use mesh::{
    DeadReason, ErrorKind, Event, EventId, HandlerError, Incoming, Meta, RemoteError, RequestMeta,
    RetryPolicy,
};
use mesh_testkit::TestVhost;
use serde::{Deserialize, Serialize};
use tower::limit::ConcurrencyLimitLayer;
use tower::timeout::TimeoutLayer;
use tracing::Instrument;
use tracing_subscriber::layer::SubscriberExt;

#[derive(Debug, Serialize, Deserialize)]
struct ReportRequested {
    report: u64,
}

impl Event for ReportRequested {
    const KEY: &'static str = "module.desk.report.requested";
}

#[derive(Debug, Serialize, Deserialize)]
struct InvoicePaid {
    invoice: u64,
}

impl Event for InvoicePaid {
    const KEY: &'static str = "module.desk.invoice.paid";
}

#[derive(Debug, Serialize, Deserialize)]
struct SiteCreated {
    site: u64,
}

impl Event for SiteCreated {
    const KEY: &'static str = "module.desk.site.created";
}

/// How long the slow handler and tool would take: far past the 50 ms timeout.
const SLOW: Duration = Duration::from_secs(3600);
/// How long a limited handler or tool works (it holds its slot that long).
const WORK: Duration = Duration::from_millis(100);
/// Events (and calls) put through the concurrency limit.
const BURST: usize = 8;

/// How many run at once, and the most that ever did.
#[derive(Debug, Default)]
struct HighWater {
    running: AtomicUsize,
    most: AtomicUsize,
    done: AtomicUsize,
    finished: tokio::sync::Notify,
}

impl HighWater {
    async fn work(&self) {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        tokio::time::sleep(WORK).await;
        self.running.fetch_sub(1, Ordering::SeqCst);
        self.done.fetch_add(1, Ordering::SeqCst);
        self.finished.notify_waiters();
    }

    /// Waits until `count` finished.
    async fn finished(&self, count: usize) -> anyhow::Result<()> {
        tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let finished = self.finished.notified();
                if self.done.load(Ordering::SeqCst) >= count {
                    return;
                }
                finished.await;
            }
        })
        .await
        .map_err(|_| anyhow::anyhow!("{} of {count} finished", self.done.load(Ordering::SeqCst)))
    }
}

/// What our layer saw: each delivery's id and attempt, each request's id and source.
#[derive(Debug, Default)]
struct Seen {
    deliveries: Mutex<Vec<(EventId, u32)>>,
    requests: Mutex<Vec<(EventId, String)>>,
}

/// A layer of our own: records what each handler or tool is given and runs it in a span
/// `tenant` whose field `tenant` is the caller's source.
#[derive(Debug, Clone)]
struct TenantLayer(Arc<Seen>);

impl<S> Layer<S> for TenantLayer {
    type Service = Tenant<S>;

    fn layer(&self, inner: S) -> Tenant<S> {
        Tenant {
            inner,
            seen: Arc::clone(&self.0),
        }
    }
}

#[derive(Debug)]
struct Tenant<S> {
    inner: S,
    seen: Arc<Seen>,
}

type Boxed<T, E> = Pin<Box<dyn Future<Output = Result<T, E>> + Send>>;

impl<S> Service<Meta> for Tenant<S>
where
    S: Service<Meta>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Boxed<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, meta: Meta) -> Self::Future {
        if let Ok(mut seen) = self.seen.deliveries.lock() {
            seen.push((meta.id(), meta.attempt()));
        }
        let span = tracing::info_span!("tenant", tenant = %meta.source());
        Box::pin(self.inner.call(meta).instrument(span))
    }
}

impl<S> Service<ToolRequest> for Tenant<S>
where
    S: Service<ToolRequest>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Boxed<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: ToolRequest) -> Self::Future {
        if let Ok(mut seen) = self.seen.requests.lock() {
            seen.push((request.meta.id, request.meta.source.clone()));
        }
        let span = tracing::info_span!("tenant", tenant = %request.meta.source);
        Box::pin(self.inner.call(request).instrument(span))
    }
}

/// A `tenant` span made: its field, and its parent span's name.
type TenantSpan = (String, Option<String>);

/// The `tenant` spans made.
#[derive(Debug, Default, Clone)]
struct Spans(Arc<Mutex<Vec<TenantSpan>>>);

impl<S> tracing_subscriber::Layer<S> for Spans
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        if attrs.metadata().name() != "tenant" {
            return;
        }
        struct Tenant(String);
        impl tracing::field::Visit for Tenant {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "tenant" {
                    self.0 = format!("{value:?}");
                }
            }
        }
        let mut tenant = Tenant(String::new());
        attrs.record(&mut tenant);
        let parent = ctx
            .span(id)
            .and_then(|span| span.parent().map(|p| p.name().to_owned()));
        if let Ok(mut spans) = self.0.lock() {
            spans.push((tenant.0, parent));
        }
    }
}

async fn slow_report(_: Incoming<ReportRequested>) -> Result<(), HandlerError> {
    tokio::time::sleep(SLOW).await;
    Ok(())
}

async fn slow_quote(_: String, _: RequestMeta) -> Result<u64, RemoteError> {
    tokio::time::sleep(SLOW).await;
    Ok(1)
}

/// The whole scenario on whatever broker `harness` has; `retry` is the slow module's ladder.
async fn scenario(harness: &Harness, retry: RetryPolicy) -> anyhow::Result<()> {
    let spans = Spans::default();
    let _subscriber =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(spans.clone()));
    let attempts = retry.max_attempts();
    let seen = Arc::new(Seen::default());
    let handlers = Arc::new(HighWater::default());
    let tools = Arc::new(HighWater::default());

    // A timeout around every handler and tool of `slow`.
    harness
        .module("slow", move |bus| {
            bus.retry(retry)
                .layer(TimeoutLayer::new(Duration::from_millis(50)))
                .on(slow_report)
                .serve("slow.quote", slow_quote)
        })
        .await?;
    // A concurrency limit of 2 on one handler and one tool, our layer on every one.
    let (h, t) = (Arc::clone(&handlers), Arc::clone(&tools));
    let layer = TenantLayer(Arc::clone(&seen));
    harness
        .module("limited", move |bus| {
            bus.prefetch(16)
                .retry(RetryPolicy::new(2, vec![Duration::from_millis(10)]).unwrap_or_default())
                .layer(layer)
                .on_layered(
                    ConcurrencyLimitLayer::new(2),
                    move |_: Incoming<SiteCreated>| {
                        let h = Arc::clone(&h);
                        async move {
                            h.work().await;
                            Ok::<_, HandlerError>(())
                        }
                    },
                )
                .on(|paid: Incoming<InvoicePaid>| async move {
                    // Fails its first attempt: our layer sees the retry too.
                    if paid.meta.attempt() == 1 {
                        return Err(HandlerError::retry("the ledger is busy"));
                    }
                    Ok(())
                })
                .serve_layered(
                    "limited.quote",
                    ConcurrencyLimitLayer::new(2),
                    move |n: u64, _: RequestMeta| {
                        let t = Arc::clone(&t);
                        async move {
                            t.work().await;
                            Ok::<_, RemoteError>(n)
                        }
                    },
                )
        })
        .await?;
    let desk = harness.module("desk", |bus| bus).await?;

    // The timeout: counted retries, then the dead letter with its reason.
    let report = desk.emit(&ReportRequested { report: 1 }).await?;
    let retried = harness.retried::<ReportRequested>("slow").await?;
    assert_eq!((retried.id, retried.attempt), (Some(report), 1));
    let dead = harness.dead_lettered(DeadReason::MaxAttempts).await?;
    assert_eq!((dead.id, dead.module.as_str()), (Some(report), "slow"));
    assert_eq!(dead.attempts, attempts, "{dead:?}");
    assert!(
        dead.last_error
            .as_deref()
            .is_some_and(|e| e.contains("timed out")),
        "{dead:?}"
    );
    // A tool's timeout: the caller gets the remote error `timeout`.
    let refused = desk
        .call::<_, u64>("slow.quote", "basic", Duration::from_secs(30))
        .await
        .err()
        .ok_or_else(|| anyhow::anyhow!("the slow tool answered"))?;
    assert!(
        matches!(refused.kind(), ErrorKind::Remote { code, .. } if code == RemoteError::TIMEOUT),
        "{refused:?}"
    );

    // The concurrency limit, on the handler and on the tool at once.
    let mut emitted = Vec::new();
    for site in 0..BURST as u64 {
        emitted.push(desk.emit(&SiteCreated { site }).await?);
    }
    let calls = (0..BURST as u64).map(|n| {
        let desk = desk.clone();
        async move {
            desk.call::<_, u64>("limited.quote", &n, Duration::from_secs(30))
                .await
        }
    });
    let answers = futures::future::join_all(calls).await;
    for (n, answer) in answers.into_iter().enumerate() {
        assert_eq!(answer?, n as u64);
    }
    handlers.finished(BURST).await?;
    tools.finished(BURST).await?;
    let (most_handlers, most_tools) = (
        handlers.most.load(Ordering::SeqCst),
        tools.most.load(Ordering::SeqCst),
    );
    assert!(most_handlers <= 2, "{most_handlers} handlers ran at once");
    assert!(most_tools <= 2, "{most_tools} tools ran at once");

    // Our layer saw every delivery (a retry too) and every request.
    let paid = desk.emit(&InvoicePaid { invoice: 7 }).await?;
    let handled = harness.handled::<InvoicePaid>("limited").await?;
    assert_eq!(handled.record.attempt, 2);
    let deliveries: BTreeMap<(EventId, u32), usize> = seen
        .deliveries
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .iter()
        .fold(BTreeMap::new(), |mut seen, delivery| {
            *seen.entry(*delivery).or_default() += 1;
            seen
        });
    let mut expected: BTreeMap<(EventId, u32), usize> =
        emitted.iter().map(|id| ((*id, 1), 1)).collect();
    expected.insert((paid, 1), 1);
    expected.insert((paid, 2), 1);
    assert_eq!(deliveries, expected);
    let requests = seen
        .requests
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    assert_eq!(requests.len(), BURST);
    assert!(
        requests.iter().all(|(_, source)| source == "desk"),
        "{requests:?}"
    );

    // Its span, with its field, inside the runtime's span of each delivery and request.
    let spans = spans
        .0
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    let inside = |parent: &str| {
        spans
            .iter()
            .filter(|(tenant, p)| tenant == "desk" && p.as_deref() == Some(parent))
            .count()
    };
    assert_eq!(inside("mesh.handle"), BURST + 2, "{spans:?}");
    assert_eq!(inside("mesh.serve"), BURST, "{spans:?}");

    harness.drain().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn layers_on_the_memory_broker() -> anyhow::Result<()> {
    // The default ladder waits 1 s, 5 s, 25 s and 2 min, on the paused clock.
    let harness = Harness::memory().timeout(Duration::from_secs(600));
    scenario(&harness, RetryPolicy::default()).await
}

#[tokio::test]
async fn layers_on_rabbitmq() -> anyhow::Result<()> {
    let vhost = TestVhost::create("layers").await?;
    let harness = Harness::rabbitmq(&vhost.url())?.timeout(Duration::from_secs(30));
    let policy = RetryPolicy::new(
        3,
        vec![Duration::from_millis(50), Duration::from_millis(100)],
    )?;
    scenario(&harness, policy).await
}
