//! A private PostgreSQL server for tests that need one configured their own way (TLS), never
//! the machine's shared one: a fresh cluster (`initdb`) in a temporary directory, on a free
//! loopback port, with trust authentication, stopped and removed on drop.
//!
//! It runs the installed Debian binaries (`/usr/lib/postgresql/<version>/bin`, the newest
//! version). PostgreSQL refuses to run as root, so as root the server runs as the `postgres`
//! user, which then owns the directory; its TLS key is copied in with mode 0600, as the
//! server demands.

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{bail, Context};
use nix::unistd::{Gid, Uid, User};

use crate::certs::CertFiles;

/// How long `pg_ctl` waits for the server to start or stop, in seconds.
const PG_CTL_WAIT_SECS: &str = "60";

/// A private PostgreSQL server (stopped and removed on drop).
#[derive(Debug)]
pub struct PrivatePostgres {
    dir: PathBuf,
    data: PathBuf,
    bin: PathBuf,
    port: u16,
    run_as: Option<(Uid, Gid)>,
}

impl PrivatePostgres {
    /// Starts a server on a free port of 127.0.0.1; with `tls`, `ssl = on` with that
    /// certificate and key. Blocking (`initdb` and `pg_ctl`, a few seconds): call it from
    /// `spawn_blocking` in async tests, or before the runtime's work starts.
    pub fn start(tls: Option<&CertFiles>) -> anyhow::Result<PrivatePostgres> {
        PrivatePostgres::start_with(tls, Auth::Trust)
    }

    /// Starts a server set up as a fresh Debian install is: password (`scram-sha-256`)
    /// authentication for TCP logins, peer authentication on the Unix socket (trust when not
    /// root, as the calling user is then the server's owner), and no `test` database. Blocking,
    /// like [`PrivatePostgres::start`].
    pub fn start_as_debian_ships() -> anyhow::Result<PrivatePostgres> {
        PrivatePostgres::start_with(None, Auth::AsDebianShips)
    }

    fn start_with(tls: Option<&CertFiles>, auth: Auth) -> anyhow::Result<PrivatePostgres> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let bin = bin_dir()?;
        let run_as = if Uid::effective().is_root() {
            let user = User::from_name("postgres")
                .context("looking up the postgres user")?
                .context("running as root needs a `postgres` user (PostgreSQL refuses root)")?;
            Some((user.uid, user.gid))
        } else {
            None
        };
        let dir = std::env::temp_dir().join(format!(
            "mesh-pg-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let port = crate::node::pick_port()?;
        let server = PrivatePostgres {
            data: dir.join("data"),
            dir,
            bin,
            port,
            run_as,
        };
        // From here on Drop cleans up, whatever fails next.
        server.chown(&server.dir)?;
        server.run(
            "initdb",
            &[
                "-D".as_ref(),
                server.data.as_os_str(),
                "-U".as_ref(),
                "postgres".as_ref(),
                auth.initdb_flags()[0].as_ref(),
                auth.initdb_flags()[1].as_ref(),
                "--no-sync".as_ref(),
            ],
        )?;
        let mut conf = format!(
            "\n# mesh-testkit\nport = {port}\nlisten_addresses = '127.0.0.1'\n\
             unix_socket_directories = '{}'\nfsync = off\n",
            server.dir.display()
        );
        if let Some(tls) = tls {
            let cert = server.data.join("server.crt");
            let key = server.data.join("server.key");
            std::fs::copy(&tls.cert, &cert).context("copying the server certificate")?;
            std::fs::copy(&tls.key, &key).context("copying the server key")?;
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
                .context("making the key private")?;
            server.chown(&cert)?;
            server.chown(&key)?;
            conf.push_str("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
        }
        let conf_file = server.data.join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf_file).context("reading postgresql.conf")?;
        text.push_str(&conf);
        std::fs::write(&conf_file, text).context("writing postgresql.conf")?;
        let log = server.dir.join("postgres.log");
        server.run(
            "pg_ctl",
            &[
                "-D".as_ref(),
                server.data.as_os_str(),
                "-l".as_ref(),
                log.as_os_str(),
                "-w".as_ref(),
                "-t".as_ref(),
                PG_CTL_WAIT_SECS.as_ref(),
                "start".as_ref(),
            ],
        )?;
        Ok(server)
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@<host>:<port>/postgres`: `host` is what TLS verifies
    /// (`localhost` or `127.0.0.1` for a [`TestPki`](crate::TestPki) certificate made for
    /// those names).
    pub fn url(&self, host: &str) -> String {
        format!("postgres://postgres@{host}:{}/postgres", self.port)
    }

    /// The directory of its Unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// The server's log.
    pub fn log_file(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    fn chown(&self, path: &Path) -> anyhow::Result<()> {
        if let Some((uid, gid)) = self.run_as {
            std::os::unix::fs::chown(path, Some(uid.as_raw()), Some(gid.as_raw()))
                .with_context(|| format!("chown {}", path.display()))?;
        }
        Ok(())
    }

    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin.join(program));
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .current_dir(&self.dir);
        if let Some((uid, gid)) = self.run_as {
            command.uid(uid.as_raw()).gid(gid.as_raw());
        }
        command
    }

    fn run(&self, program: &str, args: &[&std::ffi::OsStr]) -> anyhow::Result<Output> {
        let output = self
            .command(program)
            .args(args)
            .output()
            .with_context(|| format!("running {program}"))?;
        if !output.status.success() {
            bail!(
                "{program} failed ({}): {}{}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr),
                crate::sys::tail(&self.log_file(), 20)
            );
        }
        Ok(output)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        if self.data.join("postmaster.pid").exists() {
            let _ = self
                .command("pg_ctl")
                .args(["-D".as_ref(), self.data.as_os_str()])
                .args(["-m", "immediate", "-w", "-t", PG_CTL_WAIT_SECS, "stop"])
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// How the server authenticates logins.
#[derive(Debug, Clone, Copy)]
enum Auth {
    /// Every login trusted.
    Trust,
    /// As a fresh Debian server: passwords over TCP, peer on the socket.
    AsDebianShips,
}

impl Auth {
    /// `initdb`'s flags for the socket's and TCP's methods.
    fn initdb_flags(self) -> [&'static str; 2] {
        match self {
            Auth::Trust => ["--auth-local=trust", "--auth-host=trust"],
            Auth::AsDebianShips if Uid::effective().is_root() => {
                ["--auth-local=peer", "--auth-host=scram-sha-256"]
            }
            Auth::AsDebianShips => ["--auth-local=trust", "--auth-host=scram-sha-256"],
        }
    }
}

/// The newest installed PostgreSQL's `bin` directory.
fn bin_dir() -> anyhow::Result<PathBuf> {
    let root = Path::new("/usr/lib/postgresql");
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .with_context(|| {
            format!(
                "no {} (install the Debian package postgresql)",
                root.display()
            )
        })?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").exists().then_some((version, bin))
        })
        .collect();
    versions.sort();
    match versions.pop() {
        Some((_, bin)) => Ok(bin),
        None => bail!(
            "no initdb under {}/<version>/bin (install the Debian package postgresql)",
            root.display()
        ),
    }
}
