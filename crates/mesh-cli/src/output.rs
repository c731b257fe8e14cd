//! Where output goes and how it looks: plain text or one JSON object per line on stdout,
//! colour only when the stream is a terminal (`anstream` strips styles otherwise, and honours
//! `NO_COLOR` and `--color`).
//!
//! Text from the wire or the audit store (keys, sources, nodes, error texts, bodies) goes
//! through [`escape`] before it is printed as text, so a publisher cannot forge a line,
//! move the cursor or reorder what is shown; `--json` escapes through JSON.

use std::io::{self, IsTerminal, Write};

use anstyle::{AnsiColor, Style};

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

/// `text` in `style` (the style is stripped later when the output is not a terminal).
pub(crate) fn paint(style: Style, text: impl std::fmt::Display) -> String {
    format!("{style}{text}{style:#}")
}

/// Writes one line to stdout; an error (a closed pipe) is returned, never a panic.
pub(crate) fn line(text: impl std::fmt::Display) -> io::Result<()> {
    let mut out = anstream::stdout().lock();
    writeln!(out, "{text}")?;
    out.flush()
}

/// Writes bytes to stdout as they are (a generated script or page).
pub(crate) fn raw(bytes: &[u8]) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(bytes)?;
    out.flush()
}

/// Writes one JSON value as one line to stdout.
pub(crate) fn json(value: &serde_json::Value) -> io::Result<()> {
    let mut out = io::stdout().lock();
    serde_json::to_writer(&mut out, value)?;
    out.write_all(b"\n")?;
    out.flush()
}

/// Writes a note to stderr (progress, "listening on …"); errors writing it are ignored, as
/// a note is not the command's result.
pub(crate) fn note(text: impl std::fmt::Display) {
    let mut err = anstream::stderr().lock();
    let _ = writeln!(err, "{text}");
}

/// Whether stderr is a terminal (progress bars are drawn only then).
pub(crate) fn stderr_is_terminal() -> bool {
    io::stderr().is_terminal()
}

/// Wire text made safe to print as text: the one rule of `mesh_core::text` (control and
/// format characters become `\u{…}`), borrowed when there is nothing to escape.
pub(crate) use mesh_core::text::escape;
