//! Request/reply through `mesh.rpc`.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::*;
use mesh_core::codec;
use mesh_core::transport::{PublishOptions, ServeSpec, Target, Transport, TransportErrorKind};
use mesh_core::{ToolKey, WireMessage};
use mesh_memory::MemoryBroker;
use tokio::time::Instant;

fn tool() -> ToolKey {
    ToolKey::parse("umami.sites.create").expect("a valid tool key")
}

fn serve_spec(prefetch: u16) -> ServeSpec {
    ServeSpec {
        tool: tool(),
        prefetch,
    }
}

fn request(body: &str) -> WireMessage {
    WireMessage::new("ignored", format!("\"{body}\"").into_bytes())
}

fn reply(body: &str) -> WireMessage {
    codec::encode_reply(&Ok(Bytes::from(format!("\"{body}\""))))
}

#[tokio::test(start_paused = true)]
async fn a_call_reaches_a_server_and_gets_its_reply() {
    let broker = MemoryBroker::new();
    let (server, client) = (broker.transport(), broker.transport());
    let mut requests = server.serve(serve_spec(4)).await.unwrap();
    assert_eq!(requests.queue(), "serve.umami.sites.create");
    assert_eq!(
        broker.bindings("serve.umami.sites.create"),
        vec!["umami.sites.create"]
    );
    assert_eq!(
        broker.exchange_bindings("mesh.rpc"),
        vec![(
            "serve.umami.sites.create".into(),
            "umami.sites.create".into()
        )]
    );

    let serving = tokio::spawn(async move {
        let request = next(&mut requests).await;
        assert_eq!(request.message.routing_key, "umami.sites.create");
        assert_eq!(body(&request), "ping");
        let properties = request.message.properties.clone();
        assert!(properties
            .reply_to
            .as_deref()
            .is_some_and(|q| q.starts_with("amq.gen-")));
        assert!(properties.correlation_id.is_some());
        assert_eq!(properties.expiration, Some(Duration::from_secs(5)));
        request.reply(reply("pong")).await.unwrap();
        properties
    });
    let answer = client
        .call(&tool(), request("ping"), Duration::from_secs(5))
        .await
        .unwrap();
    let request = serving.await.unwrap();
    assert_eq!(answer.properties.correlation_id, request.correlation_id);
    assert_eq!(codec::decode_reply(&answer).unwrap().unwrap(), "\"pong\"");
    assert_eq!(client.late_replies(), 0);
    assert_eq!(broker.unacked("serve.umami.sites.create"), Some(0));
    assert_eq!(broker.queue_depth("serve.umami.sites.create"), Some(0));
    // The client's reply queue exists while it is connected.
    let reply_to = request.reply_to.unwrap();
    assert!(broker.queue_names().contains(&reply_to));
    client.close().await;
    assert!(!broker.queue_names().contains(&reply_to));
}

#[tokio::test(start_paused = true)]
async fn servers_of_one_tool_compete() {
    let broker = MemoryBroker::new();
    let client = broker.transport();
    let mut one = broker.transport().serve(serve_spec(1)).await.unwrap();
    let mut two = broker.transport().serve(serve_spec(1)).await.unwrap();
    let calls = tokio::spawn(async move {
        let first = client.call(&tool(), request("a"), Duration::from_secs(5));
        let second = client.call(&tool(), request("b"), Duration::from_secs(5));
        let (first, second) = tokio::join!(first, second);
        (first.unwrap(), second.unwrap())
    });
    let a = next(&mut one).await;
    let b = next(&mut two).await;
    let answer = format!("{}{}", body(&a), body(&b));
    assert!(answer == "ab" || answer == "ba", "{answer}");
    a.reply(reply("from one")).await.unwrap();
    b.reply(reply("from two")).await.unwrap();
    let (first, second) = calls.await.unwrap();
    assert_ne!(first.body, second.body);
}

#[tokio::test(start_paused = true)]
async fn a_call_nobody_serves_fails_at_once_with_no_server() {
    let broker = MemoryBroker::new();
    let client = broker.transport();
    let started = Instant::now();
    let error = client
        .call(&tool(), request("ping"), Duration::from_secs(30))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::NoServer);
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert!(broker.queue_names().is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_call_times_out_and_its_late_reply_is_counted_and_dropped() {
    let broker = MemoryBroker::new();
    let (server, client) = (broker.transport(), broker.transport());
    let mut requests = server.serve(serve_spec(4)).await.unwrap();
    let started = Instant::now();
    let error = client
        .call(&tool(), request("slow"), Duration::from_secs(2))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::Timeout);
    assert_eq!(started.elapsed(), Duration::from_secs(2));

    // The request was taken before the deadline; its reply comes too late.
    let taken = next(&mut requests).await;
    taken.reply(reply("too late")).await.unwrap();
    assert_eq!(client.late_replies(), 1);
    assert_eq!(broker.unacked("serve.umami.sites.create"), Some(0));
}

#[tokio::test(start_paused = true)]
async fn a_duplicate_reply_is_counted_and_dropped() {
    let broker = MemoryBroker::new();
    let (server, client) = (broker.transport(), broker.transport());
    let mut requests = server.serve(serve_spec(4)).await.unwrap();
    let replier = server.clone();
    let serving = tokio::spawn(async move {
        let request = next(&mut requests).await;
        let properties = request.message.properties.clone();
        request.reply(reply("first")).await.unwrap();
        // A second reply with the same correlation id, straight to the reply queue.
        let mut duplicate = reply("second");
        duplicate.properties.correlation_id = properties.correlation_id.clone();
        let options = PublishOptions {
            target: Target::Queue(properties.reply_to.unwrap()),
            ..PublishOptions::default()
        };
        replier
            .publish(duplicate, options)
            .await
            .unwrap()
            .await
            .unwrap();
    });
    let answer = client
        .call(&tool(), request("ping"), Duration::from_secs(5))
        .await
        .unwrap();
    serving.await.unwrap();
    assert_eq!(codec::decode_reply(&answer).unwrap().unwrap(), "\"first\"");
    assert_eq!(client.late_replies(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_request_nobody_took_before_its_timeout_is_never_delivered() {
    let broker = MemoryBroker::new();
    let (server, client) = (broker.transport(), broker.transport());
    // One request at a time: the second waits in the queue behind the first.
    let mut requests = server.serve(serve_spec(1)).await.unwrap();
    let first_client = client.clone();
    let first = tokio::spawn(async move {
        first_client
            .call(&tool(), request("first"), Duration::from_secs(60))
            .await
    });
    let busy = next(&mut requests).await;
    assert_eq!(body(&busy), "first");

    let error = client
        .call(&tool(), request("second"), Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::Timeout);
    assert_eq!(broker.queue_depth("serve.umami.sites.create"), Some(0));

    // The server frees up: the expired request is dropped, never executed.
    busy.reply(reply("done")).await.unwrap();
    first.await.unwrap().unwrap();
    nothing_more(&mut requests).await;
    assert_eq!(client.late_replies(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_serve_queue_without_servers_keeps_requests_until_they_expire() {
    let broker = MemoryBroker::new();
    let (server, client) = (broker.transport(), broker.transport());
    drop(server.serve(serve_spec(1)).await.unwrap());
    // The durable serve queue is still bound: not `NoServer`, but nobody answers.
    let error = client
        .call(&tool(), request("ping"), Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::Timeout);
    let mut requests = server.serve(serve_spec(1)).await.unwrap();
    nothing_more(&mut requests).await;
}

#[tokio::test(start_paused = true)]
async fn a_call_dropped_midway_counts_its_reply_as_late() {
    let broker = MemoryBroker::new();
    let (server, client) = (broker.transport(), broker.transport());
    let mut requests = server.serve(serve_spec(1)).await.unwrap();
    let call = client.call(&tool(), request("ping"), Duration::from_secs(5));
    // Sends the request, then gives up on it.
    assert!(tokio::time::timeout(Duration::from_millis(1), call)
        .await
        .is_err());
    let taken = next(&mut requests).await;
    taken.reply(reply("nobody listens")).await.unwrap();
    assert_eq!(client.late_replies(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_serve_queue_nobody_consumes_fails_the_call_at_the_no_server_check() {
    let broker = MemoryBroker::new();
    let (server, client) = (broker.transport(), broker.transport());
    drop(server.serve(serve_spec(1)).await.unwrap());
    let started = Instant::now();
    let error = client
        .call(&tool(), request("ping"), Duration::from_secs(60))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::NoServer, "{error}");
    assert_eq!(started.elapsed(), mesh_core::NO_SERVER_CHECK);
    assert!(
        error
            .to_string()
            .contains("no server is consuming `serve.umami.sites.create`"),
        "{error}"
    );

    // A server that is there but slow is waited for, to the end of the timeout.
    let mut requests = server.serve(serve_spec(1)).await.unwrap();
    let started = Instant::now();
    let error = client
        .call(&tool(), request("slow"), Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::Timeout, "{error}");
    assert_eq!(started.elapsed(), Duration::from_secs(5));
    drop(next(&mut requests).await);
}
