//! What the tests of deploy/ share: where things are, the tools they run, and the audit
//! logger's command line checked by its own parser.

#![allow(dead_code, unreachable_pub)]

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{bail, ensure, Context};
use mesh_cli::CheckedAudit;
pub use mesh_testkit::TempDir;
use mesh_testkit::TestPki;

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// `deploy/` in the workspace.
pub fn deploy() -> PathBuf {
    workspace().join("deploy")
}

/// `deploy/<name>` as text.
pub fn deploy_file(name: &str) -> anyhow::Result<String> {
    let path = deploy().join(name);
    fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))
}

/// Runs `program args…`, failing with `hint` when the program is not installed.
pub fn run<I, S>(program: &str, args: I, cwd: &Path, hint: &str) -> anyhow::Result<Output>
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    match Command::new(program).args(args).current_dir(cwd).output() {
        Ok(output) => Ok(output),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("`{program}` is not installed: {hint} (bash scripts/test.sh installs it)")
        }
        Err(e) => Err(e).with_context(|| format!("running {program}")),
    }
}

/// Copies the directory `from` into `to` (created), recursively.
pub fn copy_dir(from: &Path, to: &Path) -> anyhow::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from).with_context(|| format!("reading {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)
                .with_context(|| format!("copying {}", entry.path().display()))?;
        }
    }
    Ok(())
}

/// `KEY=value` lines of an environment file (systemd's `EnvironmentFile=`, compose's
/// `env_file`), comments and blank lines skipped.
pub fn env_file(text: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut pairs = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .with_context(|| format!("not KEY=value: {line}"))?;
        pairs.push((key.trim().to_owned(), value.trim().to_owned()));
    }
    Ok(pairs)
}

/// Environment variables a deployment may set that are not `mesh-audit run` options: read by
/// the logging set-up and by the password of `MESH_PASSWORD`.
const OTHER_VARIABLES: [&str; 2] = ["RUST_LOG", "MESH_PASSWORD"];

/// Files the command line names, replaced by the check's own: a CA certificate the URL
/// parser can read, and a password file.
#[derive(Debug)]
pub struct Stand {
    pki: TestPki,
    dir: TempDir,
}

impl Stand {
    pub fn new() -> anyhow::Result<Stand> {
        let dir = TempDir::new("stand")?;
        fs::write(dir.path().join("password"), "not-the-password\n")?;
        Ok(Stand {
            pki: TestPki::generate("deploy-check")?,
            dir,
        })
    }

    pub fn password_file(&self) -> PathBuf {
        self.dir.path().join("password")
    }

    /// `text` with the path after each `cacertfile=` replaced by the check's CA file.
    fn with_ca(&self, text: &str) -> String {
        let ca = self.pki.ca_file().display().to_string();
        let mut out = String::new();
        let mut rest = text;
        while let Some(at) = rest.find("cacertfile=") {
            let start = at + "cacertfile=".len();
            out.push_str(&rest[..start]);
            out.push_str(&ca);
            let end = rest[start..].find('&').map_or(rest.len(), |e| start + e);
            rest = &rest[end..];
        }
        out.push_str(rest);
        out
    }
}

/// What a `mesh-audit run` command line came to: checked by the logger's own parser and
/// turned into its service (URLs, store, node name, numbers), with the check's files in place
/// of the deployment's.
#[derive(Debug)]
pub struct CheckedRun {
    pub args: CheckedAudit,
}

/// Checks `mesh-audit run <args>` with the environment `env` (later pairs win), the way
/// clap reads it: each `MESH_*` variable must be one the command reads, each value valid.
/// `--password-file` (or `MESH_PASSWORD_FILE`) must be given, and is replaced by a file of
/// the check's; so is each URL's `cacertfile`.
pub fn check_run(
    args: &[String],
    env: &[(String, String)],
    stand: &Stand,
) -> anyhow::Result<CheckedRun> {
    let mut command = mesh_cli::mesh_audit_command();
    command.build();
    let run_command = command
        .find_subcommand("run")
        .context("mesh-audit has a run command")?
        .clone();
    let mut line: Vec<String> = Vec::new();
    let mut saw_password_file = false;
    let mut from_env: Vec<(String, String)> = Vec::new();
    for (key, value) in env {
        from_env.retain(|(k, _)| k != key);
        from_env.push((key.clone(), value.clone()));
    }
    for (key, value) in &from_env {
        if OTHER_VARIABLES.contains(&key.as_str()) || !key.starts_with("MESH_") {
            continue;
        }
        let arg = command
            .get_arguments()
            .chain(run_command.get_arguments())
            .find(|a| a.get_env().is_some_and(|e| e == OsStr::new(key)))
            .with_context(|| format!("{key} is no option of mesh-audit run"))?;
        let long = arg
            .get_long()
            .context("an option with an environment variable")?;
        let flag = format!("--{long}");
        if args
            .iter()
            .any(|a| *a == flag || a.starts_with(&format!("{flag}=")))
        {
            // The command line wins over the environment, as in clap.
            continue;
        }
        if long == "password-file" {
            saw_password_file = true;
            line.push(format!("--{long}={}", stand.password_file().display()));
        } else {
            line.push(format!("--{long}={}", stand.with_ca(value)));
        }
    }
    let mut given = args.iter();
    while let Some(arg) = given.next() {
        if arg == "--password-file" {
            saw_password_file = true;
            given.next();
            line.push(format!(
                "--password-file={}",
                stand.password_file().display()
            ));
        } else if arg.starts_with("--password-file=") {
            saw_password_file = true;
            line.push(format!(
                "--password-file={}",
                stand.password_file().display()
            ));
        } else {
            line.push(stand.with_ca(arg));
        }
    }
    ensure!(
        saw_password_file || env.iter().any(|(k, _)| k == "MESH_PASSWORD"),
        "no broker password: neither --password-file, MESH_PASSWORD_FILE nor MESH_PASSWORD"
    );
    let checked = mesh_cli::check_mesh_audit(
        ["mesh-audit", "run"]
            .into_iter()
            .map(String::from)
            .chain(line),
    )
    .map_err(|e| anyhow::anyhow!("mesh-audit run {}: {e:#}", args.join(" ")))?;
    Ok(CheckedRun { args: checked })
}

/// The user information of a URL (`user[:password]`), if any.
pub fn userinfo(url: &str) -> Option<&str> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?']).next()?;
    authority.rsplit_once('@').map(|(user, _)| user)
}
