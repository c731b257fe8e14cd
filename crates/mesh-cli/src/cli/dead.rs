//! `mesh dead …`: the dead letters the audit logger recorded.

use clap::{Args, Subcommand, ValueEnum};
use mesh::raw::{DeadReason, Timestamp};

use crate::cli::shared::StoreArg;
use crate::cli::values::{parse_limit, parse_time};

/// `mesh dead …`.
#[derive(Debug, Subcommand)]
pub(crate) enum DeadCommand {
    /// List recorded dead letters, newest first
    #[command(after_help = DEAD_LIST_HELP)]
    List {
        #[command(flatten)]
        store: StoreArg,
        /// Only those a consumer of queue Q gave up on
        #[arg(short, long, value_name = "Q")]
        queue: Option<String>,
        /// Only this reason
        #[arg(short, long, value_enum)]
        reason: Option<ReasonArg>,
        /// Only those not re-driven yet
        #[arg(long)]
        pending: bool,
        /// Only those dead at or after T: RFC 3339, or a duration ago (30m, 2h, 1day)
        #[arg(long, value_name = "T", value_parser = parse_time)]
        since: Option<Timestamp>,
        /// At most N (1 to 1000000)
        #[arg(short = 'n', long, value_name = "N", default_value_t = 100, value_parser = parse_limit)]
        limit: usize,
    },
    /// Show one dead letter with its headers and body
    #[command(after_help = DEAD_SHOW_HELP)]
    Show {
        #[command(flatten)]
        store: StoreArg,
        /// The dead letter's id (from `mesh dead list`), or an event's id: then the event's dead
        /// letters
        id: String,
    },
    /// Send dead letters back to the queue of the consumer that gave up on them
    #[command(after_help = DEAD_REDRIVE_HELP)]
    Redrive(RedriveArgs),
    /// Delete recorded dead letters from the audit store
    #[command(after_help = DEAD_PURGE_HELP)]
    Purge {
        #[command(flatten)]
        store: StoreArg,
        /// Only those a consumer of queue Q gave up on
        #[arg(short, long, value_name = "Q")]
        queue: Option<String>,
        /// Only this reason
        #[arg(short, long, value_enum)]
        reason: Option<ReasonArg>,
        /// Only those already re-driven
        #[arg(long)]
        redriven: bool,
        /// Delete every recorded dead letter (required when no filter is given)
        #[arg(long)]
        all: bool,
        /// Print how many and which dead letters would be deleted; delete nothing
        #[arg(long)]
        dry_run: bool,
    },
}

const DEAD_PURGE_HELP: &str = "\
Deletes the records from the audit store only; no queue on the broker is touched. Prints how
many were deleted. Without a filter, --all is required. With --dry-run it lists the records
that would be deleted (as `mesh dead list` does) and how many, and deletes nothing.

Examples:
  mesh dead purge --redriven --dry-run
  mesh dead purge -q anchor.mailer.events -r max-attempts
  mesh dead purge --all";

/// `--reason`: why a dead letter was set aside (`x-mesh-dead-reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ReasonArg {
    /// Handlers failed with retryable errors as many times as the retry policy allows
    MaxAttempts,
    /// A handler returned a permanent error
    Permanent,
    /// The message breaks the contract (a header missing, a body that is not JSON, a bad key)
    Undecodable,
    /// The consumer does not read the event's schema version
    UnreadSchema,
    /// The broker's delivery limit: the message crashed its consumer every time
    #[value(alias = "delivery_limit")]
    DeliveryLimit,
    /// The broker dead-lettered a rejected message
    Rejected,
    /// The broker dead-lettered an expired message
    Expired,
    /// A module or node event whose x-source is not the owner of its key
    ForgedSource,
    /// The body does not match the JSON Schema of the handler that reads it
    SchemaInvalid,
    /// Delivered to a consumer's queue by a path mesh sends no event by
    ForeignPath,
}

impl From<ReasonArg> for DeadReason {
    fn from(reason: ReasonArg) -> DeadReason {
        match reason {
            ReasonArg::MaxAttempts => DeadReason::MaxAttempts,
            ReasonArg::Permanent => DeadReason::Permanent,
            ReasonArg::Undecodable => DeadReason::Undecodable,
            ReasonArg::UnreadSchema => DeadReason::UnreadSchema,
            ReasonArg::DeliveryLimit => DeadReason::DeliveryLimit,
            ReasonArg::Rejected => DeadReason::Rejected,
            ReasonArg::Expired => DeadReason::Expired,
            ReasonArg::ForgedSource => DeadReason::ForgedSource,
            ReasonArg::SchemaInvalid => DeadReason::SchemaInvalid,
            ReasonArg::ForeignPath => DeadReason::ForeignPath,
        }
    }
}

/// `mesh dead redrive`.
#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("which").required(true).args(["ids", "all", "queue"])))]
pub(crate) struct RedriveArgs {
    #[command(flatten)]
    pub(crate) store: StoreArg,
    /// Dead-letter ids
    #[arg(value_name = "ID")]
    pub(crate) ids: Vec<String>,
    /// Every dead letter not re-driven yet
    #[arg(long)]
    pub(crate) all: bool,
    /// Every dead letter of queue Q not re-driven yet
    #[arg(short, long, value_name = "Q")]
    pub(crate) queue: Option<String>,
    /// Print what would be re-driven and where (or why it would be refused); publish
    /// nothing, mark nothing
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Re-drive the dead letters named by id even if they were re-driven before (refused
    /// otherwise: their consumer would get the event once more)
    #[arg(long, conflicts_with_all = ["all", "queue"])]
    pub(crate) again: bool,
    /// Re-drive untrusted dead letters too (their publisher is not the owner of the queue
    /// they name), each with every x-mesh-* header removed (refused otherwise)
    #[arg(long)]
    pub(crate) strip_untrusted_claims: bool,
}

const DEAD_LIST_HELP: &str = "\
Examples:
  mesh dead list --pending
  mesh dead list --queue anchor.mailer.events --reason max-attempts --json
  mesh dead list -q anchor.mailer.events -r delivery-limit -n 10";

const DEAD_SHOW_HELP: &str = "\
A dead letter has an id of its own, not its event's: `mesh dead list` shows both. Given an
event's id, it shows every dead letter of that event (one per consumer that gave up on it).

Examples:
  mesh dead show 3f0c1d1e-2b53-5b8e-9a43-0c2b3f1f4f55
  mesh dead show 01a22f30-5f0e-4c4e-9d1c-7e0f3c1b2a44 --json";

const DEAD_REDRIVE_HELP: &str = "\
A re-driven dead letter keeps its event id, key, body and headers (less the dead-letter
annotations and the attempt counter) and is published to its consumer's queue only, which
starts afresh with its full retry policy. Only a mesh consumer queue is a target
(<node>.<module>.events or shared.<module>.events): a dead letter naming any other queue
(serve.*, a retry queue, mesh.*, anything else) is refused, never published. Exits 1 if any
could not be re-driven (or, with --dry-run, would be refused).

--all and --queue take only the dead letters not re-driven yet. A dead letter named by id
that was re-driven before is refused unless --again is given (the store keeps the count
and the time of the last re-drive).

A dead letter marked untrusted (a logger enforcing identity found that its publisher is not
the owner of the queue it names: anyone may have written its claims) is refused unless
--strip-untrusted-claims is given; it then goes without any x-mesh-* header, so its consumer
believes nothing it claimed.

The audit store owns the re-drive state: loggers writing one database share it. With
separate databases, re-drive from one of them; re-driving the same dead letter from another
store sends it again (at-least-once).

Examples:
  mesh dead redrive 3f0c1d1e-2b53-5b8e-9a43-0c2b3f1f4f55
  mesh dead redrive --queue anchor.mailer.events
  mesh dead redrive --all --dry-run
  mesh dead redrive 3f0c1d1e-2b53-5b8e-9a43-0c2b3f1f4f55 --again
  mesh dead redrive 3f0c1d1e-2b53-5b8e-9a43-0c2b3f1f4f55 --strip-untrusted-claims";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_dead_reason_is_a_reason_value_of_the_same_name() {
        use clap::ValueEnum as _;
        assert_eq!(ReasonArg::value_variants().len(), DeadReason::ALL.len());
        for reason in DeadReason::ALL {
            let arg = ReasonArg::from_str(reason.as_str(), false)
                .unwrap_or_else(|e| panic!("{reason}: {e}"));
            assert_eq!(DeadReason::from(arg), reason);
        }
        assert_eq!(
            ReasonArg::from_str("delivery_limit", false),
            Ok(ReasonArg::DeliveryLimit)
        );
    }
}
