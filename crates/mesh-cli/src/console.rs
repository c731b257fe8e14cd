//! `mesh console`: the operator's console (the `mesh-console` library) over the audit store,
//! the broker of the global settings (re-drive, replay, the live tail) and its management API
//! (queues, bindings).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context as _;
use mesh::raw::Transport;
use mesh_audit::Store;
use mesh_console::{Console, Tokens};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::cli::{ConsoleArgs, Global};
use crate::exit::{fail, Code, WithCode};
use crate::output::{self, paint, DIM, WARN};
use crate::{config, process, store};

/// The variable that holds one token (logged as `operator`).
const TOKEN_VAR: &str = "MESH_CONSOLE_TOKEN";

/// The tokens: `--token-file`, else `MESH_CONSOLE_TOKEN`, else none (no action offered).
/// Errors never show a token.
fn tokens(args: &ConsoleArgs) -> anyhow::Result<Tokens> {
    tokens_from(args.token_file.as_deref())
}

fn tokens_from(file: Option<&std::path::Path>) -> anyhow::Result<Tokens> {
    if let Some(path) = file {
        let text = config::read_secrets_file(path).coded(Code::Usage, || {
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

/// A console over `store` with the broker and management API of the global settings (each
/// optional: a part that lacks one says so), noting on stderr what is not offered. Returns
/// the transport to close when the console stops.
pub(crate) async fn build(
    global: &Global,
    store: Store,
    tokens: Tokens,
    read_only: bool,
    origins: &[String],
) -> anyhow::Result<(Console, Option<Arc<dyn Transport>>)> {
    let mut console = Console::new(store)
        .tokens(tokens.clone())
        .read_only(read_only);
    for origin in origins {
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
    if read_only {
        output::note(paint(DIM, "read-only: no action is offered"));
    } else if tokens.is_empty() {
        output::note(paint(
            DIM,
            format!("no token (--token-file or {TOKEN_VAR}): no action is offered"),
        ));
    }
    Ok((console, transport))
}

/// Binds the console's address, warning when it is not loopback.
pub(crate) async fn listen(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    let listener = TcpListener::bind(addr)
        .await
        .coded(Code::Error, || format!("cannot listen on {addr}"))?;
    let bound = listener.local_addr()?;
    if !bound.ip().is_loopback() {
        output::note(paint(
            WARN,
            format!(
                "console on {bound}, beyond this machine: anyone who reaches it can read the store"
            ),
        ));
    }
    Ok(listener)
}

/// The console's tokens for `mesh-audit run --console-addr`: `MESH_CONSOLE_TOKEN`, else none.
pub(crate) fn env_tokens() -> anyhow::Result<Tokens> {
    tokens_from(None)
}

pub(crate) async fn run(global: &Global, args: &ConsoleArgs) -> anyhow::Result<Code> {
    let tokens = tokens(args)?;
    // Registered before anything opens, so a SIGTERM from then on stops the console cleanly.
    let mut signals = process::Signals::register()?;
    let store = store::open(global, &args.store).await?;
    let listener = listen(args.addr).await?;
    let addr = listener.local_addr()?;
    let (console, transport) =
        build(global, store.clone(), tokens, args.read_only, &args.origin).await?;
    output::note(format_args!(
        "console on http://{addr}/ over {} (Ctrl-C stops)",
        store.options().redacted_url()
    ));
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let signals = tokio::spawn(async move {
        signals.recv().await;
        stop.cancel();
    });
    let outcome = mesh_console::serve(listener, console, shutdown).await;
    signals.abort();
    if let Some(transport) = transport {
        transport.close().await;
    }
    store.close().await;
    outcome.context("the console failed")?;
    Ok(Code::Ok)
}
