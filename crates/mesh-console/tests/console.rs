//! The console over a seeded SQLite store, served on an ephemeral port: every page, the
//! search and its pagination, bad input, and the guards on every action.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{get, linked, post, seeded, serve, unique, KEYS, TOKEN};
use mesh_audit::DeadLetterQuery;
use mesh_console::{Console, Tokens};
use mesh_core::topic_matches;

fn tokens() -> Tokens {
    Tokens::single("alice", TOKEN).expect("a valid token")
}

#[tokio::test]
async fn every_page_shows_the_seeded_data() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let served = serve(Console::new(seed.store.clone()).tokens(tokens())).await?;
    let base = &served.base;

    let (status, html) = get(&format!("{base}/")).await?;
    assert_eq!(status, 200, "{html}");
    for expected in [
        "module.billing",
        "module.shop",
        "mailer",
        "n1.billing.events",
        "<svg",
    ] {
        assert!(html.contains(expected), "overview lacks {expected}: {html}");
    }
    assert!(
        html.contains("<td class=\"num\">64</td>"),
        "64 events: {html}"
    );
    // The per-minute chart (from the rollups) holds the 64 events of the last hour.
    let chart = html
        .split("<svg class=\"chart minutes\"")
        .nth(1)
        .and_then(|rest| rest.split("</svg>").next())
        .expect("the per-minute chart");
    let per_minute: u64 = chart
        .split("<title>")
        .skip(1)
        .filter_map(|t| t.split(": ").nth(1)?.split(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(per_minute, 64, "{chart}");

    let (status, html) = get(&format!("{base}/events")).await?;
    assert_eq!(status, 200);
    assert_eq!(
        linked(&html, "event", "/events/").len(),
        50,
        "the first page"
    );

    // The middle of the chain: its cause and its effect are nodes of its graph.
    let [order, invoice, mail] = seed.chain;
    let (status, html) = get(&format!("{base}/events/{invoice}")).await?;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("module.billing.invoice.paid"));
    for node in [order, invoice, mail] {
        assert!(
            html.contains(&format!("<a href=\"/events/{node}\"><rect")),
            "node {node} in the tree: {html}"
        );
    }

    // Stored values are rendered escaped.
    let (status, html) = get(&format!("{base}/events/{}", seed.hostile)).await?;
    assert_eq!(status, 200);
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{html}"
    );
    assert!(!html.contains("<script>alert(1)"), "{html}");

    let (status, html) = get(&format!("{base}/dead")).await?;
    assert_eq!(status, 200);
    assert!(
        html.contains("n1.billing.events") && html.contains("permanent"),
        "{html}"
    );
    assert!(
        html.contains("n1.mailer.events") && html.contains("max-attempts"),
        "{html}"
    );
    assert!(
        html.contains("re-drive…") && html.contains("purge…"),
        "{html}"
    );

    let (status, html) = get(&format!(
        "{base}/dead?queue=n1.billing.events&reason=permanent"
    ))
    .await?;
    assert_eq!(status, 200);
    let listed = linked(&html, "dead", "/dead/");
    assert_eq!(listed.len(), 3, "{html}");

    let (status, html) = get(&format!("{base}/dead/{}", listed[0])).await?;
    assert_eq!(status, 200);
    assert!(html.contains("n1.billing.events"), "{html}");
    assert!(
        html.contains("&lt;b&gt;upstream&lt;/b&gt;"),
        "escaped error: {html}"
    );
    assert!(!html.contains(TOKEN));

    // The confirmations say how many and to where, and never hold the token.
    let (status, html) = get(&format!(
        "{base}/dead/redrive?queue=n1.billing.events&reason=permanent"
    ))
    .await?;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Re-drive 3 dead letter(s)?"), "{html}");
    assert!(
        html.contains("<td>n1.billing.events</td><td class=\"num\">3</td>"),
        "{html}"
    );
    assert!(!html.contains(TOKEN));
    let (status, html) = get(&format!("{base}/dead/purge?queue=n1.mailer.events")).await?;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Purge 2 dead letter(s)?"), "{html}");
    Ok(())
}

/// Every page of a search, following its "next" links.
async fn walk(base: &str, query: &str) -> anyhow::Result<Vec<String>> {
    let mut url = format!("{base}/events?{query}");
    let mut ids = Vec::new();
    for _ in 0..100 {
        let (status, html) = common::get(&url).await?;
        assert_eq!(status, 200, "{url}: {html}");
        ids.extend(linked(&html, "event", "/events/"));
        // The link on (`a.next`, or `a.next.auto` where the page's script would follow it).
        match html.find("rel=\"next\"") {
            Some(at) => {
                let rest = &html[at..];
                let start = rest.find("href=\"").expect("a link") + 6;
                let end = start + rest[start..].find('"').expect("its end");
                url = format!("{base}{}", rest[start..end].replace("&amp;", "&"));
            }
            None => return Ok(ids),
        }
    }
    anyhow::bail!("more than 100 pages")
}

#[tokio::test]
async fn a_search_returns_exactly_the_matching_events_page_by_page() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let served = serve(Console::new(seed.store.clone())).await?;
    // Pages that stop reading after 5 stored events each, however few of them match, and
    // link to the search going on from there.
    let reading_5 = serve(
        Console::new(seed.store.clone())
            .search_reads(5)
            .search_budget(Duration::ZERO),
    )
    .await?;
    let (status, html) =
        common::get(&format!("{}/events?key=%2A.%2A.nobody.%23", reading_5.base)).await?;
    assert_eq!(status, 200, "{html}");
    // The store holds few keys, so the pattern is resolved to the stored keys it matches
    // (none here) and answered at once, without a walk of stored events or a link on (the
    // walk of a store of more keys is `mesh-audit`'s store test and `search.rs`'s).
    assert!(html.contains("No event matches."), "{html}");
    assert!(!html.contains("Search on"), "{html}");
    for (pattern, base) in [
        "#",
        "module.shop.#",
        "module.*.order.*",
        "*.*.invoice.paid",
        "*.*.nobody.#",
        "module.nobody.#",
    ]
    .into_iter()
    .flat_map(|pattern| [(pattern, &served.base), (pattern, &reading_5.base)])
    {
        let expected: HashSet<String> = seed
            .events
            .iter()
            .filter(|(_, key, _)| topic_matches(pattern, key))
            .map(|(id, _, _)| id.to_string())
            .collect();
        for order in ["asc", "desc"] {
            let query = form_urlencoded::Serializer::new(String::new())
                .append_pair("key", pattern)
                .append_pair("order", order)
                .append_pair("limit", "7")
                .finish();
            let ids = walk(base, &query).await?;
            assert!(unique(&ids), "{pattern} {order} {base}: an event repeated");
            assert_eq!(
                ids.iter().cloned().collect::<HashSet<_>>(),
                expected,
                "{pattern} {order} {base}"
            );
        }
    }
    // By source, and by id.
    let shop: HashSet<String> = seed
        .events
        .iter()
        .filter(|(_, _, source)| source == "shop")
        .map(|(id, _, _)| id.to_string())
        .collect();
    let ids = walk(&served.base, "source=shop&limit=5").await?;
    assert_eq!(ids.iter().cloned().collect::<HashSet<_>>(), shop);
    let one = seed.chain[1].to_string();
    assert_eq!(walk(&served.base, &format!("id={one}")).await?, vec![one]);
    assert_eq!(KEYS.len(), 4);
    Ok(())
}

#[tokio::test]
async fn bad_input_is_a_clear_400_or_404() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let served = serve(Console::new(seed.store.clone()).tokens(tokens())).await?;
    let base = &served.base;
    let unknown = "0190a1f2-0000-7000-8000-0000000000ff";
    for (path, status, message) in [
        ("/events?key=module..x", 400, "is not a topic pattern"),
        ("/events?key=module.bil*", 400, "is not a topic pattern"),
        (
            "/events?since=yesterday",
            400,
            "is neither an RFC 3339 time",
        ),
        (
            "/events?until=2026-13-01T00:00:00Z",
            400,
            "is neither an RFC 3339 time",
        ),
        ("/events?id=42", 400, "is not an event id"),
        ("/events?order=sideways", 400, "neither `asc` nor `desc`"),
        ("/events?limit=0", 400, "limit"),
        (
            &format!("/events?after={unknown}"),
            400,
            "the cursor names no stored event",
        ),
        ("/events/not-an-id", 400, "is not an event id"),
        (&format!("/events/{unknown}"), 404, "no event"),
        ("/dead/not-an-id", 400, "is not a dead-letter id"),
        (&format!("/dead/{unknown}"), 404, "no dead letter"),
        ("/dead?reason=bored", 400, "is not one of"),
        ("/dead/redrive", 400, "say which dead letters"),
        ("/dead/redrive?id=nope", 400, "is not a dead-letter id"),
        (
            &format!("/dead/redrive?id={unknown}"),
            404,
            "no dead letter",
        ),
        ("/dead/purge?all=yes", 400, "say which dead letters"),
        ("/dead?queue=n1.billing.events&limit=0", 400, "limit"),
        (
            &format!("/dead?queue=n1.billing.events&after={unknown}"),
            400,
            "the cursor names no recorded dead letter",
        ),
        ("/dead?event=nope", 400, "is not an event id"),
        ("/map?since=yesterday", 400, "is neither an RFC 3339 time"),
        (
            "/map?until=2026-13-01T00:00:00Z",
            400,
            "is neither an RFC 3339 time",
        ),
        ("/modules/not-a-queue", 404, "is not a module queue"),
        ("/modules/serve.x.events", 404, "is not a module queue"),
        ("/replay", 400, "queue: required"),
        (
            "/replay?queue=n1.billing.events",
            400,
            "key: a pattern is required",
        ),
        (
            "/replay?queue=n1.billing.events&key=module.shop.%23",
            400,
            "since: a start time is required",
        ),
        (
            "/replay?queue=mesh.x.events&key=a&since=2026-01-01T00:00:00Z",
            400,
            "is not a module queue",
        ),
        (
            "/replay?queue=n1.billing.events&key=a..b&since=2026-01-01T00:00:00Z",
            400,
            "is not a topic pattern",
        ),
        (
            "/replay?queue=n1.billing.events&key=a&since=2026-01-01T00:00:00Z&rate=0",
            400,
            "rate: `0` is not 1 to 100000",
        ),
        (
            "/replay?queue=n1.billing.events&key=a&since=2026-01-01T00:00:00Z&rate=1e9",
            400,
            "rate:",
        ),
        ("/live?key=module..x", 400, "is not a topic pattern"),
        ("/nowhere", 404, "no such page"),
    ] {
        let (got, html) = get(&format!("{base}{path}")).await?;
        assert_eq!(got, status, "{path}: {html}");
        assert!(html.contains(message), "{path}: {html}");
        assert!(html.starts_with("<!DOCTYPE html>"), "{path}: an HTML page");
    }
    Ok(())
}

#[tokio::test]
async fn actions_without_the_token_or_from_another_origin_are_refused() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let served = serve(Console::new(seed.store.clone()).tokens(tokens())).await?;
    let base = &served.base;
    let own = base.as_str();
    let bearer = format!("Bearer {TOKEN}");
    let group = [("queue", "n1.billing.events"), ("reason", "permanent")];
    let with_token = [group[0], group[1], ("token", TOKEN)];
    let with_wrong = [group[0], group[1], ("token", "not-the-token-at-all")];
    for action in ["redrive", "purge"] {
        let url = format!("{base}/dead/{action}");
        for (form, headers, why) in [
            (&group[..], vec![("origin", own)], "no token"),
            (&with_wrong[..], vec![("origin", own)], "a wrong token"),
            (
                &with_token[..],
                vec![("origin", "http://evil.example")],
                "a foreign origin",
            ),
            (
                &with_token[..],
                vec![("referer", "http://evil.example/dead")],
                "a foreign referer",
            ),
            (&with_token[..], vec![], "neither origin nor referer"),
            (
                &group[..],
                vec![("authorization", bearer.as_str())],
                "bearer, no origin",
            ),
        ] {
            let (status, html) = post(&url, form, &headers).await?;
            assert_eq!(status, 403, "{action} with {why}: {html}");
            assert!(!html.contains(TOKEN), "{html}");
        }
    }
    let counts = seed.store.counts().await?;
    assert_eq!(counts.dead_letters, 5, "nothing purged");
    assert_eq!(counts.dead_letters_pending, 5, "nothing re-driven");

    // With both, a purge deletes the group's records (a bearer token and a referer this time).
    let (status, html) = post(
        &format!("{base}/dead/purge"),
        &group,
        &[
            ("authorization", bearer.as_str()),
            ("referer", &format!("{own}/dead")),
        ],
    )
    .await?;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("<span class=\"purged\">3</span>"), "{html}");
    let left = seed
        .store
        .count_dead_letters(&DeadLetterQuery::new().queue("n1.billing.events"))
        .await?;
    assert_eq!(left, 0);
    assert_eq!(seed.store.counts().await?.dead_letters, 2);
    Ok(())
}

#[tokio::test]
async fn a_read_only_console_offers_and_accepts_no_action() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let served = serve(
        Console::new(seed.store.clone())
            .tokens(tokens())
            .read_only(true),
    )
    .await?;
    let base = &served.base;
    let (status, html) = get(&format!("{base}/dead")).await?;
    assert_eq!(status, 200);
    assert!(
        !html.contains("re-drive…") && !html.contains("purge…"),
        "{html}"
    );
    let (status, html) = get(&format!("{base}/dead/redrive?queue=n1.billing.events")).await?;
    assert_eq!(status, 403, "{html}");
    assert!(html.contains("read-only"));
    let (status, html) = get(&format!(
        "{base}/replay?queue=n1.billing.events&key=%23&since=2026-01-01T00:00:00Z"
    ))
    .await?;
    assert_eq!(status, 403, "{html}");
    assert!(html.contains("read-only"));
    let (status, html) = get(&format!("{base}/modules/n1.billing.events")).await?;
    assert_eq!(status, 200, "{html}");
    assert!(!html.contains("Replay…"), "no replay offered: {html}");
    for action in ["/dead/redrive", "/dead/purge", "/replay"] {
        let (status, html) = post(
            &format!("{base}{action}"),
            &[
                ("queue", "n1.mailer.events"),
                ("key", "#"),
                ("since", "2026-01-01T00:00:00Z"),
                ("token", TOKEN),
            ],
            &[("origin", base.as_str())],
        )
        .await?;
        assert_eq!(status, 403, "{action}: {html}");
        assert!(html.contains("read-only"), "{html}");
    }
    assert_eq!(seed.store.counts().await?.dead_letters_pending, 5);

    // A page of another site resolving to the console's address (DNS rebinding) reads
    // nothing: the Host must be one of the console's own.
    let (status, html) = {
        let response = common::client()
            .get(format!("{base}/events"))
            .header("host", format!("rebound.example:{}", served.addr.port()))
            .send()
            .await?;
        (response.status().as_u16(), response.text().await?)
    };
    assert_eq!(status, 421, "{html}");
    assert!(!html.contains("module.shop"), "{html}");

    // Without any token, actions are not offered either.
    let plain = serve(Console::new(seed.store.clone())).await?;
    let (status, html) = get(&format!("{}/dead/purge?queue=n1.mailer.events", plain.base)).await?;
    assert_eq!(status, 403, "{html}");
    assert!(html.contains("no token is configured"), "{html}");
    Ok(())
}

#[tokio::test]
async fn a_selection_of_dead_letters_is_purged_and_nothing_else() -> anyhow::Result<()> {
    let seed = seeded().await?;
    let served = serve(Console::new(seed.store.clone()).tokens(tokens())).await?;
    let base = &served.base;
    let billing = seed
        .store
        .dead_letters(&DeadLetterQuery::new().queue("n1.billing.events"))
        .await?;
    assert_eq!(billing.len(), 3);
    let chosen: Vec<String> = billing[..2].iter().map(|d| d.id.to_string()).collect();

    // The group's list offers the selection's purge.
    let (status, html) = get(&format!("{base}/dead?queue=n1.billing.events")).await?;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains(r#"formaction="/dead/purge""#), "{html}");

    let query: String = chosen
        .iter()
        .map(|id| format!("id={id}"))
        .collect::<Vec<_>>()
        .join("&");
    let (status, html) = get(&format!("{base}/dead/purge?{query}")).await?;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Purge 2 dead letter(s)?"), "{html}");
    assert!(html.contains("the 2 selected dead letter(s)"), "{html}");

    let mut form: Vec<(&str, &str)> = chosen.iter().map(|id| ("id", id.as_str())).collect();
    let (status, html) = post(
        &format!("{base}/dead/purge"),
        &form,
        &[("origin", base.as_str())],
    )
    .await?;
    assert_eq!(status, 403, "no token: {html}");
    assert_eq!(seed.store.counts().await?.dead_letters, 5, "nothing purged");

    form.push(("token", TOKEN));
    let (status, html) = post(
        &format!("{base}/dead/purge"),
        &form,
        &[("origin", base.as_str())],
    )
    .await?;
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains(r#"Purged: <span class="purged">2</span>"#),
        "{html}"
    );
    let left = seed.store.dead_letters(&DeadLetterQuery::new()).await?;
    assert_eq!(left.len(), 3, "the other three stay");
    assert!(left.iter().all(|d| !chosen.contains(&d.id.to_string())));

    // Ids no longer (or never) recorded: a clear 404, nothing purged.
    let (status, html) = get(&format!("{base}/dead/purge?{query}")).await?;
    assert_eq!(status, 404, "{html}");
    assert!(html.contains("none of the selected dead letters is recorded"));
    Ok(())
}

/// A scheduled event's page says so, with its due time (`x-due`), and that it was delivered;
/// an event emitted at once says nothing of the kind.
#[tokio::test]
async fn a_scheduled_events_page_shows_its_due_time() -> anyhow::Result<()> {
    use mesh_audit::{Store, StoreOptions};
    use mesh_core::codec;
    use mesh_core::HeaderValue;
    use mesh_testkit::TempStore;

    let temp = TempStore::sqlite();
    let store = Store::open(temp.url().parse::<StoreOptions>()?).await?;
    let due = common::at(30);
    let (scheduled, mut message) =
        common::event("module.shop.reminder.due", "shop", due, None, b"{}");
    message.properties.headers.insert(
        codec::SCHEDULED_DUE.to_owned(),
        HeaderValue::Str(due.text()),
    );
    let (plain, other) = common::event("module.shop.order.placed", "shop", due, None, b"{}");
    store.record_events(&[message, other]).await?;
    let served = serve(Console::new(store).tokens(tokens())).await?;

    let (status, html) = get(&format!("{}/events/{scheduled}", served.base)).await?;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("Scheduled"), "{html}");
    // The due time, written as every time of the console is (the exact one in `datetime`).
    assert!(
        html.contains(&format!("for <time datetime=\"{}\">", due.text())),
        "{html}"
    );
    assert!(html.contains("delivered"), "{html}");
    let (status, html) = get(&format!("{}/events/{plain}", served.base)).await?;
    assert_eq!(status, 200, "{html}");
    assert!(!html.contains("Scheduled"), "{html}");
    drop(served);
    drop(temp);
    Ok(())
}
