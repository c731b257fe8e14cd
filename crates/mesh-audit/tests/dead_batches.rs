//! Dead letters in pages and batches, on SQLite and PostgreSQL: a keyset cursor
//! ([`DeadLetterQuery::after`]) pages every dead letter once in either order, ties broken by
//! id; a re-drive in batches goes on after each batch's last dead letter
//! ([`RedriveReport::last`](mesh_audit::RedriveReport::last)), refused ones included, so none
//! is tried twice nor skipped; and [`RedriveOptions::again`] takes those re-driven before.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::{AuditStore, TempStore};
use mesh::{Bus, MemoryBroker};
use mesh_audit::{
    Backend, DeadLetterId, DeadLetterQuery, ErrorKind, Order, Redrive, RedriveOptions, Store,
};
use mesh_core::{
    codec, DeadLetterNote, DeadReason, Envelope, EventId, Headers, RoutingKey, Timestamp,
    WireMessage,
};
use mesh_testkit::eventually;

const WAIT: Duration = Duration::from_secs(20);

fn at(seconds: i64) -> Timestamp {
    let base = time::OffsetDateTime::from_unix_timestamp(1_800_000_000).expect("a valid time");
    Timestamp::from(base + time::Duration::seconds(seconds))
}

/// A dead letter of a new event, set aside by the consumer of `queue` at `time`.
fn dead(queue: &str, time: Timestamp) -> WireMessage {
    let mut message = codec::encode(&Envelope {
        id: EventId::new(),
        key: RoutingKey::parse("module.shop.order.placed").expect("a valid key"),
        source: "shop".to_owned(),
        node: "n1".to_owned(),
        time,
        causation_id: None,
        schema: None,
        extra_headers: Headers::new(),
        body: Bytes::from_static(b"{}"),
    });
    codec::mark_dead(
        &mut message,
        &DeadLetterNote {
            reason: DeadReason::Permanent,
            attempts: 3,
            last_error: Some("billing is down".into()),
            queue: queue.into(),
            time,
        },
    );
    message
}

/// Every page of `query` (`size` at a time), each after the last of the one before.
async fn paged(
    store: &Store,
    query: &DeadLetterQuery,
    size: usize,
) -> anyhow::Result<Vec<DeadLetterId>> {
    let mut seen = Vec::new();
    let mut page = query.clone().limit(size);
    loop {
        let rows = store.dead_letters(&page).await?;
        anyhow::ensure!(rows.len() <= size, "a page holds at most its limit");
        let Some(last) = rows.last() else { break };
        page = query.clone().limit(size).after(last.dead_at, last.id);
        seen.extend(rows.iter().map(|d| d.id));
    }
    Ok(seen)
}

/// Re-drives `query` in batches of `size`, each after the last dead letter of the one
/// before; returns the ids re-driven and the ids refused, in order.
async fn in_batches(
    store: &Store,
    broker: &MemoryBroker,
    query: &DeadLetterQuery,
    size: usize,
    options: RedriveOptions,
) -> anyhow::Result<(Vec<DeadLetterId>, Vec<DeadLetterId>)> {
    let (mut redriven, mut refused) = (Vec::new(), Vec::new());
    let mut batch = query.clone().limit(size);
    loop {
        let report = store
            .redrive_with(&broker.transport(), Redrive::Matching(batch), options)
            .await?;
        let seen = report.redriven.len() + report.failed.len();
        for (_, error) in &report.failed {
            anyhow::ensure!(error.kind() == &ErrorKind::ForeignQueue, "{error}");
        }
        redriven.extend(report.redriven);
        refused.extend(report.failed.into_iter().map(|(id, _)| id));
        match report.last {
            Some((time, id)) if seen == size => batch = query.clone().limit(size).after(time, id),
            _ => break,
        }
    }
    Ok((redriven, refused))
}

fn unique(ids: &[DeadLetterId]) -> bool {
    ids.iter().collect::<HashSet<_>>().len() == ids.len()
}

async fn dead_letters_page_and_redrive_in_batches(backend: Backend) -> anyhow::Result<()> {
    let temp = TempStore::new(backend).await?;
    let store: Store = temp.open().await?;
    // 20 of billing's, three set aside at each second (ties the cursor breaks by id), and 3
    // naming a queue that is no consumer's (refused by every re-drive).
    let mut messages: Vec<WireMessage> = (0..20)
        .map(|n| dead("n1.billing.events", at(n / 3)))
        .collect();
    messages.extend((0..3).map(|n| dead("serve.billing", at(n * 3))));
    store.record_dead_letters(&messages).await?;
    let all = DeadLetterQuery::new().reason(DeadReason::Permanent);

    for order in [Order::Asc, Order::Desc] {
        let whole: Vec<DeadLetterId> = store
            .dead_letters(&all.clone().order(order).limit(usize::MAX))
            .await?
            .into_iter()
            .map(|d| d.id)
            .collect();
        assert_eq!(whole.len(), 23);
        for size in [1, 4, 5, 23, 50] {
            let pages = paged(&store, &all.clone().order(order), size).await?;
            assert_eq!(
                pages, whole,
                "{order:?}, {size} a page: every one once, in order"
            );
        }
    }

    let broker = MemoryBroker::new();
    let handled = Arc::new(AtomicUsize::new(0));
    let billing = {
        let handled = handled.clone();
        Bus::builder()
            .node("n1")
            .module("billing")
            .on_raw(["module.shop.order.placed"], move |_| {
                handled.fetch_add(1, Ordering::SeqCst);
                async { Ok(()) }
            })
            .start(Arc::new(broker.transport()))
            .await?
    };
    let first = store
        .dead_letters(
            &DeadLetterQuery::new()
                .queue("n1.billing.events")
                .order(Order::Asc),
        )
        .await?[7]
        .id;
    store
        .redrive(&broker.transport(), Redrive::One(first))
        .await?;

    // Batches of 4: the refused ones are not tried again, the one re-driven before is left out.
    let oldest_first = all.clone().order(Order::Asc);
    let (redriven, refused) =
        in_batches(&store, &broker, &oldest_first, 4, RedriveOptions::new()).await?;
    assert_eq!(
        redriven.len(),
        19,
        "billing's, but the one re-driven before"
    );
    assert!(unique(&redriven) && !redriven.contains(&first));
    assert_eq!(refused.len(), 3, "each refused once");
    assert!(unique(&refused));
    assert_eq!(
        store.dead_letter(first).await?.expect("kept").redrive_count,
        1
    );

    // Asked for again, every one goes once more, the one re-driven before included.
    let (again, refused) = in_batches(
        &store,
        &broker,
        &oldest_first,
        6,
        RedriveOptions::new().again(true),
    )
    .await?;
    assert_eq!(again.len(), 20);
    assert!(unique(&again) && again.contains(&first));
    assert_eq!(refused.len(), 3);
    assert_eq!(
        store.dead_letter(first).await?.expect("kept").redrive_count,
        2
    );
    // By id too: a second re-drive is refused unless asked for again.
    let refused = store
        .redrive(&broker.transport(), Redrive::One(first))
        .await
        .expect_err("refused by id");
    assert_eq!(refused.kind(), &ErrorKind::AlreadyRedriven);
    let report = store
        .redrive_with(
            &broker.transport(),
            Redrive::One(first),
            RedriveOptions::new().again(true),
        )
        .await?;
    assert_eq!(report.redriven, [first]);

    eventually(WAIT, "billing handling every re-driven event", || {
        let n = handled.load(Ordering::SeqCst);
        async move { (n == 1 + 19 + 20 + 1).then_some(()) }
    })
    .await;
    billing.drain().await?;
    store.close().await;
    Ok(())
}

#[tokio::test]
async fn dead_letters_page_and_redrive_in_batches_sqlite() -> anyhow::Result<()> {
    dead_letters_page_and_redrive_in_batches(Backend::Sqlite).await
}

#[tokio::test]
async fn dead_letters_page_and_redrive_in_batches_postgres() -> anyhow::Result<()> {
    dead_letters_page_and_redrive_in_batches(Backend::Postgres).await
}
