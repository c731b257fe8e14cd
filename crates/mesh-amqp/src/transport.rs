//! [`AmqpTransport`]: the handle that implements [`Transport`] on RabbitMQ.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mesh_core::naming::{self, DEAD_QUEUE, EVENTS_EXCHANGE, RPC_EXCHANGE};
use mesh_core::{
    BoxFuture, Confirm, Health, PublishOptions, QueueSpec, ServeSpec, Subscription,
    SubscriptionSpec, Target, ToolKey, Transport, TransportError, TransportErrorKind, WireMessage,
};
use tokio::sync::watch;

use crate::consumer::{self, ConsumerCounts, SubscriptionCtx};
use crate::convert::check_short;
use crate::declare::DeclareChannel;
use crate::link::ConsumeLink;
use crate::management::Management;
use crate::options::{AmqpOptions, QueueType};
use crate::publisher::{Outgoing, Publisher};
use crate::rpc::Rpc;
use crate::topology::{self, BindingDecl, Topology};

/// Counters of things that went wrong quietly.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AmqpStats {
    /// RPC replies that arrived for no waiting call (late or duplicate), dropped.
    pub late_replies: u64,
    /// `basic.return`s that matched no unsettled mandatory publish.
    pub unmatched_returns: u64,
}

/// The RabbitMQ transport: a cheap, cloneable handle onto two connections (`<prefix>.publish`
/// and `<prefix>.consume`), each owned by a task of its own.
///
/// See the [crate docs](crate) for the topology it declares and how it publishes and
/// consumes.
#[derive(Clone)]
pub struct AmqpTransport {
    inner: Arc<Inner>,
}

struct Inner {
    options: AmqpOptions,
    publisher: Publisher,
    consume: ConsumeLink,
    management: Management,
    topology: Mutex<Topology>,
    counts: Arc<ConsumerCounts>,
    rpc: Rpc,
    shutdown: watch::Sender<bool>,
    closed: AtomicBool,
}

impl std::fmt::Debug for AmqpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmqpTransport")
            .field("broker", &self.inner.options.to_string())
            .field("health", &self.health())
            .finish_non_exhaustive()
    }
}

impl AmqpTransport {
    /// Connects (consume connection first, then the publishing one) and declares the base
    /// topology: `mesh.events`, `mesh.rpc`, `mesh.events.dead` and `mesh.dead-letters`.
    ///
    /// Fails with `InvalidOptions` for options that cannot work, `AccessRefused` for refused
    /// credentials or vhost, `ConnectionLost` when no node answers, and `Incompatible` when the
    /// broker holds one of those entities with other arguments.
    pub async fn connect(options: AmqpOptions) -> Result<AmqpTransport, TransportError> {
        options.validate()?;
        tracing::info!(broker = %options, "connecting");
        let consume = ConsumeLink::start(&options).await?;
        let base = topology::base(&options);
        if let Err(error) = declare_base(&consume, &base).await {
            consume.close().await;
            return Err(error);
        }
        let publisher = match Publisher::start(&options).await {
            Ok(publisher) => publisher,
            Err(error) => {
                consume.close().await;
                return Err(error);
            }
        };
        let (shutdown, _) = watch::channel(false);
        Ok(AmqpTransport {
            inner: Arc::new(Inner {
                management: Management::new(&options),
                options,
                publisher,
                consume,
                topology: Mutex::new(base),
                counts: Arc::new(ConsumerCounts::default()),
                rpc: Rpc::default(),
                shutdown,
                closed: AtomicBool::new(false),
            }),
        })
    }

    /// The options it was built with.
    pub fn options(&self) -> &AmqpOptions {
        &self.inner.options
    }

    /// A snapshot of everything it declared, which a reconnect replays.
    pub fn topology(&self) -> Topology {
        self.inner
            .topology
            .lock()
            .map(|t| t.clone())
            .unwrap_or_default()
    }

    /// Counters of things that went wrong quietly.
    pub fn stats(&self) -> AmqpStats {
        AmqpStats {
            late_replies: self.inner.rpc.late_replies(),
            unmatched_returns: self
                .inner
                .publisher
                .stats()
                .unmatched_returns
                .load(Ordering::Relaxed),
        }
    }

    fn check_open(&self) -> Result<(), TransportError> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(TransportError::new(
                TransportErrorKind::Closed,
                "the transport is closed",
            ));
        }
        Ok(())
    }

    fn record(&self, f: impl FnOnce(&mut Topology)) {
        if let Ok(mut topology) = self.inner.topology.lock() {
            f(&mut topology);
        }
    }

    fn quorum(&self) -> bool {
        self.inner.options.get_queue_type() == QueueType::Quorum
    }

    fn shutdown(&self) -> watch::Receiver<bool> {
        self.inner.shutdown.subscribe()
    }

    /// Publishes; see [`Transport::publish`].
    ///
    /// `options.deadline` of `None` means the [default
    /// deadline](AmqpOptions::publish_deadline) (30 s unless set otherwise).
    ///
    /// # Cancel safety
    ///
    /// Dropped while waiting for room in the window, nothing is published. Once it resolved,
    /// the message is published whatever happens to the returned [`Confirm`].
    pub async fn publish(
        &self,
        message: WireMessage,
        options: PublishOptions,
    ) -> Result<Confirm, TransportError> {
        self.check_open()?;
        let (exchange, routing_key) = match options.target {
            Target::Events => (EVENTS_EXCHANGE.to_owned(), message.routing_key.clone()),
            Target::Queue(queue) => (String::new(), queue),
        };
        let outgoing = Outgoing {
            exchange,
            routing_key,
            message,
            mandatory: options.mandatory,
            force_persistent: false,
        };
        self.inner
            .publisher
            .publish(outgoing, options.deadline)
            .await
    }

    /// Declares and consumes; see [`Transport::subscribe`].
    ///
    /// A durable queue ends up bound on `mesh.events` to exactly `spec.patterns`: bindings it
    /// has beyond those are removed. They are found through the management API; when that is
    /// unreachable a warning is logged and only the bindings this transport recorded itself
    /// are considered.
    ///
    /// # Cancel safety
    ///
    /// Dropped before it resolves, the declarations made so far stay (they are idempotent)
    /// and no consumer is left behind.
    pub async fn subscribe(&self, spec: SubscriptionSpec) -> Result<Subscription, TransportError> {
        self.check_open()?;
        if spec.prefetch == 0 {
            return Err(TransportError::new(
                TransportErrorKind::InvalidOptions,
                "a prefetch of 0 would be unbounded; give at least 1",
            ));
        }
        match &spec.queue {
            QueueSpec::Durable { name } => {
                let delay_queues = self.declare_consumer_queue(name, &spec).await?;
                self.attach(
                    name.clone(),
                    delay_queues,
                    self.quorum(),
                    spec.prefetch,
                    true,
                )
                .await
            }
            QueueSpec::DeadLetters => {
                self.attach(
                    DEAD_QUEUE.to_owned(),
                    Vec::new(),
                    self.quorum(),
                    spec.prefetch,
                    true,
                )
                .await
            }
            QueueSpec::Ephemeral => self.attach_ephemeral(&spec).await,
        }
    }

    /// Declares `serve.<key>` and consumes requests; see [`Transport::serve`].
    pub async fn serve(&self, spec: ServeSpec) -> Result<Subscription, TransportError> {
        self.check_open()?;
        if spec.prefetch == 0 {
            return Err(TransportError::new(
                TransportErrorKind::InvalidOptions,
                "a prefetch of 0 would be unbounded; give at least 1",
            ));
        }
        let name = naming::serve_queue(&spec.tool);
        let queue = topology::serve_queue(&name, &self.inner.options);
        let binding = BindingDecl::new(RPC_EXCHANGE, &name, spec.tool.as_str());
        let declare = self.inner.consume.declare_channel().await?;
        let declared = async {
            declare.queue(&queue).await?;
            declare.bind(&binding).await
        }
        .await;
        declare.close().await;
        declared?;
        self.record(|t| {
            t.add_queue(queue);
            t.add_binding(binding);
        });
        tracing::info!(queue = %name, "serving");
        self.attach(name, Vec::new(), self.quorum(), spec.prefetch, true)
            .await
    }

    /// Calls a tool; see [`Transport::call`].
    ///
    /// The request goes to `mesh.rpc` as mandatory with `expiration` = `timeout`, so a request
    /// the caller gave up on is not executed later, and a tool nobody ever declared a serve
    /// queue for fails at once with `NoServer`.
    ///
    /// # Cancel safety
    ///
    /// Dropped early, the request may still be delivered; its reply is then dropped and
    /// counted as late.
    pub async fn call(
        &self,
        tool: &ToolKey,
        request: WireMessage,
        timeout: Duration,
    ) -> Result<WireMessage, TransportError> {
        self.check_open()?;
        let deadline = tokio::time::Instant::now() + timeout;
        let reply_queue = self
            .inner
            .rpc
            .reply_queue(&self.inner.consume, self.shutdown())
            .await?;
        let correlation_id = uuid::Uuid::new_v4().to_string();
        let mut pending = self.inner.rpc.wait_for(correlation_id.clone());
        let mut request = request;
        request.routing_key = tool.as_str().to_owned();
        request.properties.reply_to = Some(reply_queue);
        request.properties.correlation_id = Some(correlation_id);
        // At least a millisecond: an expiration of 0 means "now or never", which only a
        // consumer waiting at that very moment could meet.
        request.properties.expiration = Some(timeout.max(Duration::from_millis(1)));
        let outgoing = Outgoing {
            exchange: RPC_EXCHANGE.to_owned(),
            routing_key: tool.as_str().to_owned(),
            message: request,
            mandatory: true,
            force_persistent: false,
        };
        let no_server = |e: TransportError| {
            if e.kind() == &TransportErrorKind::Unroutable {
                TransportError::new(
                    TransportErrorKind::NoServer,
                    format!("no serve queue for `{tool}`"),
                )
                .with_source(e)
            } else {
                e
            }
        };
        let confirm = self
            .inner
            .publisher
            .publish(outgoing, Some(timeout))
            .await
            .map_err(no_server)?;
        confirm.await.map_err(no_server)?;
        match tokio::time::timeout_at(deadline, pending.reply()).await {
            Ok(reply) => reply,
            Err(_) => Err(TransportError::new(
                TransportErrorKind::Timeout,
                format!("no reply from `{tool}` in {timeout:?}"),
            )),
        }
    }

    /// The health now; see [`Transport::health`].
    pub fn health(&self) -> Health {
        let publish = self.inner.publisher.state();
        let consume = self.inner.consume.state();
        Health {
            connected: !self.inner.closed.load(Ordering::Acquire)
                && publish.connected()
                && consume.connected(),
            blocked: publish.blocked() || consume.blocked(),
            consumers_expected: self.inner.counts.expected.load(Ordering::Acquire),
            consumers_attached: self.inner.counts.attached.load(Ordering::Acquire),
        }
    }

    /// Stops consumers and closes both connections; what is unconfirmed fails with `Closed`.
    ///
    /// # Cancel safety
    ///
    /// The transport refuses new work as soon as this is first polled. Dropped before it
    /// finished, a connection may stay open: calling it again finishes the job (every step
    /// is idempotent).
    pub async fn close(&self) {
        if !self.inner.closed.swap(true, Ordering::AcqRel) {
            tracing::info!("closing");
        }
        let _ = self.inner.shutdown.send(true);
        self.inner.publisher.close().await;
        self.inner.consume.close().await;
    }

    /// Declares a consumer queue, its delay queues and exactly its bindings; returns the delay
    /// queues' names by step.
    async fn declare_consumer_queue(
        &self,
        name: &str,
        spec: &SubscriptionSpec,
    ) -> Result<Vec<String>, TransportError> {
        check_short("a queue name", name)?;
        if let Some(index) = spec.retry_delays.iter().position(|d| d.as_millis() == 0) {
            return Err(TransportError::new(
                TransportErrorKind::InvalidOptions,
                format!("retry delay {index} is shorter than a millisecond"),
            ));
        }
        let options = &self.inner.options;
        let queue = topology::consumer_queue(name, options);
        let delays: Vec<_> = spec
            .retry_delays
            .iter()
            .map(|delay| topology::delay_queue(name, *delay, options))
            .collect();
        let wanted: BTreeSet<BindingDecl> = spec
            .patterns
            .iter()
            .map(|p| BindingDecl::new(EVENTS_EXCHANGE, name, p.as_str()))
            .collect();
        let declare = self.inner.consume.declare_channel().await?;
        let declared = async {
            declare.queue(&queue).await?;
            for delay in &delays {
                declare.queue(delay).await?;
            }
            for binding in &wanted {
                declare.bind(binding).await?;
            }
            let stale = self.stale_bindings(name, &wanted).await;
            for binding in &stale {
                declare.unbind(binding).await?;
            }
            Ok::<_, TransportError>(stale)
        }
        .await;
        declare.close().await;
        let stale = declared?;
        let delay_names = delays.iter().map(|d| d.name.clone()).collect();
        self.record(|t| {
            t.add_queue(queue);
            for delay in delays {
                t.add_queue(delay);
            }
            for binding in &stale {
                t.remove_binding(binding);
            }
            for binding in wanted {
                t.add_binding(binding);
            }
        });
        tracing::info!(
            queue = name,
            patterns = spec.patterns.len(),
            "declared consumer queue"
        );
        Ok(delay_names)
    }

    /// Bindings of `queue` on `mesh.events` that are not `wanted`: those the broker reports,
    /// plus those recorded here (all the transport knows when the API is unreachable).
    async fn stale_bindings(
        &self,
        queue: &str,
        wanted: &BTreeSet<BindingDecl>,
    ) -> BTreeSet<BindingDecl> {
        let mut existing: BTreeSet<BindingDecl> = self
            .topology()
            .bindings_of(queue)
            .filter(|b| b.exchange == EVENTS_EXCHANGE)
            .cloned()
            .collect();
        match self
            .inner
            .management
            .event_bindings(self.inner.options.get_vhost(), queue)
            .await
        {
            Ok(listed) => existing.extend(listed),
            Err(reason) => tracing::warn!(
                queue,
                %reason,
                "management API unreachable: only bindings this transport declared can be \
                 removed"
            ),
        }
        existing.difference(wanted).cloned().collect()
    }

    /// Opens a channel and consumes a named queue.
    async fn attach(
        &self,
        queue: String,
        delay_queues: Vec<String>,
        counts_deliveries: bool,
        prefetch: u16,
        manual_ack: bool,
    ) -> Result<Subscription, TransportError> {
        let (channel, closed) = self.inner.consume.channel("consume").await?;
        let consumer =
            match consumer::consume(channel.clone(), closed, &queue, prefetch, manual_ack).await {
                Ok(consumer) => consumer,
                Err(error) => {
                    let _ = channel.close().await;
                    return Err(error);
                }
            };
        let ctx = Arc::new(SubscriptionCtx {
            queue,
            delay_queues,
            counts_deliveries,
            publisher: self.inner.publisher.clone(),
        });
        Ok(consumer::start(
            consumer,
            ctx,
            prefetch,
            self.inner.counts.clone(),
            self.shutdown(),
        ))
    }

    /// Declares a server-named queue on a channel of its own (an exclusive queue belongs to
    /// its connection), binds it and consumes it with `no_ack`.
    async fn attach_ephemeral(
        &self,
        spec: &SubscriptionSpec,
    ) -> Result<Subscription, TransportError> {
        let (channel, closed) = self.inner.consume.channel("consume").await?;
        let declare = DeclareChannel::wrap(channel.clone(), closed.clone());
        let attached = async {
            let name = declare.server_named().await?;
            for pattern in &spec.patterns {
                declare
                    .bind(&BindingDecl::new(EVENTS_EXCHANGE, &name, pattern.as_str()))
                    .await?;
            }
            let consumer =
                consumer::consume(channel.clone(), closed, &name, spec.prefetch, false).await?;
            Ok::<_, TransportError>((name, consumer))
        }
        .await;
        let (name, consumer) = match attached {
            Ok(attached) => attached,
            Err(error) => {
                declare.close().await;
                return Err(error);
            }
        };
        tracing::info!(queue = %name, patterns = spec.patterns.len(), "ephemeral subscription");
        let ctx = Arc::new(SubscriptionCtx {
            queue: name,
            delay_queues: Vec::new(),
            counts_deliveries: false,
            publisher: self.inner.publisher.clone(),
        });
        Ok(consumer::start(
            consumer,
            ctx,
            spec.prefetch,
            self.inner.counts.clone(),
            self.shutdown(),
        ))
    }
}

async fn declare_base(consume: &ConsumeLink, base: &Topology) -> Result<(), TransportError> {
    let declare = consume.declare_channel().await?;
    let replayed = declare.replay(base).await;
    declare.close().await;
    replayed?;
    tracing::debug!("base topology declared");
    Ok(())
}

impl Transport for AmqpTransport {
    fn publish(
        &self,
        message: WireMessage,
        options: PublishOptions,
    ) -> BoxFuture<'_, Result<Confirm, TransportError>> {
        Box::pin(AmqpTransport::publish(self, message, options))
    }

    fn subscribe(
        &self,
        spec: SubscriptionSpec,
    ) -> BoxFuture<'_, Result<Subscription, TransportError>> {
        Box::pin(AmqpTransport::subscribe(self, spec))
    }

    fn call(
        &self,
        tool: &ToolKey,
        request: WireMessage,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<WireMessage, TransportError>> {
        let tool = tool.clone();
        Box::pin(async move { AmqpTransport::call(self, &tool, request, timeout).await })
    }

    fn serve(&self, spec: ServeSpec) -> BoxFuture<'_, Result<Subscription, TransportError>> {
        Box::pin(AmqpTransport::serve(self, spec))
    }

    fn health(&self) -> Health {
        AmqpTransport::health(self)
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(AmqpTransport::close(self))
    }
}
