//! Network faults between the transport and the broker, through a TCP relay in front of a
//! private RabbitMQ node (shared by the tests of this file; each test has its own relay and
//! queue): a cut of every connection mid-publish and mid-consume, and a silent partition (a
//! blackhole) found by heartbeats. Both end to end through the SDK, with a ledger of every
//! event id: nothing confirmed is lost.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mesh_amqp::{AmqpOptions, AmqpTransport, Lifecycle, Link};
use mesh_core::TransportErrorKind;
use mesh_testkit::{eventually, shared_node, Ledger, NodeOptions, PrivateNode, Relay};

use common::traffic::{consuming_bus, emitter, Emits};

async fn node() -> Arc<PrivateNode> {
    shared_node("network", NodeOptions::default())
        .await
        .expect("a private RabbitMQ node")
}

/// Options to reach `node` through `relay`. The management API is not enabled on private
/// nodes: point it nowhere rather than at the shared broker's.
fn through(relay: &Relay, name: &str) -> AmqpOptions {
    format!("amqp://guest:guest@127.0.0.1:{}/", relay.port())
        .parse::<AmqpOptions>()
        .unwrap()
        .connection_name(name)
        .management_url("http://127.0.0.1:1")
}

fn lost(link: Link) -> impl Fn(&Lifecycle) -> bool {
    move |e| matches!(e, Lifecycle::Disconnected { link: l, .. } if *l == link)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_cut_mid_publish_and_mid_consume_is_noticed_at_once_and_loses_nothing() {
    const CUTS: usize = 3;
    let node = node().await;
    let relay = Relay::start(node.addr()).await.unwrap();
    let transport = AmqpTransport::connect(through(&relay, "cut"))
        .await
        .unwrap();
    let events = common::Recorder::start(&transport);
    let ledger = Ledger::new();
    let bus = consuming_bus(&transport, "cut", &ledger).await;
    let stop = Arc::new(AtomicBool::new(false));
    let emits = Arc::new(Emits::default());
    let emitting = emitter(
        &bus,
        &ledger,
        Duration::from_millis(5),
        stop.clone(),
        emits.clone(),
    );

    let mut detections = Vec::new();
    let mut recoveries = Vec::new();
    for round in 0..CUTS {
        eventually(common::WAIT, "traffic before the cut", || async {
            (ledger.report().handled_unique >= 100 * (round + 1)).then_some(())
        })
        .await;
        // Hold the confirms back for a moment, so publishes are pending when the cut comes.
        relay.blackhole();
        eventually(
            common::WAIT,
            "publishes waiting for their confirm",
            || async { (transport.stats().unconfirmed >= 5).then_some(()) },
        )
        .await;
        let pending = transport.stats().unconfirmed as u64;
        let resent_before = transport.stats().resent;
        let cut = Instant::now();
        relay.cut();
        // The relay passes again only once both connections noticed the cut: the cut is
        // asynchronous, and a relay passing at once could forward the confirms it held on
        // the old connection before closing it (nothing would be resent). The new
        // connections cannot come up meanwhile (the relay does not connect them upstream).
        eventually(
            common::WAIT,
            "both connections to notice the cut",
            || async {
                (events.first_after(cut, lost(Link::Publish)).is_some()
                    && events.first_after(cut, lost(Link::Consume)).is_some())
                .then_some(())
            },
        )
        .await;
        relay.pass();
        let noticed = [Link::Publish, Link::Consume]
            .map(|link| events.first_after(cut, lost(link)).unwrap() - cut);
        eventually(common::WAIT, "the transport to be ready again", || async {
            transport.health().is_ready().then_some(())
        })
        .await;
        let ready = cut.elapsed();
        // What waited for its confirm on the cut connection goes out again on the new one.
        eventually(
            common::WAIT,
            "the pending publishes to be resent",
            || async { (transport.stats().resent > resent_before).then_some(()) },
        )
        .await;
        eprintln!("cut {round}: noticed {noticed:?}, ready after {ready:?}, {pending} pending");
        // Target: at once (the sockets close); asserted with generous slack.
        assert!(
            noticed.iter().all(|d| *d < Duration::from_secs(3)),
            "{noticed:?}"
        );
        detections.extend(noticed);
        recoveries.push(ready);
    }
    stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(60), emitting)
        .await
        .expect("every emit returns")
        .unwrap();
    let report = ledger.wait_all_handled(Duration::from_secs(60)).await;
    eprintln!("{report}");
    report.assert_clean();
    let errors = emits.errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "emits failed: {errors:#?}");
    let stats = transport.stats();
    eprintln!("{stats:?}");
    assert_eq!(stats.unknown_delivery_tag_closes, 0);
    assert_eq!(stats.reconnects, 2 * CUTS as u64);
    common::measured("tcp cut: noticed after (each link, each cut)", &detections);
    common::measured("tcp cut: ready again after", &recoveries);
    common::measured("tcp cut: emitted", emits.count.load(Ordering::Relaxed));
    common::measured("tcp cut: resent", stats.resent);
    common::measured("tcp cut: duplicates handled", report.duplicates);
    common::measured("tcp cut: lost", report.lost.len());
    bus.drain().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blackhole_is_found_by_heartbeats_and_no_emit_outlives_its_deadline() {
    const DEADLINE: Duration = Duration::from_secs(3);
    let node = node().await;
    let relay = Relay::start(node.addr()).await.unwrap();
    let options = through(&relay, "blackhole")
        .heartbeat(Duration::from_secs(5))
        .connect_timeout(Duration::from_secs(3));
    let transport = AmqpTransport::connect(options).await.unwrap();
    let events = common::Recorder::start(&transport);
    let ledger = Ledger::new();
    let bus = consuming_bus(&transport, "blackhole", &ledger).await;
    let stop = Arc::new(AtomicBool::new(false));
    let emits = Arc::new(Emits::default());
    let emitting = emitter(
        &bus,
        &ledger,
        Duration::from_millis(20),
        stop.clone(),
        emits.clone(),
    );
    eventually(common::WAIT, "traffic before the blackhole", || async {
        (ledger.report().handled_unique >= 50).then_some(())
    })
    .await;

    let silenced = Instant::now();
    relay.blackhole();
    eventually(
        Duration::from_secs(90),
        "both connections to notice",
        || async {
            (events.first_after(silenced, lost(Link::Publish)).is_some()
                && events.first_after(silenced, lost(Link::Consume)).is_some())
            .then_some(())
        },
    )
    .await;
    let noticed = [Link::Publish, Link::Consume]
        .map(|link| events.first_after(silenced, lost(link)).unwrap() - silenced);
    let blocked = events
        .first_after(silenced, |e| matches!(e, Lifecycle::Blocked { .. }))
        .map(|at| at - silenced);
    eprintln!("blackhole noticed after {noticed:?}; stalled publishes reported after {blocked:?}");
    // Target ~2 heartbeats (10 s); asserted with generous slack.
    assert!(
        noticed.iter().all(|d| *d < Duration::from_secs(60)),
        "{noticed:?}"
    );
    assert!(health_not_ready(&transport));

    // Reconnect attempts hang in the blackhole until their timeout (3 s). The network heals
    // once the broker, too, has dropped the old connections (it misses heartbeats for 2-3
    // intervals before it does): healed earlier, the publishes held in the partition reach
    // the broker on the old connection *and* are resent on the new one, all of them
    // duplicates (at-least-once, but more of them).
    eventually(
        Duration::from_secs(60),
        "the broker to drop the old connections",
        || async {
            let connections = mesh_testkit::list_connections(Some(node.name()), None)
                .await
                .ok()?;
            (!connections.iter().any(|c| {
                c.connection_name
                    .as_deref()
                    .is_some_and(|n| n.starts_with("blackhole."))
            }))
            .then_some(())
        },
    )
    .await;
    let dropped_by_broker = silenced.elapsed();
    let healed = Instant::now();
    relay.pass();
    eventually(
        Duration::from_secs(60),
        "the transport to be ready again",
        || async { transport.health().is_ready().then_some(()) },
    )
    .await;
    let ready = healed.elapsed();
    // Some traffic after the recovery, then stop.
    let handled = ledger.report().handled_unique;
    eventually(common::WAIT, "traffic after the recovery", || async {
        (ledger.report().handled_unique >= handled + 50).then_some(())
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(Duration::from_secs(60), emitting)
        .await
        .expect("every emit returns")
        .unwrap();

    let longest = *emits.longest.lock().unwrap();
    let errors = emits.errors.lock().unwrap().clone();
    eprintln!("{} emits failed, e.g. {:?}", errors.len(), errors.first());
    // No emit waited past its deadline (plus scheduling slack on a loaded machine).
    assert!(longest < DEADLINE + Duration::from_secs(2), "{longest:?}");
    // Those that failed did so by their deadline: a timeout, or no room before it.
    assert!(
        errors.iter().all(|e| matches!(
            e,
            Some(TransportErrorKind::Timeout | TransportErrorKind::Backpressure)
        )),
        "{errors:#?}"
    );
    let report = ledger.wait_all_handled(Duration::from_secs(60)).await;
    eprintln!("{report}");
    report.assert_clean();
    let stats = transport.stats();
    eprintln!("{stats:?}");
    assert_eq!(stats.unknown_delivery_tag_closes, 0);
    common::measured("blackhole (heartbeat 5 s): noticed after", noticed);
    common::measured(
        "blackhole: stalled confirms reported blocked after",
        blocked,
    );
    common::measured(
        "blackhole: broker dropped the old connections after",
        dropped_by_broker,
    );
    common::measured("blackhole: ready again after the network healed", ready);
    common::measured("blackhole: longest emit (deadline 3 s)", longest);
    common::measured("blackhole: emits failed by their deadline", errors.len());
    common::measured("blackhole: emitted", emits.count.load(Ordering::Relaxed));
    common::measured("blackhole: resent", stats.resent);
    common::measured("blackhole: duplicates handled", report.duplicates);
    common::measured("blackhole: lost", report.lost.len());
    bus.drain().await.unwrap();
}

fn health_not_ready(transport: &AmqpTransport) -> bool {
    !transport.health().is_ready()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_node_is_replaced_by_the_next_address() {
    let node = node().await;
    // Two ways to the same node stand for two nodes of a cluster.
    let first = Relay::start(node.addr()).await.unwrap();
    let second = Relay::start(node.addr()).await.unwrap();
    let options = format!(
        "amqp://guest:guest@127.0.0.1:{},127.0.0.1:{}/",
        first.port(),
        second.port()
    )
    .parse::<AmqpOptions>()
    .unwrap()
    .connection_name("failover")
    .management_url("http://127.0.0.1:1");
    let transport = AmqpTransport::connect(options).await.unwrap();
    let events = common::Recorder::start(&transport);
    assert_eq!((first.active(), second.active()), (2, 0));
    let mut subscription = transport
        .subscribe(mesh_core::SubscriptionSpec {
            queue: mesh_core::QueueSpec::Durable {
                name: "n.failover.events".to_owned(),
            },
            patterns: vec![mesh_core::TopicPattern::parse("module.failover.#").unwrap()],
            prefetch: 4,
            retry_delays: vec![Duration::from_secs(1)],
        })
        .await
        .unwrap();

    // The first "node" goes away for good: nothing listens there any more.
    let gone = Instant::now();
    drop(first);
    eventually(
        common::WAIT,
        "both connections on the second address",
        || async { (transport.health().is_ready() && second.active() == 2).then_some(()) },
    )
    .await;
    let moved = gone.elapsed();
    let second_address = format!("127.0.0.1:{}", second.port());
    for link in [Link::Publish, Link::Consume] {
        assert!(
            events.count(|e| matches!(
                e,
                Lifecycle::Connected { link: l, address, reconnect: true }
                    if *l == link && *address == second_address
            )) == 1,
            "{link}: {:#?}",
            events.events()
        );
    }
    transport
        .publish(
            common::event("module.failover.x", "{}"),
            mesh_core::PublishOptions::default(),
        )
        .await
        .unwrap()
        .await
        .unwrap();
    common::next(&mut subscription).await.ack().await.unwrap();
    common::measured("failover to the next address: ready after", moved);
    transport.close().await;
}
