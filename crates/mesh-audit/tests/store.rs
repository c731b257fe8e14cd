//! The store on its own (no broker), on SQLite and PostgreSQL: pattern queries against the
//! core matcher, filters, order and limits, counts, dead letters stored once, and a
//! different event reusing a stored id kept as a conflict.

mod common;

use std::collections::HashSet;

use bytes::Bytes;
use common::{AuditStore, TempStore};
use mesh_audit::{Backend, DeadLetterQuery, EventQuery, EventRecord, Order, Store, StoreOptions};
use mesh_core::{
    codec, topic_matches, DeadLetterNote, DeadReason, Envelope, EventId, Headers, RoutingKey,
    Timestamp, WireMessage,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn at(millis: i64) -> Timestamp {
    let base = time::OffsetDateTime::from_unix_timestamp(1_800_000_000).expect("a valid time");
    Timestamp::from(base + time::Duration::milliseconds(millis))
}

/// The owner word of a key: the only source a `module` or `node` event may come from.
fn owner(key: &str) -> &str {
    key.split('.').nth(1).unwrap_or_default()
}

fn event(key: &str, source: &str, node: &str, time: Timestamp) -> WireMessage {
    codec::encode(&Envelope {
        id: EventId::new(),
        key: RoutingKey::parse(key).expect("a valid key"),
        source: source.to_owned(),
        node: node.to_owned(),
        time,
        causation_id: None,
        schema: None,
        extra_headers: Headers::new(),
        body: Bytes::from_static(br#"{"ok": true}"#),
    })
}

fn ids(events: &[EventRecord]) -> Vec<EventId> {
    events.iter().map(|e| e.id).collect()
}

/// Keys and patterns from a few words, so that many patterns match some keys and `*`, `#`,
/// empty and repeated words, and the LIKE metacharacters `_` and `%` all occur.
fn generated(seed: u64) -> (Vec<String>, Vec<String>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let origins = ["module", "mesh", "node"];
    let names = ["a", "b", "umami", "a_b"];
    let words = ["x", "y", "a", "created", "a_b", "a%"];
    // Keys a `#` pattern matches with zero words for the `#` (`module.a.x.#` and
    // `module.a.x`), which a LIKE on the prefix and a dot would miss.
    let mut keys: Vec<String> = ["module.a.x", "mesh.b.created", "node.umami.a_b"]
        .iter()
        .map(|k| (*k).to_owned())
        .collect();
    for _ in 0..220 {
        let mut key = format!(
            "{}.{}",
            origins[rng.gen_range(0..origins.len())],
            names[rng.gen_range(0..names.len())]
        );
        for _ in 0..rng.gen_range(1..=3) {
            key.push('.');
            key.push_str(words[rng.gen_range(0..words.len())]);
        }
        keys.push(key);
    }
    let pattern_words = [
        "module", "mesh", "node", "a", "b", "umami", "x", "y", "a_b", "aXb", "*", "#", "*", "#",
    ];
    let mut patterns: Vec<String> = [
        "",
        "#",
        "*",
        "#.#",
        "*.*",
        "*.*.*",
        "*.*.*.*",
        "module.#",
        "#.x",
        "#.x.#",
        "module.*.x.#",
        "module.a_b.#",
        "mesh.*.a%",
        "node.#.#.y",
        "module.a.x",
        "module.a.x.#",
        "mesh.b.created.#.#",
        "node.umami.a_b.#",
        "module.a.x.*",
    ]
    .iter()
    .map(|p| (*p).to_owned())
    .collect();
    while patterns.len() < 320 {
        let pattern: Vec<&str> = if rng.gen_bool(0.25) {
            // Anything at all from the words.
            (0..rng.gen_range(1..=5))
                .map(|_| pattern_words[rng.gen_range(0..pattern_words.len())])
                .collect()
        } else {
            // Shaped like the keys, so that many patterns match some of them.
            let first = ["module", "mesh", "node", "*", "#"];
            let second = ["a", "b", "umami", "a_b", "aXb", "*", "#"];
            let rest = ["x", "y", "a", "created", "a_b", "a%", "*", "#"];
            let mut p = vec![
                first[rng.gen_range(0..first.len())],
                second[rng.gen_range(0..second.len())],
            ];
            for _ in 0..rng.gen_range(0..=3) {
                p.push(rest[rng.gen_range(0..rest.len())]);
            }
            p
        };
        patterns.push(pattern.join("."));
    }
    (keys, patterns)
}

async fn patterns_agree_with_the_core_matcher(backend: Backend) -> anyhow::Result<()> {
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    let (keys, patterns) = generated(42);
    let messages: Vec<WireMessage> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| event(key, owner(key), "n1", at(i as i64)))
        .collect();
    assert_eq!(store.record_events(&messages).await?, messages.len() as u64);
    let stored: Vec<(EventId, String)> = messages
        .iter()
        .map(|m| (codec::event_id(m).expect("an id"), m.routing_key.clone()))
        .collect();

    let mut pairs = 0;
    let mut matched_somewhere = 0;
    for pattern in &patterns {
        let expected: Vec<EventId> = stored
            .iter()
            .filter(|(_, key)| topic_matches(pattern, key))
            .map(|(id, _)| *id)
            .collect();
        pairs += stored.len();
        if !expected.is_empty() {
            matched_somewhere += 1;
        }
        let all = store
            .events(
                &EventQuery::new()
                    .pattern(pattern)
                    .limit(10_000)
                    .order(Order::Asc),
            )
            .await?;
        assert_eq!(ids(&all), expected, "pattern `{pattern}`, oldest first");

        // The limit counts matching events only, however many the prefilter let through.
        let newest = store
            .events(
                &EventQuery::new()
                    .pattern(pattern)
                    .limit(3)
                    .order(Order::Desc),
            )
            .await?;
        let expected_newest: Vec<EventId> = expected.iter().rev().take(3).copied().collect();
        assert_eq!(
            ids(&newest),
            expected_newest,
            "pattern `{pattern}`, newest 3"
        );

        let count = store
            .count_events(&EventQuery::new().pattern(pattern))
            .await?;
        assert_eq!(count, expected.len() as u64, "count of `{pattern}`");
    }
    assert!(pairs >= 50_000, "{pairs} key/pattern pairs");
    assert!(
        matched_somewhere >= 100,
        "only {matched_somewhere} patterns match any key: the generator is too sparse"
    );
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn patterns_agree_with_the_core_matcher_sqlite() -> anyhow::Result<()> {
    patterns_agree_with_the_core_matcher(Backend::Sqlite).await
}

#[tokio::test]
async fn patterns_agree_with_the_core_matcher_postgres() -> anyhow::Result<()> {
    patterns_agree_with_the_core_matcher(Backend::Postgres).await
}

/// A pattern whose matches are rare, behind a prefilter that lets many rows through, in a
/// store of more keys than a pattern is resolved to (so each row read is matched): the
/// pages must go on until the limit is filled.
async fn the_limit_is_filled_past_many_prefiltered_rows(backend: Backend) -> anyhow::Result<()> {
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    // 1,001 other keys, older than the rest, which the prefilter `module.a` leaves out.
    let others: Vec<WireMessage> = (0..1_001)
        .map(|n| event(&format!("module.b.k{n}.z"), "b", "n1", at(10_000 + n)))
        .collect();
    store.record_events(&others).await?;
    let mut messages = Vec::new();
    for i in 0..1200 {
        // One key in a hundred ends in `.y`; `module.a.#.y` prefilters on `module.a`.
        let key = if i % 100 == 0 {
            "module.a.x.y"
        } else {
            "module.a.x.z"
        };
        messages.push(event(key, owner(key), "n1", at(i)));
    }
    store.record_events(&messages).await?;
    let found = store
        .events(
            &EventQuery::new()
                .pattern("module.a.#.y")
                .limit(10)
                .order(Order::Asc),
        )
        .await?;
    assert_eq!(found.len(), 10);
    assert!(found.iter().all(|e| e.routing_key == "module.a.x.y"));
    assert_eq!(
        store
            .count_events(&EventQuery::new().pattern("module.a.#.y"))
            .await?,
        12
    );

    // With a read limit, each search reads at most that many rows and says where it stopped;
    // going on from there, in either order, finds each match exactly once.
    for order in [Order::Asc, Order::Desc] {
        let query = EventQuery::new()
            .pattern("module.a.#.y")
            .limit(10)
            .order(order)
            .read_limit(250);
        let first = store.search(&query).await?;
        assert_eq!(first.read, 250, "{order:?}");
        // Oldest first, the first 250 rows hold 3 matches (rows 0, 100, 200); newest first, 2
        // (rows 1100, 1000).
        let matches = if order == Order::Asc { 3 } else { 2 };
        assert_eq!(first.events.len(), matches, "{order:?}");
        let stopped = first
            .stopped_after
            .expect("the read limit stopped the search");
        let expected_stop = if order == Order::Asc {
            &messages[249]
        } else {
            &messages[950]
        };
        assert_eq!(Some(stopped.1), codec::event_id(expected_stop), "{order:?}");

        let mut found = ids(&first.events);
        let mut next = Some(stopped);
        let mut searches = 1;
        while let Some((time, id)) = next {
            let page = store.search(&query.clone().after(time, id)).await?;
            assert!(page.read <= 250, "{order:?}: read {}", page.read);
            found.extend(ids(&page.events));
            next = page.stopped_after;
            searches += 1;
            assert!(searches <= 10, "{order:?}: the search does not end");
        }
        let mut expected: Vec<EventId> = messages
            .iter()
            .filter(|m| m.routing_key == "module.a.x.y")
            .map(|m| codec::event_id(m).expect("an id"))
            .collect();
        if order == Order::Desc {
            expected.reverse();
        }
        assert_eq!(found, expected, "{order:?}");
        assert_eq!(searches, 5, "{order:?}: 1,200 rows, 250 a search");
    }
    store.close().await;
    Ok(())
}

/// A wildcard pattern in a store of few keys is resolved to the keys it matches: a search
/// reads its matching events only, whatever the read limit, and the count agrees.
async fn a_wildcard_reads_only_its_matches(backend: Backend) -> anyhow::Result<()> {
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    let mut messages = Vec::new();
    for i in 0..1200 {
        let key = if i % 100 == 0 {
            "module.a.x.y"
        } else {
            "module.a.x.z"
        };
        messages.push(event(key, owner(key), "n1", at(i)));
    }
    store.record_events(&messages).await?;
    for pattern in ["*.*.x.y", "module.a.#.y", "#.y", "*.nobody.#"] {
        let expected = if pattern == "*.nobody.#" { 0 } else { 12 };
        let found = store
            .search(&EventQuery::new().pattern(pattern).limit(50).read_limit(250))
            .await?;
        assert_eq!(found.events.len(), expected, "{pattern}");
        assert_eq!(
            found.read, expected as u64,
            "{pattern}: only the matches read"
        );
        assert_eq!(found.stopped_after, None, "{pattern}");
        assert!(found.events.iter().all(|e| e.routing_key == "module.a.x.y"));
        assert_eq!(
            store
                .count_events(&EventQuery::new().pattern(pattern))
                .await?,
            expected as u64,
            "{pattern}"
        );
    }
    assert_eq!(
        store.routing_keys(Some("module.#")).await?,
        ["module.a.x.y", "module.a.x.z"]
    );
    // A pattern of several keys is searched key by key and merged: the same events, in the
    // same order, as the search of every event, page after page.
    for order in [Order::Desc, Order::Asc] {
        let (mut merged, mut all) = (Vec::new(), Vec::new());
        let (mut after, mut after_all) = (None, None);
        for _ in 0..3 {
            let mut query = EventQuery::new()
                .pattern("module.a.#")
                .limit(50)
                .order(order);
            let mut every = EventQuery::new().limit(50).order(order);
            if let Some((time, id)) = after {
                query = query.after(time, id);
            }
            if let Some((time, id)) = after_all {
                every = every.after(time, id);
            }
            let page = store.search(&query).await?;
            assert_eq!(page.stopped_after, None);
            let last = page.events.last().expect("a full page");
            after = Some((last.time, last.id));
            merged.extend(ids(&page.events));
            let page = store.events(&every).await?;
            let last = page.last().expect("a full page");
            after_all = Some((last.time, last.id));
            all.extend(ids(&page));
        }
        assert_eq!(merged, all, "{order:?}");
    }
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn a_wildcard_reads_only_its_matches_sqlite() -> anyhow::Result<()> {
    a_wildcard_reads_only_its_matches(Backend::Sqlite).await
}

#[tokio::test]
async fn a_wildcard_reads_only_its_matches_postgres() -> anyhow::Result<()> {
    a_wildcard_reads_only_its_matches(Backend::Postgres).await
}

#[tokio::test]
async fn the_limit_is_filled_past_many_prefiltered_rows_sqlite() -> anyhow::Result<()> {
    the_limit_is_filled_past_many_prefiltered_rows(Backend::Sqlite).await
}

#[tokio::test]
async fn the_limit_is_filled_past_many_prefiltered_rows_postgres() -> anyhow::Result<()> {
    the_limit_is_filled_past_many_prefiltered_rows(Backend::Postgres).await
}

async fn filters_order_and_records(backend: Backend) -> anyhow::Result<()> {
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    let mut messages = vec![
        event("module.shop.order.placed", "shop", "n1", at(0)),
        event("module.shop.order.paid", "shop", "n2", at(10)),
        event("module.billing.invoice.sent", "billing", "n1", at(20)),
        event("node.n1.joined", "n1", "n1", at(30)),
    ];
    // Headers the contract does not define, an x-schema, and a body whose key order and
    // spacing must survive.
    let mut special = Envelope {
        id: EventId::new(),
        key: RoutingKey::parse("mesh.delivery.deployed")?,
        source: "delivery".into(),
        node: "n2".into(),
        time: at(40),
        causation_id: Some("0190A1F2-0000-7000-8000-0000000000AA".into()),
        schema: Some(mesh_core::SchemaVersion(3)),
        extra_headers: Headers::new(),
        body: Bytes::from_static(br#"{"z": 1,  "a": [true, null]}"#),
    };
    special
        .extra_headers
        .insert("x-trace".into(), mesh_core::HeaderValue::UInt(7));
    messages.push(codec::encode(&special));
    assert_eq!(store.record_events(&messages).await?, 5);
    // The same events again: nothing new.
    assert_eq!(store.record_events(&messages).await?, 0);

    let one = store.event(special.id).await?.expect("the event is stored");
    assert_eq!(one.routing_key, "mesh.delivery.deployed");
    assert_eq!(one.body, r#"{"z": 1,  "a": [true, null]}"#);
    assert_eq!(one.schema, Some(3));
    assert_eq!(one.time, at(40));
    assert_eq!(
        one.causation_id.as_deref(),
        Some("0190a1f2-0000-7000-8000-0000000000aa"),
        "a UUID cause is stored in canonical form"
    );
    assert_eq!(one.headers["x-trace"], 7);
    assert_eq!(one.headers["x-source"], "delivery");
    assert!(store.event(EventId::new()).await?.is_none());

    let by_source = store.events(&EventQuery::new().source("shop")).await?;
    assert_eq!(
        ids(&by_source),
        vec![
            codec::event_id(&messages[1]).expect("id"),
            codec::event_id(&messages[0]).expect("id")
        ],
        "newest first by default"
    );
    let by_node = store
        .events(&EventQuery::new().node("n1").order(Order::Asc))
        .await?;
    assert_eq!(by_node.len(), 3);
    let window = store
        .events(
            &EventQuery::new()
                .since(at(10))
                .until(at(30))
                .order(Order::Asc),
        )
        .await?;
    assert_eq!(
        window
            .iter()
            .map(|e| e.routing_key.as_str())
            .collect::<Vec<_>>(),
        vec!["module.shop.order.paid", "module.billing.invoice.sent"],
        "since inclusive, until exclusive"
    );
    let combined = store
        .events(&EventQuery::new().pattern("module.*.order.*").node("n2"))
        .await?;
    assert_eq!(combined.len(), 1);
    assert_eq!(store.events(&EventQuery::new().limit(0)).await?.len(), 0);
    assert_eq!(
        store
            .count_events(&EventQuery::new().pattern("module.#").since(at(10)))
            .await?,
        2
    );
    let by_key = store
        .event_counts_by_key(&EventQuery::new().pattern("module.shop.#"))
        .await?;
    assert_eq!(
        by_key,
        vec![
            ("module.shop.order.paid".to_owned(), 1),
            ("module.shop.order.placed".to_owned(), 1)
        ]
    );
    let counts = store.counts().await?;
    assert_eq!(counts.events, 5);
    assert_eq!(counts.dead_letters, 0);
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn filters_order_and_records_sqlite() -> anyhow::Result<()> {
    filters_order_and_records(Backend::Sqlite).await
}

#[tokio::test]
async fn filters_order_and_records_postgres() -> anyhow::Result<()> {
    filters_order_and_records(Backend::Postgres).await
}

fn dead(message: &WireMessage, reason: DeadReason, queue: &str, time: Timestamp) -> WireMessage {
    let mut copy = message.clone();
    codec::mark_dead(
        &mut copy,
        &DeadLetterNote {
            reason,
            attempts: 5,
            last_error: Some("handler failed: upstream\u{0} down".into()),
            queue: queue.into(),
            time,
        },
    );
    copy
}

async fn dead_letters_are_stored_once(backend: Backend) -> anyhow::Result<()> {
    let temp = TempStore::new(backend).await?;
    let store: Store = temp.open().await?;
    let original = event("module.shop.order.placed", "shop", "n1", at(0));
    let first = dead(
        &original,
        DeadReason::MaxAttempts,
        "n1.billing.events",
        at(100),
    );
    // The same event, re-driven and dead again later: a dead letter of its own.
    let second = dead(
        &original,
        DeadReason::Permanent,
        "n1.billing.events",
        at(200),
    );
    // No id, a body that is not JSON, bytes that are not UTF-8: still stored, as it came.
    let mut raw = WireMessage::new(
        "module.shop.garbage",
        Bytes::from_static(&[0xff, 0x00, b'{']),
    );
    codec::mark_dead(
        &mut raw,
        &DeadLetterNote {
            reason: DeadReason::Undecodable,
            attempts: 1,
            last_error: Some("required field `x-event-id` is missing".into()),
            queue: "n1.mailer.events".into(),
            time: at(300),
        },
    );
    let batch = vec![first.clone(), second.clone(), raw.clone()];
    assert_eq!(store.record_dead_letters(&batch).await?, 3);
    assert_eq!(
        store.record_dead_letters(&batch).await?,
        0,
        "a redelivered dead letter is absorbed"
    );

    let all = store
        .dead_letters(&DeadLetterQuery::new().order(Order::Asc))
        .await?;
    assert_eq!(all.len(), 3);
    let id = codec::event_id(&original).expect("an id");
    assert_eq!(all[0].event_id, Some(id));
    assert_eq!(all[0].reason, Some(DeadReason::MaxAttempts));
    assert_eq!(all[0].attempts, 5);
    assert_eq!(all[0].queue.as_deref(), Some("n1.billing.events"));
    assert_eq!(all[0].dead_at, at(100));
    assert_eq!(
        all[0].last_error.as_deref(),
        Some("handler failed: upstream\u{FFFD} down"),
        "U+0000 is stored as U+FFFD"
    );
    assert_eq!(all[0].routing_key, "module.shop.order.placed");
    assert_eq!(all[2].event_id, None);
    assert_eq!(all[2].body, raw.body, "the body byte for byte");
    assert_eq!(all[2].reason, Some(DeadReason::Undecodable));

    let by_queue = store
        .dead_letters(&DeadLetterQuery::new().queue("n1.billing.events"))
        .await?;
    assert_eq!(by_queue.len(), 2);
    assert_eq!(by_queue[0].dead_at, at(200), "newest first");
    let by_reason = store
        .dead_letters(&DeadLetterQuery::new().reason(DeadReason::Permanent))
        .await?;
    assert_eq!(by_reason.len(), 1);
    let by_event = store
        .count_dead_letters(&DeadLetterQuery::new().event_id(id))
        .await?;
    assert_eq!(by_event, 2);
    let window = store
        .count_dead_letters(&DeadLetterQuery::new().since(at(150)).until(at(300)))
        .await?;
    assert_eq!(window, 1);
    assert_eq!(
        store.dead_letter(all[1].id).await?.map(|d| d.reason),
        Some(Some(DeadReason::Permanent))
    );
    let counts = store.counts().await?;
    assert_eq!((counts.dead_letters, counts.dead_letters_pending), (3, 3));
    let distinct: HashSet<_> = all.iter().map(|d| d.id).collect();
    assert_eq!(distinct.len(), 3);
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn dead_letters_are_stored_once_sqlite() -> anyhow::Result<()> {
    dead_letters_are_stored_once(Backend::Sqlite).await
}

#[tokio::test]
async fn dead_letters_are_stored_once_postgres() -> anyhow::Result<()> {
    dead_letters_are_stored_once(Backend::Postgres).await
}

#[tokio::test]
async fn reopening_a_store_keeps_its_rows() -> anyhow::Result<()> {
    let temp = TempStore::sqlite();
    let store = temp.open().await?;
    store
        .record_events(&[event("module.a.b", "a", "n1", at(0))])
        .await?;
    store.close().await;
    // Migrations run again on open and find nothing to do.
    let again = temp.open().await?;
    assert_eq!(again.counts().await?.events, 1);
    again.close().await;
    Ok(())
}

/// An event with a given id, key, source, node, time and body.
fn event_with(
    id: EventId,
    key: &str,
    source: &str,
    node: &str,
    time: Timestamp,
    body: &'static str,
) -> WireMessage {
    codec::encode(&Envelope {
        id,
        key: RoutingKey::parse(key).expect("a valid key"),
        source: source.to_owned(),
        node: node.to_owned(),
        time,
        causation_id: None,
        schema: None,
        extra_headers: Headers::new(),
        body: Bytes::from_static(body.as_bytes()),
    })
}

/// One id, one event: an event whose id is stored with another body, key or source is kept
/// as a conflict (once per conflicting event); the same event again is a duplicate, from
/// another node and time too. In separate writes and all in one batch alike.
async fn a_reused_id_is_kept_as_a_conflict(backend: Backend) -> anyhow::Result<()> {
    let id = EventId::new();
    let original = event_with(
        id,
        "module.shop.order.placed",
        "shop",
        "n1",
        at(0),
        r#"{"n": 1}"#,
    );
    // A resend: same key, source and body, stamped anew on another node.
    let resend = event_with(
        id,
        "module.shop.order.placed",
        "shop",
        "n2",
        at(5),
        r#"{"n": 1}"#,
    );
    let other_body = event_with(
        id,
        "module.shop.order.placed",
        "shop",
        "n1",
        at(0),
        r#"{"n": 2}"#,
    );
    let other_key = event_with(
        id,
        "module.shop.order.paid",
        "shop",
        "n1",
        at(0),
        r#"{"n": 1}"#,
    );
    let other_source = event_with(
        id,
        "mesh.other.order.placed",
        "other",
        "n1",
        at(0),
        r#"{"n": 1}"#,
    );
    // Only whitespace differs: a different body byte for byte, so a different event.
    let spaced = event_with(
        id,
        "module.shop.order.placed",
        "shop",
        "n1",
        at(0),
        r#"{"n":1}"#,
    );

    // One message per write.
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    assert_eq!(
        store.record_events(std::slice::from_ref(&original)).await?,
        1
    );
    assert_eq!(
        store
            .record_events(std::slice::from_ref(&other_body))
            .await?,
        0
    );
    assert_eq!(
        store.counts().await?.conflicts,
        1,
        "the different body is a conflict"
    );
    assert_eq!(
        store.record_events(std::slice::from_ref(&original)).await?,
        0
    );
    assert_eq!(store.record_events(std::slice::from_ref(&resend)).await?, 0);
    assert_eq!(
        store
            .record_events(std::slice::from_ref(&other_body))
            .await?,
        0
    );
    assert_eq!(
        store.counts().await?.conflicts,
        1,
        "a redelivery, a resend and a redelivered conflict are duplicates"
    );
    for message in [&other_key, &other_source, &spaced] {
        store.record_events(std::slice::from_ref(message)).await?;
    }
    let counts = store.counts().await?;
    assert_eq!((counts.events, counts.conflicts), (1, 4));
    check_conflicts(&store, id).await?;
    store.close().await;

    // Everything in one batch, conflicting events and their redeliveries before and after
    // the original's own resend: the first of the id is the event.
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    let batch = [
        original.clone(),
        other_body.clone(),
        resend.clone(),
        other_key.clone(),
        other_body.clone(),
        original.clone(),
        other_source.clone(),
        spaced.clone(),
        other_key.clone(),
    ];
    assert_eq!(store.record_events(&batch).await?, 1);
    let counts = store.counts().await?;
    assert_eq!((counts.events, counts.conflicts), (1, 4));
    check_conflicts(&store, id).await?;
    // The batch again: nothing new.
    assert_eq!(store.record_events(&batch).await?, 0);
    assert_eq!(store.counts().await?.conflicts, 4);
    store.close().await;

    // Two conflicting events alone in one batch, their id not stored before.
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    assert_eq!(
        store
            .record_events(&[other_body.clone(), original.clone()])
            .await?,
        1
    );
    let counts = store.counts().await?;
    assert_eq!((counts.events, counts.conflicts), (1, 1));
    let stored = store.event(id).await?.expect("stored");
    assert_eq!(
        stored.body, r#"{"n": 2}"#,
        "the first of the batch is the event"
    );
    let conflicts = store.conflicts(&EventQuery::new()).await?;
    assert_eq!(conflicts.len(), 1);
    assert_eq!(conflicts[0].event.body, r#"{"n": 1}"#);
    store.close().await;
    Ok(())
}

/// The store holds `id`'s original event, and its four conflicts in full.
async fn check_conflicts(store: &Store, id: EventId) -> anyhow::Result<()> {
    let stored = store.event(id).await?.expect("the original is stored");
    assert_eq!(
        (
            stored.routing_key.as_str(),
            stored.body.as_str(),
            stored.node.as_str()
        ),
        ("module.shop.order.placed", r#"{"n": 1}"#, "n1")
    );
    let conflicts = store
        .conflicts(&EventQuery::new().order(Order::Asc))
        .await?;
    assert_eq!(conflicts.len(), 4);
    let mut seen: Vec<(String, String, String)> = conflicts
        .iter()
        .map(|c| {
            assert_eq!(c.event.id, id, "a conflict names the stored event's id");
            assert_eq!(c.event.headers["x-event-id"], id.to_string());
            (
                c.event.routing_key.clone(),
                c.event.source.clone(),
                c.event.body.clone(),
            )
        })
        .collect();
    seen.sort();
    let expected =
        |key: &str, source: &str, body: &str| (key.to_owned(), source.to_owned(), body.to_owned());
    assert_eq!(
        seen,
        vec![
            expected("mesh.other.order.placed", "other", r#"{"n": 1}"#),
            expected("module.shop.order.paid", "shop", r#"{"n": 1}"#),
            expected("module.shop.order.placed", "shop", r#"{"n": 2}"#),
            expected("module.shop.order.placed", "shop", r#"{"n":1}"#),
        ]
    );
    let ids: HashSet<_> = conflicts.iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), 4, "each conflict has a key of its own");
    // The query filters apply to the conflicting event.
    let paid = store
        .conflicts(&EventQuery::new().pattern("module.*.order.paid"))
        .await?;
    assert_eq!(paid.len(), 1);
    assert_eq!(paid[0].event.routing_key, "module.shop.order.paid");
    assert_eq!(
        store
            .conflicts(&EventQuery::new().source("other").limit(10))
            .await?
            .len(),
        1
    );
    assert_eq!(store.conflicts(&EventQuery::new().limit(2)).await?.len(), 2);
    Ok(())
}

#[tokio::test]
async fn a_reused_id_is_kept_as_a_conflict_sqlite() -> anyhow::Result<()> {
    a_reused_id_is_kept_as_a_conflict(Backend::Sqlite).await
}

#[tokio::test]
async fn a_reused_id_is_kept_as_a_conflict_postgres() -> anyhow::Result<()> {
    a_reused_id_is_kept_as_a_conflict(Backend::Postgres).await
}

/// A store created before `event_conflicts` existed is upgraded on open: its events stay,
/// and conflicts are kept from then on.
async fn an_older_store_is_upgraded(backend: Backend) -> anyhow::Result<()> {
    use sqlx::Connection;
    let temp = TempStore::new(backend).await?;
    let id = EventId::new();
    let original = event_with(
        id,
        "module.shop.order.placed",
        "shop",
        "n1",
        at(0),
        r#"{"n": 1}"#,
    );
    let other = event_with(
        id,
        "module.shop.order.placed",
        "shop",
        "n1",
        at(0),
        r#"{"n": 2}"#,
    );
    {
        let store = temp.open().await?;
        store.record_events(std::slice::from_ref(&original)).await?;
        store.close().await;
    }
    // Back to the first schema: no conflicts table, no publisher columns, and their
    // migrations not applied.
    let undo = [
        "DROP TABLE event_rollups",
        "DROP TABLE event_conflicts",
        "ALTER TABLE events DROP COLUMN publisher",
        "ALTER TABLE dead_letters DROP COLUMN user_id",
        "ALTER TABLE dead_letters DROP COLUMN untrusted",
        "DELETE FROM _sqlx_migrations WHERE version > 1",
    ];
    match backend {
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(temp.url()).await?;
            for statement in undo {
                sqlx::query(statement).execute(&mut conn).await?;
            }
            conn.close().await?;
        }
        _ => {
            let mut conn = sqlx::SqliteConnection::connect(temp.url()).await?;
            for statement in undo {
                sqlx::query(statement).execute(&mut conn).await?;
            }
            conn.close().await?;
        }
    }
    let store = temp.open().await?;
    assert_eq!(store.counts().await?.events, 1);
    assert_eq!(store.record_events(std::slice::from_ref(&other)).await?, 0);
    assert_eq!(store.counts().await?.conflicts, 1);
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn an_older_store_is_upgraded_sqlite() -> anyhow::Result<()> {
    an_older_store_is_upgraded(Backend::Sqlite).await
}

#[tokio::test]
async fn an_older_store_is_upgraded_postgres() -> anyhow::Result<()> {
    an_older_store_is_upgraded(Backend::Postgres).await
}

/// Each event records its validated user (`user-id`, or `x-mesh-user` on a copy mesh made),
/// a conflicting event its own, and each dead letter its own `user-id`; none when absent.
async fn publishers_are_recorded(backend: Backend) -> anyhow::Result<()> {
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    let mut direct = event("module.shop.order.placed", "shop", "n1", at(0));
    direct.properties.user_id = Some("module.shop".to_owned());
    let anonymous = event("module.shop.order.placed", "shop", "n1", at(1));
    // A retry copy: the original publisher in `x-mesh-user`, the runtime's own `user-id`.
    let mut copy = event("module.shop.order.placed", "shop", "n1", at(2));
    copy.properties.user_id = Some("module.shop".to_owned());
    codec::hand_over_user(&mut copy);
    copy.properties.user_id = Some("guest".to_owned());
    // Text the databases cannot hold as it came.
    let mut odd = event("module.shop.order.placed", "shop", "n1", at(3));
    odd.properties.user_id = Some("a\0b".to_owned());
    assert_eq!(
        store
            .record_events(&[direct.clone(), anonymous.clone(), copy.clone(), odd.clone()])
            .await?,
        4
    );
    let id = |m: &WireMessage| codec::event_id(m).expect("an event id");
    for (message, publisher) in [
        (&direct, Some("module.shop")),
        (&anonymous, None),
        (&copy, Some("module.shop")),
        (&odd, Some("a\u{FFFD}b")),
    ] {
        let stored = store.event(id(message)).await?.expect("stored");
        assert_eq!(stored.publisher.as_deref(), publisher);
    }
    let listed = store.events(&EventQuery::new().order(Order::Asc)).await?;
    let publishers: Vec<Option<&str>> = listed.iter().map(|e| e.publisher.as_deref()).collect();
    assert_eq!(
        publishers,
        [
            Some("module.shop"),
            None,
            Some("module.shop"),
            Some("a\u{FFFD}b")
        ]
    );

    // The same id from someone else, with another body: a conflict with its own publisher.
    let mut reuse = direct.clone();
    reuse.body = Bytes::from_static(br#"{"ok": false}"#);
    reuse.properties.user_id = Some("module.rogue".to_owned());
    assert_eq!(store.record_events(std::slice::from_ref(&reuse)).await?, 0);
    let conflicts = store.conflicts(&EventQuery::new()).await?;
    assert_eq!(conflicts.len(), 1);
    assert_eq!(
        conflicts[0].event.publisher.as_deref(),
        Some("module.rogue")
    );
    assert_eq!(
        store
            .event(id(&direct))
            .await?
            .expect("stored")
            .publisher
            .as_deref(),
        Some("module.shop")
    );

    let mut dead = direct.clone();
    codec::mark_dead(
        &mut dead,
        &DeadLetterNote {
            reason: DeadReason::Permanent,
            attempts: 1,
            last_error: None,
            queue: "n1.shop.events".into(),
            time: at(10),
        },
    );
    dead.properties.user_id = Some("module.billing".to_owned());
    let mut unstamped = anonymous.clone();
    codec::mark_dead(
        &mut unstamped,
        &DeadLetterNote {
            reason: DeadReason::Permanent,
            attempts: 1,
            last_error: None,
            queue: "n1.shop.events".into(),
            time: at(11),
        },
    );
    assert_eq!(store.record_dead_letters(&[dead, unstamped]).await?, 2);
    let dead = store
        .dead_letters(&DeadLetterQuery::new().order(Order::Asc))
        .await?;
    let users: Vec<(Option<&str>, Option<&str>)> = dead
        .iter()
        .map(|d| (d.user_id.as_deref(), d.headers[codec::USER].as_str()))
        .collect();
    assert_eq!(
        users,
        [(Some("module.billing"), Some("module.shop")), (None, None)]
    );
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn publishers_are_recorded_sqlite() -> anyhow::Result<()> {
    publishers_are_recorded(Backend::Sqlite).await
}

#[tokio::test]
async fn publishers_are_recorded_postgres() -> anyhow::Result<()> {
    publishers_are_recorded(Backend::Postgres).await
}

/// A store from before publishers were recorded is upgraded on open: its rows stay, with no
/// publisher, and rows from then on record theirs.
async fn a_store_without_publishers_is_upgraded(backend: Backend) -> anyhow::Result<()> {
    use sqlx::Connection;
    let temp = TempStore::new(backend).await?;
    let mut before = event("module.shop.order.placed", "shop", "n1", at(0));
    before.properties.user_id = Some("module.shop".to_owned());
    let mut after = event("module.shop.order.placed", "shop", "n1", at(1));
    after.properties.user_id = Some("module.shop".to_owned());
    let mut dead = before.clone();
    dead.properties.user_id = Some("module.billing".to_owned());
    {
        let store = temp.open().await?;
        store.record_events(std::slice::from_ref(&before)).await?;
        store
            .record_dead_letters(std::slice::from_ref(&dead))
            .await?;
        store.close().await;
    }
    // Back to the schema of version 2: no publisher columns, their migration not applied.
    let undo = [
        "DROP TABLE event_rollups",
        "ALTER TABLE events DROP COLUMN publisher",
        "ALTER TABLE event_conflicts DROP COLUMN publisher",
        "ALTER TABLE dead_letters DROP COLUMN user_id",
        "ALTER TABLE dead_letters DROP COLUMN untrusted",
        "DELETE FROM _sqlx_migrations WHERE version > 2",
    ];
    match backend {
        Backend::Postgres => {
            let mut conn = sqlx::PgConnection::connect(temp.url()).await?;
            for statement in undo {
                sqlx::query(statement).execute(&mut conn).await?;
            }
            conn.close().await?;
        }
        _ => {
            let mut conn = sqlx::SqliteConnection::connect(temp.url()).await?;
            for statement in undo {
                sqlx::query(statement).execute(&mut conn).await?;
            }
            conn.close().await?;
        }
    }
    let store = temp.open().await?;
    let id = |m: &WireMessage| codec::event_id(m).expect("an event id");
    let old = store.event(id(&before)).await?.expect("kept");
    assert_eq!(old.publisher, None);
    let old_dead = store.dead_letters(&DeadLetterQuery::new()).await?;
    assert_eq!(old_dead.len(), 1);
    assert_eq!(old_dead[0].user_id, None);
    // Stored before provenance was judged: not marked untrusted.
    assert!(!old_dead[0].untrusted);
    assert_eq!(store.record_events(std::slice::from_ref(&after)).await?, 1);
    let new = store.event(id(&after)).await?.expect("stored");
    assert_eq!(new.publisher.as_deref(), Some("module.shop"));
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn a_store_without_publishers_is_upgraded_sqlite() -> anyhow::Result<()> {
    a_store_without_publishers_is_upgraded(Backend::Sqlite).await
}

#[tokio::test]
async fn a_store_without_publishers_is_upgraded_postgres() -> anyhow::Result<()> {
    a_store_without_publishers_is_upgraded(Backend::Postgres).await
}

/// A plain `sqlite://PATH` whose file and directory do not exist: opened with
/// `create_if_missing` it is created; without, the error is typed and says what to do.
#[tokio::test]
async fn a_missing_sqlite_store_is_created_only_when_asked_and_the_error_hints() {
    let dir = std::env::temp_dir().join(format!("mesh-audit-create-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let file = dir.join("a").join("b").join("audit.db");
    let url = format!("sqlite://{}", file.display());

    let refused = Store::open(StoreOptions::url(&url).unwrap())
        .await
        .expect_err("no file, not asked to create it");
    assert_eq!(refused.kind(), &mesh_audit::ErrorKind::Database);
    let hint = refused.hint().expect("a hint").to_owned();
    assert!(hint.contains("there is no store at"), "{hint}");
    assert!(!file.exists());

    let store = Store::open(StoreOptions::url(&url).unwrap().create_if_missing(true))
        .await
        .expect("created with its directories");
    store.close().await;
    assert!(file.is_file());

    // A directory that cannot be made (a file stands in its way).
    let blocked = format!("sqlite://{}", file.join("x").join("audit.db").display());
    let refused = Store::open(StoreOptions::url(&blocked).unwrap().create_if_missing(true))
        .await
        .expect_err("a file is in the way");
    assert!(
        refused
            .hint()
            .is_some_and(|h| h.contains("with write access")),
        "{refused:?}"
    );
    let bad = StoreOptions::url("mysql://db").expect_err("an unknown scheme");
    assert!(
        bad.hint().is_some_and(|h| h.contains("sqlite://PATH")),
        "{bad:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A dead letter's provenance, judged as a logger enforcing identity judges it, is stored and
/// read back: one published by its queue's owner is believed, one naming another module's
/// queue is untrusted, and one recorded unjudged is not marked.
async fn provenance_is_recorded(backend: Backend) -> anyhow::Result<()> {
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    let original = event("module.shop.order.placed", "shop", "n1", at(0));
    let dead_by = |user: &str, body: &'static str| {
        let mut copy = original.clone();
        copy.body = Bytes::from_static(body.as_bytes());
        codec::mark_dead(
            &mut copy,
            &mesh_core::DeadLetterNote {
                reason: mesh_core::DeadReason::Permanent,
                attempts: 1,
                last_error: None,
                queue: "n1.billing.events".into(),
                time: at(1),
            },
        );
        copy.properties.user_id = Some(user.to_owned());
        copy
    };
    let genuine = dead_by("module.billing", r#"{"n": 1}"#);
    let forged = dead_by("module.umami", r#"{"n": 2}"#);
    let unjudged = dead_by("module.umami", r#"{"n": 3}"#);
    store
        .record_dead_letters_judged(&[genuine, forged], Some(""))
        .await?;
    store.record_dead_letters(&[unjudged]).await?;
    let mut seen: Vec<(String, bool)> = store
        .dead_letters(&DeadLetterQuery::new())
        .await?
        .into_iter()
        .map(|d| (String::from_utf8_lossy(&d.body).into_owned(), d.untrusted))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            (r#"{"n": 1}"#.to_owned(), false),
            (r#"{"n": 2}"#.to_owned(), true),
            (r#"{"n": 3}"#.to_owned(), false),
        ]
    );
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn provenance_is_recorded_sqlite() -> anyhow::Result<()> {
    provenance_is_recorded(Backend::Sqlite).await
}

#[tokio::test]
async fn provenance_is_recorded_postgres() -> anyhow::Result<()> {
    provenance_is_recorded(Backend::Postgres).await
}
