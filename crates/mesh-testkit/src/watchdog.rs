//! The watchdog that cleans up after a test process however it ends: a tiny `sh` in its own
//! process group (so a Ctrl-C aimed at the test runner does not reach it) whose stdin is a
//! pipe from the test process. The test process never writes to it; when the process ends in
//! any way, the kernel closes the pipe, `read` sees end-of-file, and the watchdog runs its
//! clean-up script. A pipe rather than polling the parent pid: no latency, no pid-reuse race,
//! no timer. A `disarm` line ends it quietly, once the owner cleaned up itself.
//!
//! This module owns the mechanism; what to clean up (a private node's processes and
//! directory, a network slot's namespaces and links) is the script its owner passes.

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

/// A running watchdog; see the module docs.
#[derive(Debug)]
pub(crate) struct Watchdog {
    child: Child,
    stdin: Option<ChildStdin>,
}

impl Watchdog {
    /// Spawns `sh -c SCRIPT NAME ARGS...`: the script's `$0` is `name`, its `$1`, `$2`, …
    /// are `args`. The script must ignore the usual signals, read stdin until end-of-file or
    /// a `disarm` line, and clean up after end-of-file only. `what` names it in errors.
    pub(crate) fn spawn(
        script: &str,
        name: &str,
        args: &[&OsStr],
        what: &str,
    ) -> anyhow::Result<Watchdog> {
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg(name)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .with_context(|| format!("spawning the {what} watchdog (sh)"))?;
        let stdin = child.stdin.take();
        Ok(Watchdog { child, stdin })
    }

    /// Tells the watchdog that clean-up was done, and reaps it.
    pub(crate) fn disarm(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"disarm\n");
        }
        wait_child(&mut self.child, Duration::from_secs(5));
    }

    /// Closes the pipe as a dying test process would, and waits for the watchdog to finish.
    #[cfg(test)]
    pub(crate) fn trigger(mut self) {
        drop(self.stdin.take());
        wait_child(&mut self.child, Duration::from_secs(30));
    }
}

/// Blocking wait for `child` with a limit; kills it past the limit.
fn wait_child(child: &mut Child, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}
