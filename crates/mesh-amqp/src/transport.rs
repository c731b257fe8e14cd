//! [`AmqpTransport`]: the handle that implements [`Transport`] on RabbitMQ.

use mesh_core::text::EscapedDisplay;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt as _;
use mesh_core::naming::{
    self, DEAD_EXCHANGE, EVENTS_EXCHANGE, RETIRED_DEAD_QUEUE, RETRY_EXCHANGE, RPC_EXCHANGE,
};
use mesh_core::{
    BoxFuture, Confirm, DeadQueue, Envelope, Health, PublishOptions, QueueSpec, ServeSpec,
    Subscription, SubscriptionSpec, Target, ToolKey, Transport, TransportError, TransportErrorKind,
    WireMessage,
};
use tokio::sync::{broadcast, watch};

use crate::connection::backoff::Backoff;
use crate::connection::link::ConsumeLink;
use crate::consumer::{self, forward, Arrival, AttachSpec, ConsumerCounts, Env, Source};
use crate::convert::check_short;
use crate::declare::{self, DeclareChannel};
use crate::event_bindings::EventBindings;
use crate::lanes::{first_failure, in_lanes, LANES};
use crate::lifecycle::{Counters, Lifecycle, TransportShared};
use crate::options::{AmqpOptions, QueueType};
use crate::publisher::{Attempt, Payload, Publication, Publisher};
use crate::rpc::Rpc;
use crate::topology::{self, BindingDecl, QueueDecl, Topology};

pub use crate::stats::AmqpStats;

/// The RabbitMQ transport: a cheap, cloneable handle onto two connections (`<prefix>.publish`
/// and `<prefix>.consume`), each owned by a task of its own that reconnects it when it is
/// lost.
///
/// See the [crate docs](crate) for the topology it declares, how it publishes and consumes,
/// and how it recovers.
#[derive(Clone)]
pub struct AmqpTransport {
    inner: Arc<Inner>,
}

struct Inner {
    options: AmqpOptions,
    publisher: Publisher,
    consume: ConsumeLink,
    /// Lists a durable queue's bindings beyond those recorded here (stale bindings).
    event_bindings: Option<Arc<dyn EventBindings>>,
    topology: Arc<Mutex<Topology>>,
    counts: Arc<ConsumerCounts>,
    rpc: Rpc,
    shared: Arc<TransportShared>,
    shutdown: watch::Sender<bool>,
    closed: AtomicBool,
    /// Whether the warning that classic queues have no poison backstop was logged.
    classic_warned: AtomicBool,
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
    /// topology: the exchanges `mesh.events`, `mesh.rpc` and `mesh.events.dead` (no queue:
    /// the shared `mesh.dead-letters` of old is retired).
    ///
    /// Fails with `InvalidOptions` for options that cannot work, `AccessRefused` for refused
    /// credentials or vhost, `ConnectionLost` when no node answers, and `Incompatible` when the
    /// broker holds one of those entities with other arguments. Once connected, a lost
    /// connection is reconnected in the background (see the crate docs).
    ///
    /// Stale bindings (see [`subscribe`](AmqpTransport::subscribe)) are then only those this
    /// transport recorded itself; [`connect_with`](AmqpTransport::connect_with) takes a
    /// lister of the broker's bindings too.
    pub async fn connect(options: AmqpOptions) -> Result<AmqpTransport, TransportError> {
        AmqpTransport::connect_with(options, None).await
    }

    /// [`connect`](AmqpTransport::connect) with `event_bindings`, which lists the bindings a
    /// durable queue has on the broker (RabbitMQ's management API, as the SDK's `amqp`
    /// feature connects it); `None` lists none.
    pub async fn connect_with(
        options: AmqpOptions,
        event_bindings: Option<Arc<dyn EventBindings>>,
    ) -> Result<AmqpTransport, TransportError> {
        // Reads the password and TLS files (bounded, but a FIFO may take its deadline).
        let checked = options.clone();
        crate::blocking::off_runtime(move || checked.validate()).await?;
        tracing::info!(broker = %options, "connecting");
        let shared = Arc::new(TransportShared::default());
        let base = topology::base(&options);
        let topology = Arc::new(Mutex::new(base.clone()));
        let consume = ConsumeLink::start(&options, shared.clone(), topology.clone()).await?;
        if let Err(error) = consume.declare_base(&base).await {
            consume.close().await;
            return Err(error);
        }
        let publisher = match Publisher::start(&options, shared.clone(), topology.clone()).await {
            Ok(publisher) => publisher,
            Err(error) => {
                consume.close().await;
                return Err(error);
            }
        };
        let (shutdown, _) = watch::channel(false);
        Ok(AmqpTransport {
            inner: Arc::new(Inner {
                event_bindings,
                options,
                publisher,
                consume,
                topology,
                counts: Arc::new(ConsumerCounts::default()),
                rpc: Rpc::default(),
                shared,
                shutdown,
                closed: AtomicBool::new(false),
                classic_warned: AtomicBool::new(false),
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

    /// The transport's [`Lifecycle`] events from now on: connections lost and re-established,
    /// broker blocks, channels the broker closed, consumers cancelled and re-attached. Each
    /// is also logged with `tracing`. A receiver that falls more than 1,024 events behind
    /// loses the oldest (`RecvError::Lagged`).
    pub fn lifecycle(&self) -> broadcast::Receiver<Lifecycle> {
        self.inner.shared.subscribe()
    }

    /// A snapshot of the counters and gauges; see [`AmqpStats`].
    pub fn stats(&self) -> AmqpStats {
        let counters = &self.inner.shared.counters;
        let publisher = &self.inner.publisher;
        AmqpStats {
            late_replies: self.inner.rpc.late_replies(),
            unmatched_returns: Counters::get(&counters.unmatched_returns),
            unconfirmed: publisher.unconfirmed(),
            unconfirmed_bytes: publisher.unconfirmed_bytes(),
            blocked_time: publisher.state().blocked_time()
                + self.inner.consume.state().blocked_time(),
            reconnects: Counters::get(&counters.reconnects),
            resent: Counters::get(&counters.resent),
            channel_closes: Counters::get(&counters.channel_closes),
            unknown_delivery_tag_closes: Counters::get(&counters.unknown_tag_closes),
            consumer_cancels: Counters::get(&counters.consumer_cancels),
            reattached: Counters::get(&counters.reattached),
            nack_run_reopens: Counters::get(&counters.nack_run_reopens),
            stuck_reopens: Counters::get(&counters.stuck_reopens),
            foreign_deliveries: Counters::get(&counters.foreign_deliveries),
            declarations: Counters::get(&counters.declarations),
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
    /// Resolves once the message has room in the unconfirmed window (at most
    /// [`confirm_window`](AmqpOptions::confirm_window) publishes and
    /// [`max_unconfirmed_bytes`](AmqpOptions::max_unconfirmed_bytes) body bytes), also while
    /// the connection is down: the message is published once it is back. A full window (a
    /// long outage, a broker alarm) fails with `Backpressure` at the deadline; a body over the
    /// size limit fails at once with `TooLarge`.
    ///
    /// The [`Confirm`] resolves once the broker confirmed the message, which waits through
    /// reconnects (an unconfirmed message is resent, with the same event id, on the next
    /// channel) until the deadline: then `Timeout`, and the message may still be delivered.
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
        match self.try_publish(message, options)? {
            Attempt::Taken(confirm) => Ok(confirm),
            // Boxed apart, so that this future stays small (it is boxed for every publish
            // through `Transport`) and only a publish that must wait carries the waiting.
            Attempt::Wait(waiting) => Box::pin(self.inner.publisher.publish_waiting(waiting)).await,
        }
    }

    /// Publishes an event; see [`Transport::publish_event`]. The message on the wire is
    /// the one [`publish`](Self::publish) of its encoding sends; the client's properties
    /// are built from the envelope directly, which is also what is kept for a resend.
    pub async fn publish_event(
        &self,
        envelope: Envelope,
        options: PublishOptions,
    ) -> Result<Confirm, TransportError> {
        match options.target {
            Target::Events => {
                self.check_open()?;
                let outgoing = Publication {
                    exchange: EVENTS_EXCHANGE,
                    payload: Payload::Event(envelope),
                    mandatory: options.mandatory,
                    force_persistent: false,
                    resend: true,
                };
                self.inner
                    .publisher
                    .publish(outgoing, options.deadline)
                    .await
            }
            Target::Queue(_) | Target::Retry(_) => {
                self.publish(mesh_core::codec::encode(&envelope), options)
                    .await
            }
        }
    }

    /// [`publish`](Self::publish) up to where it would wait.
    fn try_publish(
        &self,
        message: WireMessage,
        options: PublishOptions,
    ) -> Result<Attempt, TransportError> {
        self.check_open()?;
        let (exchange, routing_key, force_persistent) = match options.target {
            Target::Events => (EVENTS_EXCHANGE, message.routing_key.clone(), false),
            Target::Queue(queue) => ("", queue, false),
            // A scheduled event waits in a durable queue, maybe for days: kept on disk.
            Target::Retry(key) => (RETRY_EXCHANGE, key, true),
        };
        let outgoing = Publication {
            exchange,
            payload: Payload::Message {
                routing_key,
                message,
            },
            mandatory: options.mandatory,
            force_persistent,
            resend: true,
        };
        self.inner.publisher.try_publish(outgoing, options.deadline)
    }

    /// Declares and consumes; see [`Transport::subscribe`].
    ///
    /// A durable queue ends up bound on `mesh.events` to exactly `spec.patterns`: bindings it
    /// has beyond those are removed. They are found through the [`EventBindings`] the
    /// transport was connected with (the management API, when configured or derived for a
    /// loopback broker); without one, or when it fails, only the bindings this transport
    /// recorded itself are considered (a warning is logged when it fails).
    ///
    /// The subscription keeps being fed across failures: a consumer the broker cancels, or
    /// whose channel or connection is lost, is attached again (its queue declared again
    /// first) with the same prefetch. Deliveries of the lost channel cannot be settled any
    /// more (`ConnectionLost`); the broker redelivers them. An ephemeral subscription gets a
    /// new server-named queue each time; [`Subscription::queue`] keeps the first name.
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
        let mut forwarders = Vec::new();
        let attach = match &spec.queue {
            QueueSpec::Durable { name } => {
                let retry_queues = self.declare_consumer_queue(name, &spec).await?;
                forwarders =
                    forward::start(&self.env(), name, &retry_queues, self.quorum()).await?;
                AttachSpec {
                    source: Source::Named(name.clone()),
                    prefetch: spec.prefetch,
                    manual_ack: true,
                    delay_queues: retry_queues.into_iter().map(|(queue, _)| queue).collect(),
                    counts_deliveries: self.quorum(),
                    arrival: Arrival::Events,
                }
            }
            QueueSpec::DeadLetters(DeadQueue::Durable { name }) => {
                self.declare_dead_queue(name).await?;
                AttachSpec {
                    source: Source::Named(name.clone()),
                    prefetch: spec.prefetch,
                    manual_ack: true,
                    delay_queues: Vec::new(),
                    counts_deliveries: self.quorum(),
                    arrival: Arrival::Any,
                }
            }
            QueueSpec::DeadLetters(DeadQueue::Tap) => AttachSpec {
                source: Source::Ephemeral {
                    exchange: DEAD_EXCHANGE,
                    // A module's tap names its own queues (all it may read under the plan).
                    patterns: if spec.patterns.is_empty() {
                        vec!["#".to_owned()]
                    } else {
                        spec.patterns.iter().map(ToString::to_string).collect()
                    },
                },
                prefetch: spec.prefetch,
                manual_ack: false,
                delay_queues: Vec::new(),
                counts_deliveries: false,
                arrival: Arrival::Any,
            },
            QueueSpec::DeadLetters(DeadQueue::Retired) => {
                // Never declared (its arguments are an older deployment's): consumed as it
                // stands, and only while it exists.
                if !self.retired_dead_queue_exists().await? {
                    return Err(TransportError::new(
                        TransportErrorKind::Protocol,
                        format!("queue `{RETIRED_DEAD_QUEUE}` does not exist"),
                    ));
                }
                AttachSpec {
                    source: Source::Named(RETIRED_DEAD_QUEUE.to_owned()),
                    prefetch: spec.prefetch,
                    manual_ack: true,
                    delay_queues: Vec::new(),
                    counts_deliveries: false,
                    arrival: Arrival::Any,
                }
            }
            QueueSpec::Ephemeral => AttachSpec {
                source: Source::Ephemeral {
                    exchange: EVENTS_EXCHANGE,
                    patterns: spec
                        .patterns
                        .iter()
                        .map(|p| p.as_str().to_owned())
                        .collect(),
                },
                prefetch: spec.prefetch,
                manual_ack: false,
                delay_queues: Vec::new(),
                counts_deliveries: false,
                arrival: Arrival::Events,
            },
        };
        let subscription = consumer::subscribe(self.env(), attach, true, forwarders).await?;
        if matches!(
            spec.queue,
            QueueSpec::Ephemeral | QueueSpec::DeadLetters(DeadQueue::Tap)
        ) {
            tracing::info!(
                queue = %EscapedDisplay(&subscription.queue()),
                patterns = spec.patterns.len(),
                "ephemeral subscription"
            );
        }
        Ok(subscription)
    }

    /// What a subscription's pump needs to attach and re-attach.
    fn env(&self) -> Env {
        Env {
            link: self.inner.consume.clone(),
            publisher: self.inner.publisher.clone(),
            topology: self.inner.topology.clone(),
            counts: self.inner.counts.clone(),
            shutdown: self.shutdown(),
            backoff: Backoff::from_options(&self.inner.options),
            in_stats: true,
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
        self.declare_bound(
            topology::serve_queue(&name, &self.inner.options),
            BindingDecl::new(RPC_EXCHANGE, &name, spec.tool.as_str()),
        )
        .await?;
        tracing::info!(queue = %EscapedDisplay(&name), "serving");
        let attach = AttachSpec {
            source: Source::Named(name),
            prefetch: spec.prefetch,
            manual_ack: true,
            delay_queues: Vec::new(),
            counts_deliveries: self.quorum(),
            arrival: Arrival::Requests,
        };
        consumer::subscribe(self.env(), attach, true, Vec::new()).await
    }

    /// Calls a tool; see [`Transport::call`].
    ///
    /// The request goes to `mesh.rpc` as mandatory with `expiration` = `timeout`, so a request
    /// the caller gave up on is not executed later, and a tool nobody ever declared a serve
    /// queue for fails at once with `NoServer`. A reply that has not come within
    /// [`NO_SERVER_CHECK`](mesh_core::NO_SERVER_CHECK) makes the call look at the serve
    /// queue (a passive declare): when nothing consumes it, the call fails with `NoServer`
    /// then rather than at its timeout.
    ///
    /// Calls are not retried through failures: losing the reply queue (the consume
    /// connection) fails every call waiting on it at once with `ConnectionLost`, and so does
    /// losing the publishing connection before the request was confirmed. A call made while
    /// the consume connection is down fails at once with `ConnectionLost`; once it is back,
    /// calls work again.
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
        // Checked: a timeout too long for an instant (`Duration::MAX`) waits "forever" (a
        // year) rather than panic.
        let now = tokio::time::Instant::now();
        let deadline = now
            .checked_add(timeout)
            .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600));
        let (reply_queue, mut alive) = self
            .inner
            .rpc
            .reply_queue(
                &self.inner.consume,
                self.inner.options.get_user(),
                self.shutdown(),
            )
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
        let outgoing = Publication {
            exchange: RPC_EXCHANGE,
            payload: Payload::Message {
                routing_key: tool.as_str().to_owned(),
                message: request,
            },
            mandatory: true,
            force_persistent: false,
            // Its reply queue does not survive what loses the request.
            resend: false,
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
        // A slow reply: is anything consuming the tool's queue at all?
        let check_at = deadline.min(now + mesh_core::NO_SERVER_CHECK);
        if let Ok(reply) = tokio::time::timeout_at(check_at, pending.reply(&mut alive)).await {
            return reply;
        }
        if check_at < deadline {
            if let Some(unserved) = crate::rpc::unserved(&self.inner.consume, tool, deadline).await
            {
                // A reply that came as the server went away still counts.
                return pending
                    .reply(&mut alive)
                    .now_or_never()
                    .unwrap_or(Err(unserved));
            }
        }
        match tokio::time::timeout_at(deadline, pending.reply(&mut alive)).await {
            Ok(reply) => reply,
            Err(_) => Err(TransportError::new(
                TransportErrorKind::Timeout,
                format!("no reply from `{tool}` in {timeout:?}"),
            )),
        }
    }

    /// The health now; see [`Transport::health`]. Ready means: both connections up, not
    /// blocked, and every consumer attached (a consumer being re-attached counts as expected,
    /// not attached).
    ///
    /// `blocked` is set when the broker says so (`connection.blocked`), or — since the client
    /// library does not announce that capability, and RabbitMQ then blocks silently — when
    /// publishes got no confirm for 5 s while the publishing connection is up, until the next
    /// confirm.
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

    /// Resolves once every publish accepted before the call is settled (confirmed, nacked,
    /// returned or failed); one waiting for a reconnect to be resent is not. Under a steady
    /// stream of publishes it waits for a moment with none in flight: bound the wait.
    /// Resolves at once on a closed transport.
    pub async fn flush(&self) {
        self.inner.publisher.flush().await;
    }

    /// Stops consumers and closes both connections, and stops reconnecting; what is
    /// unconfirmed fails with `Closed`. Every channel a consumer, an ack tracker or the
    /// reply queue holds is closed, and its close acknowledged by the broker, before the
    /// connections go (waiting at most 10 s for a broker that stopped answering): nothing
    /// is left closing when this returns, so the runtime may be dropped right after (see the
    /// crate docs, Closing).
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
        // Every consumer, ack tracker and the reply queue close their channels on the
        // shutdown signal; the connections go only once those closes are acknowledged, so
        // none is still in flight when this returns (see `TransportShared::channel_tasks`).
        self.inner.shared.channels_closed().await;
        self.inner.publisher.close().await;
        self.inner.consume.close().await;
        self.inner.shared.emit(Lifecycle::Closed);
    }

    /// Declares a reader's own durable queue of dead letters, bound to `mesh.events.dead` on
    /// `#`, and records it for replay.
    async fn declare_dead_queue(&self, name: &str) -> Result<(), TransportError> {
        check_short("a queue name", name)?;
        self.declare_bound(
            topology::dead_queue(name, &self.inner.options),
            BindingDecl::new(DEAD_EXCHANGE, name, "#"),
        )
        .await?;
        tracing::info!(queue = name, "declared queue of dead letters");
        Ok(())
    }

    /// Declares `queue` and `binding` on a declare channel of their own, then records both
    /// for replay after a reconnect.
    async fn declare_bound(
        &self,
        queue: QueueDecl,
        binding: BindingDecl,
    ) -> Result<(), TransportError> {
        let mut declare = self.inner.consume.declare_channel().await?;
        let declared = async {
            declare::ensure_queue(&mut declare, &queue, || {
                self.inner.consume.declare_channel()
            })
            .await?;
            declare.bind(&binding).await
        }
        .await;
        declare.close().await;
        declared?;
        self.record(|t| {
            t.add_queue(queue);
            t.add_binding(binding);
        });
        Ok(())
    }

    /// Whether the retired `mesh.dead-letters` exists.
    async fn retired_dead_queue_exists(&self) -> Result<bool, TransportError> {
        let declare = self.inner.consume.declare_channel().await?;
        let state = declare.queue_state(RETIRED_DEAD_QUEUE).await;
        declare.close().await;
        Ok(state?.is_some())
    }

    /// The first step of retiring [`RETIRED_DEAD_QUEUE`], which an older mesh declared: if
    /// the queue exists, removes its binding to `mesh.events.dead` on `#`, so no new dead
    /// letter reaches it, and returns `true`; returns `false` when there is no such queue.
    /// Its messages stay; drain them with `DeadQueue::Retired`, then
    /// [`delete_retired_dead_queue`](AmqpTransport::delete_retired_dead_queue).
    ///
    /// A one-time migration, not part of [`Transport`]: only a RabbitMQ can hold the queue.
    pub async fn unbind_retired_dead_queue(&self) -> Result<bool, TransportError> {
        self.check_open()?;
        if !self.retired_dead_queue_exists().await? {
            return Ok(false);
        }
        let binding = BindingDecl::new(DEAD_EXCHANGE, RETIRED_DEAD_QUEUE, "#");
        let declare = self.inner.consume.declare_channel().await?;
        let unbound = declare.unbind(&binding).await;
        declare.close().await;
        unbound?;
        self.record(|t| t.remove_binding(&binding));
        tracing::info!(
            queue = RETIRED_DEAD_QUEUE,
            "retired queue unbound from `mesh.events.dead`"
        );
        Ok(true)
    }

    /// Deletes [`RETIRED_DEAD_QUEUE`] only if it holds no message and has no consumer (so
    /// none holds an unacked one): `true` once it is gone (deleted now, or absent), `false`
    /// when it still holds messages or another consumer reads it. Call it only once the
    /// queue is unbound ([`unbind_retired_dead_queue`](AmqpTransport::unbind_retired_dead_queue))
    /// and while a queue of dead letters of the caller's own is bound: then a dead letter that
    /// reached the retired queue between the check and the delete (an older mesh binding it
    /// again) reached that one too.
    pub async fn delete_retired_dead_queue(&self) -> Result<bool, TransportError> {
        self.check_open()?;
        let declare = self.inner.consume.declare_channel().await?;
        let deleted = declare.delete_if_idle(RETIRED_DEAD_QUEUE).await;
        declare.close().await;
        deleted
    }

    /// Declares a consumer queue, its retry queues and exactly its bindings; returns the retry
    /// queues' names with their steps, by step.
    async fn declare_consumer_queue(
        &self,
        name: &str,
        spec: &SubscriptionSpec,
    ) -> Result<Vec<(String, Duration)>, TransportError> {
        check_short("a queue name", name)?;
        if let Some(index) = spec.retry_delays.iter().position(|d| d.as_millis() == 0) {
            return Err(TransportError::new(
                TransportErrorKind::InvalidOptions,
                format!("retry delay {index} is shorter than a millisecond"),
            ));
        }
        if let Some(index) = spec
            .retry_delays
            .iter()
            .position(|d| *d > forward::MAX_STEP)
        {
            return Err(TransportError::new(
                TransportErrorKind::InvalidOptions,
                format!(
                    "retry delay {index} is longer than {} s: a retry copy is held unacked \
                     for its step, and the broker takes back a delivery unacked for its \
                     consumer timeout",
                    forward::MAX_STEP.as_secs()
                ),
            ));
        }
        let options = &self.inner.options;
        let queue = topology::consumer_queue(name, options);
        let delays: Vec<_> = spec
            .retry_delays
            .iter()
            .map(|delay| topology::retry_queue(name, *delay, options))
            .collect();
        let retry_bindings = if delays.is_empty() {
            Vec::new()
        } else {
            topology::retry_bindings(name, &delays)
        };
        let wanted: BTreeSet<BindingDecl> = spec
            .patterns
            .iter()
            .map(|p| BindingDecl::new(EVENTS_EXCHANGE, name, p.as_str()))
            .collect();
        // Up to `LANES` declarations in flight together, for every subscription starting
        // (see `crate::lanes`): the queue first (a refusal of it declares nothing more),
        // then its retry queues, then its bindings.
        let lanes = Some(&self.inner.shared.declare_lanes);
        let open = || self.inner.consume.declare_channel();
        let open = &open;
        // One channel carried through the phases (as one at a time had), the other lanes'
        // opened for a phase.
        let mut carried = None;
        let declared = async {
            let (declared, kept) = in_lanes(
                vec![&queue],
                1,
                lanes,
                open,
                None,
                |mut declare, queue| async move {
                    let declared = declare::ensure_queue(&mut declare, queue, open).await;
                    (declared, Some(declare))
                },
            )
            .await;
            carried = kept;
            first_failure(declared)?;
            let (declared, kept) = in_lanes(
                delays
                    .into_iter()
                    .zip(spec.retry_delays.iter().copied())
                    .collect(),
                LANES,
                lanes,
                open,
                carried.take(),
                |mut declare, (decl, step)| async move {
                    let declared = self
                        .declare_retry_queue(&mut declare, name, decl, step)
                        .await;
                    (declared, Some(declare))
                },
            )
            .await;
            carried = kept;
            let delays = first_failure(declared)?;
            let (declared, kept) = in_lanes(
                wanted.iter().chain(&retry_bindings).collect(),
                LANES,
                lanes,
                open,
                carried.take(),
                |declare, binding| async move { (declare.bind(binding).await, Some(declare)) },
            )
            .await;
            carried = kept;
            first_failure(declared)?;
            let stale = self.stale_bindings(name, &wanted).await;
            let (declared, kept) = in_lanes(
                stale.iter().collect(),
                1,
                lanes,
                open,
                carried.take(),
                |declare, binding| async move { (declare.unbind(binding).await, Some(declare)) },
            )
            .await;
            carried = kept;
            first_failure(declared)?;
            Ok::<_, TransportError>((delays, stale))
        }
        .await;
        if let Some(declare) = carried {
            declare.close().await;
        }
        let (delays, stale) = declared?;
        let delay_names = delays
            .iter()
            .map(|d| d.name.clone())
            .zip(spec.retry_delays.iter().copied())
            .collect();
        self.record(|t| {
            t.add_queue(queue);
            for delay in delays {
                t.add_queue(delay);
            }
            for binding in &stale {
                t.remove_binding(binding);
            }
            for binding in wanted.into_iter().chain(retry_bindings) {
                t.add_binding(binding);
            }
        });
        tracing::info!(
            queue = name,
            patterns = spec.patterns.len(),
            "declared consumer queue"
        );
        if !self.quorum() && !self.inner.classic_warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                queue = name,
                "classic queues have no delivery limit: a message that crashes its consumer \
                 every time (before the handler returns) is redelivered forever; use quorum \
                 queues for a poison backstop"
            );
        }
        Ok(delay_names)
    }

    /// Declares the retry queue `decl` of `queue`'s step `step`, and returns the declaration
    /// to record. One that exists with the
    /// arguments of an earlier version (TTL and dead-lettering, which the broker will not
    /// change on an existing queue) is kept as it is: its declaration is returned, so
    /// that declaring it again after a reconnect succeeds, and its forwarders serve it like
    /// any other (see [`topology::legacy_retry_queue`]).
    async fn declare_retry_queue(
        &self,
        declare: &mut DeclareChannel,
        queue: &str,
        decl: QueueDecl,
        step: Duration,
    ) -> Result<QueueDecl, TransportError> {
        let ensured =
            declare::ensure_queue(declare, &decl, || self.inner.consume.declare_channel()).await;
        let error = match ensured {
            Ok(()) => return Ok(decl),
            Err(error) if matches!(error.kind(), TransportErrorKind::Incompatible { .. }) => error,
            Err(error) => return Err(error),
        };
        // The broker closed the channel over the refused declaration.
        *declare = self.inner.consume.declare_channel().await?;
        let legacy = topology::legacy_retry_queue(queue, step, &self.inner.options);
        if declare.queue(&legacy).await.is_err() {
            *declare = self.inner.consume.declare_channel().await?;
            return Err(error);
        }
        tracing::warn!(
            queue = %EscapedDisplay(&decl.name),
            "this retry queue has the arguments of an earlier mesh (a TTL and dead-lettering): \
             kept as it is and forwarded; delete it while it is empty to have it declared anew"
        );
        Ok(legacy)
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
        let vhost = self.inner.options.get_vhost();
        match &self.inner.event_bindings {
            Some(lister) => match lister.unusable() {
                Some(error) => tracing::warn!(
                    queue,
                    error = %EscapedDisplay(&error),
                    "management API not used: only bindings this transport declared can be \
                     removed"
                ),
                None => match lister.list(vhost, queue).await {
                    Ok(keys) => existing.extend(
                        keys.into_iter()
                            .map(|key| BindingDecl::new(EVENTS_EXCHANGE, queue, key)),
                    ),
                    Err(error) => tracing::warn!(
                        queue,
                        error = %EscapedDisplay(&error),
                        "management API failed: only bindings this transport declared can be \
                         removed"
                    ),
                },
            },
            None => tracing::debug!(
                queue,
                "management API not configured: only bindings this transport declared can be \
                 removed"
            ),
        }
        existing.difference(wanted).cloned().collect()
    }
}

impl Transport for AmqpTransport {
    fn publish(
        &self,
        message: WireMessage,
        options: PublishOptions,
    ) -> BoxFuture<'_, Result<Confirm, TransportError>> {
        // Nothing happens before the first poll; the future is small (see `publish`).
        Box::pin(AmqpTransport::publish(self, message, options))
    }

    fn publish_event(
        &self,
        envelope: Envelope,
        options: PublishOptions,
    ) -> BoxFuture<'_, Result<Confirm, TransportError>> {
        Box::pin(AmqpTransport::publish_event(self, envelope, options))
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

    fn stats(&self) -> mesh_core::TransportStats {
        let own = AmqpTransport::stats(self);
        let mut stats = mesh_core::TransportStats::default();
        stats.unconfirmed = own.unconfirmed as u64;
        stats.unconfirmed_bytes = own.unconfirmed_bytes as u64;
        stats.reconnects = own.reconnects;
        stats.resent = own.resent;
        stats.blocked_time = own.blocked_time;
        stats.reattached = own.reattached;
        stats.late_replies = own.late_replies;
        stats
    }

    fn flush(&self) -> BoxFuture<'_, ()> {
        Box::pin(AmqpTransport::flush(self))
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        Box::pin(AmqpTransport::close(self))
    }
}
