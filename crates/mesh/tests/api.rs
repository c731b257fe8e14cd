//! The SDK's public types are `Send + Sync + 'static` and the futures of its methods are
//! `Send`: a compile-time check, as tokio does for its own (a type or future losing `Send` or
//! `Sync` breaks this file's build, not a caller's).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mesh::{
    Bus, BusBuilder, DeadLetter, DeadLetterTap, Error, HandlerError, Identity, Incoming, Listener,
    MemoryBroker, MemoryDedup, Meta, Outgoing, PendingEmit, RemoteError, RequestMeta,
};
use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize)]
struct Ping;

impl mesh::Event for Ping {
    const KEY: &'static str = "module.api.ping";
}

fn send_sync<T: Send + Sync + 'static>() {}
fn send_static<T: Send + 'static>() {}
/// A future of the bus can be spawned (`tokio::spawn` asks for `Send`). Not `Sync`: a future
/// is polled through `&mut`, and the transport's boxed futures are `Send` only.
fn future_send<T: Send>(_: &T) {}

#[test]
fn public_types_are_send_sync_and_static() {
    send_sync::<Bus>();
    send_sync::<BusBuilder>();
    send_sync::<Outgoing>();
    send_sync::<Incoming<Ping>>();
    send_sync::<Incoming<Bytes>>();
    send_sync::<Meta>();
    send_sync::<Error>();
    send_sync::<HandlerError>();
    send_sync::<RemoteError>();
    send_sync::<RequestMeta>();
    send_sync::<Identity>();
    send_sync::<MemoryBroker>();
    send_sync::<MemoryDedup>();
    send_sync::<Arc<dyn mesh::DedupStore>>();
    send_sync::<Arc<dyn mesh::EmitSpool>>();
    // Handles on one consumer, taken with `&mut self`: they move between tasks, and are not
    // shared.
    send_static::<PendingEmit>();
    send_static::<Listener>();
    send_static::<DeadLetterTap>();
    send_static::<DeadLetter>();
}

#[tokio::test]
async fn futures_of_the_bus_are_send() -> Result<(), Error> {
    let broker = MemoryBroker::new();
    let builder = Bus::builder()
        .node("api")
        .module("api")
        .serve("api.echo", |s: String, _: RequestMeta| async move {
            Ok::<_, RemoteError>(s)
        });
    let start = builder.start(Arc::new(broker.transport()));
    future_send(&start);
    let bus = start.await?;

    // Created and checked, never polled: an unpolled future does nothing.
    future_send(&bus.emit(&Ping));
    future_send(&bus.emit_outgoing(Outgoing::event(&Ping)?));
    future_send(&bus.emit_nowait(Outgoing::event(&Ping)?));
    future_send(&bus.call::<_, String>("api.echo", "hi", Duration::from_secs(1)));
    future_send(&bus.call_raw(
        "api.echo",
        Bytes::from_static(b"\"hi\""),
        Duration::from_secs(1),
    ));
    future_send(&bus.listen(["module.#"]));
    future_send(&bus.dead_letters());
    future_send(
        &bus.serve("api.other", |s: String, _: RequestMeta| async move {
            Ok::<_, RemoteError>(s)
        }),
    );
    future_send(&bus.drain());
    future_send(&bus.close());

    let mut listener = bus.listen(["module.#"]).await?;
    future_send(&listener.next());
    let mut tap = bus.dead_letters().await?;
    future_send(&tap.next());
    let handler = mesh::dedup(
        Arc::new(MemoryDedup::default()),
        |_: Incoming<Ping>| async { Ok::<(), HandlerError>(()) },
    );
    send_sync_value(&handler);
    bus.drain().await
}

fn send_sync_value<T: Send + Sync + 'static>(_: &T) {}
