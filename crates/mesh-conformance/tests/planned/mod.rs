//! A private RabbitMQ node with the access plan applied, for the tests of broker-enforced
//! identity (users are global to a broker, so each test starts its own node): the operator
//! (the node's `guest`) declares mesh's exchanges as `mesh topology apply` would, and every
//! planned user gets a fresh password, except one logging in by certificate, which is
//! created without one.

// Each test binary uses part of it.
#![allow(dead_code)]

use std::collections::HashMap;
use std::time::Duration;

use mesh::amqp::access::{self, AccessSpec, Grant, Password, Passwords};
use mesh::amqp::management::{ManagementClient, ManagementOptions};
use mesh_amqp::{AmqpOptions, AmqpTransport};
use mesh_testkit::{eventually, NodeOptions, PrivateNode};

/// How long the node's management API may take to answer after boot.
const WAIT: Duration = Duration::from_secs(30);

/// A private node with the plan of a spec applied.
pub(crate) struct PlannedNode {
    /// The node.
    pub(crate) node: PrivateNode,
    /// The management client, as the node's administrator.
    pub(crate) client: ManagementClient,
    /// The plan's grants.
    pub(crate) grants: Vec<Grant>,
    passwords: HashMap<String, String>,
}

impl PlannedNode {
    /// Starts a node with `options` (management is turned on: the plan is applied through
    /// it) and applies the plan of `spec` on vhost `/`.
    pub(crate) async fn start(options: NodeOptions, spec: &AccessSpec) -> PlannedNode {
        let node = PrivateNode::start(options.management(true))
            .await
            .expect("a private RabbitMQ node (rabbitmq-server must be installed)");
        // The operator declares the exchanges; module users may not.
        let admin = mesh::amqp::connect(node.url().parse().expect("the node's URL"))
            .await
            .expect("the admin connects");
        admin.close().await;
        let management = format!(
            "http://127.0.0.1:{}",
            node.management_port().expect("management enabled")
        );
        let client = ManagementClient::new(
            &ManagementOptions::new(management).credentials("guest", "guest"),
        )
        .expect("a management client");
        let grants = access::grants(spec);
        let passwords: HashMap<String, String> = grants
            .iter()
            .filter(|g| !g.certificate)
            .map(|g| (g.user.clone(), uuid::Uuid::new_v4().simple().to_string()))
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
            .expect("the access plan is applied");
        PlannedNode {
            node,
            client,
            grants,
            passwords,
        }
    }

    /// The password of a planned user logging in by password.
    pub(crate) fn password(&self, user: &str) -> String {
        self.passwords
            .get(user)
            .unwrap_or_else(|| panic!("{user} is a planned user with a password"))
            .clone()
    }

    /// Options for `user` with its password on the plain listener; connections named
    /// `<name>.<link>`.
    pub(crate) fn options(&self, user: &str, name: &str) -> AmqpOptions {
        let options: AmqpOptions = self.node.url().parse().expect("the node's URL");
        options
            .credentials(user, self.password(user))
            .connection_name(name)
    }

    /// A transport connected with `options`.
    pub(crate) async fn connect(&self, options: AmqpOptions) -> AmqpTransport {
        let shown = options.to_string();
        mesh::amqp::connect(options)
            .await
            .unwrap_or_else(|e| panic!("{shown} connects: {e:#}"))
    }

    /// The user of each connection whose client-provided name contains `name`.
    pub(crate) async fn connection_users(&self, name: &str) -> Vec<String> {
        let listed = self
            .node
            .rabbitmqctl(&["list_connections", "client_properties", "user", "-q"])
            .await
            .expect("rabbitmqctl lists the connections");
        listed
            .lines()
            .filter(|line| line.contains(name))
            .filter_map(|line| line.split_whitespace().last().map(str::to_owned))
            .collect()
    }
}
