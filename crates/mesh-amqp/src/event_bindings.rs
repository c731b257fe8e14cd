//! [`EventBindings`]: where the transport learns the bindings a durable queue has on
//! `mesh.events`, which AMQP cannot tell.

use std::error::Error as StdError;
use std::fmt;

use mesh_core::{BoxError, BoxFuture};

/// Lists the bindings a queue has on `mesh.events`, for
/// [`AmqpTransport::subscribe`](crate::AmqpTransport::subscribe) to remove those a durable
/// queue no longer asks for (bindings an earlier deployment or an operator made).
///
/// AMQP cannot list bindings; RabbitMQ's management HTTP API can. This crate speaks no HTTP:
/// the SDK's `amqp` feature implements this trait with the management client of
/// `meshbus-admin` and connects the transport with it (`mesh::amqp::connect`). Given none
/// ([`AmqpTransport::connect`](crate::AmqpTransport::connect)), only the bindings the
/// transport recorded itself are removed.
pub trait EventBindings: Send + Sync + fmt::Debug {
    /// The routing keys of the bindings of `queue` (in `vhost`) on `mesh.events` that mesh
    /// could have made: to the queue, without arguments. An error is logged as a warning,
    /// and only the bindings the transport recorded are removed.
    fn list<'a>(
        &'a self,
        vhost: &'a str,
        queue: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, BoxError>>;

    /// Why this lister is never asked, if so: options its client refused (a bad URL,
    /// credentials that would go in clear). The transport then warns on every durable
    /// subscribe that only the bindings it recorded can be removed. `None` by default.
    fn unusable(&self) -> Option<&(dyn StdError + Send + Sync + 'static)> {
        None
    }
}
