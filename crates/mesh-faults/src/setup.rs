//! Where a scenario runs: a vhost of its own on a private node or cluster, and transports
//! connected to it.

use std::collections::HashMap;
use std::sync::Arc;

use mesh::amqp::access::{self, AccessSpec, Password, Passwords};
use mesh::amqp::{AmqpOptions, AmqpTransport, QueueType};
use mesh::core::naming;
use mesh::core::{Name, Origin, TopicPattern};
use mesh_testkit::shared::percent_encode;
use mesh_testkit::{Cluster, PrivateNode};

/// Private nodes run without the management plugin (it adds seconds to every boot, and the
/// restart scenarios boot a node a dozen times). The transport asks the management API for
/// bindings to remove, and by default looks for it on port 15672 of the broker's host, which
/// on this machine is the *shared* broker's: point it at a port where nothing listens, so it
/// falls back to the bindings it declared itself instead of asking the wrong broker.
const NO_MANAGEMENT: &str = "http://127.0.0.1:1";

/// Creates vhost `name` on `node` and gives `guest` every permission on it.
pub async fn vhost(node: &PrivateNode, name: &str) -> anyhow::Result<String> {
    node.rabbitmqctl(&["add_vhost", name]).await?;
    node.rabbitmqctl(&["set_permissions", "-p", name, "guest", ".*", ".*", ".*"])
        .await?;
    Ok(name.to_owned())
}

/// `amqp://guest:guest@127.0.0.1:<port>/<vhost>` for `node`.
pub fn url(node: &PrivateNode, vhost: &str) -> String {
    format!(
        "amqp://guest:guest@127.0.0.1:{}/{}",
        node.port(),
        percent_encode(vhost)
    )
}

/// Options for a transport named `name` (connections `<name>.publish`, `<name>.consume`) on
/// `vhost` of `node`, declaring queues of type `queue_type`.
pub fn options(node: &PrivateNode, vhost: &str, name: &str, queue_type: QueueType) -> AmqpOptions {
    url(node, vhost)
        .parse::<AmqpOptions>()
        .expect("a private node's URL parses")
        .queue_type(queue_type)
        .connection_name(name)
        .management_url(NO_MANAGEMENT)
}

/// Options for a transport named `name` on `vhost` of `cluster`, given all three nodes with
/// node `order[0]` first (the one it connects to while it is up), on quorum queues.
pub fn cluster_options(cluster: &Cluster, order: &[usize], vhost: &str, name: &str) -> AmqpOptions {
    cluster
        .url_in_order(order, vhost)
        .parse::<AmqpOptions>()
        .expect("a cluster's URL parses")
        .queue_type(QueueType::Quorum)
        .connection_name(name)
        .management_url(NO_MANAGEMENT)
}

/// The node every scenario's modules run on.
pub const NODE: &str = "faults";

/// The scenarios' modules and the patterns each binds: the spec from which [`access`] gives
/// each module its user.
pub const MODULES: &[(&str, &[&str])] = &[
    ("source", &[]),
    ("sink", &["module.source.#"]),
    ("ladder", &["module.source.#"]),
    ("worker", &["module.source.#"]),
];

/// The users of a vhost's access plan ([`access`]).
#[derive(Debug)]
pub struct Access {
    node_port: u16,
    vhost: String,
    prefix: String,
    passwords: HashMap<String, String>,
}

impl Access {
    /// Options like [`options`], connecting as `module`'s user: exactly the permissions
    /// the access plan gives it.
    pub fn options(&self, module: &str, queue_type: QueueType) -> AmqpOptions {
        let user = naming::owner_user(
            &self.prefix,
            Origin::Module,
            &Name::parse(module).expect("a module name"),
        );
        let password = self
            .passwords
            .get(&user)
            .unwrap_or_else(|| panic!("`{module}` is not one of the scenarios' modules"));
        format!(
            "amqp://{}:{}@127.0.0.1:{}/{}",
            percent_encode(&user),
            percent_encode(password),
            self.node_port,
            percent_encode(&self.vhost)
        )
        .parse::<AmqpOptions>()
        .expect("a private node's URL parses")
        .queue_type(queue_type)
        .connection_name(module)
        .management_url(NO_MANAGEMENT)
    }
}

/// Gives [`MODULES`] their users on `vhost` of `node`, with the access plan's permissions
/// (imported as definitions: the private nodes run without the management API), once mesh's
/// exchanges exist (declared here as the operator would). Users are global to a node: they
/// carry the vhost's name as their prefix.
pub async fn access(node: &PrivateNode, vhost: &str) -> anyhow::Result<Access> {
    let prefix = format!("{vhost}/");
    let mut spec = AccessSpec::new(Name::parse(NODE)?).user_prefix(prefix.clone());
    for (module, patterns) in MODULES {
        spec = spec.module(
            Name::parse(module)?,
            patterns
                .iter()
                .map(|p| TopicPattern::parse(p))
                .collect::<Result<Vec<_>, _>>()?,
        );
    }
    let grants = access::grants(&spec);
    let passwords: HashMap<String, String> = grants
        .iter()
        .map(|g| (g.user.clone(), uuid::Uuid::new_v4().simple().to_string()))
        .collect();
    let mut planned = Passwords::new();
    for (user, password) in &passwords {
        planned.insert(user.clone(), Password::new(password.clone()));
    }
    let salt: [u8; 4] = rand::random();
    let definitions = access::definitions(vhost, &grants, &planned, salt);
    node.import_definitions(&definitions.to_string()).await?;
    let admin = connect(options(node, vhost, "operator", QueueType::Quorum)).await;
    admin.close().await;
    Ok(Access {
        node_port: node.port(),
        vhost: vhost.to_owned(),
        prefix,
        passwords,
    })
}

/// Connects a transport.
pub async fn connect(options: AmqpOptions) -> Arc<AmqpTransport> {
    let broker = options.to_string();
    Arc::new(
        AmqpTransport::connect(options)
            .await
            .unwrap_or_else(|e| panic!("connecting to {broker}: {}", crate::chain(&e))),
    )
}

/// Installs a tracing subscriber writing to the test's output when `RUST_LOG` is set (e.g.
/// `RUST_LOG=mesh_amqp=info`); without it the scenarios print only their own figures.
pub fn init_tracing() {
    if std::env::var_os("RUST_LOG").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_test_writer()
            .try_init();
    }
}
