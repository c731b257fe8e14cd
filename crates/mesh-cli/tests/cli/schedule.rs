//! `mesh emit --after`/`--at`: the event is emitted by the module's forwarding bus, no
//! earlier than asked.

use std::time::Duration;

use bytes::Bytes;
use mesh::{Bus, Incoming, Timestamp};
use tokio::sync::mpsc;

use crate::{assert_code, json, run, vhost, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emit_after_two_seconds_arrives_after_two_seconds() {
    let vhost = vhost("cli-schedule").await;
    let url = vhost.url();
    // Before any bus of umami forwards scheduled events there is no schedule queue.
    let early = run(
        Some(&url),
        &["emit", "module.umami.reminder.due", "--after", "2s"],
    )
    .await;
    assert_code(&early, 7);

    let forwarder = Bus::builder()
        .node("n1")
        .module("umami")
        .forward_scheduled(true)
        .announce(false)
        .start(mesh_testkit::sdk::transport(&url).await.expect("connects"))
        .await
        .expect("umami forwards scheduled events");
    let (seen, mut got) = mpsc::unbounded_channel();
    let watcher = Bus::builder()
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
        .start(mesh_testkit::sdk::transport(&url).await.expect("connects"))
        .await
        .expect("the watcher starts");

    let asked = Timestamp::now();
    let emitted = run(
        Some(&url),
        &[
            "--json",
            "emit",
            "module.umami.reminder.due",
            "--data",
            r#"{"n":1}"#,
            "--after",
            "2s",
        ],
    )
    .await;
    assert_code(&emitted, 0);
    let line = json(&emitted);
    let (event, at) = tokio::time::timeout(WAIT, got.recv())
        .await
        .expect("delivered in time")
        .expect("the watcher runs");
    assert_eq!(line["id"], event.meta.id().to_string().as_str());
    assert_eq!(line["due"], event.meta.time().text().as_str());
    let waited = at.unix_nanos() - asked.unix_nanos();
    assert!(
        waited >= 2_000_000_000,
        "delivered {waited} ns after it was asked for, before 2 s"
    );
    assert!(at >= event.meta.time(), "before its due time");

    // --at, and refusals: not a module's key, another module's source, both flags.
    let due = Timestamp::now()
        .checked_add(Duration::from_millis(500))
        .expect("in range");
    let at_run = run(
        Some(&url),
        &["emit", "module.umami.reminder.due", "--at", &due.text()],
    )
    .await;
    assert_code(&at_run, 0);
    let (event, at) = tokio::time::timeout(WAIT, got.recv())
        .await
        .expect("delivered in time")
        .expect("the watcher runs");
    assert_eq!(event.meta.time(), due);
    assert!(at >= due, "before its due time");
    for args in [
        &["emit", "node.n1.ping", "--after", "1s"][..],
        &[
            "emit",
            "module.billing.invoice.due",
            "--source",
            "umami",
            "--after",
            "1s",
        ][..],
        &[
            "emit",
            "module.umami.a",
            "--after",
            "1s",
            "--at",
            "2030-01-01T00:00:00Z",
        ][..],
        &["emit", "module.umami.a", "--after", "soon"][..],
        &["emit", "module.umami.a", "--at", "tomorrow"][..],
    ] {
        let refused = run(Some(&url), args).await;
        assert_code(&refused, 2);
    }
    watcher.drain().await.expect("drained");
    forwarder.drain().await.expect("drained");
    vhost.delete().await.expect("the vhost is deleted");
}
