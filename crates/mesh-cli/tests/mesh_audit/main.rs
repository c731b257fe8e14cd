//! The `mesh-audit` binary as a process (what its own crate tested before the binary moved
//! here beside `mesh`): killed mid-batch it loses nothing, SIGTERM stops it with exit code
//! 0, its `--metrics-addr` counts are exact, its `--management-url` is used, and bad
//! arguments are usage errors.

mod management;
mod metrics;
mod process;

mod common {
    //! Throw-away stores, a transport and an emitting bus on a vhost, and the binary with a
    //! clean environment.

    use std::path::PathBuf;
    use std::sync::Arc;

    use anyhow::Context;
    use mesh::amqp::{AmqpOptions, AmqpTransport};
    use mesh::Bus;
    use mesh_audit::{Store, StoreOptions};
    use rand::Rng;
    use sqlx::Connection;
    use tokio::process::Command;

    /// An empty config directory: no developer's contexts reach the tests.
    pub(crate) fn no_config() -> PathBuf {
        std::env::temp_dir().join("mesh-audit-test-no-config")
    }

    /// `mesh-audit` with no config file, context, store or node from the environment.
    pub(crate) fn mesh_audit() -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_mesh-audit"));
        command
            .env("XDG_CONFIG_HOME", no_config())
            .env_remove("MESH_CONFIG")
            .env_remove("MESH_CONTEXT")
            .env_remove("MESH_AUDIT_STORE")
            .env_remove("MESH_QUEUE_TYPE")
            .env_remove("MESH_PASSWORD")
            .env_remove("MESH_PASSWORD_FILE");
        command
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
        options: StoreOptions,
        cleanup: Cleanup,
    }

    #[derive(Debug)]
    enum Cleanup {
        File(PathBuf),
        Database { admin_url: String, name: String },
    }

    impl TempStore {
        /// A SQLite file in the temporary directory.
        pub(crate) fn sqlite() -> TempStore {
            let path = std::env::temp_dir().join(format!("mesh-audit-test-{}.db", suffix()));
            let url = format!("sqlite://{}?mode=rwc", path.display());
            TempStore {
                options: url.parse().expect("a sqlite URL"),
                cleanup: Cleanup::File(path),
            }
        }

        /// A database of its own on the PostgreSQL server (`MESH_TEST_PG_URL`).
        pub(crate) async fn postgres() -> anyhow::Result<TempStore> {
            let admin_url = std::env::var("MESH_TEST_PG_URL")
                .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());
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
}
