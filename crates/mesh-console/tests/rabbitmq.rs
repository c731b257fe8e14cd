//! A re-drive from the console reaches the consumer's queue on the broker (a vhost of the
//! test's own), and the dead letter is marked.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{dead, event, get, post, serve, TOKEN};
use mesh::Bus;
use mesh_audit::{DeadLetterQuery, Store, StoreOptions};
use mesh_console::{Console, Tokens};
use mesh_core::{DeadReason, EventId};
use mesh_testkit::sdk::transport;
use mesh_testkit::{eventually, TempStore, TestVhost};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn a_redrive_reaches_the_consumer_and_marks_the_dead_letter() -> anyhow::Result<()> {
    let vhost = TestVhost::create("console-redrive").await?;
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
            .tokens(Tokens::single("alice", TOKEN)?),
    )
    .await?;
    let base = &served.base;
    let (status, html) = get(&format!("{base}/dead/redrive?id={}", row.id)).await?;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Re-drive 1 dead letter(s)?"), "{html}");
    assert!(
        html.contains("<td>n1.billing.events</td><td class=\"num\">1</td>"),
        "{html}"
    );

    let row_id = row.id.to_string();
    let (status, html) = post(
        &format!("{base}/dead/redrive"),
        &[("id", &row_id), ("token", TOKEN)],
        &[("origin", base.as_str())],
    )
    .await?;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Re-driven: 1"), "{html}");

    eventually(WAIT, "the consumer handled the re-driven event", || {
        let handled = handled.clone();
        async move { handled.lock().expect("lock").contains(&id).then_some(()) }
    })
    .await;
    let marked = store.dead_letter(row.id).await?.expect("still recorded");
    assert!(marked.redriven_at.is_some());
    assert_eq!(marked.redrive_count, 1);
    // Only the one asked for.
    let untouched = store
        .dead_letters(&DeadLetterQuery::new().event_id(other))
        .await?
        .pop()
        .expect("the other dead letter");
    assert_eq!(untouched.redrive_count, 0);
    assert_eq!(*handled.lock().expect("lock"), vec![id]);
    billing.close().await;
    Ok(())
}

/// An untrusted dead letter (published by umami's user, naming billing's queue) is shown as
/// such and refused by the console's re-drive; with the override it goes without its claims.
#[tokio::test]
async fn an_untrusted_dead_letter_is_redriven_only_with_its_claims_stripped() -> anyhow::Result<()>
{
    let vhost = TestVhost::create("console-untrusted").await?;
    let url = vhost.url();
    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;

    let seen: Arc<Mutex<Vec<EventId>>> = Arc::default();
    let billing = {
        let seen = seen.clone();
        Bus::builder()
            .node("n1")
            .module("billing")
            .on_raw(["module.shop.order.placed"], move |incoming| {
                seen.lock().expect("lock").push(incoming.meta.id());
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
        br#"{"order": 9}"#,
    );
    let mut forged = dead(&message, DeadReason::Permanent, "n1.billing.events");
    forged.properties.headers.insert(
        mesh_core::codec::USER.into(),
        mesh_core::HeaderValue::Str("module.billing".into()),
    );
    forged.properties.user_id = Some("module.umami".into());
    store
        .record_dead_letters_judged(&[forged], Some(""))
        .await?;
    let row = store
        .dead_letters(&DeadLetterQuery::new().event_id(id))
        .await?
        .pop()
        .expect("the dead letter");
    assert!(row.untrusted);

    let served = serve(
        Console::new(store.clone())
            .transport(transport(&url).await?)
            .tokens(Tokens::single("alice", TOKEN)?),
    )
    .await?;
    let base = &served.base;
    let (status, html) = get(&format!("{base}/dead/{}", row.id)).await?;
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains("untrusted: its publisher does not own"),
        "{html}"
    );
    let (status, html) = get(&format!("{base}/dead/redrive?id={}", row.id)).await?;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("1 would be refused"), "{html}");
    assert!(html.contains("strip_untrusted_claims=yes"), "{html}");

    let row_id = row.id.to_string();
    let (status, html) = post(
        &format!("{base}/dead/redrive"),
        &[("id", &row_id), ("token", TOKEN)],
        &[("origin", base.as_str())],
    )
    .await?;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Re-driven: 0"), "{html}");
    assert!(html.contains("untrusted dead letter"), "{html}");
    assert_eq!(
        store
            .dead_letter(row.id)
            .await?
            .expect("kept")
            .redrive_count,
        0
    );

    let (status, html) = post(
        &format!("{base}/dead/redrive"),
        &[
            ("id", &row_id),
            ("strip_untrusted_claims", "yes"),
            ("token", TOKEN),
        ],
        &[("origin", base.as_str())],
    )
    .await?;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Re-driven: 1"), "{html}");
    eventually(WAIT, "the consumer handled the stripped event", || {
        let seen = seen.clone();
        async move { (!seen.lock().expect("lock").is_empty()).then_some(()) }
    })
    .await;
    assert_eq!(*seen.lock().expect("lock"), vec![id]);
    assert_eq!(
        store
            .dead_letter(row.id)
            .await?
            .expect("kept")
            .redrive_count,
        1
    );
    billing.close().await;
    Ok(())
}
