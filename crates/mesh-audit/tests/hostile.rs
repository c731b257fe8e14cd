//! Hostile publishers on the shared broker (a vhost of the test's own): a message with a
//! time whose UTC form cannot be stored, one with a wrong-typed `x-event-id`, one with a
//! forged `x-source`, published by a client straight to `mesh.events`. The audit logger keeps
//! running, records each as a dead letter with its reason and the raw headers and body, and
//! stores the good events before and after.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::{emitter, transport, AuditStore, RunningLogger, TempStore};
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

/// Publishes as any client could (the transport's raw publish checks no header) and waits
/// for the broker's confirm.
async fn publish(raw: &dyn Transport, message: WireMessage) -> anyhow::Result<()> {
    let confirm = raw.publish(message, PublishOptions::default()).await?;
    tokio::time::timeout(WAIT, confirm).await??;
    Ok(())
}

/// Waits until the store holds `events` events and `dead` dead letters, then checks it holds
/// exactly as many, and that the events `kept` are among them.
async fn assert_stored(
    store: &mesh_audit::Store,
    events: u64,
    dead: u64,
    kept: &[EventId],
) -> anyhow::Result<()> {
    eventually(
        WAIT,
        &format!("{events} events and {dead} dead letters stored"),
        || {
            let store = store.clone();
            async move {
                let counts = store.counts().await.ok()?;
                (counts.events >= events && counts.dead_letters >= dead).then_some(())
            }
        },
    )
    .await;
    let counts = store.counts().await?;
    assert_eq!((counts.events, counts.dead_letters), (events, dead));
    for id in kept {
        assert!(store.event(*id).await?.is_some(), "event {id} stored");
    }
    Ok(())
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
        publish(raw.as_ref(), message.clone()).await?;
    }
    let after = bus
        .emit_outgoing(Outgoing::json(
            "order.placed",
            &serde_json::json!({ "n": 2 }),
        )?)
        .await?;

    assert_stored(&store, 2, 3, &[before, after]).await?;
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
    publish(raw.as_ref(), forged).await?;

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

/// Every malformed shape the contract knows, one message each, tagged `x-case` (an unknown
/// header, kept): each contract header missing, empty, huge, and of every other AMQP type;
/// times outside what UTC can hold; bad bodies; 10,000 headers.
fn shapes() -> Vec<WireMessage> {
    let wrong_types = [
        HeaderValue::Str(String::new()),
        HeaderValue::Str("x".repeat(100_000)),
        HeaderValue::Bool(true),
        HeaderValue::Int(-1),
        HeaderValue::Int(i64::MAX),
        HeaderValue::UInt(0),
        HeaderValue::Float(1.5),
        HeaderValue::Float(f64::MAX),
        HeaderValue::Bytes(vec![0xff, 0xfe, 0x00]),
        HeaderValue::Timestamp(0),
        HeaderValue::Timestamp(u64::MAX),
        HeaderValue::Array(vec![HeaderValue::Int(1)]),
        HeaderValue::Table(Default::default()),
        HeaderValue::Void,
    ];
    let good = || {
        raw_event(
            "module.shop.order.placed",
            EventId::new().to_string().into(),
            "shop",
            "2026-09-03T12:00:00Z",
        )
    };
    let mut shapes = Vec::new();
    for header in [
        codec::EVENT_ID,
        codec::SOURCE,
        codec::NODE,
        codec::TIME,
        codec::CAUSATION_ID,
        codec::SCHEMA,
        codec::CONTENT_TYPE_HEADER,
    ] {
        let mut missing = good();
        missing.properties.headers.remove(header);
        shapes.push(missing);
        for value in &wrong_types {
            let mut message = good();
            message
                .properties
                .headers
                .insert(header.to_owned(), value.clone());
            if header == codec::CONTENT_TYPE_HEADER {
                // The header is read only when the property is absent.
                message.properties.content_type = None;
            }
            shapes.push(message);
        }
    }
    for time in [
        "9999-12-31T23:59:59-01:00",
        "0000-01-01T00:00:00+01:00",
        "2026-13-01T00:00:00Z",
    ] {
        let mut message = good();
        message
            .properties
            .headers
            .insert(codec::TIME.to_owned(), time.into());
        shapes.push(message);
    }
    for schema in [
        HeaderValue::Int(-3),
        HeaderValue::Int(1 << 40),
        "0".into(),
        "1e3".into(),
    ] {
        let mut message = good();
        message
            .properties
            .headers
            .insert(codec::SCHEMA.to_owned(), schema);
        shapes.push(message);
    }
    let mut no_type = good();
    no_type.properties.content_type = None;
    shapes.push(no_type);
    let mut xml = good();
    xml.properties.content_type = Some("application/xml".into());
    shapes.push(xml);
    for body in [&b"\xff\xfe{}"[..], b"{not json", b""] {
        let mut message = good();
        message.body = Bytes::copy_from_slice(body);
        shapes.push(message);
    }
    let mut many = good();
    for n in 0..10_000 {
        many.properties
            .headers
            .insert(format!("h{n}"), HeaderValue::Void);
    }
    shapes.push(many);
    for (case, message) in shapes.iter_mut().enumerate() {
        message
            .properties
            .headers
            .insert("x-case".to_owned(), HeaderValue::UInt(case as u64));
    }
    shapes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_malformed_shape_is_recorded_and_no_handler_runs_on_one() -> anyhow::Result<()> {
    let vhost = TestVhost::create("audit-shapes").await?;
    let temp = TempStore::sqlite();
    let store = temp.open().await?;
    let url = vhost.url();
    let running = RunningLogger::start(&url, store.clone(), AuditOptions::new().node("n1")).await?;
    let (seen, mut handled) = tokio::sync::mpsc::unbounded_channel::<Option<u64>>();
    let watcher = mesh::Bus::builder()
        .node("n1")
        .module("watcher")
        // Its contract announcement would be one more event in the store, which counts
        // exactly the shop's events here.
        .announce(false)
        .on_raw(["module.shop.#"], move |incoming: mesh::Incoming<Bytes>| {
            let seen = seen.clone();
            async move {
                let case = incoming
                    .meta
                    .headers()
                    .get("x-case")
                    .and_then(HeaderValue::as_u64);
                let _ = seen.send(case);
                Ok(())
            }
        })
        .start(transport(&url).await?)
        .await?;
    let bus = emitter(&url, "n1", "shop").await?;
    let before = bus
        .emit_outgoing(Outgoing::json(
            "order.placed",
            &serde_json::json!({ "n": 1 }),
        )?)
        .await?;

    let raw = transport(&url).await?;
    let mut expected_events = vec![before];
    let mut expected_dead = Vec::new();
    for message in shapes() {
        let case = message.properties.headers["x-case"]
            .as_u64()
            .unwrap_or_default();
        // The contract's own reader says what each shape is; the pipeline must agree.
        match codec::decode(&message) {
            Ok(envelope) => expected_events.push(envelope.id),
            Err(error) => {
                let reason = match error {
                    mesh_core::DecodeError::ForgedSource { .. } => DeadReason::ForgedSource,
                    _ => DeadReason::Undecodable,
                };
                expected_dead.push((case, reason));
            }
        }
        publish(raw.as_ref(), message)
            .await
            .map_err(|e| e.context(format!("case {case}")))?;
    }
    let after = bus
        .emit_outgoing(Outgoing::json(
            "order.placed",
            &serde_json::json!({ "n": 2 }),
        )?)
        .await?;
    expected_events.push(after);

    // Each malformed one is dead-lettered twice: by the logger and by the watcher.
    let (events, dead) = (expected_events.len() as u64, 2 * expected_dead.len() as u64);
    assert_stored(&store, events, dead, &expected_events).await?;
    let letters = store
        .dead_letters(&DeadLetterQuery::new().limit(10_000))
        .await?;
    for (case, reason) in &expected_dead {
        for queue in ["n1.audit-logger.events", "n1.watcher.events"] {
            let letter = letters
                .iter()
                .find(|l| {
                    l.headers.get("x-case") == Some(&serde_json::json!(case))
                        && l.queue.as_deref() == Some(queue)
                })
                .unwrap_or_else(|| panic!("no dead letter for case {case} from {queue}"));
            assert_eq!(letter.reason, Some(*reason), "case {case}");
        }
    }
    assert!(running.logger.is_consuming());

    // The watcher ran on the good events only (and on every one of them).
    let mut cases = Vec::new();
    while cases.len() < expected_events.len() {
        let case = tokio::time::timeout(WAIT, handled.recv())
            .await
            .expect("handled in time")
            .expect("open");
        cases.push(case);
    }
    let dead_cases: Vec<u64> = expected_dead.iter().map(|(case, _)| *case).collect();
    assert!(
        cases
            .iter()
            .flatten()
            .all(|case| !dead_cases.contains(case)),
        "a handler ran on a malformed event: {cases:?}"
    );
    // All but the two emitted, which carry no case.
    assert_eq!(cases.iter().flatten().count(), expected_events.len() - 2);
    watcher.close().await;
    bus.close().await;
    Transport::close(raw.as_ref()).await;
    running.stop().await?;
    Ok(())
}

/// The largest body the private node of [`bodies_at_the_broker_size_limit_are_recorded`]
/// takes (`max_message_size`).
const NODE_MAX_MESSAGE: usize = 1 << 20;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_at_the_broker_size_limit_are_recorded() -> anyhow::Result<()> {
    // A node of its own with a small size limit: bodies at the limit of the shared broker
    // (128 MiB) would weigh on everyone's tests.
    let node = mesh_testkit::PrivateNode::start(
        mesh_testkit::NodeOptions::default().max_message_size(NODE_MAX_MESSAGE as u64),
    )
    .await?;
    let url = node.url();
    let temp = TempStore::sqlite();
    let store = temp.open().await?;
    let running = RunningLogger::start(&url, store.clone(), AuditOptions::new().node("n1")).await?;
    let bus = emitter(&url, "n1", "shop").await?;
    let before = bus
        .emit_outgoing(Outgoing::json(
            "order.placed",
            &serde_json::json!({ "n": 1 }),
        )?)
        .await?;
    let raw = transport(&url).await?;

    // A JSON string of exactly the limit: an event.
    let mut json = vec![b'a'; NODE_MAX_MESSAGE];
    json[0] = b'"';
    json[NODE_MAX_MESSAGE - 1] = b'"';
    let json_id = EventId::new();
    let mut at_limit = raw_event(
        "module.shop.order.placed",
        json_id.to_string().into(),
        "shop",
        "2026-09-03T12:00:00Z",
    );
    at_limit.body = Bytes::from(json);
    // Bytes that are not UTF-8, of exactly the limit: a dead letter of the same size.
    let binary_id = EventId::new();
    let mut binary = raw_event(
        "module.shop.order.placed",
        binary_id.to_string().into(),
        "shop",
        "2026-09-03T12:00:00Z",
    );
    binary.body = Bytes::from(vec![0xff; NODE_MAX_MESSAGE]);
    for message in [at_limit, binary] {
        publish(raw.as_ref(), message).await?;
    }
    // One byte over: refused with a typed error, and nothing else is disturbed.
    let mut over = raw_event(
        "module.shop.order.placed",
        EventId::new().to_string().into(),
        "shop",
        "2026-09-03T12:00:00Z",
    );
    over.body = Bytes::from(vec![b'1'; NODE_MAX_MESSAGE + 1]);
    let refused = match raw.publish(over, PublishOptions::default()).await {
        Ok(confirm) => tokio::time::timeout(WAIT, confirm).await?,
        Err(error) => Err(error),
    };
    assert!(
        matches!(
            refused.as_ref().map_err(|e| e.kind()),
            Err(mesh_core::TransportErrorKind::TooLarge { .. })
        ),
        "{refused:?}"
    );
    let after = bus
        .emit_outgoing(Outgoing::json(
            "order.placed",
            &serde_json::json!({ "n": 2 }),
        )?)
        .await?;

    assert_stored(&store, 3, 1, &[before, after, json_id]).await?;
    let stored = store.event(json_id).await?.expect("the event at the limit");
    assert_eq!(stored.body.len(), NODE_MAX_MESSAGE);
    let letters = store.dead_letters(&DeadLetterQuery::new()).await?;
    assert_eq!(letters[0].event_id, Some(binary_id));
    assert_eq!(letters[0].reason, Some(DeadReason::Undecodable));
    assert_eq!(letters[0].body.len(), NODE_MAX_MESSAGE);
    assert!(running.logger.is_consuming());
    bus.close().await;
    Transport::close(raw.as_ref()).await;
    running.stop().await?;
    Ok(())
}
