//! `mesh access plan | apply`: the broker users of the access plan (one per module, context,
//! node, audit logger and the operator) and their permissions, compared with the broker's and
//! fixed, through the management API (see mesh-amqp's `access` for the rules).
//!
//! Passwords never come from the command line: `--passwords FILE` (a TOML table
//! `"user" = "password"`, refused when others may read it) or `MESH_PASSWORD_<USER>` (the user
//! name upper-cased, every byte that is not a letter or digit as `_`) for the users the file
//! does not name. No output, error or log line holds one.
//!
//! Beside the users, the plan covers the limits of the spec's `[access]` table and the
//! bindings on mesh's exchanges the contract does not explain (see `drift`).

mod drift;

use std::path::Path;

use mesh::amqp::access::{self, AccessError, Grant, Password, Passwords, Plan};
use serde_json::{json, Value};

use crate::cli::{AccessCommand, Global};
use crate::config;
use crate::exit::{fail, Code};
use crate::management::Management;
use crate::output::{self, escape, paint, BAD, DIM, GOOD, WARN};
pub(crate) use drift::remove_foreign;
use drift::Drift;

/// Runs one `access` command on a runtime of its own, as `topology` does.
pub(crate) fn run(global: &Global, command: &AccessCommand) -> anyhow::Result<Code> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run_async(global, command))
}

async fn run_async(global: &Global, command: &AccessCommand) -> anyhow::Result<Code> {
    let args = match command {
        AccessCommand::Plan { args, .. } | AccessCommand::Apply { args, .. } => args,
    };
    let node = match &global.node {
        Some(_) => Some(config::node(global)?),
        None => None,
    };
    let spec = crate::topology::access_spec(&args.spec, node, || config::node(global))?;
    let grants = access::grants(&spec);
    let passwords = passwords(args.passwords.as_deref(), &grants)?;
    let management = config::management(global)?;
    let broker = access::read(management.client(), management.vhost())
        .await
        .map_err(|e| management.error(e))?;
    let plan = access::plan(&grants, &broker, &passwords, spec.get_user_prefix());
    let limits = crate::topology::access_limits(&args.spec)?;
    let drift = Drift::read(&management, &limits, &grants).await?;
    let node = spec.get_node().as_str();
    match command {
        AccessCommand::Plan { check, .. } => {
            show_plan(global, &management, node, &grants, &plan, &drift)?;
            Ok(if *check && !(plan.is_empty() && drift.is_empty()) {
                Code::Drift
            } else {
                Code::Ok
            })
        }
        AccessCommand::Apply { dry_run: true, .. } => {
            refuse_missing_passwords(&plan)?;
            dry_run(global, &management, node, &plan, &drift)
        }
        AccessCommand::Apply { .. } => {
            let prefix = spec.get_user_prefix();
            let planned = Planned {
                grants: &grants,
                plan: &plan,
                passwords: &passwords,
                limits: &limits,
                drift: &drift,
            };
            apply(global, &management, node, prefix, planned).await
        }
    }
}

/// `MESH_PASSWORD_<USER>`: the user name upper-cased, every byte that is not an ASCII letter
/// or digit as `_`.
pub(crate) fn password_variable(user: &str) -> String {
    let mut name = "MESH_PASSWORD_".to_owned();
    name.extend(user.bytes().map(|b| {
        if b.is_ascii_alphanumeric() {
            char::from(b.to_ascii_uppercase())
        } else {
            '_'
        }
    }));
    name
}

/// The passwords of the planned users: from the file, then from the environment for the
/// users it does not name. A user with neither is left out (the plan says so).
fn passwords(file: Option<&Path>, grants: &[Grant]) -> anyhow::Result<Passwords> {
    let mut passwords = Passwords::new();
    if let Some(path) = file {
        for (user, password) in read_passwords(path)? {
            if password.is_empty() {
                return Err(fail(
                    Code::Usage,
                    format!(
                        "the passwords file {} gives user `{}` an empty password",
                        path.display(),
                        escape(&user)
                    ),
                ));
            }
            passwords.insert(user, Password::new(password));
        }
    }
    for grant in grants {
        if passwords.contains(&grant.user) {
            continue;
        }
        let variable = password_variable(&grant.user);
        match std::env::var_os(&variable) {
            None => {}
            Some(value) => match value.into_string() {
                Ok(password) if !password.is_empty() => {
                    passwords.insert(grant.user.clone(), Password::new(password));
                }
                Ok(_) => {
                    return Err(fail(
                        Code::Usage,
                        format!("{variable} is empty: give the password of `{}`", grant.user),
                    ))
                }
                Err(_) => return Err(fail(Code::Usage, format!("{variable} is not UTF-8"))),
            },
        }
    }
    Ok(passwords)
}

/// A TOML table `"user" = "password"`, from a file only its owner (and group) may read. Its
/// parse errors give a line number, never the text (which could hold a password).
fn read_passwords(path: &Path) -> anyhow::Result<Vec<(String, String)>> {
    use std::os::unix::fs::PermissionsExt as _;

    let shown = path.display();
    let metadata = std::fs::metadata(path).map_err(|e| {
        fail(
            Code::Usage,
            format!("cannot read the passwords file {shown}: {e}"),
        )
    })?;
    if metadata.permissions().mode() & 0o007 != 0 {
        return Err(fail(
            Code::Usage,
            format!(
                "the passwords file {shown} is open to every user of the machine: chmod o-rwx \
                 it (e.g. chmod 600)"
            ),
        ));
    }
    let text = config::read_secrets_file(path).map_err(|e| {
        fail(
            Code::Usage,
            format!("cannot read the passwords file {shown}: {e}"),
        )
    })?;
    let table: std::collections::BTreeMap<String, String> = toml::from_str(&text).map_err(|e| {
        let line = e
            .span()
            .map(|span| text[..span.start.min(text.len())].lines().count().max(1));
        fail(
            Code::Usage,
            format!(
                "invalid passwords file {shown}{}: expected a TOML table of \
                     \"user\" = \"password\"",
                line.map(|l| format!(" (line {l})")).unwrap_or_default()
            ),
        )
    })?;
    Ok(table.into_iter().collect())
}

fn sign_style(sign: char) -> anstyle::Style {
    match sign {
        '+' => GOOD,
        '~' => WARN,
        '-' => BAD,
        _ => DIM,
    }
}

fn grant_json(grant: &Grant) -> Value {
    json!({
        "user": grant.user,
        "role": grant.role.to_string(),
        "tags": grant.tags,
        "configure": grant.permissions.configure,
        "write": grant.permissions.write,
        "read": grant.permissions.read,
        "topic_permissions": grant.topic.iter().map(|t| json!({
            "exchange": t.exchange, "write": t.write, "read": t.read
        })).collect::<Vec<_>>(),
    })
}

fn plan_json(plan: &Plan) -> (Vec<Value>, Vec<Value>) {
    let changes = plan
        .changes
        .iter()
        .map(|c| {
            json!({
                "kind": c.kind(), "user": c.user(), "exchange": c.exchange(),
                "description": c.to_string()
            })
        })
        .collect();
    let notes = plan
        .notes
        .iter()
        .map(|n| json!({"kind": n.kind(), "user": n.user(), "description": n.to_string()}))
        .collect();
    (changes, notes)
}

fn print_plan(plan: &Plan) -> anyhow::Result<()> {
    for change in &plan.changes {
        let sign = change.sign();
        output::line(format_args!(
            "{} {}",
            paint(sign_style(sign), sign),
            escape(&change.to_string())
        ))?;
    }
    for note in &plan.notes {
        output::line(format_args!(
            "{} {}",
            paint(DIM, '?'),
            escape(&note.to_string())
        ))?;
    }
    Ok(())
}

/// `= vhost V agrees with the access plan for node N (K users)`.
fn print_agreement(management: &Management, node: &str, users: usize) -> anyhow::Result<()> {
    output::line(format_args!(
        "{} vhost {} agrees with the access plan for node {} ({} users)",
        paint(GOOD, "="),
        escape(management.vhost()),
        node,
        users
    ))?;
    Ok(())
}

fn show_plan(
    global: &Global,
    management: &Management,
    node: &str,
    grants: &[Grant],
    plan: &Plan,
    drift: &Drift,
) -> anyhow::Result<()> {
    if global.json {
        let (mut changes, notes) = plan_json(plan);
        changes.extend(drift.to_json());
        output::json(&json!({
            "vhost": management.vhost(), "node": node,
            "users": grants.iter().map(grant_json).collect::<Vec<_>>(),
            "changes": changes, "notes": notes,
        }))?;
        return Ok(());
    }
    print_plan(plan)?;
    drift.print(None)?;
    if plan.is_empty() && drift.is_empty() {
        print_agreement(management, node, grants.len())?;
    }
    Ok(())
}

/// Apply's refusal, before it changes anything: a planned user without a password.
fn refuse_missing_passwords(plan: &Plan) -> anyhow::Result<()> {
    let missing = plan.missing_passwords();
    if missing.is_empty() {
        return Ok(());
    }
    let how: Vec<String> = missing
        .iter()
        .map(|u| format!("{} ({})", escape(u), password_variable(u)))
        .collect();
    Err(fail(
        Code::Usage,
        format!(
            "refusing to apply, nothing was changed: no password for {}; give them in \
             --passwords FILE or in the environment",
            how.join(", ")
        ),
    ))
}

/// `access apply --dry-run`: the changes apply would make, after the same refusal; the
/// broker is only read.
fn dry_run(
    global: &Global,
    management: &Management,
    node: &str,
    plan: &Plan,
    drift: &Drift,
) -> anyhow::Result<Code> {
    if global.json {
        let (mut changes, notes) = plan_json(plan);
        changes.extend(drift.to_json());
        output::json(&json!({
            "vhost": management.vhost(), "node": node, "dry_run": true,
            "would_apply": changes, "notes": notes,
        }))?;
        return Ok(Code::Ok);
    }
    for change in &plan.changes {
        let sign = change.sign();
        output::line(format_args!(
            "{} {}: {}",
            paint(sign_style(sign), sign),
            escape(&change.to_string()),
            paint(GOOD, "would apply")
        ))?;
    }
    drift.print(Some("would apply"))?;
    for note in &plan.notes {
        output::line(format_args!(
            "{} {}",
            paint(DIM, '?'),
            escape(&note.to_string())
        ))?;
    }
    output::line(format_args!(
        "dry run: {} change(s); nothing was changed on vhost {}",
        plan.changes.len() + drift.len(),
        escape(management.vhost())
    ))?;
    Ok(Code::Ok)
}

/// What apply works from: the grants, the users' plan with its passwords, and the limits
/// with the drift beside the users.
struct Planned<'a> {
    grants: &'a [Grant],
    plan: &'a Plan,
    passwords: &'a Passwords,
    limits: &'a access::LimitsSpec,
    drift: &'a Drift,
}

async fn apply(
    global: &Global,
    management: &Management,
    node: &str,
    prefix: &str,
    planned: Planned<'_>,
) -> anyhow::Result<Code> {
    let Planned {
        grants,
        plan,
        passwords,
        limits,
        drift,
    } = planned;
    refuse_missing_passwords(plan)?;
    let done = match access::apply(
        management.client(),
        management.vhost(),
        grants,
        plan,
        passwords,
    )
    .await
    {
        Ok(done) => done,
        Err(AccessError::Management(e)) => return Err(management.error(e)),
        Err(other) => return Err(fail(Code::Usage, other.to_string())),
    };
    // The users exist now: their limits can be set.
    drift.apply(management).await?;
    // What the broker has now.
    let broker = access::read(management.client(), management.vhost())
        .await
        .map_err(|e| management.error(e))?;
    let after = access::plan(grants, &broker, passwords, prefix);
    let drift_after = Drift::read(management, limits, grants).await?;
    let agrees = after.is_empty() && drift_after.is_empty();
    if global.json {
        let (mut changes, notes) = plan_json(&after);
        changes.extend(drift_after.to_json());
        let mut applied: Vec<Value> = done
            .iter()
            .map(|c| {
                json!({
                    "kind": c.kind(), "user": c.user(), "exchange": c.exchange(),
                    "description": c.to_string()
                })
            })
            .collect();
        applied.extend(drift.to_json());
        output::json(&json!({
            "vhost": management.vhost(), "node": node,
            "applied": applied, "changes": changes, "notes": notes,
        }))?;
    } else {
        for change in &done {
            let sign = change.sign();
            output::line(format_args!(
                "{} {}: {}",
                paint(sign_style(sign), sign),
                escape(&change.to_string()),
                paint(GOOD, "fixed")
            ))?;
        }
        drift.print(Some("fixed"))?;
        if agrees {
            print_plan(&after)?;
            print_agreement(management, node, grants.len())?;
        }
    }
    if !agrees {
        if !global.json {
            print_plan(&after)?;
            drift_after.print(None)?;
        }
        return Err(fail(
            Code::Error,
            format!(
                "the broker still differs from the access plan after apply ({} differences)",
                after.changes.len() + drift_after.len()
            ),
        ));
    }
    Ok(Code::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn password_variables_are_upper_case_words() {
        assert_eq!(
            password_variable("module.umami"),
            "MESH_PASSWORD_MODULE_UMAMI"
        );
        assert_eq!(
            password_variable("acme/audit-logger.n1"),
            "MESH_PASSWORD_ACME_AUDIT_LOGGER_N1"
        );
        assert_eq!(password_variable("ü"), "MESH_PASSWORD___");
    }

    #[test]
    fn a_passwords_file_open_to_others_is_refused_and_errors_never_quote_it() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = std::env::temp_dir().join(format!("mesh-cli-pw-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("passwords.toml");
        std::fs::write(
            &path,
            "\"module.umami\" = \"s3cret-pw\"\nbroken s3cret-two\n",
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let error = read_passwords(&path).unwrap_err();
        assert_eq!(crate::exit::classify(&error), Code::Usage);
        assert!(format!("{error:#}").contains("chmod"));
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let error = read_passwords(&path).unwrap_err();
        let shown = format!("{error:#}");
        assert!(shown.contains("line 2"), "{shown}");
        assert!(!shown.contains("s3cret"), "{shown}");
        std::fs::write(&path, "\"module.umami\" = \"s3cret-pw\"\n").unwrap();
        let read = read_passwords(&path).unwrap();
        assert_eq!(read, [("module.umami".to_owned(), "s3cret-pw".to_owned())]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
