//! Connecting the SDK's tests to their vhost on the shared broker.

use std::sync::Arc;
use std::time::Duration;

use mesh::amqp::AmqpOptions;
use mesh::raw::Transport;
use mesh_testkit::TestVhost;

/// Every wait in these tests is bounded by this.
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// A transport on `vhost` whose connections are named `<name>.publish` / `<name>.consume`.
pub(crate) async fn transport(vhost: &TestVhost, name: &str) -> Arc<dyn Transport> {
    let options: AmqpOptions = vhost.url().parse().expect("the vhost's URL parses");
    let transport = mesh::amqp::connect(options.connection_name(name))
        .await
        .expect("connects to the test vhost");
    Arc::new(transport)
}
