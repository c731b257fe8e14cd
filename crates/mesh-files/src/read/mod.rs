//! The bounded read: open without blocking, look at what was opened, read at most the bound
//! plus one byte, each read of a FIFO or device only once `poll(2)` says it is readable.

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsFd as _;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::libc;
use nix::poll::{PollFd, PollFlags, PollTimeout};

use crate::error::{FileError, FileErrorKind};

/// The most asked of one `read(2)`.
const CHUNK: u64 = 64 * 1024;

/// The content of the file at `path`, at most `max_bytes` of it, within `deadline`.
///
/// The open never blocks (`O_NONBLOCK`: a FIFO without a writer opens at once). A regular
/// file is read directly. A FIFO or character device is read as it becomes readable, and
/// refused with [`NotReady`](FileErrorKind::NotReady) when it has not reached its end
/// within `deadline` (a FIFO nobody writes to gives nothing and is refused then). More than
/// `max_bytes` is refused with [`TooLarge`](FileErrorKind::TooLarge), having read at most
/// `max_bytes + 1` bytes. Directories, sockets and block devices are refused with
/// [`NotAFile`](FileErrorKind::NotAFile).
///
/// Synchronous, and blocking for at most about `deadline`: an async caller runs it with
/// `spawn_blocking`.
pub fn read_bounded(path: &Path, max_bytes: u64, deadline: Duration) -> Result<Vec<u8>, FileError> {
    let until = Instant::now().checked_add(deadline);
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
        .map_err(|e| FileError::io(path, e))?;
    let kind = file
        .metadata()
        .map_err(|e| FileError::io(path, e))?
        .file_type();
    let drained = if kind.is_file() {
        // A regular file is always readable; the deadline still ends a read that crawls.
        drain(&file, max_bytes, || {
            Ok(until.is_none_or(|t| Instant::now() < t))
        })
    } else if kind.is_fifo() || kind.is_char_device() {
        drain(&file, max_bytes, || readable(&file, until))
    } else {
        let what = if kind.is_dir() {
            "a directory"
        } else if kind.is_socket() {
            "a socket"
        } else if kind.is_block_device() {
            "a block device"
        } else {
            "neither a file, a FIFO nor a character device"
        };
        return Err(FileError::new(path, FileErrorKind::NotAFile { what }));
    };
    drained.map_err(|stop| match stop {
        Stop::TooLarge => FileError::new(path, FileErrorKind::TooLarge { limit: max_bytes }),
        Stop::NotReady { received } => {
            FileError::new(path, FileErrorKind::NotReady { deadline, received })
        }
        Stop::Io(e) => FileError::io(path, e),
    })
}

/// [`read_bounded`], and the content must be UTF-8 ([`NotText`](FileErrorKind::NotText)
/// otherwise).
pub fn read_bounded_text(
    path: &Path,
    max_bytes: u64,
    deadline: Duration,
) -> Result<String, FileError> {
    let bytes = read_bounded(path, max_bytes, deadline)?;
    String::from_utf8(bytes).map_err(|_| FileError::new(path, FileErrorKind::NotText))
}

/// Why [`drain`] stopped short of the end.
#[derive(Debug)]
enum Stop {
    TooLarge,
    NotReady { received: u64 },
    Io(io::Error),
}

/// All of `source`, asking `ready` before every read whether to go on (false: the deadline
/// passed). Never asks `source` for more than `max + 1` bytes in all.
fn drain(
    mut source: impl Read,
    max: u64,
    mut ready: impl FnMut() -> io::Result<bool>,
) -> Result<Vec<u8>, Stop> {
    let mut content = Vec::new();
    let mut received: u64 = 0;
    loop {
        if !ready().map_err(Stop::Io)? {
            return Err(Stop::NotReady { received });
        }
        // At least 1: `received <= max` here.
        let want = (max - received).saturating_add(1).min(CHUNK);
        let start = content.len();
        // `want` is at most CHUNK, so it fits a usize.
        content.resize(start + want as usize, 0);
        match source.read(&mut content[start..]) {
            Ok(0) => {
                content.truncate(start);
                return Ok(content);
            }
            Ok(n) => {
                content.truncate(start + n);
                received += n as u64;
                if received > max {
                    return Err(Stop::TooLarge);
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                content.truncate(start);
            }
            Err(e) => return Err(Stop::Io(e)),
        }
    }
}

/// Waits until `file` is readable (or at its end) or `until` passes: whether it is.
fn readable(file: &File, until: Option<Instant>) -> io::Result<bool> {
    let timeout = match until {
        None => PollTimeout::NONE,
        Some(until) => {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(false);
            }
            // Rounded up, so a wait never ends just before the deadline and spins.
            let millis = left.as_nanos().div_ceil(1_000_000);
            PollTimeout::try_from(millis).unwrap_or(PollTimeout::MAX)
        }
    };
    let mut fds = [PollFd::new(file.as_fd(), PollFlags::POLLIN)];
    match nix::poll::poll(&mut fds, timeout) {
        Ok(0) => Ok(until.is_none()),
        Ok(_) => Ok(true),
        // Interrupted: the read finds nothing and the next round waits again.
        Err(Errno::EINTR) => Ok(true),
        Err(errno) => Err(io::Error::from(errno)),
    }
}

#[cfg(test)]
mod tests;
