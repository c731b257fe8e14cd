//! The publish side: one task owns the publishing connection and its confirm channel.
//!
//! # Design
//!
//! [`Publisher`] is a cheap handle. A publish first takes a permit of the *unconfirmed
//! window* (a semaphore of `confirm_window` permits): waiting for one is the backpressure,
//! bounded by the publish deadline ([`Backpressure`](TransportErrorKind::Backpressure)). The
//! message then goes, with its permit, through a bounded queue to the [`PublishTask`], and the
//! caller gets a [`Confirm`] to await now, later or never.
//!
//! The task owns the connection (`<prefix>.publish`, its own connection because RabbitMQ
//! blocks publishing connections during alarms, which must not stall consumers) and one
//! channel in confirm mode. It numbers each `basic.publish` as the broker does (1, 2, … from
//! `confirm.select`) and keeps the message in the window map *sequence number → message,
//! responder, permit* until the broker settles it:
//!
//! - `basic.ack` (with `multiple`, everything up to the tag) → `Ok`, or
//!   [`Unroutable`](TransportErrorKind::Unroutable) if a `basic.return` for that message came
//!   first (the broker returns before it acks);
//! - `basic.nack` → [`Nacked`](TransportErrorKind::Nacked);
//! - the channel or the connection is lost → [`ConnectionLost`](TransportErrorKind::ConnectionLost).
//!
//! Settling drops the entry and so frees its permit. The window holds the whole message (not
//! only its responder) so that recovery can publish it again on a new channel, in order,
//! after a reconnect; until then a loss fails what is in flight.
//!
//! A `basic.return` carries no sequence number, so it is matched to the oldest unsettled,
//! not yet returned, mandatory message with the same exchange, routing key, message id,
//! correlation id and body: returns come in publish order, and messages that equal in all of
//! that are interchangeable.
//!
//! Channel callbacks of the client library run on its own tasks; they only forward
//! [`Event`]s, tagged with the channel's generation so that late events of a replaced channel
//! are ignored.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use amqprs::callbacks::ChannelCallback;
use amqprs::channel::{BasicPublishArguments, Channel, ConfirmSelectArguments};
use amqprs::connection::Connection;
use amqprs::{Ack, BasicProperties, Cancel, CloseChannel, Nack, Return};
use mesh_core::{Confirm, TransportError, TransportErrorKind, WireMessage};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tracing::Instrument;

use crate::connection::{self, LinkState};
use crate::convert::{check_short, from_delivery, to_properties};
use crate::declare::within;
use crate::error::{from_client, from_close, BrokerClose};
use crate::options::AmqpOptions;

/// A message to publish, with where to.
#[derive(Debug)]
pub(crate) struct Outgoing {
    /// The exchange (`""` is the default exchange).
    pub(crate) exchange: String,
    /// The routing key used for this publish (a queue name on the default exchange).
    pub(crate) routing_key: String,
    /// The message.
    pub(crate) message: WireMessage,
    /// Whether an unroutable message is returned.
    pub(crate) mandatory: bool,
    /// Send it persistent whatever it says (retry and dead-letter copies).
    pub(crate) force_persistent: bool,
}

/// Counters of the publish side.
#[derive(Debug, Default)]
pub(crate) struct PublishStats {
    /// `basic.return`s that matched no unsettled mandatory publish.
    pub(crate) unmatched_returns: AtomicU64,
}

type Responder = oneshot::Sender<Result<(), TransportError>>;

/// One publish on its way to, or in, the window.
struct Pending {
    outgoing: Outgoing,
    properties: BasicProperties,
    responder: Responder,
    /// Its place in the window, released when it is settled.
    _permit: OwnedSemaphorePermit,
}

/// A published message waiting for the broker.
struct Unconfirmed {
    pending: Box<Pending>,
    /// A `basic.return` came for it: its ack means "unroutable".
    returned: Option<BrokerClose>,
}

enum Command {
    Publish(Box<Pending>),
    Close(oneshot::Sender<()>),
}

/// What the channel callbacks report.
enum Event {
    Ack {
        generation: u64,
        tag: u64,
        multiple: bool,
    },
    Nack {
        generation: u64,
        tag: u64,
        multiple: bool,
    },
    Return {
        generation: u64,
        exchange: String,
        code: u16,
        text: String,
        message: Box<WireMessage>,
    },
    Closed {
        generation: u64,
        close: BrokerClose,
    },
}

/// The handle to the publish task.
#[derive(Clone)]
pub(crate) struct Publisher {
    commands: mpsc::Sender<Command>,
    window: Arc<Semaphore>,
    max_message_size: usize,
    default_deadline: Option<Duration>,
    state: Arc<LinkState>,
    stats: Arc<PublishStats>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("room", &self.window.available_permits())
            .field("connected", &self.state.connected())
            .finish_non_exhaustive()
    }
}

impl Publisher {
    /// Opens the publishing connection and starts its task.
    pub(crate) async fn start(options: &AmqpOptions) -> Result<Publisher, TransportError> {
        let state = Arc::new(LinkState::default());
        let connection = connection::open(options, "publish", state.clone()).await?;
        let window = Arc::new(Semaphore::new(options.get_confirm_window()));
        // Every queued publish holds a permit, so the queue never holds more than the
        // window; the extra room is for `Close`.
        let (commands_tx, commands) = mpsc::channel(options.get_confirm_window() + 4);
        let (events_tx, events) = mpsc::unbounded_channel();
        let stats = Arc::new(PublishStats::default());
        let task = PublishTask {
            connection,
            connected: true,
            state: state.clone(),
            stats: stats.clone(),
            commands,
            window_semaphore: window.clone(),
            events_tx,
            events,
            channel: None,
            generation: 0,
            next_seq: 1,
            window: BTreeMap::new(),
        };
        let span = tracing::info_span!(
            "mesh_amqp.publisher",
            connection = %format!("{}.publish", options.get_connection_name())
        );
        tokio::spawn(task.run().instrument(span));
        Ok(Publisher {
            commands: commands_tx,
            window,
            max_message_size: options.get_max_message_size(),
            default_deadline: options.get_publish_deadline(),
            state,
            stats,
        })
    }

    /// The connection's state.
    pub(crate) fn state(&self) -> &LinkState {
        &self.state
    }

    /// The counters.
    pub(crate) fn stats(&self) -> &PublishStats {
        &self.stats
    }

    /// Publishes `outgoing`: resolves once it is in the unconfirmed window, with the
    /// [`Confirm`] of the broker's answer. `deadline` (or else the default) bounds the wait
    /// for room plus the wait for the confirm.
    ///
    /// # Cancel safety
    ///
    /// Dropped while waiting for room, nothing is published. Once it resolved, the message
    /// is published whatever happens to the `Confirm`.
    pub(crate) async fn publish(
        &self,
        outgoing: Outgoing,
        deadline: Option<Duration>,
    ) -> Result<Confirm, TransportError> {
        let deadline = deadline
            .or(self.default_deadline)
            .map(|d| Instant::now() + d);
        // RabbitMQ counts the body against `max_message_size`; refuse here rather than
        // have the broker close the channel (and with it every publish in flight).
        let size = outgoing.message.body.len();
        if size > self.max_message_size {
            return Err(TransportError::new(
                TransportErrorKind::TooLarge {
                    size,
                    max: Some(self.max_message_size),
                },
                format!("publishing to `{}`", outgoing.routing_key),
            ));
        }
        let mut outgoing = outgoing;
        crate::convert::stamp_routing_key(&mut outgoing.message, &outgoing.routing_key);
        check_short("an exchange name", &outgoing.exchange)?;
        check_short("a routing key", &outgoing.routing_key)?;
        let properties = to_properties(&outgoing.message, outgoing.force_persistent)?;

        let room = self.window.clone().acquire_owned();
        let permit = match deadline {
            Some(at) => tokio::time::timeout_at(at, room).await.map_err(|_| {
                TransportError::new(
                    TransportErrorKind::Backpressure,
                    "no room in the unconfirmed window before the deadline",
                )
            })?,
            None => room.await,
        }
        .map_err(|_| closed())?;

        let (responder, outcome) = oneshot::channel();
        let pending = Box::new(Pending {
            outgoing,
            properties,
            responder,
            _permit: permit,
        });
        self.commands
            .send(Command::Publish(pending))
            .await
            .map_err(|_| closed())?;
        Ok(Confirm::new(async move {
            let outcome = match deadline {
                Some(at) => match tokio::time::timeout_at(at, outcome).await {
                    Ok(outcome) => outcome,
                    Err(_) => {
                        return Err(TransportError::new(
                            TransportErrorKind::Timeout,
                            "no confirm from the broker before the deadline",
                        ))
                    }
                },
                None => outcome.await,
            };
            outcome.unwrap_or_else(|_| Err(closed()))
        }))
    }

    /// Stops the task: the window is failed with `Closed`, the channel and the connection
    /// are closed.
    pub(crate) async fn close(&self) {
        // Waiters for room learn at once; the task fails what it holds.
        self.window.close();
        let (done, finished) = oneshot::channel();
        if self.commands.send(Command::Close(done)).await.is_ok() {
            let _ = finished.await;
        }
    }
}

fn closed() -> TransportError {
    TransportError::new(TransportErrorKind::Closed, "publishing")
}

/// The publish channel's callbacks: forward everything to the task.
struct PublishCallback {
    generation: u64,
    events: mpsc::UnboundedSender<Event>,
}

#[async_trait::async_trait]
impl ChannelCallback for PublishCallback {
    async fn close(
        &mut self,
        _channel: &Channel,
        close: CloseChannel,
    ) -> Result<(), amqprs::error::Error> {
        let _ = self.events.send(Event::Closed {
            generation: self.generation,
            close: BrokerClose {
                code: close.reply_code(),
                text: close.reply_text().clone(),
            },
        });
        Ok(())
    }

    async fn cancel(
        &mut self,
        _channel: &Channel,
        _cancel: Cancel,
    ) -> Result<(), amqprs::error::Error> {
        Ok(())
    }

    async fn flow(
        &mut self,
        _channel: &Channel,
        active: bool,
    ) -> Result<bool, amqprs::error::Error> {
        Ok(active)
    }

    async fn publish_ack(&mut self, _channel: &Channel, ack: Ack) {
        let _ = self.events.send(Event::Ack {
            generation: self.generation,
            tag: ack.delivery_tag(),
            multiple: ack.mutiple(),
        });
    }

    async fn publish_nack(&mut self, _channel: &Channel, nack: Nack) {
        let _ = self.events.send(Event::Nack {
            generation: self.generation,
            tag: nack.delivery_tag(),
            multiple: nack.multiple(),
        });
    }

    async fn publish_return(
        &mut self,
        _channel: &Channel,
        ret: Return,
        properties: BasicProperties,
        content: Vec<u8>,
    ) {
        let _ = self.events.send(Event::Return {
            generation: self.generation,
            exchange: ret.exchange().clone(),
            code: ret.reply_code(),
            text: ret.reply_text().clone(),
            message: Box::new(from_delivery(
                ret.routing_key().clone(),
                &properties,
                content,
            )),
        });
    }
}

/// The confirm channel the task publishes on, and its generation.
struct PublishChannel {
    channel: Channel,
    generation: u64,
}

/// The task that owns the publishing connection; see the module docs.
struct PublishTask {
    connection: Connection,
    connected: bool,
    state: Arc<LinkState>,
    stats: Arc<PublishStats>,
    commands: mpsc::Receiver<Command>,
    window_semaphore: Arc<Semaphore>,
    events_tx: mpsc::UnboundedSender<Event>,
    events: mpsc::UnboundedReceiver<Event>,
    channel: Option<PublishChannel>,
    /// The generation of the newest channel; events of older ones are stale.
    generation: u64,
    /// The sequence number the broker gives the next publish on the channel.
    next_seq: u64,
    window: BTreeMap<u64, Unconfirmed>,
}

impl PublishTask {
    async fn run(mut self) {
        let connection = self.connection.clone();
        let lost = connection::lost(&connection);
        tokio::pin!(lost);
        loop {
            tokio::select! {
                biased;
                Some(event) = self.events.recv() => self.on_event(event),
                () = &mut lost, if self.connected => self.on_connection_lost(),
                command = self.commands.recv() => match command {
                    Some(Command::Publish(pending)) => self.publish(pending).await,
                    Some(Command::Close(done)) => {
                        self.shutdown().await;
                        let _ = done.send(());
                        return;
                    }
                    // Every handle is gone: nobody can publish or learn an outcome.
                    None => break,
                },
            }
        }
        self.shutdown().await;
    }

    async fn publish(&mut self, pending: Box<Pending>) {
        if !self.connected {
            // Recovery will reconnect and keep these in the window instead.
            let _ = pending.responder.send(Err(TransportError::new(
                TransportErrorKind::ConnectionLost,
                "the publishing connection is lost",
            )));
            return;
        }
        let channel = match self.ensure_channel().await {
            Ok(channel) => channel,
            Err(error) => {
                let _ = pending.responder.send(Err(error));
                return;
            }
        };
        let outgoing = &pending.outgoing;
        let args = BasicPublishArguments::new(&outgoing.exchange, &outgoing.routing_key)
            .mandatory(outgoing.mandatory)
            .finish();
        let sent = within(
            channel.basic_publish(
                pending.properties.clone(),
                outgoing.message.body.to_vec(),
                args,
            ),
            "publishing",
        )
        .await
        .and_then(|r| r.map_err(|e| from_client(e, "publishing")));
        match sent {
            Ok(()) => {
                let seq = self.next_seq;
                self.next_seq += 1;
                self.window.insert(
                    seq,
                    Unconfirmed {
                        pending,
                        returned: None,
                    },
                );
            }
            Err(error) => {
                // The frame never left: the channel (or connection) is unusable, and the
                // broker's numbering of what did leave is ours no more to trust.
                tracing::warn!(error = %error, "publish failed; dropping the channel");
                let _ = pending.responder.send(Err(error));
                self.drop_channel("the publish channel failed", None);
            }
        }
    }

    /// The open confirm channel, opening one if needed.
    async fn ensure_channel(&mut self) -> Result<Channel, TransportError> {
        if let Some(current) = &self.channel {
            if current.channel.is_open() {
                return Ok(current.channel.clone());
            }
            self.drop_channel("the publish channel closed", None);
        }
        self.generation += 1;
        let generation = self.generation;
        let channel = within(
            self.connection.open_channel(None),
            "opening the publish channel",
        )
        .await?
        .map_err(|e| from_client(e, "opening the publish channel"))?;
        channel
            .register_callback(PublishCallback {
                generation,
                events: self.events_tx.clone(),
            })
            .await
            .map_err(|e| from_client(e, "registering the publish channel callbacks"))?;
        within(
            channel.confirm_select(ConfirmSelectArguments::default()),
            "selecting confirms",
        )
        .await?
        .map_err(|e| from_client(e, "selecting confirms"))?;
        tracing::debug!(
            channel = channel.channel_id(),
            generation,
            "publish channel open, confirms selected"
        );
        self.next_seq = 1;
        self.channel = Some(PublishChannel {
            channel: channel.clone(),
            generation,
        });
        Ok(channel)
    }

    fn current(&self, generation: u64) -> bool {
        self.channel
            .as_ref()
            .is_some_and(|c| c.generation == generation)
    }

    fn on_event(&mut self, event: Event) {
        match event {
            Event::Ack {
                generation,
                tag,
                multiple,
            } if self.current(generation) => self.settle(tag, multiple, true),
            Event::Nack {
                generation,
                tag,
                multiple,
            } if self.current(generation) => self.settle(tag, multiple, false),
            Event::Return {
                generation,
                exchange,
                code,
                text,
                message,
            } if self.current(generation) => self.on_return(&exchange, code, text, &message),
            Event::Closed { generation, close } if self.current(generation) => {
                tracing::warn!(code = close.code, text = %close.text, "broker closed the publish channel");
                self.drop_channel("the broker closed the publish channel", Some(&close));
            }
            _ => tracing::debug!("dropped an event of a replaced publish channel"),
        }
    }

    /// Settles `tag` (and, with `multiple`, everything before it).
    fn settle(&mut self, tag: u64, multiple: bool, acked: bool) {
        let settled: Vec<Unconfirmed> = if multiple {
            let rest = match tag.checked_add(1) {
                Some(next) => self.window.split_off(&next),
                None => BTreeMap::new(),
            };
            std::mem::replace(&mut self.window, rest)
                .into_values()
                .collect()
        } else {
            self.window.remove(&tag).into_iter().collect()
        };
        for entry in settled {
            let outcome = match (acked, entry.returned) {
                (true, None) => Ok(()),
                (true, Some(close)) => Err(TransportError::new(
                    TransportErrorKind::Unroutable,
                    format!(
                        "no queue took `{}` on `{}`",
                        entry.pending.outgoing.routing_key, entry.pending.outgoing.exchange
                    ),
                )
                .with_source(close)),
                (false, _) => Err(TransportError::new(
                    TransportErrorKind::Nacked,
                    format!("publishing `{}`", entry.pending.outgoing.routing_key),
                )),
            };
            let _ = entry.pending.responder.send(outcome);
        }
    }

    fn on_return(&mut self, exchange: &str, code: u16, text: String, returned: &WireMessage) {
        let found = self.window.values_mut().find(|entry| {
            let outgoing = &entry.pending.outgoing;
            let sent = &outgoing.message;
            outgoing.mandatory
                && entry.returned.is_none()
                && outgoing.exchange == exchange
                && outgoing.routing_key == returned.routing_key
                && sent.properties.message_id == returned.properties.message_id
                && sent.properties.correlation_id == returned.properties.correlation_id
                && sent.body == returned.body
        });
        match found {
            Some(entry) => entry.returned = Some(BrokerClose { code, text }),
            None => {
                self.stats.unmatched_returns.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    exchange,
                    routing_key = %returned.routing_key,
                    "a basic.return matched no unsettled publish"
                );
            }
        }
    }

    /// Forgets the channel; everything in flight on it fails.
    fn drop_channel(&mut self, why: &str, close: Option<&BrokerClose>) {
        self.channel = None;
        self.fail_window(|| match &close {
            Some(close) => from_close((*close).clone(), why),
            None => TransportError::new(TransportErrorKind::ConnectionLost, why),
        });
        // A channel the broker closed is gone already; one we gave up on is closed by the
        // client library when its last handle drops.
    }

    fn on_connection_lost(&mut self) {
        self.connected = false;
        self.state.set_connected(false);
        tracing::warn!(
            in_flight = self.window.len(),
            "publishing connection lost; failing what is in flight"
        );
        self.channel = None;
        self.fail_window(|| {
            TransportError::new(
                TransportErrorKind::ConnectionLost,
                "the publishing connection is lost",
            )
        });
    }

    fn fail_window(&mut self, error: impl Fn() -> TransportError) {
        for (_, entry) in std::mem::take(&mut self.window) {
            let _ = entry.pending.responder.send(Err(error()));
        }
    }

    async fn shutdown(&mut self) {
        self.window_semaphore.close();
        self.fail_window(closed);
        self.commands.close();
        while let Ok(command) = self.commands.try_recv() {
            match command {
                Command::Publish(pending) => {
                    let _ = pending.responder.send(Err(closed()));
                }
                Command::Close(done) => {
                    let _ = done.send(());
                }
            }
        }
        if let Some(current) = self.channel.take() {
            if current.channel.is_open() {
                let _ = within(current.channel.close(), "closing the publish channel").await;
            }
        }
        if self.connected {
            if let Err(e) = within(self.connection.clone().close(), "closing").await {
                tracing::debug!(error = %e, "closing the publishing connection timed out");
            }
        }
        self.connected = false;
        self.state.set_connected(false);
        tracing::info!("publishing connection closed");
    }
}
