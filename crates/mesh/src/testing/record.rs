//! What a harness saw: one [`Record`] per emit, handled delivery, retry, dead letter, call
//! and reply, in the order they happened, and the [`Log`] that keeps them and wakes the
//! assertions waiting on them.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use mesh_core::{DeadReason, EventId, RemoteError};
use tokio::sync::watch;

use crate::event::Event;

/// How many records a harness keeps: a test that goes past it stops being recorded (and its
/// failure messages say so) rather than growing without bound.
pub(crate) const MAX_RECORDS: usize = 100_000;

/// One thing a harness saw a module do, through its transport.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Record {
    /// A module published an event (an emit, a prepared event, its contract announcement).
    Published(Published),
    /// A module's handlers succeeded on a delivery, and the bus acked it.
    Handled(Handled),
    /// A module's handlers failed on a delivery, and the bus sent it down the retry ladder.
    Retried(Retried),
    /// A module gave up on a delivery and dead-lettered it, with a reason.
    DeadLettered(DeadLettered),
    /// A module called a tool, and the call ended (a reply, a remote error or a failure).
    Called(Called),
    /// A module served a tool and replied to a request.
    Replied(Replied),
}

/// An event a module published, as the transport was handed it.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Published {
    /// The module that published it (the name the harness started it under).
    pub module: String,
    /// Its routing key.
    pub key: String,
    /// Its `x-event-id`, when it has a valid one.
    pub id: Option<EventId>,
    /// Its `x-causation-id`, when stated.
    pub causation_id: Option<String>,
    /// Its JSON body.
    pub body: Bytes,
}

/// A delivery a module's handlers succeeded on (the bus acked it).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Handled {
    /// The module whose handlers ran.
    pub module: String,
    /// The queue it came from.
    pub queue: String,
    /// Its routing key.
    pub key: String,
    /// Its `x-event-id`, when it has a valid one.
    pub id: Option<EventId>,
    /// Which attempt succeeded (1 for the first delivery).
    pub attempt: u32,
    /// Its JSON body.
    pub body: Bytes,
}

/// A delivery whose handlers failed with a retryable error, sent down the retry ladder
/// (recorded once the transport took the retry copy).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Retried {
    /// The module whose handlers failed.
    pub module: String,
    /// The queue it came from, and goes back to.
    pub queue: String,
    /// Its routing key.
    pub key: String,
    /// Its `x-event-id`, when it has a valid one.
    pub id: Option<EventId>,
    /// The attempt that failed (1 for the first delivery).
    pub attempt: u32,
    /// How long the copy waits before it is delivered again, when the step is known.
    pub delay: Option<Duration>,
}

/// A delivery a module dead-lettered (recorded once the transport took the dead letter).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct DeadLettered {
    /// The module that gave up.
    pub module: String,
    /// The queue it came from.
    pub queue: String,
    /// Its routing key.
    pub key: String,
    /// Its `x-event-id`, when it has a valid one.
    pub id: Option<EventId>,
    /// Why it was set aside.
    pub reason: DeadReason,
    /// How many times handlers were called on it.
    pub attempts: u32,
    /// The last error, when a handler or the decoder reported one.
    pub last_error: Option<String>,
    /// Its body, as it came.
    pub body: Bytes,
}

/// A call a module made to a tool, once it ended.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Called {
    /// The module that called.
    pub module: String,
    /// The tool.
    pub tool: String,
    /// The request's JSON body.
    pub request: Bytes,
    /// How the call ended.
    pub outcome: CallOutcome,
}

/// How a call ended.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum CallOutcome {
    /// The tool replied with this JSON body.
    Replied(Bytes),
    /// The tool answered with an error.
    Refused(RemoteError),
    /// No reply: no server, a timeout, a transport failure, or a reply that is no reply.
    Failed(String),
}

/// A reply a module's server sent to a request.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Replied {
    /// The module that served the tool.
    pub module: String,
    /// The tool.
    pub tool: String,
    /// The reply: its JSON body, or the error the tool answered with.
    pub reply: Result<Bytes, RemoteError>,
}

fn decode<E: Event>(body: &Bytes) -> Result<E, serde_json::Error> {
    serde_json::from_slice(body)
}

impl Published {
    /// Its body as an `E`.
    pub fn event<E: Event>(&self) -> Result<E, serde_json::Error> {
        decode(&self.body)
    }
}

impl Handled {
    /// Its body as an `E`.
    pub fn event<E: Event>(&self) -> Result<E, serde_json::Error> {
        decode(&self.body)
    }
}

impl DeadLettered {
    /// Its body as an `E`.
    pub fn event<E: Event>(&self) -> Result<E, serde_json::Error> {
        decode(&self.body)
    }
}

fn id_suffix(id: Option<EventId>) -> String {
    id.map(|id| format!(" {id}")).unwrap_or_default()
}

impl fmt::Display for Record {
    /// One line, for failure messages: `` `billing` dead-lettered `module.umami.site.created`
    /// (permanent after 1 attempt: no such site) ``. Bodies are never shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Record::Published(p) => write!(f, "`{}` published `{}`", p.module, p.key),
            Record::Handled(h) => write!(
                f,
                "`{}` handled `{}`{} (attempt {})",
                h.module,
                h.key,
                id_suffix(h.id),
                h.attempt
            ),
            Record::Retried(r) => {
                write!(
                    f,
                    "`{}` retried `{}`{} after attempt {}",
                    r.module,
                    r.key,
                    id_suffix(r.id),
                    r.attempt
                )?;
                match r.delay {
                    Some(delay) => write!(f, " (delay {delay:?})"),
                    None => Ok(()),
                }
            }
            Record::DeadLettered(d) => {
                write!(
                    f,
                    "`{}` dead-lettered `{}`{} ({} after {} attempt{}",
                    d.module,
                    d.key,
                    id_suffix(d.id),
                    d.reason,
                    d.attempts,
                    if d.attempts == 1 { "" } else { "s" }
                )?;
                match &d.last_error {
                    Some(error) => write!(f, ": {})", mesh_core::codec::cut(error, 200)),
                    None => f.write_str(")"),
                }
            }
            Record::Called(c) => {
                write!(f, "`{}` called `{}`: ", c.module, c.tool)?;
                match &c.outcome {
                    CallOutcome::Replied(_) => f.write_str("replied"),
                    CallOutcome::Refused(e) => write!(f, "refused ({})", e.code),
                    CallOutcome::Failed(e) => {
                        write!(f, "failed ({})", mesh_core::codec::cut(e, 200))
                    }
                }
            }
            Record::Replied(r) => match &r.reply {
                Ok(_) => write!(f, "`{}` replied to `{}`", r.module, r.tool),
                Err(e) => write!(
                    f,
                    "`{}` replied to `{}` with error `{}`",
                    r.module, r.tool, e.code
                ),
            },
        }
    }
}

/// The records of a harness, shared with every recording transport it made.
#[derive(Debug)]
pub(crate) struct Log {
    records: Mutex<Vec<Record>>,
    /// The number of records, sent on every new one: assertions wait on it.
    count: watch::Sender<usize>,
    /// Whether a record was refused because the log was full.
    full: AtomicBool,
}

impl Log {
    pub(crate) fn new() -> Log {
        Log {
            records: Mutex::new(Vec::new()),
            count: watch::Sender::new(0),
            full: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Record>> {
        // A panic while the lock was held leaves the vector whole (pushes are atomic).
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn push(&self, record: Record) {
        let mut records = self.lock();
        if records.len() >= MAX_RECORDS {
            self.full.store(true, Ordering::Relaxed);
            return;
        }
        records.push(record);
        let count = records.len();
        drop(records);
        self.count.send_replace(count);
    }

    /// Every record so far.
    pub(crate) fn snapshot(&self) -> Vec<Record> {
        self.lock().clone()
    }

    /// The records from `from` on.
    pub(crate) fn since(&self, from: usize) -> Vec<Record> {
        self.lock()
            .get(from..)
            .map(<[Record]>::to_vec)
            .unwrap_or_default()
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<usize> {
        self.count.subscribe()
    }

    pub(crate) fn is_full(&self) -> bool {
        self.full.load(Ordering::Relaxed)
    }
}
