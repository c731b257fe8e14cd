//! Watching the system in headless Chromium: the overview and the dead letters refresh
//! themselves when asked (no reload: the page's state survives), the live page pauses, clears
//! and filters by key, and an event's page and its dead letters link to each other.
//!
//! Chromium and chromedriver must be installed (`bash scripts/prepare-tests.sh` installs
//! them); the tests fail, never skip, without them.

mod common;

use std::time::Duration;

use common::browser::{Browser, WAIT};
use common::{at, dead, event, seeded, serve, TOKEN};
use mesh::Outgoing;
use mesh_audit::{DeadLetterQuery, Store, StoreOptions};
use mesh_console::{Console, Tokens};
use mesh_core::DeadReason;
use mesh_testkit::sdk::transport;
use mesh_testkit::{TempStore, TestVhost};

/// Long enough for a few auto-refresh ticks (every 5 s) on a loaded machine.
const REFRESHED: Duration = Duration::from_secs(60);

fn tokens() -> Tokens {
    Tokens::single("alice", TOKEN).expect("a valid token")
}

/// Marks the page's window, so a reload (which loses the mark) shows.
async fn mark(browser: &Browser) -> anyhow::Result<()> {
    browser
        .client()
        .execute("window.meshMark = 'kept'; return true;", vec![])
        .await?;
    Ok(())
}

async fn still_marked(browser: &Browser) -> anyhow::Result<bool> {
    let mark = browser
        .client()
        .execute("return window.meshMark || null;", vec![])
        .await?;
    Ok(mark == "kept")
}

#[tokio::test]
async fn auto_refresh_shows_a_new_event_and_a_new_dead_letter_without_a_reload(
) -> anyhow::Result<()> {
    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;
    let (_, first) = event("module.shop.order.placed", "shop", at(60), None, b"{}");
    store.record_events(std::slice::from_ref(&first)).await?;
    let served = serve(Console::new(store.clone()).tokens(tokens())).await?;
    let browser = Browser::start().await?;
    let count = "main table tr:first-child td";

    browser.open(&format!("{}/", served.base)).await?;
    assert_eq!(browser.text(count).await?, "1");
    mark(&browser).await?;
    browser.click("#auto-refresh").await?;
    let (_, second) = event("module.shop.order.placed", "shop", at(30), None, b"{}");
    store.record_events(std::slice::from_ref(&second)).await?;
    browser
        .wait_until("the overview counts the new event", REFRESHED, || async {
            (browser.text(count).await.ok()? == "2").then_some(())
        })
        .await?;
    assert!(still_marked(&browser).await?, "the page was not reloaded");
    assert!(browser.find("#auto-refresh").await?.is_selected().await?);

    // Off by default on another page; ticked, the dead letters' groups refresh too.
    browser.open(&format!("{}/dead", served.base)).await?;
    assert!(!browser.find("#auto-refresh").await?.is_selected().await?);
    assert!(browser.find_all("table.groups").await?.is_empty());
    mark(&browser).await?;
    browser.click("#auto-refresh").await?;
    store
        .record_dead_letters(&[dead(&second, DeadReason::Permanent, "n1.billing.events")])
        .await?;
    browser
        .wait_until("the new dead letter's group", REFRESHED, || async {
            let cells = browser.texts("table.groups td").await.ok()?;
            cells
                .first()
                .is_some_and(|q| q == "n1.billing.events")
                .then_some(())
        })
        .await?;
    assert!(still_marked(&browser).await?, "the page was not reloaded");
    // Remembered for the tab: still ticked when the overview is opened again.
    browser.open(&format!("{}/", served.base)).await?;
    assert!(browser.find("#auto-refresh").await?.is_selected().await?);
    browser.close().await
}

/// The ids of the live page's rows the browser shows, newest first.
async fn shown_rows(browser: &Browser) -> anyhow::Result<Vec<String>> {
    let mut ids = Vec::new();
    for row in browser.find_all("#rows tr.event").await? {
        if row.is_displayed().await? {
            ids.push(row.attr("data-id").await?.unwrap_or_default());
        }
    }
    Ok(ids)
}

#[tokio::test]
async fn the_live_page_pauses_clears_and_filters_by_key() -> anyhow::Result<()> {
    let vhost = TestVhost::create("console-live-controls").await?;
    let url = vhost.url();
    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;
    let served = serve(Console::new(store).transport(transport(&url).await?)).await?;
    let shop = mesh_testkit::sdk::emitter(&url, "n1", "shop").await?;
    let billing = mesh_testkit::sdk::emitter(&url, "n1", "billing").await?;
    let browser = Browser::start().await?;
    browser
        .open(&format!("{}/live?key=module.%23", served.base))
        .await?;
    browser.wait_for_text("#status", "listening", WAIT).await?;
    let order = || Outgoing::json("order.placed", &serde_json::json!({"n": 1}));
    let invoice = || Outgoing::json("invoice.paid", &serde_json::json!({"n": 1}));

    let a = shop.emit_outgoing(order()?).await?.to_string();
    browser
        .wait_until("the first event", WAIT, || async {
            (shown_rows(&browser).await.ok()? == [a.clone()]).then_some(())
        })
        .await?;
    // Its time is written as every time of the console is.
    let time = browser.text("#rows tr.event time").await?;
    assert_eq!(time.len(), 27, "{time}");
    assert!(time.ends_with('Z') && time.as_bytes()[10] == b' ', "{time}");

    // Paused: a new event is held back (and counted as held), then shown on resume.
    browser.click("#pause").await?;
    assert_eq!(browser.text("#pause").await?, "Resume");
    let b = billing.emit_outgoing(invoice()?).await?.to_string();
    browser.wait_for_text("#held", "1 held", WAIT).await?;
    assert_eq!(
        shown_rows(&browser).await?,
        std::slice::from_ref(&a),
        "held back"
    );
    browser.click("#pause").await?;
    assert_eq!(shown_rows(&browser).await?, [b.clone(), a.clone()]);
    assert_eq!(browser.text("#held").await?, "");

    // The key filter hides what it does not match, new rows included.
    browser.type_into("#filter", "module.billing.#").await?;
    assert_eq!(shown_rows(&browser).await?, std::slice::from_ref(&b));
    let c = shop.emit_outgoing(order()?).await?.to_string();
    let d = billing.emit_outgoing(invoice()?).await?.to_string();
    browser.wait_for_text("#seen", "4", WAIT).await?;
    assert_eq!(shown_rows(&browser).await?, [d.clone(), b.clone()]);
    browser.screenshot("live-filtered").await?;
    browser.find("#filter").await?.clear().await?;
    browser
        .client()
        .execute(
            "document.getElementById('filter').dispatchEvent(new Event('input')); return true;",
            vec![],
        )
        .await?;
    assert_eq!(shown_rows(&browser).await?, [d, c, b, a]);

    // Clear empties the table; new events come after it.
    browser.click("#clear").await?;
    assert!(shown_rows(&browser).await?.is_empty());
    let e = shop.emit_outgoing(order()?).await?.to_string();
    browser
        .wait_until("an event after the clear", WAIT, || async {
            (shown_rows(&browser).await.ok()? == [e.clone()]).then_some(())
        })
        .await?;
    shop.close().await;
    billing.close().await;
    browser.close().await
}

#[tokio::test]
async fn an_event_s_page_links_to_its_dead_letters_and_back() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let served = serve(Console::new(seed.store.clone()).tokens(tokens())).await?;
    // The seeded dead letters are of the first events: billing's three, mailer's two.
    let (event, _, _) = &seed.events[0];
    let expected: Vec<String> = seed
        .store
        .dead_letters(&DeadLetterQuery::new().event_id(*event))
        .await?
        .into_iter()
        .map(|d| format!("/dead/{}", d.id))
        .collect();
    assert_eq!(expected.len(), 1, "one dead letter of the first event");
    let browser = Browser::start().await?;
    browser
        .open(&format!("{}/events/{event}", served.base))
        .await?;
    assert_eq!(
        browser.attrs("table.event-dead a.dead", "href").await?,
        expected
    );
    browser.click("table.event-dead a.dead").await?;
    browser
        .wait_for_url("the dead letter's page", WAIT, |url| url.contains("/dead/"))
        .await?;
    browser
        .click(&format!("main a[href='/events/{event}']"))
        .await?;
    browser
        .wait_for_url("back on the event's page", WAIT, |url| {
            url.ends_with(&format!("/events/{event}"))
        })
        .await?;
    // The event's page links to the dead letters' list of that event (paged, with the
    // actions), which lists exactly them and links back to the event.
    browser.click("a.event-dead-list").await?;
    browser
        .wait_for_url("the event's dead letters", WAIT, |url| {
            url.ends_with(&format!("/dead?event={event}"))
        })
        .await?;
    assert_eq!(
        browser.attrs("table.dead-list a.dead", "href").await?,
        expected
    );
    browser.click("a.dead").await?;
    browser
        .wait_for_url("the dead letter's page", WAIT, |url| url.contains("/dead/"))
        .await?;
    browser.click("a.siblings").await?;
    browser
        .wait_for_url("the event's dead letters again", WAIT, |url| {
            url.ends_with(&format!("/dead?event={event}"))
        })
        .await?;
    browser.click("main a.event").await?;
    browser
        .wait_for_url("the event's page from its list", WAIT, |url| {
            url.ends_with(&format!("/events/{event}"))
        })
        .await?;
    // An event no consumer dead-lettered says so.
    let (quiet, _, _) = &seed.events[40];
    browser
        .open(&format!("{}/events/{quiet}", served.base))
        .await?;
    assert!(browser.find_all("table.event-dead").await?.is_empty());
    browser.close().await
}
