//! The `mesh-audit` binary as a process (what its own crate tested before the binary moved
//! here beside `mesh`): killed mid-batch it loses nothing, SIGTERM stops it with exit code
//! 0, its `--metrics-addr` counts are exact, its `--management-url` is used, bad
//! arguments are usage errors, and shared loggers (`--shared`) store each event once
//! through a SIGKILL of one of them.

mod log_lines;
mod management;
mod metrics;
mod planned_user;
mod process;
mod shared;

mod common {
    //! The binary with a clean environment; the throw-away stores, the transport and the
    //! emitting bus are the kit's.

    use std::path::PathBuf;

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

    pub(crate) use mesh_testkit::sdk::{emitter, transport};
    pub(crate) use mesh_testkit::TempStore;
}
