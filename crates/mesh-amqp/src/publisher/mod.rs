//! The publish side: one task owns the publishing connection, its confirm channel and the
//! unconfirmed window, and carries the window through every failure.
//!
//! # Design
//!
//! [`Publisher`] is a cheap handle. A publish first takes room in the *unconfirmed window*:
//! one permit of a semaphore of `confirm_window` permits, and as many permits of a second
//! semaphore as its body has bytes (`max_unconfirmed_bytes` in all). Waiting for room is the
//! backpressure, bounded by the publish deadline
//! ([`Backpressure`]); so memory stays bounded through an
//! outage or a broker alarm however fast callers publish. The message then goes, with its
//! permits, into the window, and the caller gets a [`Confirm`] to await now, later or
//! never. The permits are released when the broker settles the message: the window owns
//! them from then on, and the task gives back those of everything one confirm settled in
//! one call per semaphore, before it tells any of their callers.
//! A publish that finds room is taken in without awaiting anything
//! ([`Publisher::try_publish`]); only one that must wait builds, and boxes apart, the future
//! that waits ([`Publisher::publish_waiting`]). So a publish's own future stays small, and
//! boxing it (as `Transport::publish` does) stays cheap.
//!
//! # Who writes the frame
//!
//! The window and the backlog (below) are shared by the handles and the task under one
//! lock (`publication::Core`), never held across an await. While the task allows it (a
//! confirm channel open and selected, the backlog empty) a handle publishes its message
//! itself, under that lock: it takes it into the window and puts its frames whole into the
//! client library's outgoing queue without waiting (`Channel::try_basic_publish`, a method
//! of mesh's fork), so the window numbers publishes in the order their frames leave and a
//! cancelled caller can leave no half-written publish (it is either before the lock, and
//! nothing happened, or after it, and the message is in the window). The emitting task
//! encodes nothing more than the raw client's caller does, and nothing crosses to another
//! task before the client's writer: no hand-over to the publish task, no wake of it per
//! publish. Whenever the task must publish from the backlog (after a loss, on a new
//! channel, when the client's queue is full) it takes the channel back first, publishes
//! the backlog in order, awaiting the client, and gives it back once the backlog is empty;
//! a handle that finds it taken leaves its message in the backlog and wakes the task.
//!
//! The task owns the connection (through its [`ConnectionOwner`]; `<prefix>.publish`, its
//! own connection because RabbitMQ blocks publishing connections during alarms, which must
//! not stall consumers) and one channel in confirm mode. The window keeps two queues of
//! whole messages:
//!
//! - the **window**, *sequence number → message*, of what was published on the current
//!   channel and not yet settled. It numbers each `basic.publish` as the broker does (1, 2, …
//!   from `confirm.select`);
//! - the **backlog**, in order, of what is waiting to be published: new messages while the
//!   connection is down or the task holds the channel, and every unsettled message of a
//!   lost channel.
//!
//! The broker settles a message with `basic.ack` (with `multiple`, everything up to the tag):
//! `Ok`, or [`Unroutable`] if a `basic.return` for it came
//! first (the broker returns before it acks); or with `basic.nack`:
//! [`Nacked`]. A channel on which the broker has nacked every
//! publish for [`NACK_RUN_REOPEN`] is replaced (with the channel backoff): RabbitMQ 3.10 can
//! tie a channel to a quorum queue's dead leader for as long as that node is down, and nacks
//! everything sent there, while a new channel reaches the new leader.
//!
//! # Recovery
//!
//! When the channel or the connection is lost, whatever was unsettled on it may or may not
//! have reached a queue. The window goes back to the front of the backlog, in publish order,
//! and is published again, with the same message (so the same event id), on the next
//! channel, where it is numbered anew: at-least-once, so a consumer may see a resent message
//! twice, and dedups by event id. What is *not* sent again:
//!
//! - an RPC request (`resend = false`): its reply queue died with the consume connection, or
//!   will, so it fails at once with `ConnectionLost` and the caller decides;
//! - a message the broker refused as too large (`406 PRECONDITION_FAILED - message size N is
//!   larger than configured max size M`, which closes the *channel*): the message of that size
//!   fails with [`TooLarge`] and the rest is resent; the limit is
//!   remembered, so a later message over it fails before it is sent;
//! - a message whose properties and headers do not fit in one frame of the connection
//!   (AMQP's content-header frame, at most the negotiated `frame_max`): a broker would close
//!   the whole *connection* on it, with nothing to tell which publish it was, so it is
//!   measured (with the client library's encoding) as it is accepted and again on the
//!   connection it would go out on, and fails with
//!   [`HeadersTooLarge`], never sent;
//! - a message to an exchange the broker says is gone (`404`) and that this transport never
//!   declared, or may not write to (`403`): it fails, the rest is resent. An exchange of the
//!   recorded topology is declared again before the next channel instead;
//! - a message under a topic this user may not write (`403`, a topic permission: the close
//!   names the exchange and the key): every waiting message to that exchange under that key
//!   fails with [`Forbidden`], the rest is resent;
//! - every message, when the broker refuses the `user-id` the publisher stamps on each
//!   (`406`, it is not the connection's user): each fails with `Forbidden`.
//!
//! A lost connection is reconnected by the task's [`ConnectionOwner`] (shared with the
//! consume link) with backoff (100 ms doubling to 5 s by default, with jitter), trying the
//! addresses in turn from the one after the lost one; the task only reacts (the window back
//! to the backlog, the broker's size limit forgotten). A channel the
//! broker closed while the connection stayed up is reopened with the same backoff, reset by
//! the next confirm, so a broker that keeps closing channels is not hammered.
//!
//! A [`Confirm`] waits through all of this until its message is confirmed or its deadline
//! passes ([`Timeout`]). A timed-out message stays in the window
//! and may still be delivered: the caller only gave up learning the outcome.
//!
//! # Blocked
//!
//! During a memory or disk alarm RabbitMQ stops reading from publishing connections. It
//! says so with `connection.blocked` only to clients that announce that capability, which
//! mesh's fork of amqprs does (upstream 2.1 does not): the link is then reported blocked
//! (in `health()`, a [`Lifecycle::Blocked`] event, the blocked time) until
//! `connection.unblocked`. The task also infers a block: when messages wait in the window
//! and no confirm came for [`STALL_AFTER`] while the connection is up, the link is reported
//! blocked until the next confirm. An overloaded broker that confirms nothing for that long
//! is reported the same way, which is what a readiness check wants to know.
//!
//! # Stuck
//!
//! A channel on which nothing was confirmed for [`STUCK_AFTER`] (10 s) while messages wait,
//! the connection is up and the broker does *not* say it blocks it, is given up: its
//! unconfirmed publishes are resent on a new channel (counted in `AmqpStats::stuck_reopens`),
//! as after a lost channel. RabbitMQ 3.10 can hold a publishing channel in a call to a
//! quorum queue's leader that a partition made unreachable: the channel answers nothing
//! (no confirm, no nack, not even to `rabbitmqctl`) while the rest of the connection, and a
//! new channel, work (docs/RELIABILITY.md, scenario p4). During an alarm the broker says
//! `connection.blocked`, and no channel is replaced: a new one would not help.
//!
//! Channel callbacks of the client library run on its own tasks; they only forward
//! [`Event`]s, tagged with the channel's generation so that late events of a replaced channel
//! are ignored.
//!
//! # State and shell
//!
//! What decides correctness — numbering, settling, returns, what a lost or refused channel
//! sends again and in which order, the nack run, the stall — is the [`window::Window`] state
//! machine, which does no I/O and is tested alone (unit and property tests). The task is its
//! shell: it feeds it the connection's and the channel's events and performs what it says
//! (publish the backlog, answer a caller, replace the channel, report blocked); a handle
//! performs only the publish of its own message, and only on a channel the task gave it.
//!
//! # Files
//!
//! - `handle`: the [`Publisher`] handle, the wait for room and the [`Confirm`];
//! - `publication`: a publish on its way (what it carries, its room, its header frame's
//!   size, what its caller is told), and the window shared under a lock with the channel a
//!   handle may publish on (`Core`);
//! - `task`: the [`PublishTask`], the shell of the window;
//! - `callback`: the channel's callbacks, forwarding [`Event`]s to the task;
//! - `window`: the state machine.
//!
//! [`Confirm`]: mesh_core::Confirm
//! [`ConnectionOwner`]: crate::connection::owner::ConnectionOwner
//! [`Event`]: callback::Event
//! [`Lifecycle::Blocked`]: crate::Lifecycle::Blocked
//! [`NACK_RUN_REOPEN`]: window::NACK_RUN_REOPEN
//! [`PublishTask`]: task::PublishTask
//! [`STALL_AFTER`]: window::STALL_AFTER
//! [`STUCK_AFTER`]: window::STUCK_AFTER
//! [`Backpressure`]: mesh_core::TransportErrorKind::Backpressure
//! [`Unroutable`]: mesh_core::TransportErrorKind::Unroutable
//! [`Nacked`]: mesh_core::TransportErrorKind::Nacked
//! [`TooLarge`]: mesh_core::TransportErrorKind::TooLarge
//! [`HeadersTooLarge`]: mesh_core::TransportErrorKind::HeadersTooLarge
//! [`Forbidden`]: mesh_core::TransportErrorKind::Forbidden
//! [`Timeout`]: mesh_core::TransportErrorKind::Timeout

mod callback;
mod handle;
#[cfg(test)]
mod props;
mod publication;
mod task;
// `pub(crate)`: the micro-benchmarks reach it through `crate::bench_internals`.
pub(crate) mod window;

pub(crate) use handle::{Attempt, Publisher};
pub(crate) use publication::{Payload, Publication};
