//! `faults-worker`: the child processes of the cluster, poison, backlog and audit scenarios
//! and of the soak (`tests/cluster.rs`, `tests/backlog.rs`, `mesh_faults::soak`), which kill
//! them, crash them, or measure them.
//!
//! ```text
//! faults-worker serve <amqp-url> <node> <module> <tool>
//! faults-worker crash-on-poison <amqp-url> <node> <module> <pattern> <poison-seq> <delivery-limit>
//! faults-worker consume <amqp-url> <quorum|classic> <node> <module> <pattern> <prefetch>
//! faults-worker audit <amqp-url> <node> <store-url>
//! faults-worker soak-consume <amqp-url> <node> <module> <prefetch>
//! faults-worker answer <amqp-url> <node> <module> <tool>
//! faults-worker forward-scheduled <amqp-url> <node> <module>
//! ```
//!
//! - `serve`: serves `<tool>`; each request's handler says `serving <request id>` and then
//!   blocks forever, so the request stays unacknowledged until the process dies.
//! - `crash-on-poison`: handles events matching `<pattern>` with prefetch 1 on quorum queues
//!   whose `x-delivery-limit` is `<delivery-limit>`; says `handled <id>` for each event, and
//!   for the one whose body's `seq` is `<poison-seq>` says `poison <id>` and ends the
//!   process at once (exit code 70, nothing settled), every time it gets it.
//! - `consume`: handles events matching `<pattern>` with `<prefetch>`, saying `handled <id>`
//!   for each (the backlog scenario reads this process's memory from outside).
//! - `audit`: runs the audit logger (`mesh_audit::AuditService`) on node `<node>` into
//!   `<store-url>`; when stdin closes it shuts down gracefully and says `stopped <events
//!   stored> <duplicates absorbed>`.
//! - `soak-consume`: one of the soak's competing consumers (`mesh_faults::soak`): handles the
//!   soak's events on quorum queues with the soak's retry ladder, each event meeting the fate
//!   [`mesh_faults::soak::fate`] gives its `seq` (handled; failing its first attempts;
//!   poison, failing every attempt). Says `handled <id> <attempt>` when its handler succeeds
//!   and `failed <id> <attempt>` when it fails (retryably) on purpose.
//! - `answer`: serves `<tool>`, answering a number `n` with `2n + 1`; says `served <n>`.
//! - `forward-scheduled`: forwards `<module>`'s scheduled events (`BusBuilder::forward_scheduled`)
//!   and nothing else: the process the schedule scenario kills.
//!
//! `<amqp-url>` names the user (a module's, or for `audit` the audit logger's, under the
//! access plan: `mesh_faults::setup::Login`) and the password comes in `MESH_PASSWORD`
//! (`mesh_faults::worker::PASSWORD_ENV`), so that it is on no command line.
//!
//! Each says `ready` once started, and exits when its stdin closes (the parent is gone), so it
//! never outlives a test. Exit codes: 0 when stdin closed or stdout is a broken pipe, 1 on an
//! error (printed to stderr), 2 on bad arguments.

use mesh_faults::soak::{self, Fate};
use mesh_faults::worker::{child_main, child_options, say};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use mesh::amqp::{AmqpOptions, AmqpTransport, QueueType};
use mesh::{Bus, HandlerError};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

/// The exit code of `crash-on-poison` when it crashes on the poison event.
const CRASH_EXIT: i32 = 70;

const USAGE: &str = "usage: faults-worker serve <amqp-url> <node> <module> <tool>
       faults-worker crash-on-poison <amqp-url> <node> <module> <pattern> <poison-seq> <delivery-limit>
       faults-worker consume <amqp-url> <quorum|classic> <node> <module> <pattern> <prefetch>
       faults-worker audit <amqp-url> <node> <store-url>
       faults-worker soak-consume <amqp-url> <node> <module> <prefetch>
       faults-worker answer <amqp-url> <node> <module> <tool>
       faults-worker forward-scheduled <amqp-url> <node> <module>";

fn main() -> ExitCode {
    child_main("faults-worker", run)
}

/// Says `line`, or ends the process quietly if the parent is gone.
fn say_or_exit(line: &str) {
    if say(line).is_err() {
        std::process::exit(0);
    }
}

async fn connect(options: AmqpOptions) -> anyhow::Result<Arc<AmqpTransport>> {
    Ok(Arc::new(
        mesh::amqp::connect(options).await.context("connecting")?,
    ))
}

/// Until the parent closes our stdin (or dies, which closes it too).
async fn until_stdin_closes() -> anyhow::Result<()> {
    let mut stdin = tokio::io::stdin();
    let mut buf = [0u8; 64];
    while stdin.read(&mut buf).await.context("reading stdin")? > 0 {}
    Ok(())
}

fn seq_of(body: &[u8]) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()?
        .get("seq")?
        .as_u64()
}

fn run() -> anyhow::Result<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    let pid = std::process::id();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["serve", url, node, module, tool] => runtime.block_on(async {
            let transport = connect(child_options(url, &format!("faults-serve-{pid}"))?).await?;
            let _bus = Bus::builder()
                .node(*node)
                .module(*module)
                .serve(*tool, |_request: serde_json::Value, meta| async move {
                    say_or_exit(&format!("serving {}", meta.id));
                    // Block the request until the process dies: the crash happens here.
                    std::future::pending::<Result<String, mesh::RemoteError>>().await
                })
                .start(transport)
                .await
                .context("starting the bus")?;
            say("ready")?;
            until_stdin_closes().await?;
            Ok(ExitCode::SUCCESS)
        }),
        ["crash-on-poison", url, node, module, pattern, poison, limit] => {
            let poison: u64 = poison.parse().context("the poison seq")?;
            let limit: u32 = limit.parse().context("the delivery limit")?;
            runtime.block_on(async {
                let options = child_options(url, &format!("faults-crashy-{pid}"))?
                    .queue_type(QueueType::Quorum)
                    .delivery_limit(limit);
                let _bus = Bus::builder()
                    .node(*node)
                    .module(*module)
                    // One delivery at a time: a crash returns only the event it was on.
                    .prefetch(1)
                    .on_raw([*pattern], move |incoming| async move {
                        let id = incoming.meta.id();
                        if seq_of(&incoming.event) == Some(poison) {
                            say_or_exit(&format!("poison {id}"));
                            // The crash: the process ends here, no ack, no nack, no
                            // clean-up (an exit rather than an abort: no core file).
                            std::process::exit(CRASH_EXIT);
                        }
                        say_or_exit(&format!("handled {id}"));
                        Ok::<(), HandlerError>(())
                    })
                    .start(connect(options).await?)
                    .await
                    .context("starting the bus")?;
                say("ready")?;
                until_stdin_closes().await?;
                Ok(ExitCode::SUCCESS)
            })
        }
        ["consume", url, queue_type, node, module, pattern, prefetch] => {
            let queue_type: QueueType = queue_type.parse().context("the queue type")?;
            let prefetch: u16 = prefetch.parse().context("the prefetch")?;
            runtime.block_on(async {
                let options =
                    child_options(url, &format!("faults-consume-{pid}"))?.queue_type(queue_type);
                let _bus = Bus::builder()
                    .node(*node)
                    .module(*module)
                    .prefetch(prefetch)
                    .on_raw([*pattern], |incoming| async move {
                        say_or_exit(&format!("handled {}", incoming.meta.id()));
                        Ok::<(), HandlerError>(())
                    })
                    .start(connect(options).await?)
                    .await
                    .context("starting the bus")?;
                say("ready")?;
                until_stdin_closes().await?;
                Ok(ExitCode::SUCCESS)
            })
        }
        ["audit", url, node, store] => runtime.block_on(async {
            // The logger's connections are `mesh-audit.publish` and `mesh-audit.consume`.
            let amqp = child_options(url, "mesh-audit")?;
            let service = mesh_audit::AuditService::new(
                amqp,
                mesh_audit::StoreOptions::url(store).context("the store URL")?,
                mesh_audit::AuditOptions::new().node(*node),
            );
            let shutdown = CancellationToken::new();
            let task = {
                let shutdown = shutdown.clone();
                tokio::spawn(async move { service.run(shutdown).await })
            };
            say("ready")?;
            until_stdin_closes().await?;
            shutdown.cancel();
            let stats = task
                .await
                .context("the audit task")?
                .context("the audit service")?;
            say(&format!(
                "stopped {} {}",
                stats.events_stored, stats.duplicates
            ))?;
            Ok(ExitCode::SUCCESS)
        }),
        ["soak-consume", url, node, module, prefetch] => {
            let prefetch: u16 = prefetch.parse().context("the prefetch")?;
            runtime.block_on(async {
                let options =
                    child_options(url, &format!("{module}-{pid}"))?.queue_type(QueueType::Quorum);
                let _bus = Bus::builder()
                    .node(*node)
                    .module(*module)
                    .prefetch(prefetch)
                    .retry(soak::retry_policy())
                    .on_raw(soak::PATTERNS, |incoming| async move {
                        let id = incoming.meta.id();
                        let attempt = incoming.meta.attempt();
                        let fate = seq_of(&incoming.event).map_or(Fate::Handled, soak::fate);
                        if fate.fails(attempt) {
                            say_or_exit(&format!("failed {id} {attempt}"));
                            return Err(HandlerError::retry("the soak's planned failure"));
                        }
                        say_or_exit(&format!("handled {id} {attempt}"));
                        Ok(())
                    })
                    .start(connect(options).await?)
                    .await
                    .context("starting the bus")?;
                say("ready")?;
                until_stdin_closes().await?;
                Ok(ExitCode::SUCCESS)
            })
        }
        ["answer", url, node, module, tool] => runtime.block_on(async {
            let transport = connect(child_options(url, &format!("{module}-{pid}"))?).await?;
            let _bus = Bus::builder()
                .node(*node)
                .module(*module)
                .serve(*tool, |n: u64, _meta| async move {
                    say_or_exit(&format!("served {n}"));
                    Ok::<u64, mesh::RemoteError>(soak::answer(n))
                })
                .start(transport)
                .await
                .context("starting the bus")?;
            say("ready")?;
            until_stdin_closes().await?;
            Ok(ExitCode::SUCCESS)
        }),
        ["forward-scheduled", url, node, module] => runtime.block_on(async {
            let options = child_options(url, &format!("{module}-forward-{pid}"))?
                .queue_type(QueueType::Quorum);
            let _bus = Bus::builder()
                .node(*node)
                .module(*module)
                .announce(false)
                .forward_scheduled(true)
                .start(connect(options).await?)
                .await
                .context("starting the bus")?;
            say("ready")?;
            until_stdin_closes().await?;
            Ok(ExitCode::SUCCESS)
        }),
        _ => {
            eprintln!("{USAGE}");
            Ok(ExitCode::from(2))
        }
    }
}
