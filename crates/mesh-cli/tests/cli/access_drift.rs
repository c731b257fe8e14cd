//! What `mesh topology` and `mesh access` find beside users and queues, on a private node
//! (users and their limits are global to a broker): bindings on mesh's exchanges that the
//! contract does not explain, made by the operator's own user (an exchange bound into
//! `mesh.events`, `mesh.replies` bound into `mesh.events`, a foreign queue), are drift for both
//! checks, listed by `apply --dry-run` and removed by `apply`; each user's `max-connections`
//! holds at the broker, and a limit changed by hand is drift.

use std::process::Output;
use std::time::Duration;

use mesh::amqp::management::{ManagementClient, ManagementOptions};
use mesh::amqp::AmqpOptions;
use mesh_testkit::{eventually, NodeOptions, PrivateNode};

use crate::{assert_code, finish, mesh, stdout, NODE, WAIT};

pub(crate) fn variable(user: &str) -> String {
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

/// A private node (with management) and a spec file for node `n1`, with a password for each
/// planned user (the operator, the node, each module) in the environment of every `mesh` it
/// runs. Shared by the tests of drift on a private node.
pub(crate) struct Setup {
    pub(crate) node: PrivateNode,
    management_url: String,
    spec: std::path::PathBuf,
    dir: std::path::PathBuf,
    users: Vec<(String, String)>,
    /// The prefix of every user name.
    pub(crate) prefix: String,
}

impl Setup {
    /// Starts the node and writes the spec: `access` are the lines of its `[access]` table
    /// after the user prefix, `modules` each module's name and its patterns (TOML array).
    /// `access apply` and `topology apply` have run (and agree) when it returns.
    pub(crate) async fn start(tag: &str, access: &str, modules: &[(&str, &str)]) -> Setup {
        let node = PrivateNode::start(NodeOptions::default().management(true))
            .await
            .expect("a private RabbitMQ node with management");
        let management_url = format!(
            "http://127.0.0.1:{}",
            node.management_port().expect("management enabled")
        );
        let prefix = format!("{tag}{}-", std::process::id());
        let dir = std::env::temp_dir().join(format!("mesh-cli-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("the spec's directory");
        let spec = dir.join("mesh.toml");
        let mut text = format!("node = \"n1\"\n[access]\nuser_prefix = \"{prefix}\"\n{access}");
        for (name, patterns) in modules {
            text.push_str(&format!(
                "[[modules]]\nname = \"{name}\"\npatterns = {patterns}\n"
            ));
        }
        std::fs::write(&spec, text).expect("the spec file");
        let node_user = format!("node.{NODE}");
        let mut names = vec!["operator".to_owned(), node_user];
        names.extend(modules.iter().map(|(name, _)| format!("module.{name}")));
        let users: Vec<(String, String)> = names
            .iter()
            .enumerate()
            .map(|(i, user)| {
                (
                    format!("{prefix}{user}"),
                    format!("pw-{i}-Dr1ft{}", std::process::id()),
                )
            })
            .collect();
        let setup = Setup {
            node,
            management_url,
            spec,
            dir,
            users,
            prefix,
        };
        // The management listener may come up a moment after the node reports booted.
        eventually(WAIT, "access apply succeeds", || async {
            let output = setup.mesh("access", &["apply"]).await;
            if output.status.code() != Some(0) {
                eprintln!("{}{}", stdout(&output), crate::stderr(&output));
            }
            (output.status.code() == Some(0)).then_some(())
        })
        .await;
        let output = setup.mesh("topology", &["apply"]).await;
        assert_code(&output, 0);
        let output = setup.mesh("access", &["plan", "--check"]).await;
        assert_code(&output, 0);
        let output = setup.mesh("topology", &["plan", "--check"]).await;
        assert_code(&output, 0);
        setup
    }

    /// `mesh <command> <args…> --spec … --management-url …`, every password in the
    /// environment.
    pub(crate) async fn mesh(&self, command: &str, args: &[&str]) -> Output {
        let mut child = mesh(Some(&self.node.url()));
        child
            .arg(command)
            .args(args)
            .arg("--spec")
            .arg(&self.spec)
            .arg("--management-url")
            .arg(&self.management_url);
        for (user, password) in &self.users {
            child.env(variable(user), password);
        }
        finish(child.spawn().expect("mesh starts")).await
    }

    pub(crate) fn password(&self, user: &str) -> &str {
        &self
            .users
            .iter()
            .find(|(u, _)| u == user)
            .expect("a planned user")
            .1
    }

    /// The management API as the operator's user.
    pub(crate) fn operator_api(&self) -> ManagementClient {
        let operator = format!("{}operator", self.prefix);
        ManagementClient::new(&ManagementOptions::new(format!(
            "http://{}:{}@127.0.0.1:{}",
            operator,
            self.password(&operator),
            self.node.management_port().expect("management enabled")
        )))
        .expect("a management client")
    }

    /// Transport options connecting as `user` (without the prefix).
    pub(crate) fn options(&self, user: &str) -> AmqpOptions {
        let user = format!("{}{user}", self.prefix);
        let url = format!(
            "amqp://{}:{}@127.0.0.1:{}/%2F",
            user,
            self.password(&user),
            self.node.port()
        );
        let options: AmqpOptions = url.parse().expect("a valid URL");
        options.connect_timeout(Duration::from_secs(10))
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The lines of `output` naming each foreign binding the test made.
fn assert_names_foreign(output: &Output, foreign: &[&str]) {
    let text = stdout(output);
    for wanted in foreign {
        assert!(
            text.lines()
                .any(|l| l.contains("foreign binding") && l.contains(wanted)),
            "no line names {wanted}: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_bindings_and_limits_are_drift_and_apply_fixes_them() {
    let setup = Setup::start(
        "drift",
        "max_connections = 2\nmax_channels = 16\nmax_queues = 100\n",
        &[
            ("umami", r#"["module.umami.#"]"#),
            ("billing", r#"["module.umami.*.created"]"#),
        ],
    )
    .await;
    let umami = format!("{}module.umami", setup.prefix);

    // The operator's own user binds what mesh never binds.
    let api = setup.operator_api();
    api.put_exchange("/", "x.foreign", "topic", true)
        .await
        .unwrap();
    api.bind_exchange("/", "x.foreign", "mesh.events", "#")
        .await
        .unwrap();
    api.bind_exchange(
        "/",
        "mesh.replies",
        "mesh.events",
        "module.billing.invoice.paid",
    )
    .await
    .unwrap();
    api.put_queue("/", "foreign-queue", true, &serde_json::Map::new())
        .await
        .unwrap();
    api.bind("/", "mesh.events", "foreign-queue", "module.billing.#")
        .await
        .unwrap();
    let foreign = [
        "x.foreign -> exchange mesh.events",
        "mesh.replies -> exchange mesh.events on `module.billing.invoice.paid`",
        "mesh.events -> queue foreign-queue on `module.billing.#`",
    ];

    for command in ["topology", "access"] {
        let output = setup.mesh(command, &["plan", "--check"]).await;
        assert_code(&output, 9);
        assert_names_foreign(&output, &foreign);
    }
    let output = setup.mesh("topology", &["apply", "--dry-run"]).await;
    assert_code(&output, 0);
    assert_names_foreign(&output, &foreign);
    assert!(
        stdout(&output).contains("would unbind"),
        "{}",
        stdout(&output)
    );
    let output = setup.mesh("access", &["apply", "--dry-run"]).await;
    assert_code(&output, 0);
    assert_names_foreign(&output, &foreign);
    // A dry run removes nothing.
    let output = setup.mesh("access", &["plan", "--check"]).await;
    assert_code(&output, 9);

    let output = setup.mesh("topology", &["apply"]).await;
    assert_code(&output, 0);
    assert_names_foreign(&output, &foreign);
    for command in ["topology", "access"] {
        let output = setup.mesh(command, &["plan", "--check"]).await;
        assert_code(&output, 0);
    }
    let left = api.bindings("/").await.unwrap();
    assert!(
        !left.iter().any(|b| !b.source.is_empty()
            && (b.destination == "foreign-queue" || b.destination_type == "exchange")),
        "{left:#?}"
    );

    // `access apply` removes them too.
    api.bind_exchange(
        "/",
        "mesh.replies",
        "mesh.events",
        "module.billing.invoice.paid",
    )
    .await
    .unwrap();
    let output = setup.mesh("access", &["apply"]).await;
    assert_code(&output, 0);
    assert_names_foreign(&output, &foreign[1..2]);
    let output = setup.mesh("topology", &["plan", "--check"]).await;
    assert_code(&output, 0);

    // umami may hold two connections (one transport), never a third.
    let options = setup.options("module.umami");
    let first = mesh::amqp::connect(options.clone())
        .await
        .expect("two connections are within umami's limit");
    let refused = tokio::time::timeout(WAIT, mesh::amqp::connect(options.clone()))
        .await
        .expect("the refusal comes in time");
    let error = refused.expect_err("a third connection is refused");
    assert!(format!("{error:#}").contains("access refused"), "{error:#}");
    // The same credentials connect once the first transport is gone: the limit refused it.
    first.close().await;
    let again = mesh::amqp::connect(options)
        .await
        .expect("within the limit again");
    again.close().await;

    // A limit changed by hand is drift, and apply restores it.
    setup
        .node
        .rabbitmqctl(&["set_user_limits", &umami, r#"{"max-connections": 5}"#])
        .await
        .unwrap();
    let output = setup.mesh("access", &["plan", "--check"]).await;
    assert_code(&output, 9);
    assert!(
        stdout(&output).contains(&format!("user {umami} has max-connections 5, wants 2")),
        "{}",
        stdout(&output)
    );
    let output = setup.mesh("access", &["apply"]).await;
    assert_code(&output, 0);
    let output = setup.mesh("access", &["plan", "--check"]).await;
    assert_code(&output, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_declares_no_exchange_and_starts_on_the_queues_topology_apply_declared() {
    use amqprs::channel::{ExchangeBindArguments, ExchangeDeclareArguments};
    use amqprs::connection::{Connection, OpenConnectionArguments};
    use mesh::raw::{QueueSpec, SubscriptionSpec, TopicPattern};

    // `access apply` and `topology apply` ran, and `access plan --check` and `topology plan
    // --check` passed (exit 0) on the plan as it is by default: no `configure` on durable
    // queues for a module.
    let setup = Setup::start("narrow", "", &[("umami", r#"["module.umami.#"]"#)]).await;
    let umami = format!("{}module.umami", setup.prefix);
    let api = setup.operator_api();
    let permissions = api.permissions("/").await.unwrap();
    let configure = permissions
        .iter()
        .find(|p| p.user == umami)
        .map(|p| p.configure.as_str());
    assert_eq!(configure, Some(r"^(?:amq\.gen-.+)$"), "{permissions:#?}");

    // umami declares no exchange, named like its queue or not, and so binds none of its own
    // into `mesh.events`: the broker refuses each (and closes the channel).
    let args = OpenConnectionArguments::new(
        "127.0.0.1",
        setup.node.port(),
        &umami,
        setup.password(&umami),
    );
    let raw = Connection::open(&args).await.expect("a raw connection");
    let queue = format!("{NODE}.umami.events");
    for name in ["x.umami.events", queue.as_str(), "serve.umami.echo"] {
        let channel = raw.open_channel(None).await.unwrap();
        let declared = channel
            .exchange_declare(ExchangeDeclareArguments::new(name, "topic"))
            .await;
        assert!(declared.is_err(), "umami declared exchange {name}");
        let channel = raw.open_channel(None).await.unwrap();
        let bound = channel
            .exchange_bind(ExchangeBindArguments::new(
                "mesh.events",
                name,
                "module.billing.invoice.paid",
            ))
            .await;
        assert!(bound.is_err(), "umami bound {name} into mesh.events");
    }
    let exchanges = api.exchanges("/").await.unwrap();
    assert!(
        !exchanges.iter().any(|e| e.name.contains("umami")),
        "{exchanges:#?}"
    );
    let _ = raw.close().await;

    // Its runtime starts on the queue `topology apply` declared (its own declaration refused,
    // a passive one finds it) and consumes from it.
    let transport = mesh::amqp::connect(setup.options("module.umami"))
        .await
        .expect("umami connects");
    let mut subscription = transport
        .subscribe(SubscriptionSpec {
            queue: QueueSpec::Durable { name: queue },
            patterns: vec![TopicPattern::parse("module.umami.#").unwrap()],
            prefetch: 1,
            retry_delays: Vec::new(),
        })
        .await
        .expect("umami starts on the queue topology apply declared");
    let mut message = mesh::raw::WireMessage::new("module.umami.thing", "{}");
    message.properties.persistent = true;
    transport
        .publish(message, mesh::raw::PublishOptions::default())
        .await
        .expect("accepted")
        .await
        .expect("confirmed");
    let delivery = tokio::time::timeout(WAIT, subscription.next())
        .await
        .expect("a delivery in time")
        .expect("the subscription is open");
    assert_eq!(delivery.message.routing_key, "module.umami.thing");
    delivery.ack().await.expect("acked");
    drop(subscription);
    transport.close().await;

    // And the plan still agrees with the broker.
    for command in ["access", "topology"] {
        let output = setup.mesh(command, &["plan", "--check"]).await;
        assert_code(&output, 0);
    }
}
