//! `audit` and `dead` with the logger running (`mesh audit run`, a real process).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use amqprs::channel::QueueDeclareArguments;
use amqprs::connection::{Connection, OpenConnectionArguments};
use mesh::{Bus, HandlerError};
pub(crate) use mesh_testkit::TempStore;
use mesh_testkit::{eventually, TestVhost};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::Child;

use crate::{
    assert_code, code, finish, json, mesh, options, run, stderr, stdout, transport, vhost, NODE,
    WAIT,
};

/// Starts `mesh audit run` and waits until its queue has a consumer.
pub(crate) async fn start_logger(vhost: &TestVhost, store: &TempStore) -> Child {
    let child = mesh(Some(&vhost.url()))
        .args(["audit", "run", "--store", store.url()])
        .spawn()
        .expect("mesh audit run starts");
    let queue = format!("{NODE}.audit-logger.events");
    eventually(WAIT, "the audit logger consuming", || async {
        let (_, consumers) = queue_counts(vhost, &queue).await?;
        (consumers > 0).then_some(())
    })
    .await;
    child
}

/// `queue`'s ready messages and consumers, as the queue itself counts them: a passive
/// `queue.declare` over AMQP (the broker's state: no statistics that lag, and no
/// `rabbitmqctl`, whose Erlang VM per call overran its 60 s limit under load); `None` when
/// the queue does not exist (yet).
pub(crate) async fn queue_counts(vhost: &TestVhost, queue: &str) -> Option<(u64, u32)> {
    let addr = vhost.broker_addr();
    let args = OpenConnectionArguments::new(&addr.ip().to_string(), addr.port(), "guest", "guest")
        .virtual_host(vhost.name())
        .connection_name("queue-counts")
        .finish();
    let connection = Connection::open(&args)
        .await
        .expect("a connection to count a queue");
    let channel = connection.open_channel(None).await.expect("a channel");
    let declared = channel
        .queue_declare(QueueDeclareArguments::new(queue).passive(true).finish())
        .await;
    let _ = connection.close().await;
    let (_, ready, consumers) = declared.ok()??;
    Some((u64::from(ready), consumers))
}

/// Stops the logger gracefully (SIGTERM) and checks it exited 0.
pub(crate) async fn stop_logger(child: Child) {
    let pid = child.id().expect("the logger runs");
    kill(
        Pid::from_raw(i32::try_from(pid).expect("a pid")),
        Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let output = finish(child).await;
    assert_code(&output, 0);
}

async fn count(url: &str, store: &TempStore) -> u64 {
    let output = run(
        Some(url),
        &["audit", "count", "--json", "--store", store.url()],
    )
    .await;
    assert_code(&output, 0);
    json(&output)["events"].as_u64().expect("a count")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_emitted_events_are_counted_once() {
    let vhost = vhost("cli-audit").await;
    let url = vhost.url();
    let store = TempStore::sqlite();
    let logger = start_logger(&vhost, &store).await;

    let output = run(
        Some(&url),
        &["emit", "module.umami.tick", "--count", "10000", "--json"],
    )
    .await;
    assert_code(&output, 0);
    assert_eq!(json(&output)["confirmed"], 10_000);

    let counted = eventually(WAIT * 2, "10,000 events in the audit store", || async {
        let n = count(&url, &store).await;
        (n >= 10_000).then_some(n)
    })
    .await;
    assert_eq!(counted, 10_000);
    // Nothing left to record, and still not more.
    let queue = format!("{NODE}.audit-logger.events");
    eventually(WAIT, "the logger's queue drained", || async {
        let queues = vhost.list_queues().await.ok()?;
        queues
            .iter()
            .any(|q| q.name == queue && q.messages == 0)
            .then_some(())
    })
    .await;
    assert_eq!(count(&url, &store).await, 10_000);

    let output = run(
        Some(&url),
        &[
            "audit",
            "count",
            "--key",
            "module.umami.#",
            "--by-key",
            "--json",
            "--store",
            store.url(),
        ],
    )
    .await;
    assert_code(&output, 0);
    assert_eq!(
        json(&output),
        serde_json::json!({"key": "module.umami.tick", "events": 10_000})
    );

    stop_logger(logger).await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_trace_and_dead_letters_round_trip() {
    let vhost = vhost("cli-dead").await;
    let url = vhost.url();
    let store = TempStore::sqlite();
    let logger = start_logger(&vhost, &store).await;

    // A cause and its effect, linked with --causation.
    let cause = run(
        Some(&url),
        &[
            "emit",
            "module.umami.site.created",
            "--data",
            r#"{"site":"blog"}"#,
        ],
    )
    .await;
    assert_code(&cause, 0);
    let cause_id = stdout(&cause).trim().to_owned();
    let effect = run(
        Some(&url),
        &[
            "emit",
            "module.billing.invoice.created",
            "--causation",
            &cause_id,
        ],
    )
    .await;
    assert_code(&effect, 0);
    let effect_id = stdout(&effect).trim().to_owned();
    eventually(WAIT, "both events recorded", || async {
        (count(&url, &store).await >= 2).then_some(())
    })
    .await;

    let output = run(
        Some(&url),
        &[
            "audit",
            "query",
            "--key",
            "module.umami.#",
            "--json",
            "--store",
            store.url(),
        ],
    )
    .await;
    assert_code(&output, 0);
    let event = json(&output);
    assert_eq!(event["id"], cause_id.as_str());
    assert_eq!(event["body"], serde_json::json!({"site": "blog"}));
    // Who published it, as the broker validated it: the CLI's connection user.
    let user = url
        .parse::<mesh_amqp::AmqpOptions>()
        .expect("the vhost URL parses")
        .get_user()
        .to_owned();
    assert_eq!(event["publisher"], user.as_str());

    let output = run(
        Some(&url),
        &["audit", "trace", &effect_id, "--store", store.url()],
    )
    .await;
    assert_code(&output, 0);
    let tree = stdout(&output);
    let lines: Vec<&str> = tree.lines().collect();
    assert_eq!(lines.len(), 2, "{tree}");
    assert!(lines[0].starts_with("module.umami.site.created"), "{tree}");
    assert!(
        lines[1].starts_with("└─ module.billing.invoice.created"),
        "{tree}"
    );
    assert!(
        lines[1].ends_with('◀'),
        "the event asked for is marked: {tree}"
    );

    // A handler that gives up at once: the event is dead-lettered, and recorded.
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let mailer = Bus::builder()
        .node(NODE)
        .module("mailer")
        .on_raw(["module.umami.#"], move |_| {
            seen.fetch_add(1, Ordering::SeqCst);
            async { Err::<(), _>(HandlerError::permanent("mail server unreachable")) }
        })
        .start(transport(options(&vhost)).await)
        .await
        .unwrap();
    let output = run(Some(&url), &["emit", "module.umami.user.joined"]).await;
    assert_code(&output, 0);
    let dead = eventually(WAIT, "the dead letter recorded", || async {
        let output = run(
            Some(&url),
            &[
                "dead",
                "list",
                "--pending",
                "--json",
                "--store",
                store.url(),
            ],
        )
        .await;
        assert_code(&output, 0);
        let text = stdout(&output);
        let line = text.lines().next()?;
        serde_json::from_str::<serde_json::Value>(line).ok()
    })
    .await;
    assert_eq!(dead["key"], "module.umami.user.joined");
    assert_eq!(dead["reason"], "permanent");
    assert_eq!(dead["queue"], format!("{NODE}.mailer.events"));
    let id = dead["id"].as_str().unwrap().to_owned();

    // status counts it for the module.
    let output = run(Some(&url), &["status", "--json", "--store", store.url()]).await;
    assert_code(&output, 0);
    let status = json(&output);
    let module = status["modules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["module"] == "mailer")
        .cloned()
        .unwrap();
    assert_eq!(module["dead_letters"], 1, "{status}");

    let output = run(
        Some(&url),
        &["dead", "show", &id, "--json", "--store", store.url()],
    )
    .await;
    assert_code(&output, 0);
    let shown = json(&output);
    assert!(shown["last_error"]
        .as_str()
        .unwrap()
        .contains("mail server unreachable"));
    assert_eq!(shown["body"], serde_json::json!({}));

    // A dry run says where it would go, and sends nothing: the handler is not called
    // again and the dead letter stays pending.
    let output = run(
        Some(&url),
        &[
            "dead",
            "redrive",
            "--all",
            "--dry-run",
            "--store",
            store.url(),
        ],
    )
    .await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert!(
        text.contains(&format!("would re-drive {id} -> {NODE}.mailer.events")),
        "{text}"
    );
    assert!(text.contains("1 would be re-driven, 0 refused"), "{text}");
    let output = run(
        Some(&url),
        &[
            "dead",
            "list",
            "--pending",
            "--json",
            "--store",
            store.url(),
        ],
    )
    .await;
    assert_eq!(stdout(&output).lines().count(), 1, "still pending");
    assert_eq!(calls.load(Ordering::SeqCst), 1, "nothing was re-driven");

    let output = run(
        Some(&url),
        &["dead", "redrive", &id, "--json", "--store", store.url()],
    )
    .await;
    assert_code(&output, 0);
    assert_eq!(json(&output)["redriven"], serde_json::json!([id]));
    eventually(WAIT, "the re-driven event handled again", || async {
        (calls.load(Ordering::SeqCst) >= 2).then_some(())
    })
    .await;
    let output = run(
        Some(&url),
        &["dead", "show", &id, "--json", "--store", store.url()],
    )
    .await;
    assert_eq!(json(&output)["redrive_count"], 1);

    // By its event's id, `dead show` finds the event's dead letters.
    let event_id = dead["event_id"].as_str().unwrap().to_owned();
    assert_ne!(event_id, id, "a dead letter has an id of its own");
    let output = run(
        Some(&url),
        &["dead", "show", &event_id, "--json", "--store", store.url()],
    )
    .await;
    assert_code(&output, 0);
    // One per line: the event died again after its re-drive, maybe recorded by now.
    let shown: Vec<serde_json::Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON object per line"))
        .collect();
    assert!(
        shown.iter().all(|d| d["event_id"] == event_id.as_str()),
        "{shown:?}"
    );
    assert!(shown.iter().any(|d| d["id"] == id.as_str()), "{shown:?}");
    // An id of neither: it says that dead letters have ids of their own, and where they are.
    let unknown = "3f0c1d1e-2b53-5b8e-9a43-0c2b3f1f4f55";
    let output = run(
        Some(&url),
        &["dead", "show", unknown, "--store", store.url()],
    )
    .await;
    assert_code(&output, 1);
    let err = stderr(&output);
    assert!(
        err.contains(&format!(
            "no dead letter {unknown}, and no dead letter of an event {unknown}"
        )),
        "{err}"
    );
    assert!(
        err.contains("hint: dead letters have ids of their own: `mesh dead list`"),
        "{err}"
    );

    // A second re-drive by id is refused without --again; the store's record stays.
    let output = run(
        Some(&url),
        &["dead", "redrive", &id, "--store", store.url()],
    )
    .await;
    assert_code(&output, 1);
    let text = stdout(&output);
    assert!(
        text.contains(&format!("failed {id}: re-driven already")),
        "{text}"
    );
    assert!(
        stderr(&output).contains("give --again"),
        "{}",
        stderr(&output)
    );
    let output = run(
        Some(&url),
        &["dead", "redrive", &id, "--dry-run", "--store", store.url()],
    )
    .await;
    assert_code(&output, 1);
    assert!(
        stdout(&output).contains("would refuse"),
        "{}",
        stdout(&output)
    );
    let output = run(
        Some(&url),
        &["dead", "show", &id, "--json", "--store", store.url()],
    )
    .await;
    assert_eq!(
        json(&output)["redrive_count"],
        1,
        "refused: nothing sent, nothing marked"
    );
    let output = run(
        Some(&url),
        &[
            "dead",
            "redrive",
            &id,
            "--again",
            "--json",
            "--store",
            store.url(),
        ],
    )
    .await;
    assert_code(&output, 0);
    assert_eq!(json(&output)["redriven"], serde_json::json!([id]));
    eventually(WAIT, "the event re-driven once more", || async {
        (calls.load(Ordering::SeqCst) >= 3).then_some(())
    })
    .await;
    let output = run(
        Some(&url),
        &["dead", "show", &id, "--json", "--store", store.url()],
    )
    .await;
    assert_eq!(json(&output)["redrive_count"], 2);
    // --again names dead letters: with --all or --queue it is a usage error.
    let output = run(
        Some(&url),
        &[
            "dead",
            "redrive",
            "--all",
            "--again",
            "--store",
            store.url(),
        ],
    )
    .await;
    assert_code(&output, 2);

    let output = run(
        Some(&url),
        &["dead", "show", "not-an-id", "--store", store.url()],
    )
    .await;
    assert_code(&output, 2);

    // Purge: a filter (or --all) is required; a filter matching nothing deletes nothing; the
    // re-driven letter goes, and is then gone from the store.
    let output = run(Some(&url), &["dead", "purge", "--store", store.url()]).await;
    assert_code(&output, 2);
    let output = run(
        Some(&url),
        &[
            "dead",
            "purge",
            "--queue",
            "no.such.events",
            "--json",
            "--store",
            store.url(),
        ],
    )
    .await;
    assert_code(&output, 0);
    assert_eq!(json(&output)["purged"], 0);
    let output = run(
        Some(&url),
        &[
            "dead",
            "purge",
            "--redriven",
            "--json",
            "--store",
            store.url(),
        ],
    )
    .await;
    assert_code(&output, 0);
    assert_eq!(json(&output)["purged"], 1);
    let output = run(Some(&url), &["dead", "show", &id, "--store", store.url()]).await;
    assert_ne!(code(&output), 0, "a purged dead letter is gone");

    mailer.close().await;
    stop_logger(logger).await;
    vhost.delete().await.unwrap();
}
