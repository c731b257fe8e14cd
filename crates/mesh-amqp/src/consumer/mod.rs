//! Consumers: a channel per subscription, read straight by the [`Subscription`]; a pump
//! that keeps it attached across failures; and the acker that settles each delivery.
//!
//! # Design
//!
//! Each subscription has a channel of its own on the consume connection, with
//! `basic.qos(prefetch, global = false)` (per consumer: global QoS on a quorum queue closes
//! the connection). The subscription's reader polls the client library's stream itself (a
//! [`DeliveryFeed`]) and turns each message into a [`Delivery`] there, so a delivery crosses
//! no task of ours on its way to a handler. Two tasks serve it:
//!
//! - the **pump** owns the consumer's lifecycle: it sends `basic.cancel` when the
//!   subscription is cancelled or dropped, and re-attaches when the consumer stops (see
//!   below), handing the new consumer's stream to the subscription;
//! - the **ack tracker** owns every settlement sent on the channel. It knows which delivery
//!   tags are handed out and not yet decided (the reader registers each in a set they share,
//!   without waking it), and coalesces acks: after draining whatever commands are waiting,
//!   it acks the decided tags below the oldest undecided one with one
//!   `basic.ack(multiple)` and the rest one by one. While fewer than half the prefetch is
//!   decided, and handlers still run on other deliveries of the channel or nobody awaits
//!   the acks decided (all handed on with [`Delivery::ack_detached`], as the SDK's consumer
//!   loop does), it first waits up to [`ACK_LINGER`] (1 ms) for more decisions to join: a
//!   quorum queue applies every ack frame as a command of its replicated log, so frames,
//!   not messages, are what an ack costs the broker. So a delivery is never acked before
//!   its handler finished, a busy consumer sends one ack frame per 16 to 32 deliveries
//!   (with the default prefetch of 32), and a consumer awaiting each ack while handling one
//!   delivery at a time acks at once. A detached ack waits at most the linger: it delays no
//!   caller, and the unacked messages it holds are far fewer than the prefetch at any rate
//!   the linger lets through. Releases are `basic.nack(requeue)`, sent at once and
//!   before the acks of the same batch so a `multiple` ack never covers them.
//!   [`Delivery::ack_all`] sends the acks of one channel's deliveries as a single command
//!   (one wake of the tracker and one answer, instead of one per delivery), at once: a
//!   batch is what the wait would gather, and its caller waits for it (the audit logger's
//!   next batch fills only as the broker's credit comes back). An ack handed on with
//!   [`Delivery::ack_detached`] (the SDK's consumer loop acks so) has no answer at all:
//!   nobody waits for it, and the tracker reports a failure to the [`AckFailed`] it came
//!   with. The tracker takes every command already queued before it
//!   closes its channel at the transport's close, so such an ack is sent (or reported)
//!   before the connection goes.
//!
//! Every frame the tracker and the pump send on a channel (acks, releases, `basic.cancel`)
//! and its close pass through the channel's gate ([`crate::gate`]), which a close marks
//! first, whoever begins it (the broker's close callback does, before the client library
//! answers it): nothing follows a channel's close on the wire, where the broker would
//! answer it with a connection error. The `interleave` tests check every interleaving.
//!
//! # Re-attaching
//!
//! A consumer can stop without being asked to: the broker cancels it (`basic.cancel`, when
//! its queue is deleted), closes its channel (a consumer timeout), or the connection is lost.
//! The pump learns it from the channel's callbacks (a broker's cancel or close), from the
//! link (a lost connection) or from the reader (the stream ended), whichever comes first, so
//! health reports it even while nobody reads the subscription. It re-attaches: after a lost
//! connection it waits for the link's next connection (up once the topology is declared
//! again), otherwise for a backoff delay; then it opens a fresh channel, declares its queue,
//! the queue's retry queues and bindings again from the recorded [`Topology`] (a deleted
//! queue comes back; not on the first attempt after a lost connection, whose replay just
//! declared them all), sets the prefetch, consumes, and hands the new stream to the
//! subscription, which switches to it once the old one has nothing ready. Failed attempts
//! back off like reconnects; the backoff starts over once a consumer stayed attached for
//! [`STABLE_AFTER`], so a queue the broker keeps cancelling is not hammered. The
//! subscription's reader sees nothing but, perhaps, redeliveries. An ephemeral subscription
//! gets a new server-named queue, bound to its patterns (its old one died with its channel).
//!
//! # Fencing stale deliveries
//!
//! Delivery tags are numbers local to a channel: acking tag 5 of a lost channel on its
//! replacement would ack another message, or close the channel (`PRECONDITION_FAILED -
//! unknown delivery tag`). So each channel has its own tracker, and an acker holds the
//! tracker of the channel its delivery came on, never the current one: once that
//! channel is gone, every settlement fails with `ConnectionLost` (the broker has requeued
//! the message already and redelivers it on the new channel). Deliveries that were still in
//! the client library's buffer when their channel died are dropped, not handed out: nothing
//! could settle them. The tracker closes its channel when the reader and every acker are
//! gone, so acks of deliveries still buffered after a cancel keep working.
//!
//! Ephemeral subscriptions consume with `no_ack`: there is no tracker, and settling is a
//! no-op.
//!
//! # State and shell
//!
//! The tracker's bookkeeping — what is undecided, which frames settle what was decided, what
//! a lost channel does to them — is the [`ack::AckTracker`] state machine, which does no I/O
//! and is tested alone (unit and property tests). The tracker task is its shell: it feeds it
//! the handlers' decisions, sends the frames it returns and answers who waits for them; the
//! reader registers each delivery in it, under a lock held only for that.
//!
//! # Files
//!
//! - `attach`: a new channel, its queue declared again, the prefetch, `basic.consume`;
//! - `pump`: the task that cancels and re-attaches, one per subscription;
//! - `feed`: the subscription's reader of the stream, which makes deliveries;
//! - `acker`: what a handler's decision does (the copies published before the ack);
//! - `settle`: the right to settle one delivery, and its commands to the tracker;
//! - `tracker`: the ack tracker task, the shell of `ack`, the state machine;
//! - `interleave` (tests): every interleaving of the tracker, the pump, the handlers and a
//!   channel's close, against a model of the broker;
//! - `forward`: the retry queues' forwarders;
//! - `path`: the trusted-path rule, by which exchange and key a delivery may reach a queue.
//!
//! [`Subscription`]: mesh_core::Subscription
//! [`DeliveryFeed`]: mesh_core::DeliveryFeed
//! [`Delivery`]: mesh_core::Delivery
//! [`Delivery::ack_detached`]: mesh_core::Delivery::ack_detached
//! [`Delivery::ack_all`]: mesh_core::Delivery::ack_all
//! [`AckFailed`]: mesh_core::AckFailed
//! [`ACK_LINGER`]: tracker::ACK_LINGER
//! [`STABLE_AFTER`]: pump::STABLE_AFTER
//! [`Topology`]: crate::topology::Topology

// `pub(crate)`: the micro-benchmarks reach it through `crate::bench_internals`.
pub(crate) mod ack;
mod acker;
mod attach;
mod feed;
pub(crate) mod forward;
#[cfg(test)]
mod interleave;
mod path;
#[cfg(test)]
mod props;
mod pump;
mod settle;
mod tracker;

pub(crate) use attach::{closing, consume, AttachSpec, Consumer, ConsumerCounts, Env, Source};
pub(crate) use path::Arrival;
pub(crate) use pump::subscribe;
