//! `mesh emit --after`/`--at`: the event is emitted by the module's forwarding bus, no
//! earlier than asked.

use std::time::Duration;

use bytes::Bytes;
use mesh::{Bus, Incoming, Timestamp};
use tokio::sync::mpsc;

use mesh::amqp::access::AccessSpec;
use mesh::raw::{Name, TopicPattern};
use mesh::Outgoing;
use mesh_testkit::planned::PlannedNode;

use crate::{assert_code, finish, json, mesh, run, vhost, WAIT};

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

/// The error and its causes, as one line.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

/// Under the narrowed access plan (a module configures server-named queues only), a bus that
/// forwards scheduled events cannot start before its schedule queue exists; once `mesh
/// topology apply` declared it and its hops from the spec (nothing by hand), it starts as its
/// module's own user and the event it schedules arrives, no earlier than due.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarding_bus_starts_as_its_own_user_after_topology_apply_alone() {
    let umami_name = Name::parse("umami").unwrap();
    let access = AccessSpec::new(Name::parse("n1").unwrap())
        .module(umami_name, [])
        .module(
            Name::parse("watcher").unwrap(),
            [TopicPattern::parse("module.umami.#").unwrap()],
        );
    let node = PlannedNode::start(&access).await.expect("the planned node");
    let forwarder = || async {
        Bus::builder()
            .node("n1")
            .module("umami")
            .announce(false)
            .forward_scheduled(true)
            .start(
                node.transport("module.umami")
                    .await
                    .expect("umami connects"),
            )
            .await
    };
    let refused = forwarder()
        .await
        .expect_err("no schedule queue yet, and umami may not declare it");
    assert!(
        chain(&refused).contains("mesh topology apply"),
        "{}",
        chain(&refused)
    );

    let dir = mesh_testkit::TempDir::new("schedule-apply").unwrap();
    let spec = dir.join("mesh.toml");
    std::fs::write(
        &spec,
        "node = \"n1\"\n[[modules]]\nname = \"umami\"\nforward_scheduled = true\n",
    )
    .unwrap();
    let management_url = format!(
        "http://127.0.0.1:{}",
        node.node.management_port().expect("management enabled")
    );
    let applied = finish(
        mesh(Some(&node.node.url()))
            .args(["topology", "apply", "--spec"])
            .arg(&spec)
            .args(["--management-url", &management_url])
            .spawn()
            .expect("mesh starts"),
    )
    .await;
    assert_code(&applied, 0);

    let forwarder = forwarder()
        .await
        .unwrap_or_else(|e| panic!("umami forwards as its own user: {}", chain(&e)));
    let watcher = Bus::builder()
        .node("n1")
        .module("watcher")
        .announce(false)
        .start(
            node.transport("module.watcher")
                .await
                .expect("watcher connects"),
        )
        .await
        .expect("the watcher starts");
    let mut seen = watcher
        .listen(["module.umami.#"])
        .await
        .expect("the watcher listens");
    let id = forwarder
        .emit_outgoing_after(
            Duration::from_secs(1),
            Outgoing::json("reminder.due", &1).unwrap(),
        )
        .await
        .expect("umami schedules its own event");
    let event = tokio::time::timeout(WAIT, seen.next())
        .await
        .expect("delivered in time")
        .expect("the watcher listens")
        .expect("a decodable event");
    let arrived = Timestamp::now();
    assert_eq!(event.meta.id(), id);
    assert!(arrived >= event.meta.time(), "before its due time");
    watcher.close().await;
    forwarder.close().await;
}
