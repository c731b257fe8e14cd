//! `mesh outbox relay | status`: the transactional outbox's relay as a process of its own,
//! for a service that only writes its events into the outbox (`mesh_outbox::EmitIn`) and runs
//! no relay itself; and the outbox table's size.
//!
//! The relay is `mesh_outbox`'s, unchanged: one emit-only bus per `--source` (no handler, no
//! contract announcement) on the broker of the usual settings, rounds under the source's
//! lease, so it may run beside the services' own relays and other `mesh outbox relay`
//! processes on the same database. Sources are named, never discovered: each source must be
//! published as its own broker user under broker-enforced identity, which only the operator
//! knows.
//!
//! The database URL may hold a password: it is shown only with its user information
//! redacted, and no message quotes it.

use mesh_core::text::EscapedDisplay;
use std::str::FromStr as _;
use std::time::Duration;

use anyhow::Context as _;
use mesh::raw::{Name, Origin};
use mesh::Bus;
use mesh_outbox::{Backend, Outbox, RelayOptions};
use serde_json::json;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::Pool;
use tokio_util::sync::CancellationToken;

use crate::cli::{shown, Global, OutboxCommand, OutboxDatabaseArg, OutboxRelayArgs, Source};
use crate::config;
use crate::exit::{fail, fail_with_hint, Code, WithCode};
use crate::metrics;
use crate::output::{self, paint, DIM};
use crate::process;

/// Connections the relay's pool may open: a source's reads and its marks, and the
/// cleanup.
const POOL_CONNECTIONS: u32 = 8;
/// How long a SQLite writer waits for another's lock before failing.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs one `outbox` command.
pub(crate) async fn run(global: &Global, command: &OutboxCommand) -> anyhow::Result<Code> {
    match command {
        OutboxCommand::Relay(args) => relay(global, args).await,
        OutboxCommand::Status { database } => status(global, database).await,
    }
}

/// A bus speaking as `source`, with nothing to consume and nothing to announce.
fn bus_builder(source: &Source, node: &Name) -> mesh::BusBuilder {
    let builder = Bus::builder().announce(false);
    match source.origin() {
        Origin::Module => builder.node(node.as_str()).module(source.owner().as_str()),
        Origin::Mesh => builder.node(node.as_str()).context(source.owner().as_str()),
        // A node speaks for itself: its name is the owner.
        Origin::Node => builder.node(source.owner().as_str()).as_node(),
    }
}

/// The database of `--database`, parsed (nothing connected yet).
pub(crate) enum Database {
    Postgres(PgConnectOptions),
    Sqlite(SqliteConnectOptions),
}

/// Parses `--database`: `postgres://…` or `sqlite:…`; anything else, or a URL the driver
/// refuses, is a usage error that never quotes a password.
pub(crate) fn parse_database(url: &str) -> anyhow::Result<Database> {
    let url = url.trim();
    let scheme = url.split_once(':').map(|(scheme, _)| scheme);
    let invalid = || format!("invalid --database {}", shown(url));
    match scheme {
        Some("postgres" | "postgresql") => PgConnectOptions::from_str(url)
            .map(Database::Postgres)
            .coded(Code::Usage, invalid),
        Some("sqlite") => SqliteConnectOptions::from_str(url)
            .map(|options| Database::Sqlite(options.busy_timeout(SQLITE_BUSY_TIMEOUT)))
            .coded(Code::Usage, invalid),
        // Not echoed: a value that is no URL at all may be anything, a password included.
        _ => Err(fail(
            Code::Usage,
            "invalid --database: expected postgres://USER@HOST[:PORT]/DB or sqlite:PATH",
        )),
    }
}

/// The outbox on `database` (its tables created or upgraded when needed); a database that
/// cannot be opened is exit code 1.
async fn open<DB: Backend>(
    pool: Result<Pool<DB>, sqlx::Error>,
    url: &str,
) -> anyhow::Result<Outbox<DB>> {
    let pool = pool.with_context(|| format!("cannot open the outbox database {}", shown(url)))?;
    Outbox::new(pool)
        .await
        .with_context(|| format!("cannot install the outbox tables in {}", shown(url)))
}

/// What `mesh outbox relay` runs with: every option built and checked, nothing connected.
struct RelayPlan {
    sources: Vec<Source>,
    node: Name,
    amqp: mesh::amqp::AmqpOptions,
    options: RelayOptions,
}

fn plan_relay(global: &Global, args: &OutboxRelayArgs) -> anyhow::Result<RelayPlan> {
    if args.publish_deadline >= args.lease_ttl {
        return Err(fail(
            Code::Usage,
            format!(
                "--lease-ttl ({}) must outlast --publish-deadline ({}): a relay still \
                 publishing when its lease expires may publish what another relay publishes too",
                humantime::format_duration(args.lease_ttl),
                humantime::format_duration(args.publish_deadline)
            ),
        ));
    }
    let mut options = RelayOptions::default()
        .batch(args.batch)
        .poll_interval(args.poll_interval)
        .lease_ttl(args.lease_ttl)
        .publish_deadline(Some(args.publish_deadline))
        .retention(args.retention);
    if let Some(owner) = &args.owner {
        options = options.owner(owner.clone());
    }
    Ok(RelayPlan {
        sources: args.sources.clone(),
        node: config::node(global)?,
        amqp: config::amqp_options(global)?,
        options,
    })
}

/// Runs `mesh outbox relay` until SIGTERM or Ctrl-C.
async fn relay(global: &Global, args: &OutboxRelayArgs) -> anyhow::Result<Code> {
    let database = parse_database(&args.database.database)?;
    let plan = plan_relay(global, args)?;
    // Registered before anything connects, so a SIGTERM from then on stops the relay
    // cleanly instead of killing it mid-round.
    let shutdown = CancellationToken::new();
    let signals = tokio::spawn(process::cancel_on_signal(
        process::Signals::register()?,
        shutdown.clone(),
    ));
    let url = args.database.database.trim();
    let outcome = match database {
        Database::Postgres(options) => {
            let pool = connect_postgres(
                PgPoolOptions::new().max_connections(POOL_CONNECTIONS),
                options,
                config::connect_timeout(global),
            )
            .await;
            relay_on(args, plan, open(pool, url).await?, url, &shutdown).await
        }
        Database::Sqlite(options) => {
            let pool = SqlitePoolOptions::new()
                .max_connections(POOL_CONNECTIONS)
                .acquire_timeout(config::connect_timeout(global))
                .connect_with(options)
                .await;
            relay_on(args, plan, open(pool, url).await?, url, &shutdown).await
        }
    };
    signals.abort();
    outcome?;
    output::note(paint(
        DIM,
        "the relay stopped: every round finished, every lease given up",
    ));
    Ok(Code::Ok)
}

/// Starts a bus per source and the relay, waits for `shutdown`, then stops the relay (each
/// source finishes its round) and drains the buses.
async fn relay_on<DB: Backend>(
    args: &OutboxRelayArgs,
    plan: RelayPlan,
    outbox: Outbox<DB>,
    url: &str,
    shutdown: &CancellationToken,
) -> anyhow::Result<()> {
    let mut buses: Vec<Bus> = Vec::new();
    for source in &plan.sources {
        let started = async {
            let transport = config::connect(plan.amqp.clone()).await?;
            bus_builder(source, &plan.node)
                .start(transport)
                .await
                .with_context(|| format!("starting the bus of {source}"))
        };
        match started.await {
            Ok(bus) => buses.push(bus),
            Err(error) => {
                close_all(&buses).await;
                return Err(error);
            }
        }
    }
    let telemetry = match args.metrics.metrics_addr {
        // The relay's and the buses' metrics, readiness following every bus.
        Some(addr) => match metrics::serve_watching(addr, |telemetry| {
            for bus in &buses {
                telemetry.watch(bus);
            }
        })
        .await
        {
            Ok(telemetry) => Some(telemetry),
            Err(error) => {
                close_all(&buses).await;
                return Err(error);
            }
        },
        None => None,
    };
    let relay = match outbox.start_relay(buses.clone(), plan.options).await {
        Ok(relay) => relay,
        Err(error) => {
            close_all(&buses).await;
            return Err(error).with_context(|| format!("cannot start the relay on {}", shown(url)));
        }
    };
    let names: Vec<String> = plan.sources.iter().map(ToString::to_string).collect();
    output::note(paint(
        DIM,
        format!(
            "relaying the outbox of {} for {} as node {} (relay {}; Ctrl-C stops)",
            shown(url),
            names.join(", "),
            plan.node,
            relay.owner()
        ),
    ));
    shutdown.cancelled().await;
    // Each source finishes its round (confirms awaited, rows marked) and gives its lease up;
    // only then are the buses drained.
    relay.stop().await;
    for bus in &buses {
        if let Err(error) = bus.drain().await {
            tracing::warn!(error = %EscapedDisplay(&error), "draining a relay bus failed");
        }
    }
    outbox.pool().close().await;
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    Ok(())
}

async fn close_all(buses: &[Bus]) {
    for bus in buses {
        bus.close().await;
    }
}

/// The outbox's counts if it has its tables (`None` if not), the pool closed after.
async fn count_existing<DB: Backend>(
    pool: Pool<DB>,
) -> Result<Option<mesh_outbox::Counts>, mesh_outbox::Error> {
    let counts = match Outbox::existing(pool.clone()).await {
        Ok(Some(outbox)) => outbox.counts().await.map(Some),
        Ok(None) => Ok(None),
        Err(error) => Err(error),
    };
    pool.close().await;
    counts
}

/// A pool on PostgreSQL that fails at once when nothing listens at the address: sqlx's pool
/// takes a refused connection for a server still starting and tries again until `timeout`.
/// One connection is tried first; only what may heal (a server starting or shutting down,
/// too many connections, a slow answer) is left to the pool's retries. The audit store
/// connects the same way.
pub(crate) async fn connect_postgres(
    pool: PgPoolOptions,
    options: PgConnectOptions,
    timeout: Duration,
) -> Result<sqlx::PgPool, sqlx::Error> {
    use sqlx::Connection as _;
    match tokio::time::timeout(timeout, sqlx::PgConnection::connect_with(&options)).await {
        Ok(Ok(probe)) => {
            let _ = probe.close().await;
        }
        Ok(Err(error)) if !may_heal(&error) => return Err(error),
        Ok(Err(_)) | Err(_) => {}
    }
    pool.acquire_timeout(timeout).connect_with(options).await
}

/// A first connection's failure that the pool's retries may get past: PostgreSQL starting or
/// shutting down (57P03), or out of connections (class 53).
fn may_heal(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .and_then(|e| e.code())
        .is_some_and(|code| code == "57P03" || code.starts_with("53"))
}

/// Runs `mesh outbox status`: the table's pending and sent rows, and the oldest pending age.
/// It reads only: a database without the outbox's tables is said to have none, and is left
/// as it was.
async fn status(global: &Global, arg: &OutboxDatabaseArg) -> anyhow::Result<Code> {
    let url = arg.database.trim();
    let timeout = config::connect_timeout(global);
    let cannot_open = || format!("cannot open the outbox database {}", shown(url));
    let counts = match parse_database(url)? {
        Database::Postgres(options) => {
            let pool = connect_postgres(PgPoolOptions::new().max_connections(1), options, timeout)
                .await
                .with_context(cannot_open)?;
            count_existing(pool).await
        }
        Database::Sqlite(options) => {
            let pool = SqlitePoolOptions::new()
                .max_connections(1)
                .acquire_timeout(timeout)
                // A reader never makes the file, whatever the URL's mode says.
                .connect_with(options.create_if_missing(false))
                .await
                .with_context(cannot_open)?;
            count_existing(pool).await
        }
    }
    .with_context(|| format!("cannot count the outbox rows of {}", shown(url)))?;
    let Some(counts) = counts else {
        return Err(fail_with_hint(
            Code::Error,
            format!("no outbox in {}: it has no outbox tables", shown(url)),
            "a service creates them when it opens its outbox (`Outbox::new`), and so does \
             `mesh outbox relay`; check that this is the services' database",
        ));
    };
    if global.json {
        output::json(&json!({
            "pending": counts.pending,
            "sent": counts.sent,
            "oldest_pending_seconds": counts.oldest_pending_seconds,
        }))?;
    } else {
        let pending = if counts.pending == 0 {
            "0 pending".to_owned()
        } else {
            // Whole seconds: the age is a float of the database's clock.
            let age = Duration::from_secs(counts.oldest_pending_seconds.max(0.0) as u64);
            format!(
                "{} pending (the oldest for {})",
                counts.pending,
                humantime::format_duration(age)
            )
        };
        output::line(format_args!(
            "{pending}, {} sent (kept until the cleanup)",
            counts.sent
        ))?;
    }
    Ok(Code::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_urls_are_checked_without_quoting_a_password() {
        for bad in [
            "mysql://u:s3cret@h/db",
            "postgres://u:s3cret@h:notaport/db",
            "postgres://u@h:notaport/db?password=s3cret",
            "s3cret",
            "",
        ] {
            let Err(error) = parse_database(bad) else {
                panic!("{bad} was accepted")
            };
            let text = format!("{error:#}");
            assert!(!text.contains("s3cret"), "{text}");
            assert_eq!(crate::exit::classify(&error), Code::Usage, "{text}");
        }
        assert_eq!(
            shown("postgres://u:s3cret@h/db?sslmode=require&password=s3cret"),
            "postgres://<redacted>@h/db?sslmode=require&password=<redacted>"
        );
        assert!(matches!(
            parse_database("postgres://u:s3cret@h/db"),
            Ok(Database::Postgres(_))
        ));
        assert!(matches!(
            parse_database("sqlite:///var/lib/shop.db"),
            Ok(Database::Sqlite(_))
        ));
    }
}
