//! Text from the wire made safe to show: one rule for terminals, plain-text output and log
//! lines, so a publisher cannot forge a line, move a cursor, set a clipboard or reorder what
//! an operator reads.
//!
//! A character is unsafe when it is a control character (C0, DEL, C1: CR, LF, ESC, the 8-bit
//! CSI U+009B, …) or an invisible format character that reorders or hides text (bidi marks,
//! embeddings, overrides and isolates, zero-width characters, line and paragraph separators,
//! the byte order mark, interlinear annotations, tags). [`escape`] writes each as `\u{…}`
//! (`\r`, `\n`, `\t` for those three) and keeps everything else as it is, so printable text,
//! non-ASCII letters included, reads unchanged.
//!
//! ```
//! use mesh_core::text::{escape, Escaped};
//!
//! assert_eq!(escape("paid\r\nforged line"), "paid\\r\\nforged line");
//! assert_eq!(escape("Zoë → 東京"), "Zoë → 東京");
//! assert_eq!(format!("key {}", Escaped("a\u{1b}[2J")), "key a\\u{1b}[2J");
//! ```

use std::borrow::Cow;
use std::fmt::{self, Write as _};

/// Whether `c` must not reach a terminal or a log line as is (see the module docs).
pub fn is_unsafe(c: char) -> bool {
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

/// `text` made safe to print: every unsafe character becomes `\u{…}` (`\r`, `\n`, `\t` for
/// those), everything else is kept. Borrowed when there is nothing to escape, the usual case.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    // Writing to a String cannot fail.
    let _ = write_escaped(&mut out, text);
    Cow::Owned(out)
}

/// Writes `text` to `out` escaped as [`escape`] does, without an intermediate string.
pub fn write_escaped(out: &mut impl fmt::Write, text: &str) -> fmt::Result {
    for c in text.chars() {
        match c {
            '\r' => out.write_str("\\r")?,
            '\n' => out.write_str("\\n")?,
            '\t' => out.write_str("\\t")?,
            c if is_unsafe(c) => write!(out, "\\u{{{:x}}}", u32::from(c))?,
            c => out.write_char(c)?,
        }
    }
    Ok(())
}

/// Displays its text escaped: `%Escaped(key)` in a tracing field, `{}` in a format string.
/// For a value that is not a string (an error), [`EscapedDisplay`].
#[derive(Clone, Copy)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_escaped(f, self.0)
    }
}

impl fmt::Debug for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_char('"')?;
        write_escaped(f, self.0)?;
        f.write_char('"')
    }
}

/// Displays any value's `Display` text escaped as [`escape`] does, streamed without an
/// intermediate string: `error = %EscapedDisplay(&e)` in a tracing field, for an error (or
/// anything else) whose text may quote wire values.
#[derive(Clone, Copy)]
pub struct EscapedDisplay<T>(pub T);

impl<T: fmt::Display> fmt::Display for EscapedDisplay<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(Escaping(f), "{}", self.0)
    }
}

impl<T: fmt::Display> fmt::Debug for EscapedDisplay<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_char('"')?;
        write!(Escaping(&mut *f), "{}", self.0)?;
        f.write_char('"')
    }
}

/// A writer that escapes what goes through it (each piece is whole characters).
struct Escaping<W>(W);

impl<W: fmt::Write> fmt::Write for Escaping<W> {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        write_escaped(&mut self.0, text)
    }
}

#[cfg(test)]
mod tests {
    use super::{escape, is_unsafe, Escaped, EscapedDisplay};
    use proptest::prelude::*;

    #[test]
    fn control_and_bidi_characters_are_escaped() {
        assert_eq!(
            escape("anchor\r\nfake 2026 line\u{1b}[2J"),
            "anchor\\r\\nfake 2026 line\\u{1b}[2J"
        );
        assert_eq!(
            escape("a\tb\u{7f}\u{85}\u{9b}"),
            "a\\tb\\u{7f}\\u{85}\\u{9b}"
        );
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
        assert_eq!(format!("{:?}", Escaped("a\nb")), "\"a\\nb\"");
        let error = std::io::Error::other("refused `a\r\nb\u{202e}`");
        assert_eq!(
            EscapedDisplay(&error).to_string(),
            "refused `a\\r\\nb\\u{202e}`"
        );
        assert_eq!(format!("{:?}", EscapedDisplay("a\nb")), "\"a\\nb\"");
    }

    proptest! {
        /// Whatever the input, no unsafe character survives, and the output is the input
        /// when it had none.
        #[test]
        fn no_unsafe_character_survives(text in any::<String>()) {
            let escaped = escape(&text);
            prop_assert!(!escaped.chars().any(is_unsafe), "{escaped:?}");
            prop_assert_eq!(format!("{}", Escaped(&text)), escaped.as_ref());
            prop_assert_eq!(EscapedDisplay(&text).to_string(), escaped.as_ref());
            if !text.chars().any(is_unsafe) {
                prop_assert_eq!(escaped.as_ref(), text.as_str());
            }
        }

        /// Printable text around an unsafe character is kept, in order.
        #[test]
        fn printable_text_is_unchanged(
            before in "[a-zA-Z0-9 .é東→]{0,20}",
            after in "[a-zA-Z0-9 .é東→]{0,20}",
            bad in prop::sample::select(vec!['\u{1b}', '\r', '\n', '\u{9b}', '\u{202e}', '\u{0}', '\u{7f}']),
        ) {
            let text = format!("{before}{bad}{after}");
            let escaped = escape(&text);
            prop_assert!(escaped.starts_with(&before));
            prop_assert!(escaped.ends_with(&after));
        }
    }
}
