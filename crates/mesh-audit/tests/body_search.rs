//! Body search (decision 0030), on SQLite and PostgreSQL: an event is found by a value only in
//! its body, as a phrase of whole words whatever the case; any text typed is searched
//! literally, never an error (property); retention keeps the index in step; and a store of the
//! version before is indexed by the migration keeping every row.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use bytes::Bytes;
use common::{AuditStore, TempStore};
use mesh_audit::{Backend, ErrorKind, EventQuery, Retention, Store, MAX_BODY_SEARCH};
use mesh_core::{codec, Envelope, EventId, Headers, RoutingKey, Timestamp, WireMessage};
use proptest::prelude::*;
use sqlx::Connection;

const DAY: Duration = Duration::from_secs(24 * 3600);

fn event(key: &str, body: &str) -> WireMessage {
    codec::encode(&Envelope {
        id: EventId::new(),
        key: RoutingKey::parse(key).expect("a valid key"),
        source: "shop".to_owned(),
        node: "n1".to_owned(),
        time: Timestamp::now(),
        causation_id: None,
        schema: None,
        extra_headers: Headers::new(),
        body: Bytes::from(body.to_owned()),
    })
}

fn id(message: &WireMessage) -> EventId {
    codec::event_id(message).expect("an event id")
}

/// The ids of the events whose body holds `text`, newest first.
async fn found(store: &Store, query: EventQuery) -> anyhow::Result<BTreeSet<EventId>> {
    Ok(store
        .events(&query.limit(1_000))
        .await?
        .into_iter()
        .map(|e| e.id)
        .collect())
}

async fn body(store: &Store, text: &str) -> anyhow::Result<BTreeSet<EventId>> {
    found(store, EventQuery::new().body(text)).await
}

/// Runs statements on the store's database, outside the store.
async fn execute(temp: &TempStore, statements: &[&str]) -> anyhow::Result<()> {
    if temp.url().starts_with("postgres") {
        let mut conn = sqlx::PgConnection::connect(temp.url()).await?;
        for statement in statements {
            sqlx::raw_sql(statement).execute(&mut conn).await?;
        }
        conn.close().await?;
    } else {
        let mut conn = sqlx::SqliteConnection::connect(temp.url()).await?;
        for statement in statements {
            sqlx::raw_sql(statement).execute(&mut conn).await?;
        }
        conn.close().await?;
    }
    Ok(())
}

/// The first column of a query's rows, as text.
async fn texts(temp: &TempStore, query: &str) -> anyhow::Result<BTreeSet<String>> {
    Ok(if temp.url().starts_with("postgres") {
        let mut conn = sqlx::PgConnection::connect(temp.url()).await?;
        let rows: Vec<String> = sqlx::query_scalar(query).fetch_all(&mut conn).await?;
        conn.close().await?;
        rows.into_iter().collect()
    } else {
        let mut conn = sqlx::SqliteConnection::connect(temp.url()).await?;
        let rows: Vec<String> = sqlx::query_scalar(query).fetch_all(&mut conn).await?;
        conn.close().await?;
        rows.into_iter().collect()
    })
}

async fn finds_an_event_by_a_value_only_in_its_body(backend: Backend) -> anyhow::Result<()> {
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    let wanted = event(
        "module.shop.order.placed",
        r#"{"order":"ord-7f3a9c","customer":{"email":"ada@example.com"},"lines":[{"sku":"Kettle Blue","qty":2}]}"#,
    );
    let others: Vec<WireMessage> = (0..200)
        .map(|n| {
            event(
                "module.shop.order.placed",
                &format!(r#"{{"order":"ord-{n:06x}","lines":[{{"sku":"Kettle Red","qty":1}}]}}"#),
            )
        })
        .collect();
    store.record_events(&others).await?;
    store.record_events(std::slice::from_ref(&wanted)).await?;
    let only = BTreeSet::from([id(&wanted)]);

    // A value, whatever the case and the characters around it.
    assert_eq!(body(&store, "ord-7f3a9c").await?, only);
    assert_eq!(body(&store, "ORD-7F3A9C").await?, only);
    assert_eq!(body(&store, "\"ord-7f3a9c\"").await?, only);
    assert_eq!(body(&store, "ada@example.com").await?, only);
    // Words in order, next to each other: a phrase.
    assert_eq!(body(&store, "kettle blue").await?, only);
    assert!(body(&store, "blue kettle").await?.is_empty());
    assert_eq!(body(&store, "kettle").await?.len(), 201);
    // Whole words, not substrings; nothing in the key, source or node is searched.
    assert!(body(&store, "7f3a").await?.is_empty());
    assert!(body(&store, "placed").await?.is_empty());
    assert!(body(&store, "shop").await?.is_empty());
    // With other filters, and counted.
    let query = EventQuery::new()
        .body("ord-7f3a9c")
        .pattern("module.*.order.#");
    assert_eq!(found(&store, query.clone()).await?, only);
    assert_eq!(store.count_events(&query).await?, 1);
    assert_eq!(
        store
            .count_events(&EventQuery::new().body("kettle red"))
            .await?,
        200
    );
    assert!(
        found(&store, EventQuery::new().body("ord-7f3a9c").source("mail"))
            .await?
            .is_empty()
    );
    // Text with no word matches nothing; too long a text is refused as a query, typed.
    assert!(body(&store, "").await?.is_empty());
    assert!(body(&store, "\"*()").await?.is_empty());
    let error = store
        .events(&EventQuery::new().body("x".repeat(MAX_BODY_SEARCH + 1)))
        .await
        .expect_err("too long");
    assert_eq!(*error.kind(), ErrorKind::InvalidOptions);
    // The conflicts have no body index: refused, not ignored.
    let error = store
        .conflicts(&EventQuery::new().body("kettle"))
        .await
        .expect_err("refused");
    assert_eq!(*error.kind(), ErrorKind::InvalidOptions);
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn finds_an_event_by_a_value_only_in_its_body_sqlite() -> anyhow::Result<()> {
    finds_an_event_by_a_value_only_in_its_body(Backend::Sqlite).await
}

#[tokio::test]
async fn finds_an_event_by_a_value_only_in_its_body_postgres() -> anyhow::Result<()> {
    finds_an_event_by_a_value_only_in_its_body(Backend::Postgres).await
}

/// Texts rich in each query language's syntax: quotes, operators, column filters, prefixes,
/// parentheses, NUL, backslashes.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        proptest::string::string_regex(
            r#"(["'*^:(){}\[\]\\+\-!&|<>@.,;=~%_\x00 \t\n]|AND|OR|NOT|NEAR|NEAR/2|body|ord|7f3a9c|é){0,40}"#
        )
        .expect("a valid regex"),
    ]
}

/// Characters no backend's parser takes for part of a word.
fn around() -> impl Strategy<Value = String> {
    proptest::string::string_regex(r#"[ "'()*^:{}]{0,4}"#).expect("a valid regex")
}

fn property(backend: Backend, cases: u32) {
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let (temp, store, wanted) = runtime
        .block_on(async {
            let temp = TempStore::new(backend).await?;
            let store = temp.open().await?;
            let wanted = event(
                "module.shop.order.placed",
                r#"{"order":"ord 7f3a9c","note":"a \"quoted\" AND (parenthesised) NEAR text"}"#,
            );
            store.record_events(std::slice::from_ref(&wanted)).await?;
            anyhow::Ok((temp, store, wanted))
        })
        .expect("a store");
    let only = BTreeSet::from([id(&wanted)]);
    proptest!(ProptestConfig::with_cases(cases), |(text in hostile(), before in around(), after in around())| {
        runtime.block_on(async {
            // Any text is a search, never an error.
            let events = store.events(&EventQuery::new().body(text.clone())).await;
            prop_assert!(events.is_ok(), "{text:?}: {events:?}");
            let count = store.count_events(&EventQuery::new().body(text.clone())).await;
            prop_assert!(count.is_ok(), "{text:?}: {count:?}");
            // The value, wrapped in syntax, is still found.
            let wrapped = format!("{before}ord 7f3a9c{after}");
            let hits = body(&store, &wrapped).await.map_err(|e| TestCaseError::fail(format!("{e:#}")))?;
            prop_assert_eq!(&hits, &only, "{:?}", wrapped);
            Ok(())
        })?;
    });
    runtime.block_on(store.close());
    drop(temp);
}

#[test]
fn hostile_body_search_text_never_errors_sqlite() {
    property(Backend::Sqlite, 256);
}

#[test]
fn hostile_body_search_text_never_errors_postgres() {
    property(Backend::Postgres, 256);
}

/// Retention removes an event's words with it: a later event never inherits them (SQLite
/// reuses a deleted row's rowid, the index's key).
async fn retention_keeps_the_index_in_step(backend: Backend) -> anyhow::Result<()> {
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    let now = Timestamp::now();
    let old = event("module.shop.order.placed", r#"{"word":"vanished"}"#);
    let arrived = now.checked_sub(DAY * 10).expect("a time");
    store
        .record_events_arrived(std::slice::from_ref(&old), arrived)
        .await?;
    assert_eq!(body(&store, "vanished").await?, BTreeSet::from([id(&old)]));
    let prune = Retention::new(DAY * 3).prune_at(now)?;
    store.prune(&prune).await?;
    assert!(body(&store, "vanished").await?.is_empty());
    let new = event("module.shop.order.placed", r#"{"word":"arrived"}"#);
    store.record_events(std::slice::from_ref(&new)).await?;
    assert!(body(&store, "vanished").await?.is_empty());
    assert_eq!(body(&store, "arrived").await?, BTreeSet::from([id(&new)]));
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn retention_keeps_the_index_in_step_sqlite() -> anyhow::Result<()> {
    retention_keeps_the_index_in_step(Backend::Sqlite).await
}

#[tokio::test]
async fn retention_keeps_the_index_in_step_postgres() -> anyhow::Result<()> {
    retention_keeps_the_index_in_step(Backend::Postgres).await
}

/// A store of version 6 (no body index) with 2,000 events: the migration keeps every row and
/// indexes each, and the store keeps indexing the new ones.
async fn the_migration_keeps_every_row(backend: Backend) -> anyhow::Result<()> {
    let temp = TempStore::new(backend).await?;
    let messages: Vec<WireMessage> = (0..2_000)
        .map(|n| {
            event(
                "module.shop.order.placed",
                &format!(r#"{{"order":"o{n}"}}"#),
            )
        })
        .collect();
    {
        let store = temp.open().await?;
        store.record_events(&messages[..1_000]).await?;
        store.close().await;
    }
    let undo: &[&str] = match backend {
        Backend::Postgres => &[
            "DROP INDEX events_by_body",
            "DELETE FROM _sqlx_migrations WHERE version > 6",
        ],
        _ => &[
            "DROP TRIGGER events_body_insert",
            "DROP TRIGGER events_body_delete",
            "DROP TRIGGER events_body_update",
            "DROP TABLE events_body",
            "DELETE FROM _sqlx_migrations WHERE version > 6",
        ],
    };
    execute(&temp, undo).await?;
    // Written at version 6: no index to keep.
    write_at_version_six(&temp, &messages[1_000..]).await?;
    let rows = "SELECT CAST(id AS TEXT) || ' ' || CAST(body AS TEXT) FROM events";
    let before = texts(&temp, rows).await?;
    assert_eq!(before.len(), 2_000);

    let store = temp.open().await?;
    assert_eq!(texts(&temp, rows).await?, before, "every row kept");
    for n in [0, 999, 1_000, 1_999] {
        assert_eq!(
            body(&store, &format!("o{n}")).await?,
            BTreeSet::from([id(&messages[n])]),
            "o{n}"
        );
    }
    let new = event("module.shop.order.placed", r#"{"order":"o2000"}"#);
    store.record_events(std::slice::from_ref(&new)).await?;
    assert_eq!(body(&store, "o2000").await?, BTreeSet::from([id(&new)]));
    store.close().await;
    Ok(())
}

/// Inserts events as a store of version 6 did (no body index), outside the store.
async fn write_at_version_six(temp: &TempStore, messages: &[WireMessage]) -> anyhow::Result<()> {
    let mut statements = Vec::new();
    for message in messages {
        let body = std::str::from_utf8(&message.body)?.replace('\'', "''");
        statements.push(if temp.url().starts_with("postgres") {
            format!(
                "WITH i AS (INSERT INTO event_ids (id, received_at) VALUES ('{id}', now()) RETURNING id) \
                 INSERT INTO events (id, routing_key, source, node, time, received_at, headers, body) \
                 SELECT id, 'module.shop.order.placed', 'shop', 'n1', now(), now(), '{{}}', '{body}' FROM i",
                id = id(message)
            )
        } else {
            format!(
                "INSERT INTO events (id, routing_key, source, node, time, received_at, headers, body) \
                 VALUES ('{id}', 'module.shop.order.placed', 'shop', 'n1', \
                 '2026-01-01T00:00:00.000000Z', '2026-01-01T00:00:00.000000Z', '{{}}', '{body}')",
                id = id(message)
            )
        });
    }
    let statements: Vec<&str> = statements.iter().map(String::as_str).collect();
    execute(temp, &statements).await
}

#[tokio::test]
async fn the_migration_keeps_every_row_sqlite() -> anyhow::Result<()> {
    the_migration_keeps_every_row(Backend::Sqlite).await
}

#[tokio::test]
async fn the_migration_keeps_every_row_postgres() -> anyhow::Result<()> {
    the_migration_keeps_every_row(Backend::Postgres).await
}
