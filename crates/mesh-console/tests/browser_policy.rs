//! The console's Content-Security-Policy in a real browser (headless Chromium over
//! WebDriver): a page of another origin cannot frame it (a confirmation framed there never
//! shows, so there is nothing to click), and no console page breaks its policy while the
//! console's own stylesheet and script still apply.
//!
//! Chromium and chromedriver must be installed (`bash scripts/test.sh` installs them); each
//! test starts its own ([`Browser::start`]).

mod common;

use std::sync::Arc;

use axum::response::Html;
use axum::routing::get;
use axum::Router;
use common::browser::{Browser, WAIT};
use common::{seeded, serve, TOKEN};
use mesh::{Bus, Outgoing};
use mesh_audit::DeadLetterQuery;
use mesh_console::{Console, Tokens};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

fn tokens() -> Tokens {
    Tokens::single("alice", TOKEN).expect("a valid token")
}

/// A site of another origin (a port of its own), serving until dropped.
struct Foreign {
    base: String,
    task: JoinHandle<()>,
}

impl Drop for Foreign {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A site whose `/` frames `target`, and a page of its own (`/inner`) beside it; each
/// frame's `load` marks the body (`data-console`, `data-own`).
async fn foreign(target: &str) -> anyhow::Result<Foreign> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let page = format!(
        r#"<!DOCTYPE html><html><head><title>elsewhere</title></head><body>
<h1>A page elsewhere</h1>
<iframe src="{target}" width="900" height="500"
  onload="document.body.dataset.console = 'loaded'"></iframe>
<iframe src="/inner" width="300" height="100"
  onload="document.body.dataset.own = 'loaded'"></iframe>
</body></html>"#
    );
    let app = Router::new()
        .route("/", get(move || async move { Html(page) }))
        .route(
            "/inner",
            get(|| async { Html("<!DOCTYPE html><title>inner</title><h1>framed</h1>") }),
        );
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(Foreign {
        base: format!("http://{addr}"),
        task,
    })
}

/// The messages of the browser's log since the last look that report a
/// Content-Security-Policy violation.
async fn violations(browser: &Browser) -> anyhow::Result<Vec<String>> {
    Ok(browser
        .console_log()
        .await?
        .into_iter()
        .filter(|m| m.contains("Content Security Policy"))
        .collect())
}

/// Runs `script` on the page and returns what it returns.
async fn run(browser: &Browser, script: &str) -> anyhow::Result<Value> {
    Ok(browser.client().execute(script, Vec::new()).await?)
}

#[tokio::test]
async fn a_page_of_another_origin_cannot_frame_a_confirmation() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let served = serve(Console::new(seed.store.clone()).tokens(tokens())).await?;
    let dead = seed
        .store
        .dead_letters(&DeadLetterQuery::new().limit(1))
        .await?
        .pop()
        .expect("a seeded dead letter");
    let confirm = format!("{}/dead/redrive?id={}", served.base, dead.id);
    // Opened directly, the confirmation asks for the token.
    let (status, html) = common::get(&confirm).await?;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Re-drive 1 dead letter(s)?"), "{html}");
    assert!(html.contains("name=\"token\""), "{html}");

    let elsewhere = foreign(&confirm).await?;
    let browser = Browser::start().await?;
    browser.open(&format!("{}/", elsewhere.base)).await?;
    // Both frames are done: the site's own page, and whatever the browser put in the
    // console's place.
    browser
        .wait_until("the load of both frames", WAIT, || async {
            let loaded = run(
                &browser,
                "return [document.body.dataset.console || '', document.body.dataset.own || '']",
            )
            .await
            .ok()?;
            (loaded == json!(["loaded", "loaded"])).then_some(())
        })
        .await?;

    // Frames work in this browser: the site's own page shows in its frame.
    browser.client().enter_frame(1).await?;
    assert_eq!(
        browser.texts("h1").await?,
        ["framed"],
        "the site's own frame"
    );
    browser.client().enter_parent_frame().await?;

    // The console's frame shows none of the console: no confirmation, no token field, no
    // button to click.
    browser.client().enter_frame(0).await?;
    let headings = browser.texts("h1").await?;
    let fields = browser.find_all("input[name='token'], button").await?;
    let location = run(&browser, "return document.location.href").await?;
    browser.client().enter_parent_frame().await?;
    assert!(
        fields.is_empty() && !headings.iter().any(|h| h.contains("Re-drive")),
        "the confirmation showed inside a page of another origin (at {location}): {headings:?}"
    );
    assert_ne!(
        location,
        json!(confirm),
        "the frame holds the console's page"
    );
    // The browser says why: the console's policy.
    let log = browser.console_log().await?;
    assert!(
        log.iter().any(|m| m.contains("frame-ancestors 'none'")),
        "no refusal for the policy in the browser's log: {log:?}"
    );

    // Nothing was re-driven.
    let after = seed.store.dead_letter(dead.id).await?.expect("recorded");
    assert_eq!(after.redrive_count, 0);
    browser.close().await
}

#[tokio::test]
async fn no_page_breaks_the_policy_and_the_console_s_own_style_and_script_apply(
) -> anyhow::Result<()> {
    let seed = seeded().await?;
    let broker = mesh::MemoryBroker::new();
    let served = serve(
        Console::new(seed.store.clone())
            .tokens(tokens())
            .transport(Arc::new(broker.transport())),
    )
    .await?;
    let dead = seed
        .store
        .dead_letters(&DeadLetterQuery::new().queue("n1.billing.events"))
        .await?
        .pop()
        .expect("a seeded dead letter");
    let [_, invoice, _] = seed.chain;
    let since = common::at(3600).to_string();
    let pages = [
        "/".to_owned(),
        "/events".to_owned(),
        "/events?key=module.shop.%23".to_owned(),
        format!("/events/{invoice}"),
        "/dead".to_owned(),
        "/dead?queue=n1.billing.events".to_owned(),
        format!("/dead/{}", dead.id),
        format!("/dead/redrive?id={}", dead.id),
        "/dead/purge?queue=n1.billing.events".to_owned(),
        "/map".to_owned(),
        "/modules/n1.billing.events".to_owned(),
        format!("/replay?queue=n1.billing.events&key=module.%23&since={since}"),
        // A 404 and a 400: error pages are pages too.
        "/no/such/page".to_owned(),
        "/events?limit=0".to_owned(),
        "/live?key=module.shop.%23".to_owned(),
    ];
    let browser = Browser::start().await?;
    browser.console_log().await?;
    for path in &pages {
        browser.open(&format!("{}{path}", served.base)).await?;
        // The stylesheet applies: the header's background is the stylesheet's #1d232b.
        let background = run(
            &browser,
            "return getComputedStyle(document.querySelector('header')).backgroundColor",
        )
        .await?;
        assert_eq!(background, json!("rgb(29, 35, 43)"), "{path}");
        if path.starts_with("/live") {
            // The script runs: it opened the stream, which said it is ready.
            browser.wait_for_text("#status", "listening", WAIT).await?;
        }
        assert_eq!(violations(&browser).await?, Vec::<String>::new(), "{path}");
    }

    // The live page still updates: an event emitted now appears as a row.
    let shop = Bus::builder()
        .node("n1")
        .module("shop")
        .start(Arc::new(broker.transport()))
        .await?;
    let id = shop
        .emit_outgoing(Outgoing::json("order.placed", &json!({"n": 1}))?)
        .await?;
    browser
        .wait_for_text("#rows tr.event a", &id.to_string(), WAIT)
        .await?;
    assert_eq!(browser.text("#seen").await?, "1");
    assert_eq!(violations(&browser).await?, Vec::<String>::new(), "/live");
    shop.close().await;

    // The policy is in force, so the checks above could fail: a style put inline on a
    // page is refused, and the browser reports it.
    browser.open(&format!("{}/events", served.base)).await?;
    let colour = run(
        &browser,
        "var style = document.createElement('style');
         style.textContent = 'h1 { color: rgb(1, 2, 3) }';
         document.head.appendChild(style);
         return getComputedStyle(document.querySelector('h1')).color",
    )
    .await?;
    assert_ne!(colour, json!("rgb(1, 2, 3)"), "an inline style applied");
    let b = &browser;
    let reported = browser
        .wait_until("the report of the refused style", WAIT, || async move {
            let found = violations(b).await.ok()?;
            (!found.is_empty()).then_some(found)
        })
        .await?;
    assert!(
        reported.iter().any(|m| m.contains("style-src")),
        "{reported:?}"
    );
    browser.close().await
}
