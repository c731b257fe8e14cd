//! Reading the files the options name (the password file, the TLS files) off the runtime.
//!
//! `mesh_files` reads synchronously, and a FIFO or device may take up to its deadline: a
//! connect or reconnect runs the read on tokio's blocking pool, so a slow file never holds a
//! worker of the caller's runtime.

use mesh_core::{TransportError, TransportErrorKind};

/// `read` on the blocking pool; its result, or an error if the pool dropped it.
pub(crate) async fn off_runtime<T, F>(read: F) -> Result<T, TransportError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, TransportError> + Send + 'static,
{
    tokio::task::spawn_blocking(read).await.unwrap_or_else(|e| {
        Err(TransportError::new(
            TransportErrorKind::InvalidOptions,
            "reading the options' files did not finish",
        )
        .with_source(e))
    })
}
