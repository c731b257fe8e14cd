//! Recovery on the shared broker, in a vhost of each test's own: connections force-closed by
//! name (`rabbitmqctl close_connection`) mid-publish and mid-consume, the lifecycle events
//! that follow, and a consumer the broker cancels (its queue deleted) re-attached, with
//! readiness false while it is detached.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mesh::{Bus, Incoming, Outgoing};
use mesh_amqp::{Lifecycle, Link};
use mesh_core::{EventId, PublishOptions, QueueSpec, SubscriptionSpec, TopicPattern};
use mesh_testkit::{eventually, Ledger};

fn durable(queue: &str, pattern: &str, prefetch: u16) -> SubscriptionSpec {
    SubscriptionSpec {
        queue: QueueSpec::Durable {
            name: queue.to_owned(),
        },
        patterns: vec![TopicPattern::parse(pattern).unwrap()],
        prefetch,
        retry_delays: vec![Duration::from_secs(1)],
    }
}

fn is_disconnected(link: Link) -> impl Fn(&Lifecycle) -> bool {
    move |e| matches!(e, Lifecycle::Disconnected { link: l, .. } if *l == link)
}

fn is_reconnected(link: Link) -> impl Fn(&Lifecycle) -> bool {
    move |e| matches!(e, Lifecycle::Connected { link: l, reconnect: true, .. } if *l == link)
}

fn is_cancelled(e: &Lifecycle) -> bool {
    matches!(e, Lifecycle::ConsumerCancelled { .. })
}

/// The subscription's own consumer re-attached (the forwarder of its retry queue
/// re-attaches too; see [`is_forwarder_reattached`]).
fn is_reattached(e: &Lifecycle) -> bool {
    matches!(e, Lifecycle::ConsumerReattached { queue } if !queue.contains(".retry."))
}

/// The retry queues of the default policy's four steps, each with its forwarder.
const STEP_NAMES: [&str; 4] = ["1s", "25s", "2m", "5s"];
const STEPS: usize = STEP_NAMES.len();

fn is_forwarder_reattached(e: &Lifecycle) -> bool {
    matches!(e, Lifecycle::ConsumerReattached { queue } if queue.contains(".retry."))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forced_close_is_reported_as_lifecycle_events_in_order() {
    let vhost = common::vhost("lifecycle-events").await;
    let transport = common::connect(&vhost, "lc").await;
    let events = common::Recorder::start(&transport);
    let mut subscription = transport
        .subscribe(durable("n.lc.events", "module.lc.#", 8))
        .await
        .unwrap();

    let closing = Instant::now();
    let closed = vhost
        .close_connections(Some("lc."), "lifecycle test")
        .await
        .unwrap();
    assert_eq!(closed, 2);
    eventually(
        common::WAIT,
        "both connections and the consumer back",
        || async {
            (events.count(is_reconnected(Link::Publish)) == 1
                && events.count(is_reconnected(Link::Consume)) == 1
                && events.count(is_reattached) == 1
                && transport.health().is_ready())
            .then_some(())
        },
    )
    .await;

    let log = events.events();
    let position = |pred: &dyn Fn(&Lifecycle) -> bool| {
        log.iter()
            .position(|(_, e)| pred(e))
            .unwrap_or_else(|| panic!("missing event in {log:#?}"))
    };
    for link in [Link::Publish, Link::Consume] {
        let lost = position(&is_disconnected(link));
        let back = position(&is_reconnected(link));
        assert!(lost < back, "{link}: {log:#?}");
        // The broker said why: a forced close (320) with the reason given.
        match &log[lost].1 {
            Lifecycle::Disconnected { reason, .. } => {
                assert!(
                    reason.contains("320") && reason.contains("lifecycle test"),
                    "{reason}"
                );
            }
            other => unreachable!("{other:?}"),
        }
    }
    // The consumer stops with its connection and is re-attached once the consume connection
    // is back, its topology declared again.
    let cancelled = position(&is_cancelled);
    let reattached = position(&is_reattached);
    let consume_back = position(&is_reconnected(Link::Consume));
    assert!(
        cancelled < reattached && consume_back < reattached,
        "{log:#?}"
    );
    assert_eq!(
        log[reattached].1,
        Lifecycle::ConsumerReattached {
            queue: "n.lc.events".to_owned()
        }
    );
    for (at, event) in &log {
        eprintln!("{:>8.1?} {event:?}", at.duration_since(closing));
    }
    let stats = transport.stats();
    assert_eq!(stats.reconnects, 2, "{stats:?}");
    // The subscription's consumer (its retry queue's forwarder is not counted).
    assert_eq!(
        (stats.consumer_cancels, stats.reattached),
        (1, 1),
        "{stats:?}"
    );

    // And it works: a message goes round.
    transport
        .publish(
            common::event("module.lc.after", "{}"),
            PublishOptions::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    common::next(&mut subscription).await.ack().await.unwrap();
    assert!(common::consumers(None, vhost.name())
        .await
        .contains(&("n.lc.events".to_owned(), 8)));
    transport.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_whose_queue_is_deleted_is_reattached_and_readiness_follows() {
    let vhost = common::vhost("detached").await;
    let transport = common::connect(&vhost, "detached").await;
    let events = common::Recorder::start(&transport);
    let queue = "n.detached.events";
    let mut subscription = transport
        .subscribe(durable(queue, "module.detached.#", 4))
        .await
        .unwrap();
    assert!(transport.health().is_ready());

    // Room for no new queue: the re-attach cannot declare the queue again, for now.
    let queues = vhost.list_queues().await.unwrap().len();
    let limit = format!("{{\"max-queues\": {}}}", queues - 1);
    mesh_testkit::rabbitmqctl(None, &["set_vhost_limits", "-p", vhost.name(), &limit])
        .await
        .unwrap();
    let (connection, channel) = common::raw(&vhost).await;
    channel
        .queue_delete(amqprs::channel::QueueDeleteArguments::new(queue))
        .await
        .unwrap();
    // The broker cancels the consumer (`basic.cancel`); its connection stays up.
    eventually(
        common::WAIT,
        "the consumer to be reported cancelled",
        || async { (events.count(is_cancelled) == 1).then_some(()) },
    )
    .await;
    let health = transport.health();
    assert!(health.connected && !health.is_ready(), "{health:?}");
    assert_eq!(
        (health.consumers_expected, health.consumers_attached),
        (1, 0)
    );
    assert_eq!(events.count(is_reattached), 0);

    mesh_testkit::rabbitmqctl(None, &["clear_vhost_limits", "-p", vhost.name()])
        .await
        .unwrap();
    let cleared = Instant::now();
    eventually(common::WAIT, "the consumer to be re-attached", || async {
        transport.health().is_ready().then_some(())
    })
    .await;
    common::measured(
        "re-attached after the queue limit was lifted",
        cleared.elapsed(),
    );
    assert_eq!(events.count(is_reattached), 1);
    // The queue is back, as declared (quorum, dead-lettered), bound again.
    let back = vhost.list_queues().await.unwrap();
    let back = back.iter().find(|q| q.name == queue).unwrap();
    assert_eq!(back.arguments["x-queue-type"], "quorum");
    assert_eq!(back.arguments["x-dead-letter-exchange"], "mesh.events.dead");
    transport
        .publish(
            common::event("module.detached.x", "{}"),
            PublishOptions::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    common::next(&mut subscription).await.ack().await.unwrap();
    let stats = transport.stats();
    assert_eq!(stats.reconnects, 0, "{stats:?}");
    assert!(
        stats.reattached == 1 && stats.consumer_cancels == 1,
        "{stats:?}"
    );
    let _ = connection.close().await;
    transport.close().await;
    vhost.delete().await.unwrap();
}

/// What one round of the forced-close scenario measured.
#[derive(Debug)]
struct Round {
    /// From the broker closing the publishing connection until it was back.
    publish_back: Duration,
    /// From the broker closing the consume connection until the consumer was re-attached.
    consumer_back: Duration,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_forced_closes_mid_publish_and_mid_consume_lose_nothing() {
    const ROUNDS: usize = 10;
    const PREFETCH: u16 = 16;
    let vhost = common::vhost("forced-close").await;
    let transport = common::connect(&vhost, "fc").await;
    let events = common::Recorder::start(&transport);
    let ledger = Ledger::new();
    let handled = Arc::new(AtomicUsize::new(0));

    let bus = {
        let ledger = ledger.clone();
        let handled = handled.clone();
        Bus::builder()
            .node("n1")
            .module("orders")
            // Its handler takes its own prefix: the contract announcement would be one more
            // event there, which this test does not expect.
            .announce(false)
            .prefetch(PREFETCH)
            .on_raw(["module.orders.#"], move |incoming: Incoming<Bytes>| {
                let ledger = ledger.clone();
                let handled = handled.clone();
                async move {
                    // Some work, so deliveries are in flight when the connection goes.
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    ledger.handled(incoming.meta.id().to_string());
                    handled.fetch_add(1, Ordering::Relaxed);
                    Ok(())
                }
            })
            .start(Arc::new(transport.clone()))
            .await
            .unwrap()
    };

    // Emits at a steady pace, never waiting for confirms, for as long as the rounds last.
    let stop = Arc::new(AtomicBool::new(false));
    let emit_errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let publishing = {
        let bus = bus.clone();
        let ledger = ledger.clone();
        let stop = stop.clone();
        let errors = emit_errors.clone();
        tokio::spawn(async move {
            let mut confirms = tokio::task::JoinSet::new();
            let mut pace = tokio::time::interval(Duration::from_millis(10));
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                pace.tick().await;
                let id = EventId::new();
                ledger.attempted(id.to_string());
                let outgoing = Outgoing::json("order.placed", &serde_json::json!({ "i": i }))
                    .unwrap()
                    .id(id);
                i += 1;
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
            i
        })
    };

    let mut rounds = Vec::new();
    for round in 0..ROUNDS {
        // Let some traffic flow first, so the close lands mid-publish and mid-consume.
        let before = handled.load(Ordering::Relaxed);
        eventually(common::WAIT, "traffic before the close", || async {
            (handled.load(Ordering::Relaxed) >= before + 50).then_some(())
        })
        .await;
        let closing = Instant::now();
        let closed = vhost
            .close_connections(Some("fc."), "forced-close test")
            .await
            .unwrap();
        assert_eq!(closed, 2, "round {round}");
        eventually(
            common::WAIT,
            "both connections and the consumer back",
            || async {
                (events.count(is_reconnected(Link::Publish)) > round
                    && events.count(is_reconnected(Link::Consume)) > round
                    && events.count(is_reattached) > round
                    // Every forwarder (one per retry step), each round: health does not
                    // count them.
                    && events.count(is_forwarder_reattached) >= STEPS * (round + 1)
                    && transport.health().is_ready())
                .then_some(())
            },
        )
        .await;
        let lost_publish = events
            .first_after(closing, is_disconnected(Link::Publish))
            .unwrap();
        let lost_consume = events
            .first_after(closing, is_disconnected(Link::Consume))
            .unwrap();
        let round_times = Round {
            publish_back: events
                .first_after(lost_publish, is_reconnected(Link::Publish))
                .unwrap()
                - lost_publish,
            consumer_back: events.first_after(lost_consume, is_reattached).unwrap() - lost_consume,
        };
        // The consumer is back with its prefetch, and only one of it; so is the forwarder
        // of each of its retry queues (the default policy's four steps), with its own.
        let mut consumers = common::consumers(None, vhost.name()).await;
        consumers.sort();
        let mut wanted = vec![("n1.orders.events".to_owned(), u64::from(PREFETCH))];
        for step in STEP_NAMES {
            wanted.push((format!("n1.orders.events.retry.{step}"), 1000));
        }
        assert_eq!(consumers, wanted, "round {round}");
        eprintln!("round {round}: {round_times:?}");
        rounds.push(round_times);
    }

    stop.store(true, Ordering::Relaxed);
    let emitted = tokio::time::timeout(Duration::from_secs(60), publishing)
        .await
        .expect("every emit settles")
        .unwrap();
    let report = ledger.wait_all_handled(Duration::from_secs(60)).await;
    eprintln!("{report}");
    report.assert_clean();
    let errors = emit_errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "emits failed: {errors:#?}");
    assert_eq!(report.confirmed as u64, emitted);

    let stats = transport.stats();
    eprintln!("{stats:?}");
    // No stale delivery tag ever reached a channel: the broker closed no channel at all.
    assert_eq!(stats.unknown_delivery_tag_closes, 0, "{stats:?}");
    assert_eq!(stats.channel_closes, 0, "{stats:?}");
    assert_eq!(stats.reconnects, 2 * ROUNDS as u64, "{stats:?}");
    // Each round, the consumer (the forwarders of its retry queues are not counted).
    assert_eq!(stats.reattached, ROUNDS as u64, "{stats:?}");

    let worst = |f: fn(&Round) -> Duration| rounds.iter().map(f).max().unwrap();
    let mean = |f: fn(&Round) -> Duration| {
        rounds.iter().map(f).sum::<Duration>() / u32::try_from(rounds.len()).unwrap()
    };
    common::measured("forced close: emitted", emitted);
    common::measured("forced close: duplicates handled", report.duplicates);
    common::measured("forced close: lost", report.lost.len());
    common::measured("forced close: resent", stats.resent);
    common::measured(
        "forced close: publish connection back (mean, max)",
        (mean(|r| r.publish_back), worst(|r| r.publish_back)),
    );
    common::measured(
        "forced close: consumer re-attached (mean, max)",
        (mean(|r| r.consumer_back), worst(|r| r.consumer_back)),
    );
    // Target ~0.1-0.2 s (one backoff step plus a handshake); asserted with generous slack.
    assert!(
        worst(|r| r.publish_back) < Duration::from_secs(3),
        "{rounds:?}"
    );
    assert!(
        worst(|r| r.consumer_back) < Duration::from_secs(3),
        "{rounds:?}"
    );

    bus.drain().await.unwrap();
    vhost.delete().await.unwrap();
}
