//! Hostile publishers on the shared broker (a vhost of the test's own): a message with a
//! time whose UTC form cannot be stored, one with a wrong-typed `x-event-id`, one with a
//! forged `x-source`, published by a client straight to `mesh.events`. The audit logger keeps
//! running, records each as a dead letter with its reason and the raw headers and body, and
//! stores the good events before and after.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{emitter, transport, RunningLogger, TempStore};
use mesh::Outgoing;
use mesh_audit::{AuditOptions, DeadLetterQuery, EventQuery};
use mesh_core::codec;
use mesh_core::{DeadReason, EventId, HeaderValue, PublishOptions, Transport, WireMessage};
use mesh_testkit::{eventually, TestVhost};

const WAIT: Duration = Duration::from_secs(60);

/// An event as another client would publish it, its headers set by hand.
fn raw_event(key: &str, id: HeaderValue, source: &str, time: &str) -> WireMessage {
    let mut message = WireMessage::new(key, Bytes::from_static(br#"{"raw":true}"#));
    message.properties.content_type = Some(codec::CONTENT_TYPE_JSON.into());
    message.properties.persistent = true;
    let headers = &mut message.properties.headers;
    headers.insert(codec::EVENT_ID.into(), id);
    headers.insert(codec::SOURCE.into(), source.into());
    headers.insert(codec::NODE.into(), "n1".into());
    headers.insert(codec::TIME.into(), time.into());
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_events_are_recorded_as_dead_letters_and_the_logger_keeps_running(
) -> anyhow::Result<()> {
    let vhost = TestVhost::create("audit-hostile").await?;
    let temp = TempStore::sqlite();
    let store = temp.open().await?;
    let url = vhost.url();
    let running = RunningLogger::start(&url, store.clone(), AuditOptions::new().node("n1")).await?;
    let bus = emitter(&url, "n1", "shop").await?;
    let before = bus
        .emit_outgoing(Outgoing::json(
            "order.placed",
            &serde_json::json!({ "n": 1 }),
        )?)
        .await?;

    let raw = transport(&url).await?;
    let late_id = EventId::new().to_string();
    let hostile = [
        (
            raw_event(
                "module.shop.order.placed",
                late_id.clone().into(),
                "shop",
                "9999-12-31T23:59:59-01:00",
            ),
            DeadReason::Undecodable,
            "x-time",
        ),
        (
            raw_event(
                "module.shop.order.placed",
                HeaderValue::Int(42),
                "shop",
                "2026-09-03T12:00:00Z",
            ),
            DeadReason::Undecodable,
            "x-event-id",
        ),
        (
            raw_event(
                "module.shop.order.placed",
                EventId::new().to_string().into(),
                "umami",
                "2026-09-03T12:00:00Z",
            ),
            DeadReason::ForgedSource,
            "umami",
        ),
    ];
    for (message, _, _) in &hostile {
        let confirm = raw
            .publish(message.clone(), PublishOptions::default())
            .await?;
        tokio::time::timeout(WAIT, confirm).await??;
    }
    let after = bus
        .emit_outgoing(Outgoing::json(
            "order.placed",
            &serde_json::json!({ "n": 2 }),
        )?)
        .await?;

    eventually(WAIT, "two events and three dead letters stored", || {
        let store = store.clone();
        async move {
            let counts = store.counts().await.ok()?;
            (counts.events >= 2 && counts.dead_letters >= 3).then_some(())
        }
    })
    .await;
    let counts = store.counts().await?;
    assert_eq!((counts.events, counts.dead_letters), (2, 3));
    for id in [before, after] {
        assert!(store.event(id).await?.is_some(), "event {id} stored");
    }
    assert!(store.events(&EventQuery::new()).await?.len() == 2);

    let letters = store.dead_letters(&DeadLetterQuery::new()).await?;
    for (message, reason, named) in &hostile {
        let letter = letters
            .iter()
            .find(|l| {
                l.headers.get(codec::EVENT_ID)
                    == Some(&match &message.properties.headers[codec::EVENT_ID] {
                        HeaderValue::Int(n) => serde_json::json!(n),
                        other => serde_json::json!(other.as_str().unwrap_or_default()),
                    })
            })
            .unwrap_or_else(|| panic!("no dead letter for {named}: {letters:#?}"));
        assert_eq!(letter.reason, Some(*reason), "{named}");
        let error = letter.last_error.as_deref().unwrap_or_default();
        assert!(error.contains(named), "{named}: {error}");
        // The raw message is kept: headers as sent, body byte for byte.
        assert_eq!(letter.body, message.body, "{named}");
        assert_eq!(
            letter.headers.get(codec::TIME),
            Some(&serde_json::json!(message.properties.headers[codec::TIME]
                .as_str()
                .unwrap_or_default())),
            "{named}"
        );
        assert_eq!(letter.queue.as_deref(), Some("n1.audit-logger.events"));
    }
    let late = letters
        .iter()
        .find(|l| l.event_id.map(|id| id.to_string()) == Some(late_id.clone()));
    assert!(
        late.is_some(),
        "the late event's id is kept on its dead letter"
    );

    // Still running and consuming, and it stops cleanly (no panic in its task).
    assert!(running.logger.is_consuming());
    assert_eq!(running.logger.stats().rejected, 3);
    bus.close().await;
    Transport::close(raw.as_ref()).await;
    running.stop().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trail_records_the_real_key_whatever_a_publisher_writes_in_mesh_headers(
) -> anyhow::Result<()> {
    let vhost = TestVhost::create("audit-forged-key").await?;
    let temp = TempStore::sqlite();
    let store = temp.open().await?;
    let url = vhost.url();
    let running = RunningLogger::start(&url, store.clone(), AuditOptions::new().node("n1")).await?;
    let raw = transport(&url).await?;
    let id = EventId::new();
    let mut forged = raw_event(
        "module.shop.order.placed",
        id.to_string().into(),
        "shop",
        "2026-09-03T12:00:00Z",
    );
    let headers = &mut forged.properties.headers;
    headers.insert(
        codec::ROUTING_KEY.into(),
        "module.billing.invoice.paid".into(),
    );
    headers.insert(codec::ATTEMPTS.into(), HeaderValue::UInt(7));
    let confirm = raw.publish(forged, PublishOptions::default()).await?;
    tokio::time::timeout(WAIT, confirm).await??;

    let stored = eventually(WAIT, "the event stored", || {
        let store = store.clone();
        async move { store.event(id).await.ok().flatten() }
    })
    .await;
    assert_eq!(stored.routing_key, "module.shop.order.placed");
    let names: Vec<&String> = stored
        .headers
        .as_object()
        .map(|h| h.keys().collect())
        .unwrap_or_default();
    assert!(
        names.iter().all(|n| !n.starts_with("x-mesh-")),
        "forged headers stored: {names:?}"
    );
    Transport::close(raw.as_ref()).await;
    running.stop().await?;
    Ok(())
}
