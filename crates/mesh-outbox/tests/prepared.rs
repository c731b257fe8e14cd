//! The SDK's seam under the outbox, on the embedded broker: a prepared event is the message
//! an emit publishes; a relay publishes only its bus's own events; an event written into the
//! outbox by a handler names the handled event as its cause, as an emit would.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::PATIENCE;
use mesh::{Bus, ErrorKind, HandlerError, Incoming, MemoryBroker, Outgoing};
use mesh_outbox::{EmitIn, Outbox, RelayOptions};

async fn bus(broker: &MemoryBroker, module: &str) -> anyhow::Result<Bus> {
    Ok(Bus::builder()
        .node("n1")
        .module(module)
        .start(Arc::new(broker.transport()))
        .await?)
}

#[tokio::test]
async fn a_prepared_event_is_what_an_emit_publishes_and_only_its_owner_publishes_it(
) -> anyhow::Result<()> {
    let broker = MemoryBroker::new();
    let shop = bus(&broker, "shop").await?;
    let other = bus(&broker, "billing").await?;
    let prepared = shop.prepare_emit(
        Outgoing::json("order.placed", &serde_json::json!({ "n": 1 }))?
            .causation_id("cause")
            .schema(3)
            .header("x-tenant", "acme"),
    )?;
    let message = prepared.message();
    assert_eq!(message.routing_key, "module.shop.order.placed");
    let header = |name: &str| {
        message
            .header(name)
            .and_then(|v| v.as_str().map(str::to_owned))
    };
    assert_eq!(header("x-event-id"), Some(prepared.id().to_string()));
    assert_eq!(header("x-source").as_deref(), Some("shop"));
    assert_eq!(header("x-node").as_deref(), Some("n1"));
    assert_eq!(header("x-causation-id").as_deref(), Some("cause"));
    assert_eq!(header("x-tenant").as_deref(), Some("acme"));
    assert_eq!(message.header("x-schema").and_then(|v| v.as_u64()), Some(3));
    assert_eq!(
        message.properties.user_id, None,
        "the transport stamps it at publish"
    );
    assert!(message.properties.persistent);

    // A foreign key fails as on emit; a stored message of another source is refused.
    let foreign = shop.prepare_emit(Outgoing::raw("module.billing.paid", "{}")?);
    assert!(matches!(
        foreign.map(|_| ()).map_err(|e| e.kind().clone()),
        Err(ErrorKind::ForeignKey { .. })
    ));
    let refused = other
        .publish_prepared(prepared.clone(), Some(Duration::from_secs(5)))
        .await
        .expect_err("billing may not publish shop's event");
    assert!(
        matches!(refused.kind(), ErrorKind::ForeignKey { .. }),
        "{refused}"
    );
    let id = shop
        .publish_prepared(prepared.clone(), Some(Duration::from_secs(5)))
        .await?
        .await?;
    assert_eq!(id, prepared.id());

    // A message read back from a store must still be an event.
    let mut broken = prepared.into_message();
    broken.properties.headers.remove("x-event-id");
    assert!(mesh::Prepared::from_message(broken).is_err());
    shop.drain().await?;
    other.drain().await?;
    Ok(())
}

/// A handler that writes into the outbox while handling an event: the written event's
/// causation id is the handled event's id, with no argument passed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_written_while_handling_one_names_it_as_its_cause() -> anyhow::Result<()> {
    let (_store, pool) = common::sqlite().await?;
    let outbox = Outbox::new(pool.clone()).await?;
    let broker = MemoryBroker::new();
    let (seen, mut caused) = tokio::sync::mpsc::unbounded_channel();
    let sink = Bus::builder()
        .node("n1")
        .module("sink")
        // The invoiced event only: billing announces its contract under its prefix too.
        .on_raw(["module.billing.invoiced"], move |e: Incoming<Bytes>| {
            let seen = seen.clone();
            async move {
                let _ = seen.send((e.meta.id(), e.meta.causation_id().map(str::to_owned)));
                Ok(())
            }
        })
        .start(Arc::new(broker.transport()))
        .await?;
    let billing_writer = bus(&broker, "billing").await?;
    let writer = billing_writer.clone();
    let writes = pool.clone();
    let billing = Bus::builder()
        .node("n1")
        .module("billing")
        .on_raw(["module.shop.#"], move |_e: Incoming<Bytes>| {
            let writer = writer.clone();
            let pool = writes.clone();
            async move {
                let mut tx = pool.begin().await.map_err(HandlerError::retry)?;
                writer
                    .emit_outgoing_in(&mut tx, Outgoing::json("invoiced", &1)?)
                    .await?;
                tx.commit().await.map_err(HandlerError::retry)?;
                Ok(())
            }
        })
        .start(Arc::new(broker.transport()))
        .await?;
    let relay = outbox
        .start_relay(
            [billing_writer.clone()],
            RelayOptions::default().poll_interval(Duration::from_millis(20)),
        )
        .await?;
    let shop = bus(&broker, "shop").await?;
    let cause = shop
        .emit_outgoing(Outgoing::json("order.placed", &1)?)
        .await?;
    let (_, causation) = tokio::time::timeout(PATIENCE, caused.recv())
        .await?
        .expect("the invoiced event");
    assert_eq!(causation, Some(cause.to_string()));
    relay.stop().await;
    for bus in [sink, billing, billing_writer, shop] {
        bus.drain().await?;
    }
    Ok(())
}

/// The seam's types and the outbox's handles cross tasks and threads.
#[test]
fn the_types_are_send_and_sync() {
    fn send_sync<T: Send + Sync + 'static>() {}
    fn send<T: Send + 'static>() {}
    send_sync::<mesh::Prepared>();
    send::<mesh::PreparedConfirm>();
    send_sync::<Outbox<sqlx::Postgres>>();
    send_sync::<Outbox<sqlx::Sqlite>>();
    send_sync::<mesh_outbox::Inbox<sqlx::Postgres>>();
    send_sync::<mesh_outbox::SqlDedup<sqlx::Sqlite>>();
    send_sync::<mesh_outbox::Relay>();
    send_sync::<mesh_outbox::Error>();
}
