//! The conformance suite on RabbitMQ: the same scenarios as on the memory transport, each in
//! its own vhost on the shared broker (127.0.0.1:5672, or `MESH_TEST_AMQP_URL`), each module
//! connecting as its own user with exactly the permissions the access plan gives it.

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use mesh::amqp::access::{self, AccessSpec, Password, Passwords};
use mesh::amqp::management::ManagementClient;
use mesh_amqp::AmqpOptions;
use mesh_conformance::{Harness, Role, SUITE_MODULES, SUITE_NODE};
use mesh_core::naming;
use mesh_core::{Name, TopicPattern, Transport};
use mesh_testkit::TestVhost;

/// A vhost of its own, with the access plan of the suite's spec applied: every transport
/// connects as the user of its role, with exactly the planned permissions (never `.*`, but
/// the operator's).
struct RabbitHarness {
    vhost: TestVhost,
    /// Every planned user's password, by user.
    passwords: HashMap<String, String>,
    prefix: String,
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
            .audit_logger(true)
            // The scenarios' modules declare their own queues (each scenario its own retry
            // steps): the plan's narrowed default, with the operator declaring them, is
            // side_doors.rs's.
            .runtime_declares_queues(true);
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
        }
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
        Box::pin(async move {
            let password = self
                .passwords
                .get(&user)
                .unwrap_or_else(|| panic!("`{user}` is not a user of the suite's plan"));
            let options: AmqpOptions = self
                .vhost
                .url_as(&user, password)
                .parse()
                .expect("the vhost's URL parses");
            let transport = mesh::amqp::connect(options)
                .await
                .unwrap_or_else(|e| panic!("`{user}` connects to the test vhost: {e}"));
            Arc::new(transport) as Arc<dyn Transport>
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

mesh_conformance::suite!(RabbitHarness::new());
