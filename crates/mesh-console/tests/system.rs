//! The console over a real broker (a vhost of the test's own) and its management API: the
//! overview's module queues and audit loggers, the system map's edges, a module queue's page,
//! and a replay from the console into one module's queue only.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{at, event, get, post, serve, TOKEN};
use mesh::amqp::management::ManagementClient;
use mesh::amqp::AmqpOptions;
use mesh::{Bus, Outgoing};
use mesh_audit::{Store, StoreOptions};
use mesh_console::{Console, Tokens};
use mesh_core::EventId;
use mesh_testkit::sdk::transport;
use mesh_testkit::{eventually, TempStore, TestVhost};

const WAIT: Duration = Duration::from_secs(60);

type Seen = Arc<Mutex<Vec<(EventId, bool)>>>;

/// A module on `n1` whose handler records each event id and whether it was replayed.
async fn module(url: &str, name: &str, patterns: &[&str], seen: &Seen) -> anyhow::Result<Bus> {
    let seen = seen.clone();
    Ok(Bus::builder()
        .node("n1")
        .module(name)
        .on_raw(patterns.to_vec(), move |incoming| {
            let replayed = incoming.meta.replayed().is_some() && incoming.meta.redelivered();
            seen.lock()
                .expect("lock")
                .push((incoming.meta.id(), replayed));
            async { Ok(()) }
        })
        .start(transport(url).await?)
        .await?)
}

#[tokio::test]
async fn the_map_the_queues_and_a_replay_to_one_module() -> anyhow::Result<()> {
    let vhost = TestVhost::create("console-system").await?;
    let url = vhost.url();
    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;

    // shop emits orders, billing invoices; billing reads orders, mailer reads both.
    let mut orders = Vec::new();
    let mut messages = Vec::new();
    for n in 0..3 {
        let (id, message) = event("module.shop.order.placed", "shop", at(300 - n), None, b"{}");
        orders.push(id);
        messages.push(message);
    }
    for n in 0..2 {
        let (_, message) = event(
            "module.billing.invoice.paid",
            "billing",
            at(200 - n),
            None,
            b"{}",
        );
        messages.push(message);
    }
    store.record_events(&messages).await?;
    let billing_seen: Seen = Arc::default();
    let mailer_seen: Seen = Arc::default();
    let billing = module(
        &url,
        "billing",
        &["module.shop.order.placed"],
        &billing_seen,
    )
    .await?;
    let mailer = module(
        &url,
        "mailer",
        &["module.billing.#", "module.shop.#"],
        &mailer_seen,
    )
    .await?;

    let management = mesh::amqp::management_options(&url.parse::<AmqpOptions>()?)
        .expect("an address to derive the API from");
    let console = Console::new(store.clone())
        .transport(transport(&url).await?)
        .tokens(Tokens::single("alice", TOKEN)?)
        .management(ManagementClient::new(&management)?, vhost.name());
    let served = serve(console).await?;
    let base = &served.base;

    // The overview: both module queues with their consumer (the management API's figures
    // lag a few seconds behind); no audit logger runs here.
    let rows: Vec<String> = ["n1.billing.events", "n1.mailer.events"]
        .iter()
        .map(|queue| {
            format!(
                r#"<a class="queue" href="/modules/{queue}">{queue}</a></td><td class="num">0</td><td class="num">0</td><td class="num">1</td>"#
            )
        })
        .collect();
    let html = eventually(WAIT, "the overview shows both queues' consumer", || {
        let (url, rows) = (format!("{base}/"), rows.clone());
        async move {
            let (status, html) = get(&url).await.ok()?;
            (status == 200 && rows.iter().all(|row| html.contains(row))).then_some(html)
        }
    })
    .await;
    assert!(
        html.contains("No audit logger queue: events are not being recorded."),
        "{html}"
    );

    // The map: each emitter to its keys, each key to the queues bound to it.
    let (status, html) = get(&format!("{base}/map")).await?;
    assert_eq!(status, 200, "{html}");
    let edges = [
        ("emits", "shop", "module.shop.order.placed"),
        ("emits", "billing", "module.billing.invoice.paid"),
        ("receives", "module.shop.order.placed", "n1.billing.events"),
        ("receives", "module.shop.order.placed", "n1.mailer.events"),
        (
            "receives",
            "module.billing.invoice.paid",
            "n1.mailer.events",
        ),
    ];
    for (class, from, to) in edges {
        assert!(
            html.contains(&format!(
                r#"class="edge {class}" data-from="{from}" data-to="{to}""#
            )),
            "the edge {from} → {to}: {html}"
        );
    }
    assert_eq!(
        html.matches(r#"class="edge "#).count(),
        edges.len(),
        "no other edge: {html}"
    );
    assert!(
        !html.contains(r#"data-to="module.billing.invoice.paid" data-from="shop""#),
        "{html}"
    );

    // A module queue's page: its bindings, and the replay form.
    let (status, html) = get(&format!("{base}/modules/n1.mailer.events")).await?;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("module.billing.#"), "{html}");
    assert!(html.contains("module.shop.#"), "{html}");
    assert!(html.contains(r#"action="/replay""#), "{html}");

    // Replay shop's orders into billing's queue only.
    let since = at(3600).to_string();
    let form = [
        ("queue", "n1.billing.events"),
        ("key", "module.shop.#"),
        ("since", since.as_str()),
    ];
    let query = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(form)
        .finish();
    let (status, html) = get(&format!("{base}/replay?{query}")).await?;
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains("Replay 3 event(s) to n1.billing.events?"),
        "{html}"
    );
    let (status, html) = post(
        &format!("{base}/replay"),
        &form,
        &[("origin", base.as_str())],
    )
    .await?;
    assert_eq!(status, 403, "no token: {html}");
    let mut with_token = form.to_vec();
    with_token.push(("token", TOKEN));
    let (status, html) = post(
        &format!("{base}/replay"),
        &with_token,
        &[("origin", "http://evil.example")],
    )
    .await?;
    assert_eq!(status, 403, "a foreign origin: {html}");
    let (status, html) = post(
        &format!("{base}/replay"),
        &with_token,
        &[("origin", base.as_str())],
    )
    .await?;
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains(r#"Replayed: <span class="replayed">3</span>"#),
        "{html}"
    );

    eventually(WAIT, "billing handled the three replayed orders", || {
        let seen = billing_seen.clone();
        async move { (seen.lock().expect("lock").len() >= 3).then_some(()) }
    })
    .await;
    let seen = billing_seen.lock().expect("lock").clone();
    assert_eq!(
        seen,
        orders.iter().map(|id| (*id, true)).collect::<Vec<_>>(),
        "each order once, in order, seen as replayed"
    );

    // Mailer is bound to the same keys but receives none of the replay: an event emitted
    // after it reaches mailer alone.
    let shop = mesh_testkit::sdk::emitter(&url, "n1", "shop").await?;
    let sentinel = shop
        .emit_outgoing(Outgoing::json("order.placed", &"after the replay")?)
        .await?;
    eventually(WAIT, "mailer handled the sentinel", || {
        let seen = mailer_seen.clone();
        async move { (!seen.lock().expect("lock").is_empty()).then_some(()) }
    })
    .await;
    assert_eq!(*mailer_seen.lock().expect("lock"), vec![(sentinel, false)]);

    shop.close().await;
    billing.close().await;
    mailer.close().await;
    Ok(())
}
