//! A foreign client — a plain AMQP publish with the contract's headers, no mesh code — is a
//! first-class emitter; what breaks the contract is dead-lettered after one delivery with
//! the reason, and the next good event still flows.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqprs::channel::BasicPublishArguments;
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{BasicProperties, FieldName, FieldTable, FieldValue, LongStr};
use bytes::Bytes;
use mesh::{Bus, DeadReason, Incoming};
use mesh_amqp::AmqpOptions;
use mesh_core::HeaderValue;
use mesh_testkit::TestVhost;

const WAIT: Duration = Duration::from_secs(30);

fn text(value: &str) -> FieldValue {
    FieldValue::S(LongStr::try_from(value.to_owned()).expect("a short enough string"))
}

fn contract_headers(id: Option<&str>) -> FieldTable {
    let mut headers = FieldTable::new();
    let mut put = |name: &str, value: FieldValue| {
        headers.insert(FieldName::try_from(name).expect("a header name"), value);
    };
    if let Some(id) = id {
        put("x-event-id", text(id));
    }
    put("x-source", text("foreign"));
    put("x-node", text("elsewhere"));
    put("x-time", text("2026-12-01T10:00:00Z"));
    put("x-from-the-future", text("kept, not refused"));
    headers
}

async fn publish(channel: &amqprs::channel::Channel, headers: FieldTable, body: &[u8]) {
    let properties = BasicProperties::default()
        .with_content_type("application/json")
        .with_persistence(true)
        .with_headers(headers)
        .finish();
    channel
        .basic_publish(
            properties,
            body.to_vec(),
            BasicPublishArguments::new("mesh.events", "module.foreign.thing.happened"),
        )
        .await
        .expect("published");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_publish_reaches_the_handler_and_bad_ones_are_dead_lettered() {
    let vhost = TestVhost::create("foreign").await.expect("a test vhost");
    let options: AmqpOptions = vhost.url().parse().expect("url");
    let handled = Arc::new(Mutex::new(Vec::<Incoming<Bytes>>::new()));
    let seen = Arc::clone(&handled);
    let consumer = Bus::builder()
        .node("n1")
        .module("m")
        .on_raw(["module.foreign.#"], move |incoming: Incoming<Bytes>| {
            seen.lock().expect("lock").push(incoming);
            async { Ok(()) }
        })
        .start(Arc::new(
            mesh::amqp::connect(options.clone()).await.expect("connect"),
        ))
        .await
        .expect("consumer starts");
    let watcher = Bus::builder()
        .node("n1")
        .module("watcher")
        .start(Arc::new(
            mesh::amqp::connect(options).await.expect("connect"),
        ))
        .await
        .expect("watcher starts");
    let mut dead = watcher.all_dead_letters().await.expect("dead letters");

    let raw = Connection::open(
        &OpenConnectionArguments::new("127.0.0.1", vhost.broker_addr().port(), "guest", "guest")
            .virtual_host(vhost.name())
            .finish(),
    )
    .await
    .expect("a plain AMQP connection");
    let channel = raw.open_channel(None).await.expect("channel");
    let first = uuid::Uuid::now_v7().to_string();
    let last = uuid::Uuid::now_v7().to_string();
    publish(&channel, contract_headers(Some(&first)), br#"{"n":1}"#).await;
    publish(&channel, contract_headers(None), br#"{"n":2}"#).await;
    publish(
        &channel,
        contract_headers(Some(&uuid::Uuid::now_v7().to_string())),
        b"not json",
    )
    .await;
    publish(&channel, contract_headers(Some(&last)), br#"{"n":4}"#).await;

    let mut problems = Vec::new();
    for _ in 0..2 {
        let letter = tokio::time::timeout(WAIT, dead.next())
            .await
            .expect("a dead letter in time")
            .expect("the stream is open");
        let info = letter.note.clone().expect("annotations");
        assert_eq!(info.reason, DeadReason::Undecodable);
        assert_eq!(info.attempts, 1);
        assert_eq!(info.queue, "n1.m.events");
        problems.push(info.last_error.unwrap_or_default());
        letter.ack().await.expect("ack");
    }
    problems.sort();
    assert!(problems[0].contains("body is not JSON"), "{problems:?}");
    assert!(problems[1].contains("x-event-id"), "{problems:?}");

    mesh_testkit::eventually(WAIT, "both good events handled", || async {
        (handled.lock().expect("lock").len() == 2).then_some(())
    })
    .await;
    consumer.drain().await.expect("drain");
    let handled = std::mem::take(&mut *handled.lock().expect("lock"));
    let ids: Vec<String> = handled.iter().map(|i| i.meta.id().to_string()).collect();
    assert_eq!(ids, vec![first, last]);
    assert_eq!(handled[0].meta.source(), "foreign");
    assert_eq!(handled[0].event, Bytes::from_static(br#"{"n":1}"#));
    assert_eq!(
        handled[0].meta.headers().get("x-from-the-future"),
        Some(&HeaderValue::Str("kept, not refused".into()))
    );
    watcher.drain().await.expect("drain");
    let _ = raw.close().await;
}
