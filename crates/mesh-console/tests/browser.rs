//! The console in a real browser (headless Chromium over WebDriver): every page shows the
//! seeded store's data as an operator sees it, a search typed into the form finds exactly the
//! matching events, a re-drive clicked through its confirmation reaches a consumer on a real
//! broker, a new event appears on the live page, and the system map draws a three-module
//! system. Each test saves screenshots of its pages into `docs/console/`.
//!
//! Chromium and chromedriver must be installed (`bash scripts/test.sh` installs them); each
//! test starts its own ([`Browser::start`]).

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::browser::{Browser, WAIT};
use common::{dead, event, seeded, serve, Seeded, TOKEN};
use mesh::amqp::management::ManagementClient;
use mesh::amqp::AmqpOptions;
use mesh::{Bus, Outgoing};
use mesh_audit::{DeadLetterQuery, Store, StoreOptions};
use mesh_console::{Console, Tokens};
use mesh_core::{topic_matches, DeadReason, EventId};
use mesh_testkit::sdk::transport;
use mesh_testkit::{eventually, TempStore, TestVhost};

/// How long a re-driven event may take to reach its consumer.
const DELIVERY: Duration = Duration::from_secs(60);

fn tokens() -> Tokens {
    Tokens::single("alice", TOKEN).expect("a valid token")
}

/// The seeded events counted by `label` (a key prefix, a source), as `(label, count)`.
fn counted(seed: &Seeded, label: impl Fn(&str, &str) -> String) -> BTreeMap<String, String> {
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for (_, key, source) in &seed.events {
        *counts.entry(label(key, source)).or_default() += 1;
    }
    counts
        .into_iter()
        .map(|(label, n)| (label, n.to_string()))
        .collect()
}

/// A bar chart's bars as `(label, count)`: the chart of class `class`.
async fn bars(browser: &Browser, class: &str) -> anyhow::Result<BTreeMap<String, String>> {
    let chart = format!("svg.chart.{class}");
    let labels = browser.texts(&format!("{chart} text.label")).await?;
    let counts = browser.texts(&format!("{chart} text:not(.label)")).await?;
    anyhow::ensure!(
        labels.len() == counts.len(),
        "{labels:?} and {counts:?}: a count for every bar"
    );
    Ok(labels.into_iter().zip(counts).collect())
}

/// The ids of the events a search page lists, in its order.
async fn listed_events(browser: &Browser) -> anyhow::Result<Vec<String>> {
    browser.texts("table.events a.event").await
}

#[tokio::test]
async fn the_overview_charts_the_seeded_prefixes_and_sources() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let served = serve(Console::new(seed.store.clone()).tokens(tokens())).await?;
    let browser = Browser::start().await?;
    browser.open(&format!("{}/", served.base)).await?;

    assert_eq!(browser.text("h1").await?, "Overview");
    let events = browser.text("main table tr:first-child td").await?;
    assert_eq!(events, seed.events.len().to_string(), "the count of events");

    // Every seeded event is of the last hour: the charts count them all.
    let by_prefix = counted(&seed, |key, _| {
        key.split('.').take(2).collect::<Vec<_>>().join(".")
    });
    let by_source = counted(&seed, |_, source| source.to_owned());
    assert_eq!(by_prefix.len(), 3, "{by_prefix:?}");
    assert_eq!(
        bars(&browser, "prefixes").await?,
        by_prefix,
        "the chart by key prefix"
    );
    assert_eq!(
        bars(&browser, "sources").await?,
        by_source,
        "the chart by source"
    );
    // The per-minute chart (from the rollups) has a column for each minute with events.
    let columns = browser.find_all("svg.chart.minutes rect").await?;
    assert!(!columns.is_empty(), "a column a minute");
    let pending = browser.texts("table.pending td").await?;
    assert_eq!(
        pending,
        ["n1.billing.events", "3", "n1.mailer.events", "2"],
        "dead letters pending by queue"
    );
    browser.screenshot("overview").await?;

    // A bar links to its events.
    browser
        .click("svg.chart.prefixes a:first-of-type rect")
        .await?;
    browser
        .wait_for_url("the events of the bar", WAIT, |url| url.contains("key="))
        .await?;
    let shown: Vec<String> = listed_events(&browser).await?;
    let billing: HashSet<String> = seed
        .events
        .iter()
        .filter(|(_, key, _)| key.starts_with("module.billing."))
        .map(|(id, _, _)| id.to_string())
        .collect();
    assert_eq!(shown.len(), billing.len(), "{shown:?}");
    assert_eq!(shown.into_iter().collect::<HashSet<_>>(), billing);
    browser.close().await
}

#[tokio::test]
async fn the_events_page_lists_the_newest_and_an_event_page_draws_its_chain() -> anyhow::Result<()>
{
    let seed = seeded().await?;
    let served = serve(Console::new(seed.store.clone()).tokens(tokens())).await?;
    let browser = Browser::start().await?;
    browser.open(&format!("{}/events", served.base)).await?;

    assert_eq!(browser.text("h1").await?, "Events");
    let ids = listed_events(&browser).await?;
    assert_eq!(ids.len(), 50, "the first page: {ids:?}");
    let seeded_ids: HashSet<String> = seed
        .events
        .iter()
        .map(|(id, _, _)| id.to_string())
        .collect();
    assert!(ids.iter().all(|id| seeded_ids.contains(id)), "{ids:?}");
    // Newest first: the hostile event, then the chain from its end.
    let [order, invoice, mail] = seed.chain;
    let newest: Vec<String> = [seed.hostile, mail, invoice, order]
        .iter()
        .map(EventId::to_string)
        .collect();
    assert_eq!(ids[..4], newest[..]);
    assert_eq!(browser.text("a.next").await?, "Next page →");
    browser.screenshot("events").await?;

    // The chain's middle event, by clicking its row.
    browser
        .click(&format!("a.event[href='/events/{invoice}']"))
        .await?;
    browser
        .wait_for_text("h1", "module.billing.invoice.paid", WAIT)
        .await?;
    let fields = browser.texts("main table td").await?;
    assert_eq!(fields[0], invoice.to_string(), "{fields:?}");
    assert_eq!(fields[1], "billing", "{fields:?}");
    assert!(fields.contains(&order.to_string()), "caused by: {fields:?}");
    assert_eq!(
        browser.text("h2:last-of-type").await?,
        "Causation tree (3 events)"
    );
    // The tree: three nodes, cause to effect, the focus marked.
    let links = browser.attrs("svg.tree a", "href").await?;
    let expected: Vec<String> = [order, invoice, mail]
        .iter()
        .map(|id| format!("/events/{id}"))
        .collect();
    assert_eq!(links, expected);
    assert_eq!(browser.find_all("svg.tree rect.node").await?.len(), 3);
    assert_eq!(browser.find_all("svg.tree rect.focus").await?.len(), 1);
    assert_eq!(browser.find_all("svg.tree path.edge").await?.len(), 2);
    let labels = browser.texts("svg.tree text").await?;
    for (label, expected) in labels.iter().zip([
        "module.shop.order.placed · shop",
        "module.billing.invoice.paid · billing",
        "module.mailer.mail.sent · mailer",
    ]) {
        assert!(label.starts_with(expected), "{label} is not {expected}");
    }
    browser
        .client()
        .execute(
            "document.querySelector('svg.tree').scrollIntoView({block: 'end'})",
            vec![],
        )
        .await?;
    browser.screenshot("event").await?;

    // A node is a link to its event.
    browser
        .click(&format!("svg.tree a[href='/events/{order}'] text"))
        .await?;
    browser
        .wait_for_text("h1", "module.shop.order.placed", WAIT)
        .await?;
    assert_eq!(browser.text("main table td").await?, order.to_string());
    browser.close().await
}

#[tokio::test]
async fn the_dead_letter_pages_show_the_groups_a_group_and_a_dead_letter() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let served = serve(Console::new(seed.store.clone()).tokens(tokens())).await?;
    let browser = Browser::start().await?;
    browser.open(&format!("{}/dead", served.base)).await?;

    assert_eq!(browser.text("h1").await?, "Dead letters");
    let mut groups = Vec::new();
    for row in browser
        .find_all("table.groups tr")
        .await?
        .into_iter()
        .skip(1)
    {
        let mut cells = Vec::new();
        for cell in row.find_all(fantoccini::Locator::Css("td")).await? {
            cells.push(cell.text().await?);
        }
        groups.push(cells);
    }
    groups.sort();
    assert_eq!(
        groups,
        [
            [
                "n1.billing.events",
                "permanent",
                "3",
                "3",
                "list · re-drive… · purge…"
            ],
            [
                "n1.mailer.events",
                "max-attempts",
                "2",
                "2",
                "list · re-drive… · purge…"
            ],
        ]
    );
    browser.screenshot("dead-letters").await?;

    // A group's list: exactly its dead letters.
    browser.click("a.group[href*='n1.billing.events']").await?;
    browser
        .wait_for_text("h1", "Dead letters of n1.billing.events (permanent)", WAIT)
        .await?;
    let listed = browser.texts("a.dead").await?;
    let recorded: HashSet<String> = seed
        .store
        .dead_letters(&DeadLetterQuery::new().queue("n1.billing.events"))
        .await?
        .iter()
        .map(|d| d.id.to_string())
        .collect();
    assert_eq!(recorded.len(), 3);
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert_eq!(listed.iter().cloned().collect::<HashSet<_>>(), recorded);
    assert!(browser.text("main").await?.contains("3 dead letter(s)."));
    browser.screenshot("dead-letter-group").await?;

    // One dead letter: the stored error shown as text, its markup escaped, not rendered.
    browser.click("a.dead").await?;
    browser
        .wait_for_text("h1", &format!("Dead letter {}", listed[0]), WAIT)
        .await?;
    let fields = browser.texts("main table td").await?;
    assert!(
        fields.iter().any(|f| f == "n1.billing.events"),
        "{fields:?}"
    );
    assert!(fields.iter().any(|f| f == "permanent"), "{fields:?}");
    assert!(
        fields
            .iter()
            .any(|f| f == "handler failed: <b>upstream</b> down"),
        "{fields:?}"
    );
    assert!(browser.find_all("main b").await?.is_empty(), "no markup");
    assert_eq!(browser.text("a.action").await?, "Re-drive…");
    assert!(!browser.text("body").await?.contains(TOKEN));
    browser.screenshot("dead-letter").await?;
    browser.close().await
}

/// Submits a search for `pattern` typed into the form, and returns the ids of every page
/// of results, following "Next page" by clicking.
async fn search(browser: &Browser, pattern: &str) -> anyhow::Result<Vec<String>> {
    browser
        .type_into("form.search input[name='key']", pattern)
        .await?;
    let before = browser.url().await?;
    browser.click("form.search button[type='submit']").await?;
    browser
        .wait_for_url("the search's results", WAIT, |url| {
            url != before && url.contains("key=")
        })
        .await?;
    let mut ids = listed_events(browser).await?;
    for _ in 0..10 {
        if browser.find_all("a.next").await?.is_empty() {
            return Ok(ids);
        }
        let before = browser.url().await?;
        browser.click("a.next").await?;
        browser
            .wait_for_url("the next page", WAIT, |url| url != before)
            .await?;
        ids.extend(listed_events(browser).await?);
    }
    anyhow::bail!("more than 10 pages of results for {pattern}")
}

#[tokio::test]
async fn a_search_typed_into_the_form_lists_exactly_the_matching_events() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let served = serve(Console::new(seed.store.clone())).await?;
    let browser = Browser::start().await?;
    browser.open(&format!("{}/events", served.base)).await?;
    // More than a page ("#"), one page, and none.
    for (pattern, shot) in [
        ("module.*.order.*", Some("events-search")),
        ("#", None),
        ("*.*.invoice.paid", None),
        ("module.nobody.#", None),
    ] {
        let expected: HashSet<String> = seed
            .events
            .iter()
            .filter(|(_, key, _)| topic_matches(pattern, key))
            .map(|(id, _, _)| id.to_string())
            .collect();
        let ids = search(&browser, pattern).await?;
        assert_eq!(ids.len(), expected.len(), "{pattern}: {ids:?}");
        assert_eq!(
            ids.into_iter().collect::<HashSet<_>>(),
            expected,
            "{pattern}"
        );
        if expected.is_empty() {
            assert_eq!(browser.text("p.note").await?, "No event matches.");
        }
        if let Some(shot) = shot {
            browser.screenshot(shot).await?;
        }
    }
    browser.close().await
}

#[tokio::test]
async fn a_redrive_clicked_through_its_confirmation_reaches_the_consumer() -> anyhow::Result<()> {
    let vhost = TestVhost::create("console-browser").await?;
    let url = vhost.url();
    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;

    let handled: Arc<Mutex<Vec<EventId>>> = Arc::default();
    let billing = {
        let handled = handled.clone();
        Bus::builder()
            .node("n1")
            .module("billing")
            .on_raw(["module.shop.order.placed"], move |incoming| {
                handled.lock().expect("lock").push(incoming.meta.id());
                async { Ok(()) }
            })
            .start(transport(&url).await?)
            .await?
    };
    let (id, message) = event(
        "module.shop.order.placed",
        "shop",
        common::at(10),
        None,
        br#"{"order": 7}"#,
    );
    let (other, other_message) = event(
        "module.shop.order.placed",
        "shop",
        common::at(9),
        None,
        br#"{"order": 8}"#,
    );
    store
        .record_dead_letters(&[
            dead(&message, DeadReason::Permanent, "n1.billing.events"),
            dead(&other_message, DeadReason::Permanent, "n1.billing.events"),
        ])
        .await?;
    let row = store
        .dead_letters(&DeadLetterQuery::new().event_id(id))
        .await?
        .pop()
        .expect("the dead letter");
    let served = serve(
        Console::new(store.clone())
            .transport(transport(&url).await?)
            .tokens(tokens()),
    )
    .await?;

    let browser = Browser::start().await?;
    browser
        .open(&format!("{}/dead/{}", served.base, row.id))
        .await?;
    browser.click("a.action").await?;
    browser
        .wait_for_text("h1", "Re-drive 1 dead letter(s)?", WAIT)
        .await?;
    assert_eq!(
        browser.texts("table.plan td").await?,
        ["n1.billing.events", "1"],
        "where it goes"
    );
    browser.type_into("input[name='token']", TOKEN).await?;
    browser.screenshot("redrive-confirm").await?;
    browser.click("button.danger").await?;
    browser.wait_for_text("h1", "Re-driven: 1", WAIT).await?;
    assert_eq!(browser.texts("ul.redriven a").await?, [row.id.to_string()]);
    assert!(!browser.text("body").await?.contains(TOKEN));
    browser.close().await?;

    eventually(DELIVERY, "the consumer handled the re-driven event", || {
        let handled = handled.clone();
        async move { handled.lock().expect("lock").contains(&id).then_some(()) }
    })
    .await;
    let marked = store.dead_letter(row.id).await?.expect("still recorded");
    assert_eq!(marked.redrive_count, 1);
    let untouched = store
        .dead_letters(&DeadLetterQuery::new().event_id(other))
        .await?
        .pop()
        .expect("the other dead letter");
    assert_eq!(untouched.redrive_count, 0, "only the one clicked");
    assert_eq!(*handled.lock().expect("lock"), vec![id]);
    billing.close().await;
    Ok(())
}

/// A module on `n1` of the broker at `url` whose handler does nothing.
async fn consumer(url: &str, name: &str, patterns: &[&str]) -> anyhow::Result<Bus> {
    Ok(Bus::builder()
        .node("n1")
        .module(name)
        .on_raw(patterns.to_vec(), |_| async { Ok(()) })
        .start(transport(url).await?)
        .await?)
}

#[tokio::test]
async fn a_new_event_appears_on_the_live_page() -> anyhow::Result<()> {
    let vhost = TestVhost::create("console-live-browser").await?;
    let url = vhost.url();
    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;
    let served = serve(Console::new(store).transport(transport(&url).await?)).await?;
    let shop = mesh_testkit::sdk::emitter(&url, "n1", "shop").await?;
    let billing = mesh_testkit::sdk::emitter(&url, "n1", "billing").await?;
    let browser = Browser::start().await?;
    browser
        .open(&format!("{}/live?key=module.shop.%23", served.base))
        .await?;
    browser.wait_for_text("#status", "listening", WAIT).await?;

    // Billing's event does not match the page's pattern; shop's does.
    billing
        .emit_outgoing(Outgoing::json(
            "invoice.paid",
            &serde_json::json!({"n": 1}),
        )?)
        .await?;
    let emitted = std::time::Instant::now();
    let id = shop
        .emit_outgoing(Outgoing::json(
            "order.placed",
            &serde_json::json!({"note": "<script>alert(1)</script>"}),
        )?)
        .await?;
    browser
        .wait_for_text("#rows tr.event a", &id.to_string(), Duration::from_secs(6))
        .await?;
    let delay = emitted.elapsed();
    eprintln!("the live page showed the event {delay:?} after its emit was called");
    let rows = browser.find_all("#rows tr").await?;
    assert_eq!(rows.len(), 1, "only shop's event");
    let cells = browser.texts("#rows tr.event td").await?;
    assert_eq!(cells[1], "module.shop.order.placed", "{cells:?}");
    assert_eq!(cells[2], "shop", "{cells:?}");
    // The body is shown as text: its markup is not a script on the page.
    assert!(cells[5].contains("<script>alert(1)</script>"), "{cells:?}");
    assert!(browser.find_all("#rows script").await?.is_empty());
    assert_eq!(browser.text("#seen").await?, "1");
    browser.screenshot("live").await?;

    // A row links to its event's page.
    assert_eq!(
        browser.attrs("#rows tr.event a", "href").await?,
        [format!("/events/{id}")]
    );
    shop.close().await;
    billing.close().await;
    browser.close().await
}

#[tokio::test]
async fn the_system_map_draws_a_three_module_system() -> anyhow::Result<()> {
    let vhost = TestVhost::create("console-map-browser").await?;
    let url = vhost.url();
    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;
    // shop emits orders, billing invoices; billing reads orders, mailer reads invoices.
    let mut messages = Vec::new();
    let mut shop_events = HashSet::new();
    for n in 0..3 {
        let (id, message) = event(
            "module.shop.order.placed",
            "shop",
            common::at(300 - n),
            None,
            b"{}",
        );
        shop_events.insert(id.to_string());
        messages.push(message);
    }
    for n in 0..2 {
        let (_, message) = event(
            "module.billing.invoice.paid",
            "billing",
            common::at(200 - n),
            None,
            b"{}",
        );
        messages.push(message);
    }
    store.record_events(&messages).await?;
    let billing = consumer(&url, "billing", &["module.shop.order.placed"]).await?;
    let mailer = consumer(&url, "mailer", &["module.billing.#"]).await?;
    let management = mesh::amqp::management_options(&url.parse::<AmqpOptions>()?)
        .expect("an address to derive the API from");
    let served = serve(
        Console::new(store)
            .transport(transport(&url).await?)
            .tokens(tokens())
            .management(ManagementClient::new(&management)?, vhost.name()),
    )
    .await?;
    let browser = Browser::start().await?;
    browser.open(&format!("{}/map", served.base)).await?;
    assert_eq!(browser.text("h1").await?, "System map");

    let from = browser.attrs("svg.map path.edge", "data-from").await?;
    let to = browser.attrs("svg.map path.edge", "data-to").await?;
    let edges: HashSet<(String, String)> = from.into_iter().zip(to).collect();
    let expected: HashSet<(String, String)> = [
        ("shop", "module.shop.order.placed"),
        ("billing", "module.billing.invoice.paid"),
        ("module.shop.order.placed", "n1.billing.events"),
        ("module.billing.invoice.paid", "n1.mailer.events"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_owned(), b.to_owned()))
    .collect();
    assert_eq!(edges, expected, "the edges of the three modules");
    // Module → module: shop's orders reach billing, billing's invoices reach mailer.
    let from = browser.attrs("svg.modules path.edge", "data-from").await?;
    let to = browser.attrs("svg.modules path.edge", "data-to").await?;
    let weights = browser
        .attrs("svg.modules path.edge", "data-events")
        .await?;
    let modules: HashSet<(String, String, String)> = from
        .into_iter()
        .zip(to)
        .zip(weights)
        .map(|((a, b), n)| (a, b, n))
        .collect();
    let expected: HashSet<(String, String, String)> =
        [("shop", "billing", "3"), ("billing", "mailer", "2")]
            .into_iter()
            .map(|(a, b, n)| (a.to_owned(), b.to_owned(), n.to_owned()))
            .collect();
    assert_eq!(modules, expected, "which module depends on which");
    let mut queues = browser.texts("svg.map rect.queue + text").await?;
    queues.sort();
    assert_eq!(queues, ["n1.billing.events", "n1.mailer.events"]);
    browser.screenshot("map").await?;

    // An emitter's node links to its events.
    browser
        .click("svg.map a[href*='source=shop'] rect.emitter")
        .await?;
    browser
        .wait_for_url("shop's events", WAIT, |url| url.contains("source=shop"))
        .await?;
    let shown: HashSet<String> = listed_events(&browser).await?.into_iter().collect();
    assert_eq!(shown, shop_events);

    // A receiving queue's node opens its page, which offers a replay.
    browser.open(&format!("{}/map", served.base)).await?;
    browser
        .click("svg.map a[href='/modules/n1.billing.events'] rect")
        .await?;
    browser
        .wait_for_text("h1", "Module queue n1.billing.events", WAIT)
        .await?;
    assert_eq!(
        browser.texts("ul.bindings li").await?,
        ["module.shop.order.placed"]
    );
    assert!(!browser.find_all("form[action='/replay']").await?.is_empty());
    browser.screenshot("module").await?;

    // The overview lists both module queues with their consumer (the API's figures lag).
    let overview = format!("{}/", served.base);
    let b = &browser;
    eventually(DELIVERY, "the overview shows both queues' consumer", || {
        let overview = overview.clone();
        async move {
            b.open(&overview).await.ok()?;
            let cells = b.texts("table.queues td").await.ok()?;
            // Queue, messages, unacked, consumers, retrying, pending, flag: one consumer each.
            let consumers: Vec<String> = cells
                .chunks(7)
                .map(|row| row.get(3).cloned().unwrap_or_default())
                .collect();
            (consumers == ["1", "1"]).then_some(())
        }
    })
    .await;
    browser.screenshot("overview-queues").await?;
    billing.close().await;
    mailer.close().await;
    browser.close().await
}
