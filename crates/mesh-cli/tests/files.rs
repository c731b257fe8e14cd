//! Every file the `mesh` binary reads because it was named (the config file, a spec, a
//! passwords or token file, a contract, a body, a password file, a CA file) is read bounded
//! in size and time: a FIFO nobody writes to is refused at `mesh_files::DEADLINE`, and
//! `/dev/zero` at the file's size bound, with little memory.
//!
//! A test binary of its own, so the peak memory of this process's children is that of the
//! `mesh` processes started here only. No test reaches a broker: each names an address
//! nothing listens on and is refused before connecting.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::resource::{getrusage, UsageWho};

/// An AMQP address nothing listens on (port 1 is never a broker).
const NOWHERE: &str = "amqp://guest:guest@127.0.0.1:1/";

/// What a refusal may take: three deadlines, for a loaded machine.
fn fifo_bound() -> Duration {
    mesh_files::DEADLINE * 3
}

/// What a refusal of `/dev/zero` may take: it is refused at the bound, not the deadline.
const ZERO_BOUND: Duration = Duration::from_secs(10);

/// The most memory a `mesh` refusing `/dev/zero` may reach.
const MAX_RSS_KIB: i64 = 256 * 1024;

/// A fresh directory of this test process.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mesh-cli-files-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// A FIFO at `dir/name` only its owner may read, which nobody will write to.
fn fifo(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let status = Command::new("mkfifo")
        .args(["-m", "600"])
        .arg(&path)
        .status()
        .expect("mkfifo runs");
    assert!(status.success(), "mkfifo {}", path.display());
    path
}

/// `mesh <args>` with a clean environment (no developer's config), the broker nowhere.
fn mesh(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_mesh"));
    for name in [
        "MESH_URL",
        "MESH_MANAGEMENT_URL",
        "MESH_PASSWORD",
        "MESH_PASSWORD_FILE",
        "MESH_CONFIG",
        "MESH_CONTEXT",
        "MESH_AUDIT_STORE",
        "MESH_CONSOLE_TOKEN",
    ] {
        command.env_remove(name);
    }
    let home = std::env::temp_dir().join("mesh-cli-files-no-home");
    command
        .env("MESH_URL", NOWHERE)
        .env("MESH_NODE", "filestest")
        .env("NO_COLOR", "1")
        .env("XDG_CONFIG_HOME", &home)
        .env("XDG_DATA_HOME", &home)
        .envs(env.iter().copied())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    command
}

/// Runs `command` until it exits or `bound` passes (then it is killed and the test fails):
/// its status, its stderr and how long it took.
fn run_within(mut command: Command, bound: Duration, what: &str) -> (ExitStatus, String, Duration) {
    let started = Instant::now();
    let mut child = command.spawn().expect("mesh starts");
    let mut stderr = child.stderr.take().expect("stderr piped");
    // Read on a thread, so a full pipe never stalls the child.
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut stderr, &mut text);
        text
    });
    let status = loop {
        if let Some(status) = child.try_wait().expect("the child can be waited for") {
            break status;
        }
        if started.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what}: mesh still ran after {bound:?}");
        }
        // Polling the child's exit, not timing anything.
        std::thread::sleep(Duration::from_millis(20));
    };
    let took = started.elapsed();
    let text = reader.join().expect("the reader ends");
    (status, text, took)
}

#[test]
fn a_fifo_nobody_writes_to_is_refused_within_the_deadline_by_every_command() {
    let dir = scratch("fifo");
    let spec = dir.join("spec.toml");
    std::fs::write(
        &spec,
        "[[modules]]\nname = \"billing\"\npatterns = [\"module.umami.#\"]\n",
    )
    .expect("the spec");
    let spec = spec.to_str().expect("a UTF-8 path").to_owned();
    let config = fifo(&dir, "config.toml");
    let cases: Vec<(&str, PathBuf, Command)> = {
        let spec_fifo = fifo(&dir, "spec-fifo.toml");
        let passwords = fifo(&dir, "passwords.toml");
        let tokens = fifo(&dir, "tokens");
        let contract = fifo(&dir, "contract.json");
        let body = fifo(&dir, "body.json");
        let path = |p: &PathBuf| p.to_str().expect("a UTF-8 path").to_owned();
        vec![
            (
                "the config file",
                config.clone(),
                mesh(&["status"], &[("MESH_CONFIG", &path(&config))]),
            ),
            (
                "--spec",
                spec_fifo.clone(),
                mesh(&["topology", "plan", "--spec", &path(&spec_fifo)], &[]),
            ),
            (
                "--passwords",
                passwords.clone(),
                mesh(
                    &[
                        "access",
                        "plan",
                        "--spec",
                        &spec,
                        "--passwords",
                        &path(&passwords),
                    ],
                    &[],
                ),
            ),
            (
                "--token-file",
                tokens.clone(),
                mesh(&["console", "--token-file", &path(&tokens)], &[]),
            ),
            (
                "contract --from",
                contract.clone(),
                mesh(&["contract", "show", "--from", &path(&contract)], &[]),
            ),
            (
                "emit --data-file",
                body.clone(),
                mesh(&["emit", "module.a.b", "--data-file", &path(&body)], &[]),
            ),
        ]
    };
    // All at once: each waits out the deadline.
    let runs: Vec<_> = cases
        .into_iter()
        .map(|(what, file, command)| {
            std::thread::spawn(move || (what, file, run_within(command, fifo_bound(), what)))
        })
        .collect();
    for run in runs {
        let (what, file, (status, stderr, took)) = run.join().expect("the run ends");
        assert!(!status.success(), "{what}: {stderr}");
        assert!(
            stderr.contains(&file.display().to_string()) && stderr.contains("gave nothing within"),
            "{what}: {stderr}"
        );
        assert!(
            took >= mesh_files::DEADLINE,
            "{what}: refused before the deadline"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn dev_zero_as_a_password_or_ca_file_is_refused_at_its_bound_with_little_memory() {
    let cases = [
        (
            "--password-file",
            mesh(&["status", "--password-file", "/dev/zero"], &[]),
        ),
        (
            "MESH_PASSWORD_FILE",
            mesh(&["status"], &[("MESH_PASSWORD_FILE", "/dev/zero")]),
        ),
        (
            "cacertfile in the URL",
            mesh(
                &["status"],
                &[(
                    "MESH_URL",
                    "amqps://guest:guest@127.0.0.1:1/?cacertfile=/dev/zero",
                )],
            ),
        ),
        (
            "--management-ca-file",
            mesh(
                &[
                    "topology",
                    "show",
                    "--module",
                    "billing",
                    "--pattern",
                    "module.umami.#",
                    "--management-url",
                    "https://localhost:1",
                    "--management-ca-file",
                    "/dev/zero",
                ],
                &[],
            ),
        ),
    ];
    for (what, command) in cases {
        let (status, stderr, _) = run_within(command, ZERO_BOUND, what);
        assert!(!status.success(), "{what}: {stderr}");
        assert!(
            stderr.contains("/dev/zero is larger than"),
            "{what}: {stderr}"
        );
    }
    // The peak resident memory of the largest child this process waited for: only the
    // `mesh` processes of this file's tests.
    let peak = getrusage(UsageWho::RUSAGE_CHILDREN)
        .expect("getrusage")
        .max_rss();
    assert!(peak < MAX_RSS_KIB, "a mesh process reached {peak} KiB");
}
