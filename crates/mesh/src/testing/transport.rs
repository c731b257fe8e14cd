//! The observation point: a [`Transport`] that hands everything on to the real one (the
//! in-memory broker's or RabbitMQ's) and records what the bus did through it.
//!
//! The bus decides what becomes of a delivery and tells its transport through the
//! delivery's acker (ack, retry, dead letter, reply); this wrapper wraps each delivery's
//! acker, so it sees the bus's decisions as they are carried out, without repeating any of
//! the bus's logic. Publishes and calls are seen as the bus makes them. Nothing here
//! changes a message.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use mesh_core::codec;
use mesh_core::{
    AckFailed, Acker, BoxFuture, Confirm, Delivery, DeliveryFeed, Envelope, Health, PublishOptions,
    QueueSpec, ServeSpec, Subscription, SubscriptionSpec, Target, ToolKey, Transport,
    TransportError, TransportStats, WireMessage,
};
use tokio::sync::oneshot;

use super::record::{
    CallOutcome, Called, DeadLettered, Handled, Log, Published, Record, Replied, Retried,
};

/// A transport recording into a harness's log what the bus of one module does through it.
#[derive(Debug)]
pub(crate) struct RecordingTransport {
    inner: Arc<dyn Transport>,
    log: Arc<Log>,
    module: Arc<str>,
}

impl RecordingTransport {
    pub(crate) fn new(inner: Arc<dyn Transport>, log: Arc<Log>, module: &str) -> Self {
        RecordingTransport {
            inner,
            log,
            module: module.into(),
        }
    }

    fn published(&self, envelope: &Envelope) -> Record {
        Record::Published(Published {
            module: self.module.to_string(),
            key: envelope.key.as_str().to_owned(),
            id: Some(envelope.id),
            causation_id: envelope.causation_id.clone(),
            body: envelope.body.clone(),
        })
    }

    /// Wraps a subscription whose deliveries the bus settles, so their settling is recorded.
    fn wrap(&self, subscription: Subscription, kind: Kind) -> Subscription {
        let (cancel, cancelled) = oneshot::channel();
        let queue = subscription.queue().to_owned();
        let origin = Arc::new(Origin {
            log: Arc::clone(&self.log),
            module: self.module.to_string(),
            kind,
        });
        Subscription::from_feed(
            queue,
            RecordingFeed {
                inner: subscription,
                cancelled: Some(cancelled),
                origin,
            },
            cancel,
        )
    }
}

impl Transport for RecordingTransport {
    fn publish(
        &self,
        message: WireMessage,
        options: PublishOptions,
    ) -> BoxFuture<'_, Result<Confirm, TransportError>> {
        Box::pin(async move {
            // A scheduled event's copy into its schedule queue is not published yet: it is
            // recorded when its forwarder emits it, when due.
            if matches!(options.target, Target::Retry(_)) {
                return self.inner.publish(message, options).await;
            }
            let record = match codec::decode(&message) {
                Ok(envelope) => self.published(&envelope),
                // Not an event the contract accepts: recorded as it is, by its key.
                Err(_) => Record::Published(Published {
                    module: self.module.to_string(),
                    key: message.routing_key.clone(),
                    id: codec::event_id(&message),
                    causation_id: None,
                    body: message.body.clone(),
                }),
            };
            let confirm = self.inner.publish(message, options).await?;
            self.log.push(record);
            Ok(confirm)
        })
    }

    fn publish_event(
        &self,
        envelope: Envelope,
        options: PublishOptions,
    ) -> BoxFuture<'_, Result<Confirm, TransportError>> {
        Box::pin(async move {
            let record = self.published(&envelope);
            let confirm = self.inner.publish_event(envelope, options).await?;
            self.log.push(record);
            Ok(confirm)
        })
    }

    fn subscribe(
        &self,
        spec: SubscriptionSpec,
    ) -> BoxFuture<'_, Result<Subscription, TransportError>> {
        Box::pin(async move {
            // Only a module's consumer queue is settled by its handlers' outcome; listeners
            // and dead-letter taps ack automatically and are passed through as they are.
            let durable = matches!(spec.queue, QueueSpec::Durable { .. });
            let delays = spec.retry_delays.clone();
            let subscription = self.inner.subscribe(spec).await?;
            Ok(if durable {
                self.wrap(subscription, Kind::Events { delays })
            } else {
                subscription
            })
        })
    }

    fn call(
        &self,
        tool: &ToolKey,
        request: WireMessage,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<WireMessage, TransportError>> {
        let tool = tool.clone();
        Box::pin(async move {
            let body = request.body.clone();
            let result = self.inner.call(&tool, request, timeout).await;
            let outcome = match &result {
                Ok(reply) => match codec::decode_reply(reply) {
                    Ok(Ok(body)) => CallOutcome::Replied(body),
                    Ok(Err(remote)) => CallOutcome::Refused(remote),
                    Err(e) => CallOutcome::Failed(format!("the reply is no reply: {e}")),
                },
                Err(e) => CallOutcome::Failed(e.to_string()),
            };
            self.log.push(Record::Called(Called {
                module: self.module.to_string(),
                tool: tool.as_str().to_owned(),
                request: body,
                outcome,
            }));
            result
        })
    }

    fn serve(&self, spec: ServeSpec) -> BoxFuture<'_, Result<Subscription, TransportError>> {
        Box::pin(async move {
            let tool = spec.tool.as_str().to_owned();
            let subscription = self.inner.serve(spec).await?;
            Ok(self.wrap(subscription, Kind::Serve { tool }))
        })
    }

    fn health(&self) -> Health {
        self.inner.health()
    }

    fn stats(&self) -> TransportStats {
        self.inner.stats()
    }

    fn flush(&self) -> BoxFuture<'_, ()> {
        self.inner.flush()
    }

    fn close(&self) -> BoxFuture<'_, ()> {
        self.inner.close()
    }
}

/// What the deliveries of one wrapped subscription are.
#[derive(Debug)]
enum Kind {
    /// Events of a module's consumer queue, with the delays of its retry ladder.
    Events { delays: Vec<Duration> },
    /// Requests to a tool.
    Serve { tool: String },
}

/// Who settles the deliveries of one subscription, and where that is recorded.
#[derive(Debug)]
struct Origin {
    log: Arc<Log>,
    module: String,
    kind: Kind,
}

/// The wrapped subscription's deliveries, each with a recording acker.
struct RecordingFeed {
    inner: Subscription,
    /// Fires (or is dropped) when the outer subscription is cancelled.
    cancelled: Option<oneshot::Receiver<()>>,
    origin: Arc<Origin>,
}

impl DeliveryFeed for RecordingFeed {
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Delivery>> {
        if let Some(cancelled) = &mut self.cancelled {
            // Either a cancel or its sender dropped: the reader wants no more.
            if Pin::new(cancelled).poll(cx).is_ready() {
                self.cancelled = None;
                self.inner.cancel();
            }
        }
        // Cancel safe as the inner subscription is: a delivery is returned or stays there.
        self.inner.poll_next(cx).map(|delivery| {
            delivery.map(|delivery| {
                Delivery::new(
                    delivery.message.clone(),
                    delivery.redelivered,
                    delivery.delivery_count,
                    delivery.queue.clone(),
                    Box::new(RecordingAcker {
                        delivery,
                        origin: Arc::clone(&self.origin),
                    }),
                )
            })
        })
    }
}

/// Settles the real delivery as the bus decides, and records the decision.
///
/// Dropped undecided, it drops the real delivery, whose acker releases it.
struct RecordingAcker {
    delivery: Delivery,
    origin: Arc<Origin>,
}

impl RecordingAcker {
    fn key(&self) -> String {
        self.delivery.message.routing_key.clone()
    }

    fn id(&self) -> Option<mesh_core::EventId> {
        codec::event_id(&self.delivery.message)
    }

    fn handled(&self) {
        if let Kind::Events { .. } = self.origin.kind {
            let message = &self.delivery.message;
            self.origin.log.push(Record::Handled(Handled {
                module: self.origin.module.clone(),
                queue: self.delivery.queue.clone(),
                key: self.key(),
                id: self.id(),
                attempt: codec::attempts(message).saturating_add(1),
                body: message.body.clone(),
            }));
        }
    }
}

impl Acker for RecordingAcker {
    fn ack(self: Box<Self>) -> BoxFuture<'static, Result<(), TransportError>> {
        self.handled();
        Box::pin(self.delivery.ack())
    }

    fn ack_detached(self: Box<Self>, failed: AckFailed) -> Option<BoxFuture<'static, ()>> {
        self.handled();
        // Handed on now, as the transport would have; the future sends it if the transport
        // could not take it over.
        Some(Box::pin(self.delivery.ack_detached(failed)))
    }

    fn retry(
        self: Box<Self>,
        copy: WireMessage,
        step: usize,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        let delay = match &self.origin.kind {
            Kind::Events { delays } => delays.get(step).copied(),
            Kind::Serve { .. } => None,
        };
        let record = Retried {
            module: self.origin.module.clone(),
            queue: self.delivery.queue.clone(),
            key: self.key(),
            id: self.id(),
            attempt: codec::attempts(&copy),
            delay,
        };
        let log = Arc::clone(&self.origin.log);
        Box::pin(async move {
            self.delivery.retry(copy, step).await?;
            log.push(Record::Retried(record));
            Ok(())
        })
    }

    fn dead_letter(
        self: Box<Self>,
        copy: WireMessage,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        let note = codec::read_dead_letter(&copy);
        let record = note.map(|note| DeadLettered {
            module: self.origin.module.clone(),
            queue: self.delivery.queue.clone(),
            key: self.key(),
            id: self.id(),
            reason: note.reason,
            attempts: note.attempts,
            last_error: note.last_error,
            body: copy.body.clone(),
        });
        let log = Arc::clone(&self.origin.log);
        Box::pin(async move {
            self.delivery.dead_letter(copy).await?;
            if let Some(record) = record {
                log.push(Record::DeadLettered(record));
            }
            Ok(())
        })
    }

    fn reply(
        self: Box<Self>,
        reply: WireMessage,
    ) -> BoxFuture<'static, Result<(), TransportError>> {
        let record = match &self.origin.kind {
            Kind::Serve { tool } => Some(Replied {
                module: self.origin.module.clone(),
                tool: tool.clone(),
                reply: match codec::decode_reply(&reply) {
                    Ok(reply) => reply,
                    Err(e) => Err(mesh_core::RemoteError::new(
                        "undecodable-reply",
                        e.to_string(),
                    )),
                },
            }),
            Kind::Events { .. } => None,
        };
        let log = Arc::clone(&self.origin.log);
        Box::pin(async move {
            self.delivery.reply(reply).await?;
            if let Some(record) = record {
                log.push(Record::Replied(record));
            }
            Ok(())
        })
    }

    fn release(self: Box<Self>) {
        self.delivery.release();
    }
}
