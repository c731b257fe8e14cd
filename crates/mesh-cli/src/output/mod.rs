//! Where output goes and how it looks: plain text or one JSON object per line on stdout,
//! colour only when the stream is a terminal (`anstream` strips styles otherwise, and honours
//! `NO_COLOR` and `--color`).
//!
//! One rule for every command: text from the wire, the broker or a store (keys, sources,
//! nodes, queue names, log records, error texts, bodies) never reaches the operator's terminal
//! as a control or invisible format character. [`line`] and [`note`] pass everything they are
//! given through the [`gate`], which escapes each unsafe character (`mesh_core::text`'s rule)
//! and lets through only the styles [`paint`] adds; [`json`] writes JSON whose strings have
//! the same characters as `\uXXXX` escapes. So a publisher cannot forge a line, move the
//! cursor, set the clipboard or reorder what is shown, in either format.

mod gate;
#[cfg(test)]
pub(crate) mod hostile;
mod json;

use std::io::{self, IsTerminal, Write};

use anstyle::{AnsiColor, Style};
use serde::Serialize;

pub(crate) use gate::{lazy, paint};

/// An event key, queue or exchange name.
pub(crate) const NAME: Style = AnsiColor::Cyan.on_default().bold();
/// Secondary text: ids, times.
pub(crate) const DIM: Style = Style::new().dimmed();
/// Something fine or added.
pub(crate) const GOOD: Style = AnsiColor::Green.on_default();
/// Something different.
pub(crate) const WARN: Style = AnsiColor::Yellow.on_default();
/// Something missing, failed or removed.
pub(crate) const BAD: Style = AnsiColor::Red.on_default().bold();

/// Writes one line to stdout, escaped by the gate; an error (a closed pipe) is returned,
/// never a panic.
pub(crate) fn line(text: impl std::fmt::Display) -> io::Result<()> {
    let mut shown = gate::format(&text).map_err(io::Error::other)?;
    shown.push('\n');
    write(Stream::Stdout, shown.as_bytes())
}

/// Writes a note to stderr (progress, "listening on …"), escaped by the gate; errors writing
/// it are ignored, as a note is not the command's result.
pub(crate) fn note(text: impl std::fmt::Display) {
    if let Ok(mut shown) = gate::format(&text) {
        shown.push('\n');
        let _ = write(Stream::Stderr, shown.as_bytes());
    }
}

/// Writes one JSON value as one line to stdout, unsafe characters escaped.
pub(crate) fn json<T: Serialize + ?Sized>(value: &T) -> io::Result<()> {
    let mut bytes = json::compact(value)?;
    bytes.push(b'\n');
    write(Stream::Stdout, &bytes)
}

/// Writes one JSON value as one line to stderr (a failure under `--json`), unsafe characters
/// escaped; errors writing it are ignored, as for [`note`].
pub(crate) fn json_note<T: Serialize + ?Sized>(value: &T) {
    if let Ok(mut bytes) = json::compact(value) {
        bytes.push(b'\n');
        let _ = write(Stream::Stderr, &bytes);
    }
}

/// `value` as an indented JSON document ending in a newline (a file or stdout), unsafe
/// characters escaped.
pub(crate) fn json_document<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    let mut bytes = json::pretty(value)?;
    bytes.push(b'\n');
    Ok(bytes)
}

/// Writes bytes to stdout as they are: only what the program makes itself (a completion
/// script or man page from the clap definition, a document from [`json_document`]), never
/// text from outside.
pub(crate) fn raw(bytes: &[u8]) -> io::Result<()> {
    write(Stream::Raw, bytes)
}

/// Whether stderr is a terminal (progress bars are drawn only then).
pub(crate) fn stderr_is_terminal() -> bool {
    io::stderr().is_terminal()
}

/// Wire text made safe to print as text: the one rule of `mesh_core::text` (control and
/// format characters become `\u{…}`), borrowed when there is nothing to escape. The gate
/// applies it to all output; a printer calls it itself only for text that goes elsewhere
/// (an error message).
pub(crate) use mesh_core::text::escape;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stream {
    /// Text and JSON lines: through `anstream`, which strips styles when not a terminal.
    Stdout,
    Stderr,
    /// Bytes as they are.
    Raw,
}

fn write(stream: Stream, bytes: &[u8]) -> io::Result<()> {
    #[cfg(test)]
    if capture::take(stream, bytes) {
        return Ok(());
    }
    match stream {
        Stream::Stdout => {
            let mut out = anstream::stdout().lock();
            out.write_all(bytes)?;
            out.flush()
        }
        Stream::Stderr => {
            let mut err = anstream::stderr().lock();
            err.write_all(bytes)?;
            err.flush()
        }
        Stream::Raw => {
            let mut out = io::stdout().lock();
            out.write_all(bytes)?;
            out.flush()
        }
    }
}

/// Unit tests run printers and read what they wrote, on the test's thread.
#[cfg(test)]
pub(crate) mod capture {
    use std::cell::RefCell;

    use super::Stream;

    /// What the printers wrote while captured, styles included.
    #[derive(Debug, Default)]
    pub(crate) struct Captured {
        pub(crate) stdout: String,
        pub(crate) stderr: String,
    }

    thread_local! {
        static CAPTURED: RefCell<Option<Captured>> = const { RefCell::new(None) };
    }

    /// Runs `f`, capturing what it writes on this thread instead of writing it.
    pub(crate) fn capture<R>(f: impl FnOnce() -> R) -> (R, Captured) {
        CAPTURED.with(|c| *c.borrow_mut() = Some(Captured::default()));
        let result = f();
        let captured = CAPTURED.with(|c| c.borrow_mut().take()).unwrap_or_default();
        (result, captured)
    }

    pub(super) fn take(stream: Stream, bytes: &[u8]) -> bool {
        CAPTURED.with(|c| match c.borrow_mut().as_mut() {
            None => false,
            Some(captured) => {
                let text = String::from_utf8_lossy(bytes);
                match stream {
                    Stream::Stdout | Stream::Raw => captured.stdout.push_str(&text),
                    Stream::Stderr => captured.stderr.push_str(&text),
                }
                true
            }
        })
    }
}
