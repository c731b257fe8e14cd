//! Where a scenario runs: a vhost of its own on a private node or cluster, a broker user for
//! each of its modules with exactly the access plan's permissions ([`access()`],
//! [`cluster_access`]), and transports connected as those users. The harness's `guest` only
//! acts as the operator (vhosts, mesh's exchanges, `rabbitmqctl`), never as a module.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;

use mesh::amqp::access::{self, AccessSpec, Password, Passwords};
use mesh::amqp::{AmqpOptions, AmqpTransport, QueueType};
use mesh::raw::naming;
use mesh::raw::{Name, Origin, TopicPattern};
use mesh_testkit::netns::NetnsCluster;
use mesh_testkit::shared::percent_encode;
use mesh_testkit::{Cluster, PrivateNode};

pub use crate::conventions::NO_MANAGEMENT;
use crate::conventions::PASSWORD_ENV;

/// Creates vhost `name` on `node` and gives `guest` every permission on it.
pub async fn vhost(node: &PrivateNode, name: &str) -> anyhow::Result<String> {
    node.rabbitmqctl(&["add_vhost", name]).await?;
    node.rabbitmqctl(&["set_permissions", "-p", name, "guest", ".*", ".*", ".*"])
        .await?;
    Ok(name.to_owned())
}

/// Options for the harness's `guest` (every permission) on `vhost` of `node`: the operator
/// declaring mesh's exchanges before the modules connect, or watching every dead letter (under
/// the plan only the operator and the audit logger read them all), never a module.
pub fn guest_options(node: &PrivateNode, vhost: &str) -> AmqpOptions {
    format!(
        "amqp://guest:guest@127.0.0.1:{}/{}",
        node.port(),
        percent_encode(vhost)
    )
    .parse::<AmqpOptions>()
    .expect("a private node's URL parses")
    .connection_name("operator")
    .management_url(NO_MANAGEMENT)
    .connect_timeout(OPERATOR_CONNECT_TIMEOUT)
}

/// How long the operator's set-up connection may take: it is the first login to a node that
/// has just booted (or restarted after a kill, recovering its queues), which on a loaded
/// machine can take longer than the default 10 s. The modules keep the default: the
/// scenarios measure their reconnects.
const OPERATOR_CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// Like [`guest_options`] on `vhost` of `cluster`, every node given in node order.
pub fn guest_cluster_options(cluster: &Cluster, vhost: &str) -> AmqpOptions {
    cluster
        .url(vhost)
        .parse::<AmqpOptions>()
        .expect("a cluster's URL parses")
        .connection_name("operator")
        .management_url(NO_MANAGEMENT)
        .connect_timeout(OPERATOR_CONNECT_TIMEOUT)
}

/// The node every scenario's modules run on.
pub const NODE: &str = "faults";

/// The scenarios' modules and the patterns each binds: the spec from which [`access()`] and
/// [`cluster_access`] give each module its user. RPC servers are named after their tools'
/// owner (`server` serves `server.answer`): a module's user serves only its own tools. The
/// module `audit-logger` is the node's audit logger (as in [`AccessSpec::module`]): its user
/// is the plan's audit logger's, `<prefix>audit-logger.faults`, and it binds `#`.
pub const MODULES: &[(&str, &[&str])] = &[
    ("source", &[]),
    // a, h, j, k: the consumer.
    ("sink", &["module.source.#"]),
    // f: the retry ladder.
    ("ladder", &["module.source.#"]),
    // e: the consumer process killed mid-handler, and its replacement.
    ("worker", &["module.source.#"]),
    // i: the handler that outlives the consumer timeout.
    ("slow", &["module.source.#"]),
    // n: the backlog's consumer process.
    ("backlog", &["module.source.#"]),
    // l1, l2: the caller of `server.answer`, and its servers.
    ("caller", &[]),
    ("server", &[]),
    // m1: the consumer failing the poison; m2: the process crashing on it, and the
    // module tapping the dead letters.
    ("picky", &["module.source.#"]),
    ("crashy", &["module.source.#"]),
    ("watcher", &[]),
    // o: the audit logger.
    (naming::AUDIT_MODULE, &["#"]),
    // The soak (`crate::soak`): two more emitting modules beside `source`, and the
    // competing consumers of all three (`caller`, `server` and the audit logger above serve
    // it too).
    ("press", &[]),
    ("mint", &[]),
    (
        "crowd",
        &["module.source.#", "module.press.#", "module.mint.#"],
    ),
];

/// How a child process connects as one user of the access plan: a URL naming the user but
/// holding no password, and the password, handed over in [`PASSWORD_ENV`]. `Debug` shows
/// the URL only.
#[derive(Clone)]
pub struct Login {
    url: String,
    password: String,
}

impl Login {
    /// `amqp://<user>@<addresses>/<vhost>`, without the password.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The environment the child needs: [`PASSWORD_ENV`] set to the password.
    pub fn env(&self) -> [(&'static str, &str); 1] {
        [(PASSWORD_ENV, self.password.as_str())]
    }

    /// Options connecting as this user, named `name`.
    fn options(&self, name: &str) -> AmqpOptions {
        self.url
            .parse::<AmqpOptions>()
            .expect("a private node's URL parses")
            .password(self.password.clone())
            .connection_name(name)
            .management_url(NO_MANAGEMENT)
    }
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Login")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

/// The users of a vhost's access plan ([`access()`], [`cluster_access`]). `Debug` shows no
/// password.
pub struct Access {
    /// The node's address, or the cluster's nodes' in node order.
    addrs: Vec<SocketAddr>,
    vhost: String,
    prefix: String,
    passwords: HashMap<String, String>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("addrs", &self.addrs)
            .field("vhost", &self.vhost)
            .field("users", &self.passwords.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Access {
    /// The user of `module` (of [`MODULES`]): `<prefix>module.<module>`, or the audit
    /// logger's for `audit-logger`.
    fn user(&self, module: &str) -> String {
        if module == naming::AUDIT_MODULE {
            naming::audit_user(&self.prefix, &Name::parse(NODE).expect("the node's name"))
        } else {
            naming::owner_user(
                &self.prefix,
                Origin::Module,
                &Name::parse(module).expect("a module name"),
            )
        }
    }

    /// How `module`'s user connects to `addrs` (tried in this order).
    pub fn login_at(&self, addrs: &[SocketAddr], module: &str) -> Login {
        let user = self.user(module);
        let password = self
            .passwords
            .get(&user)
            .unwrap_or_else(|| panic!("`{module}` is not one of the scenarios' modules"))
            .clone();
        let hosts: Vec<String> = addrs.iter().map(SocketAddr::to_string).collect();
        Login {
            url: format!(
                "amqp://{}@{}/{}",
                percent_encode(&user),
                hosts.join(","),
                percent_encode(&self.vhost)
            ),
            password,
        }
    }

    /// How `module`'s user connects to the node (or the cluster's nodes in node order), for
    /// a child process.
    pub fn login(&self, module: &str) -> Login {
        self.login_at(&self.addrs, module)
    }

    /// How `module`'s user connects to `cluster`, node `order[0]` first, for a child
    /// process.
    pub fn cluster_login(&self, cluster: &Cluster, order: &[usize], module: &str) -> Login {
        self.login_at(&in_order(cluster, order), module)
    }

    /// Options for a transport named `module` (connections `<module>.publish`,
    /// `<module>.consume`) on the node (or the cluster's nodes in node order), declaring
    /// queues of type `queue_type`, connecting as `module`'s user: exactly the permissions
    /// the access plan gives it.
    pub fn options(&self, module: &str, queue_type: QueueType) -> AmqpOptions {
        self.login(module).options(module).queue_type(queue_type)
    }

    /// Options like [`Access::options`] connecting to `addrs` (tried in this order; e.g.
    /// relays in front of a cluster's nodes), on quorum queues.
    pub fn options_at(&self, addrs: &[SocketAddr], module: &str) -> AmqpOptions {
        self.login_at(addrs, module)
            .options(module)
            .queue_type(QueueType::Quorum)
    }

    /// Options like [`Access::options`] on `cluster`, given all three nodes with node
    /// `order[0]` first (the one it connects to while it is up), on quorum queues.
    pub fn cluster_options(&self, cluster: &Cluster, order: &[usize], module: &str) -> AmqpOptions {
        self.cluster_login(cluster, order, module)
            .options(module)
            .queue_type(QueueType::Quorum)
    }
}

/// The addresses of `cluster`'s nodes in `order`.
fn in_order(cluster: &Cluster, order: &[usize]) -> Vec<SocketAddr> {
    order.iter().map(|&i| cluster.node(i).addr()).collect()
}

/// Gives [`MODULES`] their users on `vhost` of `node`, with the access plan's permissions
/// (imported as definitions: the private nodes run without the management API), once mesh's
/// exchanges exist (declared here as the operator would). Users are global to a node: they
/// carry the vhost's name as their prefix.
pub async fn access(node: &PrivateNode, vhost: &str) -> anyhow::Result<Access> {
    let (prefix, passwords, definitions) = plan(vhost)?;
    node.import_definitions(&definitions).await?;
    let operator = connect(guest_options(node, vhost)).await;
    operator.close().await;
    Ok(Access {
        addrs: vec![node.addr()],
        vhost: vhost.to_owned(),
        prefix,
        passwords,
    })
}

/// Like [`access()`] on `vhost` of `cluster`: the definitions are imported on one running node
/// (users and permissions are cluster-wide).
pub async fn cluster_access(cluster: &Cluster, vhost: &str) -> anyhow::Result<Access> {
    let (prefix, passwords, definitions) = plan(vhost)?;
    let on = *cluster
        .running()
        .first()
        .ok_or_else(|| anyhow::anyhow!("no node of the cluster is running"))?;
    cluster.node(on).import_definitions(&definitions).await?;
    let operator = connect(guest_cluster_options(cluster, vhost)).await;
    operator.close().await;
    Ok(Access {
        addrs: cluster.addrs(),
        vhost: vhost.to_owned(),
        prefix,
        passwords,
    })
}

/// Like [`cluster_access`] on `vhost` of a network-namespace cluster (`tests/partition.rs`):
/// the definitions are imported through a node that answers, and the addresses are the nodes'
/// client addresses, in node order.
pub async fn netns_access(cluster: &NetnsCluster, vhost: &str) -> anyhow::Result<Access> {
    let (prefix, passwords, definitions) = plan(vhost)?;
    cluster.import_definitions(&definitions).await?;
    let operator = cluster
        .url_in_order(&[0, 1, 2], vhost)
        .parse::<AmqpOptions>()?
        .connection_name("operator")
        .management_url(NO_MANAGEMENT);
    connect(operator).await.close().await;
    Ok(Access {
        addrs: cluster.addrs(),
        vhost: vhost.to_owned(),
        prefix,
        passwords,
    })
}

/// The access plan of [`MODULES`] on `vhost`: the users' prefix, a fresh password for each
/// user, and the definitions that create them with their permissions.
fn plan(vhost: &str) -> anyhow::Result<(String, HashMap<String, String>, String)> {
    let prefix = format!("{vhost}/");
    // The scenarios' modules declare their own queues (each scenario its own retry steps):
    // the plan's narrowed default, with the operator declaring them, is the conformance
    // suite's side_doors test's.
    let mut spec = AccessSpec::new(Name::parse(NODE)?)
        .user_prefix(prefix.clone())
        .runtime_declares_queues(true);
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
    let definitions = access::definitions(vhost, &grants, &planned, salt).to_string();
    Ok((prefix, passwords, definitions))
}

/// Connects a transport.
pub async fn connect(options: AmqpOptions) -> Arc<AmqpTransport> {
    let broker = options.to_string();
    Arc::new(
        mesh::amqp::connect(options)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn access() -> Access {
        Access {
            addrs: vec![
                "127.0.0.1:5001".parse().unwrap(),
                "127.0.0.1:5002".parse().unwrap(),
            ],
            vhost: "v x".to_owned(),
            prefix: "v x/".to_owned(),
            passwords: HashMap::from([
                ("v x/module.sink".to_owned(), "sink-secret".to_owned()),
                (
                    "v x/audit-logger.faults".to_owned(),
                    "audit-secret".to_owned(),
                ),
            ]),
        }
    }

    #[test]
    fn a_login_names_the_modules_user_and_keeps_the_password_out_of_the_url() {
        let access = access();
        let login = access.login("sink");
        assert_eq!(
            login.url(),
            "amqp://v%20x%2Fmodule.sink@127.0.0.1:5001,127.0.0.1:5002/v%20x"
        );
        assert_eq!(login.env(), [(PASSWORD_ENV, "sink-secret")]);
        let reordered = access.login_at(&[access.addrs[1]], "sink");
        assert_eq!(
            reordered.url(),
            "amqp://v%20x%2Fmodule.sink@127.0.0.1:5002/v%20x"
        );
        for shown in [format!("{login:?}"), format!("{access:?}")] {
            assert!(!shown.contains("secret"), "{shown}");
        }
    }

    #[test]
    fn the_audit_logger_connects_as_the_plans_audit_logger_user() {
        let login = access().login(naming::AUDIT_MODULE);
        assert!(
            login
                .url()
                .starts_with("amqp://v%20x%2Faudit-logger.faults@"),
            "{}",
            login.url()
        );
        assert_eq!(login.env(), [(PASSWORD_ENV, "audit-secret")]);
    }

    #[test]
    fn options_connect_as_the_modules_user_with_its_password() {
        let options = access().options("sink", QueueType::Classic);
        assert_eq!(options.get_user(), "v x/module.sink");
        assert_eq!(options.get_password(), "sink-secret");
        assert_eq!(options.get_vhost(), "v x");
        assert_eq!(options.get_addresses().len(), 2);
        assert_eq!(options.get_queue_type(), QueueType::Classic);
    }

    #[test]
    #[should_panic(expected = "`nobody` is not one of the scenarios' modules")]
    fn a_module_without_a_user_is_refused() {
        let _ = access().options("nobody", QueueType::Quorum);
    }

    #[test]
    fn every_scenario_module_is_in_the_plan_with_patterns_that_parse() {
        let (prefix, passwords, _) = plan("v").unwrap();
        let access = Access {
            addrs: vec!["127.0.0.1:5001".parse().unwrap()],
            vhost: "v".to_owned(),
            prefix,
            passwords,
        };
        for (module, _) in MODULES {
            let _ = access.login(module);
        }
    }
}
