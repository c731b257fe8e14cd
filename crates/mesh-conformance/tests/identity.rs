//! Identity enforced by the broker, on a private RabbitMQ node (users are global to a broker):
//! after the access plan is applied, each module's user may only speak as itself, and a
//! consumer enforcing identity believes an event only from the user owning its key.
//!
//! The spec: module `umami` reads `module.shop.#`, module `billing` reads `module.umami.#`;
//! the node `n1`, and the operator, have their users too. The exchanges and the modules'
//! durable queues are declared by the operator (here the node's admin), as `mesh topology
//! apply` would: under the plan a module's `configure` covers server-named queues only.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use amqprs::channel::BasicPublishArguments;
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{BasicProperties, FieldTable, FieldValue};
use bytes::Bytes;
use mesh::amqp::access::AccessSpec;
use mesh::{Bus, HandlerError, Incoming, RetryPolicy};
use mesh_amqp::{AmqpOptions, AmqpTransport};
use mesh_core::codec::{self, DeadReason};
use mesh_core::{
    Name, PublishOptions, QueueSpec, ServeSpec, SubscriptionSpec, Target, TopicPattern,
    TransportErrorKind, WireMessage,
};
use mesh_testkit::planned::PlannedNode;
use mesh_testkit::{eventually, Ledger};

const WAIT: Duration = Duration::from_secs(30);

struct Broker {
    planned: PlannedNode,
}

impl Broker {
    /// A private node with the access plan applied (every user with a fresh password), and
    /// the modules' durable queues declared by the operator, as `mesh topology apply` does
    /// from a spec listing each module's `retry` steps: under the plan no module may. `queues`
    /// are the subscriptions to declare.
    async fn start(queues: Vec<SubscriptionSpec>) -> Broker {
        let spec = AccessSpec::new(Name::parse("n1").unwrap())
            .module(
                Name::parse("umami").unwrap(),
                [TopicPattern::parse("module.shop.#").unwrap()],
            )
            .module(
                Name::parse("billing").unwrap(),
                [TopicPattern::parse("module.umami.#").unwrap()],
            );
        let planned = PlannedNode::start(&spec)
            .await
            .expect("a private node under the access plan");
        for queue in queues {
            planned
                .declare(queue)
                .await
                .expect("the operator declares a module's queue");
        }
        Broker { planned }
    }

    fn password(&self, user: &str) -> String {
        self.planned.password(user).to_owned()
    }

    fn options(&self, user: &str) -> AmqpOptions {
        let options: AmqpOptions = self.planned.node.url().parse().expect("the node's URL");
        options
            .credentials(user, self.password(user))
            .connection_name(format!("identity-{user}"))
    }

    async fn transport(&self, user: &str) -> AmqpTransport {
        mesh::amqp::connect(self.options(user))
            .await
            .unwrap_or_else(|e| panic!("{user} connects: {e}"))
    }

    /// A raw client as `user`, with no mesh in between.
    async fn raw(&self, user: &str) -> (Connection, amqprs::channel::Channel) {
        let args = OpenConnectionArguments::new(
            "127.0.0.1",
            self.planned.node.port(),
            user,
            &self.password(user),
        );
        let connection = Connection::open(&args).await.expect("raw connection");
        let channel = connection.open_channel(None).await.expect("raw channel");
        (connection, channel)
    }
}

fn event(key: &str, source: &str) -> WireMessage {
    let mut message = WireMessage::new(key, "{}");
    let headers = &mut message.properties.headers;
    headers.insert(
        codec::EVENT_ID.into(),
        uuid::Uuid::new_v4().to_string().into(),
    );
    headers.insert(codec::SOURCE.into(), source.into());
    headers.insert(codec::NODE.into(), "n1".into());
    headers.insert(codec::TIME.into(), "2026-12-02T00:00:00Z".into());
    message.properties.content_type = Some("application/json".into());
    message.properties.persistent = true;
    message
}

fn forbidden(kind: &TransportErrorKind) -> bool {
    matches!(kind, TransportErrorKind::Forbidden { .. })
}

/// The subscription of `module`'s consumer queue on `n1` reading `patterns`, with the retry
/// steps of `retry`: what its bus declares, and so what the operator declares first.
fn consumer(module: &str, patterns: &[&str], retry: &RetryPolicy) -> SubscriptionSpec {
    SubscriptionSpec {
        retry_delays: retry.delays().to_vec(),
        ..spec(&format!("n1.{module}.events"), patterns)
    }
}

/// The schedule queue of `module` with the ladder a forwarding bus declares by default.
fn schedule(module: &str) -> SubscriptionSpec {
    SubscriptionSpec {
        retry_delays: mesh::schedule::plan::HOPS.to_vec(),
        ..spec(&format!("scheduled.{module}.events"), &[])
    }
}

fn spec(queue: &str, patterns: &[&str]) -> SubscriptionSpec {
    SubscriptionSpec {
        queue: QueueSpec::Durable {
            name: queue.to_owned(),
        },
        patterns: patterns
            .iter()
            .map(|p| TopicPattern::parse(p).unwrap())
            .collect(),
        prefetch: 8,
        retry_delays: vec![Duration::from_millis(200)],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_speaks_only_as_itself_and_the_broker_refuses_the_rest() {
    let broker = Broker::start(vec![
        consumer("billing", &["module.umami.#"], &RetryPolicy::default()),
        spec("n1.umami.events", &["module.shop.#"]),
    ])
    .await;

    // billing reads umami's events: every confirmed one must arrive.
    let ledger = Arc::new(Ledger::new());
    let billing = {
        let ledger = ledger.clone();
        Bus::builder()
            .node("n1")
            .module("billing")
            .enforce_identity(true)
            .on_raw(["module.umami.#"], move |incoming: Incoming<Bytes>| {
                let ledger = ledger.clone();
                async move {
                    ledger.handled(incoming.meta.id().to_string());
                    Ok::<(), HandlerError>(())
                }
            })
            .start(Arc::new(broker.transport("module.billing").await))
            .await
            .expect("billing starts as its own user")
    };

    // umami publishes its own events with one of billing's in the middle of the window: the
    // broker refuses that one (Forbidden, not resent); the rest are confirmed and arrive.
    let umami = broker.transport("module.umami").await;
    let mut publishes = Vec::new();
    for i in 0..40 {
        let key = if i == 20 {
            "module.billing.invoice.paid".to_owned()
        } else {
            format!("module.umami.site.n{i}")
        };
        let source = if i == 20 { "billing" } else { "umami" };
        let message = event(&key, source);
        let id = message
            .header(codec::EVENT_ID)
            .unwrap()
            .as_str()
            .unwrap()
            .to_owned();
        ledger.attempted(id.clone());
        let confirm = umami
            .publish(message, PublishOptions::default())
            .await
            .expect("accepted into the window");
        publishes.push((key, id, confirm));
    }
    let mut refused = 0;
    for (key, id, confirm) in publishes {
        match confirm.await {
            Ok(()) => ledger.confirmed(id),
            Err(error) if key.starts_with("module.billing.") => {
                assert!(forbidden(error.kind()), "{error}");
                assert!(
                    error.to_string().contains("module.billing.invoice.paid"),
                    "{error}"
                );
                refused += 1;
            }
            Err(error) => panic!("umami's own `{key}` failed: {error}"),
        }
    }
    assert_eq!(refused, 1);
    // Through the SDK with a forced identity: a bus told it is billing, on umami's user.
    let forced = Bus::builder()
        .node("n1")
        .module("billing")
        .start(Arc::new(umami.clone()))
        .await
        .expect("a publishing bus starts");
    let error = forced
        .emit_outgoing(
            mesh::Outgoing::json("invoice.paid", &serde_json::json!({})).expect("a JSON payload"),
        )
        .await
        .expect_err("the broker refuses billing's key from umami");
    assert!(error.transport_kind().is_some_and(forbidden), "{error}");
    // And umami still emits its own afterwards.
    let own = Bus::builder()
        .node("n1")
        .module("umami")
        .start(Arc::new(umami.clone()))
        .await
        .expect("umami's bus starts");
    let id = own
        .emit_outgoing(
            mesh::Outgoing::json("site.created", &serde_json::json!({"id": 1}))
                .expect("a JSON payload"),
        )
        .await
        .expect("umami emits its own event after the refusals");
    ledger.attempted(id.to_string());
    ledger.confirmed(id.to_string());
    ledger.wait_all_handled(WAIT).await.assert_clean();

    // What umami's user may not do, each refused by the broker.
    let refusal =
        |what: &str, result: Result<mesh_core::Subscription, mesh_core::TransportError>| {
            match result {
                Err(error) => assert!(forbidden(error.kind()), "{what}: {error}"),
                Ok(_) => panic!("{what} was allowed"),
            }
        };
    refusal(
        "consuming billing's queue",
        umami
            .subscribe(spec("n1.billing.events", &["module.umami.#"]))
            .await,
    );
    refusal(
        "binding umami's queue to billing's events",
        umami
            .subscribe(spec("n1.umami.events", &["module.billing.#"]))
            .await,
    );
    refusal(
        "serving a billing tool",
        umami
            .serve(ServeSpec {
                tool: mesh_core::ToolKey::parse("billing.invoices.create").unwrap(),
                prefetch: 1,
            })
            .await,
    );
    let error = umami
        .publish(
            event("module.umami.site.x", "umami"),
            PublishOptions {
                target: Target::Queue("n1.billing.events".to_owned()),
                ..PublishOptions::default()
            },
        )
        .await
        .expect("accepted into the window")
        .await
        .expect_err("the default exchange is refused");
    assert!(forbidden(error.kind()), "{error}");
    assert!(error.to_string().contains("amq.default"), "{error}");
    // umami's own queue, declared by the operator, with the patterns its spec gives, is
    // allowed.
    drop(
        umami
            .subscribe(spec("n1.umami.events", &["module.shop.#"]))
            .await
            .expect("umami finds, binds and consumes its own queue"),
    );

    own.close().await;
    forced.close().await;
    billing.close().await;
    umami.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_identity_enforced_only_the_owner_s_user_is_believed() {
    let retry = RetryPolicy::new(3, vec![Duration::from_millis(200)]).unwrap();
    let broker = Broker::start(vec![consumer("billing", &["module.umami.#"], &retry)]).await;
    let handled = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let attempts = Arc::new(std::sync::Mutex::new(Vec::<u32>::new()));
    let billing = {
        let handled = handled.clone();
        let attempts = attempts.clone();
        Bus::builder()
            .node("n1")
            .module("billing")
            .enforce_identity(true)
            .retry(retry)
            .on_raw(["module.umami.#"], move |incoming: Incoming<Bytes>| {
                let handled = handled.clone();
                let attempts = attempts.clone();
                async move {
                    attempts.lock().unwrap().push(incoming.meta.attempt());
                    // The first try fails: the retry ladder runs on billing's planned
                    // permissions, and the copy keeps umami as its validated user.
                    if incoming.meta.attempt() == 1 {
                        return Err(HandlerError::retry(std::io::Error::other("once")));
                    }
                    handled
                        .lock()
                        .unwrap()
                        .push(incoming.meta.key().to_string());
                    Ok(())
                }
            })
            .start(Arc::new(broker.transport("module.billing").await))
            .await
            .expect("billing starts")
    };
    let mut dead = billing.dead_letters().await.expect("a tap of dead letters");

    let (connection, channel) = broker.raw("module.umami").await;
    let publish = |key: &'static str, source: &'static str, user: Option<&str>| {
        let mut headers = FieldTable::new();
        for (name, value) in [
            (codec::EVENT_ID, uuid::Uuid::new_v4().to_string()),
            (codec::SOURCE, source.to_owned()),
            (codec::NODE, "n1".to_owned()),
            (codec::TIME, "2026-12-02T00:00:00Z".to_owned()),
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
            .with_headers(headers);
        if let Some(user) = user {
            props.with_user_id(user);
        }
        let channel = channel.clone();
        async move {
            channel
                .basic_publish(
                    props,
                    b"{}".to_vec(),
                    BasicPublishArguments::new("mesh.events", key),
                )
                .await
                .expect("published");
        }
    };
    // umami's user claiming billing as its source; umami's user with no user-id; then a
    // genuine one.
    publish(
        "module.umami.claims.billing",
        "billing",
        Some("module.umami"),
    )
    .await;
    publish("module.umami.no.user", "umami", None).await;
    // The operator may write anything, but is not umami.
    let operator = broker.transport("operator").await;
    operator
        .publish(
            event("module.umami.by.operator", "umami"),
            PublishOptions::default(),
        )
        .await
        .expect("accepted")
        .await
        .expect("confirmed: the operator may write any key");
    publish("module.umami.genuine", "umami", Some("module.umami")).await;

    let mut forged = Vec::new();
    while forged.len() < 3 {
        let letter = tokio::time::timeout(WAIT, dead.next())
            .await
            .expect("a dead letter in time")
            .expect("the tap is open");
        let annotations = letter.note.clone().expect("mesh's annotations");
        assert_eq!(annotations.reason, DeadReason::ForgedSource);
        forged.push(letter.message.routing_key.clone());
    }
    forged.sort();
    assert_eq!(
        forged,
        [
            "module.umami.by.operator",
            "module.umami.claims.billing",
            "module.umami.no.user"
        ]
    );
    eventually(WAIT, "the genuine event is handled after a retry", || {
        let handled = handled.lock().unwrap().clone();
        async move { (handled == ["module.umami.genuine"]).then_some(()) }
    })
    .await;
    assert_eq!(*attempts.lock().unwrap(), [1, 2]);

    let _ = connection.close().await;
    operator.close().await;
    billing.close().await;
}

/// Scheduling: a module schedules only its own keys. umami scheduling `module.billing.…` is
/// refused by the SDK; umami's user may not write billing's schedule queue on `mesh.retry`
/// (the broker refuses it), nor consume it; a billing key smuggled into umami's own schedule
/// queue is set aside (`forged-source`), never emitted. umami's own scheduled event arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_schedules_only_its_own_keys() {
    let broker = Broker::start(vec![
        consumer("billing", &["module.umami.#"], &RetryPolicy::default()),
        schedule("billing"),
        schedule("umami"),
    ])
    .await;
    let (seen, mut got) = tokio::sync::mpsc::unbounded_channel::<String>();
    let billing = Bus::builder()
        .node("n1")
        .module("billing")
        .announce(false)
        .forward_scheduled(true)
        .on_raw(["module.umami.#"], move |incoming: Incoming<Bytes>| {
            let seen = seen.clone();
            async move {
                let _ = seen.send(incoming.meta.key().to_string());
                Ok::<(), HandlerError>(())
            }
        })
        .start(Arc::new(broker.transport("module.billing").await))
        .await
        .expect("billing forwards its own scheduled events");
    let umami = Bus::builder()
        .node("n1")
        .module("umami")
        .announce(false)
        .forward_scheduled(true)
        .start(Arc::new(broker.transport("module.umami").await))
        .await
        .expect("umami forwards its own schedule queue");
    let mut dead = umami
        .dead_letters()
        .await
        .expect("umami taps its dead letters");

    let error = umami
        .emit_outgoing_after(
            Duration::from_millis(100),
            mesh::Outgoing::raw("module.billing.invoice.due", Bytes::from_static(b"{}")).unwrap(),
        )
        .await
        .expect_err("another module's key");
    assert!(
        matches!(error.kind(), mesh::ErrorKind::ForeignKey { .. }),
        "{error:?}"
    );

    let raw = broker.transport("module.umami").await;
    let due = |mut message: WireMessage| {
        message
            .properties
            .headers
            .insert(codec::DUE.into(), mesh_core::Timestamp::now().text().into());
        message
    };
    let schedule = |queue: &str| PublishOptions {
        target: Target::Retry(queue.to_owned()),
        mandatory: true,
        deadline: Some(WAIT),
    };
    let error = raw
        .publish(
            due(event("module.billing.invoice.due", "billing")),
            schedule("scheduled.billing.events"),
        )
        .await
        .expect("accepted into the window")
        .await
        .expect_err("billing's schedule queue is not umami's to write");
    assert!(forbidden(error.kind()), "{error}");
    let error = raw
        .subscribe(spec("scheduled.billing.events", &[]))
        .await
        .expect_err("nor to consume");
    assert!(forbidden(error.kind()), "{error}");

    // Into umami's own queue: a billing key is set aside, umami's own is emitted.
    for (key, source) in [
        ("module.billing.invoice.due", "billing"),
        ("module.umami.site.due", "umami"),
    ] {
        raw.publish(due(event(key, source)), schedule("scheduled.umami.events"))
            .await
            .expect("accepted into the window")
            .await
            .expect("umami writes its own schedule queue");
    }
    let letter = tokio::time::timeout(WAIT, dead.next())
        .await
        .expect("dead-lettered in time")
        .expect("the tap runs");
    assert_eq!(
        letter.note.map(|n| n.reason),
        Some(DeadReason::ForgedSource)
    );
    assert_eq!(letter.message.routing_key, "module.billing.invoice.due");
    let arrived = tokio::time::timeout(WAIT, got.recv())
        .await
        .expect("umami's own arrives in time")
        .expect("billing runs");
    assert_eq!(arrived, "module.umami.site.due");
    raw.close().await;
    umami.close().await;
    billing.close().await;
}
