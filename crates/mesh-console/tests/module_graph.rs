//! The system map's module → module view of the demo's system, in headless Chromium: the
//! demo's modules run on a vhost of the test's own (their queues bound as the demo binds
//! them), the store holds the events umami emits, and the view draws an edge from umami to
//! each module that handles them: billing and mailer. A screenshot is saved as
//! `docs/console/modules.png`.
//!
//! Chromium and chromedriver must be installed (`bash scripts/prepare-tests.sh` installs
//! them); the test fails, never skips, without them.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::browser::Browser;
use common::{at, event, serve};
use mesh::amqp::management::ManagementClient;
use mesh::amqp::AmqpOptions;
use mesh::Bus;
use mesh_audit::{Store, StoreOptions};
use mesh_console::Console;
use mesh_testkit::sdk::transport;
use mesh_testkit::{eventually, TempStore, TestVhost};

#[path = "../../mesh/examples/demo/modules.rs"]
#[allow(dead_code, unreachable_pub)]
mod modules;

/// How long the management API may take to list the demo's bindings.
const LISTED: Duration = Duration::from_secs(60);

#[tokio::test]
async fn the_demo_s_module_graph_has_umami_to_billing_and_to_mailer() -> anyhow::Result<()> {
    let vhost = TestVhost::create("console-module-graph").await?;
    let url = vhost.url();
    let (done, _) = tokio::sync::mpsc::unbounded_channel();
    let mut buses: Vec<Bus> = Vec::new();
    for builder in [
        modules::billing(done.clone()),
        modules::mailer(done)?,
        modules::umami(),
    ] {
        buses.push(builder.start(transport(&url).await?).await?);
    }
    let umami = buses
        .iter()
        .find(|bus| bus.contract().owner == "module.umami")
        .expect("umami runs");
    // What umami emits, as the audit logger would have stored it.
    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;
    let mut messages = Vec::new();
    for (n, emitted) in umami.contract().emits.iter().enumerate() {
        for k in 0..3u64 {
            let (_, message) = event(&emitted.key, "umami", at(100 + k + n as u64), None, b"{}");
            messages.push(message);
        }
    }
    assert!(!messages.is_empty(), "umami emits something");
    store.record_events(&messages).await?;

    let management = mesh::amqp::management_options(&url.parse::<AmqpOptions>()?)
        .expect("an address to derive the API from");
    let served = serve(
        Console::new(store)
            .transport(transport(&url).await?)
            .management(ManagementClient::new(&management)?, vhost.name()),
    )
    .await?;
    let browser = Browser::start().await?;
    let map = format!("{}/map", served.base);
    let b = &browser;
    let edges = eventually(LISTED, "the module graph's edges", || {
        let map = map.clone();
        async move {
            b.open(&map).await.ok()?;
            let from = b.attrs("svg.modules path.edge", "data-from").await.ok()?;
            let to = b.attrs("svg.modules path.edge", "data-to").await.ok()?;
            let edges: HashSet<(String, String)> = from.into_iter().zip(to).collect();
            (edges.len() >= 2).then_some(edges)
        }
    })
    .await;
    for want in [("umami", "billing"), ("umami", "mailer")] {
        assert!(
            edges.contains(&(want.0.to_owned(), want.1.to_owned())),
            "{want:?} in {edges:?}"
        );
    }
    let rows = browser.texts("table.module-edges td").await?;
    assert!(
        rows.chunks(4).any(|r| r[0] == "umami" && r[1] == "billing"),
        "{rows:?}"
    );
    browser.screenshot("modules").await?;
    for bus in buses {
        bus.close().await;
    }
    browser.close().await
}
