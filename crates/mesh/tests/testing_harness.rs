//! The test harness (`mesh::testing`, feature `testing`) through one scenario of three
//! modules (an event retried until handled, one retried to its dead letter, a tool called),
//! on the in-memory broker under a paused clock with the default five-attempt ladder, and
//! on RabbitMQ in real time with a short ladder.

use std::time::{Duration, Instant};

use mesh::testing::{CallOutcome, Harness, Record};
use mesh::{DeadReason, Event, HandlerError, Incoming, RemoteError, RequestMeta, RetryPolicy};
use mesh_testkit::TestVhost;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct InvoicePaid {
    invoice: u64,
}

impl Event for InvoicePaid {
    const KEY: &'static str = "module.billing.invoice.paid";
}

/// The ledger's handler: invoice 13 always fails (its dead letter after every attempt the
/// policy allows), any other fails twice and is handled at the third attempt.
async fn ledger(paid: Incoming<InvoicePaid>) -> Result<(), HandlerError> {
    match paid.event.invoice {
        13 => Err(HandlerError::retry("the ledger is closed for invoice 13")),
        _ if paid.meta.attempt() < 3 => Err(HandlerError::retry("the ledger is busy")),
        _ => Ok(()),
    }
}

async fn quote(plan: String, _meta: RequestMeta) -> Result<u64, RemoteError> {
    match plan.as_str() {
        "basic" => Ok(900),
        _ => Err(RemoteError::new("unknown-plan", format!("no plan {plan}"))),
    }
}

/// The scenario, on whatever broker `harness` has; `retry` is the ledger's ladder.
async fn scenario(harness: &Harness, retry: RetryPolicy) -> anyhow::Result<()> {
    let attempts = retry.max_attempts();
    let delays = retry.delays().to_vec();
    let billing = harness
        .module("billing", |bus| bus.serve("billing.quote", quote))
        .await?;
    harness
        .module("ledger", move |bus| bus.retry(retry).on(ledger))
        .await?;
    let shop = harness.module("shop", |bus| bus).await?;

    billing.emit(&InvoicePaid { invoice: 7 }).await?;
    billing.emit(&InvoicePaid { invoice: 13 }).await?;
    let cents: u64 = shop
        .call("billing.quote", "basic", Duration::from_secs(30))
        .await?;
    assert_eq!(cents, 900);

    let published = harness.published::<InvoicePaid>().await?;
    assert_eq!(published.event.invoice, 7);
    assert_eq!(published.record.module, "billing");
    harness
        .published_where(|paid: &InvoicePaid| paid.invoice == 13)
        .await?;

    let handled = harness.handled::<InvoicePaid>("ledger").await?;
    assert_eq!(handled.event.invoice, 7);
    assert_eq!(handled.record.attempt, 3);
    let retried = harness.retried::<InvoicePaid>("ledger").await?;
    assert_eq!(retried.attempt, 1);
    assert_eq!(retried.delay, delays.first().copied());

    let dead = harness.dead_lettered(DeadReason::MaxAttempts).await?;
    assert_eq!(dead.module, "ledger");
    assert_eq!(dead.key, InvoicePaid::KEY);
    assert_eq!(dead.event::<InvoicePaid>()?.invoice, 13);
    assert_eq!(dead.attempts, attempts);
    assert!(
        dead.last_error
            .as_deref()
            .is_some_and(|e| e.contains("closed for invoice 13")),
        "{dead:?}"
    );

    let called = harness.called("billing.quote").await?;
    assert_eq!(called.module, "shop");
    assert!(
        matches!(&called.outcome, CallOutcome::Replied(body) if &body[..] == b"900"),
        "{called:?}"
    );
    let replied = harness.replied("billing.quote").await?;
    assert_eq!(replied.module, "billing");

    // Invoice 13 went down the whole ladder, one retry per step, each after its delay.
    let ladder: Vec<(u32, Option<Duration>)> = harness
        .records()
        .iter()
        .filter_map(|r| match r {
            Record::Retried(r) if r.id == dead.id => Some((r.attempt, r.delay)),
            _ => None,
        })
        .collect();
    let expected: Vec<(u32, Option<Duration>)> = (1..attempts)
        .map(|attempt| (attempt, delays.get(attempt as usize - 1).copied()))
        .collect();
    assert_eq!(ladder, expected);

    harness.drain().await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_five_attempt_ladder_runs_in_milliseconds_on_the_memory_broker() -> anyhow::Result<()> {
    let started = Instant::now();
    // The default ladder waits 1 s, 5 s, 25 s and 2 min: 2 min 31 s on the paused clock,
    // which the assertions' timeout must cover.
    let harness = Harness::memory().timeout(Duration::from_secs(600));
    let policy = RetryPolicy::default();
    assert_eq!(policy.max_attempts(), 5);
    let clock = tokio::time::Instant::now();
    scenario(&harness, policy).await?;
    assert!(
        clock.elapsed() >= Duration::from_secs(151),
        "the ladder's delays passed on the paused clock: {:?}",
        clock.elapsed()
    );
    let wall = started.elapsed();
    assert!(wall < Duration::from_secs(1), "took {wall:?} of wall time");
    Ok(())
}

#[tokio::test]
async fn the_same_scenario_passes_on_rabbitmq() -> anyhow::Result<()> {
    let vhost = TestVhost::create("testing-harness").await?;
    let harness = Harness::rabbitmq(&vhost.url())?.timeout(Duration::from_secs(30));
    let policy = RetryPolicy::new(
        5,
        vec![
            Duration::from_millis(50),
            Duration::from_millis(100),
            Duration::from_millis(200),
            Duration::from_millis(400),
        ],
    )?;
    scenario(&harness, policy).await
}
