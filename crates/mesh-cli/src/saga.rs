//! `mesh saga list | show`: the instances a saga service (`mesh_saga`) keeps in its
//! database, read only. The database URL is shown only with its user information redacted;
//! saga names, keys and states come from the database and are escaped in text output.

use mesh_core::text::EscapedDisplay;

use anyhow::Context as _;
use mesh_saga::{Instance, SagaStore};
use serde_json::{json, Value};
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::Pool;

use crate::cli::{shown, Global, SagaCommand, SagaDatabaseArg};
use crate::config;
use crate::exit::{fail, fail_with_hint, Code};
use crate::outbox::{connect_postgres, parse_database, Database};
use crate::output;

/// Runs one `saga` command.
pub(crate) async fn run(global: &Global, command: &SagaCommand) -> anyhow::Result<Code> {
    let arg: &SagaDatabaseArg = match command {
        SagaCommand::List { database, .. } | SagaCommand::Show { database, .. } => database,
    };
    let url = arg.database.trim();
    let timeout = config::connect_timeout(global);
    let cannot_open = || format!("cannot open the saga database {}", shown(url));
    match parse_database(url)? {
        Database::Postgres(options) => {
            let pool = connect_postgres(PgPoolOptions::new().max_connections(1), options, timeout)
                .await
                .with_context(cannot_open)?;
            read(global, pool, url, command).await
        }
        Database::Sqlite(options) => {
            let pool = SqlitePoolOptions::new()
                .max_connections(1)
                .acquire_timeout(timeout)
                // A reader never makes the file, whatever the URL's mode says.
                .connect_with(options.create_if_missing(false))
                .await
                .with_context(cannot_open)?;
            read(global, pool, url, command).await
        }
    }
}

async fn read<DB: mesh_saga::Database>(
    global: &Global,
    pool: Pool<DB>,
    url: &str,
    command: &SagaCommand,
) -> anyhow::Result<Code> {
    let store = SagaStore::existing(pool)
        .await
        .with_context(|| format!("cannot read the saga tables of {}", shown(url)))?;
    let Some(store) = store else {
        return Err(fail_with_hint(
            Code::Error,
            format!("no sagas in {}: it has no saga tables", shown(url)),
            "a saga service creates them when it opens its store (`SagaStore::new`); check \
             that this is the service's database",
        ));
    };
    match command {
        SagaCommand::List { saga, limit, .. } => {
            let instances = store
                .instances::<Value>(saga.as_deref(), *limit)
                .await
                .with_context(|| format!("cannot list the saga instances of {}", shown(url)))?;
            if global.json {
                output::json(&instances.iter().map(to_json).collect::<Vec<_>>())?;
            } else if instances.is_empty() {
                output::note("no saga instances");
            } else {
                for instance in &instances {
                    output::line(summary(instance))?;
                }
            }
        }
        SagaCommand::Show { saga, key, .. } => {
            let instance = store
                .instance::<Value>(saga, key)
                .await
                .with_context(|| format!("cannot read the saga instance of {}", shown(url)))?;
            let Some(instance) = instance else {
                return Err(fail(
                    Code::Error,
                    format!(
                        "no instance {} of saga {}",
                        EscapedDisplay(key),
                        EscapedDisplay(saga)
                    ),
                ));
            };
            if global.json {
                output::json(&to_json(&instance))?;
            } else {
                show(&instance)?;
            }
        }
    }
    Ok(Code::Ok)
}

fn to_json(instance: &Instance<Value>) -> Value {
    json!({
        "saga": instance.saga,
        "key": instance.key,
        "version": instance.version,
        "completed": instance.completed,
        "created_at": instance.created_at,
        "updated_at": instance.updated_at,
        "state": instance.state,
        "timeouts": instance.timeouts.iter().map(|t| json!({
            "name": t.name,
            "event_id": t.event_id,
            "due": t.due,
        })).collect::<Vec<_>>(),
    })
}

fn status(instance: &Instance<Value>) -> &'static str {
    if instance.completed {
        "completed"
    } else {
        "running"
    }
}

/// One line of `saga list`.
fn summary(instance: &Instance<Value>) -> String {
    format!(
        "{} {} v{} {} {} timeouts={} {}",
        EscapedDisplay(&instance.saga),
        EscapedDisplay(&instance.key),
        instance.version,
        status(instance),
        EscapedDisplay(&instance.updated_at),
        instance.timeouts.len(),
        EscapedDisplay(&instance.state.to_string()),
    )
}

/// `saga show`'s text.
fn show(instance: &Instance<Value>) -> std::io::Result<()> {
    output::line(format_args!(
        "saga {}, key {}: version {}, {}",
        EscapedDisplay(&instance.saga),
        EscapedDisplay(&instance.key),
        instance.version,
        status(instance)
    ))?;
    output::line(format_args!(
        "started {}, changed {}",
        EscapedDisplay(&instance.created_at),
        EscapedDisplay(&instance.updated_at)
    ))?;
    if instance.timeouts.is_empty() {
        output::line("no pending timeouts")?;
    }
    for t in &instance.timeouts {
        output::line(format_args!(
            "timeout {} due {} (event {})",
            EscapedDisplay(&t.name),
            EscapedDisplay(&t.due),
            EscapedDisplay(&t.event_id)
        ))?;
    }
    output::line(format_args!(
        "state {}",
        EscapedDisplay(&instance.state.to_string())
    ))
}
