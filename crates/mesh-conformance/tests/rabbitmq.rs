//! The conformance suite on RabbitMQ: the same scenarios as on the memory transport, each in
//! its own vhost on the shared broker (127.0.0.1:5672, or `MESH_TEST_AMQP_URL`), each module
//! connecting as its own user with exactly the permissions the access plan gives it. Under
//! the plan a module's `configure` covers server-named queues only: the operator declares
//! its durable queues (consumer, retry and serve queues), as `mesh topology apply` does from
//! a spec listing each module's `retry` steps and `serves`, and the module's runtime, refused
//! its own declaration, finds them passively. Each scenario picks its own retry steps, so the
//! harness plays the operator just before a module first subscribes or serves
//! ([`Declared`]).

use std::collections::HashMap;
use std::sync::Arc;

use std::time::Duration;

use futures::future::BoxFuture;
use mesh::amqp::access::{self, AccessSpec, Password, Passwords};
use mesh::amqp::management::ManagementClient;
use mesh_amqp::AmqpOptions;
use mesh_conformance::{Harness, Role, SUITE_MODULES, SUITE_NODE};
use mesh_core::naming;
use mesh_core::{
    Confirm, Health, Name, PublishOptions, QueueSpec, ServeSpec, Subscription, SubscriptionSpec,
    ToolKey, TopicPattern, Transport, TransportError, TransportStats, WireMessage,
};
use mesh_testkit::TestVhost;

/// A vhost of its own, with the access plan of the suite's spec applied: every transport
/// connects as the user of its role, with exactly the planned permissions (never `.*`, but
/// the operator's).
struct RabbitHarness {
    vhost: TestVhost,
    /// Every planned user's password, by user.
    passwords: HashMap<String, String>,
    prefix: String,
    /// The management API as the broker's administrator.
    management: ManagementClient,
}

impl RabbitHarness {
    async fn new() -> RabbitHarness {
        let mut vhost = TestVhost::create("conformance")
            .await
            .expect("a RabbitMQ broker for the conformance suite");
        let admin: AmqpOptions = vhost.url().parse().expect("the vhost's URL parses");
        // Users are global to a broker: this vhost's name keeps them apart.
        let prefix = format!("{}/", vhost.name());
        let mut spec = AccessSpec::new(Name::parse(SUITE_NODE).expect("a node name"))
            .user_prefix(prefix.clone())
            .audit_logger(true);
        for (module, patterns) in SUITE_MODULES {
            spec = spec.module(
                Name::parse(module).expect("a module name"),
                patterns
                    .iter()
                    .map(|p| TopicPattern::parse(p).expect("a pattern")),
            );
        }
        let grants = access::grants(&spec);
        let passwords: HashMap<String, String> = grants
            .iter()
            .map(|g| (g.user.clone(), uuid::Uuid::new_v4().simple().to_string()))
            .collect();
        let mut planned = Passwords::new();
        for (user, password) in &passwords {
            vhost.own_user(user.clone());
            planned.insert(user.clone(), Password::new(password.clone()));
        }
        let management = ManagementClient::new(
            &mesh::amqp::management_options(&admin).expect("a management URL for the broker"),
        )
        .expect("a management client");
        let broker = access::read(&management, vhost.name())
            .await
            .expect("the management API answers");
        let plan = access::plan(&grants, &broker, &planned, &prefix);
        access::apply(&management, vhost.name(), &grants, &plan, &planned)
            .await
            .expect("the suite's access plan is applied");
        // The operator's part: mesh's exchanges exist before any module connects.
        mesh::amqp::connect(admin.clone())
            .await
            .expect("the admin connects")
            .close()
            .await;
        RabbitHarness {
            vhost,
            passwords,
            prefix,
            management,
        }
    }

    /// Options connecting to the vhost as `user`, with its planned password.
    fn options(&self, user: &str) -> AmqpOptions {
        let password = self
            .passwords
            .get(user)
            .unwrap_or_else(|| panic!("`{user}` is not a user of the suite's plan"));
        self.vhost
            .url_as(user, password)
            .parse()
            .expect("the vhost's URL parses")
    }

    fn user(&self, role: Role<'_>) -> String {
        match role {
            Role::Module(module) => naming::owner_user(
                &self.prefix,
                mesh_core::Origin::Module,
                &Name::parse(module).expect("a module name"),
            ),
            Role::AuditLogger => {
                naming::audit_user(&self.prefix, &Name::parse(SUITE_NODE).expect("a node"))
            }
            Role::Operator => naming::operator_user(&self.prefix),
        }
    }
}

impl Harness for RabbitHarness {
    fn transport(&self, role: Role<'_>) -> BoxFuture<'_, Arc<dyn Transport>> {
        let user = self.user(role);
        // The audit logger declares its own queues; the operator may declare any.
        let module = matches!(role, Role::Module(_));
        Box::pin(async move {
            let transport = mesh::amqp::connect(self.options(&user))
                .await
                .unwrap_or_else(|e| panic!("`{user}` connects to the test vhost: {e}"));
            let transport = Arc::new(transport) as Arc<dyn Transport>;
            if !module {
                return transport;
            }
            Arc::new(Declared {
                module: transport,
                operator: self.options(&self.user(Role::Operator)),
                management: self.management.clone(),
                vhost: self.vhost.name().to_owned(),
            }) as Arc<dyn Transport>
        })
    }

    fn queues(&self) -> BoxFuture<'_, Vec<String>> {
        Box::pin(async move {
            self.vhost
                .list_queues()
                .await
                .expect("queues listed")
                .into_iter()
                .map(|q| q.name)
                .collect()
        })
    }

    fn messages<'a>(&'a self, queue: &'a str) -> BoxFuture<'a, Option<u64>> {
        Box::pin(async move {
            self.vhost
                .list_queues()
                .await
                .expect("queues listed")
                .into_iter()
                .find(|q| q.name == queue)
                .map(|q| q.messages)
        })
    }
}

/// A module's transport under the plan: before the module subscribes to a durable queue or
/// serves a tool, the operator declares that queue (and its retry queues) as `mesh topology
/// apply` would, unless it is there already; everything else is the module's own, on its
/// own user.
#[derive(Debug)]
struct Declared {
    module: Arc<dyn Transport>,
    /// The operator's user on the vhost.
    operator: AmqpOptions,
    management: ManagementClient,
    vhost: String,
}

impl Declared {
    /// Whether every queue in `names` exists.
    async fn exist(&self, names: &[String]) -> bool {
        let queues = self
            .management
            .queues(&self.vhost)
            .await
            .expect("the management API lists the queues");
        names.iter().all(|n| queues.iter().any(|q| &q.name == n))
    }

    /// The operator declares the queues of `spec` or `serve` unless they exist.
    async fn declare(&self, spec: Option<&SubscriptionSpec>, serve: Option<&ServeSpec>) {
        let names: Vec<String> = match (spec, serve) {
            (
                Some(SubscriptionSpec {
                    queue: QueueSpec::Durable { name },
                    retry_delays,
                    ..
                }),
                _,
            ) => std::iter::once(name.clone())
                .chain(retry_delays.iter().map(|d| naming::retry_queue(name, *d)))
                .collect(),
            (_, Some(serve)) => vec![naming::serve_queue(&serve.tool)],
            // Server-named queues are the module's own to declare.
            _ => return,
        };
        if self.exist(&names).await {
            return;
        }
        let declared = mesh_testkit::planned::declare_as(
            self.operator.clone(),
            spec.into_iter().cloned().collect(),
            serve.into_iter().cloned().collect(),
        )
        .await;
        declared.unwrap_or_else(|e| panic!("the operator declares {names:?}: {e:#}"));
    }
}

impl Transport for Declared {
    fn publish(
        &self,
        message: WireMessage,
        options: PublishOptions,
    ) -> BoxFuture<'_, Result<Confirm, TransportError>> {
        self.module.publish(message, options)
    }

    fn publish_event(
        &self,
        envelope: mesh_core::Envelope,
        options: PublishOptions,
    ) -> BoxFuture<'_, Result<Confirm, TransportError>> {
        self.module.publish_event(envelope, options)
    }

    fn subscribe(
        &self,
        spec: SubscriptionSpec,
    ) -> BoxFuture<'_, Result<Subscription, TransportError>> {
        Box::pin(async move {
            self.declare(Some(&spec), None).await;
            self.module.subscribe(spec).await
        })
    }

    fn call(
        &self,
        tool: &ToolKey,
        request: WireMessage,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<WireMessage, TransportError>> {
        self.module.call(tool, request, timeout)
    }

    fn serve(&self, spec: ServeSpec) -> BoxFuture<'_, Result<Subscription, TransportError>> {
        Box::pin(async move {
            self.declare(None, Some(&spec)).await;
            self.module.serve(spec).await
        })
    }

    fn health(&self) -> Health {
        self.module.health()
    }

    fn stats(&self) -> TransportStats {
        self.module.stats()
    }

    fn flush(&self) -> BoxFuture<'_, ()> {
        self.module.flush()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        self.module.close()
    }
}

mesh_conformance::suite!(RabbitHarness::new());
