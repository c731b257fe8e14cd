//! What is refused before connecting, and a broker that cannot be reached.

use std::time::{Duration, Instant};

use crate::{assert_code, run, stderr, stdout};

/// Nothing listens on port 1.
const UNREACHABLE: &str = "amqp://127.0.0.1:1";

#[tokio::test]
async fn an_invalid_key_is_refused_before_connecting() {
    let output = run(Some(UNREACHABLE), &["emit", "foo.bar.baz", "--data", "{}"]).await;
    assert_code(&output, 2);
    let err = stderr(&output);
    assert!(err.contains("unknown origin `foo`"), "{err}");
    assert!(!err.contains("connect"), "refused before connecting: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");

    let output = run(Some(UNREACHABLE), &["emit", "module.umami"]).await;
    assert_code(&output, 2);
    assert!(stderr(&output).contains("at least 3 are needed"));

    let output = run(Some(UNREACHABLE), &["emit", "module.umami.*"]).await;
    assert_code(&output, 2);
    assert!(stderr(&output).contains("wildcard"));
}

#[tokio::test]
async fn data_that_is_not_json_is_refused_before_connecting() {
    let output = run(
        Some(UNREACHABLE),
        &["emit", "module.umami.site.created", "--data", "{site"],
    )
    .await;
    assert_code(&output, 2);
    let err = stderr(&output);
    assert!(err.contains("payload is not valid JSON"), "{err}");
    assert!(!err.contains("connect"), "{err}");
}

#[tokio::test]
async fn a_source_that_does_not_own_the_key_is_refused_with_the_contracts_error() {
    let output = run(
        Some(UNREACHABLE),
        &["emit", "module.umami.site.created", "--source", "billing"],
    )
    .await;
    assert_code(&output, 2);
    let err = stderr(&output);
    assert!(
        err.contains(
            "may not emit `module.umami.site.created`: this bus emits only under `module.billing."
        ),
        "{err}"
    );
}

#[tokio::test]
async fn invalid_patterns_tool_keys_and_arguments_are_usage_errors() {
    let output = run(Some(UNREACHABLE), &["tail", "a*"]).await;
    assert_code(&output, 2);
    let output = run(Some(UNREACHABLE), &["call", "no*tool"]).await;
    assert_code(&output, 2);
    let output = run(Some(UNREACHABLE), &["call", "a.b", "--data", "nope"]).await;
    assert_code(&output, 2);
    let output = run(Some(UNREACHABLE), &["call", "a.b", "--timeout", "soon"]).await;
    assert_code(&output, 2);
    let output = run(Some(UNREACHABLE), &["frobnicate"]).await;
    assert_code(&output, 2);
    let output = run(Some("http://not-amqp"), &["emit", "module.a.b"]).await;
    assert_code(&output, 2);
    assert!(stderr(&output).contains("invalid --url"));
}

#[tokio::test]
async fn an_unreachable_broker_fails_fast_with_code_3() {
    for args in [
        &["emit", "module.umami.site.created"][..],
        &["emit", "module.umami.site.created", "--count", "5"],
        &["tail", "--count", "1"],
        &["call", "billing.quote"],
        &["status"],
    ] {
        let started = Instant::now();
        let output = run(Some(UNREACHABLE), args).await;
        let elapsed = started.elapsed();
        assert_code(&output, 3);
        assert!(
            elapsed < Duration::from_secs(15),
            "{args:?} took {elapsed:?}"
        );
        let err = stderr(&output);
        assert!(
            err.starts_with("error: cannot connect to the broker at amqp://guest@127.0.0.1:1"),
            "{err}"
        );
        assert!(
            err.contains("Connection refused"),
            "the cause is kept: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
}

#[tokio::test]
async fn an_unreachable_management_api_is_code_8() {
    let started = Instant::now();
    let output = run(
        Some(UNREACHABLE),
        &[
            "topology",
            "plan",
            "--management-url",
            "http://127.0.0.1:1",
            "--json",
        ],
    )
    .await;
    assert_code(&output, 8);
    assert!(started.elapsed() < Duration::from_secs(15));
    let err: serde_json::Value =
        serde_json::from_str(stderr(&output).trim()).expect("a JSON error");
    assert_eq!(err["kind"], "no-management");
    assert_eq!(err["exit_code"], 8);
    assert!(err["error"]
        .as_str()
        .is_some_and(|e| e.contains("management API")));
}

#[tokio::test]
async fn help_documents_exit_codes_and_examples() {
    let output = run(None, &["--help"]).await;
    assert_code(&output, 0);
    let help = stdout(&output);
    for needle in [
        "Exit codes:",
        "  3  the broker is unreachable",
        "  7  emit:",
        "management HTTP API",
    ] {
        assert!(help.contains(needle), "{needle} missing from:\n{help}");
    }
    for command in [
        &["emit"][..],
        &["tail"],
        &["call"],
        &["status"],
        &["topology", "plan"],
        &["topology", "apply"],
        &["topology", "show"],
    ] {
        let mut args = command.to_vec();
        args.push("--help");
        let output = run(None, &args).await;
        assert_code(&output, 0);
        assert!(
            stdout(&output).contains("  mesh "),
            "{command:?} has an example"
        );
    }
}
