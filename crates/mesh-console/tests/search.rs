//! The event search as an operator uses it: the count of matches equals the store's (an
//! exact key and a pattern), times back from now (`2h`) and their presets, a page size, a bad
//! time shown inline with the form kept, in headless Chromium a search by a value only in an
//! event's body (any text typed there is a literal search, never an error), and a wildcard
//! search no index serves whose 37 matches lie behind 100,000 newer events, shown without a
//! click.
//!
//! Chromium and chromedriver must be installed (`bash scripts/prepare-tests.sh` installs
//! them); the browser tests fail, never skip, without them.

mod common;

use std::time::Duration;

use common::browser::Browser;
use common::{at, event, get, seeded, serve, KEYS};
use mesh_audit::{Store, StoreOptions};
use mesh_console::Console;
use mesh_core::topic_matches;
use mesh_testkit::TempStore;

/// Long enough for a search walking 100,000 events a walk at a time on a loaded machine.
const SEARCHED: Duration = Duration::from_secs(120);

/// The count a search page shows (`span.matches`), if it shows one.
fn shown_count(html: &str) -> Option<u64> {
    let marker = "<span class=\"matches\">";
    let at = html.find(marker)? + marker.len();
    html[at..].split('<').next()?.parse().ok()
}

fn rows(html: &str) -> usize {
    html.matches("<tr class=\"event\">").count()
}

#[tokio::test]
async fn the_count_of_matches_is_the_store_s() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let served = serve(Console::new(seed.store.clone())).await?;
    for pattern in [
        "module.shop.order.placed",
        "module.*.order.#",
        "*.*.invoice.paid",
        "#",
        "module.nobody.#",
    ] {
        let expected = seed
            .events
            .iter()
            .filter(|(_, key, _)| topic_matches(pattern, key))
            .count() as u64;
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("key", pattern)
            .append_pair("limit", "20")
            .finish();
        let (status, html) = get(&format!("{}/events?{query}", served.base)).await?;
        assert_eq!(status, 200, "{pattern}: {html}");
        assert_eq!(shown_count(&html), Some(expected), "{pattern}");
        assert_eq!(
            rows(&html),
            expected.min(20) as usize,
            "{pattern}: a page of 20"
        );
        assert!(html.contains(&format!("of {} stored", seed.events.len())));
    }
    Ok(())
}

#[tokio::test]
async fn a_time_back_from_now_and_its_presets_work() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let served = serve(Console::new(seed.store.clone())).await?;
    // Every seeded event is of the last half hour.
    let (status, html) = get(&format!("{}/events?since=2h", served.base)).await?;
    assert_eq!(status, 200, "{html}");
    assert_eq!(shown_count(&html), Some(seed.events.len() as u64));
    let (_, html) = get(&format!("{}/events?since=1m", served.base)).await?;
    assert_eq!(shown_count(&html), Some(0));
    // The seeded events at most 10 minutes old: the chain (600 s), the hostile one (500 s).
    let (_, html) = get(&format!("{}/events?since=11m&until=5s", served.base)).await?;
    assert_eq!(shown_count(&html), Some(4), "{html}");
    // The presets link to the same search from a time back from now.
    let (_, html) = get(&format!(
        "{}/events?key=module.shop.%23&limit=20",
        served.base
    ))
    .await?;
    for since in ["15m", "1h", "24h", "7d", "30d"] {
        let preset = format!(
            "class=\"preset\" href=\"/events?key=module.shop.%23&amp;limit=20&amp;since={since}\""
        );
        assert!(html.contains(&preset), "{preset} in {html}");
    }
    Ok(())
}

#[tokio::test]
async fn a_bad_time_is_shown_with_the_form_as_typed() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let served = serve(Console::new(seed.store.clone())).await?;
    let browser = Browser::start().await?;
    browser.open(&format!("{}/events", served.base)).await?;
    browser
        .type_into("input[name=key]", "module.shop.#")
        .await?;
    browser.type_into("input[name=since]", "yesterday").await?;
    browser.click("form.search button[type=submit]").await?;
    browser
        .wait_for_text(
            "p.input-error",
            "since: `yesterday` is neither",
            common::browser::WAIT,
        )
        .await?;
    assert_eq!(
        browser.attrs("input[name=key]", "value").await?,
        ["module.shop.#"]
    );
    assert_eq!(
        browser.attrs("input[name=since]", "value").await?,
        ["yesterday"]
    );
    assert_eq!(browser.text("h1").await?, "Events");
    browser.screenshot("events-bad-time").await?;
    let (status, _) = get(&format!("{}/events?since=yesterday", served.base)).await?;
    assert_eq!(status, 400);
    browser.close().await
}

#[tokio::test]
async fn a_body_search_finds_an_event_by_a_value_only_in_its_body() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let (wanted, message) = event(
        "module.shop.order.placed",
        "shop",
        at(300),
        None,
        br#"{"order":"ord-7f3a9c","lines":[{"sku":"Kettle Blue","qty":2}]}"#,
    );
    seed.store.record_events(&[message]).await?;
    let served = serve(Console::new(seed.store.clone())).await?;
    let browser = Browser::start().await?;
    browser.open(&format!("{}/events", served.base)).await?;
    browser.type_into("input[name=body]", "ORD-7f3a9c").await?;
    browser.click("form.search button[type=submit]").await?;
    let b = &browser;
    let found = browser
        .wait_until(
            "the event found by its body",
            common::browser::WAIT,
            || async {
                let ids = b.texts("table.events a.event").await.ok()?;
                (!ids.is_empty()).then_some(ids)
            },
        )
        .await?;
    assert_eq!(found, [wanted.to_string()]);
    assert_eq!(browser.text("span.matches").await?, "1");
    assert_eq!(
        browser.attrs("input[name=body]", "value").await?,
        ["ORD-7f3a9c"]
    );
    browser.screenshot("events-body-search").await?;
    browser.close().await?;

    // A phrase: both words, in order; a part of a word finds nothing.
    for (text, expected) in [("kettle blue", 1), ("blue kettle", 0), ("7f3a", 0)] {
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("body", text)
            .finish();
        let (status, html) = get(&format!("{}/events?{query}", served.base)).await?;
        assert_eq!(status, 200, "{text}: {html}");
        assert_eq!(shown_count(&html), Some(expected), "{text}");
    }
    // Query syntax of either database is searched literally: a page, never an error.
    for text in [
        "\"ord",
        "NEAR(ord",
        "ord*",
        "body:ord",
        "ord\" OR \"x",
        "a & !b | c <-> d",
        "^ord",
        "\0ord",
    ] {
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("body", text)
            .finish();
        let (status, html) = get(&format!("{}/events?{query}", served.base)).await?;
        assert_eq!(status, 200, "{text:?}: {html}");
        assert!(shown_count(&html).is_some(), "{text:?}: {html}");
    }
    // No word at all: said inline, the form kept.
    let (status, html) = get(&format!("{}/events?body=%22%2A%28", served.base)).await?;
    assert_eq!(status, 400, "{html}");
    assert!(html.contains("holds no word to search for"), "{html}");
    assert!(html.contains("value=\"&quot;*(\""), "{html}");
    Ok(())
}

/// 100,000 events of the seeded keys, all newer than the 37 `module.shop.order.special`
/// ones.
async fn buried() -> anyhow::Result<(TempStore, Store, Vec<String>)> {
    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;
    let mut special = Vec::new();
    let mut batch = Vec::new();
    for n in 0..37u64 {
        let (id, message) = event(
            "module.shop.order.special",
            "shop",
            at(90_000 + n),
            None,
            b"{}",
        );
        special.push(id.to_string());
        batch.push(message);
    }
    store.record_events(&batch).await?;
    for chunk in 0..20u64 {
        let batch: Vec<_> = (0..5_000u64)
            .map(|n| {
                let (key, source) = KEYS[(n % 4) as usize];
                event(key, source, at(80_000 - chunk * 3_000 - n / 2), None, b"{}").1
            })
            .collect();
        store.record_events(&batch).await?;
    }
    Ok((temp, store, special))
}

#[tokio::test]
async fn a_wildcard_search_no_index_serves_finds_matches_behind_100k_events_without_a_click(
) -> anyhow::Result<()> {
    let (_temp, store, mut special) = buried().await?;
    special.sort();
    let browser = Browser::start().await?;
    // The default budget; and none, so each page walks once and the page's script walks on.
    for (name, console) in [
        ("default budget", Console::new(store.clone())),
        (
            "a walk a page",
            Console::new(store.clone()).search_budget(Duration::ZERO),
        ),
    ] {
        let served = serve(console).await?;
        browser
            .open(&format!(
                "{}/events?key=%2A.%2A.order.special&limit=50",
                served.base
            ))
            .await?;
        let b = &browser;
        let mut found = browser
            .wait_until(&format!("{name}: the 37 matches"), SEARCHED, || async {
                let ids = b.texts("table.events a.event").await.ok()?;
                (ids.len() >= 37).then_some(ids)
            })
            .await?;
        found.sort();
        assert_eq!(found, special, "{name}");
        browser
            .wait_until(&format!("{name}: the store searched"), SEARCHED, || async {
                b.find_all("a.next").await.ok()?.is_empty().then_some(())
            })
            .await?;
        assert!(browser.find_all("p.partial").await?.is_empty(), "{name}");
        if name == "a walk a page" {
            browser.screenshot("events-wildcard").await?;
        }
    }
    browser.close().await
}
