//! Acceptance: a saga across a crash, on a private RabbitMQ node and PostgreSQL. A saga
//! service process commits an event's transition (its state, its emitted event and its
//! timeout in the outbox) and is SIGKILLed before it acks; the next service gets the delivery
//! again, and the same event twice more: the instance moved once, and the event the killed
//! process emitted is published once (not lost, not doubled).
//!
//! Counted with two ledgers: one of the events the saga consumes (each confirmed by the
//! broker, each handled by the surviving service: none lost), one of the events it emits
//! (each row the outbox holds is delivered to a sink, and nothing else is: one payment request
//! and one shipment request in all, so no effect twice).
//!
//! The killed service is this test binary again, running this same test with `CHILD_ENV`
//! set; a layer holds each delivery after its handler succeeded (never acks), so the kill
//! lands exactly between the commit and the ack. The node is the test's own, as every test
//! that kills a process holding a broker's deliveries.

mod common;

use std::collections::HashSet;
use std::future::Future;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use common::order::{
    self, OrderPlaced, PaymentReceived, PaymentRequested, ShipmentRequested, Stage,
};
use common::PATIENCE;
use mesh::layer::ToolRequest;
use mesh::raw::saga::SagaTransition;
use mesh::{Bus, EventId, HandlerError, Incoming, Meta, Outgoing};
use mesh_outbox::Outbox;
use mesh_saga::SagaStore;
use mesh_testkit::{eventually, sdk, Ledger, NodeOptions, PrivateNode};

/// Set in the child: `<database URL> <broker URL>`.
const CHILD_ENV: &str = "MESH_SAGA_KILL_CHILD";
const HOUR: Duration = Duration::from_secs(3600);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transition_committed_before_a_kill_is_applied_once() -> anyhow::Result<()> {
    match std::env::var(CHILD_ENV) {
        Ok(config) => child(&config).await,
        Err(_) => parent().await,
    }
}

/// Holds every delivery its handler succeeded on: the ack never comes.
#[derive(Clone, Copy)]
struct HoldAfterSuccess;

impl<S> tower_layer::Layer<S> for HoldAfterSuccess {
    type Service = Hold<S>;
    fn layer(&self, inner: S) -> Hold<S> {
        Hold(inner)
    }
}

struct Hold<S>(S);

impl<S, R> tower_service::Service<R> for Hold<S>
where
    S: tower_service::Service<R>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> Self::Future {
        let done = self.0.call(request);
        Box::pin(async move {
            let result = done.await;
            if result.is_ok() {
                // Committed; the parent kills this process now.
                std::future::pending::<()>().await;
            }
            result
        })
    }
}

/// Counts the deliveries that come marked redelivered (the broker's flag), and notes each
/// delivery in the ledger of consumed events.
#[derive(Clone)]
struct CountRedelivered(Arc<AtomicU32>, Ledger);

impl<S> tower_layer::Layer<S> for CountRedelivered {
    type Service = Counted<S>;
    fn layer(&self, inner: S) -> Counted<S> {
        Counted(inner, Arc::clone(&self.0), self.1.clone())
    }
}

struct Counted<S>(S, Arc<AtomicU32>, Ledger);

impl<S: tower_service::Service<Meta>> tower_service::Service<Meta> for Counted<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, meta: Meta) -> S::Future {
        if meta.redelivered() {
            self.1.fetch_add(1, Ordering::SeqCst);
        }
        self.2.handled(meta.id().to_string());
        self.0.call(meta)
    }
}

impl<S: tower_service::Service<ToolRequest>> tower_service::Service<ToolRequest> for Counted<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: ToolRequest) -> S::Future {
        self.0.call(request)
    }
}

async fn child(config: &str) -> anyhow::Result<()> {
    let Some((db, amqp)) = config.split_once(' ') else {
        anyhow::bail!("{CHILD_ENV} needs a database URL and a broker URL");
    };
    let store = SagaStore::new(common::postgres_pool(db).await?).await?;
    let service = order::saga(HOUR).service(store);
    let bus = service
        .wire(
            Bus::builder()
                .node("n1")
                .module("orders")
                .prefetch(1)
                .layer(HoldAfterSuccess),
        )
        .start(sdk::transport(amqp).await?)
        .await?;
    service.attach(&bus);
    std::future::pending::<()>().await;
    Ok(())
}

async fn parent() -> anyhow::Result<()> {
    let (db, pool) = common::postgres().await?;
    let node = PrivateNode::start(NodeOptions::default().heartbeat(2)).await?;
    let url = node.url();
    // The events the saga consumes, and the events it emits.
    let consumed = Ledger::new();
    let emitted = Ledger::new();
    let store = SagaStore::new(pool.clone()).await?;
    // The saga's queue and bindings first (a bus that declares them and stops), so the
    // event waits there for the child.
    let declare = order::saga(HOUR).service(store.clone());
    declare
        .wire(Bus::builder().node("n1").module("orders"))
        .start(sdk::transport(&url).await?)
        .await?
        .close()
        .await;
    // What the relay publishes, by id.
    let requested: Arc<Mutex<Vec<EventId>>> = Arc::default();
    let shipped: Arc<Mutex<Vec<EventId>>> = Arc::default();
    let (r, s) = (Arc::clone(&requested), Arc::clone(&shipped));
    let (lr, ls, lt) = (emitted.clone(), emitted.clone(), emitted.clone());
    let versions: Arc<Mutex<Vec<u64>>> = Arc::default();
    let v = Arc::clone(&versions);
    let sink = Bus::builder()
        .node("n1")
        .module("sink")
        .on(move |e: Incoming<PaymentRequested>| {
            let r = Arc::clone(&r);
            lr.handled(e.meta.id().to_string());
            async move {
                r.lock()
                    .map_err(|_| HandlerError::permanent("poisoned"))?
                    .push(e.meta.id());
                Ok(())
            }
        })
        .on_raw(["module.orders.saga.transition"], move |e| {
            lt.handled(e.meta.id().to_string());
            let v = Arc::clone(&v);
            async move {
                let t: SagaTransition =
                    serde_json::from_slice(&e.event).map_err(HandlerError::permanent)?;
                v.lock()
                    .map_err(|_| HandlerError::permanent("poisoned"))?
                    .push(t.version);
                Ok(())
            }
        })
        .on(move |e: Incoming<ShipmentRequested>| {
            let s = Arc::clone(&s);
            ls.handled(e.meta.id().to_string());
            async move {
                s.lock()
                    .map_err(|_| HandlerError::permanent("poisoned"))?
                    .push(e.meta.id());
                Ok(())
            }
        })
        .start(sdk::transport(&url).await?)
        .await?;
    let shop = sdk::emitter(&url, "n1", "shop").await?;
    let placed_event = EventId::new();
    let placed = Outgoing::event(&OrderPlaced {
        order: 7,
        cents: 700,
    })?
    .id(placed_event);
    let placed_id = placed_event.to_string();
    consumed.attempted(placed_id.clone());
    shop.emit_outgoing(placed.clone()).await?;
    consumed.confirmed(placed_id.clone());

    let mut child = tokio::process::Command::new(std::env::current_exe()?)
        .args([
            "a_transition_committed_before_a_kill_is_applied_once",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, format!("{} {url}", db.url()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let version = || async {
        store
            .instance::<order::Order>("order", "7")
            .await
            .ok()
            .flatten()
            .map(|i| i.version)
    };
    eventually(PATIENCE, "the child committed the start", || async {
        (version().await? == 1).then_some(())
    })
    .await;
    child.start_kill()?;
    child.wait().await?;

    // The next service, with a relay: the killed one's delivery comes back, then two
    // resends of it, then the payment (one delivery at a time, in the queue's order).
    let service = order::saga(HOUR).service(store.clone());
    let redelivered = Arc::new(AtomicU32::new(0));
    let orders = service
        .wire(
            Bus::builder()
                .node("n1")
                .module("orders")
                .prefetch(1)
                .layer(CountRedelivered(Arc::clone(&redelivered), consumed.clone())),
        )
        .start(sdk::transport(&url).await?)
        .await?;
    service.attach(&orders);
    let outbox = Outbox::new(pool.clone()).await?;
    let relay = outbox
        .start_relay([orders.clone()], common::quick())
        .await?;
    for _ in 0..2 {
        consumed.attempted(placed_id.clone());
        shop.emit_outgoing(placed.clone()).await?;
    }
    let payments = sdk::emitter(&url, "n1", "payments").await?;
    let paid_event = EventId::new();
    let paid = Outgoing::event(&PaymentReceived { order: 7 })?.id(paid_event);
    let paid_id = paid_event.to_string();
    consumed.attempted(paid_id.clone());
    payments.emit_outgoing(paid).await?;
    consumed.confirmed(paid_id.clone());
    eventually(PATIENCE, "the payment applied", || async {
        (version().await? == 2).then_some(())
    })
    .await;
    eventually(PATIENCE, "the shipment request published", || async {
        (!shipped.lock().ok()?.is_empty()).then_some(())
    })
    .await;
    eventually(PATIENCE, "the outbox relayed everything", || async {
        (outbox.counts().await.ok()?.pending == 0).then_some(())
    })
    .await;
    // No lost event: each event the saga consumes reached the surviving service, the
    // killed one's delivery again (redelivered: the kill came before the ack).
    let report = consumed.wait_all_handled(PATIENCE).await;
    println!("saga kill ledger, consumed: {report}");
    report.assert_clean();
    assert_eq!(report.confirmed, 2, "the order and its payment: {report}");
    assert!(
        redelivered.load(Ordering::SeqCst) >= 1,
        "the killed service's delivery came back: {report}"
    );
    // No double effect: the outbox holds each event the saga emitted once, and each is
    // delivered (the killed process's payment request too), and nothing else is.
    let rows: Vec<String> = sqlx::query_scalar("SELECT event_id::text FROM mesh_outbox.outbox")
        .fetch_all(&pool)
        .await?;
    for id in rows {
        emitted.attempted(id.clone());
        emitted.confirmed(id);
    }
    let report = emitted.wait_all_handled(PATIENCE).await;
    println!("saga kill ledger, emitted: {report}");
    report.assert_clean();
    assert_eq!(
        report.confirmed, 4,
        "one payment request, one shipment request, and a transition of each: {report}"
    );
    let mut versions: Vec<u64> = versions
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    versions.sort_unstable();
    versions.dedup();
    assert_eq!(versions, [1, 2], "the instance moved once per event");
    relay.stop().await;
    for bus in [&orders, &shop, &payments, &sink] {
        bus.drain().await?;
    }

    let done = store
        .instance::<order::Order>("order", "7")
        .await?
        .ok_or_else(|| anyhow::anyhow!("no instance"))?;
    assert_eq!(
        done.version, 2,
        "started once, paid once, in five deliveries"
    );
    assert_eq!(done.state.stage, Stage::AwaitingShipment);
    assert!(done.timeouts.is_empty(), "the payment timeout is cancelled");
    assert_eq!(outbox.counts().await?.scheduled, 0);
    let requested: HashSet<EventId> = requested
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .iter()
        .copied()
        .collect();
    assert_eq!(
        requested.len(),
        1,
        "the killed process's emit is published, and only it"
    );
    let rows: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM mesh_outbox.outbox WHERE routing_key = 'module.orders.payment.requested'",
    )
    .fetch_one(&pool)
    .await?;
    assert_eq!(rows, 1, "one payment request written in all");
    Ok(())
}
