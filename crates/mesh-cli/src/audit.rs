//! `mesh audit run | query | count | trace` and `mesh dead list | show | redrive`, on top of
//! the `mesh-audit` library (its logger service and its store's query and re-drive API).

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use mesh::raw::{DeadReason, EventId};
use mesh_audit::{
    AuditOptions, AuditService, CausationNode, DeadLetterId, DeadLetterQuery, DeadLetterRecord,
    EventQuery, EventRecord, Order, Redrive, Replay, Store, StoreOptions,
};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::cli::{
    AuditCommand, AuditRunArgs, DeadCommand, EventFilter, Global, RedriveArgs, ReplayArgs, StoreArg,
};
use crate::config;
use crate::exit::{fail, Code, WithCode};
use crate::output::{self, escape, paint, BAD, DIM, GOOD, NAME, WARN};

/// The default store, for `mesh audit run`, `mesh-audit run` and the reading commands alike:
/// `$XDG_DATA_HOME/mesh/audit.db`, else `~/.local/share/mesh/audit.db`.
fn default_store_path() -> anyhow::Result<PathBuf> {
    let dir = std::env::var_os("XDG_DATA_HOME")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .or_else(|| dirs::home_dir().map(|home| home.join(".local").join("share")))
        .ok_or_else(|| {
            fail(
                Code::Usage,
                "no home directory for the default audit store: give --store or MESH_AUDIT_STORE",
            )
        })?;
    Ok(dir.join("mesh").join("audit.db"))
}

/// The store URL: `--store`, `MESH_AUDIT_STORE`, the context's store, or the default SQLite
/// file (created by the logger only; the reading commands say when it does not exist).
fn store_url(global: &Global, arg: &StoreArg, create: bool) -> anyhow::Result<String> {
    if let Some(url) = arg.store.as_ref().or(global.context_store.as_ref()) {
        return Ok(url.trim().to_owned());
    }
    let path = default_store_path()?;
    if !create && !path.exists() {
        return Err(fail(
            Code::Error,
            format!(
                "no audit store at {}: run `mesh audit run` to record one, or give --store",
                path.display()
            ),
        ));
    }
    Ok(format!("sqlite://{}", path.display()))
}

/// The store for `status`: the one given, or the default one when it exists; `None` when
/// there is none.
pub(crate) async fn open_if_any(global: &Global, arg: &StoreArg) -> anyhow::Result<Option<Store>> {
    if arg.store.is_none()
        && global.context_store.is_none()
        && !default_store_path().is_ok_and(|p| p.exists())
    {
        return Ok(None);
    }
    open(global, arg).await.map(Some)
}

/// Dead letters of `queue` not re-driven yet.
pub(crate) async fn pending_dead_letters(store: &Store, queue: &str) -> anyhow::Result<u64> {
    store
        .count_dead_letters(&DeadLetterQuery::new().queue(queue).redriven(false))
        .await
        .with_context(|| format!("counting the dead letters of {queue}"))
}

pub(crate) async fn open(global: &Global, arg: &StoreArg) -> anyhow::Result<Store> {
    let url = store_url(global, arg, false)?;
    let options: StoreOptions = url
        .parse()
        .coded(Code::Usage, || "invalid --store".to_owned())?;
    let shown = options.redacted_url();
    Store::open(options)
        .await
        .with_context(|| format!("opening the audit store {shown}"))
}

fn event_query(filter: &EventFilter) -> anyhow::Result<EventQuery> {
    let mut query = EventQuery::new();
    if let Some(key) = &filter.key {
        mesh::raw::TopicPattern::parse(key)
            .coded(Code::Usage, || format!("invalid --key pattern `{key}`"))?;
        query = query.pattern(key.clone());
    }
    if let Some(source) = &filter.source {
        query = query.source(source.clone());
    }
    if let Some(node) = &filter.event_node {
        query = query.node(node.clone());
    }
    if let Some(since) = filter.since {
        query = query.since(since);
    }
    if let Some(until) = filter.until {
        query = query.until(until);
    }
    Ok(query)
}

fn event_json(event: &EventRecord) -> Value {
    json!({
        "id": event.id.to_string(),
        "key": event.routing_key,
        "source": event.source,
        "node": event.node,
        "time": event.time.to_string(),
        "causation_id": event.causation_id,
        "schema": event.schema,
        "received_at": event.received_at.to_string(),
        "publisher": event.publisher,
        "body": event.body_json().unwrap_or_else(|_| Value::from(event.body.clone())),
    })
}

fn event_line(event: &EventRecord) -> String {
    // Stored text came from the wire: escaped, so it cannot forge a line.
    let publisher = event
        .publisher
        .as_deref()
        .map(|user| format!(" {}", paint(DIM, format!("by {}", escape(user)))))
        .unwrap_or_default();
    format!(
        "{} {} {} {}@{}{} {}",
        paint(DIM, event.time),
        paint(NAME, escape(&event.routing_key)),
        paint(DIM, event.id),
        escape(&event.source),
        escape(&event.node),
        publisher,
        escape(&event.body)
    )
}

/// Runs the audit logger (`mesh audit run`, `mesh-audit run`) until SIGTERM or Ctrl-C, then
/// shuts it down gracefully. Every global option applies: the URL, password, node, queue
/// type (its queues are declared with the deployment's), connect timeout and management API.
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
    let url = store_url(global, &args.store, true)?;
    let store = url
        .parse::<StoreOptions>()
        .coded(Code::Usage, || "invalid --store".to_owned())?
        // The logger creates its own store: a SQLite file, with its directory, when missing.
        .create_if_missing(true);
    let audit = AuditOptions::new()
        .node(node.to_string())
        .batch_size(args.batch_size)
        .batch_wait(args.batch_wait)
        .prefetch(args.prefetch)
        .delivery_limit(Some(args.delivery_limit.unwrap_or_else(|| {
            mesh_amqp::AmqpOptions::default().get_delivery_limit()
        })))
        .enforce_identity(
            args.enforce_identity
                .then(|| args.user_prefix.clone().unwrap_or_default()),
        );
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

pub(crate) async fn run_logger(global: &Global, args: &AuditRunArgs) -> anyhow::Result<Code> {
    let LoggerPlan {
        node,
        amqp,
        management,
        store,
        audit,
        ..
    } = plan_logger(global, args)?;
    install_logging();
    output::note(paint(
        DIM,
        format!(
            "recording every event and dead letter as node {node} into {} (Ctrl-C stops)",
            store.redacted_url()
        ),
    ));
    let console_store = store.clone();
    let service = AuditService::new(amqp, store, audit).management(management);
    let telemetry = match args.metrics.metrics_addr {
        Some(addr) => Some(serve_logger_metrics(addr, &service).await?),
        None => None,
    };
    let shutdown = CancellationToken::new();
    // Registered before the service starts, so a SIGTERM from then on is never missed (the
    // default action would kill the process mid-batch).
    let signals = tokio::spawn(cancel_on_signal(Signals::register()?, shutdown.clone()));
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
    output::note(format!("console on http://{bound}/"));
    Ok(tokio::spawn(async move {
        let outcome = mesh_console::serve(listener, console, shutdown).await;
        if let Some(transport) = transport {
            transport.close().await;
        }
        store.close().await;
        outcome.context("the console failed")
    }))
}

/// Serves `/metrics`, `/livez` and `/readyz` on `addr`, readiness following `service`, and
/// says where on stderr.
async fn serve_logger_metrics(
    addr: SocketAddr,
    service: &AuditService,
) -> anyhow::Result<mesh::telemetry::TelemetryServer> {
    let telemetry = mesh::telemetry::serve_prometheus(addr)
        .await
        .coded(Code::Error, || format!("cannot serve metrics on {addr}"))?;
    mesh_audit::telemetry::describe();
    let watched = service.clone();
    telemetry.watch_check("audit logger", move || watched.readiness());
    output::note(format!(
        "metrics on http://{}/metrics (also /livez and /readyz)",
        telemetry.local_addr()
    ));
    Ok(telemetry)
}

#[cfg(unix)]
pub(crate) struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    pub(crate) fn register() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("listening for SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("listening for SIGINT")?,
        })
    }
}

/// Cancels `shutdown` on SIGTERM or Ctrl-C (SIGINT).
#[cfg(unix)]
pub(crate) async fn cancel_on_signal(mut signals: Signals, shutdown: CancellationToken) {
    tokio::select! {
        _ = signals.term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = signals.int.recv() => tracing::info!("Ctrl-C: shutting down"),
    }
    shutdown.cancel();
}

#[cfg(not(unix))]
pub(crate) struct Signals;

#[cfg(not(unix))]
impl Signals {
    pub(crate) fn register() -> anyhow::Result<Signals> {
        Ok(Signals)
    }
}

/// Cancels `shutdown` on Ctrl-C.
#[cfg(not(unix))]
pub(crate) async fn cancel_on_signal(_signals: Signals, shutdown: CancellationToken) {
    if tokio::signal::ctrl_c().await.is_ok() {
        shutdown.cancel();
    }
}

/// Runs one `audit` command.
pub(crate) async fn run(global: &Global, command: &AuditCommand) -> anyhow::Result<Code> {
    match command {
        AuditCommand::Run(args) => run_logger(global, args).await,
        AuditCommand::Query {
            store,
            filter,
            limit,
            oldest_first,
            conflicts,
        } => {
            let store = open(global, store).await?;
            let query = event_query(filter)?.limit(*limit).order(if *oldest_first {
                Order::Asc
            } else {
                Order::Desc
            });
            if *conflicts {
                let found = store
                    .conflicts(&query)
                    .await
                    .context("querying id conflicts");
                store.close().await;
                for conflict in &found? {
                    if global.json {
                        let mut value = event_json(&conflict.event);
                        value["conflict_id"] = json!(conflict.id.to_string());
                        value["conflicts_with"] = json!(conflict.event.id.to_string());
                        output::json(&value)?;
                    } else {
                        output::line(format!(
                            "{} {}",
                            event_line(&conflict.event),
                            paint(WARN, format!("conflicts with {}", conflict.event.id))
                        ))?;
                    }
                }
                return Ok(Code::Ok);
            }
            let events = store.events(&query).await.context("querying events")?;
            store.close().await;
            for event in &events {
                if global.json {
                    output::json(&event_json(event))?;
                } else {
                    output::line(event_line(event))?;
                }
            }
            Ok(Code::Ok)
        }
        AuditCommand::Count {
            store,
            filter,
            by_key,
        } => {
            let store = open(global, store).await?;
            let query = event_query(filter)?;
            let result = count(global, &store, &query, filter, *by_key).await;
            store.close().await;
            result
        }
        AuditCommand::Replay(args) => replay(global, args).await,
        AuditCommand::Trace { store, id } => {
            let id: EventId = id
                .parse()
                .coded(Code::Usage, || format!("`{id}` is not an event id"))?;
            let store = open(global, store).await?;
            let tree = store
                .causation_tree(id)
                .await
                .context("reading the causation tree");
            store.close().await;
            let Some(tree) = tree? else {
                return Err(fail(
                    Code::Error,
                    format!("no event {id} in the audit store"),
                ));
            };
            if global.json {
                output::json(&json!({
                    "focus": tree.focus.to_string(),
                    "missing_cause": tree.missing_cause,
                    "truncated": tree.truncated,
                    "root": node_json(&tree.root),
                }))?;
                return Ok(Code::Ok);
            }
            if let Some(cause) = &tree.missing_cause {
                output::line(paint(
                    DIM,
                    format!("caused by {} (not in the store)", escape(cause)),
                ))?;
            }
            draw(&tree.root, tree.focus, "", None)?;
            if tree.truncated {
                output::line(paint(
                    WARN,
                    "(truncated: the tree has more events than shown)",
                ))?;
            }
            Ok(Code::Ok)
        }
    }
}

/// `mesh audit replay`: the matching stored events into one consumer queue only.
async fn replay(global: &Global, args: &ReplayArgs) -> anyhow::Result<Code> {
    let filter = EventFilter {
        key: Some(args.key.clone()),
        source: args.source.clone(),
        event_node: None,
        since: Some(args.since),
        until: args.until,
    };
    let query = event_query(&filter)?.limit(usize::MAX);
    let queue = format!("{}.events", args.to);
    if !mesh::raw::naming::is_consumer_queue(&queue) {
        return Err(fail(
            Code::Usage,
            format!(
                "--to `{}` is not <node>.<module> or shared.<module>",
                escape(&args.to)
            ),
        ));
    }
    let replay = Replay::new(query, queue).rate(args.rate);
    let store = open(global, &args.store).await?;
    if args.dry_run {
        let plan = store
            .replay_plan(&replay)
            .await
            .context("planning the replay");
        store.close().await;
        let plan = plan?;
        if global.json {
            output::json(&json!({
                "dry_run": true,
                "queue": plan.queue,
                "events": plan.events,
                "by_key": plan.by_key.iter().map(|(key, n)| json!({"key": key, "events": n})).collect::<Vec<_>>(),
            }))?;
        } else {
            for (key, n) in &plan.by_key {
                output::line(format!("{n:>10} {}", paint(NAME, escape(key))))?;
            }
            output::line(format!(
                "dry run: {} event(s) would be replayed to {} at most {}/s; nothing was published",
                plan.events,
                escape(&plan.queue),
                args.rate
            ))?;
        }
        return Ok(Code::Ok);
    }
    let transport = match config::connect(config::amqp_options(global)?).await {
        Ok(transport) => transport,
        Err(e) => {
            store.close().await;
            return Err(e);
        }
    };
    let report = store.replay(&*transport, &replay).await;
    transport.close().await;
    store.close().await;
    let report = report.context("replaying")?;
    let last = report
        .last
        .map(|(id, time)| json!({"id": id.to_string(), "time": time.to_string()}));
    let failed = report
        .failed
        .map(|(id, time, e)| (id, time, format!("{:#}", anyhow::Error::new(e))));
    if global.json {
        output::json(&json!({
            "queue": replay.queue(),
            "replayed": report.replayed,
            "last": last,
            "failed": failed.as_ref().map(|(id, time, error)| json!({
                "id": id.to_string(),
                "time": time.to_string(),
                "error": error,
            })),
        }))?;
    } else {
        output::line(format!(
            "{} {} event(s) to {}",
            paint(GOOD, "replayed"),
            report.replayed,
            escape(replay.queue())
        ))?;
    }
    match failed {
        None => Ok(Code::Ok),
        Some((id, time, error)) => Err(fail(
            Code::Error,
            format!(
                "the replay stopped at event {id} (emitted {time}): {error}; run it again \
                 with --since {time} to resume"
            ),
        )),
    }
}

async fn count(
    global: &Global,
    store: &Store,
    query: &EventQuery,
    filter: &EventFilter,
    by_key: bool,
) -> anyhow::Result<Code> {
    if by_key {
        let rows = store
            .event_counts_by_key(query)
            .await
            .context("counting events")?;
        for (key, n) in rows {
            if global.json {
                output::json(&json!({"key": key, "events": n}))?;
            } else {
                output::line(format!("{n:>10} {}", paint(NAME, escape(&key))))?;
            }
        }
        return Ok(Code::Ok);
    }
    if filter.is_empty() {
        let counts = store.counts().await.context("counting")?;
        if global.json {
            output::json(&json!({
                "events": counts.events, "conflicts": counts.conflicts,
                "dead_letters": counts.dead_letters,
                "dead_letters_pending": counts.dead_letters_pending,
            }))?;
        } else {
            output::line(format!(
                "{} events, {} id conflicts, {} dead letters ({} not re-driven)",
                counts.events, counts.conflicts, counts.dead_letters, counts.dead_letters_pending
            ))?;
        }
    } else {
        let n = store.count_events(query).await.context("counting events")?;
        if global.json {
            output::json(&json!({ "events": n }))?;
        } else {
            output::line(format!("{n} events"))?;
        }
    }
    Ok(Code::Ok)
}

fn node_json(node: &CausationNode) -> Value {
    let mut value = event_json(&node.event);
    value["children"] = node.children.iter().map(node_json).collect();
    value
}

/// Draws the tree: `├─`/`└─` branches, the event asked for marked with `◀`.
fn draw(
    node: &CausationNode,
    focus: EventId,
    prefix: &str,
    last: Option<bool>,
) -> anyhow::Result<()> {
    let (branch, child_prefix) = match last {
        None => (String::new(), String::new()),
        Some(true) => (format!("{prefix}└─ "), format!("{prefix}   ")),
        Some(false) => (format!("{prefix}├─ "), format!("{prefix}│  ")),
    };
    let event = &node.event;
    let mark = if event.id == focus {
        format!(" {}", paint(GOOD, "◀"))
    } else {
        String::new()
    };
    output::line(format!(
        "{branch}{} {} {}@{} {}{mark}",
        paint(NAME, escape(&event.routing_key)),
        paint(DIM, event.id),
        escape(&event.source),
        escape(&event.node),
        paint(DIM, event.time)
    ))?;
    let n = node.children.len();
    for (i, child) in node.children.iter().enumerate() {
        draw(child, focus, &child_prefix, Some(i + 1 == n))?;
    }
    Ok(())
}

/// `audit run` is a service: it logs (to stderr, `RUST_LOG` or `info`).
pub(crate) fn install_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

fn dead_json(dead: &DeadLetterRecord, with_body: bool) -> Value {
    let mut value = json!({
        "id": dead.id.to_string(),
        "event_id": dead.event_id.map(|id| id.to_string()),
        "key": dead.routing_key,
        "reason": dead.reason.map(DeadReason::as_str),
        "attempts": dead.attempts,
        "last_error": dead.last_error,
        "queue": dead.queue,
        "dead_at": dead.dead_at.to_string(),
        "redriven_at": dead.redriven_at.map(|t| t.to_string()),
        "redrive_count": dead.redrive_count,
    });
    if with_body {
        value["headers"] = dead.headers.clone();
        value["content_type"] = json!(dead.content_type);
        value["user_id"] = json!(dead.user_id);
        value["body"] = serde_json::from_slice(&dead.body)
            .unwrap_or_else(|_| Value::from(String::from_utf8_lossy(&dead.body).into_owned()));
    }
    value
}

fn dead_line(dead: &DeadLetterRecord) -> String {
    let redriven = match dead.redriven_at {
        Some(at) => paint(
            GOOD,
            format!(" re-driven {}x, last {at}", dead.redrive_count),
        ),
        None => String::new(),
    };
    format!(
        "{} {} {} {} from {} after {} attempt(s): {}{redriven}",
        paint(DIM, dead.dead_at),
        paint(DIM, dead.id),
        paint(NAME, escape(&dead.routing_key)),
        paint(BAD, dead.reason.map_or("unknown", DeadReason::as_str)),
        escape(dead.queue.as_deref().unwrap_or("?")),
        dead.attempts,
        escape(dead.last_error.as_deref().unwrap_or("-")),
    )
}

fn dead_id(text: &str) -> anyhow::Result<DeadLetterId> {
    text.parse()
        .coded(Code::Usage, || format!("`{text}` is not a dead-letter id"))
}

/// Runs one `dead` command.
pub(crate) async fn run_dead(global: &Global, command: &DeadCommand) -> anyhow::Result<Code> {
    match command {
        DeadCommand::Purge {
            store,
            queue,
            reason,
            redriven,
            all,
            dry_run,
        } => {
            if queue.is_none() && reason.is_none() && !*redriven && !*all {
                return Err(fail(
                    Code::Usage,
                    "purge needs a filter (--queue, --reason, --redriven) or --all",
                ));
            }
            let mut query = DeadLetterQuery::new();
            if let Some(queue) = queue {
                query = query.queue(queue.clone());
            }
            if let Some(reason) = reason {
                query = query.reason(DeadReason::from(*reason));
            }
            if *redriven {
                query = query.redriven(true);
            }
            let store = open(global, store).await?;
            if *dry_run {
                let outcome = purge_dry_run(global, &store, query).await;
                store.close().await;
                return outcome;
            }
            let deleted = store
                .purge_dead_letters(&query)
                .await
                .context("purging dead letters")?;
            if global.json {
                output::json(&serde_json::json!({ "purged": deleted }))?;
            } else {
                output::line(format!("purged {deleted} dead letter(s)"))?;
            }
            Ok(Code::Ok)
        }
        DeadCommand::List {
            store,
            queue,
            reason,
            pending,
            since,
            limit,
        } => {
            let mut query = DeadLetterQuery::new().limit(*limit);
            if let Some(queue) = queue {
                query = query.queue(queue.clone());
            }
            if let Some(reason) = reason {
                query = query.reason(DeadReason::from(*reason));
            }
            if *pending {
                query = query.redriven(false);
            }
            if let Some(since) = since {
                query = query.since(*since);
            }
            let store = open(global, store).await?;
            let found = store
                .dead_letters(&query)
                .await
                .context("listing dead letters");
            store.close().await;
            for dead in &found? {
                if global.json {
                    output::json(&dead_json(dead, false))?;
                } else {
                    output::line(dead_line(dead))?;
                }
            }
            Ok(Code::Ok)
        }
        DeadCommand::Show { store, id } => {
            let id = dead_id(id)?;
            let store = open(global, store).await?;
            let found = store
                .dead_letter(id)
                .await
                .context("reading the dead letter");
            store.close().await;
            let Some(dead) = found? else {
                return Err(fail(
                    Code::Error,
                    format!("no dead letter {id} in the audit store"),
                ));
            };
            let value = dead_json(&dead, true);
            if global.json {
                output::json(&value)?;
            } else {
                output::line(dead_line(&dead))?;
                if let Some(user) = &dead.user_id {
                    output::line(format!("user-id: {}", escape(user)))?;
                }
                // JSON escapes control characters but not bidi or zero-width ones.
                output::line(format!(
                    "headers: {}",
                    escape(&value["headers"].to_string())
                ))?;
                output::line(format!("body:    {}", escape(&value["body"].to_string())))?;
            }
            Ok(Code::Ok)
        }
        DeadCommand::Redrive(args) => redrive(global, args).await,
    }
}

/// How many of the dead letters a purge would delete `--dry-run` lists (all are counted).
const PURGE_DRY_RUN_SHOWN: usize = 1000;

/// `mesh dead purge --dry-run`: how many records the purge would delete, and the first
/// [`PURGE_DRY_RUN_SHOWN`] of them, oldest first; nothing is deleted.
async fn purge_dry_run(
    global: &Global,
    store: &Store,
    query: DeadLetterQuery,
) -> anyhow::Result<Code> {
    let total = store
        .count_dead_letters(&query)
        .await
        .context("counting the dead letters to purge")?;
    let shown = store
        .dead_letters(&query.limit(PURGE_DRY_RUN_SHOWN).order(Order::Asc))
        .await
        .context("listing the dead letters to purge")?;
    let more = total.saturating_sub(shown.len() as u64);
    if global.json {
        output::json(&json!({
            "dry_run": true,
            "would_purge": total,
            "dead_letters": shown.iter().map(|d| dead_json(d, false)).collect::<Vec<_>>(),
            "not_shown": more,
        }))?;
    } else {
        for dead in &shown {
            output::line(format!("{} {}", paint(BAD, "would purge"), dead_line(dead)))?;
        }
        if more > 0 {
            output::line(format!("… and {more} more"))?;
        }
        output::line(format!(
            "dry run: {total} dead letter(s) would be purged; nothing was deleted"
        ))?;
    }
    Ok(Code::Ok)
}

/// `mesh dead redrive --dry-run`: what would be re-driven where, and what refused; nothing is
/// published or marked, and the broker is not contacted.
async fn redrive_dry_run(
    global: &Global,
    store: &Store,
    which: Vec<Redrive>,
) -> anyhow::Result<Code> {
    let mut would: Vec<(String, String)> = Vec::new();
    let mut refused: Vec<(String, String)> = Vec::new();
    for which in which {
        let label = match &which {
            Redrive::One(id) => id.to_string(),
            _ => "*".to_owned(),
        };
        match store.redrive_plan(which).await {
            Ok(plan) => {
                would.extend(plan.redrive.into_iter().map(|(id, q)| (id.to_string(), q)));
                refused.extend(
                    plan.refused
                        .into_iter()
                        .map(|(id, e)| (id.to_string(), format!("{:#}", anyhow::Error::new(e)))),
                );
            }
            Err(e) => refused.push((label, format!("{:#}", anyhow::Error::new(e)))),
        }
    }
    if global.json {
        output::json(&json!({
            "dry_run": true,
            "would_redrive": would.iter().map(|(id, q)| json!({"id": id, "queue": q})).collect::<Vec<_>>(),
            "refused": refused.iter().map(|(id, e)| json!({"id": id, "error": e})).collect::<Vec<_>>(),
        }))?;
    } else {
        for (id, queue) in &would {
            output::line(format!(
                "{} {id} -> {}",
                paint(GOOD, "would re-drive"),
                escape(queue)
            ))?;
        }
        for (id, error) in &refused {
            output::line(format!(
                "{} {}: {}",
                paint(BAD, "would refuse"),
                escape(id),
                escape(error)
            ))?;
        }
        output::line(format!(
            "dry run: {} would be re-driven, {} refused; nothing was published",
            would.len(),
            refused.len()
        ))?;
    }
    if refused.is_empty() {
        Ok(Code::Ok)
    } else {
        Err(fail(
            Code::Error,
            format!("{} dead letter(s) would be refused", refused.len()),
        ))
    }
}

async fn redrive(global: &Global, args: &RedriveArgs) -> anyhow::Result<Code> {
    let which: Vec<Redrive> = if args.all {
        vec![Redrive::All]
    } else if let Some(queue) = &args.queue {
        vec![Redrive::Matching(
            DeadLetterQuery::new()
                .queue(queue.clone())
                .limit(usize::MAX),
        )]
    } else if !args.ids.is_empty() {
        args.ids
            .iter()
            .map(|id| dead_id(id).map(Redrive::One))
            .collect::<anyhow::Result<_>>()?
    } else {
        return Err(fail(
            Code::Usage,
            "say which: dead-letter ids, --all or --queue Q",
        ));
    };
    let store = open(global, &args.store).await?;
    if args.dry_run {
        let outcome = redrive_dry_run(global, &store, which).await;
        store.close().await;
        return outcome;
    }
    let transport = config::connect(config::amqp_options(global)?).await?;
    let mut redriven: Vec<DeadLetterId> = Vec::new();
    let mut failed: Vec<(String, String)> = Vec::new();
    for which in which {
        let label = match &which {
            Redrive::One(id) => id.to_string(),
            _ => "*".to_owned(),
        };
        match store.redrive(&*transport, which).await {
            Ok(report) => {
                redriven.extend(report.redriven);
                failed.extend(
                    report
                        .failed
                        .into_iter()
                        .map(|(id, e)| (id.to_string(), format!("{:#}", anyhow::Error::new(e)))),
                );
            }
            Err(e) => failed.push((label, format!("{:#}", anyhow::Error::new(e)))),
        }
    }
    transport.close().await;
    store.close().await;
    if global.json {
        output::json(&json!({
            "redriven": redriven.iter().map(ToString::to_string).collect::<Vec<_>>(),
            "failed": failed.iter().map(|(id, e)| json!({"id": id, "error": e})).collect::<Vec<_>>(),
        }))?;
    } else {
        for id in &redriven {
            output::line(format!("{} {id}", paint(GOOD, "re-driven")))?;
        }
        for (id, error) in &failed {
            output::line(format!("{} {id}: {}", paint(BAD, "failed"), escape(error)))?;
        }
        output::line(format!(
            "{} re-driven, {} failed",
            redriven.len(),
            failed.len()
        ))?;
    }
    if failed.is_empty() {
        Ok(Code::Ok)
    } else {
        Err(fail(
            Code::Error,
            format!("{} dead letter(s) could not be re-driven", failed.len()),
        ))
    }
}
