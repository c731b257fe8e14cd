//! The raw client's side: the least a careful amqprs user writes to publish with confirms
//! and to consume with manual acks, with nothing of mesh in between.
//!
//! [`ConfirmChannel`] numbers publishes as the broker does and keeps a book of the
//! unconfirmed ones; the channel callback settles the book directly (with `multiple` acks
//! settling everything up to the tag) and gives the window its permits back. A publish may
//! ask for a oneshot to learn its own outcome (one-at-a-time emits, RPC) or not (pipelined
//! emits, which only wait for the whole window at the end).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use amqprs::callbacks::ChannelCallback;
use amqprs::channel::{
    BasicConsumeArguments, BasicPublishArguments, BasicQosArguments, Channel,
    ConfirmSelectArguments, ConsumerMessage,
};
use amqprs::connection::Connection;
use amqprs::{Ack, BasicProperties, Cancel, CloseChannel, Nack, Return};
use anyhow::Context;
use tokio::sync::{mpsc, oneshot, Semaphore};

type Outcome = oneshot::Sender<bool>;

/// The unconfirmed publishes of one channel and the room left in its window.
#[derive(Debug)]
struct Book {
    unconfirmed: Mutex<BTreeMap<u64, Option<Outcome>>>,
    room: Semaphore,
    nacked: AtomicU64,
}

impl Book {
    fn settle(&self, tag: u64, multiple: bool, acked: bool) {
        let settled: Vec<Option<Outcome>> = match self.unconfirmed.lock() {
            Ok(mut book) => {
                if multiple {
                    let rest = book.split_off(&tag.saturating_add(1));
                    std::mem::replace(&mut *book, rest).into_values().collect()
                } else {
                    book.remove(&tag).into_iter().collect()
                }
            }
            Err(_) => Vec::new(),
        };
        if !acked {
            self.nacked
                .fetch_add(settled.len() as u64, Ordering::Relaxed);
        }
        let freed = settled.len();
        for outcome in settled.into_iter().flatten() {
            let _ = outcome.send(acked);
        }
        self.room.add_permits(freed);
    }
}

struct ConfirmCallback(Arc<Book>);

#[async_trait::async_trait]
impl ChannelCallback for ConfirmCallback {
    async fn close(
        &mut self,
        _channel: &Channel,
        close: CloseChannel,
    ) -> Result<(), amqprs::error::Error> {
        eprintln!("mesh-bench: the broker closed a raw confirm channel: {close}");
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
        self.0.settle(ack.delivery_tag(), ack.mutiple(), true);
    }

    async fn publish_nack(&mut self, _channel: &Channel, nack: Nack) {
        self.0.settle(nack.delivery_tag(), nack.multiple(), false);
    }

    async fn publish_return(
        &mut self,
        _channel: &Channel,
        _ret: Return,
        _properties: BasicProperties,
        _content: Vec<u8>,
    ) {
    }
}

/// A channel in confirm mode with a window of unconfirmed publishes.
pub(crate) struct ConfirmChannel {
    channel: Channel,
    book: Arc<Book>,
    window: u32,
    /// The sequence number of the last publish; held across the send so that numbers follow
    /// the order frames leave in when several tasks publish.
    seq: tokio::sync::Mutex<u64>,
}

impl std::fmt::Debug for ConfirmChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfirmChannel")
            .field("window", &self.window)
            .finish_non_exhaustive()
    }
}

/// Where a publish goes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Route<'a> {
    pub(crate) exchange: &'a str,
    pub(crate) key: &'a str,
    pub(crate) mandatory: bool,
}

impl ConfirmChannel {
    pub(crate) async fn open(connection: &Connection, window: usize) -> anyhow::Result<Self> {
        let window = u32::try_from(window).context("window too large")?;
        let book = Arc::new(Book {
            unconfirmed: Mutex::new(BTreeMap::new()),
            room: Semaphore::new(window as usize),
            nacked: AtomicU64::new(0),
        });
        let channel = connection.open_channel(None).await?;
        channel
            .register_callback(ConfirmCallback(book.clone()))
            .await?;
        channel
            .confirm_select(ConfirmSelectArguments::default())
            .await?;
        Ok(ConfirmChannel {
            channel,
            book,
            window,
            seq: tokio::sync::Mutex::new(0),
        })
    }

    /// Publishes once there is room in the window; with `want_outcome`, returns a receiver
    /// of the broker's answer (`true` for an ack).
    pub(crate) async fn publish(
        &self,
        route: Route<'_>,
        properties: BasicProperties,
        body: Vec<u8>,
        want_outcome: bool,
    ) -> anyhow::Result<Option<oneshot::Receiver<bool>>> {
        self.book.room.acquire().await?.forget();
        let (outcome, receiver) = if want_outcome {
            let (tx, rx) = oneshot::channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let args = BasicPublishArguments::new(route.exchange, route.key)
            .mandatory(route.mandatory)
            .finish();
        let mut seq = self.seq.lock().await;
        *seq += 1;
        if let Ok(mut book) = self.book.unconfirmed.lock() {
            book.insert(*seq, outcome);
        }
        self.channel.basic_publish(properties, body, args).await?;
        drop(seq);
        Ok(receiver)
    }

    /// Publishes and waits for the broker's confirm.
    pub(crate) async fn publish_confirmed(
        &self,
        route: Route<'_>,
        properties: BasicProperties,
        body: Vec<u8>,
    ) -> anyhow::Result<()> {
        let outcome = self.publish(route, properties, body, true).await?;
        confirmed(outcome).await
    }

    /// Waits until every publish so far is settled; fails if any was nacked.
    pub(crate) async fn wait_all(&self) -> anyhow::Result<()> {
        drop(self.book.room.acquire_many(self.window).await?);
        let nacked = self.book.nacked.load(Ordering::Relaxed);
        anyhow::ensure!(nacked == 0, "the broker nacked {nacked} publishes");
        Ok(())
    }

    pub(crate) async fn close(self) {
        let _ = self.channel.close().await;
    }
}

/// Waits for an outcome [`ConfirmChannel::publish`] returned.
pub(crate) async fn confirmed(outcome: Option<oneshot::Receiver<bool>>) -> anyhow::Result<()> {
    let Some(outcome) = outcome else {
        return Ok(());
    };
    match outcome.await {
        Ok(true) => Ok(()),
        Ok(false) => anyhow::bail!("the broker nacked a publish"),
        Err(_) => anyhow::bail!("the confirm channel is gone"),
    }
}

/// A consumer: its channel and the stream of deliveries.
pub(crate) struct RawConsumer {
    pub(crate) channel: Channel,
    pub(crate) deliveries: mpsc::UnboundedReceiver<ConsumerMessage>,
}

impl std::fmt::Debug for RawConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawConsumer").finish_non_exhaustive()
    }
}

/// Consumes `queue` on a channel of its own: manual ack with `prefetch`, or no-ack when
/// `prefetch` is `None`.
pub(crate) async fn consume(
    connection: &Connection,
    queue: &str,
    prefetch: Option<u16>,
) -> anyhow::Result<RawConsumer> {
    let channel = crate::broker::channel(connection).await?;
    if let Some(prefetch) = prefetch {
        channel
            .basic_qos(BasicQosArguments::new(0, prefetch, false))
            .await?;
    }
    let args = BasicConsumeArguments::new(queue, "")
        .manual_ack(prefetch.is_some())
        .finish();
    let (_tag, deliveries) = channel
        .basic_consume_rx(args)
        .await
        .with_context(|| format!("consuming `{queue}`"))?;
    Ok(RawConsumer {
        channel,
        deliveries,
    })
}
