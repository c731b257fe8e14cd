//! Where output goes and how it looks: plain text or one JSON object per line on stdout,
//! colour only when the stream is a terminal (`anstream` strips styles otherwise, and honours
//! `NO_COLOR` and `--color`).
//!
//! Text from the wire or the audit store (keys, sources, nodes, error texts, bodies) goes
//! through [`escape`] before it is printed as text, so a publisher cannot forge a line,
//! move the cursor or reorder what is shown; `--json` escapes through JSON.

use std::borrow::Cow;
use std::fmt::Write as _;
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

/// Whether a character must not reach a terminal as is: a control character (C0, DEL, C1:
/// CR, LF, ESC, …) or an invisible format character that reorders or hides text (bidi
/// marks, embeddings, overrides and isolates, zero-width characters, line and paragraph
/// separators, the byte order mark, interlinear annotations, tags).
fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061C}'
                | '\u{180E}'
                | '\u{200B}'..='\u{200F}'
                | '\u{2028}'..='\u{202E}'
                | '\u{2060}'..='\u{2064}'
                | '\u{2066}'..='\u{206F}'
                | '\u{FEFF}'
                | '\u{FFF9}'..='\u{FFFB}'
                | '\u{E0001}'
                | '\u{E0020}'..='\u{E007F}'
        )
}

/// Wire text made safe to print as text: every control or format character (see
/// `is_unsafe`) becomes `\u{…}` (`\r`, `\n`, `\t` for those), everything else is kept.
/// Borrowed when there is nothing to escape, which is the usual case.
pub(crate) fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\r' => out.push_str("\\r"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if is_unsafe(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn control_and_bidi_characters_are_escaped() {
        assert_eq!(
            escape("anchor\r\nfake 2026 line\u{1b}[2J"),
            "anchor\\r\\nfake 2026 line\\u{1b}[2J"
        );
        assert_eq!(escape("a\tb\u{7f}\u{85}"), "a\\tb\\u{7f}\\u{85}");
        // Right-to-left override, isolates, zero width, line separator, BOM, a tag.
        assert_eq!(
            escape("umami\u{202E}cod.exe\u{2066}\u{200B}\u{2028}\u{FEFF}\u{E0041}"),
            "umami\\u{202e}cod.exe\\u{2066}\\u{200b}\\u{2028}\\u{feff}\\u{e0041}"
        );
        // Printable text, non-ASCII letters and JSON escapes stay as they are, borrowed.
        for kept in [
            "module.umami.site.created",
            "Zoë → 東京",
            r#"{"a":"say \"hi\"\n"}"#,
        ] {
            assert!(
                matches!(escape(kept), std::borrow::Cow::Borrowed(_)),
                "{kept}"
            );
            assert_eq!(escape(kept), kept);
        }
    }
}
