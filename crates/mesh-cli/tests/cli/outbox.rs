//! `mesh outbox relay | status`: rows a service commits into a PostgreSQL outbox (in a database
//! of the test's own) or a SQLite one (a file of its own) are published by the relay process
//! to a consumer on the test's vhost, each once and in order, none of a rolled-back
//! transaction; SIGTERM stops it with exit code 0 and its leases given up; bad input is a
//! usage error; the database password is never shown.

use std::str::FromStr;

use mesh::Outgoing;
use mesh_outbox::{Backend, EmitIn, Outbox};
use mesh_testkit::{eventually, sdk, TempStore};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::{assert_code, code, finish, json, mesh, run, stderr, stdout, tail, vhost, WAIT};

/// The password put into the database URLs; the trust-authenticated test server ignores it.
const PASSWORD: &str = "pgs3cretpw";

/// The test database's URL with [`PASSWORD`] in it.
fn with_password(url: &str) -> String {
    url.replacen(
        "postgres://postgres@",
        &format!("postgres://postgres:{PASSWORD}@"),
        1,
    )
}

/// Commits `count` events of module `shop` in one transaction (or rolls them back); their ids.
async fn write<DB: Backend>(
    pool: &sqlx::Pool<DB>,
    bus: &mesh::Bus,
    from: usize,
    count: usize,
    commit: bool,
) -> Vec<String> {
    let mut tx = pool.begin().await.expect("a transaction");
    let events = (from..from + count)
        .map(|n| Outgoing::json("order.placed", &serde_json::json!({ "n": n })))
        .collect::<Result<Vec<_>, _>>()
        .expect("events");
    let ids = bus.emit_all_in(&mut tx, events).await.expect("emit_in");
    if commit {
        tx.commit().await.expect("commit");
    } else {
        tx.rollback().await.expect("rollback");
    }
    ids.iter().map(ToString::to_string).collect()
}

/// SIGTERMs a relay process and waits for it: its exit, with its stderr (`before`, the
/// lines already read, then the rest).
async fn stop_relay(
    relay: tokio::process::Child,
    mut errors: tokio::io::Lines<BufReader<tokio::process::ChildStderr>>,
    before: Vec<String>,
) -> std::process::Output {
    let pid = relay.id().expect("the relay runs");
    kill(
        Pid::from_raw(i32::try_from(pid).expect("a pid")),
        Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let mut stopped = finish(relay).await;
    let mut lines = before;
    while let Some(line) = tokio::time::timeout(WAIT, errors.next_line())
        .await
        .expect("the relay's stderr ends with the process")
        .expect("stderr readable")
    {
        lines.push(line);
    }
    stopped.stderr = lines.join("\n").into_bytes();
    stopped
}

/// Reads the relay's stderr until it says it relays; that line.
async fn relaying(errors: &mut tokio::io::Lines<BufReader<tokio::process::ChildStderr>>) -> String {
    tokio::time::timeout(WAIT, async {
        loop {
            let line = errors
                .next_line()
                .await
                .expect("stderr readable")
                .expect("the relay says it relays before anything else ends it");
            if line.contains("relaying the outbox of") {
                return line;
            }
        }
    })
    .await
    .expect("the relay starts in time")
}

/// The ids of the events a `mesh tail --json` printed, in order.
fn tailed_ids(tailed: &std::process::Output) -> Vec<String> {
    stdout(tailed)
        .lines()
        .map(|line| {
            let event: serde_json::Value = serde_json::from_str(line).expect("a JSON event");
            event["id"].as_str().expect("an id").to_owned()
        })
        .collect()
}

/// The tail took the first 20: every committed event, in the order written, and nothing of
/// the rolled-back transaction among them; every row is then marked sent (after its
/// confirm), as `mesh outbox status` reads back.
async fn relayed_each_once<DB: Backend>(
    consumer: tokio::process::Child,
    committed: &[String],
    rolled_back: &[String],
    outbox: &Outbox<DB>,
    broker: &str,
    database: &str,
) {
    let tailed = finish(consumer).await;
    assert_code(&tailed, 0);
    let mut delivered = tailed_ids(&tailed);
    assert_eq!(delivered, committed, "every committed event once, in order");
    delivered.sort();
    assert!(rolled_back
        .iter()
        .all(|id| delivered.binary_search(id).is_err()));
    eventually(WAIT, "every row marked sent", || async {
        (outbox.counts().await.ok()?.pending == 0).then_some(())
    })
    .await;
    let status = run(
        Some(broker),
        &["outbox", "status", "--database", database, "--json"],
    )
    .await;
    assert_code(&status, 0);
    let counts = json(&status);
    assert_eq!(counts["pending"], 0, "{counts}");
    assert_eq!(counts["sent"], 20, "{counts}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_publishes_committed_rows_and_stops_cleanly_on_sigterm() {
    let vhost = vhost("cli-outbox").await;
    let store = TempStore::postgres()
        .await
        .expect("a database on the test PostgreSQL server");
    let database = with_password(store.url());
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(store.url())
        .await
        .expect("the test connects to its database");
    Outbox::new(pool.clone()).await.expect("the outbox tables");
    // The service: it writes into the outbox and runs no relay.
    let shop = sdk::emitter(&vhost.url(), "n1", "shop")
        .await
        .expect("the service's bus");
    let mut committed = write(&pool, &shop, 0, 10, true).await;
    let rolled_back = write(&pool, &shop, 10, 5, false).await;

    let (consumer, _tail_errors) =
        tail(&vhost.url(), "module.shop.#", &["--count", "20", "--json"]).await;
    let mut relay = mesh(Some(&vhost.url()))
        .args([
            "outbox",
            "relay",
            "--database",
            &database,
            "--source",
            "module.shop",
        ])
        .args(["--poll-interval", "100ms"])
        .spawn()
        .expect("the relay starts");
    let mut relay_errors = BufReader::new(relay.stderr.take().expect("stderr piped")).lines();
    let started = relaying(&mut relay_errors).await;
    assert!(!started.contains(PASSWORD), "{started}");
    assert!(
        started.contains("postgres://<redacted>@") && started.contains("module.shop"),
        "{started}"
    );
    // Written while the relay runs: woken by the commit.
    committed.extend(write(&pool, &shop, 15, 10, true).await);

    let outbox = Outbox::new(pool.clone()).await.expect("the outbox");
    relayed_each_once(
        consumer,
        &committed,
        &rolled_back,
        &outbox,
        &vhost.url(),
        &database,
    )
    .await;

    let stopped = stop_relay(relay, relay_errors, vec![started]).await;
    assert_code(&stopped, 0);
    let errors = stderr(&stopped);
    assert!(errors.contains("the relay stopped"), "{errors}");
    assert!(!errors.contains(PASSWORD) && !stdout(&stopped).contains(PASSWORD));
    let leases: i64 = sqlx::query_scalar("SELECT count(*) FROM mesh_outbox.leases")
        .fetch_one(&pool)
        .await
        .expect("the lease table");
    assert_eq!(leases, 0, "a clean stop gives its lease up");

    shop.drain().await.expect("the service drains");
    pool.close().await;
    vhost.delete().await.expect("the vhost is deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_relay_publishes_a_sqlite_outbox_each_event_once_in_order() {
    let vhost = vhost("cli-outbox-sqlite").await;
    let store = TempStore::sqlite();
    let pool = SqlitePoolOptions::new()
        .max_connections(2)
        .connect_with(
            SqliteConnectOptions::from_str(store.url())
                .expect("a SQLite URL")
                .journal_mode(SqliteJournalMode::Wal)
                .busy_timeout(WAIT),
        )
        .await
        .expect("the test opens its SQLite file");
    let outbox = Outbox::new(pool.clone()).await.expect("the outbox tables");
    let shop = sdk::emitter(&vhost.url(), "n1", "shop")
        .await
        .expect("the service's bus");
    let mut committed = write(&pool, &shop, 0, 10, true).await;
    let rolled_back = write(&pool, &shop, 10, 5, false).await;

    let (consumer, _tail_errors) =
        tail(&vhost.url(), "module.shop.#", &["--count", "20", "--json"]).await;
    let mut relay = mesh(Some(&vhost.url()))
        .args(["outbox", "relay", "--database", store.url()])
        .args(["--source", "module.shop", "--poll-interval", "50ms"])
        .spawn()
        .expect("the relay starts");
    let mut relay_errors = BufReader::new(relay.stderr.take().expect("stderr piped")).lines();
    let started = relaying(&mut relay_errors).await;
    // Written while the relay runs: SQLite cannot wake it, its poll finds them.
    committed.extend(write(&pool, &shop, 15, 10, true).await);

    relayed_each_once(
        consumer,
        &committed,
        &rolled_back,
        &outbox,
        &vhost.url(),
        store.url(),
    )
    .await;

    let stopped = stop_relay(relay, relay_errors, vec![started]).await;
    assert_code(&stopped, 0);
    assert!(stderr(&stopped).contains("the relay stopped"));

    shop.drain().await.expect("the service drains");
    pool.close().await;
    vhost.delete().await.expect("the vhost is deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_and_the_database_password_never_shown() {
    let vhost = vhost("cli-outbox-bad").await;
    let url = vhost.url();
    let relay = |database: &str, more: &[&str]| {
        let mut args = vec![
            "outbox".to_owned(),
            "relay".to_owned(),
            "--database".to_owned(),
            database.to_owned(),
        ];
        args.extend(more.iter().map(|s| (*s).to_owned()));
        args
    };
    // A well-formed URL of a server that is not there: a case that got past the checks by
    // mistake fails to open it (exit code 1) rather than running, or touching a database.
    let good = format!("postgres://postgres:{PASSWORD}@127.0.0.1:1/test");
    let cases: Vec<(Vec<String>, i32, &str)> = vec![
        (
            relay(
                &format!("mysql://u:{PASSWORD}@h/db"),
                &["-s", "module.shop"],
            ),
            2,
            "expected postgres://",
        ),
        (
            relay(
                &format!("postgres://u:{PASSWORD}@h:notaport/db"),
                &["-s", "module.shop"],
            ),
            2,
            "invalid --database postgres://<redacted>@h:notaport/db",
        ),
        (
            relay(&good, &["-s", "shop"]),
            2,
            "expected <origin>.<owner>",
        ),
        (relay(&good, &["-s", "module.a.b"]), 2, "module.a.b"),
        (
            relay(&good, &["-s", "queue.shop"]),
            2,
            "expected <origin>.<owner>",
        ),
        (relay(&good, &[]), 2, "--source"),
        (
            relay(
                &good,
                &[
                    "-s",
                    "module.shop",
                    "--lease-ttl",
                    "10s",
                    "--publish-deadline",
                    "30s",
                ],
            ),
            2,
            "must outlast --publish-deadline",
        ),
        (
            relay(&good, &["-s", "module.shop", "--batch", "0"]),
            2,
            "1 to 100000",
        ),
        // Nothing listens on port 1: the database cannot be opened, exit code 1.
        (
            relay(
                &format!("postgres://postgres:{PASSWORD}@127.0.0.1:1/test"),
                &["-s", "module.shop", "--connect-timeout", "2s"],
            ),
            1,
            "cannot open the outbox database postgres://<redacted>@127.0.0.1:1/test",
        ),
        (
            relay(
                &format!("postgres://postgres@127.0.0.1:1/test?password={PASSWORD}"),
                &["-s", "module.shop", "--connect-timeout", "2s"],
            ),
            1,
            "password=<redacted>",
        ),
        (
            relay(
                "sqlite:///nonexistent-mesh-dir/none.db",
                &["-s", "module.shop"],
            ),
            1,
            "cannot open the outbox database sqlite:///nonexistent-mesh-dir/none.db",
        ),
        (
            vec![
                "outbox".to_owned(),
                "status".to_owned(),
                "--database".to_owned(),
                format!("postgres://u:{PASSWORD}@h:notaport/db"),
            ],
            2,
            "postgres://<redacted>@h:notaport/db",
        ),
    ];
    for (args, expected, says) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = run(Some(&url), &args).await;
        let errors = stderr(&output);
        assert_eq!(code(&output), expected, "{args:?}: {errors}");
        assert!(errors.contains(says), "{args:?}: {errors}");
        assert!(!errors.contains(PASSWORD), "{args:?}: {errors}");
        assert!(!stdout(&output).contains(PASSWORD), "{args:?}");
        assert!(!errors.contains("panicked"), "{args:?}: {errors}");
    }
    vhost.delete().await.expect("the vhost is deleted");
}
