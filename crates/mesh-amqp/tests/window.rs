//! The unconfirmed window: a full window is backpressure, a confirm that does not come in
//! time is a timeout, a late confirm still frees its room, and what is in flight when the
//! connection drops is resent. A relay between the transport and the broker holds the
//! confirms back.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use mesh_amqp::{AmqpTransport, Lifecycle, Link};
use mesh_core::{PublishOptions, TransportErrorKind};
use mesh_testkit::{eventually, Relay};

fn within(deadline: Duration) -> PublishOptions {
    PublishOptions {
        deadline: Some(deadline),
        ..PublishOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_window_is_backpressure_and_a_missing_confirm_a_timeout() {
    let vhost = common::vhost("window").await;
    let relay = Relay::start(vhost.broker_addr()).await.unwrap();
    let options = vhost
        .url_via(relay.addr())
        .parse::<mesh_amqp::AmqpOptions>()
        .unwrap()
        .connection_name("window")
        .confirm_window(2);
    let transport = AmqpTransport::connect(options).await.unwrap();
    let events = common::Recorder::start(&transport);

    // Nothing reaches the broker, so no confirm comes back.
    relay.blackhole();
    let first = transport
        .publish(
            common::event("module.w.a", "{}"),
            within(Duration::from_secs(1)),
        )
        .await
        .unwrap();
    let _second = transport
        .publish(
            common::event("module.w.b", "{}"),
            within(Duration::from_secs(30)),
        )
        .await
        .unwrap();
    let started = Instant::now();
    let error = transport
        .publish(
            common::event("module.w.c", "{}"),
            within(Duration::from_millis(300)),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::Backpressure, "{error}");
    assert!(error.is_retryable());
    assert!(started.elapsed() >= Duration::from_millis(290));

    let error = first.await.unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::Timeout, "{error}");

    // The broker gets the messages and confirms them: the room comes back, although the
    // first confirm's caller gave up.
    relay.pass();
    transport
        .publish(
            common::event("module.w.d", "{}"),
            within(Duration::from_secs(10)),
        )
        .await
        .unwrap()
        .await
        .unwrap();

    // Losing the connection does not fail what is in flight: it is resent once the
    // transport has reconnected, and confirmed then.
    relay.blackhole();
    let in_flight = transport
        .publish(common::event("module.w.e", "{}"), PublishOptions::default())
        .await
        .unwrap();
    // `publish` resolves once the message is queued for the publish task, which may not have
    // sent it yet. Only sent messages wait for a confirm, and one waiting in vain for 5 s is
    // reported as blocked: then it is in flight for sure.
    eventually(
        common::WAIT,
        "the message to be sent and unconfirmed",
        || async { transport.health().blocked.then_some(()) },
    )
    .await;
    let cut = Instant::now();
    relay.cut();
    // The cut is asynchronous: passing at once could let the relay forward the bytes it
    // held to the broker on the old connection before it closes it, and the confirm come
    // back there (nothing resent). The relay passes again once the publishing connection
    // saw the cut; its next one cannot come up before (the relay does not connect it
    // upstream while it holds).
    eventually(
        common::WAIT,
        "the publishing connection to notice the cut",
        || async {
            events
                .first_after(cut, |e| {
                    matches!(
                        e,
                        Lifecycle::Disconnected {
                            link: Link::Publish,
                            ..
                        }
                    )
                })
                .map(|_| ())
        },
    )
    .await;
    relay.pass();
    tokio::time::timeout(common::WAIT, in_flight)
        .await
        .expect("the confirm after the reconnect")
        .expect("resent and confirmed");
    let stats = transport.stats();
    assert!(stats.reconnects >= 1 && stats.resent >= 1, "{stats:?}");
    common::assert_window_empty(&transport);
    eventually(common::WAIT, "health to report ready", || async {
        transport.health().is_ready().then_some(())
    })
    .await;
    transport.close().await;
    drop(relay);
    vhost.delete().await.unwrap();
}

/// A publish that finds the window full waits for room, through the `Transport` trait as
/// through the inherent method, and goes out once a confirm frees some; one that finds room
/// is handed over at its first poll, and one never polled is never published.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_waits_for_room_and_goes_out_once_a_confirm_frees_it() {
    use mesh_core::Transport;

    let vhost = common::vhost("window-wait").await;
    let relay = Relay::start(vhost.broker_addr()).await.unwrap();
    let options = vhost
        .url_via(relay.addr())
        .parse::<mesh_amqp::AmqpOptions>()
        .unwrap()
        .connection_name("window-wait")
        .confirm_window(1);
    let transport = AmqpTransport::connect(options).await.unwrap();
    let dyn_transport: &dyn Transport = &transport;

    relay.blackhole();
    // A publish's future does nothing before it is polled: dropped unpolled, nothing went.
    drop(dyn_transport.publish(
        common::event("module.w.never", "{}"),
        within(Duration::from_secs(30)),
    ));
    drop(transport.publish(
        common::event("module.w.never", "{}"),
        within(Duration::from_secs(30)),
    ));
    assert_eq!(transport.stats().unconfirmed, 0);

    // Room: taken at once, without a wait.
    let first = futures::poll!(Box::pin(dyn_transport.publish(
        common::event("module.w.a", "{}"),
        within(Duration::from_secs(30)),
    )));
    let std::task::Poll::Ready(first) = first else {
        panic!("a publish that has room must not wait");
    };
    let first = first.unwrap();
    assert_eq!(transport.stats().unconfirmed, 1);

    // No room: both ways of publishing wait.
    let mut second = Box::pin(dyn_transport.publish(
        common::event("module.w.b", "{}"),
        within(Duration::from_secs(30)),
    ));
    let mut third = Box::pin(transport.publish(
        common::event("module.w.c", "{}"),
        within(Duration::from_secs(30)),
    ));
    assert!(futures::poll!(&mut second).is_pending());
    assert!(futures::poll!(&mut third).is_pending());

    // The confirms come: each frees the room the next waiting publish takes.
    relay.pass();
    let confirms = tokio::time::timeout(common::WAIT, async {
        first.await?;
        second.await?.await?;
        third.await?.await
    })
    .await
    .expect("room and confirms before the wait ran out");
    confirms.unwrap();
    common::assert_window_empty(&transport);
    transport.close().await;
    drop(relay);
    vhost.delete().await.unwrap();
}

/// Cancel safety, now that a publish is written by its caller: one cancelled while it waits
/// for room leaves neither a frame nor a slot in the window, and one that resolved was
/// published whole, whatever happens to its `Confirm` (dropped here). The queue shows it:
/// the cancelled publish, had any of it gone out, would come between the other two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_cancelled_while_waiting_leaves_nothing_and_a_taken_one_goes_out_whole() {
    use mesh_core::{QueueSpec, SubscriptionSpec, TopicPattern};

    let vhost = common::vhost("window-cancel").await;
    let relay = Relay::start(vhost.broker_addr()).await.unwrap();
    let options = vhost
        .url_via(relay.addr())
        .parse::<mesh_amqp::AmqpOptions>()
        .unwrap()
        .connection_name("window-cancel")
        .confirm_window(1);
    let transport = AmqpTransport::connect(options).await.unwrap();
    let mut subscription = transport
        .subscribe(SubscriptionSpec {
            queue: QueueSpec::Durable {
                name: "n.cancel.events".to_owned(),
            },
            patterns: vec![TopicPattern::parse("module.cancel.#").unwrap()],
            prefetch: 8,
            retry_delays: vec![],
        })
        .await
        .unwrap();

    relay.blackhole();
    // Taken at once (room for one), its confirm dropped: it is published all the same.
    drop(
        transport
            .publish(
                common::event("module.cancel.a", "{\"n\":\"a\"}"),
                within(Duration::from_secs(30)),
            )
            .await
            .unwrap(),
    );
    assert_eq!(transport.stats().unconfirmed, 1);
    // No room: it waits, and is cancelled while it does.
    let mut cancelled = Box::pin(transport.publish(
        common::event("module.cancel.b", "{\"n\":\"b\"}"),
        within(Duration::from_secs(30)),
    ));
    assert!(futures::poll!(&mut cancelled).is_pending());
    drop(cancelled);
    assert_eq!(transport.stats().unconfirmed, 1);

    relay.pass();
    let last = tokio::time::timeout(common::WAIT, async {
        transport
            .publish(
                common::event("module.cancel.c", "{\"n\":\"c\"}"),
                within(Duration::from_secs(30)),
            )
            .await?
            .await
    })
    .await
    .expect("room and a confirm before the wait ran out");
    last.unwrap();

    let mut bodies = Vec::new();
    for _ in 0..2 {
        let delivery = common::next(&mut subscription).await;
        bodies.push(String::from_utf8(delivery.message.body.to_vec()).unwrap());
        delivery.ack().await.unwrap();
    }
    assert_eq!(bodies, ["{\"n\":\"a\"}", "{\"n\":\"c\"}"]);
    common::assert_window_empty(&transport);
    transport.close().await;
    drop(relay);
    vhost.delete().await.unwrap();
}
