//! `call`: the reply, and a distinct exit code for no server (no serve queue, or nothing
//! consuming it), a timeout and a remote error.

use std::time::{Duration, Instant};

use mesh::{Bus, RemoteError};

use crate::{assert_code, json, options, run, stderr, stdout, transport, vhost};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn call_prints_the_reply_or_exits_with_the_errors_code() {
    let vhost = vhost("cli-call").await;
    let url = vhost.url();
    let server = Bus::builder()
        .node("server")
        .module("billing")
        .serve("billing.quote", |plan: String, _meta| async move {
            match plan.as_str() {
                "basic" => Ok(900_u64),
                // Never answers: the caller's timeout.
                "slow" => std::future::pending().await,
                other => Err(RemoteError {
                    code: "unknown-plan".into(),
                    message: format!("no plan named `{other}`"),
                }),
            }
        })
        .start(transport(options(&vhost)).await)
        .await
        .unwrap();

    let output = run(
        Some(&url),
        &["call", "billing.quote", "--data", "\"basic\""],
    )
    .await;
    assert_code(&output, 0);
    assert_eq!(stdout(&output).trim(), "900");

    let output = run(
        Some(&url),
        &["call", "billing.quote", "--data", "\"gold\"", "--json"],
    )
    .await;
    assert_code(&output, 6);
    assert_eq!(
        json(&output),
        serde_json::json!({"error": {"code": "unknown-plan", "message": "no plan named `gold`"}})
    );
    assert!(stderr(&output).contains("unknown-plan"));

    let started = Instant::now();
    let output = run(
        Some(&url),
        &[
            "call",
            "billing.quote",
            "--data",
            "\"slow\"",
            "--timeout",
            "700ms",
        ],
    )
    .await;
    assert_code(&output, 5);
    assert!(started.elapsed() >= Duration::from_millis(700));
    let err = stderr(&output);
    assert!(
        err.contains("no reply from `billing.quote` within 700ms"),
        "{err}"
    );

    // No serve queue at all: one sentence naming the tool, none of the layers under it.
    let output = run(Some(&url), &["call", "nobody.serves.this"]).await;
    assert_code(&output, 4);
    let err = stderr(&output);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines,
        [
            "error: no server for `nobody.serves.this`: no service serving it has started (its \
             queue `serve.nobody.serves.this` does not exist)",
            "hint: start the service that serves the tool: a call is answered only while a \
             server consumes the tool's queue",
        ],
        "{err}"
    );
    let output = run(Some(&url), &["call", "nobody.serves.this", "--json"]).await;
    assert_code(&output, 4);
    let error: serde_json::Value =
        serde_json::from_str(stderr(&output).trim()).expect("one JSON object on stderr");
    assert_eq!(error["kind"], "no-server");
    assert_eq!(error["exit_code"], 4);
    assert!(
        error["error"]
            .as_str()
            .unwrap()
            .starts_with("no server for `nobody.serves.this`: "),
        "{error}"
    );

    // The server goes away; its queue stays. A call says so within 3 s, not at its timeout.
    server.close().await;
    let started = Instant::now();
    let output = run(
        Some(&url),
        &[
            "call",
            "billing.quote",
            "--data",
            "\"basic\"",
            "--timeout",
            "60s",
        ],
    )
    .await;
    assert_code(&output, 4);
    assert!(
        started.elapsed() < Duration::from_secs(3 * 3),
        "{:?}",
        started.elapsed()
    );
    let err = stderr(&output);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(
        lines[0].contains("cannot call `billing.quote`: ")
            && lines[0].contains("no server is consuming `serve.billing.quote`")
            && !lines[0].contains("transport failed"),
        "{err}"
    );
    assert!(
        lines[1].starts_with("hint: start the service that serves the tool"),
        "{err}"
    );
    vhost.delete().await.unwrap();
}
