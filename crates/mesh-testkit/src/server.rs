//! One RabbitMQ server process as every harness here starts it, whether on loopback
//! ([`crate::node`]) or in a network namespace ([`crate::netns`]): the files of its directory,
//! the environment its scripts run with, its logs, and the wait for its boot.
//!
//! A node's directory holds `rabbitmq.conf`, `advanced.config`, `enabled_plugins`, an empty
//! `rabbitmq-env.conf` (so the machine's `/etc/rabbitmq/rabbitmq-env.conf`, written for the
//! shared broker, cannot rename, re-port or re-bind the node), `mnesia/`, `log/`, the pid
//! file, and the script's `stdout.log` and `stderr.log`.

use std::fs::File;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use anyhow::{anyhow, Context};

use crate::shared::random_suffix;
use crate::sys::{self, Install, NODE_MARKER};

/// Writes a node's configuration files into `dir` and creates its data and log directories.
pub(crate) fn write_files(
    dir: &Path,
    conf: &str,
    advanced_config: &str,
    enabled_plugins: &str,
) -> anyhow::Result<()> {
    // The data and log directories first: they create `dir` too where it is new.
    for sub in ["mnesia", "log"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }
    let write = |file: &str, text: &str| {
        std::fs::write(dir.join(file), text)
            .with_context(|| format!("writing {}", dir.join(file).display()))
    };
    write("rabbitmq.conf", conf)?;
    write("advanced.config", advanced_config)?;
    write("enabled_plugins", enabled_plugins)?;
    write(
        "rabbitmq-env.conf",
        "# Empty on purpose: keeps /etc/rabbitmq/rabbitmq-env.conf out of this node.\n",
    )?;
    Ok(())
}

/// The environment every RabbitMQ script of node `name` (directory `dir`) runs with: none of
/// the test's own `RABBITMQ_*` settings, the node's marker (see [`NODE_MARKER`]), and the
/// node's empty `rabbitmq-env.conf`.
pub(crate) fn script_env(cmd: &mut Command, name: &str, dir: &Path) {
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("RABBITMQ_") {
            cmd.env_remove(key);
        }
    }
    cmd.env(NODE_MARKER, name)
        .env("RABBITMQ_CONF_ENV_FILE", dir.join("rabbitmq-env.conf"));
}

/// What `rabbitmq-server` itself needs besides [`script_env`]: the node's name, and where its
/// data, logs, pid file and configuration are.
/// Emulator flags every private node starts with: its schedulers (normal and dirty) sleep
/// when they run out of work instead of busy-waiting first. The tests run several nodes at
/// once beside compilers on a small machine, and idle nodes spinning took CPU from both.
pub(crate) const QUIET_SCHEDULERS: &str = "+sbwt none +sbwtdcpu none +sbwtdio none";

pub(crate) fn server_env(cmd: &mut Command, name: &str, dir: &Path) {
    cmd.env("RABBITMQ_NODENAME", name)
        .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
        .env("RABBITMQ_LOG_BASE", dir.join("log"))
        .env("RABBITMQ_PID_FILE", pid_file(dir))
        .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq.conf"))
        .env("RABBITMQ_ADVANCED_CONFIG_FILE", dir.join("advanced.config"))
        .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"));
}

/// The script's stdout and stderr files in `dir`, opened for appending (a restarted node
/// adds to them).
pub(crate) fn output_files(dir: &Path) -> anyhow::Result<(File, File)> {
    let open = |file: &str| {
        File::options()
            .create(true)
            .append(true)
            .open(dir.join(file))
    };
    Ok((open("stdout.log")?, open("stderr.log")?))
}

/// The pid file of the node whose directory is `dir`.
pub(crate) fn pid_file(dir: &Path) -> PathBuf {
    dir.join("pid")
}

/// The main log file of node `name` in `dir`.
pub(crate) fn log_file(dir: &Path, name: &str) -> PathBuf {
    dir.join("log").join(format!("{name}.log"))
}

/// The last lines of node `name`'s log and of its script's stderr, for a boot that failed.
pub(crate) fn diagnostics(dir: &Path, name: &str) -> String {
    let log = log_file(dir, name);
    format!(
        "--- {} (last lines) ---\n{}\n--- stderr ---\n{}",
        log.display(),
        sys::tail(&log, 25),
        sys::tail(&dir.join("stderr.log"), 10)
    )
}

/// Awaits `wait` (a `rabbitmqctl wait <pid file>`), unless the server exits first:
/// `exit_status` is polled every `poll`, since a node that dies before writing its pid file
/// would leave `wait` waiting for nothing.
pub(crate) async fn await_pid_wait(
    wait: impl Future<Output = anyhow::Result<String>>,
    exit_status: impl Fn() -> Option<ExitStatus>,
    poll: Duration,
) -> anyhow::Result<()> {
    let died = async {
        loop {
            if let Some(status) = exit_status() {
                return anyhow!("rabbitmq-server exited during boot ({status})");
            }
            tokio::time::sleep(poll).await;
        }
    };
    tokio::select! {
        res = wait => { res?; }
        err = died => return Err(err),
    }
    Ok(())
}

/// Imports RabbitMQ definitions (JSON) through `import` (a `rabbitmqctl import_definitions
/// <file>` against a node, given the file's path): one call, where setting each permission
/// would take one `rabbitmqctl` run apiece. The file is written to `dir`, readable by the
/// node's owner only, and removed afterwards.
pub(crate) async fn import_definitions<F, Fut>(
    dir: &Path,
    definitions: &str,
    import: F,
) -> anyhow::Result<()>
where
    F: FnOnce(String) -> Fut,
    Fut: Future<Output = anyhow::Result<String>>,
{
    let path = dir.join(format!("definitions-{}.json", random_suffix(8)));
    {
        use std::io::Write as _;
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        file.write_all(definitions.as_bytes())?;
    }
    // `rabbitmqctl` runs as the node's owner.
    Install::get().chown_tree(&path)?;
    let imported = import(path.to_string_lossy().into_owned()).await;
    let _ = std::fs::remove_file(&path);
    imported.map(|_| ())
}
