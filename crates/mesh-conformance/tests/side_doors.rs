//! The side doors of broker-enforced identity, on a private RabbitMQ node with the access
//! plan applied: what a module's user can do beyond publishing (exchange-to-exchange
//! bindings, exchanges of its own) must not let it speak as another module.
//!
//! The spec: module `billing` reads `module.shop.#` and `module.umami.#`, module `umami` reads
//! `module.other.#`, module `shop` reads nothing. umami tries every source exchange (each
//! mesh exchange, the retired `mesh.reply`, each `amq.*` built-in, one it declares itself) ×
//! every mesh destination: each `exchange.bind` the broker allows is then used to route an
//! event forged as shop's (`x-source: shop`, `x-mesh-user: module.shop`, under shop's key
//! `module.shop.order.placed` or, where the broker keeps umami to its own keys, umami's)
//! into billing's queue, which with identity enforced must never handle it, nor the audit
//! logger enforcing identity store as an event (the node runs one). umami may not
//! declare an exchange at all: under the plan its `configure` covers server-named queues
//! only, and the operator declares every durable queue (as `mesh topology apply` does). And
//! replies: no user can bind under another's reply key on `mesh.replies`.

#![allow(clippy::unwrap_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqprs::channel::{
    BasicPublishArguments, ExchangeBindArguments, ExchangeDeclareArguments, ExchangeUnbindArguments,
};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{BasicProperties, FieldTable, FieldValue};
use bytes::Bytes;
use mesh::amqp::access::AccessSpec;
use mesh::{Bus, HandlerError, Incoming};
use mesh_amqp::AmqpTransport;
use mesh_audit::{AuditLogger, AuditOptions, DeadLetterQuery, Store, StoreOptions};
use mesh_core::codec::{self, DeadReason};
use mesh_core::{EventId, Name, RetryPolicy, TopicPattern};
use mesh_testkit::planned::PlannedNode;
use mesh_testkit::{eventually, TempStore};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(30);

/// Every exchange mesh declares, and the retired `mesh.reply` (absent here: a source or a
/// destination the broker refuses with `404`).
const MESH_EXCHANGES: [&str; 7] = [
    "mesh.events",
    "mesh.rpc",
    "mesh.events.dead",
    "mesh.retry",
    "mesh.replies",
    "mesh.logs",
    "mesh.reply",
];

/// RabbitMQ's built-in exchanges.
const BUILT_IN: [&str; 6] = [
    "amq.direct",
    "amq.fanout",
    "amq.headers",
    "amq.match",
    "amq.topic",
    "amq.rabbitmq.trace",
];

/// The exchange umami tries to declare (its queues' configure pattern matched it once; the
/// plan now gives it `configure` on server-named queues only).
const OWN_EXCHANGE: &str = "x.umami.events";

/// The forged event's key: shop's, which billing reads.
const FORGED_KEY: &str = "module.shop.order.placed";

/// A key of umami's own, which billing reads too: where the broker lets umami bind only its
/// own keys (`mesh.replies`), the forgery goes under it, still claiming to be shop's.
const UMAMI_KEY: &str = "module.umami.order.placed";

struct Broker {
    planned: PlannedNode,
}

fn access_spec() -> AccessSpec {
    AccessSpec::new(Name::parse("n1").unwrap())
        .module(
            Name::parse("billing").unwrap(),
            [
                TopicPattern::parse("module.shop.#").unwrap(),
                TopicPattern::parse("module.umami.#").unwrap(),
            ],
        )
        .module(
            Name::parse("umami").unwrap(),
            [TopicPattern::parse("module.other.#").unwrap()],
        )
        .module(Name::parse("shop").unwrap(), [])
        .audit_logger(true)
}

impl Broker {
    /// A private node with the plan applied; the operator (the node's `guest`) declared the
    /// exchanges, as `mesh topology apply` would.
    async fn start() -> Broker {
        Broker {
            planned: PlannedNode::start(&access_spec())
                .await
                .expect("a private node under the access plan"),
        }
    }

    fn password(&self, user: &str) -> String {
        self.planned.password(user).to_owned()
    }

    async fn transport(&self, user: &str) -> AmqpTransport {
        let options: mesh_amqp::AmqpOptions =
            self.planned.node.url().parse().expect("the node's URL");
        mesh::amqp::connect(
            options
                .credentials(user, self.password(user))
                .connection_name(format!("side-doors-{user}")),
        )
        .await
        .unwrap_or_else(|e| panic!("{user} connects: {e}"))
    }

    async fn raw(&self, user: &str) -> Connection {
        let args = OpenConnectionArguments::new(
            "127.0.0.1",
            self.planned.node.port(),
            user,
            &self.password(user),
        );
        Connection::open(&args).await.expect("raw connection")
    }
}

/// An event forged as shop's, published by umami's user (its `user-id` validated).
fn forged(id: &str) -> BasicProperties {
    let mut headers = FieldTable::new();
    for (name, value) in [
        (codec::EVENT_ID, id.to_owned()),
        (codec::SOURCE, "shop".to_owned()),
        (codec::NODE, "n1".to_owned()),
        (codec::TIME, "2026-12-02T00:00:00Z".to_owned()),
        (codec::USER, "module.shop".to_owned()),
        (codec::ROUTING_KEY, FORGED_KEY.to_owned()),
    ] {
        headers.insert(
            name.try_into().unwrap(),
            FieldValue::S(value.try_into().unwrap()),
        );
    }
    let mut props = BasicProperties::default();
    props
        .with_content_type("application/json")
        .with_delivery_mode(2)
        .with_user_id("module.umami")
        .with_headers(headers);
    props
}

/// The keys umami binds and publishes under to reach billing's queue from `source` through
/// `destination`.
fn keys_to_billing(source: &str, destination: &str) -> Vec<&'static str> {
    match (source, destination) {
        // billing's queue is bound there on its own name (its retry copies coming back).
        (_, "mesh.retry") => vec!["n1.billing.events"],
        // umami may bind only its own reply keys on `mesh.replies`: shop's is refused, and
        // its own is a key billing reads on `mesh.events`.
        ("mesh.replies", _) => vec![FORGED_KEY, UMAMI_KEY],
        _ => vec![FORGED_KEY],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_exchange_umami_may_bind_lets_it_speak_as_shop() {
    let broker = Broker::start().await;
    // billing's queue is the operator's to declare: billing's user may not.
    broker
        .planned
        .declare_consumer(
            "n1",
            "billing",
            &["module.shop.#", "module.umami.#"],
            &RetryPolicy::default(),
        )
        .await
        .expect("the operator declares billing's queues");

    // The audit logger, as its planned user, enforcing identity: it reads every event.
    let temp = TempStore::sqlite();
    let store = Store::open(StoreOptions::url(temp.url()).unwrap())
        .await
        .expect("the audit store");
    let logger_transport = broker
        .planned
        .transport("audit-logger.n1")
        .await
        .expect("the audit logger connects");
    let shutdown = CancellationToken::new();
    let logger = {
        let logger = AuditLogger::new(
            store.clone(),
            AuditOptions::new()
                .node("n1")
                .enforce_identity(Some(String::new())),
        );
        let (transport, shutdown) = (logger_transport.clone(), shutdown.clone());
        tokio::spawn(async move { logger.run(transport.as_ref(), &shutdown).await })
    };
    eventually(WAIT, "the logger's two consumers", || {
        let attached = mesh_core::Transport::health(logger_transport.as_ref()).consumers_attached;
        async move { (attached >= 2).then_some(()) }
    })
    .await;

    let handled = Arc::new(Mutex::new(Vec::<String>::new()));
    let billing_transport = Arc::new(broker.transport("module.billing").await);
    let billing = {
        let handled = handled.clone();
        Bus::builder()
            .node("n1")
            .module("billing")
            .enforce_identity(true)
            .on_raw(
                ["module.shop.#", "module.umami.#"],
                move |incoming: Incoming<Bytes>| {
                    let handled = handled.clone();
                    async move {
                        handled.lock().unwrap().push(incoming.meta.id().to_string());
                        Ok::<(), HandlerError>(())
                    }
                },
            )
            .start(billing_transport.clone())
            .await
            .expect("billing starts as its own user")
    };
    // The operator reads every dead letter.
    let operator = Bus::builder()
        .node("n1")
        .module("ops")
        .start(Arc::new(
            mesh::amqp::connect(broker.planned.node.url().parse().unwrap())
                .await
                .expect("the operator connects"),
        ))
        .await
        .expect("the operator's bus starts");
    let mut dead = operator
        .all_dead_letters()
        .await
        .expect("a tap of dead letters");

    let umami = broker.raw("module.umami").await;
    // An exchange of umami's own, named like its queue or like anything else: refused (the
    // broker closes the channel), so it is no source of the table.
    for name in [OWN_EXCHANGE, "n1.umami.events", "serve.umami.echo"] {
        let channel = umami.open_channel(None).await.unwrap();
        let declared = channel
            .exchange_declare(ExchangeDeclareArguments::new(name, "topic"))
            .await;
        assert!(declared.is_err(), "umami declared exchange {name}");
    }
    let exchanges = broker
        .planned
        .management()
        .exchanges("/")
        .await
        .expect("the exchanges listed");
    assert!(
        !exchanges
            .iter()
            .any(|e| e.name == OWN_EXCHANGE || e.name.contains("umami")),
        "{exchanges:?}"
    );

    let sources: Vec<&str> = MESH_EXCHANGES
        .iter()
        .chain(BUILT_IN.iter())
        .copied()
        .chain(std::iter::once(OWN_EXCHANGE))
        .collect();
    let mut allowed = Vec::new();
    let mut forged_ids = Vec::new();
    // Those routed into `mesh.events`, where the audit logger's queue is bound on `#`.
    let mut into_events = Vec::new();
    for source in &sources {
        for destination in MESH_EXCHANGES {
            for key in keys_to_billing(source, destination) {
                let channel = umami.open_channel(None).await.unwrap();
                let bound = channel
                    .exchange_bind(ExchangeBindArguments::new(destination, source, key))
                    .await;
                if bound.is_err() {
                    // Refused: the broker closed the channel.
                    continue;
                }
                allowed.push(format!("{source} -> {destination} on {key}"));
                let id = uuid::Uuid::new_v4().to_string();
                channel
                    .basic_publish(
                        forged(&id),
                        b"{}".to_vec(),
                        BasicPublishArguments::new(source, key),
                    )
                    .await
                    .expect("published");
                if destination == "mesh.events" {
                    into_events.push(id.clone());
                }
                forged_ids.push(id);
                // Each pair alone: the binding goes once the forgery is routed (in the channel's
                // order), so no later publish takes it.
                channel
                    .exchange_unbind(ExchangeUnbindArguments::new(destination, source, key))
                    .await
                    .expect("umami removes its own binding");
                let _ = channel.close().await;
            }
        }
    }
    // The broker refuses every pair but those through exchanges umami may read under keys it
    // may bind: `mesh.replies` under its own keys only, `mesh.events.dead` (any key). Never
    // shop's key on `mesh.replies`, never from an exchange of umami's own.
    assert!(
        allowed.iter().all(|pair| (pair.starts_with("mesh.replies ")
            && pair.ends_with(&format!(" on {UMAMI_KEY}")))
            || pair.starts_with("mesh.events.dead ")),
        "{allowed:?}"
    );
    // The pair the broker must allow: its forgery is the trusted path's to stop.
    assert!(
        allowed.contains(&format!("mesh.replies -> mesh.events on {UMAMI_KEY}")),
        "{allowed:?}"
    );
    assert!(!forged_ids.is_empty(), "no pair to try a forgery through");

    // A genuine event of shop's after them all: once it is handled, every forgery before it
    // in billing's queue was decided.
    let shop = Bus::builder()
        .node("n1")
        .module("shop")
        .start(Arc::new(broker.transport("module.shop").await))
        .await
        .expect("shop starts");
    let genuine = shop
        .emit_outgoing(mesh::Outgoing::json("order.placed", &serde_json::json!({"id": 1})).unwrap())
        .await
        .expect("shop emits its own event")
        .to_string();
    eventually(WAIT, "shop's genuine event is handled", || {
        let handled = handled.lock().unwrap().clone();
        let genuine = genuine.clone();
        async move { handled.contains(&genuine).then_some(()) }
    })
    .await;
    let handled_now = handled.lock().unwrap().clone();
    assert_eq!(
        handled_now,
        std::slice::from_ref(&genuine),
        "a forgery was handled: {allowed:?}"
    );

    // Each forgery that reached billing's queue by a foreign path was counted, and those
    // not published to `mesh.events.dead` dead-lettered `foreign-path` by billing, with
    // umami (the validated publisher) as their user, not shop.
    let through_dead = allowed
        .iter()
        .filter(|p| p.starts_with("mesh.events.dead ") && reaches_billing(p))
        .count();
    let expected_dead = allowed
        .iter()
        .filter(|p| !p.starts_with("mesh.events.dead ") && reaches_billing(p))
        .count();
    let mut foreign = 0;
    while foreign < expected_dead {
        let letter = tokio::time::timeout(WAIT, dead.next())
            .await
            .expect("a dead letter in time")
            .expect("the tap is open");
        let Some(note) = letter.note.clone() else {
            continue;
        };
        // The audit logger's own (from its queue) are looked at below.
        if note.reason != DeadReason::ForeignPath || note.queue != "n1.billing.events" {
            continue;
        }
        assert_eq!(
            codec::validated_user(&letter.message),
            Some("module.umami"),
            "the forged x-mesh-user is not carried on"
        );
        assert!(
            note.last_error
                .as_deref()
                .unwrap_or("")
                .contains("delivered through"),
            "{note:?}"
        );
        foreign += 1;
    }
    eventually(
        WAIT,
        "every forgery that reached billing is counted",
        || {
            let stats = billing_transport.stats();
            async move {
                // At least: a dead-letter copy may take a binding from `mesh.events.dead` still
                // there back to billing's queue, where it is counted (and acked) again.
                (stats.foreign_deliveries >= (expected_dead + through_dead) as u64).then_some(())
            }
        },
    )
    .await;
    assert!(expected_dead > 0, "{allowed:?}");
    eprintln!("pairs the broker allowed: {allowed:?}");

    // The audit logger stored the genuine event as shop's, and each forgery that reached its
    // queue it dead-lettered (it is among the dead letters it stored, from its own queue) and
    // never stored as an event: as nobody's, so not as shop's.
    let genuine_id: EventId = genuine.parse().unwrap();
    let stored = eventually(WAIT, "the logger stores shop's genuine event", || {
        let store = store.clone();
        async move { store.event(genuine_id).await.unwrap() }
    })
    .await;
    assert_eq!(stored.source, "shop");
    assert_eq!(stored.publisher.as_deref(), Some("module.shop"));
    assert!(!into_events.is_empty(), "{allowed:?}");
    for id in &into_events {
        let id: EventId = id.parse().unwrap();
        let letter = eventually(WAIT, "the logger dead-letters a forgery", || {
            let store = store.clone();
            async move {
                let query = DeadLetterQuery::new()
                    .event_id(id)
                    .queue("n1.audit-logger.events");
                store.dead_letters(&query).await.unwrap().into_iter().next()
            }
        })
        .await;
        assert_eq!(letter.user_id.as_deref(), Some("audit-logger.n1"));
        assert!(
            store.event(id).await.unwrap().is_none(),
            "a forgery was stored"
        );
    }

    let _ = umami.close().await;
    shop.close().await;
    operator.close().await;
    billing.close().await;
    shutdown.cancel();
    logger
        .await
        .expect("the logger's task")
        .expect("the logger stops cleanly");
    logger_transport.close().await;
    store.close().await;
}

/// Whether a forgery through `pair` reaches billing's queue: through `mesh.events` (bound on
/// shop's and umami's keys) or `mesh.retry` (bound on its own name).
fn reaches_billing(pair: &str) -> bool {
    pair.contains("-> mesh.events on ") || pair.contains("-> mesh.retry on ")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_with_identity_enforced_knows_its_caller_and_refuses_a_claimed_one() {
    let broker = Broker::start().await;
    broker
        .planned
        .declare_tool("billing.quote")
        .await
        .expect("the operator declares billing's tool queue");
    let callers = Arc::new(Mutex::new(Vec::<(String, Option<String>)>::new()));
    let billing = {
        let callers = callers.clone();
        Bus::builder()
            .node("n1")
            .module("billing")
            .enforce_identity(true)
            .serve(
                "billing.quote",
                move |_: serde_json::Value, meta: mesh_core::RequestMeta| {
                    let callers = callers.clone();
                    async move {
                        callers.lock().unwrap().push((meta.source, meta.user));
                        Ok::<_, mesh_core::RemoteError>(serde_json::json!({"total": 7}))
                    }
                },
            )
            .start(Arc::new(broker.transport("module.billing").await))
            .await
            .expect("billing serves as its own user")
    };
    let umami = Arc::new(broker.transport("module.umami").await);
    // umami's user, claiming to be billing.
    let claiming = Bus::builder()
        .node("n1")
        .module("billing")
        .start(umami.clone())
        .await
        .expect("a calling bus starts");
    let error = claiming
        .call::<_, serde_json::Value>("billing.quote", &serde_json::json!({}), WAIT)
        .await
        .expect_err("a request claiming billing from umami's user is refused");
    let remote = error.remote().expect("a refusal from the server");
    assert_eq!(
        remote.code,
        mesh_core::RemoteError::FORGED_SOURCE,
        "{remote}"
    );
    assert!(remote.message.contains("module.umami"), "{remote}");
    // umami as itself: served, and the tool sees its validated user.
    let genuine = Bus::builder()
        .node("n1")
        .module("umami")
        .start(umami.clone())
        .await
        .expect("umami's bus starts");
    let quote: serde_json::Value = genuine
        .call("billing.quote", &serde_json::json!({}), WAIT)
        .await
        .expect("umami's own request is served");
    assert_eq!(quote, serde_json::json!({"total": 7}));
    assert_eq!(
        *callers.lock().unwrap(),
        [("umami".to_owned(), Some("module.umami".to_owned()))],
        "the tool saw only the genuine request, with its validated user"
    );
    genuine.close().await;
    claiming.close().await;
    billing.close().await;
}

fn consumer_spec(queue: &str) -> mesh_core::SubscriptionSpec {
    mesh_core::SubscriptionSpec {
        queue: mesh_core::QueueSpec::Durable {
            name: queue.to_owned(),
        },
        patterns: vec![TopicPattern::parse("module.other.#").unwrap()],
        prefetch: 4,
        retry_delays: vec![Duration::from_millis(200)],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_without_configure_starts_on_queues_the_operator_declared() {
    let broker = Broker::start().await;
    // Under the plan umami's user may configure only server-named queues.
    let permissions = broker
        .planned
        .management()
        .permissions("/")
        .await
        .expect("the permissions listed");
    let umami_configure = permissions
        .iter()
        .find(|p| p.user == "module.umami")
        .map(|p| p.configure.clone());
    assert_eq!(umami_configure.as_deref(), Some(r"^(?:amq\.gen-.+)$"));
    // The operator declares umami's queue and its retry queue (as `mesh topology apply`
    // would), with the arguments the runtime declares.
    let operator = mesh::amqp::connect(broker.planned.node.url().parse().unwrap())
        .await
        .expect("the operator connects");
    drop(
        operator
            .subscribe(consumer_spec("n1.umami.events"))
            .await
            .expect("the operator declares umami's queues"),
    );

    let umami = broker.transport("module.umami").await;
    let mut subscription = umami
        .subscribe(consumer_spec("n1.umami.events"))
        .await
        .expect("umami starts on the queues the operator declared");
    // The refused declarations were answers, not faults.
    assert_eq!(umami.stats().channel_closes, 0, "{:?}", umami.stats());
    // And it consumes: an event of `module.other` reaches it.
    let other = mesh::amqp::connect(broker.planned.node.url().parse().unwrap())
        .await
        .expect("the operator connects again");
    let mut message = mesh_core::WireMessage::new("module.other.thing", "{}");
    message.properties.persistent = true;
    other
        .publish(message, mesh_core::PublishOptions::default())
        .await
        .expect("accepted")
        .await
        .expect("confirmed");
    let delivery = tokio::time::timeout(WAIT, subscription.next())
        .await
        .expect("a delivery in time")
        .expect("the subscription is open");
    assert_eq!(delivery.message.routing_key, "module.other.thing");
    delivery.ack().await.expect("acked");

    // A queue nobody declared: refused, and the error says who declares it.
    let Err(error) = umami.subscribe(consumer_spec("shared.umami.events")).await else {
        panic!("umami subscribed to a queue nobody declared");
    };
    assert!(
        matches!(
            error.kind(),
            mesh_core::TransportErrorKind::Forbidden { .. }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("mesh topology apply"), "{error}");

    drop(subscription);
    other.close().await;
    umami.close().await;
    operator.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_user_can_bind_under_another_callers_reply_key() {
    use amqprs::channel::{
        BasicAckArguments, BasicConsumeArguments, QueueBindArguments, QueueDeclareArguments,
    };
    let broker = Broker::start().await;
    // umami serves a tool of its own by hand, to see what a server sees of its callers.
    let umami = broker.raw("module.umami").await;
    let server = umami.open_channel(None).await.unwrap();
    // Its tool's queue is the operator's to declare; umami finds it (a passive declare).
    broker
        .planned
        .declare_tool("umami.echo")
        .await
        .expect("the operator declares umami's tool queue");
    let (serve, _, _) = server
        .queue_declare(
            QueueDeclareArguments::new("serve.umami.echo")
                .passive(true)
                .finish(),
        )
        .await
        .expect("umami finds its own tool's queue")
        .expect("a declare-ok");
    server
        .queue_bind(QueueBindArguments::new(&serve, "mesh.rpc", "umami.echo"))
        .await
        .expect("umami binds its own tool");
    let (_, mut requests) = server
        .basic_consume_rx(BasicConsumeArguments::new(&serve, "echo"))
        .await
        .expect("umami consumes its tool's queue");

    let billing = Bus::builder()
        .node("n1")
        .module("billing")
        .start(Arc::new(broker.transport("module.billing").await))
        .await
        .expect("billing starts as its own user");
    let call = tokio::spawn(async move {
        let reply = billing
            .call::<_, serde_json::Value>("umami.echo", &serde_json::json!({"n": 1}), WAIT)
            .await;
        billing.close().await;
        reply
    });
    let request = tokio::time::timeout(WAIT, requests.recv())
        .await
        .expect("billing's request in time")
        .expect("the consumer is open");
    let properties = request.basic_properties.expect("properties");
    let reply_to = properties.reply_to().cloned().expect("a reply_to");
    assert!(
        reply_to.starts_with("module.billing.amq.gen-"),
        "the reply key starts with the caller's user: {reply_to}"
    );

    // umami binds a queue of its own under billing's reply key: refused, and likewise
    // through an exchange-to-exchange binding, or on the retired `mesh.reply`.
    let own_queue = |channel: amqprs::channel::Channel| async move {
        let (queue, _, _) = channel
            .queue_declare(QueueDeclareArguments::exclusive_server_named())
            .await
            .expect("umami declares a server-named queue")
            .expect("a declare-ok");
        (channel, queue)
    };
    let (channel, queue) = own_queue(umami.open_channel(None).await.unwrap()).await;
    let refused = channel
        .queue_bind(QueueBindArguments::new(&queue, "mesh.replies", &reply_to))
        .await;
    assert!(refused.is_err(), "umami bound under billing's reply key");
    for (exchange, key) in [
        ("mesh.replies", "#"),
        ("mesh.replies", "module.billing.#"),
        ("mesh.reply", reply_to.as_str()),
    ] {
        let (channel, queue) = own_queue(umami.open_channel(None).await.unwrap()).await;
        let bound = channel
            .queue_bind(QueueBindArguments::new(&queue, exchange, key))
            .await;
        assert!(bound.is_err(), "umami bound {exchange} on {key}");
    }
    // Its own reply keys it may bind: the refusal was about the key.
    let (channel, queue) = own_queue(umami.open_channel(None).await.unwrap()).await;
    channel
        .queue_bind(QueueBindArguments::new(
            &queue,
            "mesh.replies",
            &format!("module.umami.{queue}"),
        ))
        .await
        .expect("umami binds under its own reply key");

    // And as a server it answers any caller: billing gets its reply.
    let mut headers = FieldTable::new();
    headers.insert(
        codec::REPLY_STATUS.try_into().unwrap(),
        FieldValue::S("ok".try_into().unwrap()),
    );
    let mut reply = BasicProperties::default();
    reply
        .with_content_type("application/json")
        .with_user_id("module.umami")
        .with_correlation_id(properties.correlation_id().expect("a correlation id"))
        .with_headers(headers);
    server
        .basic_publish(
            reply,
            br#"{"n":1}"#.to_vec(),
            BasicPublishArguments::new("mesh.replies", &reply_to),
        )
        .await
        .expect("umami answers billing");
    server
        .basic_ack(BasicAckArguments::new(
            request.deliver.expect("a deliver").delivery_tag(),
            false,
        ))
        .await
        .expect("acked");
    let answer = call
        .await
        .expect("the call task")
        .expect("billing's call is answered");
    assert_eq!(answer, serde_json::json!({"n": 1}));
    let _ = umami.close().await;
}
