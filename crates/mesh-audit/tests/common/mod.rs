//! Shared helpers of the integration tests: throw-away stores (a SQLite file or a PostgreSQL
//! database of their own, removed on drop) and a logger running on a RabbitMQ vhost.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mesh::Bus;
use mesh_amqp::{AmqpOptions, AmqpTransport};
use mesh_audit::{AuditLogger, AuditOptions, Backend, Store, StoreOptions};
use mesh_testkit::eventually;
use rand::Rng;
use sqlx::Connection;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The PostgreSQL server the tests create their databases on.
pub(crate) fn postgres_admin_url() -> String {
    std::env::var("MESH_TEST_PG_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

fn suffix() -> String {
    let mut rng = rand::thread_rng();
    (0..10)
        .map(|_| char::from(b'a' + rng.gen_range(0..26u8)))
        .collect()
}

/// A store of the test's own, removed on drop.
#[derive(Debug)]
pub(crate) struct TempStore {
    pub(crate) options: StoreOptions,
    cleanup: Cleanup,
}

#[derive(Debug)]
enum Cleanup {
    File(PathBuf),
    Database { admin_url: String, name: String },
}

impl TempStore {
    pub(crate) async fn new(backend: Backend) -> anyhow::Result<TempStore> {
        match backend {
            Backend::Postgres => TempStore::postgres().await,
            _ => Ok(TempStore::sqlite()),
        }
    }

    /// A SQLite file in the temporary directory.
    pub(crate) fn sqlite() -> TempStore {
        let path = std::env::temp_dir().join(format!("mesh-audit-test-{}.db", suffix()));
        let url = format!("sqlite://{}?mode=rwc", path.display());
        TempStore {
            options: url.parse().expect("a sqlite URL"),
            cleanup: Cleanup::File(path),
        }
    }

    /// The file of a SQLite store.
    pub(crate) fn sqlite_path(&self) -> Option<&std::path::Path> {
        match &self.cleanup {
            Cleanup::File(path) => Some(path),
            Cleanup::Database { .. } => None,
        }
    }

    /// A database of its own on the PostgreSQL server.
    pub(crate) async fn postgres() -> anyhow::Result<TempStore> {
        let admin_url = postgres_admin_url();
        let name = format!("mesh_audit_test_{}", suffix());
        let mut admin = sqlx::PgConnection::connect(&admin_url)
            .await
            .with_context(|| {
                format!("no PostgreSQL at {admin_url}: start one (Debian package postgresql) or set MESH_TEST_PG_URL")
            })?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .context("creating the test database")?;
        admin.close().await.ok();
        let (base, _) = admin_url
            .rsplit_once('/')
            .context("the admin URL names no database")?;
        let url = format!("{base}/{name}");
        Ok(TempStore {
            options: url.parse()?,
            cleanup: Cleanup::Database { admin_url, name },
        })
    }

    pub(crate) async fn open(&self) -> anyhow::Result<Store> {
        Ok(Store::open(self.options.clone()).await?)
    }

    pub(crate) fn url(&self) -> &str {
        self.options.get_url()
    }
}

impl Drop for TempStore {
    fn drop(&mut self) {
        match &self.cleanup {
            Cleanup::File(path) => {
                for suffix in ["", "-wal", "-shm"] {
                    let mut file = path.clone().into_os_string();
                    file.push(suffix);
                    let _ = std::fs::remove_file(PathBuf::from(file));
                }
            }
            Cleanup::Database { admin_url, name } => {
                // Drop may run inside a runtime: a thread of its own runs the statement.
                let admin_url = admin_url.clone();
                let statement = format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)");
                let dropped = std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()?;
                    runtime.block_on(async {
                        let mut admin = sqlx::PgConnection::connect(&admin_url).await?;
                        sqlx::query(&statement).execute(&mut admin).await?;
                        anyhow::Ok(())
                    })
                })
                .join();
                if !matches!(dropped, Ok(Ok(()))) {
                    eprintln!("could not drop test database {name}");
                }
            }
        }
    }
}

/// A transport on `url`.
pub(crate) async fn transport(url: &str) -> anyhow::Result<Arc<AmqpTransport>> {
    let options: AmqpOptions = url.parse()?;
    Ok(Arc::new(AmqpTransport::connect(options).await?))
}

/// A bus of module `module` on node `node`, with no handlers.
pub(crate) async fn emitter(url: &str, node: &str, module: &str) -> anyhow::Result<Bus> {
    Ok(Bus::builder()
        .node(node)
        .module(module)
        .start(transport(url).await?)
        .await?)
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
