//! `mesh logs tail` against records a program ships to `mesh.logs` (here the test itself,
//! through `mesh-logs`' tracing layer), by pattern.

use std::time::Duration;

use mesh_logs::LogsOptions;
use mesh_testkit::{eventually, TestVhost};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tracing_subscriber::layer::SubscriberExt;

use crate::{assert_code, finish, mesh, stdout, vhost, NODE, WAIT};

/// Records of the burst, after the four named ones.
const BURST: usize = 200;

/// Starts `mesh logs tail PATTERN ARGS…` and waits until it follows: it says so on stderr
/// once its queue is bound, and the binding is on the broker.
async fn start_tail(vhost: &TestVhost, pattern: &str, args: &[&str]) -> Child {
    start_tail_with(vhost, mesh(Some(&vhost.url())), pattern, args).await
}

/// [`start_tail`] with a `mesh` command set up by the caller (its stdout on a terminal).
pub(crate) async fn start_tail_with(
    vhost: &TestVhost,
    mut command: Command,
    pattern: &str,
    args: &[&str],
) -> Child {
    let mut child = command
        .args(["logs", "tail", pattern])
        .args(args)
        .spawn()
        .expect("mesh logs tail starts");
    let mut errors = BufReader::new(child.stderr.take().expect("stderr piped")).lines();
    let following = tokio::time::timeout(WAIT, errors.next_line())
        .await
        .expect("the tail follows in time")
        .expect("stderr is readable")
        .unwrap_or_default();
    assert!(
        following.contains(&format!("following mesh.logs on {pattern}")),
        "{following}"
    );
    let queue = following
        .split("(queue ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .expect("the tail names its queue")
        .to_owned();
    eventually(WAIT, "the tail's binding on mesh.logs", || async {
        let bindings = vhost.list_bindings().await.ok()?;
        bindings
            .iter()
            .any(|b| b.source == "mesh.logs" && b.destination == queue && b.routing_key == pattern)
            .then_some(())
    })
    .await;
    child
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_tail_prints_the_records_its_pattern_matches() {
    let vhost = vhost("cli-logs").await;
    let everything = start_tail(
        &vhost,
        &format!("{NODE}.billing.*"),
        &["--json", "--count", &(4 + BURST).to_string()],
    )
    .await;
    let errors = start_tail(&vhost, "#.error", &["--count", "1"]).await;

    let logs = mesh_logs::start(
        LogsOptions::new(&vhost.url(), NODE, "billing").expect("shipping options"),
    )
    .expect("the shipper starts");
    let subscriber = tracing_subscriber::registry().with(logs.layer());
    tracing::subscriber::with_default(subscriber, || {
        tracing::info!(plan = "gold", "quote computed");
        tracing::debug!("below the shipped level");
        tracing::warn!("quote slow");
        tracing::error!(code = 7, "quote failed");
        tracing::info!("done");
        for n in 0..BURST {
            tracing::info!(n, "burst");
        }
    });
    let stats = logs.shutdown(Duration::from_secs(30)).await;
    assert_eq!(
        (stats.published, stats.dropped),
        (4 + BURST as u64, 0),
        "{stats:?}"
    );

    // The billing tail: every shipped record, in order, with level, source and message.
    let output = finish(everything).await;
    assert_code(&output, 0);
    let records: Vec<serde_json::Value> = stdout(&output)
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON record per line"))
        .collect();
    assert_eq!(records.len(), 4 + BURST);
    let named: Vec<(&str, &str, &str, &str)> = records[..4]
        .iter()
        .map(|r| {
            (
                r["level"].as_str().unwrap_or_default(),
                r["node"].as_str().unwrap_or_default(),
                r["source"].as_str().unwrap_or_default(),
                r["message"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        named,
        [
            ("info", NODE, "billing", "quote computed"),
            ("warn", NODE, "billing", "quote slow"),
            ("error", NODE, "billing", "quote failed"),
            ("info", NODE, "billing", "done"),
        ]
    );
    assert_eq!(records[0]["fields"]["plan"], "gold");
    assert_eq!(records[2]["fields"]["code"], 7);
    for (n, record) in records[4..].iter().enumerate() {
        assert_eq!(record["message"], "burst");
        assert_eq!(record["fields"]["n"], n);
    }

    // The errors tail: the info and warn records before the error did not match, so the one
    // line it printed before exiting is the error, as text.
    let output = finish(errors).await;
    assert_code(&output, 0);
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert!(
        lines[0].contains(&format!("ERROR {NODE}.billing")),
        "{text}"
    );
    assert!(lines[0].contains("quote failed"), "{text}");
    assert!(lines[0].contains("code=7"), "{text}");

    // Both queues went with their tails.
    eventually(WAIT, "the tails' queues gone", || async {
        let queues = vhost.list_queues().await.ok()?;
        queues.iter().all(|q| !q.exclusive).then_some(())
    })
    .await;
    vhost.delete().await.expect("the vhost deleted");
}
