//! `mesh outbox …`: the transactional outbox's relay and its table's counts; the source
//! a relay publishes as, and the database URL as messages show it.

use std::time::Duration;

use clap::{Args, Subcommand};
use mesh::raw::{Name, Origin};

use crate::cli::shared::MetricsArg;
use crate::cli::values::{parse_duration, parse_within};

/// `mesh outbox …`.
#[derive(Debug, Subcommand)]
pub(crate) enum OutboxCommand {
    /// Publish the outbox's committed events of the given sources until Ctrl-C or SIGTERM
    #[command(after_help = OUTBOX_RELAY_HELP)]
    Relay(OutboxRelayArgs),
    /// Count the outbox's pending and sent rows, with the oldest pending row's age
    #[command(after_help = OUTBOX_STATUS_HELP)]
    Status {
        #[command(flatten)]
        database: OutboxDatabaseArg,
    },
}

/// `--database`, on the outbox commands.
#[derive(Args)]
pub(crate) struct OutboxDatabaseArg {
    /// The database the services write their outbox rows into: postgres://USER@HOST[:PORT]/DB
    /// or sqlite:PATH (the file must exist). `relay` creates or upgrades its outbox tables
    /// when needed (PostgreSQL schema mesh_outbox, SQLite tables mesh_*); `status` only
    /// reads them. Prefer ~/.pgpass or PGPASSWORD to a password in the URL, which is never
    /// shown
    #[arg(
        long,
        env = "MESH_OUTBOX_DATABASE",
        value_name = "URL",
        hide_env_values = true
    )]
    pub(crate) database: String,
}

impl std::fmt::Debug for OutboxDatabaseArg {
    /// The URL with its user information and password redacted.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutboxDatabaseArg")
            .field("database", &shown(&self.database))
            .finish()
    }
}

/// `mesh outbox relay`.
#[derive(Debug, Args)]
pub(crate) struct OutboxRelayArgs {
    #[command(flatten)]
    pub(crate) database: OutboxDatabaseArg,

    /// A source whose rows to publish, <origin>.<owner> (module.shop, mesh.billing,
    /// node.anchor): the identity that wrote them with emit_in, and the one they are
    /// published as (repeatable; required)
    #[arg(
        short,
        long = "source",
        value_name = "ORIGIN.OWNER",
        required = true,
        value_parser = Source::parse
    )]
    pub(crate) sources: Vec<Source>,

    /// Rows read and published per round (1 to 100000)
    #[arg(long, value_name = "N", default_value_t = 500, value_parser = parse_relay_batch)]
    pub(crate) batch: usize,

    /// How often a source with nothing in flight looks for committed rows: at most this
    /// much lag on top of a round. Idle, one read-only indexed query per source and interval
    #[arg(long, value_name = "DURATION", default_value = "10ms", value_parser = parse_duration)]
    pub(crate) poll_interval: Duration,

    /// How long a source's lease lasts unrenewed: after this relay's crash, its sources wait
    /// this long for another relay. Longer than --publish-deadline
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub(crate) lease_ttl: Duration,

    /// How long one publish may wait for room and its confirm before the round is tried
    /// again
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub(crate) publish_deadline: Duration,

    /// How long sent rows are kept before the relay's cleanup deletes them
    #[arg(long, value_name = "DURATION", default_value = "1h", value_parser = parse_duration)]
    pub(crate) retention: Duration,

    /// This relay's name in the lease table, unique among the relays of the database (at
    /// most 100 bytes, no control character) [default: relay-<random>]
    #[arg(long, value_name = "NAME", value_parser = parse_relay_owner)]
    pub(crate) owner: Option<String>,

    #[command(flatten)]
    pub(crate) metrics: MetricsArg,
}

/// `--batch` of `outbox relay`: 1 to 100000.
pub(crate) fn parse_relay_batch(text: &str) -> Result<usize, String> {
    parse_within(text, 1, 100_000)
}

/// `--owner` of `outbox relay`: at most 100 bytes, no control character, not empty.
pub(crate) fn parse_relay_owner(text: &str) -> Result<String, String> {
    if text.is_empty() || text.len() > 100 || text.chars().any(char::is_control) {
        return Err("expected 1 to 100 bytes with no control character".to_owned());
    }
    Ok(text.to_owned())
}

const OUTBOX_RELAY_HELP: &str = "\
For a service that writes its events into the transactional outbox (mesh_outbox's emit_in) and
runs no relay of its own. Each --source gets an emit-only bus (no queue, no contract
announcement) on the broker of --url; the relay publishes the source's committed rows through
it with the broker's confirms, in order per source, and marks them sent only after the
confirm. Relays on one database share the work: one relay at a time holds a source's lease,
so this process may run beside others and beside the services' own relays.

Sources are never discovered from the table: each source is published as a broker user the
operator chooses. Under
broker-enforced identity (mesh access apply, consumers with enforce_identity, the audit logger
with --enforce-identity) an event counts only when published by its key's owner: run one relay
per source, connected as that source's own user (module.shop's relay with the user
module.shop's credentials: --url, --password-file or MESH_PASSWORD). A relay connected as
another user has its publishes refused by the broker (each round fails, is logged and tried
again) or its events dead-lettered forged-source by the consumers. Several sources in one
process share its one user: only where the broker does not enforce identity.

Ctrl-C or SIGTERM stops it cleanly: each source finishes its round (confirms awaited, rows
marked sent), gives its lease up, and the buses drain; exit code 0. A SIGKILL loses nothing:
rows published and not yet marked are published again by the next relay once the lease
expires (--lease-ttl), a duplicate consumers drop by event id. A bad URL, source or option is
exit code 2; a database that cannot be opened is 1; a broker that cannot be reached is 3.

Examples:
  mesh outbox relay --database postgres://shop@db/shop --source module.shop
  MESH_PASSWORD_FILE=/etc/mesh/shop.pw mesh outbox relay --url amqps://module.shop@rabbit/prod \\
      --database postgres://shop@db/shop -s module.shop --metrics-addr 127.0.0.1:9464
  mesh outbox relay --database sqlite:///var/lib/shop/shop.db -s module.shop --poll-interval 200ms";

const OUTBOX_STATUS_HELP: &str = "\
Prints the rows not sent yet, the age of the oldest of them, and the rows sent and kept until
a relay's cleanup deletes them (--retention); --json gives {\"pending\", \"sent\",
\"oldest_pending_seconds\"}. It only reads: a database without the outbox tables is an
error saying so (exit code 1), and is left as it was.

Examples:
  mesh outbox status --database postgres://shop@db/shop
  MESH_OUTBOX_DATABASE=sqlite:///var/lib/shop/shop.db mesh outbox status --json";

/// A source of outbox rows: `<origin>.<owner>`, the identity whose bus publishes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Source {
    origin: Origin,
    owner: Name,
}

impl Source {
    /// `module.<m>`, `mesh.<c>` or `node.<n>`.
    pub(crate) fn parse(text: &str) -> Result<Source, String> {
        let wanted = "expected <origin>.<owner> with origin module, mesh or node (e.g. \
                      module.shop)";
        let (origin, owner) = text.split_once('.').ok_or_else(|| wanted.to_owned())?;
        let origin = match origin {
            "module" => Origin::Module,
            "mesh" => Origin::Mesh,
            "node" => Origin::Node,
            _ => return Err(wanted.to_owned()),
        };
        let owner = Name::parse(owner).map_err(|e| format!("{e} ({wanted})"))?;
        Ok(Source { origin, owner })
    }

    /// What kind of owner speaks.
    pub(crate) fn origin(&self) -> Origin {
        self.origin
    }

    /// The module, context or node that speaks.
    pub(crate) fn owner(&self) -> &Name {
        &self.owner
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.origin, self.owner)
    }
}

/// The database URL for messages: its user information, and the value of a `password`
/// query parameter (which PostgreSQL URLs may carry), redacted.
pub(crate) fn shown(url: &str) -> String {
    let redacted = mesh::amqp::redact_url(url);
    let Some((base, query)) = redacted.split_once('?') else {
        return redacted;
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if key.eq_ignore_ascii_case("password") => format!("{key}=<redacted>"),
            _ => pair.to_owned(),
        })
        .collect();
    format!("{base}?{}", query.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_name_an_origin_and_an_owner() {
        assert_eq!(
            Source::parse("module.shop").unwrap().to_string(),
            "module.shop"
        );
        assert_eq!(
            Source::parse("mesh.billing").unwrap().to_string(),
            "mesh.billing"
        );
        assert_eq!(
            Source::parse("node.anchor").unwrap().to_string(),
            "node.anchor"
        );
        for bad in ["shop", "module.", "queue.shop", "module.a.b", "", "."] {
            assert!(Source::parse(bad).is_err(), "{bad}");
        }
    }
}
