//! The soak's child processes: each kept running in a [`Slot`] whose task reads its lines,
//! and kills, restarts or finishes it on command; the [`Crew`] of them all.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::sync::{mpsc, oneshot};

use super::problems::Problems;
use super::settings::WAIT;
use crate::setup;
use crate::worker::{self, Worker};

/// What a child's lines are handed to, one at a time.
pub(super) type OnLine = Arc<dyn Fn(&str) + Send + Sync>;

/// How to start one child process, again and again.
#[derive(Clone)]
pub(super) struct Spawner {
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
}

impl fmt::Debug for Spawner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The environment holds a password.
        f.debug_struct("Spawner")
            .field("program", &self.program)
            .field("args", &self.args)
            .finish_non_exhaustive()
    }
}

impl Spawner {
    pub(super) fn new(program: &std::path::Path, args: &[&str], login: &setup::Login) -> Spawner {
        Spawner {
            program: program.to_owned(),
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            env: login
                .env()
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    fn spawn(&self) -> anyhow::Result<Worker> {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        Worker::spawn_with_env(&self.program, &args, &env)
    }
}

/// Reads `worker`'s lines, handing each to `on_line`, until it says `ready`.
async fn until_ready(worker: &mut Worker, on_line: &OnLine) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        match worker.next_line(left).await? {
            Some(line) if line == "ready" => return Ok(()),
            Some(line) => on_line(&line),
            None => anyhow::bail!("the child exited before it was ready"),
        }
    }
}

/// Reads what a dead or finishing child still has to say; returns its last line.
async fn drain_lines(worker: &mut Worker, on_line: &OnLine) -> Option<String> {
    let mut last = None;
    while let Ok(Some(line)) = worker.next_line(WAIT).await {
        on_line(&line);
        last = Some(line);
    }
    last
}

enum SlotCommand {
    /// SIGKILL, start a new one; answers how it died and how long until the new one was ready.
    Kill(oneshot::Sender<anyhow::Result<(String, Duration)>>),
    /// Close its stdin and wait for it; answers its last line.
    Finish(oneshot::Sender<anyhow::Result<Option<String>>>),
}

/// A child process kept running: one task owns it, reads its lines, and kills, restarts or
/// finishes it on command. A child that exits on its own is a problem, and is restarted.
#[derive(Debug)]
pub(super) struct Slot {
    pub(super) name: String,
    commands: mpsc::Sender<SlotCommand>,
}

impl Slot {
    pub(super) async fn start(
        name: String,
        spawner: Spawner,
        on_line: OnLine,
        problems: Problems,
    ) -> anyhow::Result<Slot> {
        let mut worker = spawner.spawn()?;
        until_ready(&mut worker, &on_line)
            .await
            .with_context(|| format!("starting {name}"))?;
        let (commands, rx) = mpsc::channel(4);
        tokio::spawn(own(name.clone(), worker, spawner, on_line, rx, problems));
        Ok(Slot { name, commands })
    }

    pub(super) async fn kill(&self) -> anyhow::Result<(String, Duration)> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(SlotCommand::Kill(tx))
            .await
            .map_err(|_| anyhow::anyhow!("{} is no longer kept", self.name))?;
        rx.await
            .map_err(|_| anyhow::anyhow!("{} is no longer kept", self.name))?
    }

    pub(super) async fn finish(&self) -> anyhow::Result<Option<String>> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(SlotCommand::Finish(tx))
            .await
            .map_err(|_| anyhow::anyhow!("{} is no longer kept", self.name))?;
        rx.await
            .map_err(|_| anyhow::anyhow!("{} is no longer kept", self.name))?
    }
}

/// The task owning a slot's child.
async fn own(
    name: String,
    mut worker: Worker,
    spawner: Spawner,
    on_line: OnLine,
    mut commands: mpsc::Receiver<SlotCommand>,
    problems: Problems,
) {
    loop {
        tokio::select! {
            command = commands.recv() => match command {
                Some(SlotCommand::Kill(reply)) => {
                    let began = Instant::now();
                    let result = async {
                        let status = worker.kill().await?;
                        // What it said before it died still counts.
                        drain_lines(&mut worker, &on_line).await;
                        worker = spawner.spawn()?;
                        until_ready(&mut worker, &on_line).await?;
                        Ok((worker::describe(&status), began.elapsed()))
                    }
                    .await;
                    let _ = reply.send(result);
                }
                Some(SlotCommand::Finish(reply)) => {
                    let result = async {
                        let status = worker.finish(WAIT).await?;
                        let last = drain_lines(&mut worker, &on_line).await;
                        if !status.success() {
                            anyhow::bail!("{name} ended with {}", worker::describe(&status));
                        }
                        Ok(last)
                    }
                    .await;
                    let _ = reply.send(result);
                    return;
                }
                // The soak is gone: the child goes with the worker's drop.
                None => return,
            },
            line = worker.next_line(Duration::from_secs(3_600)) => match line {
                Ok(Some(line)) => on_line(&line),
                Ok(None) => {
                    let status = worker
                        .exited(WAIT)
                        .await
                        .map_or_else(|e| format!("{e:#}"), |s| worker::describe(&s));
                    problems.push(format!("{name} exited on its own ({status}); started again"));
                    match spawner.spawn() {
                        Ok(new) => {
                            worker = new;
                            if let Err(e) = until_ready(&mut worker, &on_line).await {
                                problems.push(format!("{name} did not start again: {e:#}"));
                                return;
                            }
                        }
                        Err(e) => {
                            problems.push(format!("{name} could not be started again: {e:#}"));
                            return;
                        }
                    }
                }
                // Quiet for an hour, or a read error: look again.
                Err(_) => {}
            },
        }
    }
}

/// The soak's child processes: the audit logger, the competing consumers, the RPC servers.
#[derive(Debug)]
pub(super) struct Crew {
    pub(super) audit: Slot,
    pub(super) consumers: Vec<Slot>,
    pub(super) servers: Vec<Slot>,
}

impl Crew {
    /// Finishes every child (the audit logger stores what it holds and says so).
    pub(super) async fn finish(&self, problems: &Problems) {
        for slot in self.consumers.iter().chain(&self.servers) {
            if let Err(e) = slot.finish().await {
                problems.push(format!("finishing {}: {e:#}", slot.name));
            }
        }
        match self.audit.finish().await {
            Ok(line) => eprintln!("[soak] the audit logger said {line:?} at its end"),
            Err(e) => problems.push(format!("finishing the audit logger: {e:#}")),
        }
    }
}
