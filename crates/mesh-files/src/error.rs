//! The one error of a bounded read, naming the file and the cause.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a file was not read.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileErrorKind {
    /// It holds more than `limit` bytes (at most `limit + 1` were read).
    TooLarge {
        /// The bound it was read with.
        limit: u64,
    },
    /// A FIFO or device that did not reach its end within `deadline` (a FIFO nobody writes
    /// to, a device that never ends slowly enough to pass the size bound first).
    NotReady {
        /// The deadline it was read with.
        deadline: Duration,
        /// How many bytes it had given by then.
        received: u64,
    },
    /// Not a kind of file mesh reads: a directory, a socket, a block device.
    NotAFile {
        /// What it is.
        what: &'static str,
    },
    /// Its content is not UTF-8 (only from [`read_bounded_text`](crate::read_bounded_text)).
    NotText,
    /// The system refused to open or read it (the cause is the [`source`](std::error::Error::source)).
    Io,
}

/// A file that could not be read within its bounds. `Display` names the file and the cause;
/// an I/O failure keeps the system's error as its `source()`. It never holds any of the
/// file's content.
#[derive(Debug)]
pub struct FileError {
    path: PathBuf,
    kind: FileErrorKind,
    source: Option<io::Error>,
}

impl FileError {
    pub(crate) fn new(path: &Path, kind: FileErrorKind) -> FileError {
        FileError {
            path: path.to_owned(),
            kind,
            source: None,
        }
    }

    pub(crate) fn io(path: &Path, source: io::Error) -> FileError {
        FileError {
            path: path.to_owned(),
            kind: FileErrorKind::Io,
            source: Some(source),
        }
    }

    /// Why it was not read.
    pub fn kind(&self) -> FileErrorKind {
        self.kind
    }

    /// The file, as it was named.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the file does not exist (a caller may treat a missing optional file as
    /// absent).
    pub fn is_not_found(&self) -> bool {
        self.io_kind() == Some(io::ErrorKind::NotFound)
    }

    /// The system's error kind, for an [`Io`](FileErrorKind::Io) failure.
    pub fn io_kind(&self) -> Option<io::ErrorKind> {
        self.source.as_ref().map(io::Error::kind)
    }
}

impl fmt::Display for FileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Control characters in a path are shown escaped, never sent to the terminal.
        let path = self.path.display().to_string();
        let path = path.escape_debug();
        match self.kind {
            FileErrorKind::TooLarge { limit } => {
                write!(f, "{path} is larger than {}", Size(limit))
            }
            FileErrorKind::NotReady {
                deadline,
                received: 0,
            } => write!(
                f,
                "{path} gave nothing within {}s (a FIFO nobody writes to?)",
                deadline.as_secs_f64()
            ),
            FileErrorKind::NotReady { deadline, .. } => {
                write!(f, "{path} did not end within {}s", deadline.as_secs_f64())
            }
            FileErrorKind::NotAFile { what } => {
                write!(f, "{path} is {what}, not a file mesh reads")
            }
            FileErrorKind::NotText => write!(f, "{path} is not UTF-8 text"),
            FileErrorKind::Io => write!(f, "cannot read {path}"),
        }
    }
}

impl std::error::Error for FileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_ref()
            .map(|e| e as &(dyn std::error::Error + 'static))
    }
}

/// A byte count as people read it: `4 KiB`, `1 MiB`, `1000 bytes`.
struct Size(u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const KIB: u64 = 1024;
        const MIB: u64 = 1024 * KIB;
        match self.0 {
            n if n >= MIB && n % MIB == 0 => write!(f, "{} MiB", n / MIB),
            n if n >= KIB && n % KIB == 0 => write!(f, "{} KiB", n / KIB),
            1 => write!(f, "1 byte"),
            n => write!(f, "{n} bytes"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_file_and_the_cause() {
        let path = Path::new("/etc/mesh/pw");
        let cases = [
            (
                FileErrorKind::TooLarge { limit: 4096 },
                "/etc/mesh/pw is larger than 4 KiB",
            ),
            (
                FileErrorKind::TooLarge {
                    limit: 4 * 1024 * 1024,
                },
                "/etc/mesh/pw is larger than 4 MiB",
            ),
            (
                FileErrorKind::TooLarge { limit: 10 },
                "/etc/mesh/pw is larger than 10 bytes",
            ),
            (
                FileErrorKind::NotReady {
                    deadline: Duration::from_secs(5),
                    received: 0,
                },
                "/etc/mesh/pw gave nothing within 5s (a FIFO nobody writes to?)",
            ),
            (
                FileErrorKind::NotReady {
                    deadline: Duration::from_millis(1500),
                    received: 3,
                },
                "/etc/mesh/pw did not end within 1.5s",
            ),
            (
                FileErrorKind::NotAFile {
                    what: "a directory",
                },
                "/etc/mesh/pw is a directory, not a file mesh reads",
            ),
            (FileErrorKind::NotText, "/etc/mesh/pw is not UTF-8 text"),
        ];
        for (kind, message) in cases {
            assert_eq!(FileError::new(path, kind).to_string(), message);
        }
    }

    #[test]
    fn a_path_with_control_characters_is_shown_escaped() {
        let error = FileError::new(Path::new("/tmp/a\u{1b}[2Jb"), FileErrorKind::NotText);
        assert_eq!(error.to_string(), "/tmp/a\\u{1b}[2Jb is not UTF-8 text");
    }
}
