//! Attaching a consumer: a new channel of the consume link, its queue declared again from
//! the recorded topology when asked (or a server-named one bound to its patterns), the
//! prefetch set, and `basic.consume`; and what attaching needs from the transport.

use mesh_core::text::EscapedDisplay;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};

use amqprs::channel::{BasicConsumeArguments, BasicQosArguments, Channel, ConsumerMessage};
use mesh_core::TransportError;
use tokio::sync::{mpsc, watch};

use crate::connection::backoff::Backoff;
use crate::connection::link::ConsumeLink;
use crate::declare::{take_close, within, CloseSlot, DeclareChannel};
use crate::error::{from_client, from_close};
use crate::publisher::Publisher;
use crate::topology::{BindingDecl, Topology};

use super::acker::SubscriptionCtx;
use super::path::Arrival;

/// Consumers the transport should have, and has, attached.
#[derive(Debug, Default)]
pub(crate) struct ConsumerCounts {
    pub(crate) expected: AtomicUsize,
    pub(crate) attached: AtomicUsize,
}

/// What a subscription consumes.
#[derive(Debug, Clone)]
pub(crate) enum Source {
    /// A named queue of the recorded topology (consumer, serve or dead-letter queue).
    Named(String),
    /// A server-named queue bound to these patterns on this exchange (`mesh.events`, or
    /// `mesh.events.dead` for a tap of dead letters), declared anew for each attachment.
    Ephemeral {
        exchange: &'static str,
        patterns: Vec<String>,
    },
}

/// How to attach one subscription, again and again.
#[derive(Debug, Clone)]
pub(crate) struct AttachSpec {
    pub(crate) source: Source,
    pub(crate) prefetch: u16,
    pub(crate) manual_ack: bool,
    pub(crate) delay_queues: Vec<String>,
    pub(crate) counts_deliveries: bool,
    /// Which paths its deliveries may come by (see [`super::path`]).
    pub(crate) arrival: Arrival,
}

/// What attaching needs from the transport.
#[derive(Debug, Clone)]
pub(crate) struct Env {
    pub(crate) link: ConsumeLink,
    pub(crate) publisher: Publisher,
    pub(crate) topology: Arc<Mutex<Topology>>,
    pub(crate) counts: Arc<ConsumerCounts>,
    pub(crate) shutdown: watch::Receiver<bool>,
    pub(crate) backoff: Backoff,
    /// Whether its consumers' stops and re-attaches count in the transport's stats (a
    /// subscription's do; retry forwarders' do not, like their health).
    pub(crate) in_stats: bool,
}

/// A channel consuming one queue.
pub(crate) struct Consumer {
    pub(crate) queue: String,
    pub(crate) channel: Channel,
    pub(crate) closed: CloseSlot,
    pub(crate) consumer_tag: String,
    pub(crate) stream: mpsc::UnboundedReceiver<ConsumerMessage>,
    pub(crate) manual_ack: bool,
}

/// Sets the prefetch and starts consuming `queue` on `channel`.
pub(crate) async fn consume(
    channel: Channel,
    closed: CloseSlot,
    queue: &str,
    prefetch: u16,
    manual_ack: bool,
) -> Result<Consumer, TransportError> {
    let failed = |err: amqprs::error::Error, context: &str| match take_close(&closed) {
        Some(close) => from_close(close, context),
        None => from_client(err, context),
    };
    if manual_ack {
        // Never global: global QoS on a quorum queue closes the connection.
        within(
            channel.basic_qos(BasicQosArguments::new(0, prefetch, false)),
            "setting the prefetch",
        )
        .await?
        .map_err(|e| failed(e, "setting the prefetch"))?;
    }
    // An empty tag lets the broker choose one; the client library registers that one.
    let args = BasicConsumeArguments::new(queue, "")
        .manual_ack(manual_ack)
        .finish();
    let context = format!("consuming `{queue}`");
    let (consumer_tag, stream) = within(channel.basic_consume_rx(args), &context)
        .await?
        .map_err(|e| failed(e, &context))?;
    tracing::info!(queue, consumer = %EscapedDisplay(&consumer_tag), prefetch, manual_ack, "consumer attached");
    Ok(Consumer {
        queue: queue.to_owned(),
        channel,
        closed,
        consumer_tag,
        stream,
        manual_ack,
    })
}

/// Attaches `spec` on a new channel of the consume link. With `redeclare`, a named queue,
/// its retry queues and its bindings are declared again first, from the recorded topology.
pub(super) async fn attach(
    env: &Env,
    spec: &AttachSpec,
    redeclare: bool,
) -> Result<(Consumer, Arc<SubscriptionCtx>), TransportError> {
    let (channel, closed) = env.link.channel("consume").await?;
    let declare = DeclareChannel::wrap(channel.clone(), closed.clone());
    let attached = async {
        let queue = match &spec.source {
            Source::Named(queue) => {
                if redeclare {
                    redeclare_queue(&env.link, queue, &spec.delay_queues, &env.topology).await?;
                }
                queue.clone()
            }
            Source::Ephemeral { exchange, patterns } => {
                let name = declare.server_named().await?;
                for pattern in patterns {
                    declare
                        .bind(&BindingDecl::new(*exchange, &name, pattern))
                        .await?;
                }
                name
            }
        };
        consume(
            channel.clone(),
            closed.clone(),
            &queue,
            spec.prefetch,
            spec.manual_ack,
        )
        .await
    }
    .await;
    match attached {
        Ok(consumer) => {
            let ctx = Arc::new(SubscriptionCtx {
                queue: consumer.queue.clone(),
                delay_queues: spec.delay_queues.clone(),
                counts_deliveries: spec.counts_deliveries,
                publisher: env.publisher.clone(),
                arrival: spec.arrival,
                shared: env.link.shared().clone(),
            });
            Ok((consumer, ctx))
        }
        Err(error) => {
            declare.close().await;
            Err(error)
        }
    }
}

/// Declares a named queue, its retry queues and its bindings as the topology records them,
/// on a declare channel of their own (a queue the user may not declare closes the channel
/// its declaration went on, see [`crate::declare::ensure_queue`]).
async fn redeclare_queue(
    link: &ConsumeLink,
    queue: &str,
    delay_queues: &[String],
    topology: &Mutex<Topology>,
) -> Result<(), TransportError> {
    let (queues, bindings) = match topology.lock() {
        Ok(topology) => (
            std::iter::once(queue)
                .chain(delay_queues.iter().map(String::as_str))
                .filter_map(|name| topology.queue(name).cloned())
                .collect::<Vec<_>>(),
            topology.bindings_of(queue).cloned().collect::<Vec<_>>(),
        ),
        Err(_) => return Ok(()),
    };
    if queues.is_empty() && bindings.is_empty() {
        return Ok(());
    }
    let mut declare = link.declare_channel().await?;
    let declared = async {
        for decl in &queues {
            crate::declare::ensure_queue(&mut declare, decl, || link.declare_channel()).await?;
        }
        for binding in &bindings {
            declare.bind(binding).await?;
        }
        Ok(())
    }
    .await;
    declare.close().await;
    declared
}

/// Resolves once the transport is closing (or gone).
pub(crate) async fn closing(shutdown: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns must not live across an await of the caller.
    let _ = shutdown.wait_for(|closing| *closing).await;
}
