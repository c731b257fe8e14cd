//! Shared helpers of the integration tests: the kit's throw-away stores opened as audit
//! stores, and a logger running on a RabbitMQ vhost (the kit's transport and emitter
//! re-exported beside it).
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mesh_amqp::AmqpTransport;
use mesh_audit::{AuditLogger, AuditOptions, Backend, Store, StoreOptions};
use mesh_testkit::eventually;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

// Not every test binary uses each (as `dead_code` is allowed for the helpers above).
#[allow(unused_imports)]
pub(crate) use mesh_testkit::sdk::{emitter, transport};
pub(crate) use mesh_testkit::TempStore;

/// The kit's [`TempStore`] as an audit store: one of `backend`, and opened.
pub(crate) trait AuditStore: Sized {
    /// A store of the test's own on `backend`: a SQLite file, or a PostgreSQL database.
    async fn new(backend: Backend) -> anyhow::Result<Self>;

    /// The store, opened (migrations run).
    async fn open(&self) -> anyhow::Result<Store>;
}

impl AuditStore for TempStore {
    async fn new(backend: Backend) -> anyhow::Result<TempStore> {
        match backend {
            Backend::Postgres => TempStore::postgres().await,
            _ => Ok(TempStore::sqlite()),
        }
    }

    async fn open(&self) -> anyhow::Result<Store> {
        Ok(Store::open(self.url().parse::<StoreOptions>()?).await?)
    }
}

/// An audit logger running in a task on a transport of its own.
#[derive(Debug)]
pub(crate) struct RunningLogger {
    pub(crate) logger: AuditLogger,
    pub(crate) transport: Arc<AmqpTransport>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), mesh_audit::Error>>,
}

impl RunningLogger {
    /// Starts a logger and waits until both its consumers are attached.
    pub(crate) async fn start(
        url: &str,
        store: Store,
        options: AuditOptions,
    ) -> anyhow::Result<RunningLogger> {
        let transport = transport(url).await?;
        let logger = AuditLogger::new(store, options);
        let shutdown = CancellationToken::new();
        let task = {
            let (logger, transport, shutdown) =
                (logger.clone(), transport.clone(), shutdown.clone());
            tokio::spawn(async move { logger.run(transport.as_ref(), &shutdown).await })
        };
        let watched = transport.clone();
        eventually(
            Duration::from_secs(30),
            "the logger's two consumers",
            || {
                let attached = mesh_core::Transport::health(watched.as_ref()).consumers_attached;
                async move { (attached >= 2).then_some(()) }
            },
        )
        .await;
        Ok(RunningLogger {
            logger,
            transport,
            shutdown,
            task,
        })
    }

    /// Graceful: the open batch is committed and acked.
    pub(crate) async fn stop(self) -> anyhow::Result<()> {
        self.shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(60), self.task)
            .await
            .context("the logger did not stop")???;
        mesh_core::Transport::close(self.transport.as_ref()).await;
        Ok(())
    }

    /// Abrupt: the task is aborted wherever it is and the connection closed, so whatever
    /// was not acked goes back to the queue.
    pub(crate) async fn kill(self) {
        self.task.abort();
        let _ = self.task.await;
        mesh_core::Transport::close(self.transport.as_ref()).await;
    }
}
