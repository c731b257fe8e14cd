//! Each assertion of the test harness (`mesh::testing`) fails when what it expects did not
//! happen, and its message names what was expected and what was seen. On the in-memory
//! broker under a paused clock, so each timeout passes at once.

use std::time::Duration;

use mesh::testing::{AssertionError, Harness};
use mesh::{DeadReason, Event, HandlerError, Incoming, RemoteError, RequestMeta};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct InvoicePaid {
    invoice: u64,
}

impl Event for InvoicePaid {
    const KEY: &'static str = "module.billing.invoice.paid";
}

#[derive(Debug, Serialize, Deserialize)]
struct InvoiceSent {
    invoice: u64,
}

impl Event for InvoiceSent {
    const KEY: &'static str = "module.billing.invoice.sent";
}

fn harness() -> Harness {
    Harness::memory().timeout(Duration::from_secs(5))
}

/// The failure `result` must be, its message holding each of `parts`.
fn failure<T: std::fmt::Debug>(result: Result<T, AssertionError>, parts: &[&str]) -> String {
    let error = result.expect_err("the assertion holds, though its condition is false");
    let message = error.to_string();
    assert!(message.starts_with("expected "), "{message}");
    assert!(message.contains(" within 5s; saw "), "{message}");
    for part in parts {
        assert!(message.contains(part), "`{part}` is not in: {message}");
    }
    // A test that unwraps the error shows the same message.
    assert_eq!(format!("{error:?}"), message);
    message
}

/// A ledger whose handler fails for good on invoice 13 and succeeds on any other.
async fn ledger(harness: &Harness) -> anyhow::Result<()> {
    harness
        .module("ledger", |bus| {
            bus.on(|paid: Incoming<InvoicePaid>| async move {
                match paid.event.invoice {
                    13 => Err(HandlerError::permanent("no invoice 13")),
                    _ => Ok(()),
                }
            })
        })
        .await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn published_fails_naming_what_was_published_instead() -> anyhow::Result<()> {
    let harness = harness();
    failure(
        harness.published::<InvoicePaid>().await,
        &[
            "expected a published `module.billing.invoice.paid`",
            "saw nothing published",
        ],
    );
    let billing = harness.module("billing", |bus| bus).await?;
    billing.emit(&InvoiceSent { invoice: 1 }).await?;
    billing.emit(&InvoiceSent { invoice: 2 }).await?;
    failure(
        harness.published::<InvoicePaid>().await,
        &[
            "expected a published `module.billing.invoice.paid`",
            "saw 2 published: `billing` published `module.billing.invoice.sent`; \
             `billing` published `module.billing.invoice.sent`",
        ],
    );
    // The positive case, on the same records.
    assert_eq!(harness.published::<InvoiceSent>().await?.event.invoice, 1);
    harness.drain().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn published_where_fails_when_no_event_matches() -> anyhow::Result<()> {
    let harness = harness();
    let billing = harness.module("billing", |bus| bus).await?;
    billing.emit(&InvoicePaid { invoice: 7 }).await?;
    failure(
        harness
            .published_where(|paid: &InvoicePaid| paid.invoice == 8)
            .await,
        &[
            "expected a published `module.billing.invoice.paid` matching the condition",
            "saw 1 published: `billing` published `module.billing.invoice.paid`",
        ],
    );
    harness
        .published_where(|paid: &InvoicePaid| paid.invoice == 7)
        .await?;
    harness.drain().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn handled_fails_naming_the_modules_outcomes() -> anyhow::Result<()> {
    let harness = harness();
    ledger(&harness).await?;
    let billing = harness.module("billing", |bus| bus).await?;
    billing.emit(&InvoicePaid { invoice: 13 }).await?;
    harness.dead_lettered(DeadReason::Permanent).await?;
    failure(
        harness.handled::<InvoicePaid>("ledger").await,
        &[
            "expected `ledger` to handle `module.billing.invoice.paid`",
            "saw 1 outcome: `ledger` dead-lettered `module.billing.invoice.paid`",
            "(permanent after 1 attempt: no invoice 13)",
        ],
    );
    failure(
        harness.handled::<InvoicePaid>("ledgr").await,
        &[
            "expected `ledgr` to handle `module.billing.invoice.paid`",
            "saw no delivery handled, retried or dead-lettered \
             (no module `ledgr` was started; started: ledger, billing)",
        ],
    );
    billing.emit(&InvoicePaid { invoice: 7 }).await?;
    assert_eq!(
        harness
            .handled::<InvoicePaid>("ledger")
            .await?
            .event
            .invoice,
        7
    );
    harness.drain().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn retried_fails_naming_the_modules_outcomes() -> anyhow::Result<()> {
    let harness = harness();
    ledger(&harness).await?;
    let billing = harness.module("billing", |bus| bus).await?;
    billing.emit(&InvoicePaid { invoice: 7 }).await?;
    harness.handled::<InvoicePaid>("ledger").await?;
    failure(
        harness.retried::<InvoicePaid>("ledger").await,
        &[
            "expected `ledger` to retry `module.billing.invoice.paid`",
            "saw 1 outcome: `ledger` handled `module.billing.invoice.paid`",
            "(attempt 1)",
        ],
    );
    harness.drain().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn dead_lettered_fails_naming_the_dead_letters_seen() -> anyhow::Result<()> {
    let harness = harness();
    ledger(&harness).await?;
    failure(
        harness.dead_lettered(DeadReason::Permanent).await,
        &[
            "expected a dead letter with reason `permanent`",
            "saw no dead letter",
        ],
    );
    let billing = harness.module("billing", |bus| bus).await?;
    billing.emit(&InvoicePaid { invoice: 13 }).await?;
    let dead = harness.dead_lettered(DeadReason::Permanent).await?;
    assert_eq!(dead.last_error.as_deref(), Some("no invoice 13"));
    failure(
        harness.dead_lettered(DeadReason::MaxAttempts).await,
        &[
            "expected a dead letter with reason `max-attempts`",
            "saw 1 dead letter: `ledger` dead-lettered `module.billing.invoice.paid`",
            "(permanent after 1 attempt: no invoice 13)",
        ],
    );
    harness.drain().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn called_fails_naming_the_calls_made() -> anyhow::Result<()> {
    let harness = harness();
    let shop = harness.module("shop", |bus| bus).await?;
    failure(
        harness.called("billing.quote").await,
        &["expected a call to `billing.quote`", "saw no call"],
    );
    let missing = shop
        .call::<_, u64>("billing.price", "basic", Duration::from_secs(1))
        .await;
    assert!(missing.is_err_and(|e| e.is_no_server()));
    failure(
        harness.called("billing.quote").await,
        &[
            "expected a call to `billing.quote`",
            "saw 1 call: `shop` called `billing.price`: failed (",
        ],
    );
    harness.called("billing.price").await?;
    harness.drain().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn replied_fails_naming_the_replies_sent() -> anyhow::Result<()> {
    let harness = harness();
    harness
        .module("billing", |bus| {
            bus.serve(
                "billing.price",
                |plan: String, _meta: RequestMeta| async move {
                    Err::<u64, _>(RemoteError::new("unknown-plan", plan))
                },
            )
        })
        .await?;
    let shop = harness.module("shop", |bus| bus).await?;
    failure(
        harness.replied("billing.quote").await,
        &["expected a reply from `billing.quote`", "saw no reply"],
    );
    let refused = shop
        .call::<_, u64>("billing.price", "gold", Duration::from_secs(1))
        .await;
    assert!(refused.is_err());
    failure(
        harness.replied("billing.quote").await,
        &[
            "expected a reply from `billing.quote`",
            "saw 1 reply: `billing` replied to `billing.price` with error `unknown-plan`",
        ],
    );
    let replied = harness.replied("billing.price").await?;
    assert!(replied.reply.is_err_and(|e| e.code == "unknown-plan"));
    harness.drain().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_long_listing_shows_ten_records_and_counts_the_rest() -> anyhow::Result<()> {
    let harness = harness();
    let billing = harness.module("billing", |bus| bus).await?;
    for invoice in 0..12 {
        billing.emit(&InvoiceSent { invoice }).await?;
    }
    let message = failure(
        harness.published::<InvoicePaid>().await,
        &["saw 12 published: ", "; and 2 more"],
    );
    assert_eq!(
        message.matches("`billing` published").count(),
        10,
        "{message}"
    );
    harness.drain().await?;
    Ok(())
}
