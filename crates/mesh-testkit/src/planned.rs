//! A private RabbitMQ node with mesh's access plan applied (feature `sdk`): users are global
//! to a broker, so tests of broker-enforced identity run on a node of their own. The node's
//! `guest` applies the plan through the management API and declares mesh's exchanges (as
//! `mesh topology apply` would: no planned user but the operator may); every planned user
//! gets a password generated for the run (but a user logging in by certificate, created
//! without one). Under the plan a module declares only server-named queues: its durable
//! queues are the operator's to declare first ([`PlannedNode::declare_consumer`],
//! [`PlannedNode::declare_tool`], [`PlannedNode::declare`]), as `mesh topology apply` does
//! with a spec listing each module's `retry` steps and `serves`.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use mesh::amqp::access::AccessSpec;
//! use mesh::raw::Name;
//! use mesh_testkit::planned::PlannedNode;
//! let spec = AccessSpec::new(Name::parse("n1")?).module(Name::parse("umami")?, []);
//! let node = PlannedNode::start(&spec).await?;
//! let umami = node.transport("module.umami").await?;
//! # drop(umami);
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use mesh::amqp::access::{self, AccessSpec, Password, Passwords};
use mesh::amqp::management::{ManagementClient, ManagementOptions};
use mesh::amqp::{AmqpOptions, AmqpTransport};
use mesh::raw::{QueueSpec, RetryPolicy, ServeSpec, SubscriptionSpec, ToolKey, TopicPattern};

use crate::{eventually, NodeOptions, PrivateNode};

/// How long the management API may take to answer after the node started.
const WAIT: Duration = Duration::from_secs(60);

/// A private node (with management) under an applied access plan.
pub struct PlannedNode {
    /// The node; its `guest` is the administrator.
    pub node: PrivateNode,
    passwords: HashMap<String, String>,
    client: ManagementClient,
}

impl std::fmt::Debug for PlannedNode {
    /// Never a password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlannedNode")
            .field("port", &self.node.port())
            .field("users", &self.passwords.len())
            .finish_non_exhaustive()
    }
}

impl PlannedNode {
    /// Starts a node, applies the plan of `spec` with a fresh password per user, and
    /// declares mesh's exchanges as the administrator.
    pub async fn start(spec: &AccessSpec) -> anyhow::Result<PlannedNode> {
        PlannedNode::start_with(NodeOptions::default(), spec).await
    }

    /// Like [`PlannedNode::start`] on a node started with `options` (e.g. a TLS listener and
    /// certificate logins; management is turned on: the plan is applied through it). Users
    /// are prefixed as `spec` says.
    pub async fn start_with(
        options: NodeOptions,
        spec: &AccessSpec,
    ) -> anyhow::Result<PlannedNode> {
        let node = PrivateNode::start(options.management(true))
            .await
            .context("a private RabbitMQ node (rabbitmq-server must be installed)")?;
        let admin = mesh::amqp::connect(node.url().parse()?).await?;
        admin.close().await;
        let port = node
            .management_port()
            .context("the node's management port")?;
        let client = ManagementClient::new(
            &ManagementOptions::new(format!("http://127.0.0.1:{port}"))
                .credentials("guest", "guest"),
        )?;
        let grants = access::grants(spec);
        let passwords: HashMap<String, String> = grants
            .iter()
            .filter(|g| !g.certificate)
            .map(|g| {
                let secret: String = (0..16)
                    .map(|_| format!("{:02x}", rand::Rng::gen::<u8>(&mut rand::thread_rng())))
                    .collect();
                (g.user.clone(), secret)
            })
            .collect();
        let mut planned = Passwords::new();
        for (user, password) in &passwords {
            planned.insert(user.clone(), Password::new(password.clone()));
        }
        let broker = eventually(WAIT, "the management API answers", || {
            let client = client.clone();
            async move { access::read(&client, "/").await.ok() }
        })
        .await;
        let plan = access::plan(&grants, &broker, &planned, spec.get_user_prefix());
        access::apply(&client, "/", &grants, &plan, &planned)
            .await
            .context("applying the access plan")?;
        Ok(PlannedNode {
            node,
            passwords,
            client,
        })
    }

    /// A planned user's password (panics for a user the plan does not have, or one logging
    /// in by certificate).
    pub fn password(&self, user: &str) -> &str {
        self.passwords
            .get(user)
            .map(String::as_str)
            .unwrap_or_else(|| panic!("`{user}` is not a planned user"))
    }

    /// `amqp://<user>:<password>@127.0.0.1:<port>/%2F` for a planned user.
    pub fn url(&self, user: &str) -> String {
        let encode = |text: &str| {
            percent_encoding::utf8_percent_encode(text, percent_encoding::NON_ALPHANUMERIC)
                .to_string()
        };
        format!(
            "amqp://{}:{}@127.0.0.1:{}/%2F",
            encode(user),
            encode(self.password(user)),
            self.node.port()
        )
    }

    /// A transport connected as a planned user.
    pub async fn transport(&self, user: &str) -> anyhow::Result<Arc<AmqpTransport>> {
        let options: AmqpOptions = self.node.url().parse()?;
        let options = options
            .credentials(user, self.password(user))
            .connection_name(format!("planned-{user}"));
        Ok(Arc::new(mesh::amqp::connect(options).await?))
    }

    /// Declares, as the operator, the durable queue of `module` on node `node` (its retry
    /// queues for `retry`'s steps, its bindings on `patterns`), as `mesh topology apply` does:
    /// a module's user may not. `retry` is the module's bus's policy (`RetryPolicy::default()`
    /// unless it sets one).
    pub async fn declare_consumer(
        &self,
        node: &str,
        module: &str,
        patterns: &[&str],
        retry: &RetryPolicy,
    ) -> anyhow::Result<()> {
        let patterns = patterns
            .iter()
            .map(|p| TopicPattern::parse(p))
            .collect::<Result<Vec<_>, _>>()?;
        self.declare(SubscriptionSpec {
            queue: QueueSpec::Durable {
                name: format!("{node}.{module}.events"),
            },
            patterns,
            prefetch: 1,
            retry_delays: retry.delays().to_vec(),
        })
        .await
    }

    /// Declares, as the operator, the durable queue of `spec` (its retry queues, its
    /// bindings) exactly as the runtime would, e.g. a module's schedule queue
    /// (`scheduled.<module>.events`, its ladder as `retry_delays`).
    pub async fn declare(&self, spec: SubscriptionSpec) -> anyhow::Result<()> {
        declare_as(self.operator_options()?, vec![spec], Vec::new()).await
    }

    /// Declares, as the operator, the serve queue of `tool` (`serve.<tool>`, bound on its key
    /// on `mesh.rpc`), as `mesh topology apply` does for a module's `serves`.
    pub async fn declare_tool(&self, tool: &str) -> anyhow::Result<()> {
        let serve = ServeSpec {
            tool: ToolKey::parse(tool)?,
            prefetch: 1,
        };
        declare_as(self.operator_options()?, Vec::new(), vec![serve]).await
    }

    /// Options as the node's administrator, the plan's operator.
    fn operator_options(&self) -> anyhow::Result<AmqpOptions> {
        let options: AmqpOptions = self.node.url().parse()?;
        Ok(options.connection_name("planned-operator"))
    }

    /// The management API as the administrator.
    pub fn management(&self) -> &ManagementClient {
        &self.client
    }
}

/// Declares, connected with `operator` (a user that may: the plan's operator), the durable
/// queues of `subscriptions` (their retry queues and bindings) and the serve queues of
/// `serves`, as `mesh topology apply` declares them for a spec listing each module's `retry`
/// steps and `serves`: through the very code a module's runtime declares them with, each
/// attached and let go of at once (nothing should be routed to them yet). Under the plan a
/// module's user may not declare them; its runtime finds them passively.
pub async fn declare_as(
    operator: AmqpOptions,
    subscriptions: Vec<SubscriptionSpec>,
    serves: Vec<ServeSpec>,
) -> anyhow::Result<()> {
    let transport = mesh::amqp::connect(operator).await?;
    let mut declared = Ok(());
    for spec in subscriptions {
        if declared.is_ok() {
            declared = transport.subscribe(spec).await.map(drop);
        }
    }
    for spec in serves {
        if declared.is_ok() {
            declared = transport.serve(spec).await.map(drop);
        }
    }
    transport.close().await;
    Ok(declared?)
}
