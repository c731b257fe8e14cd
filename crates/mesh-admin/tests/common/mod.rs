//! Helpers shared by the integration tests: a vhost of the test's own on the shared broker,
//! a transport connected to it the way the SDK connects one (with the management API), and
//! waits bounded by timeouts.

#![allow(dead_code)]

use std::time::Duration;

use mesh_amqp::{AmqpOptions, AmqpTransport};
use mesh_testkit::TestVhost;

/// How long any single wait of a test may take.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// A vhost of the test's own (deleted on drop); fails with a hint when no broker is
/// reachable.
pub(crate) async fn vhost(prefix: &str) -> TestVhost {
    TestVhost::create(prefix)
        .await
        .expect("a RabbitMQ broker on 127.0.0.1:5672 (start one with `rabbitmq-server -detached`)")
}

/// The options for `vhost`, with connections named `<name>.publish` / `<name>.consume`.
pub(crate) fn options(vhost: &TestVhost, name: &str) -> AmqpOptions {
    vhost
        .url()
        .parse::<AmqpOptions>()
        .expect("the test vhost's URL parses")
        .connection_name(name)
}

/// A transport on `vhost`, connected as the SDK connects one: with the management API its
/// options derive (loopback here, so contacted).
pub(crate) async fn connect(vhost: &TestVhost, name: &str) -> AmqpTransport {
    mesh::amqp::connect(options(vhost, name))
        .await
        .expect("connecting to the test vhost")
}
