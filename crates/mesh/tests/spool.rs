//! The emit spool's seam, with a spool of the test's own on the embedded broker: a bus with a
//! spool hands it every emit, made as an emit makes it, and resolves on the spool's answer;
//! the spool's typed refusal reaches the caller; `drain` lets the spool publish through the
//! bus (prepared events are still taken then) and `close` stops it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use mesh::{
    Bus, EmitSpool, Error, ErrorKind, Incoming, MemoryBroker, Outgoing, Prepared, SpoolFuture,
};

/// Keeps events in memory, up to `limit`; publishes them all when drained.
#[derive(Clone, Default)]
struct ListSpool(Arc<State>);

#[derive(Default)]
struct State {
    limit: usize,
    kept: Mutex<Vec<Prepared>>,
    bus: Mutex<Option<Bus>>,
    drained: Mutex<Option<Option<Duration>>>,
    stopped: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl EmitSpool for ListSpool {
    fn keep(&self, event: Prepared) -> SpoolFuture<'_, Result<(), Error>> {
        let mut kept = lock(&self.0.kept);
        let outcome = if kept.len() >= self.0.limit {
            Err(Error::spool_full(self.0.limit as u64))
        } else {
            kept.push(event);
            Ok(())
        };
        Box::pin(std::future::ready(outcome))
    }

    fn start(&self, bus: Bus) -> SpoolFuture<'_, Result<(), Error>> {
        *lock(&self.0.bus) = Some(bus);
        Box::pin(std::future::ready(Ok(())))
    }

    fn drain(&self, deadline: Option<Duration>) -> SpoolFuture<'_, ()> {
        Box::pin(async move {
            *lock(&self.0.drained) = Some(deadline);
            let Some(bus) = lock(&self.0.bus).take() else {
                return;
            };
            let kept = std::mem::take(&mut *lock(&self.0.kept));
            for event in kept {
                let confirm = bus
                    .publish_prepared(event, deadline)
                    .await
                    .expect("a draining bus takes its spool's events");
                confirm.await.expect("confirmed");
            }
        })
    }

    fn stop(&self) -> SpoolFuture<'_, ()> {
        self.0.stopped.store(true, Ordering::SeqCst);
        lock(&self.0.bus).take();
        Box::pin(std::future::ready(()))
    }
}

#[tokio::test]
async fn a_bus_with_a_spool_hands_it_every_emit_and_drains_it() -> Result<(), Error> {
    let broker = MemoryBroker::new();
    let (seen, mut received) = tokio::sync::mpsc::unbounded_channel();
    let sink = Bus::builder()
        .node("n1")
        .module("sink")
        .on_raw(["module.shop.#"], move |e: Incoming<Bytes>| {
            let _ = seen.send(e.meta.id().to_string());
            async { Ok(()) }
        })
        .start(Arc::new(broker.transport()))
        .await?;
    let spool = ListSpool(Arc::new(State {
        limit: 3,
        ..State::default()
    }));
    let shop = Bus::builder()
        .node("n1")
        .module("shop")
        .emit_deadline(Some(Duration::from_secs(7)))
        .spool(spool.clone())
        .start(Arc::new(broker.transport()))
        .await?;
    assert!(lock(&spool.0.bus).is_some(), "the spool was given the bus");

    let first = shop
        .emit_outgoing(Outgoing::json("order.placed", &1)?.causation_id("cause"))
        .await?;
    let second = shop
        .emit_nowait(Outgoing::json("order.placed", &2)?)
        .await?;
    let second_id = second.id();
    assert_eq!(second.await?, second_id, "kept: resolves at once");
    let third = shop
        .emit_outgoing(Outgoing::json("order.placed", &3)?)
        .await?;
    let full = shop
        .emit_outgoing(Outgoing::json("order.placed", &4)?)
        .await
        .expect_err("the spool is full");
    assert_eq!(full.kind(), &ErrorKind::SpoolFull { limit_bytes: 3 });
    {
        let kept = lock(&spool.0.kept);
        let ids: Vec<_> = kept.iter().map(Prepared::id).collect();
        assert_eq!(ids, vec![first, second_id, third]);
        let message = kept[0].message();
        assert_eq!(message.routing_key, "module.shop.order.placed");
        let header = |name| message.header(name).and_then(|v| v.as_str());
        assert_eq!(header("x-source"), Some("shop"));
        assert_eq!(header("x-causation-id"), Some("cause"));
    }

    shop.drain().await?;
    assert_eq!(*lock(&spool.0.drained), Some(Some(Duration::from_secs(7))));
    for id in [first, second_id, third] {
        let got = tokio::time::timeout(Duration::from_secs(10), received.recv()).await;
        assert_eq!(
            got.ok().flatten(),
            Some(id.to_string()),
            "published in order"
        );
    }
    sink.drain().await?;

    let closed = ListSpool::default();
    let bus = Bus::builder()
        .node("n1")
        .module("shop")
        .spool(closed.clone())
        .start(Arc::new(broker.transport()))
        .await?;
    bus.close().await;
    assert!(closed.0.stopped.load(Ordering::SeqCst));
    assert!(lock(&closed.0.bus).is_none(), "the spool let the bus go");
    Ok(())
}
