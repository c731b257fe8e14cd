//! The broker itself fails: a node stopped and started again, then killed (SIGKILL) and
//! started again, with publishing and consuming going on through the SDK; and a memory
//! alarm that blocks publishers until the unconfirmed window, bounded in bytes, is full.
//! Each test has a private node of its own: both are destructive.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mesh::{Bus, Incoming, Outgoing};
use mesh_amqp::{AmqpOptions, AmqpTransport, Lifecycle, Link};
use mesh_core::{
    EventId, PublishOptions, QueueSpec, SubscriptionSpec, TopicPattern, TransportErrorKind,
};
use mesh_testkit::{eventually, Ledger, NodeOptions, PrivateNode};

fn options(node: &PrivateNode, name: &str) -> AmqpOptions {
    node.url()
        .parse::<AmqpOptions>()
        .unwrap()
        .connection_name(name)
        // No management API on private nodes; not the shared broker's either.
        .management_url("http://127.0.0.1:1")
}

fn is_lost(e: &Lifecycle) -> bool {
    matches!(e, Lifecycle::Disconnected { .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_or_killed_and_started_again_loses_nothing_confirmed() {
    let node = PrivateNode::start(NodeOptions::default()).await.unwrap();
    let transport = AmqpTransport::connect(options(&node, "restart"))
        .await
        .unwrap();
    let events = common::Recorder::start(&transport);
    let ledger = Ledger::new();
    let bus = {
        let ledger = ledger.clone();
        Bus::builder()
            .node("n1")
            .module("restart")
            // Its handler takes its own prefix: the contract announcement would be one more
            // event there, which this test does not expect.
            .announce(false)
            .prefetch(8)
            // Long enough to wait through a restart (~10-20 s here).
            .emit_deadline(Some(Duration::from_secs(120)))
            .on_raw(["module.restart.#"], move |incoming: Incoming<Bytes>| {
                let ledger = ledger.clone();
                async move {
                    ledger.handled(incoming.meta.id().to_string());
                    Ok(())
                }
            })
            .start(Arc::new(transport.clone()))
            .await
            .unwrap()
    };
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let emitting = {
        let bus = bus.clone();
        let ledger = ledger.clone();
        let stop = stop.clone();
        let errors = errors.clone();
        tokio::spawn(async move {
            let mut confirms = tokio::task::JoinSet::new();
            let mut ticker = tokio::time::interval(Duration::from_millis(20));
            while !stop.load(Ordering::Relaxed) {
                ticker.tick().await;
                let id = EventId::new();
                ledger.attempted(id.to_string());
                let outgoing = Outgoing::json("tick", &serde_json::json!({}))
                    .unwrap()
                    .id(id);
                match bus.emit_nowait(outgoing).await {
                    Ok(pending) => {
                        let ledger = ledger.clone();
                        let errors = errors.clone();
                        confirms.spawn(async move {
                            match pending.await {
                                Ok(id) => ledger.confirmed(id.to_string()),
                                Err(e) => errors.lock().unwrap().push(format!("{e:#}")),
                            }
                        });
                    }
                    Err(e) => errors.lock().unwrap().push(format!("{e:#}")),
                }
            }
            while confirms.join_next().await.is_some() {}
        })
    };

    let mut outages = Vec::new();
    for (phase, crash) in [("stop", false), ("kill", true)] {
        let handled = ledger.report().handled_unique;
        eventually(common::WAIT, "traffic before the outage", || async {
            (ledger.report().handled_unique >= handled + 50).then_some(())
        })
        .await;
        let down = Instant::now();
        if crash {
            node.kill().await.unwrap();
        } else {
            node.stop().await.unwrap();
        }
        let lost = events.first_after(down, is_lost);
        assert!(lost.is_some(), "{phase}: the loss was not reported");
        assert!(!transport.health().connected);
        let starting = Instant::now();
        node.start_again().await.unwrap();
        let booted = starting.elapsed();
        eventually(
            Duration::from_secs(60),
            "the transport to be ready again",
            || async { transport.health().is_ready().then_some(()) },
        )
        .await;
        let back = starting.elapsed() - booted;
        let failed_attempts = events.count(|e| matches!(e, Lifecycle::ReconnectFailed { .. }));
        eprintln!(
            "{phase}: noticed after {:?}, node booted in {booted:?}, ready {back:?} after the \
             boot, {failed_attempts} failed reconnect attempts so far",
            lost.unwrap() - down
        );
        // The backoff is capped at 5 s: ready within a step or two (10 s) of the node being
        // up; the bound has 3× slack over that.
        assert!(back < Duration::from_secs(30), "{phase}: {back:?}");
        outages.push((phase, lost.unwrap() - down, booted, back));
    }

    let handled = ledger.report().handled_unique;
    eventually(common::WAIT, "traffic after the outages", || async {
        (ledger.report().handled_unique >= handled + 50).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(150), emitting)
        .await
        .expect("every emit settles")
        .unwrap();
    let report = ledger.wait_all_handled(Duration::from_secs(60)).await;
    eprintln!("{report}");
    report.assert_clean();
    let errors = errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "emits failed: {errors:#?}");
    let stats = transport.stats();
    eprintln!("{stats:?}");
    assert_eq!(stats.unknown_delivery_tag_closes, 0);
    assert_eq!(stats.reconnects, 4, "{stats:?}");
    for (phase, noticed, booted, back) in &outages {
        common::measured(
            &format!("node {phase}: noticed after, node boot, ready after boot"),
            (noticed, booted, back),
        );
    }
    common::measured("node restarts: resent", stats.resent);
    common::measured("node restarts: duplicates handled", report.duplicates);
    common::measured("node restarts: lost", report.lost.len());
    bus.drain().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_alarm_fills_the_byte_bounded_window_and_publish_returns_backpressure() {
    const BODY: usize = 64 * 1024;
    const MAX_BYTES: usize = 8 * BODY;
    const DEADLINE: Duration = Duration::from_secs(1);
    let node = PrivateNode::start(NodeOptions::default()).await.unwrap();
    let transport = AmqpTransport::connect(
        options(&node, "alarm")
            .max_unconfirmed_bytes(MAX_BYTES)
            .publish_deadline(Some(DEADLINE)),
    )
    .await
    .unwrap();
    let events = common::Recorder::start(&transport);
    let mut subscription = transport
        .subscribe(SubscriptionSpec {
            queue: QueueSpec::Durable {
                name: "n.alarm.events".to_owned(),
            },
            patterns: vec![TopicPattern::parse("module.alarm.#").unwrap()],
            prefetch: 64,
            retry_delays: vec![Duration::from_secs(1)],
        })
        .await
        .unwrap();
    let message = || {
        let mut message = common::event("module.alarm.blob", "");
        message.body = Bytes::from(vec![7u8; BODY]);
        message
    };

    node.set_memory_alarm(true).await.unwrap();
    let alarmed = Instant::now();
    // Publish until the window is full: each publish either gets room, or fails with
    // Backpressure by its deadline; memory never grows past the bound.
    let mut accepted = Vec::new();
    let backpressure = loop {
        let started = Instant::now();
        match transport
            .publish(message(), PublishOptions::default())
            .await
        {
            Ok(confirm) => accepted.push(confirm),
            Err(error) => break (error, started.elapsed()),
        }
        let stats = transport.stats();
        assert!(stats.unconfirmed_bytes <= MAX_BYTES, "{stats:?}");
        assert!(accepted.len() < 1000, "the window never filled");
    };
    let (error, waited) = backpressure;
    assert_eq!(error.kind(), &TransportErrorKind::Backpressure, "{error}");
    assert!(error.is_retryable());
    assert!(
        waited >= DEADLINE - Duration::from_millis(50) && waited < DEADLINE * 3,
        "{waited:?}"
    );
    let stats = transport.stats();
    eprintln!("{} accepted, then {error}; {stats:?}", accepted.len());
    assert_eq!(stats.unconfirmed_bytes, MAX_BYTES, "{stats:?}");
    assert_eq!(stats.unconfirmed, MAX_BYTES / BODY, "{stats:?}");

    // The broker said nothing (amqprs does not announce `connection.blocked`), but the
    // stalled confirms are reported as a block.
    eventually(common::WAIT, "the block to be reported", || async {
        transport.health().blocked.then_some(())
    })
    .await;
    let reported = alarmed.elapsed();
    assert!(!transport.health().is_ready());
    assert!(
        events.count(|e| matches!(
            e,
            Lifecycle::Blocked {
                link: Link::Publish,
                ..
            }
        )) == 1
    );
    // Confirms not given stop waiting at their deadline; the messages stay in the window.
    let accepted_total = accepted.len();
    let mut timed_out = 0;
    for confirm in accepted.drain(..) {
        if let Err(error) = confirm.await {
            assert_eq!(error.kind(), &TransportErrorKind::Timeout, "{error}");
            timed_out += 1;
        }
    }
    assert!(timed_out > 0);
    assert_eq!(transport.stats().unconfirmed_bytes, MAX_BYTES);
    let total = accepted_total;

    node.set_memory_alarm(false).await.unwrap();
    let cleared = Instant::now();
    eventually(common::WAIT, "the window to drain", || async {
        let stats = transport.stats();
        (stats.unconfirmed == 0 && stats.unconfirmed_bytes == 0).then_some(())
    })
    .await;
    let drained = cleared.elapsed();
    eventually(common::WAIT, "the block to end", || async {
        (!transport.health().blocked).then_some(())
    })
    .await;
    assert!(
        events.count(|e| matches!(
            e,
            Lifecycle::Unblocked {
                link: Link::Publish
            }
        )) == 1
    );
    let blocked_time = transport.stats().blocked_time;
    assert!(blocked_time > Duration::ZERO);
    // Every message that got room is delivered, timed-out confirms included.
    let mut delivered = 0;
    while delivered < total {
        let delivery = common::next(&mut subscription).await;
        assert_eq!(delivery.message.body.len(), BODY);
        delivery.ack().await.unwrap();
        delivered += 1;
    }
    transport
        .publish(message(), PublishOptions::default())
        .await
        .unwrap()
        .await
        .unwrap();
    common::measured("alarm: Backpressure returned after (deadline 1 s)", waited);
    common::measured("alarm: block reported after", reported);
    common::measured("alarm: window drained after the alarm cleared", drained);
    common::measured("alarm: blocked time", blocked_time);
    common::measured("alarm: confirms timed out, then delivered", timed_out);
    transport.close().await;
}
