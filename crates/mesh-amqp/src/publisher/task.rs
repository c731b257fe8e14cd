//! The publish task: the shell of the [`Window`](window::Window) state machine. It owns the
//! publishing connection (through its [`ConnectionOwner`]) and the confirm channel, feeds
//! the window the connection's and the channel's events, and does what the window says:
//! publish the backlog, answer callers, replace the channel, report a block. The window
//! itself is shared with the handles ([`Core`]): once the backlog is published the task
//! lets them publish on the channel themselves, and takes that back whenever it must
//! publish from the backlog again or the channel goes. See the module docs of `publisher`
//! for what happens after a loss.

use mesh_core::text::EscapedDisplay;
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};

use amqprs::channel::{Channel, ConfirmSelectArguments};
use amqprs::connection::Connection;
use mesh_core::{TransportError, WireMessage};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tracing::Instrument;

use crate::connection::backoff::Backoff;
use crate::connection::owner::{ConnectionOwner, LinkEvent};
use crate::connection::state::{sleep_opt, LinkState};
use crate::declare::{open_channel, within, DeclareChannel};
use crate::error::{code, from_client, publish_refusal, BrokerClose, PublishRefusal};
use crate::lifecycle::{Counters, Lifecycle, Link, TransportShared};
use crate::options::AmqpOptions;
use crate::topology::Topology;

use super::callback::{Event, PublishCallback};
use super::publication::{
    check_header_frame, connection_lost, frame_max, now, Command, Core, Direct, Pending, WindowRoom,
};
use super::window::{self, Progress, Returned, NACK_RUN_REOPEN, STALL_AFTER, STUCK_AFTER};

/// Room in the queue of commands (flushes and the close; publishes go into the window).
const COMMANDS: usize = 64;

/// How the broker names the default exchange (`""`) in its refusals.
const DEFAULT_EXCHANGE_NAME: &str = "amq.default";

/// The task that owns the publishing connection; see the module docs.
pub(super) struct PublishTask {
    state: Arc<LinkState>,
    shared: Arc<TransportShared>,
    topology: Arc<Mutex<Topology>>,
    room: Arc<WindowRoom>,
    commands: mpsc::Receiver<Command>,
    events_tx: mpsc::UnboundedSender<Event>,
    events: mpsc::UnboundedReceiver<Event>,
    /// The connection, and its replacement after a loss.
    owner: ConnectionOwner,
    /// The confirm channel the window numbers publishes on (as generation
    /// [`generation`](Self::generation)).
    channel: Option<Channel>,
    /// Backoff for reopening a channel the broker closed; reset by a confirm.
    channel_backoff: Backoff,
    /// No channel is opened before this.
    channel_retry_at: Option<Instant>,
    /// Exchanges of the topology to declare again before the next channel.
    redeclare: BTreeSet<String>,
    /// The generation of the newest channel; events of older ones are stale.
    generation: u64,
    /// Flushes waiting for the window and the backlog to empty.
    flushes: Vec<oneshot::Sender<()>>,
    /// What [`answer_settled`](Self::answer_settled) is answering: kept empty between
    /// calls, for its buffer.
    settled: Vec<(Box<Pending>, Result<(), TransportError>)>,
    /// What the window settled, taken out under its lock: kept empty between calls.
    settled_outcomes: Vec<(Box<Pending>, window::Outcome)>,
    /// The connection's user, named as the publisher of every event (a resend builds an
    /// event's properties again).
    user_id: Arc<str>,
}

enum Step {
    Event(Event),
    Link(LinkEvent),
    ChannelRetry,
    Stalled,
    Stuck,
    /// A handle left a publish in the backlog, or the window started to fill.
    Woken,
    Command(Option<Command>),
}

impl PublishTask {
    /// Starts the task on the connection `owner` holds, with the window's `room`; the queue
    /// its handles send it their commands through.
    pub(super) fn start(
        options: &AmqpOptions,
        state: Arc<LinkState>,
        shared: Arc<TransportShared>,
        topology: Arc<Mutex<Topology>>,
        room: Arc<WindowRoom>,
        owner: ConnectionOwner,
        user_id: Arc<str>,
    ) -> mpsc::Sender<Command> {
        let (commands_tx, commands) = mpsc::channel(COMMANDS);
        let (events_tx, events) = mpsc::unbounded_channel();
        let task = PublishTask {
            state,
            shared,
            topology,
            room,
            commands,
            events_tx,
            events,
            owner,
            channel: None,
            channel_backoff: Backoff::from_options(options),
            channel_retry_at: None,
            redeclare: BTreeSet::new(),
            generation: 0,
            flushes: Vec::new(),
            settled: Vec::new(),
            settled_outcomes: Vec::new(),
            user_id,
        };
        let span = tracing::info_span!(
            parent: None,
            "mesh_amqp.publisher",
            connection = %format!("{}.publish", options.get_connection_name())
        );
        tokio::spawn(task.run().instrument(span));
        commands_tx
    }

    /// The window, locked: never held across an await, nor while answering a caller.
    fn core(&self) -> MutexGuard<'_, Core> {
        self.room.core()
    }

    async fn run(mut self) {
        loop {
            self.flush().await;
            self.answer_flushes();
            let connected = self.owner.connection().is_some();
            // A channel with nothing confirmed for STUCK_AFTER is replaced, unless the broker
            // said it blocks the connection (an alarm: a new channel would not help).
            let watch_stuck = !self.state.broker_blocked() && self.channel.is_some();
            let (stall_at, stuck_at) = {
                let core = self.core();
                let stall_at = core.window.stall_at(connected).map(Instant::from_std);
                let stuck_at = if watch_stuck {
                    core.window.stuck_at(connected).map(Instant::from_std)
                } else {
                    None
                };
                (stall_at, stuck_at)
            };
            let step = tokio::select! {
                biased;
                Some(event) = self.events.recv() => Step::Event(event),
                event = self.owner.event() => Step::Link(event),
                () = sleep_opt(self.channel_retry_at) => Step::ChannelRetry,
                () = sleep_opt(stall_at) => Step::Stalled,
                () = sleep_opt(stuck_at) => Step::Stuck,
                () = self.room.wake.notified() => Step::Woken,
                command = self.commands.recv() => Step::Command(command),
            };
            match step {
                Step::Event(event) => self.on_event(event),
                Step::Link(event) => self.on_link(event),
                Step::ChannelRetry => self.channel_retry_at = None,
                Step::Stalled => self.on_stalled(),
                Step::Stuck => self.on_stuck(),
                // The loop's top publishes the backlog and sets the timers again.
                Step::Woken => {}
                Step::Command(Some(Command::Flush(done))) => self.flushes.push(done),
                Step::Command(Some(Command::Close(done))) => {
                    self.shutdown().await;
                    let _ = done.send(());
                    return;
                }
                // Every handle is gone: nobody can publish or learn an outcome.
                Step::Command(None) => {
                    self.shutdown().await;
                    return;
                }
            }
        }
    }

    /// Answers the flushes once nothing is unsettled: a flush waits for every publish
    /// queued before it, and, under a steady stream of publishes, for a moment with none in
    /// flight (its callers bound the wait).
    fn answer_flushes(&mut self) {
        if self.flushes.is_empty() || !self.core().window.is_idle() {
            return;
        }
        for done in self.flushes.drain(..) {
            let _ = done.send(());
        }
    }

    /// Answers the callers of what the window settled; `close` is the broker's close that
    /// settled them, if that is what did.
    fn answer_settled(&mut self, close: Option<&BrokerClose>) {
        let mut taken = std::mem::take(&mut self.settled_outcomes);
        {
            let mut core = self.core();
            while let Some(settled) = core.window.poll_settled() {
                taken.push(settled);
            }
        }
        let mut settled = std::mem::take(&mut self.settled);
        let mut bytes = 0u64;
        for (pending, outcome) in taken.drain(..) {
            bytes += u64::from(pending.charge);
            let result = pending.outcome(outcome, close);
            settled.push((pending, result));
        }
        self.settled_outcomes = taken;
        // Room first: whoever is told an outcome sees the room of everything settled with
        // it free.
        self.room.give_back(settled.len(), bytes);
        for (pending, result) in settled.drain(..) {
            pending.answer(result);
        }
        self.settled = settled;
    }

    /// Publishes the backlog, in order, if there is a connection and a channel may be
    /// opened.
    async fn flush(&mut self) {
        if self.owner.connection().is_none() || self.channel_retry_at.is_some() {
            return;
        }
        {
            let mut core = self.core();
            if core.window.backlog() == 0 {
                return;
            }
            // Publishing from the backlog awaits: no handle publishes past it meanwhile, so
            // the window numbers publishes in the order they go out.
            core.direct = None;
        }
        let channel = match self.ensure_channel().await {
            Ok(channel) => channel,
            Err(error) => {
                tracing::warn!(error = %EscapedDisplay(&error), "opening the publish channel failed");
                self.retry_channel_later();
                return;
            }
        };
        let frame_max = self.owner.connection().map_or(0, frame_max);
        let mut resent = 0u64;
        // The window reads the time only for a send into an empty window (its stall clock
        // starts then), which only the first send of a flush can be.
        let mut sent_at = None;
        loop {
            let mut queued = {
                let mut core = self.core();
                match core.window.pop_unsent() {
                    Some(queued) => queued,
                    None => {
                        // Caught up: handles publish on the channel themselves until the
                        // task needs it again.
                        if !core.closed && core.window.is_current(self.generation) {
                            core.direct = Some(Direct {
                                channel: channel.clone(),
                                generation: self.generation,
                                frame_max,
                            });
                        }
                        break;
                    }
                }
            };
            // Checked again on the connection it goes out on: a resend may meet a broker
            // with a smaller frame size than the one the publish was accepted under.
            if let Err(error) = check_header_frame(
                queued.message.header_frame,
                frame_max,
                queued.message.outgoing.payload.routing_key(),
            ) {
                tracing::warn!(error = %EscapedDisplay(&error), "a message's headers do not fit in a frame; not sent");
                queued.message.fail(&self.room, error);
                continue;
            }
            let pending = &mut queued.message;
            let properties = match pending.properties.take() {
                Some(properties) => properties,
                // Sent before: the same message gives the same properties it gave then.
                None => match pending
                    .outgoing
                    .payload
                    .properties(pending.outgoing.force_persistent, &self.user_id)
                {
                    Ok(properties) => properties,
                    Err(error) => {
                        queued.message.fail(&self.room, error);
                        continue;
                    }
                },
            };
            let outgoing = &pending.outgoing;
            let args = outgoing.publish_arguments();
            let sent = within(
                channel.basic_publish(properties, outgoing.payload.body().to_vec(), args),
                "publishing",
            )
            .await
            .and_then(|r| r.map_err(|e| from_client(e, "publishing")));
            match sent {
                Ok(()) => {
                    if queued.sent > 0 {
                        resent += 1;
                    }
                    let at = *sent_at.get_or_insert_with(now);
                    self.core().window.sent(queued, at);
                }
                Err(error) => {
                    // The frame never left: the channel (or the connection) is unusable, and
                    // the broker's numbering of what did leave is ours no more to trust.
                    tracing::warn!(error = %EscapedDisplay(&error), "publish failed; replacing the channel");
                    self.core().window.unsent(queued);
                    self.drop_channel(None);
                    self.retry_channel_later();
                    break;
                }
            }
        }
        if resent > 0 {
            self.shared
                .counters
                .resent
                .fetch_add(resent, Ordering::Relaxed);
            tracing::info!(resent, "resent unconfirmed publishes on a new channel");
        }
    }

    /// The open confirm channel, opening one if needed (after declaring again the exchanges
    /// the broker said are gone).
    async fn ensure_channel(&mut self) -> Result<Channel, TransportError> {
        if let Some(current) = &self.channel {
            if current.is_open() {
                return Ok(current.clone());
            }
            self.drop_channel(None);
        }
        let connection = match self.owner.connection() {
            Some(connection) => connection.clone(),
            None => return Err(connection_lost()),
        };
        if !self.redeclare.is_empty() {
            self.redeclare_exchanges(&connection).await?;
        }
        self.generation += 1;
        let generation = self.generation;
        let channel = within(connection.open_channel(None), "opening the publish channel")
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
        self.core().window.channel_opened(generation);
        self.channel = Some(channel.clone());
        Ok(channel)
    }

    async fn redeclare_exchanges(&mut self, connection: &Connection) -> Result<(), TransportError> {
        let decls: Vec<_> = match self.topology.lock() {
            Ok(topology) => topology
                .exchanges()
                .filter(|e| self.redeclare.contains(&e.name))
                .cloned()
                .collect(),
            Err(_) => Vec::new(),
        };
        let (channel, slot) = open_channel(connection, "redeclare", self.shared.clone()).await?;
        let declare = DeclareChannel::wrap(channel, slot);
        for decl in &decls {
            if let Err(error) = declare.exchange(decl).await {
                tracing::error!(error = %EscapedDisplay(&error), "declaring a lost exchange again failed");
                break;
            }
            tracing::info!(exchange = %EscapedDisplay(&decl.name), "declared a lost exchange again");
        }
        declare.close().await;
        self.redeclare.clear();
        Ok(())
    }

    fn on_stalled(&mut self) {
        let in_flight = {
            let mut core = self.core();
            core.window.stall();
            core.window.in_flight()
        };
        self.state.block(format!(
            "no publish confirm for {STALL_AFTER:?} with {in_flight} unconfirmed while \
             connected: the broker is blocking publishers (a memory or disk alarm) or is \
             overloaded"
        ));
    }

    /// Nothing was confirmed on the channel for [`STUCK_AFTER`] and the broker does not say
    /// it blocks the connection: RabbitMQ 3.10 can hold a channel in a call to a quorum
    /// queue's leader that is unreachable (a partition), answering nothing, while a new
    /// channel publishes at once. The channel is given up and its unconfirmed publishes
    /// resent on a new one (with the channel backoff, reset by the next confirm).
    fn on_stuck(&mut self) {
        Counters::bump(&self.shared.counters.stuck_reopens);
        tracing::warn!(
            for_ = ?STUCK_AFTER,
            unconfirmed = self.core().window.in_flight(),
            "no publish confirm on the channel and the broker does not say it blocks the \
             connection; opening a new channel"
        );
        self.drop_channel(None);
        self.retry_channel_later();
    }

    /// What a confirm did: unblock, and replace a channel the broker nacks everything on.
    fn on_progress(&mut self, progress: Progress) {
        if progress.unblocked {
            self.state.unblock();
        }
        self.answer_settled(None);
        if progress.reopen {
            // The window gave the channel up: what is still unsettled on it is resent on the
            // next one.
            Counters::bump(&self.shared.counters.nack_run_reopens);
            tracing::warn!(
                for_ = ?NACK_RUN_REOPEN,
                "the broker nacked every publish on the channel; opening a new one"
            );
            self.channel = None;
            self.core().direct = None;
            self.retry_channel_later();
        }
    }

    fn on_event(&mut self, event: Event) {
        let stale = match event {
            Event::Ack {
                generation,
                tag,
                multiple,
            } => {
                let progress = self.core().window.on_ack(generation, tag, multiple, now());
                if !progress.stale {
                    // Progress: a channel the broker closes next is reopened at once.
                    self.channel_backoff.reset();
                    self.on_progress(progress);
                }
                progress.stale
            }
            Event::Nack {
                generation,
                tag,
                multiple,
            } => {
                let progress = self.core().window.on_nack(generation, tag, multiple, now());
                if !progress.stale {
                    self.on_progress(progress);
                }
                progress.stale
            }
            Event::Return {
                generation,
                exchange,
                code,
                text,
                message,
            } => self.on_return(generation, &exchange, BrokerClose { code, text }, &message),
            Event::Closed { generation, close } if self.core().window.is_current(generation) => {
                self.on_channel_closed(&close);
                false
            }
            Event::Closed { .. } => true,
        };
        if stale {
            tracing::debug!("dropped an event of a replaced publish channel");
        }
    }

    /// Matches a `basic.return` to what it returns (see [`window::Window::on_return`]): same
    /// exchange, routing key, message id, correlation id and body. Whether it was stale.
    fn on_return(
        &mut self,
        generation: u64,
        exchange: &str,
        close: BrokerClose,
        returned: &WireMessage,
    ) -> bool {
        let matches = |pending: &Pending| {
            let outgoing = &pending.outgoing;
            outgoing.exchange == exchange
                && outgoing.payload.routing_key() == returned.routing_key
                && outgoing.payload.is_returned(returned)
        };
        let matched = self
            .core()
            .window
            .on_return(generation, |pending| matches(pending), close);
        match matched {
            Returned::Matched => false,
            Returned::Unmatched => {
                Counters::bump(&self.shared.counters.unmatched_returns);
                tracing::warn!(
                    exchange,
                    routing_key = %EscapedDisplay(&returned.routing_key),
                    "a basic.return matched no unsettled publish"
                );
                false
            }
            Returned::Stale => true,
        }
    }

    /// The broker closed the channel; the connection is still up. Fails what the close is
    /// about (see the module docs), queues the rest again and reopens a channel later.
    fn on_channel_closed(&mut self, close: &BrokerClose) {
        Counters::bump(&self.shared.counters.channel_closes);
        tracing::warn!(code = close.code, text = %EscapedDisplay(&close.text), "broker closed the publish channel");
        self.shared.emit(Lifecycle::ChannelClosed {
            link: Link::Publish,
            code: close.code,
            reason: close.text.clone(),
        });
        self.drop_channel(Some(close));
        match publish_refusal(close) {
            PublishRefusal::TooLarge { size, max } => {
                self.room.broker_max.store(max, Ordering::Relaxed);
                // The refused message is logged as it is answered (`Pending::settle`).
                if !self.core().window.refuse_too_large(size) {
                    tracing::warn!(size, "no unsettled message has the refused size");
                }
            }
            PublishRefusal::Exchange { code, exchange } => {
                let known = code == code::NOT_FOUND
                    && self
                        .topology
                        .lock()
                        .is_ok_and(|t| t.exchanges().any(|e| e.name == exchange));
                if known {
                    // Ours, and gone (deleted, or a broker that lost its data): declare it
                    // again and resend.
                    self.redeclare.insert(exchange);
                } else {
                    // The broker names the default exchange `amq.default`; mesh publishes
                    // to it as `""`.
                    let refused = {
                        let mut core = self.core();
                        core.window.refuse_exchange(&exchange)
                            + if exchange == DEFAULT_EXCHANGE_NAME {
                                core.window.refuse_exchange("")
                            } else {
                                0
                            }
                    };
                    tracing::warn!(
                        exchange = %EscapedDisplay(&exchange),
                        refused,
                        "the broker refused publishes to an exchange; not resent"
                    );
                }
            }
            PublishRefusal::Topic { exchange, key } => {
                let refused = self.core().window.refuse_topic(&exchange, &key);
                tracing::warn!(
                    exchange = %EscapedDisplay(&exchange),
                    routing_key = %EscapedDisplay(&key),
                    refused,
                    "the broker refused publishes under a topic this user may not write; \
                     not resent"
                );
            }
            PublishRefusal::UserId => {
                let refused = self.core().window.refuse_all();
                tracing::error!(
                    refused,
                    "the broker refused the user-id stamped on every message (it is not the \
                     connection's user); not resent"
                );
            }
            PublishRefusal::Other => {}
        }
        self.answer_settled(Some(close));
        self.retry_channel_later();
    }

    /// Forgets the channel: its unsettled messages go back to the front of the backlog, in
    /// order, except those that are not resent, which fail with `ConnectionLost`.
    fn drop_channel(&mut self, close: Option<&BrokerClose>) {
        self.channel = None;
        {
            let mut core = self.core();
            core.direct = None;
            core.window.channel_lost();
        }
        self.answer_settled(close);
        // A channel the broker closed is gone already; one we gave up on is closed by the
        // client library when its last handle drops.
    }

    fn retry_channel_later(&mut self) {
        let delay = self.channel_backoff.next_delay();
        self.channel_retry_at = Some(Instant::now() + delay);
    }

    /// The publish task's reactions to the connection going down (the window goes back to
    /// the backlog, what is not resent fails) or up (the broker's size limit is learnt
    /// again); the owner did the rest.
    fn on_link(&mut self, event: LinkEvent) {
        match &event {
            LinkEvent::Lost { reason } => {
                // The owner marked the link down, which ends a block (reported); the stall
                // clock starts over on the next connection.
                self.channel = None;
                {
                    let mut core = self.core();
                    core.direct = None;
                    core.window.connection_lost();
                }
                self.answer_settled(None);
                self.channel_retry_at = None;
                self.channel_backoff.reset();
                tracing::warn!(
                    reason = %EscapedDisplay(&reason),
                    unconfirmed = self.core().window.backlog(),
                    "publishing connection lost; unconfirmed publishes will be resent"
                );
            }
            LinkEvent::Up { address } => {
                // Perhaps another node, perhaps reconfigured: learn its limits again.
                self.room.broker_max.store(0, Ordering::Relaxed);
                self.room.frame_max.store(
                    self.owner.connection().map_or(0, frame_max),
                    Ordering::Relaxed,
                );
                tracing::info!(
                    %address,
                    to_resend = self.core().window.backlog(),
                    "publishing connection re-established"
                );
            }
        }
        self.owner.report(event);
    }

    async fn shutdown(&mut self) {
        self.room.close();
        for done in self.flushes.drain(..) {
            let _ = done.send(());
        }
        {
            // Nothing more is taken in, and the handles publish no more.
            let mut core = self.core();
            core.closed = true;
            core.direct = None;
            core.window.close();
        }
        self.answer_settled(None);
        self.commands.close();
        while let Ok(Command::Flush(done) | Command::Close(done)) = self.commands.try_recv() {
            let _ = done.send(());
        }
        if let Some(channel) = self.channel.take() {
            if channel.is_open() {
                let _ = within(channel.close(), "closing the publish channel").await;
            }
        }
        self.owner.close().await;
        tracing::info!("publishing connection closed");
    }
}
