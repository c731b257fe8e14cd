//! A saga's instances on an event's page, in a real browser (headless Chromium over
//! WebDriver). The store holds an order's trace as the order saga of `meshbus-saga` leaves it
//! when it emits its transitions: the order placed, the saga's payment request and its
//! transition (the instance at version 1), the payment, the shipment request and the
//! transition it caused (version 2), and a transition whose body is markup, not a transition.
//! The page of the order shows both instances' states after their events and the unreadable
//! one as such; the payment's page, whose trace holds only its own transition, shows that one.
//! Saves `docs/console/event-saga.png`.
//!
//! Chromium and chromedriver must be installed (`bash scripts/test.sh` installs them).

mod common;

use bytes::Bytes;
use common::browser::{Browser, WAIT};
use common::{at, event, event_of, serve, TOKEN};
use mesh_audit::{Store, StoreOptions};
use mesh_console::{Console, Tokens};
use mesh_core::saga::{SagaTransition, TRANSITION_EVENT};
use mesh_core::EventId;
use mesh_testkit::TempStore;
use serde_json::json;

/// The transition of order 7's instance to `version` in `stage`, caused by `cause`.
fn transition(
    cause: EventId,
    seconds_ago: u64,
    version: u64,
    stage: &str,
) -> anyhow::Result<(EventId, mesh_core::WireMessage)> {
    let body = SagaTransition {
        saga: "order".into(),
        key: "7".into(),
        version,
        completed: false,
        state: json!({"order": 7, "cents": 4200, "stage": stage}),
    };
    Ok(event_of(
        &format!("module.orders.{TRANSITION_EVENT}"),
        "orders",
        at(seconds_ago),
        Some(cause),
        Bytes::from(serde_json::to_vec(&body)?),
    ))
}

#[tokio::test]
async fn an_event_page_shows_the_saga_instances_its_trace_moved() -> anyhow::Result<()> {
    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;
    let (placed, m1) = event(
        "module.shop.order.placed",
        "shop",
        at(300),
        None,
        br#"{"order": 7, "cents": 4200}"#,
    );
    let (requested, m2) = event(
        "module.orders.payment.requested",
        "orders",
        at(299),
        Some(placed),
        br#"{"order": 7, "cents": 4200}"#,
    );
    let (started, m3) = transition(placed, 299, 1, "AwaitingPayment")?;
    let (paid, m4) = event(
        "module.payments.payment.received",
        "payments",
        at(200),
        Some(requested),
        br#"{"order": 7}"#,
    );
    let (shipment, m5) = event(
        "module.orders.shipment.requested",
        "orders",
        at(199),
        Some(paid),
        br#"{"order": 7}"#,
    );
    let (moved, m6) = transition(paid, 199, 2, "AwaitingShipment")?;
    let (forged, m7) = event(
        "module.shop.saga.transition",
        "shop",
        at(298),
        Some(placed),
        br#"{"saga": "<script>alert(1)</script>"}"#,
    );
    store.record_events(&[m1, m2, m3, m4, m5, m6, m7]).await?;
    let served = serve(Console::new(store).tokens(Tokens::single("alice", TOKEN)?)).await?;
    let browser = Browser::start().await?;

    // The order: the trace below it holds both transitions, and the forged one.
    browser
        .open(&format!("{}/events/{placed}", served.base))
        .await?;
    browser
        .wait_for_text("h1", "module.shop.order.placed", WAIT)
        .await?;
    assert_eq!(
        browser.texts("h2").await?[0],
        "Saga instances (3)",
        "the section comes first"
    );
    let applied = browser.texts("table.sagas a.applied").await?;
    assert_eq!(
        applied,
        [placed.to_string(), placed.to_string(), paid.to_string()],
        "the tree's order: the order's own effects, then the payment's"
    );
    assert_eq!(
        browser.texts("table.sagas td.saga-name").await?,
        ["order · orders", "order · orders"]
    );
    assert_eq!(browser.texts("table.sagas td.saga-key").await?, ["7", "7"]);
    assert_eq!(
        browser.texts("table.sagas td.saga-version").await?,
        ["1", "2"]
    );
    let states: Vec<serde_json::Value> = browser
        .texts("table.sagas pre.saga-state")
        .await?
        .iter()
        .map(|text| serde_json::from_str(text))
        .collect::<Result<_, _>>()?;
    assert_eq!(
        states,
        [
            json!({"order": 7, "cents": 4200, "stage": "AwaitingPayment"}),
            json!({"order": 7, "cents": 4200, "stage": "AwaitingShipment"}),
        ]
    );
    // The forged body is no transition: listed as unreadable, linked, its markup inert.
    let rows = browser.texts("table.sagas tr.saga").await?;
    assert!(
        rows.iter().any(
            |row| row.contains("An unreadable transition") && row.contains(&forged.to_string())
        ),
        "{rows:?}"
    );
    assert!(browser.find_all("table.sagas script").await?.is_empty());
    // The order's own rows are marked as the event shown; the transitions are on the tree.
    assert_eq!(browser.find_all("table.sagas tr.focus").await?.len(), 2);
    for id in [started, moved, shipment] {
        let node = format!("svg.tree a[href='/events/{id}']");
        assert_eq!(browser.find_all(&node).await?.len(), 1, "{node}");
    }
    browser.screenshot("event-saga").await?;

    // The payment, by its link: only what it moved (the trace above it holds its causes
    // only, not their other effects).
    browser
        .click(&format!("table.sagas a.applied[href='/events/{paid}']"))
        .await?;
    browser
        .wait_for_text("h1", "module.payments.payment.received", WAIT)
        .await?;
    assert_eq!(browser.texts("h2").await?[0], "Saga instances (1)");
    assert_eq!(browser.texts("table.sagas td.saga-version").await?, ["2"]);
    assert_eq!(browser.find_all("table.sagas tr.focus").await?.len(), 1);
    let started_node = format!("svg.tree a[href='/events/{started}']");
    assert!(
        browser.find_all(&started_node).await?.is_empty(),
        "the order's other effects are not on the payment's tree"
    );
    browser.close().await
}
