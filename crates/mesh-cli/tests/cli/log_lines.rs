//! Log lines written to a file, as a service manager or a shell redirection writes them: each
//! command that runs until stopped (`mesh audit run`, `mesh-audit run`, `mesh console`,
//! `mesh outbox relay`), started with stderr on a file and neither `NO_COLOR` nor `RUST_LOG`
//! set, logs at `info` with no escape byte in the file; `--color always` colours the
//! records; `--log-format json` makes each record one JSON object. A one-shot command logs
//! what `RUST_LOG` asks for, and nothing without it.

use std::path::Path;
use std::process::Stdio;

use mesh_outbox::Outbox;
use mesh_testkit::{eventually, TempDir, TempStore, TestVhost};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};
use tokio::process::{Child, Command};

use crate::{assert_code, finish, mesh, stderr, vhost, NODE, WAIT};

/// The escape byte that starts every colour code.
const ESC: u8 = 0x1b;

/// A command that runs until stopped.
#[derive(Debug, Clone, Copy)]
enum Service {
    MeshAuditRun,
    MeshAudit,
    Console,
    OutboxRelay,
}

const SERVICES: [Service; 4] = [
    Service::MeshAuditRun,
    Service::MeshAudit,
    Service::Console,
    Service::OutboxRelay,
];

impl Service {
    /// An info record each writes once it runs, or once SIGTERM stops it.
    fn record(self) -> &'static str {
        match self {
            Service::Console => "console listening",
            _ => "SIGTERM: shutting down",
        }
    }
}

/// The stores the services run over: an audit store and an outbox, SQLite files.
struct Stores {
    audit: TempStore,
    outbox: TempStore,
}

impl Stores {
    async fn new() -> Stores {
        let audit = TempStore::sqlite();
        let outbox = TempStore::sqlite();
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(
                outbox
                    .url()
                    .parse::<SqliteConnectOptions>()
                    .expect("a SQLite URL")
                    .journal_mode(SqliteJournalMode::Wal)
                    .busy_timeout(WAIT),
            )
            .await
            .expect("the test opens its outbox file");
        Outbox::new(pool.clone()).await.expect("the outbox tables");
        pool.close().await;
        Stores { audit, outbox }
    }
}

/// `service` on `vhost`, with `extra` global options, its stderr on `log`; the clean
/// environment of [`mesh`] without `NO_COLOR` and `RUST_LOG`.
fn command(service: Service, url: &str, stores: &Stores, extra: &[&str], log: &Path) -> Command {
    let base = mesh(Some(url));
    let mut command = match service {
        Service::MeshAudit => {
            let mut audit = Command::new(env!("CARGO_BIN_EXE_mesh-audit"));
            for (key, value) in base.as_std().get_envs() {
                match value {
                    Some(value) => audit.env(key, value),
                    None => audit.env_remove(key),
                };
            }
            audit.kill_on_drop(true);
            audit.args(["run", "--store", stores.audit.url()]);
            audit
        }
        Service::MeshAuditRun => {
            let mut command = base;
            command.args(["audit", "run", "--store", stores.audit.url()]);
            command
        }
        Service::Console => {
            let mut command = base;
            command.args(["console", "--store", stores.audit.url()]);
            command.args(["--addr", "127.0.0.1:0", "--read-only"]);
            command
        }
        Service::OutboxRelay => {
            let mut command = base;
            command.args(["outbox", "relay", "--database", stores.outbox.url()]);
            command.args(["--source", "module.shop", "--poll-interval", "50ms"]);
            command
        }
    };
    let file = std::fs::File::create(log).expect("the log file");
    command
        .args(extra)
        .env_remove("NO_COLOR")
        .env_remove("RUST_LOG")
        .env_remove("MESH_LOG_FORMAT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file);
    command
}

/// Waits until `service` stops cleanly on SIGTERM from now on.
async fn wait_running(service: Service, vhost: &TestVhost, log: &Path) {
    match service {
        Service::MeshAuditRun | Service::MeshAudit => {
            let events = format!("{NODE}.audit-logger.events");
            let dead = format!("{NODE}.audit-logger.dead");
            eventually(WAIT, "the audit logger consuming both queues", || async {
                let queues = vhost.list_queues().await.ok()?;
                let consumed =
                    |queue: &str| queues.iter().any(|q| q.name == queue && q.consumers == 1);
                (consumed(&events) && consumed(&dead)).then_some(())
            })
            .await;
        }
        // Both say so once their signals are registered.
        Service::Console | Service::OutboxRelay => {
            let said = match service {
                Service::Console => "console on http://",
                _ => "relaying the outbox of",
            };
            eventually(WAIT, "the service saying it runs", || async {
                let text = std::fs::read_to_string(log).ok()?;
                text.contains(said).then_some(())
            })
            .await;
        }
    }
}

/// Runs `service` with `extra` options until it runs, stops it with SIGTERM, checks it
/// exited 0 and returns its log file's bytes.
async fn logged(
    service: Service,
    vhost: &TestVhost,
    stores: &Stores,
    extra: &[&str],
    dir: &TempDir,
) -> Vec<u8> {
    let log = dir
        .path()
        .join(format!("{service:?}-{}.log", extra.join("")));
    let child: Child = command(service, &vhost.url(), stores, extra, &log)
        .spawn()
        .expect("the service starts");
    wait_running(service, vhost, &log).await;
    let pid = child.id().expect("the service runs");
    kill(
        Pid::from_raw(i32::try_from(pid).expect("a pid")),
        Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let output = finish(child).await;
    let bytes = std::fs::read(&log).expect("the log file");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{service:?} {extra:?}: {}",
        String::from_utf8_lossy(&bytes)
    );
    bytes
}

/// The line of `bytes` that holds `record`.
fn line_of<'a>(bytes: &'a [u8], record: &str) -> &'a [u8] {
    bytes
        .split(|b| *b == b'\n')
        .find(|line| String::from_utf8_lossy(line).contains(record))
        .unwrap_or_else(|| {
            panic!(
                "no `{record}` record in:\n{}",
                String::from_utf8_lossy(bytes)
            )
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_log_into_a_file_without_escape_codes_unless_asked() {
    let vhost = vhost("cli-log-lines").await;
    let stores = Stores::new().await;
    let dir = TempDir::new("cli-log-lines").expect("a temporary directory");
    for service in SERVICES {
        let record = service.record();

        // The default: info records, plain.
        let plain = logged(service, &vhost, &stores, &[], &dir).await;
        let line = line_of(&plain, record);
        assert!(
            String::from_utf8_lossy(line).contains("INFO"),
            "{service:?}: an info record: {}",
            String::from_utf8_lossy(line)
        );
        assert!(
            !plain.contains(&ESC),
            "{service:?} wrote an escape byte into its log file:\n{}",
            String::from_utf8_lossy(&plain).escape_debug()
        );

        // Asked for: the records are coloured.
        let coloured = logged(service, &vhost, &stores, &["--color", "always"], &dir).await;
        let line = line_of(&coloured, record);
        assert!(
            line.contains(&ESC),
            "{service:?} --color always: no colour in {}",
            String::from_utf8_lossy(line).escape_debug()
        );

        // JSON: the record is one object, the message in its fields; no escape byte.
        let json = logged(service, &vhost, &stores, &["--log-format", "json"], &dir).await;
        let line = line_of(&json, record);
        let object: serde_json::Value = serde_json::from_slice(line).unwrap_or_else(|e| {
            panic!(
                "{service:?} --log-format json: not JSON ({e}): {}",
                String::from_utf8_lossy(line)
            )
        });
        assert_eq!(object["level"], "INFO", "{object}");
        assert_eq!(object["fields"]["message"], record, "{object}");
        assert!(!json.contains(&ESC), "{service:?} --log-format json");
    }
    vhost.delete().await.expect("the vhost is deleted");
}

#[tokio::test]
async fn a_one_shot_command_logs_what_rust_log_asks_for() {
    let vhost = vhost("cli-log-oneshot").await;
    let url = vhost.url();
    let emit = |log: Option<&'static str>| {
        let mut command = mesh(Some(&url));
        command.args(["emit", "node.clitest.started"]);
        command.env_remove("MESH_LOG_FORMAT");
        match log {
            Some(log) => command.env("RUST_LOG", log),
            None => command.env_remove("RUST_LOG"),
        };
        command
    };
    // Without RUST_LOG, a one-shot command writes no record.
    let quiet = finish(emit(None).spawn().expect("mesh starts")).await;
    assert_code(&quiet, 0);
    assert!(!stderr(&quiet).contains("INFO"), "{}", stderr(&quiet));
    // With it, the records it keeps.
    let loud = finish(emit(Some("info")).spawn().expect("mesh starts")).await;
    assert_code(&loud, 0);
    assert!(
        stderr(&loud).contains("INFO") && stderr(&loud).contains("publishing connection closed"),
        "{}",
        stderr(&loud)
    );
    // A filter that is not one is a usage error that names the variable.
    let bad = finish(emit(Some("mesh=loud")).spawn().expect("mesh starts")).await;
    assert_code(&bad, 2);
    assert!(stderr(&bad).contains("RUST_LOG"), "{}", stderr(&bad));
    vhost.delete().await.expect("the vhost is deleted");
}
