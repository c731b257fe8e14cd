//! The state machine on its own: transitions and the effects they return, with no broker,
//! no acker and no runtime. A test plays the broker's part where it needs to: it keeps a
//! handout (whose reserved slot stays taken) or drops it (which frees the slot).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use mesh_core::naming::{DEAD_EXCHANGE, EVENTS_EXCHANGE, RPC_EXCHANGE};
use mesh_core::transport::Delivery;
use mesh_core::WireMessage;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::{
    ConnectionId, Consumer, DelayedCopy, Discarded, Effect, Effects, Fault, Handout, Settlement,
    State,
};

fn message(key: &str, body: &'static str) -> WireMessage {
    WireMessage::new(key, body.as_bytes())
}

fn body(handout: &Handout) -> &str {
    std::str::from_utf8(&handout.message.body).expect("a UTF-8 body")
}

fn set(patterns: &[&str]) -> BTreeSet<String> {
    patterns.iter().map(|p| (*p).to_owned()).collect()
}

/// The subscriber's side of a consumer: kept alive so the consumer does not end.
struct Subscriber {
    _rx: mpsc::Receiver<Delivery>,
    _cancel: oneshot::Sender<()>,
}

/// A consumer of `connection` with manual acks.
fn consumer(
    connection: ConnectionId,
    limit: Option<usize>,
    capacity: usize,
) -> (Consumer, Subscriber) {
    let (tx, rx) = mpsc::channel(capacity);
    let (cancel_tx, cancel_rx) = oneshot::channel();
    let retry: Arc<[Duration]> = Arc::from(vec![Duration::from_secs(5)]);
    let consumer = Consumer::new(connection, tx, cancel_rx, limit, false, retry);
    let subscriber = Subscriber {
        _rx: rx,
        _cancel: cancel_tx,
    };
    (consumer, subscriber)
}

/// A durable queue bound on `mesh.events` with `patterns`.
fn durable(state: &mut State, name: &str, patterns: &[&str]) {
    state.declare_durable(name).expect("a valid queue name");
    state.set_bindings(EVENTS_EXCHANGE, name, &set(patterns));
}

/// The handouts among `fx`, in order; the other effects are dropped.
fn handouts(fx: Effects) -> Vec<Handout> {
    fx.into_vec()
        .into_iter()
        .filter_map(|effect| match effect {
            Effect::Deliver(handout) => Some(handout),
            _ => None,
        })
        .collect()
}

/// Takes the effects so far out of `fx`.
fn take(fx: &mut Effects) -> Effects {
    std::mem::take(fx)
}

fn tag(handout: &Handout) -> u64 {
    handout.ticket.as_ref().expect("a manual-ack delivery").tag
}

fn settle(
    state: &mut State,
    handout: &Handout,
    settlement: Settlement,
    fx: &mut Effects,
) -> Result<(), Fault> {
    let ticket = handout.ticket.as_ref().expect("a manual-ack delivery");
    state.settle(&ticket.queue, ticket.tag, ticket.connection, settlement, fx)
}

#[test]
fn publish_routes_by_topic_binding_one_copy_per_queue() {
    let mut state = State::new();
    let mut fx = Effects::default();
    durable(&mut state, "billing.orders", &["orders.*", "orders.#"]);
    durable(&mut state, "billing.payments", &["payments.#"]);
    durable(&mut state, "audit.all", &["#"]);

    let routed = state.publish(EVENTS_EXCHANGE, &message("orders.created", "o"), &mut fx);

    assert_eq!(routed, 2, "billing.orders once, audit.all once");
    assert_eq!(state.queue_depth("billing.orders"), Some(1));
    assert_eq!(state.queue_depth("billing.payments"), Some(0));
    assert_eq!(state.queue_depth("audit.all"), Some(1));
    // Bindings on `mesh.events` do not route what goes through `mesh.rpc`.
    assert_eq!(
        state.publish(RPC_EXCHANGE, &message("orders.created", "o"), &mut fx),
        0
    );
    assert_eq!(
        state.publish(EVENTS_EXCHANGE, &message("stock.low", "s"), &mut fx),
        1
    );
    assert_eq!(state.queue_depth("audit.all"), Some(2));
    assert!(handouts(fx).is_empty(), "no consumer, nothing delivered");
}

#[test]
fn set_bindings_replaces_stale_patterns() {
    let mut state = State::new();
    durable(&mut state, "q", &["a.*", "b.*"]);
    state.set_bindings(EVENTS_EXCHANGE, "q", &set(&["b.*", "c.#"]));
    assert_eq!(
        state.bindings("q"),
        vec!["b.*".to_owned(), "c.#".to_owned()]
    );
    let mut fx = Effects::default();
    assert_eq!(
        state.publish(EVENTS_EXCHANGE, &message("a.x", "a"), &mut fx),
        0
    );
    assert_eq!(
        state.publish(EVENTS_EXCHANGE, &message("c.x.y", "c"), &mut fx),
        1
    );
}

#[test]
fn a_transition_delivers_only_through_its_effects() {
    let mut state = State::new();
    let mut fx = Effects::default();
    durable(&mut state, "q", &["#"]);
    let (tx, mut rx) = mpsc::channel(4);
    let (_cancel_tx, cancel_rx) = oneshot::channel();
    let c = state.open_connection();
    state.add_consumer(
        "q",
        Consumer::new(c, tx, cancel_rx, Some(4), false, Arc::from(Vec::new())),
        &mut fx,
    );
    state.publish(EVENTS_EXCHANGE, &message("k", "one"), &mut fx);

    assert!(
        rx.try_recv().is_err(),
        "the state sent nothing on the consumer's channel itself"
    );
    let handouts = handouts(fx);
    assert_eq!(handouts.len(), 1);
    assert_eq!(body(&handouts[0]), "one");
    assert_eq!(handouts[0].queue, "q");
    assert_eq!(state.unacked("q"), Some(1));
}

#[test]
fn delivery_respects_prefetch() {
    let mut state = State::new();
    let mut fx = Effects::default();
    durable(&mut state, "q", &["#"]);
    let c = state.open_connection();
    let (consumer, _sub) = consumer(c, Some(2), 16);
    state.add_consumer("q", consumer, &mut fx);
    for body in ["a", "b", "c"] {
        state.publish(EVENTS_EXCHANGE, &message("k", body), &mut fx);
    }

    let first = handouts(take(&mut fx));
    assert_eq!(first.iter().map(body).collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(state.queue_depth("q"), Some(1), "c waits for a free slot");
    assert_eq!(state.unacked("q"), Some(2));

    settle(&mut state, &first[0], Settlement::Ack, &mut fx).expect("an unsettled delivery");
    let second = handouts(take(&mut fx));
    assert_eq!(second.iter().map(body).collect::<Vec<_>>(), ["c"]);
    assert_eq!(state.queue_depth("q"), Some(0));
    assert_eq!(state.unacked("q"), Some(2));
}

#[test]
fn competing_consumers_take_turns() {
    let mut state = State::new();
    let mut fx = Effects::default();
    durable(&mut state, "q", &["#"]);
    let c = state.open_connection();
    let (one, _s1) = consumer(c, Some(10), 10);
    let (two, _s2) = consumer(c, Some(10), 10);
    state.add_consumer("q", one, &mut fx);
    state.add_consumer("q", two, &mut fx);
    for body in ["a", "b", "c", "d"] {
        state.publish(EVENTS_EXCHANGE, &message("k", body), &mut fx);
    }
    let handouts = handouts(fx);
    assert_eq!(handouts.len(), 4);
    // A handout's reserved slot is in the channel of the consumer it goes to.
    let same = |a: &Handout, b: &Handout| a.permit.same_channel(&b.permit);
    assert!(!same(&handouts[0], &handouts[1]));
    assert!(same(&handouts[0], &handouts[2]));
    assert!(same(&handouts[1], &handouts[3]));
}

#[test]
fn release_puts_the_message_back_at_its_place_redelivered() {
    let mut state = State::new();
    let mut fx = Effects::default();
    durable(&mut state, "q", &["#"]);
    let c = state.open_connection();
    let (consumer, _sub) = consumer(c, Some(1), 4);
    state.add_consumer("q", consumer, &mut fx);
    state.publish(EVENTS_EXCHANGE, &message("k", "a"), &mut fx);
    state.publish(EVENTS_EXCHANGE, &message("k", "b"), &mut fx);
    let first = handouts(take(&mut fx));
    assert_eq!(first.len(), 1);
    assert!(!first[0].redelivered);
    assert_eq!(first[0].delivery_count, 0);

    settle(&mut state, &first[0], Settlement::Release, &mut fx).expect("an unsettled delivery");

    let again = handouts(take(&mut fx));
    assert_eq!(again.len(), 1);
    assert_eq!(body(&again[0]), "a", "ahead of b, at its original place");
    assert!(again[0].redelivered);
    assert_eq!(again[0].delivery_count, 1);
    assert_ne!(tag(&again[0]), tag(&first[0]), "a new delivery tag");
    assert_eq!(state.queue_depth("q"), Some(1));
}

#[test]
fn a_full_channel_asks_the_broker_to_wait_for_room_once() {
    let mut state = State::new();
    let mut fx = Effects::default();
    durable(&mut state, "q", &["#"]);
    let c = state.open_connection();
    // No prefetch limit: only the channel (one slot) holds deliveries back.
    let (consumer, _sub) = consumer(c, None, 1);
    state.add_consumer("q", consumer, &mut fx);
    state.publish(EVENTS_EXCHANGE, &message("k", "a"), &mut fx);
    state.publish(EVENTS_EXCHANGE, &message("k", "b"), &mut fx);
    state.publish(EVENTS_EXCHANGE, &message("k", "c"), &mut fx);

    let mut delivered = Vec::new();
    let mut waiters = Vec::new();
    for effect in take(&mut fx).into_vec() {
        match effect {
            Effect::Deliver(handout) => delivered.push(handout),
            Effect::AwaitRoom(waiter) => waiters.push(waiter),
            other => panic!("unexpected effect {other:?}"),
        }
    }
    assert_eq!(delivered.len(), 1, "one slot, one delivery");
    assert_eq!(
        waiters.len(),
        1,
        "one waiter, however many dispatches found no room"
    );
    assert_eq!(state.queue_depth("q"), Some(2));

    // The broker's waiter returns once the slot is free again (here: the handout dropped
    // instead of sent, which gives its slot back).
    let waiter = waiters.remove(0);
    drop(delivered);
    state.room_freed(&waiter.queue, waiter.consumer, &mut fx);
    let next = handouts(take(&mut fx));
    assert_eq!(next.iter().map(body).collect::<Vec<_>>(), ["b"]);
}

#[test]
fn retry_sends_a_copy_down_the_ladder_and_back_to_the_tail() {
    let mut state = State::new();
    let mut fx = Effects::default();
    durable(&mut state, "q", &["#"]);
    let c = state.open_connection();
    let (consumer, _sub) = consumer(c, Some(1), 4);
    state.add_consumer("q", consumer, &mut fx);
    state.publish(EVENTS_EXCHANGE, &message("k", "a"), &mut fx);
    state.publish(EVENTS_EXCHANGE, &message("k", "b"), &mut fx);
    let first = handouts(take(&mut fx));

    let copy = message("k", "a-retry");
    let delay = Duration::from_secs(5);
    settle(
        &mut state,
        &first[0],
        Settlement::Retry { copy, delay },
        &mut fx,
    )
    .expect("an unsettled delivery");

    let mut delayed: Vec<DelayedCopy> = Vec::new();
    let mut delivered = Vec::new();
    for effect in take(&mut fx).into_vec() {
        match effect {
            Effect::Delay(copy) => delayed.push(copy),
            Effect::Deliver(handout) => delivered.push(handout),
            other => panic!("unexpected effect {other:?}"),
        }
    }
    assert_eq!(delayed.len(), 1);
    assert_eq!(delayed[0].queue, "q");
    assert_eq!(delayed[0].delay, delay);
    assert_eq!(state.delayed("q"), Some(1));
    assert_eq!(
        delivered.iter().map(body).collect::<Vec<_>>(),
        ["b"],
        "the retried original left the queue and freed its prefetch slot"
    );

    settle(&mut state, &delivered[0], Settlement::Ack, &mut fx).expect("an unsettled delivery");
    assert!(handouts(take(&mut fx)).is_empty());
    let back = delayed.remove(0);
    state.return_delayed(&back.queue, back.copy, &mut fx);
    let returned = handouts(take(&mut fx));
    assert_eq!(state.delayed("q"), Some(0));
    assert_eq!(returned.iter().map(body).collect::<Vec<_>>(), ["a-retry"]);
    assert!(!returned[0].redelivered, "a fresh copy, not a redelivery");
    assert_eq!(returned[0].delivery_count, 0);
}

#[test]
fn a_retry_copy_whose_queue_is_gone_is_dropped() {
    let mut state = State::new();
    let mut fx = Effects::default();
    state.return_delayed("nowhere", message("k", "a"), &mut fx);
    assert!(fx.into_vec().is_empty());
    assert!(state.queue_names().is_empty());
}

#[test]
fn dead_letter_publishes_the_copy_on_the_dead_exchange() {
    let mut state = State::new();
    let mut fx = Effects::default();
    durable(&mut state, "q", &["#"]);
    state.declare_durable("dead").expect("a valid queue name");
    state.set_bindings(DEAD_EXCHANGE, "dead", &set(&["#"]));
    let c = state.open_connection();
    let (consumer, _sub) = consumer(c, Some(1), 4);
    state.add_consumer("q", consumer, &mut fx);
    state.publish(EVENTS_EXCHANGE, &message("orders.created", "a"), &mut fx);
    let first = handouts(take(&mut fx));

    let copy = message("orders.created", "a-dead");
    settle(&mut state, &first[0], Settlement::DeadLetter(copy), &mut fx)
        .expect("an unsettled delivery");

    assert_eq!(state.queue_depth("dead"), Some(1));
    assert_eq!(state.queue_depth("q"), Some(0));
    assert_eq!(state.unacked("q"), Some(0));
}

#[test]
fn a_dead_letter_is_routed_by_its_queue_name_and_keeps_its_key() {
    let mut state = State::new();
    let mut fx = Effects::default();
    durable(&mut state, "n1.billing.events", &["#"]);
    // A tap of billing's own queues, one of umami's, and one of every dead letter.
    for (tap, pattern) in [
        ("billing-tap", "*.billing.events"),
        ("umami-tap", "*.umami.events"),
        ("all", "#"),
    ] {
        state.declare_durable(tap).expect("a valid queue name");
        state.set_bindings(DEAD_EXCHANGE, tap, &set(&[pattern]));
    }
    let c = state.open_connection();
    let (consumer, _sub) = consumer(c, Some(1), 4);
    state.add_consumer("n1.billing.events", consumer, &mut fx);
    state.publish(EVENTS_EXCHANGE, &message("module.shop.a", "a"), &mut fx);
    let first = handouts(take(&mut fx));
    let copy = message("module.shop.a", "a-dead");
    settle(&mut state, &first[0], Settlement::DeadLetter(copy), &mut fx)
        .expect("an unsettled delivery");
    assert_eq!(state.queue_depth("billing-tap"), Some(1));
    assert_eq!(state.queue_depth("umami-tap"), Some(0));
    assert_eq!(state.queue_depth("all"), Some(1));
}

#[test]
fn a_reply_goes_to_the_waiting_call_and_a_late_one_is_counted() {
    let mut state = State::new();
    let mut fx = Effects::default();
    let server = state.open_connection();
    let caller = state.open_connection();
    state
        .declare_durable("serve.billing")
        .expect("a valid queue name");
    state.set_bindings(RPC_EXCHANGE, "serve.billing", &set(&["billing.quote"]));
    let (consumer, _sub) = consumer(server, Some(4), 4);
    state.add_consumer("serve.billing", consumer, &mut fx);

    let (call, _answer) = oneshot::channel();
    let timeout = Duration::from_secs(3);
    state
        .send_request(
            caller,
            "billing.quote",
            message("", "q1"),
            "c-1",
            timeout,
            call,
            &mut fx,
        )
        .expect("a server is bound");
    let requests = handouts(take(&mut fx));
    assert_eq!(requests.len(), 1);
    let properties = &requests[0].message.properties;
    assert_eq!(requests[0].message.routing_key, "billing.quote");
    assert_eq!(properties.correlation_id.as_deref(), Some("c-1"));
    assert_eq!(properties.expiration, Some(timeout));
    let reply_to = properties.reply_to.clone().expect("a reply queue");
    assert!(state.has_queue(&reply_to));

    settle(
        &mut state,
        &requests[0],
        Settlement::Reply(message("", "r1")),
        &mut fx,
    )
    .expect("an unsettled request");
    let answers: Vec<_> = take(&mut fx)
        .into_vec()
        .into_iter()
        .filter_map(|effect| match effect {
            Effect::Answer {
                connection, reply, ..
            } => Some((connection, reply)),
            _ => None,
        })
        .collect();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].0, caller);
    assert_eq!(
        answers[0].1.properties.correlation_id.as_deref(),
        Some("c-1")
    );
    assert_eq!(state.late_replies(caller), 0);

    // A second request whose call is forgotten (timed out) before the reply comes.
    let (call, _answer) = oneshot::channel();
    state
        .send_request(
            caller,
            "billing.quote",
            message("", "q2"),
            "c-2",
            timeout,
            call,
            &mut fx,
        )
        .expect("a server is bound");
    let requests = handouts(take(&mut fx));
    state.forget_call(caller, "c-2", &mut fx);
    assert!(matches!(
        take(&mut fx).into_vec().as_slice(),
        [Effect::Discard(Discarded::Calls(_))]
    ));
    settle(
        &mut state,
        &requests[0],
        Settlement::Reply(message("", "r2")),
        &mut fx,
    )
    .expect("an unsettled request");
    assert!(handouts(take(&mut fx)).is_empty());
    assert_eq!(state.late_replies(caller), 1);
}

#[test]
fn closing_a_connection_removes_its_exclusive_queues_and_requeues_its_deliveries() {
    let mut state = State::new();
    let mut fx = Effects::default();
    let c1 = state.open_connection();
    let c2 = state.open_connection();
    durable(&mut state, "q", &["#"]);
    let tap = state.declare_ephemeral(c1);
    state.set_bindings(EVENTS_EXCHANGE, &tap, &set(&["#"]));
    let (tap_consumer, _tap_sub) = consumer(c1, None, 8);
    state.add_consumer(&tap, tap_consumer, &mut fx);
    let (one, _s1) = consumer(c1, Some(1), 4);
    state.add_consumer("q", one, &mut fx);
    state.publish(EVENTS_EXCHANGE, &message("k", "a"), &mut fx);
    let first = handouts(take(&mut fx));
    assert_eq!(first.len(), 2, "the tap and the durable queue");
    assert_eq!(state.unacked("q"), Some(1));

    let (two, _s2) = consumer(c2, Some(1), 4);
    state.add_consumer("q", two, &mut fx);
    assert!(handouts(take(&mut fx)).is_empty(), "a is out with c1");

    state.close(c1, &mut fx);

    assert!(
        !state.has_queue(&tap),
        "the exclusive queue went with its connection"
    );
    assert!(state
        .exchange_bindings(EVENTS_EXCHANGE)
        .iter()
        .all(|(q, _)| q != &tap));
    assert!(!state.is_open(c1));
    assert_eq!(state.ensure_open(c1), Err(Fault::Closed));
    assert_eq!(state.consumer_count("q"), Some(1));
    let effects = take(&mut fx).into_vec();
    let discarded = effects
        .iter()
        .filter(|e| matches!(e, Effect::Discard(Discarded::Channel(_))))
        .count();
    assert_eq!(
        discarded, 2,
        "c1's two consumers' channels, dropped after unlocking"
    );
    let redelivered: Vec<_> = effects
        .into_iter()
        .filter_map(|effect| match effect {
            Effect::Deliver(handout) => Some(handout),
            _ => None,
        })
        .collect();
    assert_eq!(redelivered.len(), 1, "a goes to c2");
    assert!(redelivered[0].redelivered);
    assert_eq!(
        redelivered[0].ticket.as_ref().map(|t| t.connection),
        Some(c2)
    );
    assert_eq!(
        settle(&mut state, &first[1], Settlement::Ack, &mut fx),
        Err(Fault::ConnectionLost),
        "c1's delivery can no longer be settled"
    );
}

#[test]
fn an_ephemeral_queue_goes_when_its_consumer_does() {
    let mut state = State::new();
    let mut fx = Effects::default();
    let c = state.open_connection();
    let tap = state.declare_ephemeral(c);
    let (tap_consumer, subscriber) = consumer(c, None, 8);
    state.add_consumer(&tap, tap_consumer, &mut fx);
    state.sweep(&mut fx);
    assert!(state.has_queue(&tap));

    drop(subscriber);
    state.sweep(&mut fx);

    assert!(!state.has_queue(&tap));
    assert!(matches!(
        take(&mut fx).into_vec().as_slice(),
        [Effect::Discard(Discarded::Channel(_))]
    ));
}

#[test]
fn an_expired_message_is_never_delivered() {
    let mut state = State::new();
    let mut fx = Effects::default();
    let start = Instant::now();
    state.set_clock(start);
    durable(&mut state, "q", &["#"]);
    let mut short = message("k", "short");
    short.properties.expiration = Some(Duration::from_secs(1));
    state.publish(EVENTS_EXCHANGE, &short, &mut fx);
    state.publish(EVENTS_EXCHANGE, &message("k", "long"), &mut fx);
    assert_eq!(state.queue_depth("q"), Some(2));

    state.set_clock(start + Duration::from_secs(2));
    assert_eq!(state.queue_depth("q"), Some(1));
    let c = state.open_connection();
    let (consumer, _sub) = consumer(c, None, 8);
    state.add_consumer("q", consumer, &mut fx);
    let delivered = handouts(fx);
    assert_eq!(delivered.iter().map(body).collect::<Vec<_>>(), ["long"]);
}

#[test]
fn a_zero_expiration_is_delivered_at_once_or_dropped() {
    let mut state = State::new();
    let mut fx = Effects::default();
    durable(&mut state, "q", &["#"]);
    let mut now_or_never = message("k", "now");
    now_or_never.properties.expiration = Some(Duration::ZERO);
    state.publish(EVENTS_EXCHANGE, &now_or_never, &mut fx);
    assert_eq!(state.queue_depth("q"), Some(0), "no consumer: dropped");

    let c = state.open_connection();
    let (consumer, _sub) = consumer(c, None, 8);
    state.add_consumer("q", consumer, &mut fx);
    state.publish(EVENTS_EXCHANGE, &now_or_never, &mut fx);
    assert_eq!(handouts(fx).len(), 1);
}

#[test]
fn faults() {
    let mut state = State::new();
    let mut fx = Effects::default();
    assert_eq!(state.declare_durable(""), Err(Fault::BadQueueName));
    assert_eq!(
        state.declare_durable(&"q".repeat(256)),
        Err(Fault::BadQueueName)
    );
    assert!(state.declare_durable(&"q".repeat(255)).is_ok());
    assert_eq!(
        state.declare_durable("amq.gen-1"),
        Err(Fault::ReservedQueueName("amq.gen-1".to_owned()))
    );

    let c = state.open_connection();
    let (call, _answer) = oneshot::channel();
    let timeout = Duration::from_secs(1);
    assert_eq!(
        state.send_request(
            c,
            "nobody.home",
            message("", "q"),
            "c-1",
            timeout,
            call,
            &mut fx
        ),
        Err(Fault::NoServer("nobody.home".to_owned()))
    );

    durable(&mut state, "q", &["#"]);
    let (consumer, _sub) = consumer(c, Some(4), 4);
    state.add_consumer("q", consumer, &mut fx);
    state.publish(EVENTS_EXCHANGE, &message("k", "a"), &mut fx);
    state.publish(EVENTS_EXCHANGE, &message("k", "b"), &mut fx);
    let delivered = handouts(take(&mut fx));
    settle(&mut state, &delivered[0], Settlement::Ack, &mut fx).expect("an unsettled delivery");
    assert_eq!(
        settle(&mut state, &delivered[0], Settlement::Ack, &mut fx),
        Err(Fault::UnknownTag(tag(&delivered[0]))),
        "settled twice"
    );
    assert_eq!(
        state.settle("gone", tag(&delivered[1]), c, Settlement::Ack, &mut fx),
        Err(Fault::QueueGone("gone".to_owned()))
    );

    state.close(c, &mut fx);
    assert_eq!(state.ensure_open(c), Err(Fault::Closed));
    let (call, _answer) = oneshot::channel();
    assert_eq!(
        state.send_request(c, "k", message("", "q"), "c-2", timeout, call, &mut fx),
        Err(Fault::Closed)
    );
    assert_eq!(
        settle(&mut state, &delivered[1], Settlement::Ack, &mut fx),
        Err(Fault::ConnectionLost)
    );
    assert_eq!(
        state.queue_depth("q"),
        Some(1),
        "b was requeued when c closed"
    );
}
