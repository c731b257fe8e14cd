//! How mesh reads a file a user names: bounded in size and in time.
//!
//! Every file mesh reads because a user, a config file or a URL named it (the config file, a
//! topology spec, a passwords or token file, a contract, a password file, a CA or client
//! certificate) is read by [`read_bounded`] or [`read_bounded_text`], one idiom for the
//! whole workspace:
//!
//! - the open never blocks: it is made with `O_NONBLOCK`, so a FIFO nobody writes to cannot
//!   hang `open(2)`;
//! - at most `max_bytes + 1` bytes are read, and more than `max_bytes` is refused
//!   ([`FileErrorKind::TooLarge`]), so `/dev/zero` or a log file given by mistake costs no
//!   more memory than the bound;
//! - a FIFO or character device (a process substitution, `/dev/stdin`, `/dev/zero`) is read
//!   as it becomes readable (`poll(2)`), and refused when it has not reached its end within
//!   the deadline ([`FileErrorKind::NotReady`]);
//! - a directory, socket or block device is refused ([`FileErrorKind::NotAFile`]).
//!
//! The bounds are chosen per kind of file, as the constants below; [`DEADLINE`] is the one
//! deadline. The readers are synchronous and take no runtime: an async caller runs them
//! with `tokio::task::spawn_blocking`, so a slow FIFO never holds a runtime's worker.
//!
//! ```
//! let text = mesh_files::read_bounded_text(
//!     std::path::Path::new("Cargo.toml"),
//!     mesh_files::MAX_SETTINGS,
//!     mesh_files::DEADLINE,
//! )?;
//! assert!(text.contains("[package]"));
//! # Ok::<(), mesh_files::FileError>(())
//! ```

mod error;
mod read;

use std::time::Duration;

pub use error::{FileError, FileErrorKind};
pub use read::{read_bounded, read_bounded_text};

/// A file holding one secret (a password file): a password is far shorter.
pub const MAX_SECRET: u64 = 4 * 1024;
/// A file holding a list of secrets (the console's token file, the access plan's passwords
/// file): room for about a thousand entries.
pub const MAX_SECRETS: u64 = 64 * 1024;
/// A PEM file (a CA bundle, a client certificate or key): the largest system CA bundles are
/// a quarter of this.
pub const MAX_PEM: u64 = 1024 * 1024;
/// A settings file (the config file, a topology spec, a contract export): far above any real
/// one.
pub const MAX_SETTINGS: u64 = 4 * 1024 * 1024;
/// How long a FIFO or a device may take to give its whole content: a process substitution
/// that asks a secret store has time; a FIFO nobody writes to is refused after it.
pub const DEADLINE: Duration = Duration::from_secs(5);
