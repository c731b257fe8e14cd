//! End to end: emit and consume at the same time, one process each. This process consumes
//! the queue mesh declares for module `bench` on node `e2e` (prefetch `--prefetch`, manual
//! acks) while a child process — this binary again, in its emitter role — emits
//! `--e2e-events` events into it pipelined (`--in-flight` unconfirmed), the same way as the
//! emit scenario does.
//!
//! The child connects, says `ready`, and starts at the parent's `go`; the rate is taken from
//! the `go` to the last delivery the consumer took (so both connections' set-up is outside
//! it), and the CPU cost is both processes' together (the child reports its own from the
//! `go` to its last confirm). Raw is the raw client on both ends (its consumer acking each
//! delivery, or, as the ceiling, with `multiple` every `--coalesce`); mesh is mesh on both.
//!
//! The child learns the broker's URL from its environment, never from its command line
//! (which other users of the machine can read).

use std::io::{BufRead, Write};
use std::process::Stdio;
use std::sync::Arc;

use anyhow::Context;
use mesh::HandlerError;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

use super::consume::{self, Count};
use super::{emit, Ctx, Run, EVENTS};
use crate::broker::{self, Broker, Ctl};
use crate::cli::{EmitterSide, QueueKind};
use crate::measure::{self, Cost, Meter};
use crate::raw::{self, ConfirmChannel, Route};

const NODE: &str = "e2e";
/// The queue mesh declares for module `bench` on node `e2e`.
pub(crate) const QUEUE: &str = "e2e.bench.events";
/// The event name the mesh emitter uses (module `bench`), and the raw emitter's key.
const NAME: &str = "e2e";
const KEY: &str = "module.bench.e2e";
/// Where the emitter child finds the broker's URL.
pub(crate) const URL_VAR: &str = "MESH_BENCH_E2E_URL";

/// Lets mesh declare the queue and its binding.
pub(crate) async fn setup(ctx: &Ctx) -> anyhow::Result<()> {
    let bus = ctx
        .start(
            ctx.bus(NODE, "bench").on_raw([KEY], |_| async { Ok(()) }),
            "e2e-setup",
        )
        .await?;
    bus.drain().await?;
    Ok(())
}

/// The emitter child, running: its output lines, and the process.
struct Emitter {
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Emitter {
    /// Starts the child and waits until it is connected.
    async fn spawn(ctx: &Ctx, side: EmitterSide, events: u64) -> anyhow::Result<Emitter> {
        let exe = std::env::current_exe().context("finding this program to run the emitter")?;
        let mut child = Command::new(exe)
            .arg("--e2e-emitter")
            .arg(side.as_str())
            .arg("--e2e-vhost")
            .arg(&ctx.vhost)
            .arg("--queue-type")
            .arg(ctx.kind.as_str())
            .arg("--e2e-events")
            .arg(events.to_string())
            .arg("--in-flight")
            .arg(ctx.plan.in_flight.to_string())
            .env(URL_VAR, &ctx.plan.url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("starting the emitter process")?;
        let stdout = child.stdout.take().context("the emitter's stdout")?;
        let mut emitter = Emitter {
            child,
            lines: BufReader::new(stdout).lines(),
        };
        let line = emitter.line().await?;
        anyhow::ensure!(line == "ready", "the emitter said `{line}`, not `ready`");
        Ok(emitter)
    }

    async fn line(&mut self) -> anyhow::Result<String> {
        let line = tokio::time::timeout(consume_patience(), self.lines.next_line())
            .await
            .context("the emitter said nothing in time")??;
        line.context("the emitter ended early (its error is above)")
    }

    async fn go(&mut self) -> anyhow::Result<()> {
        let stdin = self.child.stdin.as_mut().context("the emitter's stdin")?;
        stdin.write_all(b"go\n").await?;
        stdin.flush().await?;
        Ok(())
    }

    /// Waits for the child's report and its exit; the CPU seconds it spent emitting.
    async fn finish(mut self) -> anyhow::Result<f64> {
        let line = self.line().await?;
        let cpu = line
            .strip_prefix("done ")
            .and_then(|seconds| seconds.parse::<f64>().ok())
            .with_context(|| format!("the emitter said `{line}`, not `done <cpu seconds>`"))?;
        let status = self.child.wait().await?;
        anyhow::ensure!(status.success(), "the emitter exited with {status}");
        Ok(cpu)
    }
}

fn consume_patience() -> std::time::Duration {
    std::time::Duration::from_secs(120)
}

fn run(events: u64, mut cost: Cost, child_cpu: f64) -> Run {
    cost.cpu += std::time::Duration::from_secs_f64(child_cpu.max(0.0));
    Run::rate("events/s", events, cost.wall.as_secs_f64(), cost)
}

/// Raw on both ends: the consumer acks each delivery, or (`coalesce`) with `multiple`.
pub(crate) async fn raw(ctx: &Ctx, coalesce: Option<u64>) -> anyhow::Result<Run> {
    broker::purge(&ctx.admin, QUEUE).await?;
    let events = ctx.plan.e2e_events;
    let connection = ctx.raw("e2e-consume").await?;
    let mut consumer = raw::consume(&connection, QUEUE, Some(ctx.plan.prefetch)).await?;
    let mut emitter = Emitter::spawn(ctx, EmitterSide::Raw, events).await?;
    let mut meter = Some(Meter::start());
    emitter.go().await?;
    let drained = consume::drain(&mut consumer, events, coalesce, &mut meter).await;
    let cost = meter.as_ref().map(Meter::finish);
    let _ = consumer.channel.close().await;
    broker::close(connection).await;
    drained?;
    let child_cpu = emitter.finish().await?;
    Ok(run(events, cost.context("no cost recorded")?, child_cpu))
}

/// mesh on both ends: an `on_raw` handler that only counts.
pub(crate) async fn mesh(ctx: &Ctx) -> anyhow::Result<Run> {
    broker::purge(&ctx.admin, QUEUE).await?;
    let events = ctx.plan.e2e_events;
    let count = Arc::new(Count::new(events));
    let handler_count = count.clone();
    let builder = ctx.bus(NODE, "bench").on_raw([KEY], move |_event| {
        let count = handler_count.clone();
        async move {
            count.hit();
            Ok::<(), HandlerError>(())
        }
    });
    let bus = ctx.start(builder, "e2e-consume").await?;
    let mut emitter = Emitter::spawn(ctx, EmitterSide::Mesh, events).await?;
    count.start();
    emitter.go().await?;
    let cost = count.wait().await;
    bus.drain().await?;
    let seen = count.seen();
    let cost =
        cost.ok_or_else(|| anyhow::anyhow!("mesh e2e stalled after {seen} of {events} events"))?;
    let child_cpu = emitter.finish().await?;
    Ok(run(events, cost, child_cpu))
}

/// The emitter role (`--e2e-emitter`): connects to `vhost` on the broker of `$MESH_BENCH_E2E_URL`,
/// says `ready`, waits for `go` on stdin, emits `events` pipelined, and says `done <cpu
/// seconds>`.
pub(crate) async fn emitter(
    side: EmitterSide,
    vhost: &str,
    kind: QueueKind,
    events: u64,
    window: usize,
) -> anyhow::Result<()> {
    let url = std::env::var(URL_VAR)
        .with_context(|| format!("the emitter role reads the broker's URL from ${URL_VAR}"))?;
    let broker = Broker::new(&url, Ctl::Command(String::new()), None)?;
    let started = match side {
        EmitterSide::Raw => {
            let connection = broker.raw(vhost, "e2e-emit").await?;
            let publisher = ConfirmChannel::open(&connection, window).await?;
            say("ready")?;
            wait_go().await?;
            let started = measure::cpu_time();
            let route = Route {
                exchange: EVENTS,
                key: KEY,
                mandatory: false,
            };
            emit::raw_pipelined(&publisher, route, events).await?;
            let spent = measure::cpu_time().saturating_sub(started);
            publisher.close().await;
            broker::close(connection).await;
            spent
        }
        EmitterSide::Mesh => {
            let options = broker.mesh_options(vhost, kind, window, "e2e-emit");
            let transport = mesh::amqp::connect(options).await?;
            let bus = mesh::Bus::builder()
                .node("e2e-emit")
                .module("bench")
                .start(Arc::new(transport))
                .await?;
            say("ready")?;
            wait_go().await?;
            let started = measure::cpu_time();
            emit::mesh_pipelined(&bus, NAME, events, window).await?;
            let spent = measure::cpu_time().saturating_sub(started);
            bus.drain().await?;
            spent
        }
    };
    say(&format!("done {:.6}", started.as_secs_f64()))
}

/// One line to the bench (a few bytes: written in place, outside the measured part).
fn say(line: &str) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")?;
    stdout.flush()?;
    Ok(())
}

async fn wait_go() -> anyhow::Result<()> {
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().lock().read_line(&mut line).map(|_| line)
    })
    .await??;
    match line.trim_end() {
        "go" => Ok(()),
        "" => anyhow::bail!("the bench closed the emitter's stdin before `go`"),
        other => anyhow::bail!("expected `go`, got `{other}`"),
    }
}
