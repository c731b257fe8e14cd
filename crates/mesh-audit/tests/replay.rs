//! Replay from the audit store into one module's queue (a vhost of each test's own on the
//! shared broker): every stored event reaches that module's handlers, marked as replayed,
//! and no other module's queue receives any.

mod common;

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{emitter, transport, AuditStore, TempStore};
use mesh::{Bus, Incoming, Outgoing};
use mesh_audit::{Backend, ErrorKind, EventQuery, Replay, Store};
use mesh_core::{codec, EventId, PublishOptions, Timestamp};
use mesh_testkit::{eventually, TestVhost};

const WAIT: Duration = Duration::from_secs(120);

/// What a module's handler saw: per event id, how many times, and whether each time it was
/// marked replayed and redelivered.
#[derive(Default)]
struct Seen {
    times: HashMap<EventId, u32>,
    replayed: usize,
    redelivered: usize,
}

type Shared = Arc<Mutex<Seen>>;

async fn module(url: &str, name: &str, seen: Shared) -> anyhow::Result<Bus> {
    Ok(Bus::builder()
        .node("n1")
        .module(name)
        .prefetch(256)
        .on_raw(["module.shop.#"], move |e: Incoming<bytes::Bytes>| {
            let mut seen = seen.lock().expect("lock");
            *seen.times.entry(e.meta.id()).or_default() += 1;
            seen.replayed += usize::from(e.meta.replayed().is_some());
            seen.redelivered += usize::from(e.meta.redelivered());
            async { Ok(()) }
        })
        .start(transport(url).await?)
        .await?)
}

/// Waits until the module that records into `seen` has handled event `id`.
async fn handled(seen: &Shared, id: EventId, what: &str) {
    eventually(WAIT, what, || {
        let handled = seen.lock().expect("lock").times.contains_key(&id);
        async move { handled.then_some(()) }
    })
    .await;
}

/// `total` stored events of module `shop`, made as its emits make them (never published).
async fn seed(store: &Store, shop: &Bus, total: usize) -> anyhow::Result<Vec<EventId>> {
    let mut ids = Vec::with_capacity(total);
    let mut batch = Vec::new();
    for n in 0..total {
        let name = if n % 2 == 0 {
            "order.placed"
        } else {
            "order.paid"
        };
        let prepared = shop.prepare_emit(Outgoing::json(name, &serde_json::json!({ "n": n }))?)?;
        ids.push(prepared.id());
        let mut message = prepared.into_message();
        // As the broker would have validated it.
        message.properties.user_id = Some("module.shop".into());
        batch.push(message);
        if batch.len() == 1000 {
            store.record_events(&batch).await?;
            batch.clear();
        }
    }
    store.record_events(&batch).await?;
    Ok(ids)
}

async fn replay_reaches_one_module_only(backend: Backend, total: usize) -> anyhow::Result<()> {
    let vhost = TestVhost::create("audit-replay").await?;
    let temp = TempStore::new(backend).await?;
    let store = temp.open().await?;
    let url = vhost.url();
    let shop = emitter(&url, "n1", "shop").await?;
    let since = Timestamp::now();
    let ids = seed(&store, &shop, total).await?;

    let billing_seen = Shared::default();
    let mailer_seen = Shared::default();
    let billing = module(&url, "billing", billing_seen.clone()).await?;
    let mailer = module(&url, "mailer", mailer_seen.clone()).await?;

    let replay = Replay::new(
        EventQuery::new()
            .pattern("module.shop.order.*")
            .since(since)
            .limit(usize::MAX),
        "n1.billing.events",
    );
    let plan = store.replay_plan(&replay).await?;
    assert_eq!(plan.events, total as u64);
    assert_eq!(plan.queue, "n1.billing.events");

    let replayer = transport(&url).await?;
    let report = store.replay(replayer.as_ref(), &replay).await?;
    assert!(report.failed.is_none(), "{:?}", report.failed);
    assert_eq!(report.replayed, total as u64);
    assert_eq!(report.last.map(|(id, _)| id), ids.last().copied());

    eventually(WAIT, "billing handling every replayed event", || {
        let n = billing_seen.lock().expect("lock").times.len();
        async move { (n >= total).then_some(()) }
    })
    .await;

    // A live event behind the replay on the mailer's queue: once the mailer has it, a
    // replayed copy on that queue would have been handled before it.
    let sentinel = shop
        .emit_outgoing(Outgoing::json(
            "order.placed",
            &serde_json::json!({"n": -1}),
        )?)
        .await?;
    handled(
        &mailer_seen,
        sentinel,
        "the mailer handling the live sentinel",
    )
    .await;
    handled(
        &billing_seen,
        sentinel,
        "billing handling the live sentinel",
    )
    .await;

    {
        let mailer = mailer_seen.lock().expect("lock");
        assert_eq!(
            mailer.times.keys().copied().collect::<Vec<_>>(),
            vec![sentinel],
            "no replayed event reached another module's queue"
        );
        assert_eq!(mailer.replayed, 0);
        let billing = billing_seen.lock().expect("lock");
        let duplicates: u32 = billing.times.values().map(|n| n - 1).sum();
        eprintln!(
            "replay of {total} on {backend:?}: {} handled, {duplicates} duplicates",
            billing.times.len() - 1
        );
        for id in &ids {
            assert!(billing.times.contains_key(id), "{id} never replayed");
        }
        assert_eq!(billing.times.len(), total + 1);
        // Every replayed delivery carried the marker and read as redelivered; the live
        // sentinel neither.
        let deliveries: u32 = billing.times.values().sum();
        assert_eq!(billing.replayed as u32, deliveries - 1);
        assert_eq!(billing.redelivered as u32, deliveries - 1);
    }

    billing.drain().await?;
    mailer.drain().await?;
    shop.drain().await?;
    replayer.close().await;
    store.close().await;
    vhost.delete().await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_stored_events_replay_to_one_module_only_postgres() -> anyhow::Result<()> {
    replay_reaches_one_module_only(Backend::Postgres, 10_000).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_events_replay_to_one_module_only_sqlite() -> anyhow::Result<()> {
    replay_reaches_one_module_only(Backend::Sqlite, 1_000).await
}

/// The marker is the runtime's: on an event published to `mesh.events` it is removed before
/// a handler sees it; a replay to anything but a consumer queue, or to one that does not
/// exist, publishes nothing and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_marker_is_not_believed_and_foreign_targets_are_refused() -> anyhow::Result<()> {
    let vhost = TestVhost::create("audit-replay-forged").await?;
    let temp = TempStore::new(Backend::Sqlite).await?;
    let store = temp.open().await?;
    let url = vhost.url();
    let shop = emitter(&url, "n1", "shop").await?;
    let seen = Shared::default();
    let billing = module(&url, "billing", seen.clone()).await?;

    let prepared = shop.prepare_emit(Outgoing::json("order.placed", &serde_json::json!({}))?)?;
    let id = prepared.id();
    let mut forged = prepared.into_message();
    forged.properties.headers.insert(
        codec::REPLAYED.to_owned(),
        Timestamp::now().to_string().into(),
    );
    let raw = transport(&url).await?;
    raw.publish(forged, PublishOptions::default())
        .await?
        .await?;
    handled(&seen, id, "billing handling the forged event").await;
    {
        let seen = seen.lock().expect("lock");
        assert_eq!(
            seen.replayed, 0,
            "a marker from mesh.events is not believed"
        );
        assert_eq!(seen.redelivered, 0);
    }

    seed(&store, &shop, 3).await?;
    for queue in [
        "serve.shop.pay",
        "n1.billing.events.retry.1",
        "mesh.events.dead",
    ] {
        let replay = Replay::new(EventQuery::new().limit(usize::MAX), queue);
        let error = store.replay(raw.as_ref(), &replay).await.expect_err(queue);
        assert_eq!(error.kind(), &ErrorKind::ForeignQueue, "{queue}");
        let error = store.replay_plan(&replay).await.expect_err(queue);
        assert_eq!(error.kind(), &ErrorKind::ForeignQueue, "{queue}");
    }
    // A consumer queue nobody declared: the first publish is unroutable, the replay stops
    // there and says which event to resume from.
    let replay = Replay::new(EventQuery::new().limit(usize::MAX), "n1.nobody.events")
        .rate(NonZeroU32::new(1000).expect("non-zero"));
    let report = store.replay(raw.as_ref(), &replay).await?;
    assert_eq!(report.replayed, 0);
    let (_, _, error) = report.failed.expect("unroutable");
    assert_eq!(error.kind(), &ErrorKind::Transport);
    assert_eq!(seen.lock().expect("lock").times.len(), 1);

    billing.drain().await?;
    shop.drain().await?;
    raw.close().await;
    store.close().await;
    vhost.delete().await?;
    Ok(())
}
