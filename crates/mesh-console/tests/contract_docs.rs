//! The page of the contracts (`mesh contract docs`, [`mesh_console::contract_docs`]) of the
//! demo's system, opened from a file in headless Chromium: every key and every tool has a
//! visible section with its emitters, handlers, servers and callers; the page fetched
//! nothing. A screenshot is saved as `docs/console/contract-docs.png`.
//!
//! Chromium and chromedriver must be installed (`bash scripts/prepare-tests.sh` installs
//! them); the test fails, never skips, without them.

mod common;

use std::sync::Arc;

use common::browser::Browser;
use mesh::{Bus, MemoryBroker};
use mesh_contract::System;
use mesh_testkit::TempDir;

#[path = "../../mesh/examples/demo/modules.rs"]
#[allow(dead_code, unreachable_pub)]
mod modules;

/// The demo's modules started on the in-memory transport: their contracts, as announced.
async fn demo_system() -> anyhow::Result<(System, Vec<Bus>)> {
    let broker = MemoryBroker::new();
    let (done, _) = tokio::sync::mpsc::unbounded_channel();
    let mut system = System::new();
    let mut buses = Vec::new();
    for builder in [
        modules::billing(done.clone()),
        modules::mailer(done)?,
        modules::umami(),
    ] {
        let bus: Bus = builder.start(Arc::new(broker.transport())).await?;
        system.insert(bus.contract().clone());
        buses.push(bus);
    }
    Ok((system, buses))
}

/// The visible texts of every element `css` selects, failing on a hidden one.
async fn visible_texts(browser: &Browser, css: &str) -> anyhow::Result<Vec<String>> {
    let mut texts = Vec::new();
    for element in browser.find_all(css).await? {
        let text = element.text().await?;
        anyhow::ensure!(element.is_displayed().await?, "`{css}` {text} is hidden");
        texts.push(text);
    }
    Ok(texts)
}

#[tokio::test]
async fn the_demo_s_contract_page_shows_every_key_and_tool() -> anyhow::Result<()> {
    let (system, buses) = demo_system().await?;
    let keys: Vec<String> = system.key_table().into_iter().map(|r| r.key).collect();
    let tools = system.tool_table();
    assert!(
        !keys.is_empty() && !tools.is_empty(),
        "the demo has keys and tools"
    );

    let dir = TempDir::new("contract-docs")?;
    let path = dir.join("contracts.html");
    std::fs::write(
        &path,
        mesh_console::contract_docs(&system, "demo contracts"),
    )?;

    let browser = Browser::start().await?;
    browser.open(&format!("file://{}", path.display())).await?;
    assert_eq!(browser.text("h1").await?, "demo contracts");
    assert_eq!(visible_texts(&browser, "article.key h3").await?, keys);
    let tool_names: Vec<String> = tools.iter().map(|r| r.tool.clone()).collect();
    assert_eq!(
        visible_texts(&browser, "article.tool h3").await?,
        tool_names
    );

    // Who emits and handles the demo's event, who serves and calls its tool.
    let created = "article.key[id='key-module%2Eumami%2Esite%2Ecreated']";
    assert_eq!(
        browser.text(&format!("{created} td.emitters")).await?,
        "module.umami"
    );
    assert_eq!(
        browser.text(&format!("{created} td.handlers")).await?,
        "module.billing v1, module.mailer v1"
    );
    let schema = browser
        .text(&format!("{created} details.schema pre"))
        .await?;
    assert!(schema.contains("\"owner\""), "{schema}");
    let quote = "article.tool[id='tool-billing%2Equote']";
    assert_eq!(
        browser.text(&format!("{quote} td.servers")).await?,
        "module.billing"
    );
    assert_eq!(
        browser.text(&format!("{quote} td.callers")).await?,
        "module.umami"
    );
    let errors = browser.text(&format!("{quote} details.errors")).await?;
    assert!(errors.contains("schema-invalid"), "{errors}");

    // The table of contents links to each section, on the page itself.
    let links = browser.attrs("nav a", "href").await?;
    assert_eq!(links.len(), keys.len() + tools.len(), "{links:?}");
    browser.click("nav a[href='#tool-billing%2Equote']").await?;
    assert!(browser.find(quote).await?.is_displayed().await?);
    browser
        .client()
        .execute("window.scrollTo(0, 0)", Vec::new())
        .await?;

    // Self-contained: the page fetched nothing (no stylesheet, script, image or font).
    let fetched = browser
        .client()
        .execute(
            "return performance.getEntriesByType('resource').map(e => e.name)",
            Vec::new(),
        )
        .await?;
    assert_eq!(fetched, serde_json::json!([]), "the page fetched {fetched}");

    browser.screenshot("contract-docs").await?;
    browser.close().await?;
    for bus in buses {
        bus.drain().await?;
    }
    Ok(())
}
