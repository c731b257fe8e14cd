//! The conformance suite on RabbitMQ: the same scenarios as on the memory transport, each in
//! its own vhost on the shared broker (127.0.0.1:5672, or `MESH_TEST_AMQP_URL`).

use std::sync::Arc;

use futures::future::BoxFuture;
use mesh_amqp::{AmqpOptions, AmqpTransport};
use mesh_conformance::Harness;
use mesh_core::Transport;
use mesh_testkit::TestVhost;

struct RabbitHarness {
    vhost: TestVhost,
    options: AmqpOptions,
}

impl RabbitHarness {
    async fn new() -> RabbitHarness {
        let vhost = TestVhost::create("conformance")
            .await
            .expect("a RabbitMQ broker for the conformance suite");
        let options: AmqpOptions = vhost.url().parse().expect("the vhost's URL parses");
        RabbitHarness { vhost, options }
    }
}

impl Harness for RabbitHarness {
    fn transport(&self) -> BoxFuture<'_, Arc<dyn Transport>> {
        Box::pin(async move {
            let transport = AmqpTransport::connect(self.options.clone())
                .await
                .expect("connects to the test vhost");
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
