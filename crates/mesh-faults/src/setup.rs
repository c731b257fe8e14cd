//! Where a scenario runs: a vhost of its own on a private node or cluster, a broker user for
//! each of its modules with exactly the access plan's permissions ([`access()`],
//! [`cluster_access`]), and transports connected as those users. The harness's `guest` only
//! acts as the operator (vhosts, mesh's exchanges, `rabbitmqctl`, the modules' durable
//! queues), never as a module.
//!
//! Under the plan a module's `configure` covers server-named queues only: the operator
//! declares its durable queues (consumer, retry, serve and schedule queues, [`DURABLE`]), as
//! `mesh topology apply` does from a spec listing each module's `retry` steps and `serves`,
//! and the module's runtime, refused its own declaration, finds them passively. The harness
//! declares them just before the module first connects, the way the module connects (the
//! same addresses in the same order, vhost and queue type), so each queue is placed where
//! the module's own declaration would have placed it: in [`connect`] for a module of the
//! test process, in [`Access::login`] (and its variants) for a child process, whose queues
//! are quorum queues.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mesh::amqp::access::{self, AccessSpec, Password, Passwords};
use mesh::amqp::{AmqpOptions, AmqpTransport, QueueType};
use mesh::raw::naming;
use mesh::raw::{
    Name, Origin, QueueSpec, RetryPolicy, ServeSpec, SubscriptionSpec, ToolKey, TopicPattern,
};
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

/// What the operator declares for the scenarios' modules (beside the consumer queue of each
/// module of [`MODULES`] with patterns, with the retry steps of `RetryPolicy::default()`):
/// the module's other retry steps (as its buses' retry policies have them), the tools it
/// serves, and whether it forwards scheduled events (its schedule queue and ladder). The
/// `retry` and `serves` of a spec for `mesh topology apply`.
pub const DURABLE: &[(&str, &[Duration], &[&str], bool)] = &[
    // f: the retry ladder's policy.
    (
        "ladder",
        &[Duration::from_secs(30), Duration::from_secs(2)],
        &[],
        false,
    ),
    // m1: the poison's retries.
    ("picky", &[Duration::from_millis(200)], &[], false),
    // The soak's consumers (`crate::soak::retry_policy`).
    (
        "crowd",
        &[Duration::from_millis(300), Duration::from_millis(600)],
        &[],
        false,
    ),
    // l1, l2 and the soak: `server.answer`.
    ("server", &[], &["server.answer"], false),
    // The schedule scenario's forwarder.
    ("source", &[], &[], true),
];

/// The durable queues of `module` that the operator declares, as subscriptions and serves
/// (none for the audit logger, which declares its own).
fn durable_queues(module: &str) -> anyhow::Result<(Vec<SubscriptionSpec>, Vec<ServeSpec>)> {
    let (mut subscriptions, mut serves) = (Vec::new(), Vec::new());
    if module == naming::AUDIT_MODULE {
        return Ok((subscriptions, serves));
    }
    let extra = DURABLE.iter().find(|(name, ..)| *name == module);
    let patterns = MODULES
        .iter()
        .find(|(name, _)| *name == module)
        .map(|(_, patterns)| *patterns)
        .unwrap_or_default();
    if !patterns.is_empty() {
        let mut retry_delays = RetryPolicy::default().delays().to_vec();
        for step in extra.map(|(_, steps, ..)| *steps).unwrap_or_default() {
            if !retry_delays.contains(step) {
                retry_delays.push(*step);
            }
        }
        subscriptions.push(SubscriptionSpec {
            queue: QueueSpec::Durable {
                name: naming::consumer_queue(&Name::parse(NODE)?, &Name::parse(module)?),
            },
            patterns: patterns
                .iter()
                .map(|p| TopicPattern::parse(p))
                .collect::<Result<Vec<_>, _>>()?,
            prefetch: 1,
            retry_delays,
        });
    }
    if let Some((_, _, tools, schedules)) = extra {
        for tool in *tools {
            serves.push(ServeSpec {
                tool: ToolKey::parse(tool)?,
                prefetch: 1,
            });
        }
        if *schedules {
            subscriptions.push(SubscriptionSpec {
                queue: QueueSpec::Durable {
                    name: naming::schedule_queue(&Name::parse(module)?),
                },
                patterns: Vec::new(),
                prefetch: 1,
                retry_delays: mesh::schedule::plan::HOPS.to_vec(),
            });
        }
    }
    Ok((subscriptions, serves))
}

/// The modules whose queues the operator declared, each as `<addresses> <vhost> <module>`
/// (the addresses sorted): once per module and vhost, so that its next connection (another
/// bus, a replacement process) finds them without the operator attaching, however briefly, to
/// a queue that may hold events by then.
static DECLARED: Mutex<BTreeSet<String>> = Mutex::new(BTreeSet::new());

/// Declares, as the operator, the durable queues of `module` (its consumer queue, [`DURABLE`]'s
/// retry steps, tools and schedule queue; none for the audit logger), connected
/// like `options` (its addresses in their order, its vhost, its queue type) but as `guest`
/// ([`mesh_testkit::planned::declare_as`]). Once per module, vhost and broker
/// (a second call for them returns at once).
pub async fn declare_durable(module: &str, options: &AmqpOptions) -> anyhow::Result<()> {
    let (subscriptions, serves) = durable_queues(module)?;
    if subscriptions.is_empty() && serves.is_empty() {
        return Ok(());
    }
    let mut addresses: Vec<String> = options
        .get_addresses()
        .iter()
        .map(|a| format!("{}:{}", a.host, a.port))
        .collect();
    addresses.sort();
    let key = format!("{} {} {module}", addresses.join(","), options.get_vhost());
    let declared_already = DECLARED
        .lock()
        .map_err(|_| anyhow::anyhow!("a scenario panicked declaring queues"))?
        .contains(&key);
    if declared_already {
        return Ok(());
    }
    let operator = options
        .clone()
        .credentials("guest", "guest")
        .connection_name("operator-declares")
        .management_url(NO_MANAGEMENT)
        .connect_timeout(OPERATOR_CONNECT_TIMEOUT);
    mesh_testkit::planned::declare_as(operator, subscriptions, serves).await?;
    DECLARED
        .lock()
        .map_err(|_| anyhow::anyhow!("a scenario panicked declaring queues"))?
        .insert(key);
    Ok(())
}

/// The module of [`MODULES`] whose planned user `options` connect as, if any (not for the
/// operator's `guest`).
fn module_of(options: &AmqpOptions) -> Option<String> {
    let user = options.get_user();
    let prefix = format!("{}/", options.get_vhost());
    if let Some(module) = user
        .strip_prefix(prefix.as_str())
        .and_then(|u| u.strip_prefix("module."))
    {
        return Some(module.to_owned());
    }
    let audit = naming::audit_user(&prefix, &Name::parse(NODE).ok()?);
    (user == audit).then(|| naming::AUDIT_MODULE.to_owned())
}

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
    /// Whether a child process's login has the operator declare its module's queues first
    /// (off only in this file's unit tests, which have no broker).
    declares: bool,
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

    /// How `module`'s user connects to `addrs` (tried in this order), for a child process:
    /// the operator first declares the module's durable queues ([`declare_durable`]) as
    /// quorum queues, connected to `addrs` in this order (it blocks the calling thread for
    /// that: call it on a multi-threaded runtime, or outside one).
    pub fn login_at(&self, addrs: &[SocketAddr], module: &str) -> Login {
        self.login_declared(addrs, module, None)
    }

    /// As [`Access::cluster_login`], for a module whose queue has the delivery limit
    /// `delivery_limit` (`x-delivery-limit`, an argument of the queue): the operator declares
    /// it with that limit, as the module's own declaration would have, since the module's
    /// passive declaration takes the queue as it finds it.
    pub fn cluster_login_with_delivery_limit(
        &self,
        cluster: &Cluster,
        order: &[usize],
        module: &str,
        delivery_limit: u32,
    ) -> Login {
        self.login_declared(&in_order(cluster, order), module, Some(delivery_limit))
    }

    fn login_declared(
        &self,
        addrs: &[SocketAddr],
        module: &str,
        delivery_limit: Option<u32>,
    ) -> Login {
        let login = self.login_of(addrs, module);
        if self.declares {
            let mut options = login.options("operator").queue_type(QueueType::Quorum);
            if let Some(limit) = delivery_limit {
                options = options.delivery_limit(limit);
            }
            let declare = declare_durable(module, &options);
            let declared = match tokio::runtime::Handle::try_current() {
                Ok(runtime) => tokio::task::block_in_place(|| runtime.block_on(declare)),
                Err(_) => tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(anyhow::Error::from)
                    .and_then(|runtime| runtime.block_on(declare)),
            };
            if let Err(e) = declared {
                panic!("the operator declares `{module}`'s queues: {e:#}");
            }
        }
        login
    }

    /// How `module`'s user connects to `addrs` (tried in this order).
    fn login_of(&self, addrs: &[SocketAddr], module: &str) -> Login {
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
        self.login_of(&self.addrs, module)
            .options(module)
            .queue_type(queue_type)
    }

    /// Options like [`Access::options`] connecting to `addrs` (tried in this order; e.g.
    /// relays in front of a cluster's nodes), on quorum queues.
    pub fn options_at(&self, addrs: &[SocketAddr], module: &str) -> AmqpOptions {
        self.login_of(addrs, module)
            .options(module)
            .queue_type(QueueType::Quorum)
    }

    /// Options like [`Access::options`] on `cluster`, given all three nodes with node
    /// `order[0]` first (the one it connects to while it is up), on quorum queues.
    pub fn cluster_options(&self, cluster: &Cluster, order: &[usize], module: &str) -> AmqpOptions {
        self.login_of(&in_order(cluster, order), module)
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
        declares: true,
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
        declares: true,
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
        declares: true,
    })
}

/// The access plan of [`MODULES`] on `vhost`: the users' prefix, a fresh password for each
/// user, and the definitions that create them with their permissions.
fn plan(vhost: &str) -> anyhow::Result<(String, HashMap<String, String>, String)> {
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
    let definitions = access::definitions(vhost, &grants, &planned, salt).to_string();
    Ok((prefix, passwords, definitions))
}

/// Connects a transport; for a module of [`MODULES`], the operator first declares its
/// durable queues ([`declare_durable`]) connected the way it connects.
pub async fn connect(options: AmqpOptions) -> Arc<AmqpTransport> {
    let broker = options.to_string();
    if let Some(module) = module_of(&options) {
        if let Err(e) = declare_durable(&module, &options).await {
            panic!("the operator declares `{module}`'s queues on {broker}: {e:#}");
        }
    }
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
            declares: false,
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
            declares: false,
        };
        for (module, _) in MODULES {
            let _ = access.login(module);
        }
    }

    #[test]
    fn the_operator_declares_each_modules_queues_with_its_retry_steps_tools_and_schedule() {
        for (module, ..) in DURABLE {
            assert!(
                MODULES.iter().any(|(m, _)| m == module),
                "`{module}` is not a module of the plan"
            );
        }
        for (module, _) in MODULES {
            durable_queues(module).unwrap();
        }
        let queue = |spec: &SubscriptionSpec| match &spec.queue {
            QueueSpec::Durable { name } => name.clone(),
            other => panic!("{other:?}"),
        };
        // A consumer: its queue with the default steps and its own.
        let (ladder, serves) = durable_queues("ladder").unwrap();
        assert!(serves.is_empty());
        assert_eq!(ladder.len(), 1);
        assert_eq!(queue(&ladder[0]), "faults.ladder.events");
        assert_eq!(ladder[0].patterns.len(), 1);
        for step in RetryPolicy::default()
            .delays()
            .iter()
            .chain(&[Duration::from_secs(30), Duration::from_secs(2)])
        {
            assert!(ladder[0].retry_delays.contains(step), "{step:?}");
        }
        // A server: its tool's queue only; an emitter that schedules: its schedule queue.
        let (server, serves) = durable_queues("server").unwrap();
        assert!(server.is_empty());
        assert_eq!(serves.len(), 1);
        assert_eq!(serves[0].tool.as_str(), "server.answer");
        let (source, serves) = durable_queues("source").unwrap();
        assert!(serves.is_empty());
        assert_eq!(source.len(), 1);
        assert_eq!(queue(&source[0]), "scheduled.source.events");
        assert!(source[0].patterns.is_empty());
        // Nothing for a caller, nor for the audit logger (it declares its own).
        for module in ["caller", naming::AUDIT_MODULE] {
            let (subscriptions, serves) = durable_queues(module).unwrap();
            assert!(subscriptions.is_empty() && serves.is_empty(), "{module}");
        }
    }

    #[test]
    fn a_planned_modules_connection_is_known_by_its_user_and_guests_is_not() {
        let access = access();
        assert_eq!(
            module_of(&access.options("sink", QueueType::Quorum)).as_deref(),
            Some("sink")
        );
        assert_eq!(
            module_of(&access.options(naming::AUDIT_MODULE, QueueType::Quorum)).as_deref(),
            Some(naming::AUDIT_MODULE)
        );
        let guest: AmqpOptions = "amqp://guest:guest@127.0.0.1:5001/v%20x".parse().unwrap();
        assert_eq!(module_of(&guest), None);
    }
}
