//! Operating-system plumbing shared by [`crate::shared`], [`crate::node`] and
//! [`crate::netns`]: where the RabbitMQ scripts live, which user runs them, how to find and
//! kill a node's processes, and locks that outlive a panic or a process.
//!
//! Nothing here is public: the rest of the crate turns it into test-shaped helpers.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::{getuid, Gid, Pid, Uid, User};

/// The environment variable every process of a private node carries, valued with the node's
/// name. It survives `setsid` and re-parenting (Erlang's `erl_child_setup` and `inet_gethost`
/// each start their own session, so a process-group kill would miss them), which makes it the
/// one reliable way to find every process of one node and nothing else.
pub(crate) const NODE_MARKER: &str = "MESH_TESTKIT_NODE";

/// Env var naming a directory that holds `rabbitmq-server` and `rabbitmqctl`, for installs
/// other than Debian's; the scripts then run as the current user.
pub(crate) const SBIN_ENV: &str = "MESH_TEST_RABBITMQ_SBIN";

/// Where Debian's package puts the real scripts (the ones in `/usr/sbin` are wrappers that
/// `su` to `rabbitmq`).
const DEBIAN_SBIN: &str = "/usr/lib/rabbitmq/bin";

/// A user to run the RabbitMQ scripts as.
#[derive(Debug, Clone)]
pub(crate) struct RunAs {
    pub(crate) uid: Uid,
    pub(crate) gid: Gid,
    pub(crate) home: PathBuf,
}

/// How to run the RabbitMQ scripts on this machine.
#[derive(Debug, Clone)]
pub(crate) struct Install {
    /// Directory of the scripts; `None` means "look them up on `PATH`".
    sbin: Option<PathBuf>,
    /// Switch to this user before exec; `None` means "stay who we are".
    pub(crate) run_as: Option<RunAs>,
}

impl Install {
    /// Detects the install once per process.
    ///
    /// Debian's layout run as root gets the same treatment as Debian's own wrappers (run as
    /// `rabbitmq` with `HOME` at its home), minus the `su` and its re-quoting of arguments
    /// through `sh -c`: the private nodes, `rabbitmqctl` and the shared broker then share the
    /// one Erlang cookie in `/var/lib/rabbitmq/.erlang.cookie`.
    pub(crate) fn get() -> &'static Install {
        static INSTALL: OnceLock<Install> = OnceLock::new();
        INSTALL.get_or_init(|| {
            if let Some(dir) = std::env::var_os(SBIN_ENV) {
                return Install {
                    sbin: Some(PathBuf::from(dir)),
                    run_as: None,
                };
            }
            let debian = Path::new(DEBIAN_SBIN);
            if debian.join("rabbitmqctl").exists() {
                let run_as = if getuid().is_root() {
                    User::from_name("rabbitmq").ok().flatten().map(|u| RunAs {
                        uid: u.uid,
                        gid: u.gid,
                        home: u.dir,
                    })
                } else {
                    None
                };
                return Install {
                    sbin: Some(debian.to_path_buf()),
                    run_as,
                };
            }
            Install {
                sbin: None,
                run_as: None,
            }
        })
    }

    /// The path (or bare name, for a `PATH` look-up) of one script.
    pub(crate) fn program(&self, script: &str) -> PathBuf {
        match &self.sbin {
            Some(dir) => dir.join(script),
            None => PathBuf::from(script),
        }
    }

    /// Whether `script` can be found at all, for a readable error before spawning.
    pub(crate) fn has(&self, script: &str) -> bool {
        match &self.sbin {
            Some(dir) => dir.join(script).exists(),
            None => std::env::var_os("PATH")
                .map(|paths| std::env::split_paths(&paths).any(|p| p.join(script).exists()))
                .unwrap_or(false),
        }
    }

    /// A command for `script`, already switched to the right user, `HOME` and working
    /// directory (Erlang writes `erl_crash.dump` into its working directory, so it must be
    /// writable by that user).
    pub(crate) fn command(&self, script: &str) -> Command {
        let mut cmd = Command::new(self.program(script));
        if let Some(run_as) = &self.run_as {
            use std::os::unix::process::CommandExt;
            cmd.uid(run_as.uid.as_raw())
                .gid(run_as.gid.as_raw())
                .env("HOME", &run_as.home)
                .current_dir(&run_as.home);
        }
        cmd
    }

    /// Gives `path` (recursively) to the user the scripts run as, if that is not us.
    pub(crate) fn chown_tree(&self, path: &Path) -> std::io::Result<()> {
        let Some(run_as) = &self.run_as else {
            return Ok(());
        };
        let (uid, gid) = (Some(run_as.uid.as_raw()), Some(run_as.gid.as_raw()));
        std::os::unix::fs::chown(path, uid, gid)?;
        if path.is_dir() {
            for entry in std::fs::read_dir(path)? {
                self.chown_tree(&entry?.path())?;
            }
        }
        Ok(())
    }
}

/// Whether `pid` names a live process; a zombie counts as dead (in some containers PID 1
/// never reaps, so zombies of re-parented processes linger forever).
pub(crate) fn pid_alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => match stat.rfind(')') {
            Some(i) => !stat[i + 1..].trim_start().starts_with(['Z', 'X']),
            None => true,
        },
        Err(_) => false,
    }
}

/// Every live process whose environment holds `NODE_MARKER=<node>`, except `epmd`: a node
/// that finds no `epmd` running starts one, which then serves every node of the machine and
/// must outlive this one.
pub(crate) fn marked_pids(node: &str) -> Vec<i32> {
    let wanted = format!("{NODE_MARKER}={node}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if !environ
            .split(|b| *b == 0)
            .any(|var| var == wanted.as_bytes())
        {
            continue;
        }
        let comm = std::fs::read_to_string(entry.path().join("comm")).unwrap_or_default();
        if comm.trim() == "epmd" || !pid_alive(pid) {
            continue;
        }
        pids.push(pid);
    }
    pids
}

/// Sends SIGKILL to `pid`, ignoring "no such process".
pub(crate) fn sigkill(pid: i32) {
    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
}

/// SIGKILLs every process of `node` until none is left, or `timeout` passes. Returns the pids
/// still alive at the end (empty on success). Blocking: it is also used from `Drop`.
pub(crate) fn kill_node_processes(node: &str, timeout: Duration) -> Vec<i32> {
    let deadline = Instant::now() + timeout;
    loop {
        let pids = marked_pids(node);
        if pids.is_empty() || Instant::now() >= deadline {
            return pids;
        }
        for pid in &pids {
            sigkill(*pid);
        }
        // Polling interval while the kernel tears the processes down, not a synchronisation.
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last `lines` lines of a text file, for error messages; empty if unreadable.
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Locks a std mutex, recovering from poisoning (a panicking test must not also break clean-up).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Takes an exclusive lock on the file `key` of directory `dir` (in the system's temporary
/// dir), held as long as the returned file is open: the kernel lets it go when the process
/// dies in any way. `None` when another open file holds it (another process, or this one).
pub(crate) fn lock_file(dir: &str, key: &str) -> anyhow::Result<Option<File>> {
    use anyhow::Context as _;
    let dir = std::env::temp_dir().join(dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(key);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening {}", path.display()))?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(e).with_context(|| format!("locking {}", path.display()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_own_pid_is_alive_and_a_bogus_one_is_not() {
        assert!(pid_alive(std::process::id() as i32));
        assert!(!pid_alive(i32::MAX));
    }

    #[test]
    fn marked_processes_are_found_and_killed() {
        let node = format!("sys-test-{}", std::process::id());
        let mut child = Command::new("sleep")
            .arg("300")
            .env(NODE_MARKER, &node)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert_eq!(marked_pids(&node), vec![pid]);
        assert!(marked_pids(&format!("{node}-other")).is_empty());
        let left = kill_node_processes(&node, Duration::from_secs(10));
        assert!(left.is_empty(), "still alive: {left:?}");
        assert!(!child.wait().unwrap().success());
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let dir = std::env::temp_dir().join(format!("mesh-testkit-tail-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("log");
        std::fs::write(&file, "a\nb\nc\n").unwrap();
        assert_eq!(tail(&file, 2), "b\nc");
        assert_eq!(tail(&dir.join("missing"), 2), "");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
