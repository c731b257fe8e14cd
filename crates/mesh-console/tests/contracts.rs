//! The console's contracts page over the demo's system, in headless Chromium: the store holds
//! the announcements the demo's modules make (an older one of umami and an unreadable one
//! among them), the page is reached from the nav, and every key of the demo shows with its
//! versions, emitters, readers and schema, and every tool with its servers and callers. A
//! screenshot is saved as `docs/console/contracts.png`.
//!
//! Chromium and chromedriver must be installed (`bash scripts/prepare-tests.sh` installs
//! them); the test fails, never skips, without them.

mod common;

use std::sync::Arc;

use bytes::Bytes;
use common::browser::Browser;
use common::{at, get, serve};
use mesh::{Bus, MemoryBroker};
use mesh_audit::{Store, StoreOptions};
use mesh_console::Console;
use mesh_contract::System;
use mesh_core::contract::{ModuleContract, CONTRACT_FORMAT};
use mesh_core::{codec, Envelope, EventId, Headers, RoutingKey, SchemaVersion, Timestamp};
use mesh_testkit::TempStore;

#[path = "../../mesh/examples/demo/modules.rs"]
#[allow(dead_code, unreachable_pub)]
mod modules;

/// The demo's modules started on the in-memory transport: their contracts, as announced.
async fn demo_contracts() -> anyhow::Result<(Vec<ModuleContract>, Vec<Bus>)> {
    let broker = MemoryBroker::new();
    let (done, _) = tokio::sync::mpsc::unbounded_channel();
    let mut contracts = Vec::new();
    let mut buses = Vec::new();
    for builder in [
        modules::billing(done.clone()),
        modules::mailer(done)?,
        modules::umami(),
    ] {
        let bus: Bus = builder.start(Arc::new(broker.transport())).await?;
        contracts.push(bus.contract().clone());
        buses.push(bus);
    }
    Ok((contracts, buses))
}

/// The announcement event of `contract` at `time`, as a bus emits it.
fn announcement(
    contract: &ModuleContract,
    time: Timestamp,
    body: Vec<u8>,
) -> mesh_core::WireMessage {
    codec::encode(&Envelope {
        id: EventId::new(),
        key: RoutingKey::parse(&format!("{}.contract.announced", contract.owner))
            .expect("a valid key"),
        source: contract
            .owner
            .rsplit('.')
            .next()
            .unwrap_or_default()
            .to_owned(),
        node: contract.node.clone(),
        time,
        causation_id: None,
        schema: Some(SchemaVersion(CONTRACT_FORMAT)),
        extra_headers: Headers::new(),
        body: Bytes::from(body),
    })
}

#[tokio::test]
async fn the_contracts_page_shows_the_demo_s_keys_and_schemas() -> anyhow::Result<()> {
    let (contracts, buses) = demo_contracts().await?;
    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;
    let mut messages = Vec::new();
    for contract in &contracts {
        messages.push(announcement(
            contract,
            at(60),
            serde_json::to_vec(contract)?,
        ));
    }
    // An older umami announcing nothing, and a newer one that is not a contract: the page
    // shows the newest readable one, and names the unreadable one.
    let umami = contracts
        .iter()
        .find(|c| c.owner == "module.umami")
        .expect("umami runs");
    let mut old = umami.clone();
    old.emits.clear();
    messages.push(announcement(&old, at(3_600), serde_json::to_vec(&old)?));
    let unreadable = announcement(umami, at(10), br#"{"owner":5}"#.to_vec());
    let unreadable_id = codec::event_id(&unreadable).expect("an id");
    messages.push(unreadable);
    store.record_events(&messages).await?;

    let system = System::from_timed(contracts.iter().map(|c| (0, c.clone())));
    let keys: Vec<String> = system.key_table().into_iter().map(|r| r.key).collect();
    let tools: Vec<String> = system.tool_table().into_iter().map(|r| r.tool).collect();
    assert!(
        !keys.is_empty() && !tools.is_empty(),
        "the demo has keys and tools"
    );

    let served = serve(Console::new(store.clone())).await?;
    let browser = Browser::start().await?;
    browser.open(&served.base).await?;
    browser.click("header a[href='/contracts']").await?;
    browser
        .wait_for_text("h1", "Contracts", common::browser::WAIT)
        .await?;
    for (css, want) in [("article.key h3", &keys), ("article.tool h3", &tools)] {
        let mut shown = Vec::new();
        for element in browser.find_all(css).await? {
            assert!(element.is_displayed().await?, "{css} hidden");
            shown.push(element.text().await?);
        }
        assert_eq!(&shown, want, "{css}");
    }
    let created = "article.key[id='key-module%2Eumami%2Esite%2Ecreated']";
    assert_eq!(
        browser.text(&format!("{created} td.emitters")).await?,
        "module.umami"
    );
    assert_eq!(
        browser.text(&format!("{created} td.handlers")).await?,
        "module.billing v1, module.mailer v1"
    );
    assert_eq!(browser.text(&format!("{created} td.versions")).await?, "v1");
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
    let skipped = browser.text("div.skipped").await?;
    assert!(
        skipped.contains(&format!(
            "Skipped the announcement {unreadable_id} (module.umami.contract.announced): "
        )),
        "{skipped}"
    );
    browser.screenshot("contracts").await?;
    browser.close().await?;

    // No announcement at all: said so, not an error.
    let empty = TempStore::sqlite();
    let empty_store = Store::open(empty.url().parse::<StoreOptions>()?).await?;
    let served = serve(Console::new(empty_store)).await?;
    let (status, html) = get(&format!("{}/contracts", served.base)).await?;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("No key is emitted or handled."), "{html}");
    for bus in buses {
        bus.drain().await?;
    }
    Ok(())
}
