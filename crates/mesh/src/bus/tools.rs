//! Tools on a bus: calling one ([`Bus::call`]) and serving one ([`Bus::serve`]); the
//! request/reply itself is `crate::rpc`'s.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::Bus;
use crate::error::{Error, ErrorKind};
use crate::rpc::{self, ServeEntry, Serving, ToolCall};

impl Bus {
    /// Calls tool `tool` with a JSON request and waits up to `timeout` for its reply.
    ///
    /// Fails with [`Error::is_no_server`] at once when no server ever declared the tool,
    /// with [`Error::is_timeout`] when no reply came in time (including when the tool's
    /// queue exists but no server is attached), and with [`ErrorKind::Remote`] when the
    /// tool answered with an error. A request the caller gave up on expires in the queue
    /// and is not executed later.
    ///
    /// The server side is [`BusBuilder::serve`](crate::BusBuilder::serve) (or
    /// [`Bus::serve`] on a running bus); its requests are answered on its consumer's task,
    /// up to the bus's prefetch at once, like events.
    ///
    /// ```
    /// # #[tokio::main] async fn main() -> Result<(), mesh::Error> {
    /// use std::{sync::Arc, time::Duration};
    /// use mesh::{Bus, RemoteError, RequestMeta};
    ///
    /// let broker = mesh::MemoryBroker::new();
    /// let billing = Bus::builder().node("anchor").module("billing")
    ///     .serve("billing.quote", |plan: String, _meta: RequestMeta| async move {
    ///         match plan.as_str() {
    ///             "basic" => Ok(900_u64),
    ///             _ => Err(RemoteError::new("unknown-plan", format!("no plan {plan}"))),
    ///         }
    ///     })
    ///     .start(Arc::new(broker.transport()))
    ///     .await?;
    ///
    /// let umami = Bus::builder().node("anchor").module("umami")
    ///     .start(Arc::new(broker.transport()))
    ///     .await?;
    /// let cents: u64 = umami.call("billing.quote", "basic", Duration::from_secs(5)).await?;
    /// assert_eq!(cents, 900);
    /// let refused = umami.call::<_, u64>("billing.quote", "gold", Duration::from_secs(5)).await;
    /// assert!(matches!(
    ///     refused.unwrap_err().kind(),
    ///     mesh::ErrorKind::Remote { code, .. } if code == "unknown-plan"
    /// ));
    /// billing.drain().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    ///
    /// Dropping it abandons the call: a request already sent may still be executed by a
    /// server (before it expires in the queue), and its reply is discarded. Tools are
    /// called at least once, so a retried call may run twice: servers of tools with effects
    /// deduplicate by the request id ([`RequestMeta::id`]).
    ///
    /// [`RequestMeta::id`]: crate::RequestMeta::id
    pub async fn call<Req, Resp>(
        &self,
        tool: &str,
        request: &Req,
        timeout: Duration,
    ) -> Result<Resp, Error>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned,
    {
        let body =
            serde_json::to_vec(request).map_err(|e| Error::with_source(ErrorKind::Payload, e))?;
        let reply = self.call_raw(tool, body.into(), timeout).await?;
        serde_json::from_slice(&reply).map_err(|e| Error::with_source(ErrorKind::Payload, e))
    }

    /// Calls a tool with a JSON body (checked to be JSON) and returns the JSON reply.
    ///
    /// # Cancel safety
    ///
    /// As [`Bus::call`].
    pub async fn call_raw(
        &self,
        tool: &str,
        body: Bytes,
        timeout: Duration,
    ) -> Result<Bytes, Error> {
        rpc::call(&self.inner.emitter, tool, body, timeout).await
    }

    /// Serves `entry`'s tool on a loop of the bus's, in the bus's layers.
    pub(super) async fn start_serving(&self, entry: ServeEntry) -> Result<(), Error> {
        let subscription = rpc::subscribe(
            self.inner.transport.as_ref(),
            &entry.tool,
            self.inner.prefetch,
        )
        .await?;
        // The bus's layers around the server's own: the first added is the outermost.
        let service = self
            .inner
            .layers
            .iter()
            .rev()
            .fold(entry.service, |service, layer| layer.wrap_tool(service));
        let serving = Serving {
            tool: entry.tool,
            call: ToolCall::of(service),
            enforce_identity: self.inner.enforce_identity.clone(),
            #[cfg(feature = "schemas")]
            check: entry.check,
        };
        let stop = self.inner.stop.child_token();
        self.spawn_loop(rpc::serve_loop(Arc::new(serving), subscription, stop))
            .await;
        Ok(())
    }

    /// Serves a tool from now on (see [`BusBuilder::serve`](crate::BusBuilder::serve)).
    pub async fn serve<Req, Resp, F, Fut>(&self, tool: &str, handler: F) -> Result<(), Error>
    where
        Req: serde::de::DeserializeOwned + Send + 'static,
        Resp: Serialize + Send + 'static,
        F: Fn(Req, mesh_core::RequestMeta) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Resp, mesh_core::RemoteError>> + Send + 'static,
    {
        self.start_serving(ServeEntry::new(tool.to_owned(), handler))
            .await
    }
}
