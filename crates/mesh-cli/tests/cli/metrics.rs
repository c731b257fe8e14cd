//! `--metrics-addr`: `mesh audit run` and `mesh tail` serve `/metrics`, `/livez` and
//! `/readyz`; the audit logger's counters are exact after known traffic, an event reusing
//! another's id among it (counted, and shown by `mesh audit count` and `query --conflicts`).

use std::net::SocketAddr;

use bytes::Bytes;
use mesh::raw::{codec, Envelope, EventId, Headers, PublishOptions, RoutingKey, Transport};
use mesh::{Bus, HandlerError};
use mesh_testkit::http::{get, must_get};
use mesh_testkit::prometheus::sample;
use mesh_testkit::{eventually, TempStore};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr};
use tokio::task::JoinHandle;

use crate::{assert_code, finish, json, mesh, options, run, stdout, transport, vhost, NODE, WAIT};

/// The line a command prints on stderr once its endpoint listens.
const METRICS_LINE: &str = "metrics on http://";

/// A child's stderr, read line by line.
struct Stderr {
    lines: Lines<BufReader<ChildStderr>>,
    seen: Vec<String>,
}

impl Stderr {
    fn new(stderr: ChildStderr) -> Stderr {
        Stderr {
            lines: BufReader::new(stderr).lines(),
            seen: Vec::new(),
        }
    }

    /// Reads until a line contains `text` and returns that line.
    async fn until(&mut self, text: &str) -> String {
        let found = tokio::time::timeout(WAIT, async {
            while let Some(line) = self.lines.next_line().await.expect("stderr is readable") {
                self.seen.push(line.clone());
                if line.contains(text) {
                    return Some(line);
                }
            }
            None
        })
        .await
        .unwrap_or_else(|_| panic!("no `{text}` on stderr in time: {:?}", self.seen));
        found.unwrap_or_else(|| panic!("stderr ended without `{text}`: {:?}", self.seen))
    }

    /// The address of the metrics line.
    async fn metrics_addr(&mut self) -> SocketAddr {
        let line = self.until(METRICS_LINE).await;
        line.split(METRICS_LINE)
            .nth(1)
            .and_then(|rest| rest.split('/').next())
            .and_then(|addr| addr.parse().ok())
            .unwrap_or_else(|| panic!("no address in `{line}`"))
    }

    /// Drains the rest in a task (so the child never blocks on a full pipe), which hands
    /// every line back once the child closed it.
    fn drain(mut self) -> JoinHandle<Vec<String>> {
        tokio::spawn(async move {
            while let Ok(Some(line)) = self.lines.next_line().await {
                self.seen.push(line);
            }
            self.seen
        })
    }
}

/// SIGTERM, then the exit code must be 0; returns what the child printed on stderr.
async fn stop(child: Child, stderr: JoinHandle<Vec<String>>) -> Vec<String> {
    let pid = child.id().expect("the child runs");
    kill(
        Pid::from_raw(i32::try_from(pid).expect("a pid")),
        Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let output = finish(child).await;
    let lines = tokio::time::timeout(WAIT, stderr)
        .await
        .expect("stderr closed in time")
        .expect("the stderr reader ran");
    assert_eq!(
        output.status.code(),
        Some(0),
        "stderr:\n{}",
        lines.join("\n")
    );
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_run_serves_exact_counts_and_health() {
    const EVENTS: u64 = 25;
    let vhost = vhost("cli-metrics").await;
    let url = vhost.url();
    let store = TempStore::sqlite();
    let mut logger = mesh(Some(&url))
        .args(["audit", "run", "--store", store.url()])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .spawn()
        .expect("mesh audit run starts");
    let mut stderr = Stderr::new(logger.stderr.take().expect("stderr piped"));
    let addr = stderr.metrics_addr().await;
    let stderr = stderr.drain();

    // Ready once both queues are consumed; live all along.
    let (status, body) = eventually(WAIT, "/readyz answering 200", || async {
        get(addr, "/readyz")
            .await
            .filter(|(status, _)| *status == 200)
    })
    .await;
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    assert_eq!(must_get(addr, "/livez").await, (200, "ok\n".to_owned()));
    // Ready means consuming (the broker's own count may lag a little behind).
    let audit_queue = format!("{NODE}.audit-logger.events");
    eventually(
        WAIT,
        "the broker counting the logger's consumer",
        || async {
            let queues = vhost.list_queues().await.ok()?;
            queues
                .iter()
                .any(|q| q.name == audit_queue && q.consumers == 1)
                .then_some(())
        },
    )
    .await;

    // Known traffic: EVENTS ticks, then one event a handler gives up on at once (stored as
    // an event, and its dead letter as a dead letter).
    let output = run(
        Some(&url),
        &[
            "emit",
            "module.umami.tick",
            "--count",
            &EVENTS.to_string(),
            "--json",
        ],
    )
    .await;
    assert_code(&output, 0);
    assert_eq!(json(&output)["confirmed"], EVENTS);
    let mailer = Bus::builder()
        .node(NODE)
        .module("mailer")
        .on_raw(["module.shop.#"], |_| async {
            Err::<(), _>(HandlerError::permanent("mail server unreachable"))
        })
        .start(transport(options(&vhost)).await)
        .await
        .expect("the mailer starts");
    let output = run(Some(&url), &["emit", "module.shop.order.placed"]).await;
    assert_code(&output, 0);

    // The ticks, the order, and the mailer's contract announcement (a bus with a handler
    // announces what it handles when it starts; the logger stores it like any event).
    let total = EVENTS + 2;
    let text = eventually(WAIT, "the audit counters reaching the traffic", || async {
        let (status, text) = get(addr, "/metrics").await?;
        let stored = sample(&text, "mesh_audit_events_stored_total", &[])?;
        let dead = sample(&text, "mesh_audit_dead_letters_stored_total", &[])?;
        (status == 200 && stored >= total as f64 && dead >= 1.0).then_some(text)
    })
    .await;
    assert_eq!(
        sample(&text, "mesh_audit_events_stored_total", &[]),
        Some(total as f64),
        "{text}"
    );
    assert_eq!(
        sample(&text, "mesh_audit_dead_letters_stored_total", &[]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "mesh_audit_duplicates_total", &[]),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "mesh_audit_id_conflicts_total", &[]),
        Some(0.0),
        "{text}"
    );
    assert!(
        sample(&text, "mesh_audit_batches_total", &[]).is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert!(
        sample(&text, "mesh_audit_batch_duration_seconds_count", &[]).is_some_and(|n| n >= 1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "mesh_audit_rejected_total", &[]),
        None,
        "nothing rejected: {text}"
    );
    assert!(
        text.contains("# HELP mesh_audit_events_stored_total"),
        "described: {text}"
    );

    // Once nothing is left to record, the count is still exact.
    eventually(WAIT, "the logger's queue drained", || async {
        let queues = vhost.list_queues().await.ok()?;
        queues
            .iter()
            .any(|q| q.name == audit_queue && q.messages == 0)
            .then_some(())
    })
    .await;
    let (status, text) = must_get(addr, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(
        sample(&text, "mesh_audit_events_stored_total", &[]),
        Some(total as f64),
        "{text}"
    );
    assert_eq!(must_get(addr, "/readyz").await.0, 200);
    assert_eq!(must_get(addr, "/nothing").await.0, 404);

    mailer.close().await;
    stop(logger, stderr).await;
    vhost.delete().await.expect("the vhost deleted");
}

/// An event of `module.shop` with this id and body, published raw.
fn shop_event(id: EventId, name: &str, body: &'static str) -> mesh::raw::WireMessage {
    codec::encode(&Envelope {
        id,
        key: RoutingKey::parse(&format!("module.shop.{name}")).expect("a valid key"),
        source: "shop".into(),
        node: NODE.into(),
        time: mesh::raw::Timestamp::now(),
        causation_id: None,
        schema: None,
        extra_headers: Headers::new(),
        body: Bytes::from_static(body.as_bytes()),
    })
}

/// One id, one event, end to end on PostgreSQL: an event published with the id of another
/// and a different body is kept as a conflict, not dropped as a duplicate. The logger counts
/// it (`mesh_audit_id_conflicts_total`), `mesh audit count` reports it, and
/// `mesh audit query --conflicts` shows it with its wire text escaped; the resends stay
/// duplicates.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_id_is_counted_and_shown_as_a_conflict() {
    let vhost = vhost("cli-conflicts").await;
    let url = vhost.url();
    let store = TempStore::postgres()
        .await
        .expect("a PostgreSQL database of the test's own (see MESH_TEST_PG_URL)");
    let mut logger = mesh(Some(&url))
        .args(["audit", "run", "--store", store.url()])
        .args(["--metrics-addr", "127.0.0.1:0"])
        .spawn()
        .expect("mesh audit run starts");
    let mut stderr = Stderr::new(logger.stderr.take().expect("stderr piped"));
    let addr = stderr.metrics_addr().await;
    let stderr = stderr.drain();
    eventually(WAIT, "/readyz answering 200", || async {
        get(addr, "/readyz")
            .await
            .filter(|(status, _)| *status == 200)
    })
    .await;

    // The event, a different one reusing its id (a bidi override in its body), then each
    // again: published in this order on one channel, so queued in it.
    let id = EventId::new();
    let original = shop_event(id, "order.placed", r#"{"n": 1}"#);
    let conflicting = shop_event(
        id,
        "order.placed",
        "{\"n\": 2, \"note\": \"\u{202E}fdp.exe\"}",
    );
    let raw = transport(options(&vhost)).await;
    for message in [&original, &conflicting, &conflicting, &original] {
        let confirm = raw
            .publish(message.clone(), PublishOptions::default())
            .await
            .expect("published");
        tokio::time::timeout(WAIT, confirm)
            .await
            .expect("confirmed in time")
            .expect("confirmed");
    }

    let text = eventually(WAIT, "the four deliveries counted", || async {
        let (status, text) = get(addr, "/metrics").await?;
        let seen = sample(&text, "mesh_audit_events_stored_total", &[])?
            + sample(&text, "mesh_audit_duplicates_total", &[])?
            + sample(&text, "mesh_audit_id_conflicts_total", &[])?;
        (status == 200 && seen >= 4.0).then_some(text)
    })
    .await;
    for (name, expected) in [
        ("mesh_audit_events_stored_total", 1.0),
        ("mesh_audit_id_conflicts_total", 1.0),
        ("mesh_audit_duplicates_total", 2.0),
    ] {
        assert_eq!(sample(&text, name, &[]), Some(expected), "{name}: {text}");
    }
    assert!(
        text.contains("# HELP mesh_audit_id_conflicts_total"),
        "described: {text}"
    );

    let output = run(
        Some(&url),
        &["audit", "count", "--json", "--store", store.url()],
    )
    .await;
    assert_code(&output, 0);
    let counts = json(&output);
    assert_eq!(
        (counts["events"].as_u64(), counts["conflicts"].as_u64()),
        (Some(1), Some(1)),
        "{counts}"
    );
    let output = run(Some(&url), &["audit", "count", "--store", store.url()]).await;
    assert_code(&output, 0);
    assert!(
        stdout(&output).starts_with("1 events, 1 id conflicts, "),
        "{}",
        stdout(&output)
    );

    let output = run(
        Some(&url),
        &[
            "audit",
            "query",
            "--conflicts",
            "--json",
            "--store",
            store.url(),
        ],
    )
    .await;
    assert_code(&output, 0);
    let conflict = json(&output);
    assert_eq!(conflict["conflicts_with"], id.to_string(), "{conflict}");
    assert_eq!(conflict["id"], id.to_string(), "{conflict}");
    assert_eq!(conflict["body"]["n"], 2, "{conflict}");
    assert!(conflict["conflict_id"].is_string(), "{conflict}");
    let output = run(
        Some(&url),
        &["audit", "query", "--conflicts", "--store", store.url()],
    )
    .await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert_eq!(text.lines().count(), 1, "one conflict, one line: {text:?}");
    assert!(text.contains(&format!("conflicts with {id}")), "{text:?}");
    assert!(text.contains("\\u{202e}fdp.exe"), "escaped: {text:?}");
    assert!(!text.contains('\u{202E}'), "{text:?}");
    // The trail of events holds the original only.
    let output = run(
        Some(&url),
        &["audit", "query", "--json", "--store", store.url()],
    )
    .await;
    assert_code(&output, 0);
    assert_eq!(json(&output)["body"], serde_json::json!({ "n": 1 }));

    Transport::close(raw.as_ref()).await;
    stop(logger, stderr).await;
    vhost.delete().await.expect("the vhost deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_serves_health_following_its_bus() {
    let vhost = vhost("cli-tail-metrics").await;
    let url = vhost.url();
    let mut tail = mesh(Some(&url))
        .args(["tail", "module.#", "--metrics-addr", "127.0.0.1:0"])
        .spawn()
        .expect("mesh tail starts");
    let mut stderr = Stderr::new(tail.stderr.take().expect("stderr piped"));
    let addr = stderr.metrics_addr().await;
    stderr.until("listening on module.#").await;
    let stderr = stderr.drain();

    eventually(WAIT, "/readyz answering 200", || async {
        get(addr, "/readyz")
            .await
            .filter(|(status, _)| *status == 200)
    })
    .await;
    assert_eq!(must_get(addr, "/livez").await, (200, "ok\n".to_owned()));
    let (status, text) = must_get(addr, "/metrics").await;
    assert_eq!(status, 200);
    assert_eq!(
        sample(&text, "mesh_ready", &[("node", NODE)]),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        sample(&text, "mesh_connected", &[("node", NODE)]),
        Some(1.0),
        "{text}"
    );

    let lines = stop(tail, stderr).await;
    assert!(
        lines
            .iter()
            .any(|line| line.contains("listening on module.#")),
        "{lines:?}"
    );
    vhost.delete().await.expect("the vhost deleted");
}
