//! The order saga of `examples/saga.rs`, shared with the crate's tests: order placed →
//! payment requested → paid, or timed out and cancelled (the compensation) → shipped.

#![allow(dead_code, unreachable_pub)]

use std::time::Duration;

use mesh::Event;
use mesh_saga::Saga;
use serde::{Deserialize, Serialize};

/// The shop placed an order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OrderPlaced {
    pub order: u64,
    pub cents: u64,
}
impl Event for OrderPlaced {
    const KEY: &'static str = "module.shop.order.placed";
}

/// The saga asks payments to collect.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PaymentRequested {
    pub order: u64,
    pub cents: u64,
}
impl Event for PaymentRequested {
    const KEY: &'static str = "module.orders.payment.requested";
}

/// Payments collected.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PaymentReceived {
    pub order: u64,
}
impl Event for PaymentReceived {
    const KEY: &'static str = "module.payments.payment.received";
}

/// The saga's own timeout: no payment in time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PaymentExpired {
    pub order: u64,
}
impl Event for PaymentExpired {
    const KEY: &'static str = "module.orders.payment.expired";
}

/// The saga asks the warehouse to ship.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ShipmentRequested {
    pub order: u64,
}
impl Event for ShipmentRequested {
    const KEY: &'static str = "module.orders.shipment.requested";
}

/// The warehouse shipped.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OrderShipped {
    pub order: u64,
}
impl Event for OrderShipped {
    const KEY: &'static str = "module.warehouse.order.shipped";
}

/// The compensation: the order is called off (the shop releases its stock).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OrderCancelled {
    pub order: u64,
}
impl Event for OrderCancelled {
    const KEY: &'static str = "module.orders.order.cancelled";
}

/// The order is done.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OrderCompleted {
    pub order: u64,
}
impl Event for OrderCompleted {
    const KEY: &'static str = "module.orders.order.completed";
}

/// Where an order is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Stage {
    AwaitingPayment,
    AwaitingShipment,
    Shipped,
    Cancelled,
}

/// The saga's state per order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Order {
    pub order: u64,
    pub cents: u64,
    pub stage: Stage,
}

/// The saga, with its payment timeout. It emits its transitions (the console shows each
/// order's state on the page of the event that moved it).
pub fn saga(payment_timeout: Duration) -> Saga<Order> {
    Saga::new("order")
        .emit_transitions()
        .starts(
            |e: &OrderPlaced| e.order.to_string(),
            move |e, step| {
                step.emit(&PaymentRequested {
                    order: e.order,
                    cents: e.cents,
                });
                step.schedule(
                    "payment",
                    payment_timeout,
                    &PaymentExpired { order: e.order },
                );
                Order {
                    order: e.order,
                    cents: e.cents,
                    stage: Stage::AwaitingPayment,
                }
            },
        )
        .on(
            |e: &PaymentReceived| e.order.to_string(),
            |order, e, step| {
                if order.stage == Stage::AwaitingPayment {
                    step.cancel("payment");
                    step.emit(&ShipmentRequested { order: e.order });
                    order.stage = Stage::AwaitingShipment;
                }
            },
        )
        .on_timeout(
            |e: &PaymentExpired| e.order.to_string(),
            |order, e, step| {
                if order.stage == Stage::AwaitingPayment {
                    step.emit(&OrderCancelled { order: e.order });
                    order.stage = Stage::Cancelled;
                    step.complete();
                }
            },
        )
        .on(
            |e: &OrderShipped| e.order.to_string(),
            |order, e, step| {
                if order.stage == Stage::AwaitingShipment {
                    step.emit(&OrderCompleted { order: e.order });
                    order.stage = Stage::Shipped;
                    step.complete();
                }
            },
        )
}
