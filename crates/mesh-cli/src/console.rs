//! `mesh console`: the operator's console (the `mesh-console` library) over the audit store,
//! the broker of the global settings (re-drive, replay, the live tail) and its management API
//! (queues, bindings).

use anyhow::Context as _;
use mesh_console::{Console, Tokens};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::cli::{ConsoleArgs, Global};
use crate::exit::{fail, Code, WithCode};
use crate::output::{self, paint, DIM, WARN};
use crate::{audit, config};

/// The variable that holds one token (logged as `operator`).
const TOKEN_VAR: &str = "MESH_CONSOLE_TOKEN";

/// The tokens: `--token-file`, else `MESH_CONSOLE_TOKEN`, else none (no action offered).
/// Errors never show a token.
fn tokens(args: &ConsoleArgs) -> anyhow::Result<Tokens> {
    if let Some(path) = &args.token_file {
        let text = config::read_settings_file(path).coded(Code::Usage, || {
            format!("cannot read --token-file {}", path.display())
        })?;
        return Tokens::parse_file(&text)
            .map_err(|e| fail(Code::Usage, format!("--token-file {}: {e}", path.display())));
    }
    match std::env::var(TOKEN_VAR) {
        Ok(token) if !token.trim().is_empty() => Tokens::single("operator", &token)
            .map_err(|e| fail(Code::Usage, format!("{TOKEN_VAR}: {e}"))),
        _ => Ok(Tokens::none()),
    }
}

pub(crate) async fn run(global: &Global, args: &ConsoleArgs) -> anyhow::Result<Code> {
    let tokens = tokens(args)?;
    let store = audit::open(global, &args.store).await?;
    audit::install_logging();
    let listener = TcpListener::bind(args.addr)
        .await
        .coded(Code::Error, || format!("cannot listen on {}", args.addr))?;
    let addr = listener.local_addr()?;
    let mut console = Console::new(store.clone())
        .tokens(tokens.clone())
        .read_only(args.read_only);
    for origin in &args.origin {
        console = console.allow_origin(origin.clone());
    }
    // The broker: re-drives, replays and the live tail go through it. A console that
    // cannot reach it still shows the store.
    let mut transport = None;
    match config::connect(config::amqp_options(global)?).await {
        Ok(connected) => {
            console = console.transport(connected.clone());
            transport = Some(connected);
        }
        Err(e) => output::note(paint(
            WARN,
            format!("no broker: re-drive, replay and the live tail are unavailable: {e:#}"),
        )),
    }
    // The management API: queue depths, consumers and bindings (overview, system map).
    match config::management(global) {
        Ok(management) => {
            console = console.management(management.client().clone(), management.vhost());
        }
        Err(e) => output::note(paint(
            WARN,
            format!(
                "no management API: queues and the system map's receivers are not shown: {e:#}"
            ),
        )),
    }
    if args.read_only {
        output::note(paint(DIM, "read-only: no action is offered"));
    } else if tokens.is_empty() {
        output::note(paint(
            DIM,
            format!("no token (--token-file or {TOKEN_VAR}): no action is offered"),
        ));
    }
    if !addr.ip().is_loopback() {
        output::note(paint(
            WARN,
            format!("listening on {addr}, beyond this machine: anyone who reaches it can read the store"),
        ));
    }
    output::note(format!(
        "console on http://{addr}/ over {} (Ctrl-C stops)",
        store.options().redacted_url()
    ));
    let shutdown = CancellationToken::new();
    let signals = tokio::spawn(stop_on_signal(shutdown.clone()));
    let outcome = mesh_console::serve(listener, console, shutdown).await;
    signals.abort();
    if let Some(transport) = transport {
        transport.close().await;
    }
    store.close().await;
    outcome.context("the console failed")?;
    Ok(Code::Ok)
}

/// Cancels `shutdown` on Ctrl-C or SIGTERM.
async fn stop_on_signal(shutdown: CancellationToken) {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            shutdown.cancel();
            return;
        }
    }
    if tokio::signal::ctrl_c().await.is_ok() {
        shutdown.cancel();
    }
}
