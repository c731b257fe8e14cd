//! The outbox and the inbox end to end, with nothing to install: SQLite in memory and the
//! embedded broker.
//!
//! `cargo run -p meshbus-outbox --example outbox`
//!
//! The shop writes an order and its `order.placed` event in one transaction (a second
//! transaction, rolled back, leaves neither); its relay publishes the committed event;
//! billing handles it through the inbox, so the invoice row and the record of the event's id
//! commit together, and the same event delivered again changes nothing.

use std::sync::Arc;
use std::time::Duration;

use mesh::{Bus, HandlerError, Incoming, MemoryBroker, Outgoing};
use mesh_outbox::{EmitIn, Inbox, Outbox, RelayOptions};
use serde::{Deserialize, Serialize};
use sqlx::sqlite::SqlitePoolOptions;

#[derive(Debug, Serialize, Deserialize)]
struct OrderPlaced {
    order: i64,
}

impl mesh::Event for OrderPlaced {
    const KEY: &'static str = "module.shop.order.placed";
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // One connection: every connection to `:memory:` is a database of its own.
    let pool = SqlitePoolOptions::new()
        .max_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        .connect("sqlite::memory:")
        .await?;
    sqlx::query("CREATE TABLE orders (id INTEGER PRIMARY KEY)")
        .execute(&pool)
        .await?;
    sqlx::query("CREATE TABLE invoices (order_id INTEGER NOT NULL)")
        .execute(&pool)
        .await?;
    let outbox = Outbox::new(pool.clone()).await?;
    let inbox = Inbox::new(pool.clone()).await?;

    let broker = MemoryBroker::new();
    let (handled, mut invoices) = tokio::sync::mpsc::unbounded_channel();
    let invoice = inbox.handler("invoice", |e: Incoming<OrderPlaced>, mut tx| async move {
        sqlx::query("INSERT INTO invoices (order_id) VALUES (?)")
            .bind(e.event.order)
            .execute(&mut *tx)
            .await
            .map_err(HandlerError::retry)?;
        Ok(tx)
    });
    let billing = Bus::builder()
        .node("n1")
        .module("billing")
        .on(move |e: Incoming<OrderPlaced>| {
            let done = invoice(e);
            let handled = handled.clone();
            async move {
                done.await?;
                let _ = handled.send(());
                Ok(())
            }
        })
        .start(Arc::new(broker.transport()))
        .await?;
    let shop = Bus::builder()
        .node("n1")
        .module("shop")
        .start(Arc::new(broker.transport()))
        .await?;
    // No commit wakes a relay: it polls (every 10 ms by default).
    let relay = outbox
        .start_relay(
            [shop.clone()],
            RelayOptions::default().poll_interval(Duration::from_millis(20)),
        )
        .await?;

    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO orders (id) VALUES (1)")
        .execute(&mut *tx)
        .await?;
    let id = shop.emit_in(&mut tx, &OrderPlaced { order: 1 }).await?;
    tx.commit().await?;
    println!("order 1 committed with event {id}");

    let mut tx = pool.begin().await?;
    sqlx::query("INSERT INTO orders (id) VALUES (2)")
        .execute(&mut *tx)
        .await?;
    shop.emit_in(&mut tx, &OrderPlaced { order: 2 }).await?;
    tx.rollback().await?;
    println!("order 2 rolled back: its event is gone with it");

    invoices.recv().await;
    // The same event again (a resend): the inbox skips it.
    shop.emit_outgoing(Outgoing::event(&OrderPlaced { order: 1 })?.id(id))
        .await?;
    invoices.recv().await;

    relay.stop().await;
    billing.drain().await?;
    shop.drain().await?;
    let invoiced: i64 = sqlx::query_scalar("SELECT count(*) FROM invoices")
        .fetch_one(&pool)
        .await?;
    println!("invoices: {invoiced} (one per order, however often its event came)");
    assert_eq!(invoiced, 1);
    Ok(())
}
