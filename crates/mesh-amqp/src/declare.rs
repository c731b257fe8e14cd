//! Applying declarations to a channel, and reading why the broker refused one.
//!
//! A refused declaration (`406 PRECONDITION_FAILED`, `403 ACCESS_REFUSED`) closes the channel
//! it was made on, so declarations run on a channel of their own ([`DeclareChannel`]): only
//! that channel dies, and the transport stays usable. The broker says why only in the
//! `channel.close` it sends, which the client library hands to a callback; [`CloseCatcher`]
//! keeps it so the failed call can return a precise error.

use mesh_core::text::EscapedDisplay;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqprs::callbacks::ChannelCallback;
use amqprs::channel::{
    Channel, ExchangeDeclareArguments, QueueBindArguments, QueueDeclareArguments,
    QueueDeleteArguments, QueueUnbindArguments,
};
use amqprs::connection::Connection;
use amqprs::{BasicProperties, Cancel, CloseChannel, Nack, Return};
use mesh_core::{TransportError, TransportErrorKind};
use tokio::sync::Notify;

use crate::convert::{check_short, to_field_table};
use crate::error::{code, from_client, from_close, is_unknown_delivery_tag, BrokerClose};
use crate::gate::{ChannelGate, Closer};
use crate::lifecycle::{Counters, Lifecycle, Link, TransportShared};
use crate::topology::{BindingDecl, ExchangeDecl, QueueDecl};

/// How long one declaration may take before the broker is presumed unresponsive.
const OPERATION_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a failed call waits for the broker's `channel.close` saying why.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

/// Where a channel's `channel.close` from the broker is kept, and how the owner of the
/// channel's consumer learns that the broker closed the channel or cancelled the consumer.
#[derive(Debug, Clone, Default)]
pub(crate) struct CloseSlot {
    close: Arc<Mutex<Option<BrokerClose>>>,
    stopped: Arc<Notify>,
    /// Set while a passive declare asks whether something exists: a `404 NOT_FOUND` close
    /// is then an answer, not a fault, and is neither counted nor reported.
    probing: Arc<std::sync::atomic::AtomicBool>,
    /// Who may still send on the channel: marked closed by the broker's close before the
    /// client library answers it (see [`crate::gate`]).
    gate: ChannelGate,
    /// Set while a durable queue is declared by a user that may lack `configure` on it
    /// (see [`ensure_queue`]): a `403 ACCESS_REFUSED` close is then an answer, looked
    /// into with a passive declare, not a fault.
    refusal_expected: Arc<std::sync::atomic::AtomicBool>,
    /// The transport's count of declarations sent (see [`DeclareChannel::sent`]).
    declarations: Arc<std::sync::atomic::AtomicU64>,
}

impl CloseSlot {
    /// Keeps the broker's close, then says the channel stopped.
    fn closed(&self, close: BrokerClose) {
        if let Ok(mut slot) = self.close.lock() {
            *slot = Some(close);
        }
        self.stopped.notify_one();
    }

    /// The channel's gate (see [`crate::gate`]).
    pub(crate) fn gate(&self) -> &ChannelGate {
        &self.gate
    }

    /// Resolves once the broker closed the channel or cancelled a consumer on it since
    /// the channel opened (a channel carries one consumer at most).
    pub(crate) async fn stopped(&self) {
        self.stopped.notified().await;
    }
}

/// Takes the close a channel received, if any.
pub(crate) fn take_close(slot: &CloseSlot) -> Option<BrokerClose> {
    slot.close.lock().ok().and_then(|mut close| close.take())
}

/// A channel callback that keeps the broker's `channel.close`, counts and reports it, and
/// otherwise only logs.
pub(crate) struct CloseCatcher {
    pub(crate) slot: CloseSlot,
    pub(crate) role: &'static str,
    pub(crate) shared: Arc<TransportShared>,
}

#[async_trait::async_trait]
impl ChannelCallback for CloseCatcher {
    async fn close(
        &mut self,
        channel: &Channel,
        close: CloseChannel,
    ) -> Result<(), amqprs::error::Error> {
        // First, before the client library writes its close-ok: whatever is being sent on
        // the channel is enqueued by now, and nothing more is.
        self.slot.gate.close_began(Closer::Broker).await;
        let close = BrokerClose {
            code: close.reply_code(),
            text: close.reply_text().clone(),
        };
        if close.code == code::ACCESS_REFUSED
            && self
                .slot
                .refusal_expected
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            tracing::debug!(role = self.role, text = %EscapedDisplay(&close.text), "refused (a queue the operator declares)");
            self.slot.closed(close);
            return Ok(());
        }
        if close.code == code::NOT_FOUND
            && self.slot.probing.load(std::sync::atomic::Ordering::Relaxed)
        {
            tracing::debug!(role = self.role, text = %EscapedDisplay(&close.text), "not found (a passive declare)");
            self.slot.closed(close);
            return Ok(());
        }
        let counters = &self.shared.counters;
        Counters::bump(&counters.channel_closes);
        if is_unknown_delivery_tag(&close) {
            // Ackers only reach the channel their delivery came on, so this is a bug.
            Counters::bump(&counters.unknown_tag_closes);
            tracing::error!(
                channel = channel.channel_id(),
                role = self.role,
                text = %EscapedDisplay(&close.text),
                "broker closed a channel for an unknown delivery tag"
            );
        } else {
            tracing::info!(
                channel = channel.channel_id(),
                role = self.role,
                code = close.code,
                text = %EscapedDisplay(&close.text),
                "broker closed the channel"
            );
        }
        self.shared.emit(Lifecycle::ChannelClosed {
            link: Link::Consume,
            code: close.code,
            reason: close.text.clone(),
        });
        self.slot.closed(close);
        Ok(())
    }

    async fn cancel(
        &mut self,
        channel: &Channel,
        cancel: Cancel,
    ) -> Result<(), amqprs::error::Error> {
        // The broker cancels a consumer whose queue was deleted (or, on a quorum queue, lost
        // its leader); the client library then ends the consumer's stream, and the
        // consumer's pump re-attaches.
        tracing::warn!(
            channel = channel.channel_id(),
            role = self.role,
            consumer = %EscapedDisplay(&cancel.consumer_tag()),
            "broker cancelled the consumer"
        );
        self.slot.stopped.notify_one();
        Ok(())
    }

    async fn flow(
        &mut self,
        _channel: &Channel,
        active: bool,
    ) -> Result<bool, amqprs::error::Error> {
        Ok(active)
    }

    async fn publish_ack(&mut self, _channel: &Channel, _ack: amqprs::Ack) {}

    async fn publish_nack(&mut self, _channel: &Channel, _nack: Nack) {}

    async fn publish_return(
        &mut self,
        _channel: &Channel,
        ret: Return,
        _properties: BasicProperties,
        _content: Vec<u8>,
    ) {
        tracing::warn!(role = self.role, ret = %EscapedDisplay(&ret), "unexpected basic.return");
    }
}

/// Opens a channel with a [`CloseCatcher`].
pub(crate) async fn open_channel(
    connection: &Connection,
    role: &'static str,
    shared: Arc<TransportShared>,
) -> Result<(Channel, CloseSlot), TransportError> {
    let channel = within(connection.open_channel(None), "opening a channel")
        .await?
        .map_err(|e| from_client(e, "opening a channel"))?;
    let slot = CloseSlot {
        declarations: shared.counters.declarations.clone(),
        ..CloseSlot::default()
    };
    channel
        .register_callback(CloseCatcher {
            slot: slot.clone(),
            role,
            shared,
        })
        .await
        .map_err(|e| from_client(e, "registering a channel callback"))?;
    Ok((channel, slot))
}

/// Bounds a broker round trip: a broker that never answers is reported, not waited on
/// forever (a dead connection is found by heartbeats, a stuck broker is not).
pub(crate) async fn within<T>(
    future: impl std::future::Future<Output = T>,
    context: &str,
) -> Result<T, TransportError> {
    let mut future = std::pin::pin!(future);
    // Most calls finish at their first poll (a publish is a frame handed to the client's
    // writer): no timer is set up for those, which is a tenth of a publish's cost.
    if let std::task::Poll::Ready(value) = futures::poll!(future.as_mut()) {
        return Ok(value);
    }
    tokio::time::timeout(OPERATION_TIMEOUT, future)
        .await
        .map_err(|_| {
            TransportError::new(
                TransportErrorKind::Timeout,
                format!("{context}: no answer from the broker in {OPERATION_TIMEOUT:?}"),
            )
        })
}

/// A channel of its own for declarations.
pub(crate) struct DeclareChannel {
    channel: Channel,
    closed: CloseSlot,
}

impl std::fmt::Debug for DeclareChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeclareChannel")
            .field("channel", &self.channel.channel_id())
            .finish_non_exhaustive()
    }
}

impl DeclareChannel {
    /// Wraps a channel opened with [`open_channel`] (a consumer's own channel).
    pub(crate) fn wrap(channel: Channel, closed: CloseSlot) -> DeclareChannel {
        DeclareChannel { channel, closed }
    }

    /// The error of a failed call: what the broker said when it closed the channel, or else
    /// what the client library reported.
    fn error(&self, err: amqprs::error::Error, context: &str) -> TransportError {
        let error = match take_close(&self.closed) {
            Some(close) => from_close(close, context),
            None => from_client(err, context),
        };
        let expected = matches!(error.kind(), TransportErrorKind::Forbidden { .. })
            && self
                .closed
                .refusal_expected
                .load(std::sync::atomic::Ordering::Relaxed);
        if expected {
            tracing::debug!(error = %EscapedDisplay(&error), "declaration refused, looking for the queue");
        } else {
            tracing::warn!(error = %EscapedDisplay(&error), "declaration failed");
        }
        error
    }

    /// Counts a declaration about to be sent (exchanges, queues, bindings, passive ones
    /// included): what [`crate::AmqpStats::declarations`] reports.
    fn sent(&self) {
        self.closed
            .declarations
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// Declares an exchange. Declaring needs `configure` permission on it even when it
    /// exists, which the access plan gives no module: see [`ensure_exchange`].
    pub(crate) async fn exchange(&self, decl: &ExchangeDecl) -> Result<(), TransportError> {
        check_short("an exchange name", &decl.name)?;
        let mut args = ExchangeDeclareArguments::new(&decl.name, &decl.kind);
        args.durable = decl.durable;
        let context = format!("declaring exchange `{}`", decl.name);
        self.sent();
        within(self.channel.exchange_declare(args), &context)
            .await?
            .map_err(|e| self.error(e, &context))?;
        tracing::debug!(exchange = %EscapedDisplay(&decl.name), "declared exchange");
        Ok(())
    }

    /// Declares a named queue.
    pub(crate) async fn queue(&self, decl: &QueueDecl) -> Result<(), TransportError> {
        check_short("a queue name", &decl.name)?;
        if decl.name.is_empty() {
            return Err(TransportError::new(
                TransportErrorKind::InvalidOptions,
                "a durable queue needs a name",
            ));
        }
        let args = QueueDeclareArguments::new(&decl.name)
            .durable(decl.durable)
            .exclusive(decl.exclusive)
            .auto_delete(decl.auto_delete)
            .arguments(to_field_table(&decl.arguments)?)
            .finish();
        let context = format!("declaring queue `{}`", decl.name);
        self.sent();
        within(self.channel.queue_declare(args), &context)
            .await?
            .map_err(|e| self.error(e, &context))?;
        tracing::debug!(queue = %EscapedDisplay(&decl.name), arguments = ?decl.arguments, "declared queue");
        Ok(())
    }

    /// Declares an exclusive, auto-delete, server-named queue and returns its name.
    pub(crate) async fn server_named(&self) -> Result<String, TransportError> {
        let args = QueueDeclareArguments::new("")
            .exclusive(true)
            .auto_delete(true)
            .finish();
        let context = "declaring a server-named queue".to_owned();
        self.sent();
        let declared = within(self.channel.queue_declare(args), &context)
            .await?
            .map_err(|e| self.error(e, &context))?;
        let name = declared.map(|(name, _, _)| name).ok_or_else(|| {
            TransportError::new(TransportErrorKind::Protocol, "no declare-ok for a queue")
        })?;
        tracing::debug!(queue = %EscapedDisplay(&name), "declared server-named queue");
        Ok(name)
    }

    /// Binds a queue.
    pub(crate) async fn bind(&self, binding: &BindingDecl) -> Result<(), TransportError> {
        check_short("a binding key", &binding.routing_key)?;
        let args = QueueBindArguments::new(&binding.queue, &binding.exchange, &binding.routing_key);
        let context = format!(
            "binding `{}` to `{}` on `{}`",
            binding.queue, binding.exchange, binding.routing_key
        );
        self.sent();
        within(self.channel.queue_bind(args), &context)
            .await?
            .map_err(|e| self.error(e, &context))?;
        Ok(())
    }

    /// Binds a queue where this user may not be allowed to: `Ok(false)` when the broker
    /// refuses it (`403`, an answer, neither counted nor reported; the channel is closed).
    pub(crate) async fn bind_if_allowed(
        &self,
        binding: &BindingDecl,
    ) -> Result<bool, TransportError> {
        use std::sync::atomic::Ordering;
        self.closed.refusal_expected.store(true, Ordering::Relaxed);
        let bound = self.bind(binding).await;
        self.closed.refusal_expected.store(false, Ordering::Relaxed);
        match bound {
            Ok(()) => Ok(true),
            Err(error) if matches!(error.kind(), TransportErrorKind::Forbidden { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }

    /// Removes a binding.
    pub(crate) async fn unbind(&self, binding: &BindingDecl) -> Result<(), TransportError> {
        check_short("a binding key", &binding.routing_key)?;
        let args =
            QueueUnbindArguments::new(&binding.queue, &binding.exchange, &binding.routing_key);
        let context = format!(
            "unbinding `{}` from `{}` on `{}`",
            binding.queue, binding.exchange, binding.routing_key
        );
        self.sent();
        within(self.channel.queue_unbind(args), &context)
            .await?
            .map_err(|e| self.error(e, &context))?;
        tracing::info!(
            queue = %EscapedDisplay(&binding.queue),
            exchange = %EscapedDisplay(&binding.exchange),
            pattern = %EscapedDisplay(&binding.routing_key),
            "removed a binding no longer asked for"
        );
        Ok(())
    }

    /// The broker's close after a call failed: the client library may report the failure
    /// before the close reached the channel's callback, so wait for it a moment.
    async fn close_of_failed_call(&self) -> Option<BrokerClose> {
        if let Some(close) = take_close(&self.closed) {
            return Some(close);
        }
        let _ = tokio::time::timeout(CLOSE_WAIT, self.closed.stopped()).await;
        take_close(&self.closed)
    }

    /// How many messages are ready in a queue and how many consumers it has (a passive
    /// declare, which needs no permission); `None` when there is no such queue. A missing
    /// queue closes the channel (`404 NOT_FOUND`, an answer here, not a fault: neither
    /// counted nor reported), so the channel is of no further use then.
    pub(crate) async fn queue_state(
        &self,
        name: &str,
    ) -> Result<Option<(u32, u32)>, TransportError> {
        check_short("a queue name", name)?;
        let args = QueueDeclareArguments::new(name).passive(true).finish();
        let context = format!("looking for queue `{name}`");
        let probing = |on: bool| {
            self.closed
                .probing
                .store(on, std::sync::atomic::Ordering::Relaxed);
        };
        probing(true);
        self.sent();
        let answer = match within(self.channel.queue_declare(args), &context).await {
            Ok(Ok(declared)) => {
                Ok(Some(declared.map_or((0, 0), |(_, messages, consumers)| {
                    (messages, consumers)
                })))
            }
            // The close, if any, comes while still probing.
            Ok(Err(err)) => match self.close_of_failed_call().await {
                Some(close) if close.code == code::NOT_FOUND => Ok(None),
                Some(close) => Err(from_close(close, &context)),
                None => Err(from_client(err, &context)),
            },
            Err(timeout) => Err(timeout),
        };
        probing(false);
        answer
    }

    /// Deletes a queue if it holds no ready message and has no consumer (so none holds an
    /// unacked one): `true` once it is gone (now, or it was absent), `false` when it is not
    /// idle. Checked with a passive declare just before an unconditional delete, since quorum
    /// queues refuse `if-empty` and `if-unused` (RabbitMQ 3.x closes the connection for
    /// them); the caller makes sure nothing routes to the queue any more.
    pub(crate) async fn delete_if_idle(&self, name: &str) -> Result<bool, TransportError> {
        match self.queue_state(name).await? {
            None => return Ok(true),
            Some((0, 0)) => {}
            Some((messages, consumers)) => {
                tracing::info!(
                    queue = name,
                    messages,
                    consumers,
                    "queue not deleted: not empty or in use"
                );
                return Ok(false);
            }
        }
        let args = QueueDeleteArguments::new(name);
        let context = format!("deleting queue `{name}`");
        match within(self.channel.queue_delete(args), &context).await? {
            Ok(deleted) => {
                let messages = deleted.unwrap_or(0);
                if messages > 0 {
                    // Only one published after the check, which the caller rules out.
                    tracing::error!(queue = name, messages, "deleted a queue that was not empty");
                } else {
                    tracing::info!(queue = name, "deleted an empty, unused queue");
                }
                Ok(true)
            }
            Err(err) => match self.close_of_failed_call().await {
                Some(close) if close.code == code::NOT_FOUND => Ok(true),
                Some(close) => Err(from_close(close, &context)),
                None => Err(from_client(err, &context)),
            },
        }
    }

    /// Whether an exchange exists (a passive declare, which needs no permission); a missing
    /// one closes the channel (`404 NOT_FOUND`), so the channel is of no further use then.
    pub(crate) async fn exchange_exists(&self, name: &str) -> Result<bool, TransportError> {
        check_short("an exchange name", name)?;
        let mut args = ExchangeDeclareArguments::new(name, "topic");
        args.passive = true;
        let context = format!("looking for exchange `{name}`");
        self.closed
            .probing
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.sent();
        let answer = within(self.channel.exchange_declare(args), &context).await;
        let answer = match answer {
            Ok(Err(err)) => {
                // The close, if any, comes while still probing.
                let close = self.close_of_failed_call().await;
                self.closed
                    .probing
                    .store(false, std::sync::atomic::Ordering::Relaxed);
                return match close {
                    Some(close) if close.code == code::NOT_FOUND => Ok(false),
                    Some(close) => Err(from_close(close, &context)),
                    None => Err(from_client(err, &context)),
                };
            }
            other => other,
        };
        self.closed
            .probing
            .store(false, std::sync::atomic::Ordering::Relaxed);
        // Here the declare succeeded, or the broker did not answer in time.
        answer.map(|_| true)
    }

    /// Whether the channel is still open (a refused declaration closes it).
    pub(crate) fn is_open(&self) -> bool {
        self.channel.is_open()
    }

    /// Closes the channel (a no-op if the broker already did).
    pub(crate) async fn close(self) {
        if self.channel.is_open() {
            if let Err(e) = self.channel.close().await {
                tracing::debug!(error = %EscapedDisplay(&e), "closing a declare channel failed");
            }
        }
    }
}

/// Makes sure a durable queue exists as `decl` declares it. The declaration is tried first,
/// so a user with `configure` on the queue learns of a queue with other arguments
/// (`Incompatible`); one the broker refuses (`403`: the access plan gives a module's user no
/// `configure` on durable queues, which `mesh topology apply` declares) is looked for with a
/// passive declare, which needs no permission: it is enough that the queue exists, and the
/// refusal is then neither counted nor reported. A queue that is missing fails with the
/// refusal. `declare` is replaced by a fresh channel (from `open`) whenever the broker
/// closed it.
pub(crate) async fn ensure_queue<F, Fut>(
    declare: &mut DeclareChannel,
    decl: &QueueDecl,
    open: F,
) -> Result<(), TransportError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<DeclareChannel, TransportError>>,
{
    use std::sync::atomic::Ordering;
    if !declare.is_open() {
        *declare = open().await?;
    }
    declare
        .closed
        .refusal_expected
        .store(true, Ordering::Relaxed);
    let declared = declare.queue(decl).await;
    declare
        .closed
        .refusal_expected
        .store(false, Ordering::Relaxed);
    let refusal = match declared {
        Ok(()) => return Ok(()),
        Err(error) if matches!(error.kind(), TransportErrorKind::Forbidden { .. }) => error,
        Err(error) => return Err(error),
    };
    // The refusal closed the channel.
    *declare = open().await?;
    match declare.queue_state(&decl.name).await? {
        Some(_) => {
            tracing::debug!(queue = %EscapedDisplay(&decl.name), "queue declared by the operator, found");
            Ok(())
        }
        None => {
            // The probe's `404` closed that channel too.
            *declare = open().await?;
            Err(TransportError::new(
                refusal.kind().clone(),
                format!(
                    "{refusal}; the queue does not exist and this user may not declare it \
                     (under the access plan, `mesh topology apply` declares it)"
                ),
            ))
        }
    }
}

/// Makes sure an exchange exists: a passive declare first, which needs no permission (so a
/// module user of the access plan, with no `configure` on mesh's exchanges, starts when the
/// operator declared them), and a declaration only when it is missing. `declare` is the
/// channel to use, or `None`; `open` opens a fresh one (a missing exchange closes the channel
/// the passive declare went on). Returns the channel for the next declaration (`None` when it
/// was closed).
pub(crate) async fn ensure_exchange<F, Fut>(
    declare: Option<DeclareChannel>,
    decl: &ExchangeDecl,
    open: F,
) -> (Result<(), TransportError>, Option<DeclareChannel>)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<DeclareChannel, TransportError>>,
{
    let declare = match declare {
        Some(declare) if declare.is_open() => declare,
        _ => match open().await {
            Ok(declare) => declare,
            Err(error) => return (Err(error), None),
        },
    };
    match declare.exchange_exists(&decl.name).await {
        Ok(true) => (Ok(()), Some(declare)),
        Ok(false) => {
            let declare = match open().await {
                Ok(declare) => declare,
                Err(error) => return (Err(error), None),
            };
            let declared = declare.exchange(decl).await;
            (declared, Some(declare))
        }
        Err(error) => (Err(error), Some(declare)),
    }
}
