//! The config file's contexts: a context gives url, password file, node and store; a flag
//! overrides it; a `MESH_*` variable overrides it too; a bad file is exit code 2 naming the
//! file and the line.

use std::path::{Path, PathBuf};
use std::process::Output;

use crate::{assert_code, finish, mesh, stderr, stdout, vhost};

/// A config directory of the test's own with `config.toml`, removed on drop.
struct ConfigDir {
    dir: PathBuf,
}

impl ConfigDir {
    fn new(name: &str, config: &str) -> ConfigDir {
        let dir = std::env::temp_dir().join(format!("mesh-cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("mesh")).expect("a config directory");
        std::fs::write(dir.join("mesh").join("config.toml"), config).expect("the config file");
        ConfigDir { dir }
    }

    fn file(&self) -> PathBuf {
        self.dir.join("mesh").join("config.toml")
    }
}

impl Drop for ConfigDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `mesh args…` with the config of `dir` (found through XDG_CONFIG_HOME), no MESH_URL and
/// no MESH_NODE, and `env` set.
async fn with_config(dir: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = mesh(None);
    command
        .env("XDG_CONFIG_HOME", dir)
        .env_remove("MESH_NODE")
        .env_remove("MESH_CONTEXT")
        .env_remove("MESH_CONFIG")
        .env_remove("MESH_PASSWORD")
        .env_remove("MESH_PASSWORD_FILE")
        .args(args);
    for (key, value) in env {
        command.env(key, value);
    }
    finish(command.spawn().expect("mesh starts")).await
}

/// The queue `topology plan` wants for module billing: it names the node in use.
const PLAN: [&str; 7] = [
    "topology",
    "plan",
    "--module",
    "billing",
    "--pattern",
    "module.umami.#",
    "--json",
];

fn planned_node(output: &Output) -> String {
    assert_code(output, 0);
    let text = stdout(output);
    for node in ["ctxnode", "flagnode", "envnode", "devnode"] {
        if text.contains(&format!("\"{node}.billing.events\"")) {
            return node.to_owned();
        }
    }
    panic!("no known node's queue in the plan: {text}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_is_used_and_flags_and_variables_override_it() {
    let vhost = vhost("cli-profiles").await;
    let url = vhost.url();
    // The context's url carries no password: it comes from the context's password file.
    let (base, vhost_part) = url.rsplit_once('/').expect("a vhost in the URL");
    let without_password = base.replacen("guest:guest@", "guest@", 1);
    assert_ne!(
        without_password, base,
        "the test broker's URL has guest:guest"
    );
    let store_dir =
        std::env::temp_dir().join(format!("mesh-cli-profiles-store-{}", std::process::id()));
    let config = format!(
        "current-context = \"test\"\n\
         \n\
         [contexts.test]\n\
         url = \"{without_password}/{vhost_part}\"\n\
         password-file = \"password\"\n\
         node = \"ctxnode\"\n\
         store = \"sqlite://{}/ctx.db\"\n\
         \n\
         [contexts.dev]\n\
         url = \"amqp://127.0.0.1:1\"\n\
         node = \"devnode\"\n",
        store_dir.display()
    );
    let config_dir = ConfigDir::new("profiles", &config);
    let dir = config_dir.dir.clone();
    std::fs::write(dir.join("mesh").join("password"), "guest\n").expect("the password file");

    // The current context: its url (with the password file) and its node.
    let output = with_config(&dir, &[], &PLAN).await;
    assert_eq!(planned_node(&output), "ctxnode", "{}", stderr(&output));
    let output = with_config(&dir, &[], &["emit", "node.ctxnode.tick"]).await;
    assert_code(&output, 0);

    // A flag beats the context; so does a variable; and the flag beats the variable.
    let output = with_config(&dir, &[], &[&["--node", "flagnode"][..], &PLAN].concat()).await;
    assert_eq!(planned_node(&output), "flagnode");
    let output = with_config(&dir, &[("MESH_NODE", "envnode")], &PLAN).await;
    assert_eq!(planned_node(&output), "envnode");
    let output = with_config(
        &dir,
        &[("MESH_NODE", "envnode")],
        &[&["--node", "flagnode"][..], &PLAN].concat(),
    )
    .await;
    assert_eq!(planned_node(&output), "flagnode");

    // The url too: a broker nobody listens on, by flag or variable, is unreachable (3).
    let output = with_config(
        &dir,
        &[],
        &["--url", "amqp://127.0.0.1:1", "emit", "node.ctxnode.tick"],
    )
    .await;
    assert_code(&output, 3);
    let output = with_config(
        &dir,
        &[("MESH_URL", "amqp://127.0.0.1:1")],
        &["emit", "node.ctxnode.tick"],
    )
    .await;
    assert_code(&output, 3);

    // Another context, by flag or by variable (the flag wins).
    let output = with_config(
        &dir,
        &[],
        &["--context", "dev", "emit", "node.devnode.tick"],
    )
    .await;
    assert_code(&output, 3);
    let output = with_config(
        &dir,
        &[("MESH_CONTEXT", "dev")],
        &["emit", "node.devnode.tick"],
    )
    .await;
    assert_code(&output, 3);
    let output = with_config(
        &dir,
        &[("MESH_CONTEXT", "dev")],
        &["--context", "test", "emit", "node.ctxnode.tick"],
    )
    .await;
    assert_code(&output, 0);

    // The context's store is read by the store commands; --store and MESH_AUDIT_STORE win.
    let output = with_config(&dir, &[], &["audit", "count"]).await;
    assert_code(&output, 1);
    assert!(stderr(&output).contains("ctx.db"), "{}", stderr(&output));
    let other = format!("sqlite://{}/flag.db", store_dir.display());
    let output = with_config(&dir, &[], &["audit", "count", "--store", &other]).await;
    assert!(stderr(&output).contains("flag.db"), "{}", stderr(&output));
    let output = with_config(&dir, &[("MESH_AUDIT_STORE", &other)], &["audit", "count"]).await;
    assert!(stderr(&output).contains("flag.db"), "{}", stderr(&output));

    // A context that is not in the file.
    let output = with_config(&dir, &[], &["--context", "nope", "status"]).await;
    assert_code(&output, 2);
    assert!(
        stderr(&output).contains("no context `nope` (its contexts: dev, test)"),
        "{}",
        stderr(&output)
    );
    vhost.delete().await.expect("the vhost is deleted");
}

#[tokio::test]
async fn a_bad_config_file_is_a_usage_error_naming_the_file_and_the_line() {
    for (config, context, line, expected) in [
        (
            "[contexts.a]\nnode = \"n\"\nnde = \"x\"\n",
            Some("a"),
            3,
            "unknown field `nde`",
        ),
        (
            "current-context = \"a\"\n[contexts.a]\npassword = \"s3cret\"\n",
            None,
            3,
            "password-file",
        ),
        (
            "current-context = \"b\"\n[contexts.a]\n",
            None,
            1,
            "no context `b`",
        ),
        ("[contexts.a\n", Some("a"), 1, ""),
    ] {
        let dir = ConfigDir::new("profiles-bad", config);
        let mut command = mesh(None);
        command
            .env("MESH_CONFIG", dir.file())
            .env_remove("MESH_CONTEXT");
        if let Some(context) = context {
            command.args(["--context", context]);
        }
        command.arg("status");
        let output = finish(command.spawn().expect("mesh starts")).await;
        assert_code(&output, 2);
        let err = stderr(&output);
        let location = format!("{}:{line}: ", dir.file().display());
        assert!(err.contains(&location) && err.contains(expected), "{err}");
        assert!(!err.contains("s3cret"), "{err}");
    }
    // MESH_CONFIG naming no file.
    let mut command = mesh(None);
    command
        .env("MESH_CONFIG", "/nonexistent/mesh.toml")
        .env_remove("MESH_CONTEXT")
        .arg("status");
    let output = finish(command.spawn().expect("mesh starts")).await;
    assert_code(&output, 2);
    assert!(
        stderr(&output).contains("/nonexistent/mesh.toml"),
        "{}",
        stderr(&output)
    );
}
