//! Health, close, and the types' auto traits.

mod common;

use std::time::Duration;

use common::*;
use mesh_core::transport::{PublishOptions, ServeSpec, Transport, TransportErrorKind};
use mesh_core::ToolKey;
use mesh_memory::{MemoryBroker, MemoryTransport};

#[test]
fn handles_are_send_sync_and_cheap_to_clone() {
    fn assert_send_sync<T: Send + Sync + Clone + std::fmt::Debug + 'static>() {}
    assert_send_sync::<MemoryBroker>();
    assert_send_sync::<MemoryTransport>();
    // Usable as the SDK holds it.
    let transport: std::sync::Arc<dyn Transport> =
        std::sync::Arc::new(MemoryBroker::new().transport());
    assert!(format!("{transport:?}").contains("MemoryTransport"));
}

#[tokio::test(start_paused = true)]
async fn health_counts_this_transports_live_consumers() {
    let broker = MemoryBroker::new();
    let (one, two) = (broker.transport(), broker.transport());
    let health = one.health();
    assert!(health.is_ready());
    assert!(health.connected && !health.blocked);
    assert_eq!(health.consumers_attached, 0);

    let a = one.subscribe(durable("q", &["#"], 1)).await.unwrap();
    let _b = one.subscribe(ephemeral(&["#"])).await.unwrap();
    let _c = two.subscribe(durable("q", &["#"], 1)).await.unwrap();
    let health = one.health();
    assert_eq!(
        (health.consumers_expected, health.consumers_attached),
        (2, 2)
    );
    assert_eq!(two.health().consumers_attached, 1);
    drop(a);
    assert_eq!(one.health().consumers_attached, 1);
    // Clones share the connection.
    assert_eq!(one.clone().health().consumers_attached, 1);
}

#[tokio::test(start_paused = true)]
async fn close_requeues_unsettled_deliveries_and_ends_subscriptions() {
    let broker = MemoryBroker::new();
    let (leaving, staying) = (broker.transport(), broker.transport());
    let mut sub = leaving.subscribe(durable("q", &["#"], 3)).await.unwrap();
    let mut tail = leaving.subscribe(ephemeral(&["#"])).await.unwrap();
    let tail_queue = tail.queue().to_owned();
    for n in 0..4 {
        emit(&staying, "module.a.e", &n.to_string()).await;
    }
    let held = next(&mut sub).await;
    assert_eq!(broker.unacked("q"), Some(3));
    assert_eq!(broker.queue_depth("q"), Some(1));

    leaving.close().await;

    assert!(!leaving.health().connected);
    assert_eq!(leaving.health().consumers_attached, 0);
    assert_eq!(broker.consumer_count("q"), Some(0));
    assert_eq!(broker.unacked("q"), Some(0));
    assert_eq!(broker.queue_depth("q"), Some(4));
    assert!(!broker.queue_names().contains(&tail_queue));

    // Settling what came from the closed connection changes nothing at the broker.
    let error = held.ack().await.unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::ConnectionLost);
    assert!(error.is_connection_lost());
    assert_eq!(broker.queue_depth("q"), Some(4));

    // Deliveries already buffered are still handed out, then the subscriptions end; they
    // were requeued, so settling them fails too, and dropping them does nothing.
    while let Some(stale) = sub.next().await {
        let copy = stale.message.clone();
        let error = stale.retry(copy, 0).await.unwrap_err();
        assert_eq!(error.kind(), &TransportErrorKind::ConnectionLost);
    }
    while tail.next().await.is_some() {}
    assert_eq!(broker.queue_depth("q"), Some(4));
    assert_eq!(broker.delayed("q"), Some(0));

    // Another connection gets them all, in order, as redelivered.
    let mut other = staying.subscribe(durable("q", &["#"], 8)).await.unwrap();
    for n in 0..4 {
        let delivery = next(&mut other).await;
        assert_eq!(body(&delivery), n.to_string());
        assert_eq!(delivery.redelivered, n < 3, "message {n}");
        assert_eq!(delivery.delivery_count, Some(u32::from(n < 3)));
        delivery.ack().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_closed_transport_refuses_everything_and_closing_twice_is_harmless() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let tool = ToolKey::parse("a.tool").unwrap();
    let _server = broker
        .transport()
        .serve(ServeSpec {
            tool: tool.clone(),
            prefetch: 1,
        })
        .await
        .unwrap();
    transport.close().await;
    transport.close().await;

    fn kind<T>(result: Result<T, mesh_core::TransportError>) -> TransportErrorKind {
        result.map(drop).unwrap_err().kind().clone()
    }
    assert_eq!(
        kind(
            transport
                .publish(message("module.a.e", "x"), PublishOptions::default())
                .await
        ),
        TransportErrorKind::Closed
    );
    assert_eq!(
        kind(transport.subscribe(durable("q", &["#"], 1)).await),
        TransportErrorKind::Closed
    );
    assert_eq!(
        kind(
            transport
                .serve(ServeSpec {
                    tool: tool.clone(),
                    prefetch: 1
                })
                .await
        ),
        TransportErrorKind::Closed
    );
    assert_eq!(
        kind(
            transport
                .call(&tool, message("x", "y"), Duration::from_secs(1))
                .await
        ),
        TransportErrorKind::Closed
    );
    assert!(!broker.queue_names().contains(&"q".to_owned()));
}

#[tokio::test(start_paused = true)]
async fn a_call_waiting_when_its_transport_closes_fails_as_closed() {
    let broker = MemoryBroker::new();
    let client = broker.transport();
    let tool = ToolKey::parse("a.tool").unwrap();
    let mut requests = broker
        .transport()
        .serve(ServeSpec {
            tool: tool.clone(),
            prefetch: 1,
        })
        .await
        .unwrap();
    let caller = client.clone();
    let call = tokio::spawn(async move {
        caller
            .call(&tool, message("a.tool", "x"), Duration::from_secs(60))
            .await
    });
    let request = next(&mut requests).await;
    client.close().await;
    let error = call.await.unwrap().unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::Closed);
    // The reply has nowhere to go; the request is settled all the same.
    request
        .reply(mesh_core::codec::encode_reply(&Ok("null".into())))
        .await
        .unwrap();
    assert_eq!(broker.unacked("serve.a.tool"), Some(0));
}

#[tokio::test(start_paused = true)]
async fn deliveries_outliving_their_broker_settle_as_connection_lost() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut sub = transport.subscribe(durable("q", &["#"], 1)).await.unwrap();
    emit(&transport, "module.a.e", "x").await;
    let delivery = next(&mut sub).await;
    drop((broker, transport));
    let error = delivery.ack().await.unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::ConnectionLost);
    assert!(sub.next().await.is_none());
}

#[tokio::test(start_paused = true)]
async fn extreme_durations_do_not_panic() {
    let broker = MemoryBroker::new();
    let transport = broker.transport();
    let mut spec = durable("q", &["#"], 1);
    spec.retry_delays = vec![Duration::MAX];
    let mut sub = transport.subscribe(spec).await.unwrap();

    let mut forever = message("module.a.e", "forever");
    forever.properties.expiration = Some(Duration::MAX);
    transport
        .publish(forever, PublishOptions::default())
        .await
        .unwrap()
        .await
        .unwrap();
    let delivery = next(&mut sub).await;
    assert_eq!(body(&delivery), "forever");
    let copy = delivery.message.clone();
    delivery.retry(copy, usize::MAX).await.unwrap();
    nothing_within(&mut sub, Duration::from_secs(3600)).await;
    assert_eq!(broker.delayed("q"), Some(1));

    let tool = ToolKey::parse("a.tool").unwrap();
    let mut requests = transport
        .serve(ServeSpec {
            tool: tool.clone(),
            prefetch: 0,
        })
        .await
        .unwrap();
    let server = tokio::spawn(async move {
        let request = next(&mut requests).await;
        request
            .reply(mesh_core::codec::encode_reply(&Ok("1".into())))
            .await
            .unwrap();
    });
    let reply = transport
        .call(&tool, message("a.tool", "x"), Duration::MAX)
        .await
        .unwrap();
    assert_eq!(&reply.body[..], b"1");
    server.await.unwrap();
}
