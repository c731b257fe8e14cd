//! Answers that point the right way: argument errors under `--json`, a closed PostgreSQL
//! port, read commands on an empty database, a call nobody serves.

use std::time::{Duration, Instant};

use crate::{assert_code, run, stderr, stdout};

/// Nothing listens on port 1.
const UNREACHABLE: &str = "amqp://127.0.0.1:1";

/// stderr's one JSON object (and nothing else on it).
fn json_error(output: &std::process::Output) -> serde_json::Value {
    let err = stderr(output);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    serde_json::from_str(err.trim()).unwrap_or_else(|e| panic!("not one JSON object ({e}): {err}"))
}

#[tokio::test]
async fn argument_errors_under_json_are_one_json_object() {
    let cases: [&[&str]; 5] = [
        // An unknown flag, --json before or after it.
        &["status", "--bogus", "--json"],
        &["--json", "status", "--bogus"],
        // A missing value, a missing argument.
        &["call", "billing.quote", "--json", "--timeout"],
        &["--json", "emit"],
        // A bad value.
        &["dead", "list", "--reason", "nope", "--json"],
    ];
    for args in cases {
        let output = run(Some(UNREACHABLE), args).await;
        assert_code(&output, 2);
        assert!(stdout(&output).is_empty(), "{args:?}: {}", stdout(&output));
        let error = json_error(&output);
        assert_eq!(error["kind"], "usage", "{args:?}: {error}");
        assert_eq!(error["exit_code"], 2, "{args:?}: {error}");
        let message = error["error"].as_str().unwrap();
        assert!(
            !message.is_empty() && !message.starts_with("error:"),
            "{error}"
        );
        assert!(
            error["hint"].as_str().unwrap().contains("--help"),
            "{args:?}: {error}"
        );
    }
    let output = run(Some(UNREACHABLE), &["status", "--bogus", "--json"]).await;
    assert_eq!(
        json_error(&output)["error"],
        "unexpected argument '--bogus' found"
    );
    // Without --json, clap's text; after `--`, `--json` is a value, not the option.
    let output = run(Some(UNREACHABLE), &["status", "--bogus"]).await;
    assert_code(&output, 2);
    assert!(stderr(&output).starts_with("error: unexpected argument"));
    let output = run(Some(UNREACHABLE), &["tail", "--bogus", "--", "--json"]).await;
    assert_code(&output, 2);
    assert!(stderr(&output).starts_with("error: unexpected argument"));
    // Help and version are not failures: printed as they are.
    for args in [
        &["--help", "--json"][..],
        &["--json", "--version"],
        &["status", "-h", "--json"],
    ] {
        let output = run(Some(UNREACHABLE), args).await;
        assert_code(&output, 0);
        assert!(stdout(&output).contains("mesh"), "{args:?}");
        assert!(!stdout(&output).starts_with('{'), "{args:?}");
    }
}

/// A PostgreSQL URL where nothing listens.
const CLOSED_PG: &str = "postgres://postgres@127.0.0.1:1/audit";

#[tokio::test]
async fn a_postgresql_store_on_a_closed_port_fails_at_once_with_its_hint() {
    let commands: [&[&str]; 3] = [
        &["audit", "query", "--store", CLOSED_PG],
        &["dead", "list", "--store", CLOSED_PG],
        &["outbox", "status", "--database", CLOSED_PG],
    ];
    for args in commands {
        let started = Instant::now();
        let output = run(Some(UNREACHABLE), args).await;
        let took = started.elapsed();
        assert_code(&output, 1);
        // The pool's timeout is 30 s (the outbox's, --connect-timeout, 5 s): refused is
        // final, never waited on.
        assert!(took < Duration::from_secs(3), "{args:?} took {took:?}");
        let err = stderr(&output);
        assert!(err.contains("127.0.0.1:1"), "{args:?}: {err}");
        assert!(err.to_lowercase().contains("refused"), "{args:?}: {err}");
    }
    let output = run(Some(UNREACHABLE), &["audit", "count", "--store", CLOSED_PG]).await;
    let err = stderr(&output);
    assert!(
        err.lines()
            .any(|l| l.starts_with("hint: nothing answers at 127.0.0.1:1")),
        "{err}"
    );
}

/// What the database holds besides PostgreSQL's own: its tables and schemas.
async fn tables_and_schemas(url: &str) -> (i64, i64) {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect(url)
        .await
        .expect("the test connects to its database");
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
         WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast')",
    )
    .fetch_one(&pool)
    .await
    .expect("the catalog reads");
    let schemas: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_namespace WHERE nspname NOT LIKE 'pg\\_%' \
         AND nspname NOT IN ('public', 'information_schema')",
    )
    .fetch_one(&pool)
    .await
    .expect("the catalog reads");
    pool.close().await;
    (tables, schemas)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_commands_on_an_empty_database_create_nothing() {
    let db = crate::audit::TempStore::postgres()
        .await
        .expect("a database on the test PostgreSQL server");
    let url = db.url();
    assert_eq!(tables_and_schemas(url).await, (0, 0));

    let output = run(Some(UNREACHABLE), &["outbox", "status", "--database", url]).await;
    assert_code(&output, 1);
    let err = stderr(&output);
    assert!(err.contains("no outbox in"), "{err}");
    assert!(err.lines().any(|l| l.starts_with("hint: ")), "{err}");
    let output = run(
        Some(UNREACHABLE),
        &["outbox", "status", "--database", url, "--json"],
    )
    .await;
    assert_code(&output, 1);
    assert!(json_error(&output)["error"]
        .as_str()
        .unwrap()
        .contains("no outbox in"));

    let id = "3f0c1d1e-2b53-5b8e-9a43-0c2b3f1f4f55";
    let readers: [&[&str]; 6] = [
        &["audit", "query"],
        &["audit", "count"],
        &["audit", "trace", id],
        &["dead", "list"],
        &["dead", "show", id],
        &["dead", "redrive", "--all", "--dry-run"],
    ];
    for args in readers {
        let args: Vec<&str> = args.iter().copied().chain(["--store", url]).collect();
        let output = run(Some(UNREACHABLE), &args).await;
        assert_code(&output, 1);
        let err = stderr(&output);
        assert!(err.contains("no audit store in"), "{args:?}: {err}");
        assert!(
            err.contains("hint: an audit logger creates its store"),
            "{args:?}: {err}"
        );
    }
    assert_eq!(
        tables_and_schemas(url).await,
        (0, 0),
        "the database is as it was"
    );
}
