//! `deploy/compose.yaml`, as docker compose resolves it: valid, and the stack it describes
//! is the one deploy/README.md promises (RabbitMQ with management over TLS only, PostgreSQL,
//! the audit logger with its metrics port), with a command line the logger accepts.

mod common;

use std::fs;
use std::path::Path;

use anyhow::{bail, ensure, Context};
use common::{check_run, copy_dir, deploy, deploy_file, env_file, run, userinfo, Stand, TempDir};
use yaml_rust2::{Yaml, YamlLoader};

const HINT: &str = "install Debian's docker-compose (apt-get install --no-install-recommends \
                    docker-compose) or the docker compose plugin";

/// `deploy/` copied into a scratch workspace with `secrets/` made from `secrets.example/`
/// (compose refuses a missing env_file) and an empty `tls/`, and the compose command that
/// exists here: `docker compose` when the plugin answers, else `docker-compose`.
struct Stack {
    root: TempDir,
    compose: (String, Vec<String>),
}

impl Stack {
    fn new() -> anyhow::Result<Stack> {
        let root = TempDir::new("compose")?;
        let copy = root.path().join("deploy");
        copy_dir(&deploy(), &copy)?;
        let _ = fs::remove_dir_all(copy.join("secrets"));
        let _ = fs::remove_dir_all(copy.join("tls"));
        copy_dir(&copy.join("secrets.example"), &copy.join("secrets"))?;
        fs::create_dir_all(copy.join("tls"))?;
        let plugin = std::process::Command::new("docker")
            .args(["compose", "version"])
            .output()
            .is_ok_and(|o| o.status.success());
        let compose = if plugin {
            ("docker".to_owned(), vec!["compose".to_owned()])
        } else {
            ("docker-compose".to_owned(), Vec::new())
        };
        Ok(Stack { root, compose })
    }

    fn dir(&self) -> std::path::PathBuf {
        self.root.path().join("deploy")
    }

    fn compose(&self, args: &[&str]) -> anyhow::Result<String> {
        let (program, first) = &self.compose;
        let all: Vec<&str> = first
            .iter()
            .map(String::as_str)
            .chain(["-f", "compose.yaml"])
            .chain(args.iter().copied())
            .collect();
        let output = run(program, &all, &self.dir(), HINT)?;
        ensure!(
            output.status.success(),
            "{program} {}: {}{}",
            all.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// The resolved file (`config`), parsed.
    fn config(&self) -> anyhow::Result<Yaml> {
        let text = self.compose(&["config"])?;
        let mut docs = YamlLoader::load_from_str(&text).context("compose config output")?;
        ensure!(docs.len() == 1, "one YAML document from compose config");
        Ok(docs.remove(0))
    }
}

fn service<'a>(config: &'a Yaml, name: &str) -> anyhow::Result<&'a Yaml> {
    let service = &config["services"][name];
    ensure!(
        !service.is_badvalue(),
        "no service `{name}` in compose.yaml"
    );
    Ok(service)
}

fn strings(list: &Yaml) -> Vec<String> {
    list.as_vec()
        .map(|items| {
            items
                .iter()
                .filter_map(|i| match i {
                    Yaml::String(s) => Some(s.clone()),
                    Yaml::Integer(n) => Some(n.to_string()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The service's environment (compose resolves `env_file` into it), as pairs.
fn environment(service: &Yaml) -> Vec<(String, String)> {
    service["environment"]
        .as_hash()
        .map(|hash| {
            hash.iter()
                .filter_map(|(k, v)| {
                    let value = match v {
                        Yaml::String(s) => s.clone(),
                        Yaml::Integer(n) => n.to_string(),
                        Yaml::Boolean(b) => b.to_string(),
                        _ => return None,
                    };
                    Some((k.as_str()?.to_owned(), value))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Long-form port mappings compose prints (`127.0.0.1:9464:9464/tcp`) or mappings.
fn published(service: &Yaml) -> Vec<String> {
    match service["ports"].as_vec() {
        Some(items) => items
            .iter()
            .map(|p| match p {
                Yaml::String(s) => s.clone(),
                other => format!(
                    "{}:{}:{}",
                    other["host_ip"].as_str().unwrap_or_default(),
                    other["published"]
                        .as_str()
                        .map(str::to_owned)
                        .or_else(|| other["published"].as_i64().map(|n| n.to_string()))
                        .unwrap_or_default(),
                    other["target"].as_i64().unwrap_or_default()
                ),
            })
            .collect(),
        None => Vec::new(),
    }
}

fn publishes(service: &Yaml, port: u16) -> bool {
    published(service).iter().any(|p| {
        let p = p.trim_end_matches("/tcp");
        p.ends_with(&format!(":{port}")) && p.starts_with("127.0.0.1:")
    })
}

/// Volume mounts as `source:target[:mode]` strings, whatever form compose printed.
fn mounts(service: &Yaml) -> Vec<(String, String)> {
    service["volumes"]
        .as_vec()
        .map(|items| {
            items
                .iter()
                .filter_map(|v| match v {
                    Yaml::String(s) => {
                        let mut parts = s.splitn(3, ':');
                        Some((parts.next()?.to_owned(), parts.next()?.to_owned()))
                    }
                    other => Some((
                        other["source"].as_str()?.to_owned(),
                        other["target"].as_str()?.to_owned(),
                    )),
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn compose_config_accepts_the_file() -> anyhow::Result<()> {
    let stack = Stack::new()?;
    stack.compose(&["config", "-q"])?;
    Ok(())
}

#[test]
fn rabbitmq_serves_amqp_and_management_over_tls_only() -> anyhow::Result<()> {
    let stack = Stack::new()?;
    let config = stack.config()?;
    let rabbitmq = service(&config, "rabbitmq")?;
    let image = rabbitmq["image"].as_str().unwrap_or_default();
    ensure!(
        image.starts_with("rabbitmq:") && image.ends_with("-management"),
        "the broker image has the management plugin: {image}"
    );
    ensure!(publishes(rabbitmq, 5671), "amqps on 127.0.0.1:5671");
    ensure!(
        publishes(rabbitmq, 15671),
        "management https on 127.0.0.1:15671"
    );
    for plain in [5672, 15672] {
        ensure!(!publishes(rabbitmq, plain), "plain port {plain} published");
    }
    let mounts = mounts(rabbitmq);
    let tls_target = mounts
        .iter()
        .find(|(source, _)| source.ends_with("/deploy/tls"))
        .map(|(_, target)| target.clone())
        .context("deploy/tls mounted into the broker")?;
    let (conf_source, _) = mounts
        .iter()
        .find(|(_, target)| target.starts_with("/etc/rabbitmq/conf.d/"))
        .context("a configuration file mounted into /etc/rabbitmq/conf.d/")?;
    let conf_name = Path::new(conf_source)
        .strip_prefix(stack.dir())
        .context("the broker's configuration comes from deploy/")?;
    let conf = deploy_file(&conf_name.display().to_string())?;
    let settings = env_file(&conf)?;
    let get = |key: &str| {
        settings
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    ensure!(
        get("listeners.tcp") == Some("none"),
        "no plain AMQP listener"
    );
    ensure!(
        get("listeners.ssl.default") == Some("5671"),
        "AMQP over TLS on 5671"
    );
    ensure!(
        get("management.ssl.port") == Some("15671"),
        "management over https on 15671"
    );
    for prefix in ["ssl_options", "management.ssl"] {
        for file in ["cacertfile", "certfile", "keyfile"] {
            let path = get(&format!("{prefix}.{file}"))
                .with_context(|| format!("{prefix}.{file} is set"))?;
            ensure!(
                path.starts_with(&format!("{tls_target}/")),
                "{prefix}.{file} = {path} lies in the mounted {tls_target}"
            );
        }
    }
    Ok(())
}

#[test]
fn the_audit_logger_runs_with_a_command_line_it_accepts() -> anyhow::Result<()> {
    let stack = Stack::new()?;
    let config = stack.config()?;
    let audit = service(&config, "audit")?;
    let command = strings(&audit["command"]);
    ensure!(
        command.first().map(String::as_str) == Some("run"),
        "mesh-audit run: {command:?}"
    );
    let env = environment(audit);
    let stand = Stand::new()?;
    let checked = check_run(&command[1..], &env, &stand)?;

    // TLS to the broker, verified for the service's name; no password in the URL.
    let url = &checked.args.url;
    ensure!(
        url.starts_with("amqps://"),
        "the logger connects over TLS: {url}"
    );
    ensure!(
        url.contains("@rabbitmq:5671/"),
        "the logger connects to the stack's broker: {url}"
    );
    ensure!(
        !userinfo(url).unwrap_or_default().contains(':'),
        "a password in the broker URL of compose.yaml"
    );
    // The user is the one the broker is created with.
    let rabbitmq_env = environment(service(&config, "rabbitmq")?);
    let user = rabbitmq_env
        .iter()
        .find(|(k, _)| k == "RABBITMQ_DEFAULT_USER")
        .map(|(_, v)| v.as_str())
        .context("secrets.example/rabbitmq.env names RABBITMQ_DEFAULT_USER")?;
    ensure!(
        userinfo(url) == Some(user),
        "the logger's user {:?} is the broker's {user}",
        userinfo(url)
    );
    // The store is the stack's PostgreSQL.
    ensure!(
        checked.args.store.starts_with("postgres://")
            && checked.args.store.contains("@postgres:5432/"),
        "the store is the postgres service"
    );
    // Metrics on all interfaces in the container, published on the host's loopback.
    let metrics = checked
        .args
        .metrics_addr
        .context("--metrics-addr (or MESH_METRICS_ADDR) is set")?;
    ensure!(
        metrics.ip().is_unspecified(),
        "metrics on 0.0.0.0 in the container"
    );
    ensure!(
        publishes(audit, metrics.port()),
        "the metrics port {} is published on 127.0.0.1",
        metrics.port()
    );
    // The CA the URL names (as written, before the check put its own in place) is mounted.
    let written = command
        .iter()
        .find(|arg| arg.starts_with("amqps://"))
        .context("the --url as written")?;
    let ca = written
        .split("cacertfile=")
        .nth(1)
        .and_then(|rest| rest.split('&').next())
        .context("the URL names its cacertfile")?;
    ensure!(
        mounts(audit).iter().any(|(_, target)| target == ca),
        "{ca} is mounted into the logger"
    );
    // It starts after its broker and database are healthy, and is built from deploy/.
    for dependency in ["rabbitmq", "postgres"] {
        ensure!(
            audit["depends_on"][dependency]["condition"].as_str() == Some("service_healthy"),
            "audit waits for {dependency} to be healthy"
        );
        ensure!(
            !service(&config, dependency)?["healthcheck"].is_badvalue(),
            "{dependency} has a healthcheck"
        );
    }
    ensure!(
        audit["build"]["dockerfile"].as_str() == Some("deploy/Dockerfile"),
        "the logger's image is deploy/Dockerfile"
    );
    let postgres = service(&config, "postgres")?;
    ensure!(
        postgres["image"]
            .as_str()
            .unwrap_or_default()
            .starts_with("postgres:"),
        "a PostgreSQL image"
    );
    ensure!(
        published(postgres).is_empty(),
        "PostgreSQL stays inside the stack"
    );
    Ok(())
}

/// `docker compose logs` gets plain lines: the logger runs with `--color never` (which the
/// command-line check above accepts).
#[test]
fn the_audit_logger_logs_without_colour() -> anyhow::Result<()> {
    let stack = Stack::new()?;
    let config = stack.config()?;
    let command = strings(&service(&config, "audit")?["command"]);
    let never = command
        .windows(2)
        .any(|pair| pair[0] == "--color" && pair[1] == "never")
        || command.iter().any(|word| word == "--color=never");
    ensure!(never, "the logger runs with --color never: {command:?}");
    Ok(())
}

#[test]
fn no_secret_is_written_in_the_compose_file() -> anyhow::Result<()> {
    let text = deploy_file("compose.yaml")?;
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') {
            continue;
        }
        for word in ["PASSWORD", "_PASS", "password"] {
            if line.contains(word) {
                bail!("compose.yaml line `{line}` names a password: keep it in secrets/");
            }
        }
    }
    Ok(())
}
