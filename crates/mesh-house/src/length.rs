//! Long files, and the reason a long file gives for being one piece.

use std::path::{Path, PathBuf};

/// The most lines a source file may have without saying why it is one piece.
pub const MAX_LINES: usize = 1_000;

/// The fewest characters a reason may have (a few words, not a placeholder).
pub const MIN_REASON_CHARS: usize = 40;

/// The marker that opens a reason, in the file's leading `//!` block.
const MARKER: &str = "One piece:";

/// A file over [`MAX_LINES`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LongFile {
    /// Its path.
    pub path: PathBuf,
    /// Its line count.
    pub lines: usize,
    /// Why it is one piece, when its leading `//!` block says so.
    pub reason: Option<String>,
}

/// The files over [`MAX_LINES`] among `files`.
pub fn long_files<'a>(files: impl IntoIterator<Item = (&'a Path, &'a str)>) -> Vec<LongFile> {
    files
        .into_iter()
        .filter_map(|(path, text)| {
            let lines = text.lines().count();
            (lines > MAX_LINES).then(|| LongFile {
                path: path.to_path_buf(),
                lines,
                reason: reason(text),
            })
        })
        .collect()
}

/// The reason in the leading `//!` block: the text after `//! One piece:` up to the end of
/// that paragraph, if it has at least [`MIN_REASON_CHARS`] characters.
fn reason(text: &str) -> Option<String> {
    let block = text
        .lines()
        .map(str::trim)
        .take_while(|line| line.starts_with("//!") || line.is_empty())
        .filter_map(|line| line.strip_prefix("//!"))
        .map(str::trim);
    let mut reason: Option<String> = None;
    for line in block {
        match &mut reason {
            None => {
                if let Some(rest) = line.strip_prefix(MARKER) {
                    reason = Some(rest.trim().to_owned());
                }
            }
            Some(_) if line.is_empty() => break,
            Some(text) => {
                text.push(' ');
                text.push_str(line);
            }
        }
    }
    reason.filter(|r| r.chars().count() >= MIN_REASON_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(head: &str, lines: usize) -> String {
        let mut text = head.to_owned();
        for i in 0..lines {
            text.push_str(&format!("fn f{i}() {{}}\n"));
        }
        text
    }

    #[test]
    fn a_long_file_without_a_reason_is_found() {
        let text = file("//! A module.\n", MAX_LINES);
        let found = long_files([(Path::new("a.rs"), text.as_str())]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].lines, MAX_LINES + 1);
        assert_eq!(found[0].reason, None);
    }

    #[test]
    fn a_file_at_the_limit_is_not_long() {
        let text = file("", MAX_LINES);
        assert!(long_files([(Path::new("a.rs"), text.as_str())]).is_empty());
    }

    #[test]
    fn a_reason_is_read_from_the_leading_block_across_lines() {
        let text = file(
            "//! A module.\n//!\n//! One piece: the state machine's transitions read\n//! best side by side.\n//!\n//! More.\n",
            MAX_LINES,
        );
        let found = long_files([(Path::new("a.rs"), text.as_str())]);
        assert_eq!(
            found[0].reason.as_deref(),
            Some("the state machine's transitions read best side by side.")
        );
    }

    #[test]
    fn a_short_or_late_reason_does_not_count() {
        let short = file("//! One piece: because.\n", MAX_LINES);
        let late = file(
            "//! A module.\nuse x;\n//! One piece: the state machine's transitions read best side by side.\n",
            MAX_LINES,
        );
        for text in [short, late] {
            let found = long_files([(Path::new("a.rs"), text.as_str())]);
            assert_eq!(found[0].reason, None);
        }
    }
}
