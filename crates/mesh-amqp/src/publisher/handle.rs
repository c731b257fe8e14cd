//! The [`Publisher`] handle: cheap to clone, it checks a publish, takes its room in the
//! unconfirmed window (waiting for it until the deadline: the backpressure), takes it into
//! the window (publishing it itself when the task lets it, see [`Core`]) and gives the
//! caller a [`Confirm`] to await now, later or never.
//!
//! [`Core`]: super::publication::Core

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use amqprs::BasicProperties;
use mesh_core::{Confirm, TransportError, TransportErrorKind};
use tokio::sync::{mpsc, oneshot, Notify, OwnedSemaphorePermit, Semaphore, TryAcquireError};
use tokio::time::Instant;

use crate::connection::owner::ConnectionOwner;
use crate::connection::state::LinkState;
use crate::convert::check_short;
use crate::lifecycle::{Link, TransportShared};
use crate::options::AmqpOptions;
use crate::topology::Topology;

use super::publication::{
    check_header_frame, closed, frame_max, header_frame_size, now, Command, Core, Payload, Pending,
    Publication, WindowRoom,
};
use super::task::PublishTask;
use super::window::Window;

/// Room in the window: one publish, and its bytes.
type Room = (OwnedSemaphorePermit, Option<OwnedSemaphorePermit>);

/// A checked publish that did not find room at once (see [`Publisher::try_publish`]).
pub(crate) struct Waiting {
    outgoing: Publication,
    properties: BasicProperties,
    /// The size of its content-header frame.
    header_frame: usize,
    /// Its bytes' share of the window.
    charge: u32,
    deadline: Option<Instant>,
}

impl Waiting {
    /// Takes the publish into the window (see [`WindowRoom::take`]), with the `Confirm` of
    /// its outcome; `Err(Closed)` once the task is shutting down.
    fn hand_over(self, room: Room, window: &WindowRoom) -> Result<Confirm, TransportError> {
        let (responder, outcome) = oneshot::channel();
        // The room is the window's now: the task gives it back when the message is settled,
        // all of one confirm's at once.
        let (count, bytes) = room;
        count.forget();
        if let Some(bytes) = bytes {
            bytes.forget();
        }
        let charge = self.charge;
        let pending = Box::new(Pending {
            outgoing: self.outgoing,
            properties: Some(self.properties),
            header_frame: self.header_frame,
            responder,
            charge,
        });
        if window.take(pending).is_err() {
            window.give_back(1, u64::from(charge));
            return Err(closed());
        }
        Ok(Confirm::new(ConfirmWait {
            outcome,
            deadline: self.deadline,
            timer: None,
        }))
    }
}

/// The wait for a publish's outcome, until its deadline. The timer is set only once the
/// outcome is not there at a poll: a caller with many publishes in flight mostly finds it
/// there already when it gets to one.
struct ConfirmWait {
    outcome: oneshot::Receiver<Result<(), TransportError>>,
    deadline: Option<Instant>,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Future for ConfirmWait {
    type Output = Result<(), TransportError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if let Poll::Ready(outcome) = Pin::new(&mut this.outcome).poll(cx) {
            return Poll::Ready(outcome.unwrap_or_else(|_| Err(closed())));
        }
        let Some(at) = this.deadline else {
            return Poll::Pending;
        };
        let timer = this
            .timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(TransportError::new(
                TransportErrorKind::Timeout,
                "no confirm from the broker before the deadline; the message may still be \
                 delivered",
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// What [`Publisher::try_publish`] did.
pub(crate) enum Attempt {
    /// The publish is the task's now; its confirm.
    Taken(Confirm),
    /// It must wait (boxed: a rare path, so the common one stays small).
    Wait(Box<Waiting>),
}

/// The handle to the publish task.
#[derive(Clone)]
pub(crate) struct Publisher {
    /// Flushes and the close; publishes go into the window directly.
    commands: mpsc::Sender<Command>,
    /// The connection's user, stamped as `user-id` on every message.
    user_id: Arc<str>,
    window: Arc<WindowRoom>,
    max_message_size: usize,
    default_deadline: Option<Duration>,
    state: Arc<LinkState>,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("unconfirmed", &self.unconfirmed())
            .field("connected", &self.state.connected())
            .finish_non_exhaustive()
    }
}

impl Publisher {
    /// Opens the publishing connection and starts its task.
    pub(crate) async fn start(
        options: &AmqpOptions,
        shared: Arc<TransportShared>,
        topology: Arc<Mutex<Topology>>,
    ) -> Result<Publisher, TransportError> {
        let state = Arc::new(LinkState::new(Link::Publish, shared.clone()));
        let owner = ConnectionOwner::open(options, state.clone(), shared.clone(), None).await?;
        let window = Arc::new(WindowRoom {
            count: Arc::new(Semaphore::new(options.get_confirm_window())),
            bytes: Arc::new(Semaphore::new(options.get_max_unconfirmed_bytes())),
            max_count: options.get_confirm_window(),
            max_bytes: options.get_max_unconfirmed_bytes(),
            broker_max: AtomicUsize::new(0),
            frame_max: AtomicUsize::new(owner.connection().map_or(0, frame_max)),
            core: Mutex::new(Core {
                window: Window::new(now()),
                direct: None,
                closed: false,
            }),
            wake: Notify::new(),
        });
        let user_id: Arc<str> = Arc::from(options.get_user());
        let commands = PublishTask::start(
            options,
            state.clone(),
            shared,
            topology,
            window.clone(),
            owner,
            user_id.clone(),
        );
        Ok(Publisher {
            commands,
            user_id,
            window,
            max_message_size: options.get_max_message_size(),
            default_deadline: options.get_publish_deadline(),
            state,
        })
    }

    /// The connection's state.
    pub(crate) fn state(&self) -> &LinkState {
        &self.state
    }

    /// Publishes accepted and not yet settled (in the window, the backlog, or on their way).
    pub(crate) fn unconfirmed(&self) -> usize {
        self.window
            .max_count
            .saturating_sub(self.window.count.available_permits())
    }

    /// The body bytes of those publishes (a message larger than the bound counts as the
    /// bound).
    pub(crate) fn unconfirmed_bytes(&self) -> usize {
        self.window
            .max_bytes
            .saturating_sub(self.window.bytes.available_permits())
    }

    /// Publishes `outgoing`: resolves once it is in the unconfirmed window, with the
    /// [`Confirm`] of the broker's answer. `deadline` (or else the default; one too far to
    /// represent waits without bound) bounds the wait
    /// for room plus the wait for the confirm.
    ///
    /// # Cancel safety
    ///
    /// Dropped while waiting for room, nothing is published. Once it resolved, the message
    /// is published (and resent after failures) whatever happens to the `Confirm`.
    pub(crate) async fn publish(
        &self,
        outgoing: Publication,
        deadline: Option<Duration>,
    ) -> Result<Confirm, TransportError> {
        match self.try_publish(outgoing, deadline)? {
            Attempt::Taken(confirm) => Ok(confirm),
            Attempt::Wait(waiting) => Box::pin(self.publish_waiting(waiting)).await,
        }
    }

    /// The part of [`publish`](Self::publish) that needs no waiting: checks `outgoing`,
    /// builds its properties and, when the window has room, takes it in (`Taken`). Otherwise the caller waits with
    /// [`publish_waiting`](Self::publish_waiting), which holds only what a wait needs: a
    /// publish that finds room, the common case, never builds (nor boxes) a waiting future.
    pub(crate) fn try_publish(
        &self,
        outgoing: Publication,
        deadline: Option<Duration>,
    ) -> Result<Attempt, TransportError> {
        let deadline = deadline
            .or(self.default_deadline)
            .and_then(|d| Instant::now().checked_add(d));
        // RabbitMQ counts the body against `max_message_size`; refuse here rather than have
        // the broker close the channel (which costs a resend of everything in flight).
        let size = outgoing.payload.body().len();
        let broker_max = self.window.broker_max.load(Ordering::Relaxed);
        let max = match broker_max {
            0 => self.max_message_size,
            known => known.min(self.max_message_size),
        };
        if size > max {
            return Err(TransportError::new(
                TransportErrorKind::TooLarge {
                    size,
                    max: Some(max),
                },
                format!("publishing to `{}`", outgoing.payload.routing_key()),
            ));
        }
        let mut outgoing = outgoing;
        if let Payload::Message {
            routing_key,
            message,
        } = &mut outgoing.payload
        {
            crate::convert::stamp_routing_key(message, routing_key);
            // Every message names its publisher, which the broker validates: a consumer
            // enforcing identity believes the key's owner only from its own user. (An
            // event's properties are built with it.)
            message.properties.user_id = Some(self.user_id.to_string());
        }
        check_short("an exchange name", outgoing.exchange)?;
        check_short("a routing key", outgoing.payload.routing_key())?;
        let properties = outgoing
            .payload
            .properties(outgoing.force_persistent, &self.user_id)?;
        // Every broker takes a frame of AMQP's minimum size: only a message whose bound is
        // above it needs measuring (an encoding of its properties, which costs about a tenth
        // of an emit).
        let header_frame = match outgoing.payload.header_frame_bound(&self.user_id) {
            bound if bound <= crate::convert::FRAME_MIN_SIZE => bound,
            _ => header_frame_size(&properties)?,
        };
        check_header_frame(
            header_frame,
            self.window.frame_max.load(Ordering::Relaxed),
            outgoing.payload.routing_key(),
        )?;
        // A message larger than the byte bound takes all of it rather than never fitting.
        let charge = u32::try_from(size.min(self.window.max_bytes)).unwrap_or(u32::MAX);
        let waiting = Waiting {
            outgoing,
            properties,
            header_frame,
            charge,
            deadline,
        };
        // The task is gone (it never is before `close`, which closes the room too).
        if self.commands.is_closed() {
            return Err(closed());
        }
        match self.try_room(charge) {
            Ok(Some(room)) => Ok(Attempt::Taken(waiting.hand_over(room, &self.window)?)),
            Ok(None) => Ok(Attempt::Wait(Box::new(waiting))),
            Err(_) => Err(closed()),
        }
    }

    /// Waits for room in the window, until the deadline, then takes the publish in. Only
    /// the wait awaits: cancelled, it leaves nothing in the window.
    pub(crate) async fn publish_waiting(
        &self,
        waiting: Box<Waiting>,
    ) -> Result<Confirm, TransportError> {
        let room = self.wait_for_room(waiting.charge, waiting.deadline).await?;
        waiting.hand_over(room, &self.window)
    }

    /// Room in the window now, if there is (`Ok(None)` if not); a semaphore never makes a
    /// waiter lose its turn to this, as its permits go to waiters first.
    fn try_room(&self, charge: u32) -> Result<Option<Room>, TryAcquireError> {
        let count = match self.window.count.clone().try_acquire_owned() {
            Ok(count) => count,
            Err(TryAcquireError::NoPermits) => return Ok(None),
            Err(closed) => return Err(closed),
        };
        let bytes = match charge {
            0 => None,
            n => match self.window.bytes.clone().try_acquire_many_owned(n) {
                Ok(bytes) => Some(bytes),
                Err(TryAcquireError::NoPermits) => return Ok(None),
                Err(closed) => return Err(closed),
            },
        };
        Ok(Some((count, bytes)))
    }

    /// Waits for room in the window until `deadline`.
    async fn wait_for_room(
        &self,
        charge: u32,
        deadline: Option<Instant>,
    ) -> Result<Room, TransportError> {
        let room = async {
            let count = self.window.count.clone().acquire_owned().await?;
            let bytes = match charge {
                0 => None,
                n => Some(self.window.bytes.clone().acquire_many_owned(n).await?),
            };
            Ok::<_, tokio::sync::AcquireError>((count, bytes))
        };
        match deadline {
            Some(at) => tokio::time::timeout_at(at, room).await.map_err(|_| {
                TransportError::new(
                    TransportErrorKind::Backpressure,
                    format!(
                        "no room in the unconfirmed window (at most {} publishes, {} bytes) \
                         before the deadline",
                        self.window.max_count, self.window.max_bytes
                    ),
                )
            })?,
            None => room.await,
        }
        .map_err(|_| closed())
    }

    /// Resolves once everything published before is settled (or the task is gone).
    pub(crate) async fn flush(&self) {
        let (done, settled) = oneshot::channel();
        if self.commands.send(Command::Flush(done)).await.is_ok() {
            let _ = settled.await;
        }
    }

    /// Stops the task: what is unsettled fails with `Closed`, the channel and the connection
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
