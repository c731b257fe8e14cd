//! Scheduled events on the memory broker: emitted when due and not before, through a
//! forwarder's restart; only the module's own keys; refused where no schedule queue exists.
//! (The same on RabbitMQ, with restarts and the broker's permissions: mesh-faults'
//! `schedule` test and mesh-conformance's `identity` test.)

use std::future::Future as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mesh::raw::codec::{self, DeadReason};
use mesh::raw::{HeaderValue, PublishOptions, Target, Transport, WireMessage};
use mesh::{Bus, ErrorKind, Incoming, MemoryBroker, Outgoing, Timestamp, TransportErrorKind};
use mesh_testkit::eventually;
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(10);

/// The module `umami` forwarding its scheduled events.
async fn forwarder(broker: &MemoryBroker) -> Bus {
    Bus::builder()
        .node("n1")
        .module("umami")
        .forward_scheduled(true)
        .announce(false)
        .start(Arc::new(broker.transport()))
        .await
        .expect("the forwarder starts")
}

/// A consumer of `module.umami.#` that sends on what it got and when.
async fn watcher(
    broker: &MemoryBroker,
) -> (Bus, mpsc::UnboundedReceiver<(Incoming<Bytes>, Timestamp)>) {
    let (seen, got) = mpsc::unbounded_channel();
    let bus = Bus::builder()
        .node("n1")
        .module("watcher")
        .announce(false)
        .on_raw(["module.umami.#"], move |e: Incoming<Bytes>| {
            let seen = seen.clone();
            async move {
                let _ = seen.send((e, Timestamp::now()));
                Ok(())
            }
        })
        .start(Arc::new(broker.transport()))
        .await
        .expect("the watcher starts");
    (bus, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_event_arrives_when_due_and_not_before() {
    let broker = MemoryBroker::new();
    let umami = forwarder(&broker).await;
    let (_watcher, mut got) = watcher(&broker).await;
    let asked = Timestamp::now();
    let id = umami
        .emit_outgoing_after(
            Duration::from_millis(1500),
            Outgoing::json("reminder.due", &"call back").expect("an outgoing"),
        )
        .await
        .expect("scheduled");
    let (event, at) = tokio::time::timeout(WAIT, got.recv())
        .await
        .expect("delivered in time")
        .expect("the watcher runs");
    assert_eq!(event.meta.id(), id);
    assert_eq!(event.meta.key().as_str(), "module.umami.reminder.due");
    let due = event.meta.time();
    assert!(
        due.unix_nanos() - asked.unix_nanos() >= 1_500_000_000,
        "x-time is the due time"
    );
    assert!(at >= due, "arrived at {at}, before it was due at {due}");
    assert!(
        event
            .meta
            .headers()
            .keys()
            .all(|name| !codec::is_mesh_header(name)),
        "no x-mesh-* header reaches mesh.events: {:?}",
        event.meta.headers().keys().collect::<Vec<_>>()
    );
    // `x-due` says it was scheduled, and for when.
    assert_eq!(
        event.meta.headers().get(codec::SCHEDULED_DUE),
        Some(&HeaderValue::Str(due.text())),
        "x-due is the due time"
    );
    // Only the one event, and nothing left waiting.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), got.recv())
            .await
            .is_err(),
        "delivered once"
    );
    assert_eq!(broker.queue_depth("scheduled.umami.events"), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_event_outlives_its_forwarder() {
    let broker = MemoryBroker::new();
    let first = forwarder(&broker).await;
    // A bus that only schedules: no forwarder of its own.
    let scheduler = Bus::builder()
        .node("n2")
        .module("umami")
        .announce(false)
        .start(Arc::new(broker.transport()))
        .await
        .expect("the scheduler starts");
    let id = scheduler
        .emit_outgoing_after(
            Duration::from_secs(2),
            Outgoing::json("reservation.expired", &7).expect("an outgoing"),
        )
        .await
        .expect("scheduled");
    // The forwarder goes away with the copy on its ladder; a new one takes over.
    first.close().await;
    let (_watcher, mut got) = watcher(&broker).await;
    let _second = forwarder(&broker).await;
    let (event, at) = tokio::time::timeout(WAIT, got.recv())
        .await
        .expect("delivered in time")
        .expect("the watcher runs");
    assert_eq!(event.meta.id(), id);
    assert!(at >= event.meta.time(), "not before it was due");
}

#[tokio::test]
async fn another_modules_key_is_refused() {
    let broker = MemoryBroker::new();
    let umami = forwarder(&broker).await;
    let err = umami
        .emit_outgoing_after(
            Duration::from_secs(1),
            Outgoing::raw("module.billing.invoice.due", Bytes::from_static(b"{}"))
                .expect("an outgoing"),
        )
        .await
        .expect_err("another module's key");
    assert!(
        matches!(err.kind(), ErrorKind::ForeignKey { .. }),
        "{err:?}"
    );
    assert_eq!(broker.queue_depth("scheduled.umami.events"), Some(0));
}

#[tokio::test]
async fn without_a_schedule_queue_scheduling_fails_as_unroutable() {
    let broker = MemoryBroker::new();
    let umami = Bus::builder()
        .node("n1")
        .module("umami")
        .announce(false)
        .start(Arc::new(broker.transport()))
        .await
        .expect("starts");
    let err = umami
        .emit_outgoing_after(
            Duration::from_secs(1),
            Outgoing::json("a.b", &1).expect("an outgoing"),
        )
        .await
        .expect_err("no schedule queue");
    assert_eq!(
        err.transport_kind(),
        Some(&TransportErrorKind::Unroutable),
        "{err:?}"
    );
    // A context has no schedule queue, and cannot forward one.
    let context = Bus::builder()
        .node("n1")
        .context("ctx")
        .announce(false)
        .start(Arc::new(broker.transport()))
        .await
        .expect("starts");
    let err = context
        .emit_outgoing_after(
            Duration::from_secs(1),
            Outgoing::json("a.b", &1).expect("an outgoing"),
        )
        .await
        .expect_err("a context");
    assert_eq!(err.kind(), &ErrorKind::InvalidOptions);
    let err = Bus::builder()
        .node("n1")
        .context("ctx")
        .forward_scheduled(true)
        .start(Arc::new(broker.transport()))
        .await
        .expect_err("a context cannot forward");
    assert_eq!(err.kind(), &ErrorKind::InvalidOptions);
    let err = Bus::builder()
        .node("scheduled")
        .module("umami")
        .start(Arc::new(broker.transport()))
        .await
        .expect_err("a reserved node name");
    assert_eq!(err.kind(), &ErrorKind::InvalidOptions);
    let err = Bus::builder()
        .node("n1")
        .module("umami")
        .longest_schedule_hop(Duration::from_secs(3600))
        .start(Arc::new(broker.transport()))
        .await
        .expect_err("a hop longer than 15 minutes");
    assert_eq!(err.kind(), &ErrorKind::InvalidOptions);
}

/// A copy put in the schedule queue by hand (not through `emit_at`) under another module's
/// key, or with no due time, is dead-lettered, never emitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_copy_in_the_schedule_queue_is_dead_lettered() {
    let broker = MemoryBroker::new();
    let umami = forwarder(&broker).await;
    let mut dead = umami
        .dead_letters()
        .await
        .expect("a tap of umami's dead letters");
    let (_billing_watch, mut got) = {
        let (seen, got) = mpsc::unbounded_channel();
        let bus = Bus::builder()
            .node("n1")
            .module("billing-watch")
            .announce(false)
            .on_raw(["module.billing.#"], move |e: Incoming<Bytes>| {
                let seen = seen.clone();
                async move {
                    let _ = seen.send(e.meta.key().to_string());
                    Ok(())
                }
            })
            .start(Arc::new(broker.transport()))
            .await
            .expect("starts");
        (bus, got)
    };
    let raw = broker.transport();
    for (key, due) in [
        ("module.billing.invoice.due", Some(Timestamp::now().text())),
        ("module.umami.site.created", None),
    ] {
        let mut message = WireMessage::new(key, Bytes::from_static(b"{}"));
        message.properties.content_type = Some(codec::CONTENT_TYPE_JSON.into());
        let headers = &mut message.properties.headers;
        headers.insert(
            codec::EVENT_ID.into(),
            mesh::raw::EventId::new().to_string().into(),
        );
        headers.insert(codec::SOURCE.into(), "billing".into());
        headers.insert(codec::NODE.into(), "n1".into());
        headers.insert(codec::TIME.into(), Timestamp::now().text().into());
        if let Some(due) = due {
            headers.insert(codec::DUE.into(), HeaderValue::Str(due));
        }
        let confirm = raw
            .publish(
                message,
                PublishOptions {
                    target: Target::Retry("scheduled.umami.events".into()),
                    mandatory: true,
                    deadline: None,
                },
            )
            .await
            .expect("published");
        confirm.await.expect("confirmed");
    }
    let mut reasons = Vec::new();
    for _ in 0..2 {
        let letter = tokio::time::timeout(WAIT, dead.next())
            .await
            .expect("dead-lettered in time")
            .expect("the tap runs");
        reasons.push(letter.note.map(|n| n.reason));
    }
    reasons.sort_by_key(|r| r.map(DeadReason::as_str));
    assert_eq!(
        reasons,
        vec![
            Some(DeadReason::ForgedSource),
            Some(DeadReason::Undecodable)
        ]
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), got.recv())
            .await
            .is_err(),
        "never emitted"
    );
    eventually(WAIT, "the schedule queue is empty", || async {
        (broker.queue_depth("scheduled.umami.events") == Some(0)
            && broker.unacked("scheduled.umami.events") == Some(0))
        .then_some(())
    })
    .await;
}

/// The test harness counts due times by tokio's clock on the in-memory broker: under a
/// paused clock a 24-hour schedule (144 hops of 10 minutes, then a hold) runs in
/// milliseconds of wall time, delivered once 24 hours of the paused clock passed and not
/// before.
#[tokio::test(start_paused = true)]
async fn the_harness_runs_a_24_hour_schedule_on_the_paused_clock() -> anyhow::Result<()> {
    use mesh::testing::Harness;
    use tokio::time::Instant;

    const DAY: Duration = Duration::from_secs(24 * 3600);
    let wall = std::time::Instant::now();
    let harness = Harness::memory().timeout(DAY + Duration::from_secs(60));
    let umami = harness
        .module("umami", |bus| bus.forward_scheduled(true))
        .await?;
    let (seen, mut got) = mpsc::unbounded_channel();
    harness
        .module("watcher", |bus| {
            bus.on_raw(["module.umami.#"], move |e: Incoming<Bytes>| {
                let seen = seen.clone();
                async move {
                    let _ = seen.send((e.meta.id(), e.meta.time(), Instant::now()));
                    Ok(())
                }
            })
        })
        .await?;
    let asked = Instant::now();
    let id = umami
        .emit_outgoing_after(DAY, Outgoing::json("reminder.due", &"call back")?)
        .await?;
    // On the paused clock: a schedule counted by the system's clock would still be hopping.
    let (got_id, time, at) = tokio::time::timeout(DAY + Duration::from_secs(60), got.recv())
        .await
        .expect("delivered within a day and a minute of the paused clock")
        .expect("the watcher runs");
    let waited = at - asked;
    let took = wall.elapsed();
    eprintln!("delivered after {waited:?} of the paused clock, {took:?} of wall time");
    assert_eq!(got_id, id);
    assert!(
        waited >= DAY,
        "delivered after {waited:?}, before it was due"
    );
    // The last hop ends at most a hop (1 s) early and the hold ends on the due time: on a
    // paused clock nothing else takes time.
    assert!(
        waited <= DAY + Duration::from_secs(2),
        "delivered {waited:?} after it was asked, long after it was due"
    );
    // Its `x-time` is the due time by the harness's clock, and the harness saw the emit.
    assert!(time.unix_nanos() - Timestamp::now().unix_nanos() >= 23 * 3600 * 1_000_000_000);
    let published = harness.published::<Reminder>().await?;
    assert_eq!(published.record.id, Some(id));
    harness.drain().await?;
    // Nothing else waits: the only copy was emitted.
    let broker = harness.broker().expect("an in-memory harness");
    assert_eq!(broker.queue_depth("scheduled.umami.events"), Some(0));
    Ok(())
}

#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Reminder(String);
impl mesh::Event for Reminder {
    const KEY: &'static str = "module.umami.reminder.due";
}

/// A transport over the memory broker's that nacks the first `nacks` emits to `mesh.events`
/// (as RabbitMQ does while a quorum queue bound to the key elects its leader) and counts the
/// deliveries of the schedule queue `scheduled.umami.events`.
#[derive(Debug)]
struct Nacking {
    inner: Arc<dyn Transport>,
    nacks: std::sync::atomic::AtomicUsize,
    deliveries: Arc<std::sync::atomic::AtomicUsize>,
}

/// A subscription's deliveries, counted.
struct Counted {
    inner: mesh::raw::Subscription,
    cancelled: Option<tokio::sync::oneshot::Receiver<()>>,
    deliveries: Arc<std::sync::atomic::AtomicUsize>,
}

impl mesh::raw::DeliveryFeed for Counted {
    fn poll_next(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<mesh::raw::Delivery>> {
        if let Some(cancelled) = &mut self.cancelled {
            if std::pin::Pin::new(cancelled).poll(cx).is_ready() {
                self.cancelled = None;
                self.inner.cancel();
            }
        }
        let next = self.inner.poll_next(cx);
        if let std::task::Poll::Ready(Some(_)) = &next {
            self.deliveries
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        next
    }
}

impl Transport for Nacking {
    fn publish(
        &self,
        message: WireMessage,
        options: PublishOptions,
    ) -> mesh::raw::BoxFuture<'_, Result<mesh::raw::Confirm, mesh::raw::TransportError>> {
        use std::sync::atomic::Ordering;
        let nack = matches!(options.target, Target::Events)
            && self
                .nacks
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if nack {
            return Box::pin(async {
                Err(mesh::raw::TransportError::new(
                    TransportErrorKind::Nacked,
                    "a queue bound to the key has no leader",
                ))
            });
        }
        self.inner.publish(message, options)
    }

    fn subscribe(
        &self,
        spec: mesh::raw::SubscriptionSpec,
    ) -> mesh::raw::BoxFuture<'_, Result<mesh::raw::Subscription, mesh::raw::TransportError>> {
        Box::pin(async move {
            let counted = matches!(&spec.queue, mesh::raw::QueueSpec::Durable { name } if name == "scheduled.umami.events");
            let inner = self.inner.subscribe(spec).await?;
            if !counted {
                return Ok(inner);
            }
            let (cancel, cancelled) = tokio::sync::oneshot::channel();
            let queue = inner.queue().to_owned();
            let feed = Counted {
                inner,
                cancelled: Some(cancelled),
                deliveries: self.deliveries.clone(),
            };
            Ok(mesh::raw::Subscription::from_feed(queue, feed, cancel))
        })
    }

    fn call(
        &self,
        tool: &mesh::raw::ToolKey,
        request: WireMessage,
        timeout: Duration,
    ) -> mesh::raw::BoxFuture<'_, Result<WireMessage, mesh::raw::TransportError>> {
        self.inner.call(tool, request, timeout)
    }

    fn serve(
        &self,
        spec: mesh::raw::ServeSpec,
    ) -> mesh::raw::BoxFuture<'_, Result<mesh::raw::Subscription, mesh::raw::TransportError>> {
        self.inner.serve(spec)
    }

    fn health(&self) -> mesh::raw::Health {
        self.inner.health()
    }

    fn flush(&self) -> mesh::raw::BoxFuture<'_, ()> {
        self.inner.flush()
    }

    fn close(&self) -> mesh::raw::BoxFuture<'_, ()> {
        self.inner.close()
    }
}

/// An emit nacked again and again (a queue bound to its key electing its leader) keeps its
/// copy: held and emitted again after a pause, never released to the schedule queue, whose
/// delivery limit a burst of releases would run down (the broker would then dead-letter the
/// event). The copy is delivered to the forwarder once, and the event arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nacked_emit_keeps_its_copy_and_is_emitted_again() {
    let broker = MemoryBroker::new();
    let deliveries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let nacking = Arc::new(Nacking {
        inner: Arc::new(broker.transport()),
        nacks: std::sync::atomic::AtomicUsize::new(5),
        deliveries: deliveries.clone(),
    });
    let umami = Bus::builder()
        .node("n1")
        .module("umami")
        .forward_scheduled(true)
        .announce(false)
        .start(nacking.clone())
        .await
        .expect("the forwarder starts");
    let (_watcher, mut got) = watcher(&broker).await;
    let id = umami
        .emit_outgoing_after(
            Duration::from_millis(200),
            Outgoing::json("reminder.due", &"nacked").expect("an outgoing"),
        )
        .await
        .expect("scheduled");
    let (event, at) = tokio::time::timeout(WAIT, got.recv())
        .await
        .expect("delivered in time")
        .expect("the watcher runs");
    assert_eq!(event.meta.id(), id);
    assert!(at >= event.meta.time(), "not before it was due");
    assert_eq!(
        nacking.nacks.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "every nack was met"
    );
    assert_eq!(
        deliveries.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the copy was released back to the schedule queue"
    );
    umami.close().await;
}
