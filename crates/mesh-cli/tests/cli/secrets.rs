//! No password is ever printed: everything `mesh emit`, `mesh tail`, `mesh status` and the
//! audit logger (`mesh audit run`, the same code as `mesh-audit run`) print — stdout, stderr,
//! `--json` errors, logs at `RUST_LOG=trace` and `debug` — for failing and succeeding runs,
//! with a broker user whose password holds `/ ? @ # %`, given in the URL (percent-encoded,
//! and unescaped, which must fail without echoing it), through `MESH_PASSWORD` and through
//! `--password-file`.
//!
//! The password is built around two random tokens that appear nowhere else, so finding
//! either token anywhere in the output finds the password in any encoding.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

use std::hash::{BuildHasher, Hasher};
use std::process::Output;

use mesh_testkit::{eventually, shared, TestVhost};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use crate::audit::TempStore;
use crate::{code, finish, mesh, vhost, NODE, WAIT};

/// A random token of 16 letters `G`..`V` (never hexadecimal, so never part of an id).
fn token() -> String {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(std::process::id().into());
    let mut bits = hasher.finish();
    (0..16)
        .map(|_| {
            let c = char::from(b'G' + (bits & 0xF) as u8);
            bits >>= 4;
            c
        })
        .collect()
}

/// A password with every character that needs care in a URL, around two tokens.
struct Secret {
    password: String,
    tokens: [String; 2],
}

impl Secret {
    fn new() -> Secret {
        let tokens = [token(), token()];
        Secret {
            password: format!("{}/?@#%{}", tokens[0], tokens[1]),
            tokens,
        }
    }
}

/// A broker user with `password` and full permissions on `vhost`; deleted on drop.
struct User {
    name: String,
}

impl User {
    async fn create(vhost: &TestVhost, password: &str) -> User {
        let name = format!("mesh-secrets-{}", token().to_lowercase());
        shared::rabbitmqctl(None, &["add_user", &name, password])
            .await
            .unwrap();
        let user = User { name };
        shared::rabbitmqctl(
            None,
            &[
                "set_permissions",
                "-p",
                vhost.name(),
                &user.name,
                ".*",
                ".*",
                ".*",
            ],
        )
        .await
        .unwrap();
        // `mesh status` reads the management API.
        shared::rabbitmqctl(None, &["set_user_tags", &user.name, "management"])
            .await
            .unwrap();
        user
    }
}

impl Drop for User {
    fn drop(&mut self) {
        let _ = std::process::Command::new("rabbitmqctl")
            .args(["delete_user", &self.name])
            .output();
    }
}

/// Every run's output, by label.
#[derive(Default)]
struct Captured(Vec<(String, Output)>);

impl Captured {
    fn add(&mut self, label: impl Into<String>, output: Output) -> &Output {
        self.0.push((label.into(), output));
        &self.0.last().unwrap().1
    }

    /// Asserts no token of `secrets` appears in any output.
    fn assert_clean(&self, secrets: &[&Secret]) {
        let mut bytes = 0;
        for (label, output) in &self.0 {
            let text = format!(
                "{}\n{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            bytes += text.len();
            for secret in secrets {
                for token in &secret.tokens {
                    assert!(
                        !text.contains(token.as_str()),
                        "{label} printed the password:\n{text}"
                    );
                }
            }
        }
        eprintln!(
            "MEASURED secrets: {} runs, {bytes} bytes of output, no password",
            self.0.len()
        );
    }
}

/// `mesh` with `url`, a log level, and the password from nowhere else.
fn command(url: &str, log: &str) -> Command {
    let mut command = mesh(Some(url));
    command
        .env("RUST_LOG", log)
        .env_remove("MESH_PASSWORD")
        .env_remove("MESH_PASSWORD_FILE");
    command
}

async fn output(mut command: Command, args: &[&str]) -> Output {
    eprintln!("running mesh {}", args.join(" "));
    finish(command.args(args).spawn().expect("mesh starts")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_password_is_printed_by_any_run_at_any_log_level() {
    let vhost = vhost("cli-secrets").await;
    let secret = Secret::new();
    let wrong = Secret::new();
    let user = User::create(&vhost, &secret.password).await;
    let addr = vhost.broker_addr();
    let path = shared::percent_encode(vhost.name());
    let url = |password: Option<&str>| match password {
        Some(p) => format!("amqp://{}:{p}@{addr}/{path}", user.name),
        None => format!("amqp://{}@{addr}/{path}", user.name),
    };
    let encoded = url(Some(&shared::percent_encode(&secret.password)));
    let encoded_wrong = url(Some(&shared::percent_encode(&wrong.password)));
    let unescaped = url(Some(&secret.password));
    let bare = url(None);
    let dir = TempStore::sqlite();
    let password_file =
        std::env::temp_dir().join(format!("mesh-cli-secrets-{}.password", std::process::id()));
    std::fs::write(&password_file, format!("{}\n", secret.password)).unwrap();
    let wrong_file =
        std::env::temp_dir().join(format!("mesh-cli-secrets-{}.wrong", std::process::id()));
    std::fs::write(&wrong_file, &wrong.password).unwrap();
    let file_arg = password_file.display().to_string();
    let wrong_file_arg = wrong_file.display().to_string();
    let mut captured = Captured::default();

    for log in ["trace", "debug"] {
        for json in [false, true] {
            let with_json = |args: &[&'static str]| {
                let mut args = args.to_vec();
                if json {
                    args.push("--json");
                }
                args
            };
            let label = |what: &str| format!("{what} (RUST_LOG={log}, json={json})");
            let emit = with_json(&["emit", "module.umami.tick"]);

            // Succeeding emits: the password in the URL, in MESH_PASSWORD, in a file.
            let out = captured.add(
                label("emit, url"),
                output(command(&encoded, log), &emit).await,
            );
            assert_eq!(code(out), 0, "{}", String::from_utf8_lossy(&out.stderr));
            let mut by_env = command(&bare, log);
            by_env.env("MESH_PASSWORD", &secret.password);
            let out = captured.add(label("emit, MESH_PASSWORD"), output(by_env, &emit).await);
            assert_eq!(code(out), 0, "{}", String::from_utf8_lossy(&out.stderr));
            let mut args = emit.clone();
            args.extend(["--password-file", file_arg.as_str()]);
            let out = captured.add(
                label("emit, --password-file"),
                output(command(&bare, log), &args).await,
            );
            assert_eq!(code(out), 0, "{}", String::from_utf8_lossy(&out.stderr));
            let mut by_env_file = command(&bare, log);
            by_env_file.env("MESH_PASSWORD_FILE", &password_file);
            let out = captured.add(
                label("emit, MESH_PASSWORD_FILE"),
                output(by_env_file, &emit).await,
            );
            assert_eq!(code(out), 0, "{}", String::from_utf8_lossy(&out.stderr));

            // Failing ones: an unescaped password, a wrong one in the URL, in a file.
            let out = captured.add(
                label("emit, unescaped"),
                output(command(&unescaped, log), &emit).await,
            );
            assert_eq!(code(out), 2, "{}", String::from_utf8_lossy(&out.stderr));
            let out = captured.add(
                label("emit, wrong"),
                output(command(&encoded_wrong, log), &emit).await,
            );
            assert_ne!(code(out), 0);
            let mut args = emit.clone();
            args.extend(["--password-file", wrong_file_arg.as_str()]);
            let out = captured.add(
                label("emit, wrong file"),
                output(command(&bare, log), &args).await,
            );
            assert_ne!(code(out), 0);

            // tail: refused, then one event through.
            let tail = with_json(&["tail", "module.umami.#", "--count", "1"]);
            let out = captured.add(
                label("tail, wrong"),
                output(command(&encoded_wrong, log), &tail).await,
            );
            assert_ne!(code(out), 0);
            let mut child = command(&encoded, log).args(&tail).spawn().unwrap();
            let mut errors = BufReader::new(child.stderr.take().unwrap()).lines();
            let mut seen = Vec::new();
            tokio::time::timeout(WAIT, async {
                while let Some(line) = errors.next_line().await.unwrap() {
                    let listening = line.contains("listening on");
                    seen.push(line);
                    if listening {
                        break;
                    }
                }
            })
            .await
            .expect("tail listens in time");
            let out = captured.add(
                label("emit for tail"),
                output(command(&encoded, log), &emit).await,
            );
            assert_eq!(code(out), 0);
            let mut out = finish(child).await;
            // What tail printed before it listened is part of its output too.
            let rest = std::mem::take(&mut out.stderr);
            out.stderr = seen.join("\n").into_bytes();
            out.stderr.push(b'\n');
            out.stderr.extend(rest);
            let out = captured.add(label("tail"), out);
            assert_eq!(code(out), 0, "{}", String::from_utf8_lossy(&out.stderr));

            // status: through the management API with the same credentials.
            let status = with_json(&["status"]);
            let out = captured.add(
                label("status"),
                output(command(&encoded, log), &status).await,
            );
            assert_eq!(code(out), 0, "{}", String::from_utf8_lossy(&out.stderr));
            let out = captured.add(
                label("status, wrong"),
                output(command(&encoded_wrong, log), &status).await,
            );
            assert_ne!(code(out), 0);
        }

        // The audit logger: refused (a refused login ends a starting service at once, with
        // the login-refused exit code), then running until SIGTERM.
        let run = ["audit", "run", "--store", dir.url()];
        let out = captured.add(
            format!("audit run, wrong (RUST_LOG={log})"),
            output(command(&encoded_wrong, log), &run).await,
        );
        assert_eq!(
            code(out),
            12,
            "a refused login: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut by_file = command(&bare, log);
        by_file.args(["--password-file", file_arg.as_str()]);
        let logger = by_file.args(run).spawn().unwrap();
        let queue = format!("{NODE}.audit-logger.events");
        eventually(WAIT, "the audit logger consuming", || async {
            let queues = vhost.list_queues().await.ok()?;
            queues
                .iter()
                .any(|q| q.name == queue && q.consumers > 0)
                .then_some(())
        })
        .await;
        let pid = logger.id().expect("the logger runs");
        kill(Pid::from_raw(i32::try_from(pid).unwrap()), Signal::SIGTERM).unwrap();
        let out = captured.add(format!("audit run (RUST_LOG={log})"), finish(logger).await);
        assert_eq!(code(out), 0, "{}", String::from_utf8_lossy(&out.stderr));
        // Logging was on: the check below reads real log lines.
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("DEBUG"),
            "the logger logged at {log}"
        );
    }

    captured.assert_clean(&[&secret, &wrong]);
    let _ = std::fs::remove_file(&password_file);
    let _ = std::fs::remove_file(&wrong_file);
    drop(user);
    vhost.delete().await.unwrap();
}
