//! `emit` and `tail` against a broker: ids, bodies, confirms, and no queue left behind.

use mesh_testkit::eventually;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::{assert_code, finish, json, mesh, run, stdout, tail, vhost, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_prints_an_event_and_leaves_no_queue() {
    let vhost = vhost("cli-tail").await;
    let url = vhost.url();
    let (tail, _errors) = tail(&url, "module.umami.#", &["--count", "1", "--json"]).await;
    let queues = vhost.list_queues().await.unwrap();
    assert!(
        queues
            .iter()
            .any(|q| q.exclusive && q.name.starts_with("amq.gen-")),
        "tail's queue exists while it runs: {queues:?}"
    );

    // Not matched by the pattern, then matched.
    let other = run(Some(&url), &["emit", "node.clitest.started"]).await;
    assert_code(&other, 0);
    let emitted = run(
        Some(&url),
        &[
            "emit",
            "module.umami.site.created",
            "--data",
            r#"{"site":"blog"}"#,
            "--causation",
            "cause-1",
            "--schema",
            "2",
        ],
    )
    .await;
    assert_code(&emitted, 0);
    let id = stdout(&emitted).trim().to_owned();
    assert_eq!(id.len(), 36, "an event id: {id}");

    let output = finish(tail).await;
    assert_code(&output, 0);
    let event = json(&output);
    assert_eq!(event["key"], "module.umami.site.created");
    assert_eq!(event["id"], id.as_str());
    assert_eq!(event["source"], "umami");
    assert_eq!(event["node"], crate::NODE);
    assert_eq!(event["causation_id"], "cause-1");
    assert_eq!(event["schema"], 2);
    assert_eq!(event["body"], serde_json::json!({"site": "blog"}));
    assert!(event["time"].as_str().is_some_and(|t| t.contains('T')));

    let queues = eventually(WAIT, "tail's queue to be gone", || async {
        let queues = vhost.list_queues().await.ok()?;
        // No queue at all: mesh declares none of its own for dead letters any more.
        queues.is_empty().then_some(queues)
    })
    .await;
    assert!(queues.iter().all(|q| !q.exclusive), "{queues:?}");
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emit_count_confirms_every_event_with_a_sequence_number() {
    let vhost = vhost("cli-count").await;
    let url = vhost.url();
    // A queue to count them in.
    let applied = run(
        Some(&url),
        &[
            "topology",
            "apply",
            "--module",
            "counter",
            "--pattern",
            "module.umami.#",
        ],
    )
    .await;
    assert_code(&applied, 0);

    let output = run(
        Some(&url),
        &[
            "emit",
            "module.umami.tick",
            "--data",
            r#"{"n":1}"#,
            "--count",
            "500",
            "--json",
        ],
    )
    .await;
    assert_code(&output, 0);
    let summary = json(&output);
    assert_eq!(summary["confirmed"], 500);
    assert_eq!(summary["failed"], 0);
    assert!(summary["rate"].as_f64().is_some_and(|r| r > 0.0));

    let paced = run(
        Some(&url),
        &["emit", "module.umami.tick", "--count", "10", "--rate", "50"],
    )
    .await;
    assert_code(&paced, 0);
    let text = stdout(&paced);
    assert!(text.contains("10 confirmed, 0 failed"), "{text}");

    let queue = "clitest.counter.events";
    eventually(WAIT, "510 events in the module's queue", || async {
        let queues = vhost.list_queues().await.ok()?;
        let q = queues.iter().find(|q| q.name == queue)?;
        (q.messages >= 510).then_some(())
    })
    .await;
    let queues = vhost.list_queues().await.unwrap();
    assert_eq!(
        queues.iter().find(|q| q.name == queue).unwrap().messages,
        510
    );

    // Each body carries its sequence number (seen through tail: a listener sees only new
    // events).
    let mut tail = mesh(Some(&url))
        .args(["tail", "module.umami.seq", "--count", "3", "--json"])
        .spawn()
        .unwrap();
    let mut errors = BufReader::new(tail.stderr.take().unwrap()).lines();
    tokio::time::timeout(WAIT, errors.next_line())
        .await
        .unwrap()
        .unwrap();
    let emitted = run(
        Some(&url),
        &[
            "emit",
            "module.umami.seq",
            "--data",
            "\"x\"",
            "--count",
            "3",
        ],
    )
    .await;
    assert_code(&emitted, 0);
    let output = finish(tail).await;
    assert_code(&output, 0);
    let mut seqs: Vec<u64> = stdout(&output)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            assert_eq!(v["body"]["data"], "x");
            v["body"]["seq"].as_u64().unwrap()
        })
        .collect();
    seqs.sort_unstable();
    assert_eq!(seqs, [1, 2, 3]);
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn emit_reads_the_body_from_a_file_and_node_events_need_no_node() {
    let vhost = vhost("cli-file").await;
    let url = vhost.url();
    let dir = std::env::temp_dir().join(format!("mesh-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("body.json");
    std::fs::write(&path, "{\n  \"pretty\": true\n}\n").unwrap();
    let output = run(
        Some(&url),
        &[
            "emit",
            "node.other.joined",
            "--data-file",
            path.to_str().unwrap(),
            "--json",
        ],
    )
    .await;
    assert_code(&output, 0);
    let value = json(&output);
    assert_eq!(value["key"], "node.other.joined");
    assert!(value["id"].as_str().is_some());
    std::fs::remove_dir_all(&dir).unwrap();
    vhost.delete().await.unwrap();
}
