//! The gate every line of text output passes: whatever a printer formats (wire, broker and
//! store text included) comes out with each unsafe character escaped by the one rule of
//! `mesh_core::text`; only the styles [`paint`] adds pass as they are.
//!
//! A printer cannot forget to escape: it hands [`super::line`] or [`super::note`] anything
//! `Display`, and the gate escapes what is written while it formats. A style is the one
//! thing let through, and only [`Painted`] can say "this is a style", around the escape
//! sequence `anstyle` renders for one of the fixed [`Style`]s: nothing a publisher sends ever
//! reaches the terminal as a control character.
//!
//! `paint` returns a [`Painted`] value, formatted lazily, so the gate sees where its style
//! starts and ends. A `Painted` formatted anywhere else (into a `String` with `format!`)
//! writes its text without the style: a misplaced one loses its colour, never its escaping.

use std::cell::Cell;
use std::fmt::{self, Write as _};

use anstyle::Style;
use mesh_core::text::write_escaped;

thread_local! {
    /// Whether a gate is formatting on this thread (styles are only written inside one).
    static IN_GATE: Cell<bool> = const { Cell::new(false) };
    /// Whether what is written now is a style [`Painted`] renders, passed as it is.
    static WRITING_STYLE: Cell<bool> = const { Cell::new(false) };
}

/// `text` in `style`: the style is written only when the gate formats it (and stripped later
/// when the output is not a terminal); the text is escaped like any other.
pub(crate) fn paint<T: fmt::Display>(style: Style, text: T) -> Painted<T> {
    Painted { style, text }
}

/// Text in a style; see [`paint`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Painted<T> {
    style: Style,
    text: T,
}

impl<T: fmt::Display> fmt::Display for Painted<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !IN_GATE.get() {
            return fmt::Display::fmt(&self.text, f);
        }
        as_style(f, self.style.render())?;
        // The text's own width and alignment flags apply to the text, not to the style.
        fmt::Display::fmt(&self.text, f)?;
        as_style(f, self.style.render_reset())
    }
}

/// A piece of output written when the gate formats it, so the styles it paints reach the
/// terminal: what a printer builds to print later returns one of these, not a `String`.
pub(crate) fn lazy<F>(write: F) -> Lazy<F>
where
    F: Fn(&mut fmt::Formatter<'_>) -> fmt::Result,
{
    Lazy(write)
}

/// See [`lazy`].
pub(crate) struct Lazy<F>(F);

impl<F> fmt::Display for Lazy<F>
where
    F: Fn(&mut fmt::Formatter<'_>) -> fmt::Result,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        (self.0)(f)
    }
}

/// Writes a rendered style through the gate as it is.
fn as_style(f: &mut fmt::Formatter<'_>, style: impl fmt::Display) -> fmt::Result {
    let before = WRITING_STYLE.replace(true);
    let written = write!(f, "{style}");
    WRITING_STYLE.set(before);
    written
}

/// `text` formatted through the gate: every unsafe character escaped, [`Painted`] styles
/// kept. Fails only when a `Display` implementation fails.
pub(super) fn format(text: &dyn fmt::Display) -> Result<String, fmt::Error> {
    let mut gate = Gate { out: String::new() };
    let outer = IN_GATE.replace(true);
    // A style is only ever open inside `as_style`: a gate starts escaping.
    let style = WRITING_STYLE.replace(false);
    let written = write!(gate, "{text}");
    WRITING_STYLE.set(style);
    IN_GATE.set(outer);
    written.map(|()| gate.out)
}

/// The writer under the gate's formatter.
struct Gate {
    out: String,
}

impl fmt::Write for Gate {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if WRITING_STYLE.get() {
            self.out.push_str(s);
            Ok(())
        } else {
            write_escaped(&mut self.out, s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{format, paint};
    use anstyle::{AnsiColor, Style};
    use mesh_core::text::is_unsafe;
    use proptest::prelude::*;

    const NAME: Style = AnsiColor::Cyan.on_default().bold();
    const DIM: Style = Style::new().dimmed();
    const BAD: Style = AnsiColor::Red.on_default().bold();

    /// The gate's output with the styles it let through removed.
    fn without_styles(shown: &str) -> String {
        let mut out = shown.to_owned();
        for style in [NAME, DIM, BAD] {
            out = out.replace(&style.render().to_string(), "");
            out = out.replace(&style.render_reset().to_string(), "");
        }
        out
    }

    #[test]
    fn styles_pass_and_text_is_escaped() {
        let shown = format(&format_args!(
            "{} {} {}",
            paint(NAME, "q\u{1b}]52;c;aGk=\u{7}"),
            paint(DIM, format!("({})", "a\r\nb")),
            "\u{9b}2J\u{202e}"
        ))
        .unwrap();
        assert_eq!(
            shown,
            format!(
                "{}q\\u{{1b}}]52;c;aGk=\\u{{7}}{} {}(a\\r\\nb){} \\u{{9b}}2J\\u{{202e}}",
                NAME.render(),
                NAME.render_reset(),
                DIM.render(),
                DIM.render_reset()
            )
        );
        // Nested, padded.
        let shown = format(&format_args!("{:<6}|", paint(BAD, paint(NAME, "x\u{85}")))).unwrap();
        assert_eq!(
            without_styles(&shown),
            "x\\u{85}    |",
            "the width applies to the text: {shown:?}"
        );
    }

    #[test]
    fn a_painted_value_outside_the_gate_is_plain_text() {
        // Formatted into a String before the gate: no style, and the gate still escapes it.
        let early = format!("{}", paint(NAME, "a\u{1b}[2J"));
        assert_eq!(early, "a\u{1b}[2J");
        assert_eq!(format(&early).unwrap(), "a\\u{1b}[2J");
    }

    proptest! {
        /// Whatever the text, painted or not, nothing unsafe leaves the gate but the styles.
        #[test]
        fn nothing_unsafe_leaves_the_gate(text in any::<String>(), other in any::<String>()) {
            let shown = format(&format_args!("{} {text} {}", paint(NAME, &text), paint(DIM, paint(BAD, &other)))).unwrap();
            let plain = without_styles(&shown);
            prop_assert!(!plain.chars().any(is_unsafe), "{shown:?}");
            let escaped = mesh_core::text::escape(&text);
            prop_assert!(plain.starts_with(escaped.as_ref()));
        }
    }
}
