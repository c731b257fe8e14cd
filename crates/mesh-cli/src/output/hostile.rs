//! The hostile corpus every printer's unit test feeds it, and what its output must be: no
//! unsafe character in text but a line's end and the styles `paint` adds, none at all in
//! JSON, and the JSON reads back as the original text.

use mesh_core::text::{escape, is_unsafe};
use serde_json::Value;

use super::{BAD, DIM, GOOD, NAME, WARN};

/// Text a publisher could put in any field: each entry tries one way of forging output.
pub(crate) const CORPUS: &[&str] = &[
    // OSC 52: set the operator's clipboard.
    "\u{1b}]52;c;cm0gLXJmIH4K\u{7}",
    // Clear the screen, home the cursor, a colour of its own.
    "\u{1b}[2J\u{1b}[H\u{1b}[31m",
    // A forged next line, and a lone CR that rewrites this one.
    "ok\r\n2026-01-01T00:00:00Z INFO forged",
    "ok\rforged",
    // C1: NEL and the 8-bit CSI.
    "a\u{85}b\u{9b}2J",
    "del\u{7f} nul\u{0}",
    // Bidi override and isolate, zero width, line separator.
    "invoice\u{202e}fdp-exe\u{2066}x\u{2069}",
    "zero\u{200b}width\u{2028}sep",
];

/// The whole corpus as one value.
pub(crate) fn all() -> String {
    CORPUS.concat()
}

/// Asserts that text output holds nothing unsafe but line ends and styles, and shows each of
/// `values` escaped.
pub(crate) fn assert_text_safe(output: &str, values: &[&str]) {
    let mut plain = output.to_owned();
    for style in [NAME, DIM, GOOD, WARN, BAD] {
        plain = plain.replace(&style.render().to_string(), "");
        plain = plain.replace(&style.render_reset().to_string(), "");
    }
    let bad: Vec<char> = plain
        .chars()
        .filter(|&c| is_unsafe(c) && c != '\n')
        .collect();
    assert!(bad.is_empty(), "unsafe {bad:?} in {output:?}");
    for value in values {
        assert!(
            plain.contains(escape(value).as_ref()),
            "{:?} shown escaped in {output:?}",
            escape(value)
        );
    }
}

/// Asserts that JSON output (one document per line) holds no unsafe character, reads back,
/// and holds each of `values` as a string somewhere.
pub(crate) fn assert_json_safe(output: &str, values: &[&str]) {
    assert!(!output.is_empty(), "no JSON written");
    let bad: Vec<char> = output
        .chars()
        .filter(|&c| is_unsafe(c) && c != '\n')
        .collect();
    assert!(bad.is_empty(), "unsafe {bad:?} in {output:?}");
    let documents: Vec<Value> = output
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is JSON"))
        .collect();
    for value in values {
        assert!(
            documents.iter().any(|d| holds(d, value)),
            "{value:?} read back from {output:?}"
        );
    }
}

fn holds(document: &Value, text: &str) -> bool {
    match document {
        Value::String(s) => s == text,
        Value::Array(items) => items.iter().any(|v| holds(v, text)),
        Value::Object(map) => map.iter().any(|(k, v)| k == text || holds(v, text)),
        _ => false,
    }
}
