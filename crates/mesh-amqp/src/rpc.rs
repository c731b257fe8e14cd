//! The caller's side of request/reply: one reply queue per transport and the calls waiting on
//! it.
//!
//! The reply queue is exclusive, auto-delete and server-named, bound to `mesh.replies`
//! (topic) under its reply key `<user>.<queue>` (the transport's broker user, then the
//! queue's name: the access plan lets a user bind there only under its own name), which is
//! the requests' `reply_to`, and consumed with `no_ack` on the consume connection. While the
//! retired direct `mesh.reply` exists (a deployment not yet migrated, where servers of an
//! earlier version answer there), the queue is bound there under its reply key too, on a
//! channel of its own, where a refusal or a missing exchange is an answer, not a fault. It is created on the first call and again once it is gone (its
//! connection or channel was lost), since its name dies with it. Each call waits under a
//! fresh correlation id; a reply nobody waits for any more (the call timed out, or it is a
//! duplicate) is dropped and counted, and so is a delivery that did not come through
//! `mesh.replies` or `mesh.reply` (or the default exchange, an earlier server's way) under
//! the queue's reply key (`AmqpStats::foreign_deliveries`).
//!
//! Calls are not retried through failures: a reply can only come to the queue the request
//! named. When the reply queue is lost, every call waiting on it fails at once with
//! `ConnectionLost` (each also watches the queue's liveness, so a call that registered just
//! as the queue died cannot be missed), and the next call creates a new queue once the link
//! is up again. A request still unconfirmed when the publishing connection is lost is not
//! resent either: its call fails with `ConnectionLost`.
//!
//! A call whose reply is slow to come ([`NO_SERVER_CHECK`]) asks the broker whether anything
//! consumes the tool's serve queue (a passive `queue.declare`, which needs no permission, on
//! a channel of its own): a serve queue nobody consumes fails the call with `NoServer` then,
//! instead of at its timeout.

use mesh_core::text::EscapedDisplay;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use mesh_core::naming::{self, REPLY_EXCHANGE, RETIRED_REPLY_EXCHANGE};
use mesh_core::{ToolKey, TransportError, TransportErrorKind, WireMessage, NO_SERVER_CHECK};
use tokio::sync::{oneshot, watch};
use tracing::Instrument;

use crate::connection::link::ConsumeLink;
use crate::consumer::consume;
use crate::declare::DeclareChannel;
use crate::topology::BindingDecl;

type Waiter = oneshot::Sender<Result<WireMessage, TransportError>>;
type Waiters = Arc<Mutex<HashMap<String, Waiter>>>;

/// The reply queue and the calls waiting on it.
#[derive(Debug, Default)]
pub(crate) struct Rpc {
    reply_queue: tokio::sync::Mutex<Option<ReplyQueue>>,
    waiters: Waiters,
    late_replies: Arc<AtomicU64>,
}

#[derive(Debug)]
struct ReplyQueue {
    /// Its reply key (`<user>.<queue>`), the requests' `reply_to`.
    key: String,
    alive: watch::Receiver<bool>,
}

/// A call waiting for its reply; dropped (the call returned or was cancelled), it stops
/// waiting, and a reply arriving later counts as late.
pub(crate) struct PendingCall {
    waiters: Waiters,
    correlation_id: String,
    reply: oneshot::Receiver<Result<WireMessage, TransportError>>,
}

impl PendingCall {
    /// The reply, or why none will come: the reply queue `alive` watches was lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a reply arriving later is kept for the next call of this method.
    pub(crate) async fn reply(
        &mut self,
        alive: &mut watch::Receiver<bool>,
    ) -> Result<WireMessage, TransportError> {
        let gone = || {
            Err(TransportError::new(
                TransportErrorKind::ConnectionLost,
                "the reply queue was lost",
            ))
        };
        tokio::select! {
            biased;
            reply = &mut self.reply => reply.unwrap_or_else(|_| gone()),
            _ = alive.wait_for(|alive| !*alive) => {
                // A reply that raced the loss still counts.
                self.reply.try_recv().unwrap_or_else(|_| gone())
            }
        }
    }
}

impl Drop for PendingCall {
    fn drop(&mut self) {
        if let Ok(mut waiters) = self.waiters.lock() {
            waiters.remove(&self.correlation_id);
        }
    }
}

impl Rpc {
    /// Replies that arrived for no waiting call.
    pub(crate) fn late_replies(&self) -> u64 {
        self.late_replies.load(Ordering::Relaxed)
    }

    /// Registers a call under `correlation_id`; register before publishing, as a reply
    /// may come before the publish confirm.
    pub(crate) fn wait_for(&self, correlation_id: String) -> PendingCall {
        let (waiter, reply) = oneshot::channel();
        if let Ok(mut waiters) = self.waiters.lock() {
            waiters.insert(correlation_id.clone(), waiter);
        }
        PendingCall {
            waiters: self.waiters.clone(),
            correlation_id,
            reply,
        }
    }

    /// The reply queue's reply key (the requests' `reply_to`) and a watch of its liveness,
    /// creating the queue if there is none alive. `user` is the transport's broker user.
    pub(crate) async fn reply_queue(
        &self,
        link: &ConsumeLink,
        user: &str,
        shutdown: watch::Receiver<bool>,
    ) -> Result<(String, watch::Receiver<bool>), TransportError> {
        let mut current = self.reply_queue.lock().await;
        if let Some(queue) = current.as_ref() {
            if *queue.alive.borrow() {
                return Ok((queue.key.clone(), queue.alive.clone()));
            }
        }
        let (channel, closed) = link.channel("rpc-reply").await?;
        let declare = DeclareChannel::wrap(channel.clone(), closed.clone());
        let declared = async {
            let name = declare.server_named().await?;
            let key = naming::reply_key(user, &name);
            // Servers reply through `mesh.replies` under this key (never through the default
            // exchange, which restricted users cannot write to).
            declare
                .bind(&BindingDecl::new(REPLY_EXCHANGE, &name, &key))
                .await?;
            bind_retired(link, &name, &key).await;
            let consumer = consume(channel, closed, &name, 0, false).await?;
            Ok::<_, TransportError>((key, consumer))
        }
        .await;
        let (key, consumer) = match declared {
            Ok(declared) => declared,
            Err(error) => {
                declare.close().await;
                return Err(error);
            }
        };
        let (alive_tx, alive) = watch::channel(true);
        let span =
            tracing::debug_span!(parent: None, "mesh_amqp.replies", key = %EscapedDisplay(&key));
        // Tracked: the transport's close waits for it to have closed its channel.
        link.shared().channel_tasks.spawn(
            receive_replies(
                consumer,
                key.clone(),
                self.waiters.clone(),
                self.late_replies.clone(),
                link.shared().clone(),
                alive_tx,
                shutdown,
            )
            .instrument(span),
        );
        tracing::debug!(key = %EscapedDisplay(&key), "reply queue ready");
        *current = Some(ReplyQueue {
            key: key.clone(),
            alive: alive.clone(),
        });
        Ok((key, alive))
    }
}

/// Binds the reply queue `queue` under `key` on the retired `mesh.reply` too, when it still
/// exists and the user may (servers of an earlier version publish replies there under the
/// `reply_to`), on a channel of its own: a missing exchange or a refusal closes it, and is
/// an answer (the deployment was migrated), not a fault.
async fn bind_retired(link: &ConsumeLink, queue: &str, key: &str) {
    let Ok((channel, closed)) = link.channel("rpc-reply-retired").await else {
        return;
    };
    let declare = DeclareChannel::wrap(channel, closed);
    if let Ok(true) = declare.exchange_exists(RETIRED_REPLY_EXCHANGE).await {
        match declare
            .bind_if_allowed(&BindingDecl::new(RETIRED_REPLY_EXCHANGE, queue, key))
            .await
        {
            Ok(true) => tracing::debug!("reply queue bound on the retired `mesh.reply` too"),
            Ok(false) => tracing::debug!("this user may not bind on the retired `mesh.reply`"),
            Err(error) => {
                tracing::debug!(error = %EscapedDisplay(&error), "binding on the retired `mesh.reply` failed")
            }
        }
    }
    declare.close().await;
}

/// Hands each reply to the call waiting under its correlation id.
async fn receive_replies(
    mut consumer: crate::consumer::Consumer,
    key: String,
    waiters: Waiters,
    late: Arc<AtomicU64>,
    shared: Arc<crate::lifecycle::TransportShared>,
    alive: watch::Sender<bool>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let message = tokio::select! {
            message = consumer.stream.recv() => message,
            () = crate::consumer::closing(&mut shutdown) => None,
        };
        let Some(message) = message else { break };
        let (Some(deliver), properties) = (message.deliver, message.basic_properties) else {
            continue;
        };
        // A reply is one only through `mesh.replies` (or the retired `mesh.reply`, where
        // servers of an earlier version reply) under this queue's reply key, or through the
        // default exchange under its name (older servers still; only the operator may write
        // there under the access plan): anything else (an exchange-to-exchange binding into
        // a reply exchange, a foreign publisher) cannot be mesh's, and its headers would be
        // believed.
        let exchange = deliver.exchange().as_str();
        let by_reply_path = match exchange {
            REPLY_EXCHANGE | RETIRED_REPLY_EXCHANGE => deliver.routing_key() == &key,
            "" => deliver.routing_key() == &consumer.queue,
            _ => false,
        };
        if !by_reply_path {
            crate::lifecycle::Counters::bump(&shared.counters.foreign_deliveries);
            tracing::warn!(
                exchange = %EscapedDisplay(deliver.exchange()),
                key = %EscapedDisplay(deliver.routing_key()),
                "dropped a delivery to the reply queue that did not come through `mesh.replies` \
                 under its reply key"
            );
            continue;
        }
        let reply = crate::convert::delivered(
            deliver.exchange(),
            deliver.routing_key().clone(),
            &mut properties.unwrap_or_default(),
            message.content.unwrap_or_default(),
        );
        let waiter = reply
            .properties
            .correlation_id
            .as_ref()
            .and_then(|id| waiters.lock().ok().and_then(|mut w| w.remove(id)));
        match waiter {
            Some(waiter) => {
                let _ = waiter.send(Ok(reply));
            }
            None => {
                late.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(
                    correlation_id = ?reply.properties.correlation_id,
                    "dropped a reply nobody waits for"
                );
            }
        }
    }
    // The queue is gone with its channel: the calls waiting on it cannot be answered. Marked
    // dead first, so a call registering from now on sees it.
    alive.send_replace(false);
    let orphans: Vec<Waiter> = match waiters.lock() {
        Ok(mut waiters) => waiters.drain().map(|(_, w)| w).collect(),
        Err(_) => Vec::new(),
    };
    for waiter in orphans {
        let _ = waiter.send(Err(TransportError::new(
            TransportErrorKind::ConnectionLost,
            "the reply queue was lost",
        )));
    }
    if consumer.channel.is_open() {
        let _ = crate::declare::within(consumer.channel.close(), "closing the reply channel").await;
    }
    tracing::debug!("reply queue ended");
}

/// Whether nothing serves `tool` now: `Some(NoServer)` when its serve queue has no consumer
/// (or is gone), `None` when a server consumes it, or when the broker could not say by
/// `deadline` (the call then waits on as it would have).
///
/// The passive declare runs on a task the transport's close waits for, so its channel is
/// closed even when the call stops waiting first.
pub(crate) async fn unserved(
    link: &ConsumeLink,
    tool: &ToolKey,
    deadline: tokio::time::Instant,
) -> Option<TransportError> {
    let queue = naming::serve_queue(tool);
    let (answer, answered) = oneshot::channel();
    let probe_link = link.clone();
    let probe_queue = queue.clone();
    link.shared().channel_tasks.spawn(async move {
        let state = match probe_link.declare_channel().await {
            Ok(declare) => {
                let state = declare.queue_state(&probe_queue).await;
                declare.close().await;
                state
            }
            Err(error) => Err(error),
        };
        let _ = answer.send(state);
    });
    match tokio::time::timeout_at(deadline, answered).await {
        Ok(Ok(Ok(Some((_, 0))))) => Some(TransportError::new(
            TransportErrorKind::NoServer,
            format!(
                "no server is consuming `{queue}`: nothing answered `{tool}` in {NO_SERVER_CHECK:?}"
            ),
        )),
        Ok(Ok(Ok(None))) => Some(TransportError::new(
            TransportErrorKind::NoServer,
            format!("the serve queue `{queue}` is gone"),
        )),
        Ok(Ok(Ok(Some(_)))) => None,
        Ok(Ok(Err(error))) => {
            tracing::debug!(
                queue = %EscapedDisplay(&queue),
                error = %EscapedDisplay(&error),
                "cannot tell whether a server consumes the queue"
            );
            None
        }
        Ok(Err(_)) | Err(_) => None,
    }
}
