//! `mesh audit run` and `mesh-audit run`: the audit logger as a process, its options
//! checked before anything starts, stopped on SIGTERM or Ctrl-C, with its metrics endpoint
//! and, when asked, the operator's console over its store.

use std::net::SocketAddr;

use anyhow::Context as _;
use mesh_audit::{AuditOptions, AuditService, Store, StoreOptions};
use tokio_util::sync::CancellationToken;

use crate::cli::{AuditRunArgs, Global};
use crate::config;
use crate::exit::{Code, WithCode};
use crate::metrics;
use crate::output::{self, paint, DIM};
use crate::process;
use crate::store;

/// What the audit logger would run with: every option built and checked, nothing connected.
pub(crate) struct LoggerPlan {
    /// The broker URL as given (flag, variable, context or default).
    pub(crate) url: String,
    /// The store URL as given (or the default file's).
    pub(crate) store_url: String,
    node: mesh::raw::Name,
    amqp: mesh_amqp::AmqpOptions,
    management: Option<mesh::amqp::management::ManagementOptions>,
    store: StoreOptions,
    audit: AuditOptions,
}

/// Builds and checks every option of `mesh audit run` / `mesh-audit run` without connecting:
/// a bad URL, store, node or number is a usage error here, before anything starts.
pub(crate) fn plan_logger(global: &Global, args: &AuditRunArgs) -> anyhow::Result<LoggerPlan> {
    let node = config::node(global)?;
    let amqp = config::amqp_options(global)?;
    let management = config::logger_management(global, &amqp)?;
    let url = store::store_url(global, &args.store, true)?;
    let store = url
        .parse::<StoreOptions>()
        .coded(Code::Usage, || "invalid --store".to_owned())?
        // The logger creates its own store: a SQLite file, with its directory, when missing.
        .create_if_missing(true);
    let audit = AuditOptions::new()
        .node(node.to_string())
        .shared(args.shared)
        .batch_size(args.batch_size)
        .batch_wait(args.batch_wait)
        .prefetch(args.prefetch)
        .delivery_limit(Some(args.delivery_limit.unwrap_or_else(|| {
            mesh_amqp::AmqpOptions::default().get_delivery_limit()
        })))
        .enforce_identity(
            args.enforce_identity
                .then(|| args.user_prefix.clone().unwrap_or_default()),
        )
        .retain(args.retain.map(|retain| {
            mesh_audit::Retention::new(retain)
                .rollups(args.retain_rollups)
                .pending_dead_letters(args.retain_pending_dead_letters)
        }));
    audit
        .validate()
        .coded(Code::Usage, || "invalid audit logger options".to_owned())?;
    Ok(LoggerPlan {
        url: config::url(global).to_owned(),
        store_url: url,
        node,
        amqp,
        management,
        store,
        audit,
    })
}

/// Runs the audit logger (`mesh audit run`, `mesh-audit run`) until SIGTERM or Ctrl-C, then
/// shuts it down gracefully. Every global option applies: the URL, password, node, queue
/// type (its queues are declared with the deployment's), connect timeout and management API.
pub(crate) async fn run_logger(global: &Global, args: &AuditRunArgs) -> anyhow::Result<Code> {
    let LoggerPlan {
        node,
        amqp,
        management,
        store,
        audit,
        ..
    } = plan_logger(global, args)?;
    output::note(paint(
        DIM,
        format!(
            "recording every event and dead letter as node {node}{} into {} (Ctrl-C stops)",
            if audit.get_shared() {
                ", sharing shared.audit-logger.* with the other shared loggers"
            } else {
                ""
            },
            store.redacted_url()
        ),
    ));
    let console_store = store.clone();
    let service = AuditService::new(amqp, store, audit).management(management);
    let telemetry = match args.metrics.metrics_addr {
        // The logger's metrics, readiness following the service.
        Some(addr) => {
            let watched = service.clone();
            Some(
                metrics::serve_watching(addr, move |telemetry| {
                    mesh_audit::telemetry::describe();
                    telemetry.watch_check("audit logger", move || watched.readiness());
                })
                .await?,
            )
        }
        None => None,
    };
    let shutdown = CancellationToken::new();
    // Registered before the service starts, so a SIGTERM from then on is never missed (the
    // default action would kill the process mid-batch).
    let signals = tokio::spawn(process::cancel_on_signal(
        process::Signals::register()?,
        shutdown.clone(),
    ));
    let console = match args.console_addr {
        Some(addr) => Some(serve_console(global, addr, console_store, shutdown.clone()).await?),
        None => None,
    };
    let outcome = service.run(shutdown.clone()).await;
    // The logger stopped (a signal, or a failure): the console goes with it.
    shutdown.cancel();
    signals.abort();
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    if let Some(console) = console {
        console.await.context("the console task")??;
    }
    let stats = outcome.context("the audit logger failed")?;
    tracing::info!(?stats, "mesh-audit stopped");
    Ok(Code::Ok)
}

/// Serves the console on `addr` over the logger's store (its own pool) until `shutdown`,
/// as `mesh console` does; actions need `MESH_CONSOLE_TOKEN`. The task closes what it opened.
async fn serve_console(
    global: &Global,
    addr: SocketAddr,
    store: StoreOptions,
    shutdown: CancellationToken,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<()>>> {
    let tokens = crate::console::env_tokens()?;
    let listener = crate::console::listen(addr).await?;
    let bound = listener.local_addr()?;
    let store = Store::open(store).await.coded(Code::Error, || {
        "cannot open the audit store for the console".to_owned()
    })?;
    let (console, transport) =
        crate::console::build(global, store.clone(), tokens, false, &[]).await?;
    output::note(format_args!("console on http://{bound}/"));
    Ok(tokio::spawn(async move {
        let outcome = mesh_console::serve(listener, console, shutdown).await;
        if let Some(transport) = transport {
            transport.close().await;
        }
        store.close().await;
        outcome.context("the console failed")
    }))
}
