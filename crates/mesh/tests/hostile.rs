//! Hostile input through the SDK, on the in-memory broker: a forged source or a message that
//! breaks the contract is dead-lettered with its reason and never reaches a handler; the
//! headers the runtime sets cannot be set by an emitter.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mesh::raw::codec::{self, DeadReason};
use mesh::raw::{PublishOptions, Transport, WireMessage};
use mesh::{Bus, ErrorKind, Incoming, MemoryBroker, Outgoing};
use tokio::sync::mpsc;

/// Every wait of this file.
const WAIT: Duration = Duration::from_secs(10);

/// A message as another client would publish it: the contract's headers, set by hand.
fn raw_event(key: &str, source: &str, time: &str) -> (WireMessage, String) {
    let id = mesh::raw::EventId::new().to_string();
    let mut message = WireMessage::new(key, Bytes::from_static(br#"{"n":1}"#));
    message.properties.content_type = Some(codec::CONTENT_TYPE_JSON.into());
    let headers = &mut message.properties.headers;
    headers.insert(codec::EVENT_ID.into(), id.clone().into());
    headers.insert(codec::SOURCE.into(), source.into());
    headers.insert(codec::NODE.into(), "anchor".into());
    headers.insert(codec::TIME.into(), time.into());
    (message, id)
}

async fn publish(transport: &dyn Transport, message: WireMessage) {
    let confirm = tokio::time::timeout(WAIT, transport.publish(message, PublishOptions::default()))
        .await
        .expect("publish in time")
        .expect("published");
    tokio::time::timeout(WAIT, confirm)
        .await
        .expect("confirm in time")
        .expect("confirmed");
}

#[tokio::test]
async fn a_forged_or_undecodable_event_is_dead_lettered_and_never_handled() {
    let broker = MemoryBroker::new();
    let (seen, mut handled) = mpsc::unbounded_channel::<String>();
    let watcher = Bus::builder()
        .node("anchor")
        .module("watcher")
        .on_raw(["module.billing.#"], move |e: Incoming<Bytes>| {
            let seen = seen.clone();
            async move {
                let _ = seen.send(e.meta.id().to_string());
                Ok(())
            }
        })
        .start(Arc::new(broker.transport()))
        .await
        .expect("watcher starts");
    let mut dead = watcher.all_dead_letters().await.expect("dead letters");
    let raw = broker.transport();

    // `umami` claims to have emitted billing's event.
    let (forged, forged_id) = raw_event(
        "module.billing.invoice.paid",
        "umami",
        "2026-09-03T12:00:00Z",
    );
    publish(&raw, forged).await;
    // A time that parses as RFC 3339 but is the year 10000 in UTC.
    let (late, late_id) = raw_event(
        "module.billing.invoice.paid",
        "billing",
        "9999-12-31T23:59:59-01:00",
    );
    publish(&raw, late).await;
    // And a good one after them.
    let (good, good_id) = raw_event(
        "module.billing.invoice.paid",
        "billing",
        "2026-09-03T12:00:01Z",
    );
    publish(&raw, good).await;

    let mut reasons = Vec::new();
    for _ in 0..2 {
        let letter = tokio::time::timeout(WAIT, dead.next())
            .await
            .expect("a dead letter in time")
            .expect("the dead-letter stream is open");
        let annotations = letter.note.clone().expect("annotated");
        reasons.push((
            letter.event_id.expect("an id").to_string(),
            annotations.reason,
            annotations.last_error.unwrap_or_default(),
        ));
        letter.ack().await.expect("acked");
    }
    reasons.sort_by(|a, b| a.0.cmp(&b.0));
    let mut expected = vec![
        (forged_id.clone(), DeadReason::ForgedSource),
        (late_id.clone(), DeadReason::Undecodable),
    ];
    expected.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        reasons
            .iter()
            .map(|(id, reason, _)| (id.clone(), *reason))
            .collect::<Vec<_>>(),
        expected
    );
    for (id, _, error) in &reasons {
        if *id == late_id {
            assert!(error.contains("x-time"), "{error}");
        } else {
            assert!(error.contains("umami"), "{error}");
        }
    }
    let first = tokio::time::timeout(WAIT, handled.recv())
        .await
        .expect("the good event is handled in time")
        .expect("the handler channel is open");
    assert_eq!(first, good_id);
    watcher.drain().await.expect("drained");
    watcher.close().await;
    // Nothing else reached the handler.
    assert!(handled.try_recv().is_err());
    assert_eq!(broker.queue_depth("anchor.watcher.events"), Some(0));
}

#[tokio::test]
async fn headers_the_runtime_sets_cannot_be_set_by_an_emitter() {
    let broker = MemoryBroker::new();
    let bus = Bus::builder()
        .node("anchor")
        .module("umami")
        .start(Arc::new(broker.transport()))
        .await
        .expect("bus starts");
    for name in [
        "x-mesh-routing-key",
        "x-mesh-attempts",
        "x-mesh-dead-queue",
        "x-event-id",
        "x-source",
        "X-Time",
        "content-type",
        "traceparent",
        "x-death",
        "X-Due",
    ] {
        let outgoing = Outgoing::json("site.created", &serde_json::json!({}))
            .expect("an event")
            .header("x-team", "web")
            .header(name, "module.billing.invoice.paid");
        let error = bus
            .emit_outgoing(outgoing)
            .await
            .expect_err("a reserved header is refused");
        assert_eq!(
            error.kind(),
            &ErrorKind::ReservedHeader {
                name: name.to_owned()
            },
            "{name}"
        );
    }
    // A header of the emitter's own is fine.
    let outgoing = Outgoing::json("site.created", &serde_json::json!({}))
        .expect("an event")
        .header("x-team", "web");
    bus.emit_outgoing(outgoing).await.expect("emitted");
    bus.close().await;
}

#[tokio::test]
async fn mesh_headers_from_a_publisher_are_not_believed() {
    let broker = MemoryBroker::new();
    let (seen, mut handled) = mpsc::unbounded_channel::<(String, u32)>();
    let bus = Bus::builder()
        .node("anchor")
        .module("watcher")
        .on_raw(["module.billing.#"], move |e: Incoming<Bytes>| {
            let seen = seen.clone();
            async move {
                let _ = seen.send((e.meta.key().to_string(), e.meta.attempt()));
                Ok(())
            }
        })
        .start(Arc::new(broker.transport()))
        .await
        .expect("watcher starts");
    let (mut forged, _) = raw_event(
        "module.billing.invoice.paid",
        "billing",
        "2026-09-03T12:00:00Z",
    );
    let headers = &mut forged.properties.headers;
    headers.insert(codec::ATTEMPTS.into(), mesh::raw::HeaderValue::UInt(99));
    headers.insert(
        codec::ROUTING_KEY.into(),
        "module.umami.site.created".into(),
    );
    publish(&broker.transport(), forged).await;
    let (key, attempt) = tokio::time::timeout(WAIT, handled.recv())
        .await
        .expect("handled in time")
        .expect("open");
    assert_eq!(key, "module.billing.invoice.paid");
    // The first call, whatever the publisher wrote.
    assert_eq!(attempt, 1);
    bus.close().await;
}
