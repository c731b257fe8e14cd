//! JSON output under the same rule as text: serde_json escapes C0 control characters only, so
//! a string from the wire could still carry an 8-bit CSI (U+009B), a bidi override or a line
//! separator to whoever reads `--json` output in a terminal. [`Escaping`] wraps serde_json's
//! formatter and writes every character `mesh_core::text::is_unsafe` names as a `\uXXXX`
//! escape (a surrogate pair beyond U+FFFF): still JSON, and it reads back as the same string.

use std::io;

use mesh_core::text::is_unsafe;
use serde::Serialize;
use serde_json::ser::{CompactFormatter, Formatter, PrettyFormatter};

/// `value` as one line of JSON (no newline), every unsafe character escaped.
pub(crate) fn compact<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    write(value, CompactFormatter)
}

/// `value` as indented JSON (no final newline), every unsafe character escaped.
pub(crate) fn pretty<T: Serialize + ?Sized>(value: &T) -> serde_json::Result<Vec<u8>> {
    write(value, PrettyFormatter::new())
}

fn write<T: Serialize + ?Sized, F: Formatter>(
    value: &T,
    formatter: F,
) -> serde_json::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(128);
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, Escaping(formatter));
    value.serialize(&mut serializer)?;
    Ok(out)
}

/// A serde_json formatter that escapes unsafe characters in strings (keys included) and
/// otherwise lays the document out as the formatter it wraps does.
struct Escaping<F>(F);

impl<F: Formatter> Formatter for Escaping<F> {
    /// serde_json hands over the runs of a string between the characters it escapes itself
    /// (quote, backslash, C0): the rest of the unsafe ones are escaped here.
    fn write_string_fragment<W>(&mut self, writer: &mut W, fragment: &str) -> io::Result<()>
    where
        W: ?Sized + io::Write,
    {
        let mut start = 0;
        for (at, c) in fragment.char_indices() {
            if !is_unsafe(c) {
                continue;
            }
            writer.write_all(&fragment.as_bytes()[start..at])?;
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                write!(writer, "\\u{unit:04x}")?;
            }
            start = at + c.len_utf8();
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }

    // The layout is the wrapped formatter's.

    fn begin_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_array(writer)
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array(writer)
    }

    fn begin_array_value<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_array_value(writer, first)
    }

    fn end_array_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_array_value(writer)
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object(writer)
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object(writer)
    }

    fn begin_object_key<W: ?Sized + io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> io::Result<()> {
        self.0.begin_object_key(writer, first)
    }

    fn end_object_key<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object_key(writer)
    }

    fn begin_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.begin_object_value(writer)
    }

    fn end_object_value<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.0.end_object_value(writer)
    }
}

#[cfg(test)]
mod tests {
    use super::{compact, pretty};
    use mesh_core::text::is_unsafe;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    #[test]
    fn c1_bidi_and_separators_become_u_escapes() {
        let value =
            json!({"q\u{9b}": "a\u{9b}2J\u{202e}b\u{2028}\u{7f}\u{1b}]52;c;x\u{7}\u{e0041}"});
        let text = String::from_utf8(compact(&value).unwrap()).unwrap();
        assert_eq!(
            text,
            r#"{"q\u009b":"a\u009b2J\u202eb\u2028\u007f\u001b]52;c;x\u0007\udb40\udc41"}"#
        );
        let back: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(back, value);
        // The layout is the wrapped formatter's.
        let value = json!({"a": [1, "é東"], "b": null});
        assert_eq!(
            pretty(&value).unwrap(),
            serde_json::to_vec_pretty(&value).unwrap()
        );
        assert_eq!(
            compact(&value).unwrap(),
            serde_json::to_vec(&value).unwrap()
        );
    }

    proptest! {
        /// Whatever the strings, the JSON holds no unsafe character and reads back the same.
        #[test]
        fn json_holds_nothing_unsafe_and_reads_back(key in any::<String>(), text in any::<String>()) {
            let value = json!({ key.clone(): [text.clone(), {"n": 1}] });
            for bytes in [compact(&value).unwrap(), pretty(&value).unwrap()] {
                let shown = String::from_utf8(bytes).unwrap();
                prop_assert!(
                    !shown.chars().any(|c| is_unsafe(c) && c != '\n'),
                    "{shown:?}"
                );
                let back: Value = serde_json::from_str(&shown).unwrap();
                prop_assert_eq!(&back, &value);
            }
            let shown = String::from_utf8(compact(&value).unwrap()).unwrap();
            prop_assert!(!shown.chars().any(is_unsafe), "{shown:?}");
        }
    }
}
