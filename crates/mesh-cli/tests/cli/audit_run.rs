//! One audit logger command: `mesh audit run` and `mesh-audit run` take the same options and
//! defaults (the same default store, which `mesh audit`/`mesh dead` read), create their own
//! SQLite store, honour `--queue-type classic`, and say what to do when the store fails.

use std::path::Path;

use mesh_testkit::{eventually, TempDir, TestVhost};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::{assert_code, finish, json, mesh, run, stderr, vhost, NODE, WAIT};

/// The two programs of the audit logger, and the arguments before `run`'s own.
const LOGGERS: [(&str, &[&str]); 2] = [("mesh", &["audit", "run"]), ("mesh-audit", &["run"])];

/// `mesh` or `mesh-audit` with the clean environment of [`mesh`].
fn program(name: &str, url: &str) -> Command {
    let command = mesh(Some(url));
    if name == "mesh-audit" {
        let std = command.as_std();
        let mut audit = Command::new(env!("CARGO_BIN_EXE_mesh-audit"));
        for (key, value) in std.get_envs() {
            match value {
                Some(value) => audit.env(key, value),
                None => audit.env_remove(key),
            };
        }
        audit
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        return audit;
    }
    command
}

/// Starts a logger (`name` with `args` and `extra`) and waits until it consumes both queues.
pub(crate) async fn start(
    vhost: &TestVhost,
    name: &str,
    extra: &[&str],
    env: &[(&str, &Path)],
) -> Child {
    let (_, args) = LOGGERS
        .iter()
        .find(|(program, _)| *program == name)
        .expect("a logger program");
    let mut command = program(name, &vhost.url());
    command.args(*args).args(extra);
    for (key, value) in env {
        command.env(key, value);
    }
    let child = command.spawn().expect("the audit logger starts");
    let events = format!("{NODE}.audit-logger.events");
    let dead = format!("{NODE}.audit-logger.dead");
    eventually(WAIT, "the audit logger consuming both queues", || async {
        let queues = vhost.list_queues().await.ok()?;
        let consumed = |queue: &str| queues.iter().any(|q| q.name == queue && q.consumers == 1);
        (consumed(&events) && consumed(&dead)).then_some(())
    })
    .await;
    child
}

/// Stops a logger gracefully (SIGTERM) and checks it exited 0.
pub(crate) async fn stop(child: Child) {
    let pid = child.id().expect("the logger runs");
    kill(
        Pid::from_raw(i32::try_from(pid).expect("a pid")),
        Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let output = finish(child).await;
    assert_code(&output, 0);
}

/// Emits one event and returns its id.
async fn emit(url: &str, body: &str) -> String {
    let output = run(
        Some(url),
        &[
            "emit",
            "module.umami.site.created",
            "--data",
            body,
            "--json",
        ],
    )
    .await;
    assert_code(&output, 0);
    json(&output)["id"]
        .as_str()
        .expect("an event id")
        .to_owned()
}

/// `mesh audit query --json` with `args` and `env`: the ids of the events it lists.
async fn stored_ids(url: &str, args: &[&str], env: &[(&str, &Path)]) -> Option<Vec<String>> {
    let mut command = mesh(Some(url));
    command.args(["audit", "query", "--json"]).args(args);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = finish(command.spawn().expect("mesh starts")).await;
    if !output.status.success() {
        return None;
    }
    Some(
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter_map(|event| event["id"].as_str().map(str::to_owned))
            .collect(),
    )
}

/// Waits until the store `args` name (with `env`) lists every id of `ids`.
async fn wait_stored(url: &str, args: &[&str], env: &[(&str, &Path)], ids: &[String]) {
    eventually(WAIT, "the events in the audit store", || async {
        let stored = stored_ids(url, args, env).await?;
        ids.iter().all(|id| stored.contains(id)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_programs_record_into_the_same_default_store() {
    let vhost = vhost("cli-audit-default").await;
    let url = vhost.url();
    let data = TempDir::new("audit-default-store").expect("a temporary directory");
    let env = [("XDG_DATA_HOME", data.path())];
    let mut ids = Vec::new();
    for (name, _) in LOGGERS {
        let logger = start(&vhost, name, &[], &env).await;
        ids.push(emit(&url, &format!("{{\"by\":\"{name}\"}}")).await);
        // Read from the default store, as `mesh dead list` and `mesh audit query` do.
        wait_stored(&url, &[], &env, &ids).await;
        stop(logger).await;
    }
    assert!(
        data.path().join("mesh").join("audit.db").is_file(),
        "the default store is $XDG_DATA_HOME/mesh/audit.db"
    );
    let stored = stored_ids(&url, &[], &env).await.expect("the store reads");
    assert_eq!(stored.len(), 2, "{stored:?}");
    let mut dead = mesh(Some(&url));
    dead.args(["dead", "list", "--json"])
        .env("XDG_DATA_HOME", data.path());
    let output = finish(dead.spawn().expect("mesh starts")).await;
    assert_code(&output, 0);
    vhost.delete().await.expect("the vhost is deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_program_creates_a_store_from_a_plain_sqlite_url() {
    let vhost = vhost("cli-audit-create").await;
    let url = vhost.url();
    let dir = TempDir::new("audit-create-store").expect("a temporary directory");
    for (name, _) in LOGGERS {
        // Neither the file nor its directory exists; no `?mode=rwc`.
        let file = dir.path().join(name).join("deeper").join("audit.db");
        assert!(!file.exists());
        let store = format!("sqlite://{}", file.display());
        let logger = start(&vhost, name, &["--store", &store], &[]).await;
        let id = emit(&url, "{}").await;
        wait_stored(&url, &["--store", &store], &[], &[id]).await;
        stop(logger).await;
        assert!(file.is_file(), "{name} created {}", file.display());
    }
    vhost.delete().await.expect("the vhost is deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_logger_starts_on_a_vhost_of_classic_queues() {
    let vhost = vhost("cli-audit-classic").await;
    let url = vhost.url();
    // A deployment of classic queues: the logger's queue is there already, classic.
    let output = run(
        Some(&url),
        &[
            "--queue-type",
            "classic",
            "topology",
            "apply",
            "--module",
            "audit-logger",
            "--pattern",
            "#",
        ],
    )
    .await;
    assert_code(&output, 0);
    let dir = TempDir::new("audit-classic").expect("a temporary directory");
    for (name, _) in LOGGERS {
        let store = format!("sqlite://{}", dir.path().join("audit.db").display());
        let logger = start(
            &vhost,
            name,
            &["--queue-type", "classic", "--store", &store],
            &[],
        )
        .await;
        let id = emit(&url, "{}").await;
        wait_stored(&url, &["--store", &store], &[], &[id]).await;
        stop(logger).await;
    }
    let queues = vhost.list_queues().await.expect("the queues");
    for queue in ["events", "dead"] {
        let name = format!("{NODE}.audit-logger.{queue}");
        let found = queues
            .iter()
            .find(|q| q.name == name)
            .unwrap_or_else(|| panic!("{name} declared"));
        assert_eq!(found.arguments["x-queue-type"], "classic", "{found:?}");
    }
    vhost.delete().await.expect("the vhost is deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_cannot_be_opened_says_what_to_do() {
    // Reading a store that does not exist: no file is created, and the hint says how to
    // make one.
    let dir = TempDir::new("audit-hint").expect("a temporary directory");
    let missing = dir.path().join("missing.db");
    let store = format!("sqlite://{}", missing.display());
    let output = run(None, &["audit", "count", "--store", &store]).await;
    assert_code(&output, 1);
    let err = stderr(&output);
    assert!(
        err.contains("hint: there is no store at") && err.contains("mesh audit run"),
        "{err}"
    );
    assert!(!missing.exists(), "a reading command creates no store");
    let output = run(None, &["--json", "audit", "count", "--store", &store]).await;
    let line: serde_json::Value = serde_json::from_str(stderr(&output).trim()).expect("JSON");
    assert!(
        line["hint"]
            .as_str()
            .is_some_and(|h| h.contains("mesh audit run")),
        "{line}"
    );

    // The logger cannot create its directory (a file stands in the way): it stops at once,
    // saying which directory to create.
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, "").expect("a file");
    let store = format!(
        "sqlite://{}",
        blocker.join("sub").join("audit.db").display()
    );
    for (name, args) in LOGGERS {
        let mut command = program(name, "amqp://127.0.0.1:1");
        command.args(args).args(["--store", &store]);
        let output = finish(command.spawn().expect("the logger starts")).await;
        assert_code(&output, 1);
        let err = stderr(&output);
        assert!(
            err.contains("creating the directory") && err.contains("hint: create"),
            "{name}: {err}"
        );
    }
}

/// `mesh-audit run --console-addr`: the console is served beside the logger, over its store,
/// shows the events the logger records, and stops with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_logger_serves_the_console_over_its_store() {
    use tokio::io::{AsyncBufReadExt, BufReader};

    let vhost = vhost("cli-audit-console").await;
    let url = vhost.url();
    let dir = TempDir::new("mesh-audit-console").expect("a temp dir");
    let store = format!("sqlite://{}", dir.path().join("audit.db").display());
    let mut child = program("mesh-audit", &url)
        .args(["run", "--store", &store, "--console-addr", "127.0.0.1:0"])
        .spawn()
        .expect("mesh-audit starts");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr piped")).lines();
    let mut seen = Vec::new();
    let addr: std::net::SocketAddr = tokio::time::timeout(WAIT, async {
        while let Some(line) = lines.next_line().await.expect("stderr readable") {
            seen.push(line.clone());
            if let Some(rest) = line.split("console on http://").nth(1) {
                return rest.split('/').next().and_then(|a| a.parse().ok());
            }
        }
        None
    })
    .await
    .expect("the console says where it listens in time")
    .unwrap_or_else(|| panic!("no console address on stderr: {seen:?}"));
    let drained = tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            seen.push(line);
        }
        seen
    });
    let events = format!("{NODE}.audit-logger.events");
    eventually(WAIT, "the audit logger consuming", || async {
        let queues = vhost.list_queues().await.ok()?;
        queues
            .iter()
            .any(|q| q.name == events && q.consumers == 1)
            .then_some(())
    })
    .await;

    let id = emit(&url, r#"{"site": "console"}"#).await;
    let page = format!("/events/{id}");
    let html = eventually(WAIT, "the console shows the recorded event", || async {
        let (status, html) = mesh_testkit::http::must_get(addr, &page).await;
        (status == 200).then_some(html)
    })
    .await;
    assert!(html.contains("module.umami.site.created"), "{html}");
    let (status, html) = mesh_testkit::http::must_get(addr, "/").await;
    assert_eq!(status, 200, "{html}");
    // Its own queue is a module queue the overview lists, with its consumer: the logger.
    assert!(html.contains("Audit loggers"), "{html}");

    let pid = child.id().expect("the logger runs");
    kill(
        Pid::from_raw(i32::try_from(pid).expect("a pid")),
        Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let output = finish(child).await;
    let seen = drained.await.expect("the reader ran");
    assert_eq!(output.status.code(), Some(0), "{}", seen.join("\n"));
    // Gone with the logger.
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "the console stopped with the logger"
    );
}
