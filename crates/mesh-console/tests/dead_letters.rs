//! Dead letters at scale: a list larger than a page shows every dead letter across its pages
//! exactly once, and a thousand dead letters are re-driven in headless Chromium through the
//! list's "all matching" box, in batches with progress, onto their queue on a real broker (a
//! vhost of the test's own), where they are counted; a dead letter re-driven before goes
//! again only when the operator asks for it on the confirmation.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::browser::{Browser, WAIT};
use common::{at, event, get, linked, post, serve, TOKEN};
use mesh::amqp::management::ManagementClient;
use mesh::amqp::AmqpOptions;
use mesh_audit::{DeadLetterQuery, Redrive, Store, StoreOptions};
use mesh_console::{Console, Tokens};
use mesh_core::{codec, DeadLetterNote, DeadReason, Timestamp, WireMessage};
use mesh_testkit::sdk::transport;
use mesh_testkit::{eventually, TempStore, TestVhost};

const QUEUE: &str = "n1.billing.events";

/// How long the broker's statistics may take to count the re-driven messages.
const COUNTED: Duration = Duration::from_secs(90);

fn tokens() -> Tokens {
    Tokens::single("alice", TOKEN).expect("a valid token")
}

/// `message` dead-lettered by the consumer of `queue`, set aside at `time`.
fn dead_at(message: &WireMessage, queue: &str, time: Timestamp) -> WireMessage {
    let mut copy = message.clone();
    codec::mark_dead(
        &mut copy,
        &DeadLetterNote {
            reason: DeadReason::Permanent,
            attempts: 3,
            last_error: Some("handler failed".into()),
            queue: queue.into(),
            time,
        },
    );
    copy
}

/// `n` dead letters of `queue`, five at a time set aside at the same second (ties the
/// keyset cursor must break by id).
fn dead_letters(n: u64, queue: &str) -> Vec<WireMessage> {
    (0..n)
        .map(|i| {
            let (_, message) = event("module.shop.order.placed", "shop", at(5000), None, b"{}");
            dead_at(&message, queue, at(4000 - i / 5))
        })
        .collect()
}

/// The `href` of the page's "next page" link, unescaped.
fn next_link(html: &str) -> Option<String> {
    let marker = "rel=\"next\" href=\"";
    let start = html.find(marker)? + marker.len();
    let rest = &html[start..];
    Some(rest[..rest.find('"')?].replace("&amp;", "&"))
}

#[tokio::test]
async fn a_list_larger_than_a_page_shows_every_dead_letter_once() -> anyhow::Result<()> {
    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;
    store.record_dead_letters(&dead_letters(237, QUEUE)).await?;
    // Another queue's, which its list leaves out.
    store
        .record_dead_letters(&dead_letters(7, "n1.mailer.events"))
        .await?;
    let expected: HashSet<String> = store
        .dead_letters(&DeadLetterQuery::new().queue(QUEUE).limit(usize::MAX))
        .await?
        .into_iter()
        .map(|d| d.id.to_string())
        .collect();
    assert_eq!(expected.len(), 237);
    let served = serve(Console::new(store.clone()).tokens(tokens())).await?;
    let base = &served.base;

    let mut seen: Vec<String> = Vec::new();
    let mut pages = 0;
    let mut url = format!("{base}/dead?queue={QUEUE}&limit=50");
    loop {
        let (status, html) = get(&url).await?;
        assert_eq!(status, 200, "{html}");
        assert!(html.contains("<span class=\"total\">237</span>"), "{html}");
        let listed = linked(&html, "dead", "/dead/");
        assert!(listed.len() <= 50, "a page holds at most its size");
        seen.extend(listed);
        pages += 1;
        match next_link(&html) {
            Some(next) => url = format!("{base}{next}"),
            None => break,
        }
        assert!(pages < 10, "the pages end");
    }
    assert_eq!(pages, 5, "237 dead letters at 50 a page");
    assert_eq!(seen.len(), 237, "every dead letter once: none repeated");
    assert_eq!(seen.iter().cloned().collect::<HashSet<_>>(), expected);

    // Newest first, and a page size of 500 holds them all.
    let (_, html) = get(&format!("{base}/dead?queue={QUEUE}&limit=500")).await?;
    let listed = linked(&html, "dead", "/dead/");
    assert_eq!(listed, seen, "the pages in the order of the whole list");
    assert!(next_link(&html).is_none(), "no page after the last");
    Ok(())
}

/// The messages the broker counts on `queue` (its statistics, which lag).
async fn counted(api: &ManagementClient, vhost: &str, queue: &str) -> Option<u64> {
    api.queues(vhost)
        .await
        .ok()?
        .into_iter()
        .find(|q| q.name == queue)?
        .messages
}

#[tokio::test]
async fn a_thousand_dead_letters_are_redriven_through_select_all_with_progress(
) -> anyhow::Result<()> {
    let vhost = TestVhost::create("console-dead-bulk").await?;
    let url = vhost.url();
    let management = mesh::amqp::management_options(&url.parse::<AmqpOptions>()?)
        .expect("an address to derive the API from");
    let api = ManagementClient::new(&management)?;
    // The failing consumer's queue, with no consumer: what arrives stays there to be counted.
    api.put_queue(vhost.name(), QUEUE, true, &serde_json::Map::new())
        .await?;
    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;
    store
        .record_dead_letters(&dead_letters(1000, QUEUE))
        .await?;
    let all = store
        .dead_letters(&DeadLetterQuery::new().queue(QUEUE).limit(usize::MAX))
        .await?;
    assert_eq!(all.len(), 1000);
    let transport = transport(&url).await?;

    // One of them re-driven before (one message on the queue already).
    let before = all[500].id;
    let report = store
        .redrive(transport.as_ref(), Redrive::One(before))
        .await?;
    assert_eq!(report.redriven, [before]);

    let served = serve(
        Console::new(store.clone())
            .transport(transport.clone())
            .tokens(tokens()),
    )
    .await?;
    let base = &served.base;

    // Named by id without the explicit confirmation, it is not re-driven again.
    let id = before.to_string();
    let (status, html) = post(
        &format!("{base}/dead/redrive"),
        &[("id", &id), ("token", TOKEN)],
        &[("origin", base.as_str())],
    )
    .await?;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Re-driven: 0"), "{html}");
    assert!(html.contains("was re-driven 1 time(s)"), "{html}");
    // Batches take the same checks as a single re-drive: no token, another origin.
    let (status, _) = post(
        &format!("{base}/dead/redrive"),
        &[("queue", QUEUE), ("batch", "200")],
        &[("origin", base.as_str())],
    )
    .await?;
    assert_eq!(status, 403, "a batch without a token");
    let (status, _) = post(
        &format!("{base}/dead/redrive"),
        &[("queue", QUEUE), ("batch", "200"), ("token", TOKEN)],
        &[("origin", "http://evil.example")],
    )
    .await?;
    assert_eq!(status, 403, "a batch from another origin");
    assert_eq!(
        store
            .count_dead_letters(&DeadLetterQuery::new().redriven(true))
            .await?,
        1,
        "nothing re-driven by the refusals"
    );

    let browser = Browser::start().await?;
    // Its own page asks again: the confirmation warns, and offers no re-drive without it.
    browser.open(&format!("{base}/dead/{before}")).await?;
    browser.click("a.action").await?;
    browser
        .wait_for_text("h1", "Re-drive 0 dead letter(s)?", WAIT)
        .await?;
    assert_eq!(browser.text("p.redriven-before span.before").await?, "1");
    assert!(browser.find_all("button.danger").await?.is_empty());

    // The list: a page of 50, and "all matching" selects the whole group.
    browser
        .open(&format!("{base}/dead?queue={QUEUE}&limit=50"))
        .await?;
    assert_eq!(browser.find_all("tr.dead").await?.len(), 50);
    assert_eq!(browser.text("span.total").await?, "1000");
    browser.screenshot("dead-letter-list").await?;
    browser.click("#select-all").await?;
    browser
        .click("form.selection button[type='submit']:not([formaction])")
        .await?;
    // The one re-driven before is left out, and said so.
    browser
        .wait_for_text("h1", "Re-drive 999 dead letter(s)?", WAIT)
        .await?;
    assert_eq!(browser.text("p.redriven-before span.before").await?, "1");
    browser.screenshot("redrive-again-warning").await?;
    // Asked for again: all 1,000.
    browser.click("a.again").await?;
    browser
        .wait_for_text("h1", "Re-drive 1000 dead letter(s)?", WAIT)
        .await?;
    assert!(browser.text("p.again").await?.contains("goes again"));
    assert_eq!(
        browser.texts("table.plan td").await?,
        [QUEUE, "1000"],
        "where they go"
    );
    browser.type_into("input[name='token']", TOKEN).await?;
    browser.click("button.danger").await?;
    browser
        .wait_for_text("p.progress-state", "Done: 1000 re-driven, 0 not.", WAIT)
        .await?;
    assert_eq!(browser.text("h1").await?, "Re-driven: 1000");
    assert_eq!(browser.text("#progress span.redriven").await?, "1000");
    assert_eq!(
        browser.text("#progress span.batches").await?,
        "5",
        "1,000 in batches of 200"
    );
    assert_eq!(
        browser.attrs("#redrive-progress", "value").await?,
        ["1000"],
        "the progress bar full"
    );
    assert!(!browser.text("body").await?.contains(TOKEN));
    browser.screenshot("redrive-progress").await?;
    browser.close().await?;

    // On the broker: the one re-driven before, and the 1,000.
    eventually(COUNTED, "1,001 messages counted on the queue", || {
        let api = api.clone();
        let vhost = vhost.name().to_owned();
        async move { (counted(&api, &vhost, QUEUE).await == Some(1001)).then_some(()) }
    })
    .await;
    assert_eq!(
        store
            .count_dead_letters(&DeadLetterQuery::new().redriven(false))
            .await?,
        0,
        "every one marked"
    );
    let twice = store.dead_letter(before).await?.expect("still recorded");
    assert_eq!(twice.redrive_count, 2, "the one asked for again");
    Ok(())
}

/// A batch's JSON report: (re-driven, refused errors, next cursor, done).
fn report(json: &str) -> anyhow::Result<(u64, Vec<String>, Option<String>, bool)> {
    let value: serde_json::Value = serde_json::from_str(json)?;
    let failed = value["failed"]
        .as_array()
        .map(|all| {
            all.iter()
                .map(|f| f["error"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default();
    Ok((
        value["redriven"].as_u64().unwrap_or(u64::MAX),
        failed,
        value["next"].as_str().map(str::to_owned),
        value["done"].as_bool().unwrap_or(false),
    ))
}

/// Batches take the refusals of a single re-drive: an untrusted dead letter is refused
/// without the override and goes with it; a read-only console refuses every batch.
#[tokio::test]
async fn batches_refuse_untrusted_dead_letters_without_the_override() -> anyhow::Result<()> {
    let vhost = TestVhost::create("console-dead-batches").await?;
    let url = vhost.url();
    let management = mesh::amqp::management_options(&url.parse::<AmqpOptions>()?)
        .expect("an address to derive the API from");
    let api = ManagementClient::new(&management)?;
    api.put_queue(vhost.name(), QUEUE, true, &serde_json::Map::new())
        .await?;
    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;
    store.record_dead_letters(&dead_letters(3, QUEUE)).await?;
    // Published by umami's user, naming billing's queue: untrusted.
    let (_, message) = event("module.shop.order.placed", "shop", at(10), None, b"{}");
    let mut forged = dead_at(&message, QUEUE, at(3000));
    forged.properties.user_id = Some("module.umami".into());
    store
        .record_dead_letters_judged(&[forged], Some(""))
        .await?;
    let served = serve(
        Console::new(store.clone())
            .transport(transport(&url).await?)
            .tokens(tokens()),
    )
    .await?;
    let base = &served.base;
    let origin = [("origin", base.as_str())];

    // The confirmation offers the override.
    let (status, html) = get(&format!("{base}/dead/redrive?queue={QUEUE}")).await?;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Re-drive 3 dead letter(s)?"), "{html}");
    assert!(html.contains("1 untrusted"), "{html}");

    // Batches of 2 without it: the untrusted one refused, the three others re-driven.
    let form = |after: Option<&str>, strip: bool| {
        let mut form = vec![("queue", QUEUE), ("batch", "2"), ("token", TOKEN)];
        if let Some(after) = after {
            form.push(("after", after));
        }
        if strip {
            form.push(("strip_untrusted_claims", "yes"));
        }
        form.into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect::<Vec<_>>()
    };
    let (mut redriven, mut refused, mut after) = (0, Vec::new(), None::<String>);
    for round in 0.. {
        assert!(round < 5, "the batches end");
        let fields = form(after.as_deref(), false);
        let fields: Vec<(&str, &str)> = fields
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let (status, body) = post(&format!("{base}/dead/redrive"), &fields, &origin).await?;
        assert_eq!(status, 200, "{body}");
        let (n, failed, next, done) = report(&body)?;
        redriven += n;
        refused.extend(failed);
        if done {
            break;
        }
        after = next;
    }
    assert_eq!(redriven, 3);
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0].contains("x-mesh-* claims stripped"),
        "{refused:?}"
    );

    // With the override, the untrusted one goes (its claims stripped).
    let fields = form(None, true);
    let fields: Vec<(&str, &str)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let (status, body) = post(&format!("{base}/dead/redrive"), &fields, &origin).await?;
    assert_eq!(status, 200, "{body}");
    let (n, failed, _, done) = report(&body)?;
    assert_eq!((n, failed.len(), done), (1, 0, true), "{body}");
    assert_eq!(
        store
            .count_dead_letters(&DeadLetterQuery::new().redriven(false))
            .await?,
        0
    );

    // Read-only: every batch refused, nothing re-driven.
    let read_only = serve(
        Console::new(store.clone())
            .transport(transport(&url).await?)
            .tokens(tokens())
            .read_only(true),
    )
    .await?;
    let (status, html) = post(
        &format!("{}/dead/redrive", read_only.base),
        &[
            ("queue", QUEUE),
            ("batch", "2"),
            ("again", "yes"),
            ("token", TOKEN),
        ],
        &[("origin", read_only.base.as_str())],
    )
    .await?;
    assert_eq!(status, 403, "{html}");
    assert!(html.contains("read-only"), "{html}");
    eventually(COUNTED, "4 messages counted on the queue", || {
        let api = api.clone();
        let vhost = vhost.name().to_owned();
        async move { (counted(&api, &vhost, QUEUE).await == Some(4)).then_some(()) }
    })
    .await;
    Ok(())
}
