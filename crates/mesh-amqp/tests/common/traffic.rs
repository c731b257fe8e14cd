//! Steady traffic through the SDK for fault scenarios: a bus consuming into a [`Ledger`], and
//! an emitter that records what was attempted and confirmed (used by the fault tests of
//! `network.rs` and their TLS variants in `tls.rs`).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mesh::{Bus, Incoming, Outgoing};
use mesh_amqp::AmqpTransport;
use mesh_core::{EventId, TransportErrorKind};
use mesh_testkit::Ledger;

/// A bus consuming `module.<module>.#` into `ledger`, each handler taking a few
/// milliseconds, so deliveries are in flight when a fault strikes.
pub(crate) async fn consuming_bus(transport: &AmqpTransport, module: &str, ledger: &Ledger) -> Bus {
    let ledger = ledger.clone();
    Bus::builder()
        .node("n1")
        .module(module)
        // Its handler takes its own prefix: the contract announcement would be one more
        // event there, which this test does not expect.
        .announce(false)
        .prefetch(16)
        .emit_deadline(Some(Duration::from_secs(3)))
        .on_raw(
            [format!("module.{module}.#")],
            move |incoming: Incoming<Bytes>| {
                let ledger = ledger.clone();
                async move {
                    tokio::time::sleep(Duration::from_millis(3)).await;
                    ledger.handled(incoming.meta.id().to_string());
                    Ok(())
                }
            },
        )
        .start(Arc::new(transport.clone()))
        .await
        .unwrap()
}

/// What an emitter saw.
#[derive(Debug, Default)]
pub(crate) struct Emits {
    /// How many were emitted.
    pub(crate) count: AtomicUsize,
    /// The longest an emit took to return (confirmed or not).
    pub(crate) longest: Mutex<Duration>,
    /// The errors: their transport kinds.
    pub(crate) errors: Mutex<Vec<Option<TransportErrorKind>>>,
}

/// Emits every `pace` until `stop`, each awaited in a task of its own and timed, into
/// `ledger` (attempted, and confirmed when it was).
pub(crate) fn emitter(
    bus: &Bus,
    ledger: &Ledger,
    pace: Duration,
    stop: Arc<AtomicBool>,
    emits: Arc<Emits>,
) -> tokio::task::JoinHandle<()> {
    let bus = bus.clone();
    let ledger = ledger.clone();
    tokio::spawn(async move {
        let mut tasks = tokio::task::JoinSet::new();
        let mut ticker = tokio::time::interval(pace);
        let mut i = 0u64;
        while !stop.load(Ordering::Relaxed) {
            ticker.tick().await;
            let id = EventId::new();
            ledger.attempted(id.to_string());
            let outgoing = Outgoing::json("tick", &serde_json::json!({ "i": i }))
                .unwrap()
                .id(id);
            i += 1;
            let bus = bus.clone();
            let ledger = ledger.clone();
            let emits = emits.clone();
            tasks.spawn(async move {
                let started = Instant::now();
                let outcome = bus.emit_outgoing(outgoing).await;
                let took = started.elapsed();
                emits.count.fetch_add(1, Ordering::Relaxed);
                {
                    let mut longest = emits.longest.lock().unwrap();
                    *longest = (*longest).max(took);
                }
                match outcome {
                    Ok(id) => ledger.confirmed(id.to_string()),
                    Err(e) => emits
                        .errors
                        .lock()
                        .unwrap()
                        .push(e.transport_kind().cloned()),
                }
            });
        }
        while tasks.join_next().await.is_some() {}
    })
}
