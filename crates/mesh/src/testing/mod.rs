//! A test harness for modules (feature `testing`): start one or more modules' buses on the
//! in-memory broker (or a RabbitMQ vhost), and assert, with a timeout, on what they did.
//!
//! The [`Harness`] records every event a module published, every delivery its handlers
//! handled, retried or dead-lettered (with the reason), every call it made and every reply
//! it served. The records come from the one place every module's traffic passes: the
//! harness gives each bus a transport that hands everything on to the real one and notes
//! what the bus asked of it (see `transport.rs`). Nothing of the bus is replaced: the
//! handlers, the settle rules and the retry ladder under test are the ones that run in
//! production.
//!
//! Assertions wait for what they expect, up to the harness's [`timeout`](Harness::timeout),
//! and fail with an [`AssertionError`] naming what was expected and what was seen:
//!
//! ```text
//! expected a published `module.billing.invoice.paid` within 10s; saw 2 published:
//! `billing` published `module.billing.invoice.sent`; `umami` published `module.umami.site.created`
//! ```
//!
//! On the in-memory broker every timer is tokio's, so under a paused clock
//! (`#[tokio::test(start_paused = true)]`) a retry ladder of minutes runs in milliseconds of
//! wall time, and so does an assertion's timeout. Scheduled events too: the harness's
//! in-memory modules count due times by tokio's clock, so a module that forwards scheduled
//! events ([`BusBuilder::forward_scheduled`](crate::BusBuilder::forward_scheduled)) emits
//! an `emit_after(24 hours)` once 24 hours of the paused clock passed. The guide, from one handler to three
//! modules together, with the counterparts of MassTransit's and FastStream's test harnesses,
//! is `docs/TESTING.md`.
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use mesh::testing::Harness;
//! use mesh::{HandlerError, Incoming};
//!
//! #[derive(Debug, Serialize, Deserialize)]
//! struct InvoicePaid { invoice: u64 }
//! impl mesh::Event for InvoicePaid { const KEY: &'static str = "module.billing.invoice.paid"; }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let harness = Harness::memory();
//! let billing = harness.module("billing", |bus| bus).await?;
//! harness
//!     .module("ledger", |bus| bus.on(|paid: Incoming<InvoicePaid>| async move {
//!         if paid.event.invoice == 0 {
//!             return Err(HandlerError::permanent("no invoice 0"));
//!         }
//!         Ok(())
//!     }))
//!     .await?;
//!
//! billing.emit(&InvoicePaid { invoice: 7 }).await?;
//! assert_eq!(harness.published::<InvoicePaid>().await?.event.invoice, 7);
//! assert_eq!(harness.handled::<InvoicePaid>("ledger").await?.record.attempt, 1);
//! harness.drain().await?;
//! # Ok(()) }
//! ```

mod expect;
mod harness;
mod record;
mod transport;

pub use expect::{AssertionError, Observed};
pub use harness::{Harness, DEFAULT_NODE, DEFAULT_TIMEOUT};
pub use record::{CallOutcome, Called, DeadLettered, Handled, Published, Record, Replied, Retried};

/// The guide (`docs/TESTING.md`), compiled and run with the doctests so it cannot rot. Only
/// under `cfg(doctest)`, as the README's tour: the guide lives outside the package, which
/// would not compile from crates.io if it were included in the documentation itself.
#[cfg(doctest)]
#[doc = include_str!("../../../../docs/TESTING.md")]
struct Guide;
