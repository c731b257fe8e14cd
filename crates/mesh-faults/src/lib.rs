//! Fault-injection scenarios for mesh, on private RabbitMQ nodes (dev-only, never published).
//!
//! The scenarios live in `tests/`, one test binary per kind of node they need (see the
//! crate's `README.md`); this library holds what they share:
//!
//! - [`conventions`]: what the harness and its child processes agree on (the password's
//!   environment variable, the management URL where nothing listens);
//! - [`setup`]: a vhost of the scenario's own on a private node or cluster, a broker user
//!   for each module with exactly the access plan's permissions, transport options (and
//!   child processes' logins) connecting as those users, and an opt-in tracing subscriber;
//! - [`emitter`]: a load generator that emits through a [`mesh::Bus`] and retries every emit
//!   that failed with a retryable error, recording each try and confirm in a
//!   [`mesh_testkit::Ledger`] (the at-least-once contract covers *confirmed* emits only);
//! - [`timeline`]: instants of confirms and handles, and a log of a bus's health, from which
//!   the scenarios measure detection and recovery times.
//!
//! - [`soak`]: the soak, minutes of work under random, overlapping faults from a seeded
//!   plan, and the books it closes (the binary `mesh-soak` runs it);
//! - [`worker`]: a child process of a scenario and the lines it says (with the child side's
//!   `child_main` and `say`), and the resident memory
//!   of a process as the OS reports it.
//!
//! The binary `faults-consumer` (in `src/bin`) is the consumer process that the
//! consumer-crash scenario SIGKILLs mid-handler; `faults-worker` holds the child processes of
//! the cluster, poison, backlog and audit scenarios (an RPC server killed mid-request, a
//! consumer that crashes on a poison event, a consumer whose memory is measured, the audit
//! logger).
//!
//! Architecture invariant: nothing here starts, stops or alarms the machine's shared broker;
//! every scenario runs on private nodes (or a private cluster) from `mesh-testkit`.

pub mod conventions;
pub mod emitter;
pub mod setup;
pub mod soak;
pub mod timeline;
pub mod worker;

pub use emitter::{EmitPlan, Emitter, Try, TryOutcome};
pub use timeline::{HealthLog, Timeline};
pub use worker::Worker;

use std::time::Duration;

/// A duration as seconds with millisecond precision, for the scenarios' printed figures.
pub fn secs(d: Duration) -> String {
    format!("{:.3}s", d.as_secs_f64())
}

/// An optional duration, `-` when absent (the thing measured never happened).
pub fn opt_secs(d: Option<Duration>) -> String {
    d.map_or_else(|| "-".to_owned(), secs)
}

/// An error and its `source()` chain on one line, for the scenarios' reports: the test
/// kit's, under the name the scenarios use.
pub use mesh_testkit::error_chain as chain;
