//! The console's look, over the seeded store: every time on every page is written one way
//! (fixed width, UTC, to the microsecond, the exact time in `datetime`); in headless Chromium
//! the system's dark colour scheme gives dark pages, and in a 420 px window every action is
//! on screen and no page scrolls sideways. Screenshots go to `docs/console/`.
//!
//! Chromium and chromedriver must be installed (`bash scripts/prepare-tests.sh` installs
//! them); the browser tests fail, never skip, without them.

mod common;

use common::browser::{Browser, Look};
use common::{get, seeded, serve, Seeded, TOKEN};
use mesh_audit::DeadLetterQuery;
use mesh_console::{Console, Tokens};
use mesh_core::Timestamp;

fn tokens() -> Tokens {
    Tokens::single("alice", TOKEN).expect("a valid token")
}

/// Every page that shows times, and one of each kind of page.
async fn pages(seed: &Seeded) -> anyhow::Result<Vec<String>> {
    let dead = seed
        .store
        .dead_letters(&DeadLetterQuery::new().limit(1))
        .await?;
    let dead = dead.first().expect("a seeded dead letter").id;
    Ok(vec![
        "/".to_owned(),
        "/events".to_owned(),
        format!("/events/{}", seed.chain[0]),
        format!("/events/{}", seed.chain[1]),
        "/dead".to_owned(),
        "/dead?queue=n1.billing.events".to_owned(),
        "/dead?reason=max-attempts".to_owned(),
        format!("/dead/{dead}"),
        "/map".to_owned(),
    ])
}

/// The page's text without its tags (attribute values, hence links and `datetime`, dropped)
/// and without its `<pre>` blocks: a stored event's headers and body, shown as they came off
/// the wire (an `x-time` there is the publisher's text, not a time the console writes).
fn text_of(html: &str) -> String {
    let mut html = html.to_owned();
    while let Some(start) = html.find("<pre") {
        let end = html[start..]
            .find("</pre>")
            .map_or(html.len(), |e| start + e + "</pre>".len());
        html.replace_range(start..end, " ");
    }
    let mut text = String::with_capacity(html.len());
    let mut in_tag = false;
    for c in html.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                text.push(' ');
            }
            _ if !in_tag => text.push(c),
            _ => {}
        }
    }
    text
}

/// Whether `s` starts with `YYYY-MM-DD HH:MM:SS.ffffffZ`.
fn fixed_at_start(s: &str) -> bool {
    const SHAPE: &str = "dddd-dd-dd dd:dd:dd.ddddddZ";
    s.len() >= SHAPE.len()
        && s.bytes().zip(SHAPE.bytes()).all(|(c, want)| match want {
            b'd' => c.is_ascii_digit(),
            _ => c == want,
        })
}

/// Where `text` has a date (`dddd-dd-dd`).
fn dates(text: &str) -> Vec<usize> {
    let bytes = text.as_bytes();
    (0..bytes.len().saturating_sub(9))
        .filter(|&i| {
            let w = &bytes[i..i + 10];
            w[..4].iter().all(u8::is_ascii_digit)
                && w[4] == b'-'
                && w[5..7].iter().all(u8::is_ascii_digit)
                && w[7] == b'-'
                && w[8..10].iter().all(u8::is_ascii_digit)
                && (i == 0 || !bytes[i - 1].is_ascii_digit())
        })
        .collect()
}

/// `(datetime, text)` of every `<time>` element of `html`.
fn time_elements(html: &str) -> Vec<(String, String)> {
    html.match_indices("<time datetime=\"")
        .map(|(at, marker)| {
            let rest = &html[at + marker.len()..];
            let datetime = &rest[..rest.find('"').unwrap_or(0)];
            let body = &rest[rest.find('>').map_or(0, |i| i + 1)..];
            let text = &body[..body.find("</time>").unwrap_or(0)];
            (datetime.to_owned(), text.to_owned())
        })
        .collect()
}

#[tokio::test]
async fn every_time_on_every_page_is_written_one_way() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let served = serve(Console::new(seed.store.clone()).tokens(tokens())).await?;
    let mut times = 0;
    for path in pages(&seed).await? {
        let (status, html) = get(&format!("{}{path}", served.base)).await?;
        assert_eq!(status, 200, "{path}");
        let text = text_of(&html);
        for at in dates(&text) {
            assert!(
                fixed_at_start(&text[at..]),
                "{path}: a time not in the console's format: {:?}",
                &text[at..(at + 40).min(text.len())]
            );
        }
        for (datetime, shown) in time_elements(&html) {
            assert!(
                fixed_at_start(&shown) && shown.len() == 27,
                "{path}: {shown:?}"
            );
            let exact = Timestamp::parse(&datetime)?;
            let written = Timestamp::parse(&shown.replacen(' ', "T", 1))?;
            assert_eq!(
                exact.unix_nanos() / 1_000,
                written.unix_nanos() / 1_000,
                "{path}: {shown} is not {datetime}"
            );
            times += 1;
        }
    }
    assert!(times > 60, "the pages show the seeded times ({times})");
    Ok(())
}

/// Every action on the page (links that act, buttons, check boxes) is displayed and wholly
/// inside the window's width, and the page does not scroll sideways.
async fn every_action_on_screen(browser: &Browser, page: &str) -> anyhow::Result<usize> {
    let width: f64 = browser
        .client()
        .execute("return document.documentElement.clientWidth;", vec![])
        .await?
        .as_f64()
        .unwrap_or(0.0);
    let scroll: f64 = browser
        .client()
        .execute("return document.documentElement.scrollWidth;", vec![])
        .await?
        .as_f64()
        .unwrap_or(f64::MAX);
    anyhow::ensure!(
        scroll <= width + 0.5,
        "{page} scrolls sideways: {scroll} px in a {width} px window"
    );
    let actions = browser
        .find_all("main a.action, main a.group, main button, main input:not([type='hidden']), main select")
        .await?;
    for action in &actions {
        let (x, _, w, _) = action.rectangle().await?;
        let what = action.html(true).await.unwrap_or_default();
        anyhow::ensure!(action.is_displayed().await?, "{page}: {what} is hidden");
        anyhow::ensure!(
            x >= 0.0 && x + w <= width + 0.5,
            "{page}: {what} is cut off (x {x}, width {w}, window {width})"
        );
    }
    Ok(actions.len())
}

#[tokio::test]
async fn in_a_420_px_window_every_action_is_on_screen() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let served = serve(Console::new(seed.store.clone()).tokens(tokens())).await?;
    let browser = Browser::start_with(Look {
        window: (420, 900),
        dark: false,
    })
    .await?;
    let mut actions = 0;
    for path in pages(&seed).await? {
        browser.open(&format!("{}{path}", served.base)).await?;
        actions += every_action_on_screen(&browser, &path).await?;
        if path == "/dead?queue=n1.billing.events" {
            browser.screenshot("narrow-dead-letters").await?;
        }
    }
    assert!(actions > 10, "the pages have actions ({actions})");
    browser.screenshot("narrow-map").await?;
    browser.close().await
}

#[tokio::test]
async fn the_system_s_dark_colour_scheme_gives_dark_pages() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let served = serve(Console::new(seed.store.clone()).tokens(tokens())).await?;
    let browser = Browser::start_with(Look {
        dark: true,
        ..Look::default()
    })
    .await?;
    browser.open(&format!("{}/", served.base)).await?;
    let dark = browser
        .client()
        .execute(
            "return window.matchMedia('(prefers-color-scheme: dark)').matches;",
            vec![],
        )
        .await?;
    assert_eq!(
        dark,
        serde_json::Value::Bool(true),
        "the browser prefers dark"
    );
    for path in pages(&seed).await? {
        browser.open(&format!("{}{path}", served.base)).await?;
        let background = browser
            .client()
            .execute(
                "return getComputedStyle(document.body).backgroundColor;",
                vec![],
            )
            .await?;
        assert_eq!(background, "rgb(20, 24, 29)", "{path}");
        every_action_on_screen(&browser, &path).await?;
    }
    browser.open(&format!("{}/", served.base)).await?;
    browser.screenshot("dark-overview").await?;
    browser
        .open(&format!("{}/dead?queue=n1.billing.events", served.base))
        .await?;
    browser.screenshot("dark-dead-letters").await?;
    // A light browser gets the light page.
    browser.close().await?;
    let light = Browser::start().await?;
    light.open(&format!("{}/", served.base)).await?;
    let background = light
        .client()
        .execute(
            "return getComputedStyle(document.body).backgroundColor;",
            vec![],
        )
        .await?;
    assert_eq!(background, "rgb(246, 247, 249)");
    light.close().await
}
