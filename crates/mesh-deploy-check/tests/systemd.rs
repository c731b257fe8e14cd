//! `deploy/mesh-audit.service`: accepted by `systemd-analyze verify`, hardened, no password
//! on its command line, and a command line (with `deploy/mesh-audit.env.example`) that the
//! audit logger's own parser accepts.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use anyhow::{ensure, Context};
use common::{check_run, deploy_file, env_file, run, Stand, TempDir};

const UNIT: &str = "mesh-audit.service";
const BINARY: &str = "/usr/local/bin/mesh-audit";

/// `[Service]` settings of the unit as `(key, value)`, in order (a key may repeat).
fn service_settings(unit: &str) -> Vec<(String, String)> {
    let mut section = "";
    let mut settings = Vec::new();
    for line in unit.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line;
        } else if section == "[Service]" && !line.is_empty() && !line.starts_with('#') {
            if let Some((key, value)) = line.split_once('=') {
                settings.push((key.trim().to_owned(), value.trim().to_owned()));
            }
        }
    }
    settings
}

fn values<'a>(settings: &'a [(String, String)], key: &str) -> Vec<&'a str> {
    settings
        .iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

#[test]
fn systemd_analyze_verify_accepts_the_unit() -> anyhow::Result<()> {
    let unit = deploy_file(UNIT)?;
    ensure!(
        unit.contains(&format!("ExecStart={BINARY} ")),
        "ExecStart runs {BINARY}"
    );
    // verify wants the binary to exist: a stand-in executable at a path of the test's own.
    let dir = TempDir::new("systemd")?;
    let stand_in = dir.path().join("mesh-audit");
    fs::write(&stand_in, "#!/bin/sh\nexit 0\n")?;
    fs::set_permissions(&stand_in, fs::Permissions::from_mode(0o755))?;
    let path = dir.path().join(UNIT);
    fs::write(&path, unit.replace(BINARY, &stand_in.display().to_string()))?;
    let output = run(
        "systemd-analyze",
        ["verify", "--man=no"]
            .iter()
            .map(std::ffi::OsStr::new)
            .chain([path.as_os_str()]),
        dir.path(),
        "install systemd (apt-get install systemd)",
    )?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    ensure!(
        output.status.success(),
        "systemd-analyze verify failed: {stderr}"
    );
    // A warning (an unknown key, a bad value that is ignored) does not fail verify: any word
    // about this unit does fail the test.
    let about_unit: Vec<&str> = stderr.lines().filter(|l| l.contains(UNIT)).collect();
    ensure!(
        about_unit.is_empty(),
        "systemd-analyze verify: {about_unit:#?}"
    );
    Ok(())
}

#[test]
fn the_unit_is_hardened() -> anyhow::Result<()> {
    let settings = service_settings(&deploy_file(UNIT)?);
    let one = |key: &str| values(&settings, key).last().copied();
    for (key, expected) in [
        ("DynamicUser", "yes"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("CapabilityBoundingSet", ""),
        ("AmbientCapabilities", ""),
        ("StateDirectory", "mesh-audit"),
        ("SystemCallArchitectures", "native"),
    ] {
        ensure!(
            one(key) == Some(expected),
            "{key}={expected} (found {:?})",
            one(key)
        );
    }
    ensure!(
        values(&settings, "SystemCallFilter").contains(&"@system-service"),
        "SystemCallFilter=@system-service"
    );
    let families = one("RestrictAddressFamilies").unwrap_or_default();
    ensure!(
        families
            .split_whitespace()
            .all(|f| ["AF_UNIX", "AF_INET", "AF_INET6"].contains(&f)),
        "RestrictAddressFamilies allows only AF_UNIX AF_INET AF_INET6: {families}"
    );
    // The SQLite default lives in the state directory, the only writable place.
    let store = values(&settings, "Environment")
        .into_iter()
        .find_map(|e| e.strip_prefix("MESH_AUDIT_STORE="))
        .context("a default MESH_AUDIT_STORE")?;
    ensure!(
        store.starts_with("sqlite:///var/lib/mesh-audit/"),
        "the default store is in StateDirectory: {store}"
    );
    Ok(())
}

/// journald gets plain lines: the unit sets `NO_COLOR`, and no `--color always` or
/// `MESH_LOG_FORMAT` that is not a format.
#[test]
fn the_unit_logs_without_colour() -> anyhow::Result<()> {
    let settings = service_settings(&deploy_file(UNIT)?);
    let env = values(&settings, "Environment");
    ensure!(
        env.contains(&"NO_COLOR=1"),
        "Environment=NO_COLOR=1: {env:?}"
    );
    let exec = values(&settings, "ExecStart").join(" ");
    ensure!(
        !exec.contains("--color always") && !exec.contains("--color=always"),
        "ExecStart colours its logs: {exec}"
    );
    Ok(())
}

#[test]
fn no_password_on_the_command_line() -> anyhow::Result<()> {
    let settings = service_settings(&deploy_file(UNIT)?);
    let exec = values(&settings, "ExecStart");
    ensure!(exec.len() == 1, "one ExecStart");
    let exec = exec[0];
    for word in ["password=", "--password ", "MESH_PASSWORD=", "@"] {
        ensure!(!exec.contains(word), "ExecStart holds `{word}`: {exec}");
    }
    for env in values(&settings, "Environment") {
        ensure!(
            !env.starts_with("MESH_PASSWORD="),
            "a password in Environment=: put it in a credential"
        );
        ensure!(
            !env.contains('@'),
            "a URL with user information in Environment=: put it in the environment file"
        );
    }
    // The password comes as a credential, read through MESH_PASSWORD_FILE.
    let credential = values(&settings, "LoadCredential")
        .into_iter()
        .find_map(|c| c.split_once(':').map(|(name, _)| name.to_owned()))
        .context("LoadCredential=NAME:PATH")?;
    ensure!(
        values(&settings, "Environment")
            .contains(&format!("MESH_PASSWORD_FILE=%d/{credential}").as_str()),
        "MESH_PASSWORD_FILE=%d/{credential}"
    );
    ensure!(
        !values(&settings, "EnvironmentFile").is_empty(),
        "the settings come from an EnvironmentFile"
    );
    Ok(())
}

#[test]
fn the_command_line_with_the_example_environment_is_accepted() -> anyhow::Result<()> {
    let settings = service_settings(&deploy_file(UNIT)?);
    let exec = values(&settings, "ExecStart")
        .first()
        .copied()
        .context("ExecStart")?;
    let words: Vec<String> = exec.split_whitespace().map(str::to_owned).collect();
    ensure!(
        words.first().map(String::as_str) == Some(BINARY)
            && words.get(1).map(String::as_str) == Some("run"),
        "ExecStart={BINARY} run …: {exec}"
    );
    // The unit's Environment= first; the environment file's settings win over them.
    let mut env: Vec<(String, String)> = values(&settings, "Environment")
        .into_iter()
        .filter_map(|e| e.split_once('=').map(|(k, v)| (k.to_owned(), v.to_owned())))
        .collect();
    env.extend(env_file(&deploy_file("mesh-audit.env.example")?)?);
    let stand = Stand::new()?;
    let checked = check_run(&words[2..], &env, &stand)?;
    let metrics = checked
        .args
        .metrics_addr
        .context("the unit serves /metrics")?;
    ensure!(metrics.ip().is_loopback(), "metrics on loopback: {metrics}");
    ensure!(
        checked.args.url.starts_with("amqps://"),
        "the example connects over TLS"
    );
    Ok(())
}
