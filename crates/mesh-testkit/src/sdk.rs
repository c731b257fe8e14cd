//! Helpers on the mesh SDK itself (feature `sdk`, for the crates whose tests run the SDK
//! against the shared broker: the audit logger's and the command line's): a transport and an
//! emitting bus on a URL, such as a [`TestVhost`](crate::TestVhost)'s.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use mesh_testkit::sdk::emitter;
//! use mesh_testkit::TestVhost;
//! let vhost = TestVhost::create("shop").await?;
//! let bus = emitter(&vhost.url(), "n1", "shop").await?;
//! bus.emit_outgoing(mesh::Outgoing::json("order.placed", &serde_json::json!({"n": 1}))?)
//!     .await?;
//! bus.drain().await?;
//! # Ok(()) }
//! ```

use std::sync::Arc;

use mesh::amqp::{AmqpOptions, AmqpTransport};
use mesh::Bus;

/// A RabbitMQ transport on `url` (`amqp://…/<vhost>`).
pub async fn transport(url: &str) -> anyhow::Result<Arc<AmqpTransport>> {
    let options: AmqpOptions = url.parse()?;
    Ok(Arc::new(mesh::amqp::connect(options).await?))
}

/// A bus of module `module` on node `node`, with no handlers, on a transport of its own on
/// `url`.
pub async fn emitter(url: &str, node: &str, module: &str) -> anyhow::Result<Bus> {
    Ok(Bus::builder()
        .node(node)
        .module(module)
        .start(transport(url).await?)
        .await?)
}
