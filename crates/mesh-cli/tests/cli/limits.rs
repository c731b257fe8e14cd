//! Every numeric or duration argument at the limits of its type is a usage error (exit code
//! 2) with a message saying what is accepted, refused before connecting; the largest and
//! smallest accepted values run without a panic.

use crate::{assert_code, run, stderr, vhost};

/// Nothing listens on port 1: a usage error is found before connecting.
const UNREACHABLE: &str = "amqp://127.0.0.1:1";

/// Runs `mesh args…` and asserts a usage error whose stderr says `expected`, on one line
/// after clap's own (no panic, no connection attempt).
async fn refused(args: &[&str], expected: &str) {
    let output = run(Some(UNREACHABLE), args).await;
    assert_code(&output, 2);
    let err = stderr(&output);
    assert!(err.contains(expected), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
    assert!(
        !err.contains("cannot connect"),
        "{args:?}: refused before connecting: {err}"
    );
}

#[tokio::test]
async fn durations_beyond_a_day_or_zero_are_usage_errors() {
    for value in ["300000y", "18446744073709551615s", "0s", "25h"] {
        refused(&["call", "billing.quote", "--timeout", value], "1ms to 24h").await;
        refused(
            &[
                "--connect-timeout",
                value,
                "emit",
                "module.umami.site.created",
            ],
            "1ms to 24h",
        )
        .await;
    }
    // Too large for humantime itself.
    refused(
        &[
            "call",
            "billing.quote",
            "--timeout",
            "99999999999999999999999s",
        ],
        "e.g. 500ms",
    )
    .await;
}

#[tokio::test]
async fn times_ago_before_the_year_1_are_usage_errors() {
    let store = format!(
        "sqlite://{}?mode=rwc",
        std::env::temp_dir()
            .join(format!("mesh-cli-limits-{}.db", std::process::id()))
            .display()
    );
    for value in ["300000y", "18446744073709551615s"] {
        refused(
            &["audit", "query", "--store", &store, "--since", value],
            "before the year 1",
        )
        .await;
        refused(
            &["audit", "count", "--store", &store, "--until", value],
            "before the year 1",
        )
        .await;
        refused(
            &["dead", "list", "--store", &store, "--since", value],
            "before the year 1",
        )
        .await;
    }
    refused(
        &[
            "audit",
            "query",
            "--store",
            &store,
            "--since",
            "99999999999999999999999s",
        ],
        "neither an RFC 3339 time nor a duration",
    )
    .await;
}

#[tokio::test]
async fn rates_outside_one_a_day_to_a_million_are_usage_errors() {
    for value in [
        "1e-300", "inf", "nan", "-1", "0", "1e300", "1000001", "NaN", "-inf",
    ] {
        let rate = format!("--rate={value}");
        refused(
            &["emit", "module.umami.site.created", "--count", "2", &rate],
            "from 0.0000116 (one a day) to 1000000",
        )
        .await;
    }
}

#[tokio::test]
async fn counts_limits_and_batches_at_their_limits_are_usage_errors() {
    const MAX: &str = "18446744073709551615";
    const OVER: &str = "18446744073709551616";
    for (args, expected) in [
        (vec!["tail", "--count", "0"], "0 is not in 1.."),
        (vec!["tail", "--count", OVER], "invalid value"),
        (vec!["logs", "tail", "--count", "0"], "0 is not in 1.."),
        (
            vec!["emit", "module.a.b", "--count", "0"],
            "0 is not in 1..",
        ),
        (vec!["emit", "module.a.b", "--count", OVER], "invalid value"),
        (
            vec!["emit", "module.a.b", "--schema", "4294967296"],
            "invalid value",
        ),
        (vec!["audit", "query", "--limit", MAX], "from 1 to 1000000"),
        (vec!["audit", "query", "--limit", "0"], "from 1 to 1000000"),
        (vec!["dead", "list", "--limit", MAX], "from 1 to 1000000"),
        (
            vec!["audit", "run", "--batch-size", MAX],
            "from 1 to 100000",
        ),
        (
            vec!["audit", "run", "--batch-size", "0"],
            "from 1 to 100000",
        ),
        (
            vec!["audit", "run", "--batch-wait", "3601s"],
            "from 0ms to 1h",
        ),
        (vec!["audit", "run", "--batch-wait", MAX], "e.g. 500ms"),
        (vec!["audit", "run", "--prefetch", "0"], "from 1 to 65535"),
        (
            vec!["audit", "run", "--prefetch", "65536"],
            "from 1 to 65535",
        ),
        (
            vec!["topology", "plan", "--delivery-limit", OVER],
            "invalid value",
        ),
        (
            vec!["tail", "--metrics-addr", "127.0.0.1:65536"],
            "invalid value",
        ),
    ] {
        refused(&args, expected).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_extreme_accepted_values_run_without_a_panic() {
    let vhost = vhost("cli-limits").await;
    let url = vhost.url();
    // The longest timeout: its deadline is an instant a day away; no server answers.
    let output = run(Some(&url), &["call", "billing.quote", "--timeout", "24h"]).await;
    assert_code(&output, 4);
    // The fastest and slowest rates: the first event goes at once either way.
    for rate in ["1000000", "0.0000116"] {
        let output = run(
            Some(&url),
            &["emit", "node.clitest.tick", "--count", "1", "--rate", rate],
        )
        .await;
        assert_code(&output, 0);
    }
    let output = run(
        Some(&url),
        &["--connect-timeout", "24h", "emit", "node.clitest.tick"],
    )
    .await;
    assert_code(&output, 0);
    vhost.delete().await.expect("the vhost is deleted");
}

/// A body larger than 16 MiB, from a file or from stdin, is a usage error, read no further
/// than the bound and refused before connecting; so is a file that is not there.
#[tokio::test]
async fn an_oversized_or_missing_body_file_is_a_usage_error() {
    let dir = mesh_testkit::TempDir::new("mesh-cli-body").expect("a temp dir");
    let big = dir.path().join("big.json");
    let mut body = vec![b' '; 16 * 1024 * 1024];
    body.extend_from_slice(b"{}");
    std::fs::write(&big, &body).expect("written");
    let big_arg = big.to_str().expect("a UTF-8 path");
    refused(
        &["emit", "module.a.b", "--data-file", big_arg],
        "larger than 16 MiB",
    )
    .await;
    let missing = dir.path().join("missing.json");
    refused(
        &[
            "emit",
            "module.a.b",
            "--data-file",
            missing.to_str().expect("a UTF-8 path"),
        ],
        "cannot read --data-file",
    )
    .await;

    // The same bound on stdin, fed more than it will read.
    let mut child = crate::mesh(Some(UNREACHABLE))
        .args(["emit", "module.a.b", "--data-file", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("mesh starts");
    let mut stdin = child.stdin.take().expect("piped");
    let feeder = tokio::spawn(async move {
        use tokio::io::AsyncWriteExt as _;
        // The tool stops reading past the bound and exits: the pipe then breaks.
        let _ = stdin.write_all(&body).await;
    });
    let output = crate::finish(child).await;
    feeder.await.expect("the feeder ends");
    assert_code(&output, 2);
    let err = stderr(&output);
    assert!(err.contains("larger than 16 MiB"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}
