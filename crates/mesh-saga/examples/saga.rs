//! A saga end to end, with nothing to install: SQLite in memory and the embedded broker.
//!
//! `cargo run -p meshbus-saga --example saga`
//!
//! Order 1 is placed, paid and shipped; order 2 is placed and never paid, so its payment
//! timeout (two seconds here) cancels it, and the saga emits the compensation
//! (`order.cancelled`). The saga's module keeps each order's state in the database, applies
//! each event once, and emits through the outbox.

mod order;

use std::sync::Arc;
use std::time::Duration;

use mesh::{Bus, HandlerError, Incoming, MemoryBroker};
use mesh_outbox::{Outbox, RelayOptions};
use mesh_saga::{Instance, SagaStore};
use order::{
    Order, OrderPlaced, OrderShipped, PaymentReceived, PaymentRequested, ShipmentRequested,
};
use sqlx::sqlite::SqlitePoolOptions;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // One connection: every connection to `:memory:` is a database of its own.
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect("sqlite::memory:")
        .await?;
    let broker = MemoryBroker::new();
    let bus = |module: &str| Bus::builder().node("n1").module(module);

    // The saga's module: its handlers, its bus, and the relay that publishes what it emits.
    let store = SagaStore::new(pool.clone()).await?;
    let orders = order::saga(Duration::from_secs(2)).service(store.clone());
    let orders_bus = orders
        .wire(bus("orders"))
        .start(Arc::new(broker.transport()))
        .await?;
    orders.attach(&orders_bus);
    let relay = Outbox::new(pool.clone())
        .await?
        .start_relay(
            [orders_bus.clone()],
            RelayOptions::default().poll_interval(Duration::from_millis(20)),
        )
        .await?;

    // The other side: payments pays order 1 only; the warehouse ships what it is asked to.
    let payments = bus("payments")
        .on(|e: Incoming<PaymentRequested>| async move {
            println!(
                "payments: asked for {} cents for order {}",
                e.event.cents, e.event.order
            );
            Ok::<_, HandlerError>(())
        })
        .start(Arc::new(broker.transport()))
        .await?;
    let warehouse_bus = bus("warehouse").start(Arc::new(broker.transport())).await?;
    let warehouse = warehouse_bus.clone();
    let shipper = bus("shipper")
        .on(move |e: Incoming<ShipmentRequested>| {
            let warehouse = warehouse.clone();
            async move {
                println!("warehouse: shipping order {}", e.event.order);
                warehouse
                    .emit(&OrderShipped {
                        order: e.event.order,
                    })
                    .await
                    .map_err(HandlerError::retry)?;
                Ok(())
            }
        })
        .start(Arc::new(broker.transport()))
        .await?;
    let shop = bus("shop").start(Arc::new(broker.transport())).await?;

    shop.emit(&OrderPlaced {
        order: 1,
        cents: 4200,
    })
    .await?;
    shop.emit(&OrderPlaced {
        order: 2,
        cents: 990,
    })
    .await?;
    wait_until(&store, "1", |o| {
        o.state.stage == order::Stage::AwaitingPayment
    })
    .await?;
    payments.emit(&PaymentReceived { order: 1 }).await?;

    for key in ["1", "2"] {
        let done = wait_until(&store, key, |o| o.completed).await?;
        println!(
            "order {key}: {:?} (version {}, pending timeouts {})",
            done.state.stage,
            done.version,
            done.timeouts.len()
        );
    }

    relay.stop().await;
    for bus in [&orders_bus, &payments, &warehouse_bus, &shipper, &shop] {
        bus.drain().await?;
    }
    Ok(())
}

/// Polls the store until instance `key` satisfies `ready` (an example may poll; a test
/// waits on what it observes).
async fn wait_until(
    store: &SagaStore<sqlx::Sqlite>,
    key: &str,
    ready: impl Fn(&Instance<Order>) -> bool,
) -> Result<Instance<Order>, Box<dyn std::error::Error>> {
    for _ in 0..500 {
        if let Some(instance) = store.instance::<Order>("order", key).await? {
            if ready(&instance) {
                return Ok(instance);
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Err(format!("order {key} never got there").into())
}
