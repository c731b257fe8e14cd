//! A child process of a scenario (`faults-worker`, `faults-consumer`) and the lines it says:
//! [`Worker`] on the test's side; [`child_main`], [`say`] and [`child_options`] on the
//! child's.
//!
//! The test binary passes the program's path (`env!("CARGO_BIN_EXE_faults-worker")`, only
//! known to integration tests); the child's stdin is a pipe it watches, so it exits when the
//! test process goes, and it is killed when the `Worker` drops.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use crate::conventions::NO_MANAGEMENT;
pub use crate::conventions::PASSWORD_ENV;

/// A running child process whose stdout is read line by line.
#[derive(Debug)]
pub struct Worker {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    /// Spawns `program ARGS...` with piped stdin and stdout (stderr is the test's).
    pub fn spawn(program: impl AsRef<Path>, args: &[&str]) -> anyhow::Result<Worker> {
        Worker::spawn_with_env(program, args, &[])
    }

    /// Like [`Worker::spawn`], with `env` added to the child's environment (e.g. a
    /// [`Login`](crate::setup::Login)'s password, which must not be on its command line).
    pub fn spawn_with_env(
        program: impl AsRef<Path>,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> anyhow::Result<Worker> {
        let program = program.as_ref();
        let mut child = Command::new(program)
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| anyhow::anyhow!("spawning {}: {e}", program.display()))?;
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("the child's stdout is not piped"))?;
        Ok(Worker {
            child,
            lines: BufReader::new(stdout).lines(),
        })
    }

    /// Its process id.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// The next line it says within `timeout`: `Ok(None)` once its stdout closed (it exited),
    /// `Err` on a timeout or a read error.
    pub async fn next_line(&mut self, timeout: Duration) -> anyhow::Result<Option<String>> {
        match tokio::time::timeout(timeout, self.lines.next_line()).await {
            Ok(Ok(line)) => Ok(line),
            Ok(Err(e)) => Err(anyhow::anyhow!("reading the child's stdout: {e}")),
            Err(_) => Err(anyhow::anyhow!("the child said nothing for {timeout:?}")),
        }
    }

    /// Waits for the line `ready` (skipping nothing: any other line first is an error).
    pub async fn ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        match self.next_line(timeout).await? {
            Some(line) if line == "ready" => Ok(()),
            Some(line) => Err(anyhow::anyhow!("expected `ready`, the child said {line:?}")),
            None => Err(anyhow::anyhow!(
                "the child exited before it was ready ({:?})",
                self.child.try_wait()
            )),
        }
    }

    /// Waits for the line `ready`, returning the lines it said before: for a consumer
    /// started on a backlog, whose handlers may report events before its `start` returned.
    pub async fn ready_after_lines(&mut self, timeout: Duration) -> anyhow::Result<Vec<String>> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut before = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_line(left).await? {
                Some(line) if line == "ready" => return Ok(before),
                Some(line) => before.push(line),
                None => {
                    return Err(anyhow::anyhow!(
                        "the child exited before it was ready ({:?})",
                        self.child.try_wait()
                    ))
                }
            }
        }
    }

    /// SIGKILLs it and waits for it to be gone.
    pub async fn kill(&mut self) -> anyhow::Result<ExitStatus> {
        self.child.start_kill()?;
        Ok(self.child.wait().await?)
    }

    /// Closes its stdin (asking it to finish) and waits up to `timeout` for it to exit.
    pub async fn finish(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        drop(self.child.stdin.take());
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .map_err(|_| anyhow::anyhow!("the child did not exit within {timeout:?}"))?
            .map_err(Into::into)
    }

    /// Waits up to `timeout` for it to exit on its own.
    pub async fn exited(&mut self, timeout: Duration) -> anyhow::Result<ExitStatus> {
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .map_err(|_| anyhow::anyhow!("the child did not exit within {timeout:?}"))?
            .map_err(Into::into)
    }
}

/// Options from a child's `<amqp-url>` argument, with the password from [`PASSWORD_ENV`] when
/// it is set (it wins over one in the URL), named `name`, and pointing the management API
/// where nothing listens ([`NO_MANAGEMENT`]).
pub fn child_options(url: &str, name: &str) -> anyhow::Result<mesh::amqp::AmqpOptions> {
    use anyhow::Context as _;
    let mut options = url
        .parse::<mesh::amqp::AmqpOptions>()
        .context("the URL")?
        .connection_name(name)
        .management_url(NO_MANAGEMENT);
    match std::env::var(PASSWORD_ENV) {
        Ok(password) => options = options.password(password),
        Err(std::env::VarError::NotPresent) => {}
        // Not the error itself: it would show the bytes.
        Err(std::env::VarError::NotUnicode(_)) => {
            anyhow::bail!("{PASSWORD_ENV} is not valid UTF-8")
        }
    }
    Ok(options)
}

/// How a child ended, for reports: `signal 9`, `exit 0`, `signal 6`.
pub fn describe(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => format!("signal {signal}"),
        _ => format!("{status:?}"),
    }
}

/// The resident set size of process `pid` in bytes (`VmRSS` in `/proc/<pid>/status`), if it
/// is alive.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A child's `main`: runs `run`, reports an error on stderr as `<program>: <error>` with exit
/// code 1, and ends quietly (0) when the parent closed the pipe it reads lines from.
pub fn child_main(
    program: &str,
    run: impl FnOnce() -> anyhow::Result<std::process::ExitCode>,
) -> std::process::ExitCode {
    match run() {
        Ok(code) => code,
        Err(e) if is_broken_pipe(&e) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{program}: {e:#}");
            std::process::ExitCode::from(1)
        }
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Writes one line to stdout and flushes it, so the parent sees it at once.
pub fn say(line: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_our_own_rss() {
        let rss = rss_bytes(std::process::id()).unwrap();
        assert!(rss > 1024 * 1024, "{rss}");
        assert_eq!(rss_bytes(u32::MAX), None);
    }
}
