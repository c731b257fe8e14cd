//! Request/reply: a round trip, `NoServer` for a tool nobody serves, `Timeout` when nobody
//! consumes within a short timeout and `NoServer` at the no-server check within a long one,
//! late replies counted, and pending calls failing when the connection goes (and
//! calls working again once it is back).

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use mesh_core::{codec, ServeSpec, ToolKey, TransportErrorKind, WireMessage};
use mesh_testkit::eventually;

fn tool(key: &str) -> ToolKey {
    ToolKey::parse(key).unwrap()
}

fn request(body: &str) -> WireMessage {
    let mut message = WireMessage::new("", body.to_owned());
    message.properties.content_type = Some("application/json".to_owned());
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_and_serve_round_trip() {
    let vhost = common::vhost("rpc").await;
    let server = common::connect(&vhost, "rpc-server").await;
    let client = common::connect(&vhost, "rpc-client").await;
    let key = tool("umami.sites.create");
    let mut requests = server
        .serve(ServeSpec {
            tool: key.clone(),
            prefetch: 4,
        })
        .await
        .unwrap();
    assert_eq!(requests.queue(), "serve.umami.sites.create");
    let serving = tokio::spawn(async move {
        for _ in 0..3 {
            let delivery = common::next(&mut requests).await;
            assert_eq!(delivery.message.routing_key, "umami.sites.create");
            assert!(delivery.message.properties.expiration.is_some());
            let answer = format!(
                "{{\"echo\":{}}}",
                String::from_utf8_lossy(&delivery.message.body)
            );
            let reply = codec::encode_reply(&Ok(Bytes::from(answer)));
            delivery.reply(reply).await.unwrap();
        }
    });
    for i in 0..3 {
        let reply = client
            .call(&key, request(&i.to_string()), common::WAIT)
            .await
            .unwrap();
        let body = codec::decode_reply(&reply).unwrap().unwrap();
        assert_eq!(body, format!("{{\"echo\":{i}}}").as_bytes());
    }
    serving.await.unwrap();
    assert_eq!(client.stats().late_replies, 0);
    client.close().await;
    server.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_nobody_serves_fails_at_once_with_no_server() {
    let vhost = common::vhost("no-server").await;
    let client = common::connect(&vhost, "no-server").await;
    let started = Instant::now();
    let error = client
        .call(
            &tool("nobody.serves.this"),
            request("{}"),
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::NoServer, "{error}");
    // The broker returns the unroutable request at once (a round trip after the reply
    // queue's declare, up to a second on a loaded machine): 3× that, far below the timeout.
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    client.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serve_queue_without_consumers_fails_fast_with_no_server() {
    let vhost = common::vhost("rpc-unserved").await;
    let server = common::connect(&vhost, "rpc-unserved-server").await;
    let client = common::connect(&vhost, "rpc-unserved-client").await;
    let key = tool("idle.tool");
    // Declared, then nobody consumes.
    drop(
        server
            .serve(ServeSpec {
                tool: key.clone(),
                prefetch: 1,
            })
            .await
            .unwrap(),
    );
    let started = Instant::now();
    let error = client
        .call(&key, request("{}"), Duration::from_secs(60))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(error.kind(), &TransportErrorKind::NoServer, "{error}");
    assert!(took < Duration::from_secs(3), "took {took:?}");
    assert!(
        error
            .to_string()
            .contains("no server is consuming `serve.idle.tool`"),
        "{error}"
    );
    // The passive declare's answer was no fault: no channel close counted.
    assert_eq!(client.stats().channel_closes, 0, "{:?}", client.stats());

    // A server that is attached but slow is waited for past the check.
    let mut requests = server
        .serve(ServeSpec {
            tool: key.clone(),
            prefetch: 1,
        })
        .await
        .unwrap();
    let call = {
        let client = client.clone();
        let key = key.clone();
        tokio::spawn(async move {
            client
                .call(&key, request("{\"slow\":true}"), Duration::from_secs(60))
                .await
        })
    };
    // The first request (left from the failed call) and then this one.
    let first = common::next(&mut requests).await;
    first.ack().await.unwrap();
    let slow = common::next(&mut requests).await;
    // Answered after the check has run (the check cannot see it gone).
    tokio::time::sleep(mesh_core::NO_SERVER_CHECK * 2).await;
    slow.reply(codec::encode_reply(&Ok(Bytes::from_static(b"1"))))
        .await
        .unwrap();
    let reply = call.await.unwrap().unwrap();
    assert_eq!(codec::decode_reply(&reply).unwrap().unwrap(), "1");
    client.close().await;
    server.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serve_queue_without_consumers_times_out_and_late_replies_are_counted() {
    let vhost = common::vhost("rpc-timeout").await;
    let server = common::connect(&vhost, "rpc-timeout-server").await;
    let client = common::connect(&vhost, "rpc-timeout-client").await;
    let key = tool("slow.tool");
    // Declared, then nobody consumes.
    drop(
        server
            .serve(ServeSpec {
                tool: key.clone(),
                prefetch: 1,
            })
            .await
            .unwrap(),
    );
    let started = Instant::now();
    let error = client
        .call(&key, request("{}"), Duration::from_secs(1))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert_eq!(error.kind(), &TransportErrorKind::Timeout, "{error}");
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_secs(3),
        "took {took:?}"
    );

    // A server that answers after the caller gave up: the reply is dropped and counted.
    let mut requests = server
        .serve(ServeSpec {
            tool: key.clone(),
            prefetch: 1,
        })
        .await
        .unwrap();
    let (taken_tx, taken) = tokio::sync::oneshot::channel();
    let (gave_up_tx, gave_up) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(async move {
        let delivery = common::next(&mut requests).await;
        taken_tx.send(()).unwrap();
        gave_up.await.unwrap();
        delivery
            .reply(codec::encode_reply(&Ok(Bytes::from_static(b"{}"))))
            .await
            .unwrap();
    });
    let call = {
        let client = client.clone();
        let key = key.clone();
        tokio::spawn(async move {
            client
                .call(&key, request("{}"), Duration::from_secs(3))
                .await
        })
    };
    taken.await.unwrap();
    let error = call.await.unwrap().unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::Timeout);
    gave_up_tx.send(()).unwrap();
    serving.await.unwrap();
    eventually(common::WAIT, "the late reply to be counted", || async {
        (client.stats().late_replies == 1).then_some(())
    })
    .await;
    client.close().await;
    server.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_consume_connection_fails_pending_calls_and_later_calls_work() {
    let vhost = common::vhost("rpc-lost").await;
    let server = common::connect(&vhost, "rpc-lost-server").await;
    let client = common::connect(&vhost, "rpc-lost-client").await;
    let events = common::Recorder::start(&client);
    let key = tool("lost.tool");
    // A server that takes the request and never answers: the call waits for its reply
    // (a server is consuming, so the no-server check lets it wait).
    let mut idle = server
        .serve(ServeSpec {
            tool: key.clone(),
            prefetch: 1,
        })
        .await
        .unwrap();
    let call = {
        let client = client.clone();
        let key = key.clone();
        tokio::spawn(async move {
            client
                .call(&key, request("{}"), Duration::from_secs(60))
                .await
        })
    };
    // Once the server holds the request, the call is waiting for its reply.
    let held = common::next(&mut idle).await;
    let closed = vhost
        .close_connections(Some("rpc-lost-client.consume"), "test")
        .await
        .unwrap();
    assert_eq!(closed, 1);
    let started = Instant::now();
    let error = tokio::time::timeout(common::WAIT, call)
        .await
        .expect("the call to fail promptly")
        .unwrap()
        .unwrap_err();
    let failed_after = started.elapsed();
    assert_eq!(error.kind(), &TransportErrorKind::ConnectionLost, "{error}");
    // `close_connections` returns once the broker closed it: the call fails right away.
    assert!(failed_after < Duration::from_secs(3), "{failed_after:?}");
    common::measured(
        "rpc: call failed after the consume connection closed",
        failed_after,
    );
    assert_eq!(
        events.count(|e| matches!(
            e,
            mesh_amqp::Lifecycle::Disconnected {
                link: mesh_amqp::Link::Consume,
                ..
            }
        )),
        1
    );

    // The idle server goes, releasing the request to the next one.
    drop(held);
    drop(idle);

    // Once reconnected, calls work again (on a new reply queue).
    let mut requests = server
        .serve(ServeSpec {
            tool: key.clone(),
            prefetch: 1,
        })
        .await
        .unwrap();
    let serving = tokio::spawn(async move {
        // The first request, whose caller is gone, then the new one.
        for _ in 0..2 {
            let delivery = common::next(&mut requests).await;
            delivery
                .reply(codec::encode_reply(&Ok(Bytes::from_static(b"{\"ok\":1}"))))
                .await
                .unwrap();
        }
    });
    eventually(common::WAIT, "the client to be ready again", || async {
        client.health().is_ready().then_some(())
    })
    .await;
    let reply = client
        .call(&key, request("{}"), common::WAIT)
        .await
        .expect("a call after the reconnect");
    assert_eq!(
        codec::decode_reply(&reply).unwrap().unwrap(),
        b"{\"ok\":1}".as_slice()
    );
    serving.await.unwrap();
    client.close().await;
    server.close().await;
    vhost.delete().await.unwrap();
}
