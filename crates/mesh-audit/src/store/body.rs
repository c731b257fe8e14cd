//! Body search: the text an operator typed, as a literal phrase of each backend's full-text
//! query language (decision 0030). Whatever the text, the query it becomes is valid: SQLite's
//! FTS5 gets one double-quoted string (its quotes doubled), PostgreSQL's
//! `phraseto_tsquery` takes plain text and has no syntax at all.

use crate::error::Error;

/// The most characters a body search holds: a phrase of more words than this would only
/// cost the database (a tsquery's phrase is a nested tree, one level per word).
pub const MAX_BODY_SEARCH: usize = 1_000;

/// How each backend matches a phrase against an event's body, as SQL around one bound
/// value, and what that value is.
#[derive(Debug)]
pub(crate) struct BodyMatch {
    /// ` AND …` before the bound phrase.
    pub(crate) before: &'static str,
    /// What closes it.
    pub(crate) after: &'static str,
    /// The bound value for the typed text.
    pub(crate) phrase: fn(&str) -> String,
}

pub(crate) const SQLITE: BodyMatch = BodyMatch {
    before: " AND rowid IN (SELECT rowid FROM events_body WHERE events_body MATCH ",
    after: ")",
    phrase: fts5_phrase,
};

/// The index's expression (migration 7), which the query must repeat for the index to serve.
pub(crate) const POSTGRES: BodyMatch = BodyMatch {
    before: " AND to_tsvector('simple', left(body::text, 100000)) @@ phraseto_tsquery('simple', ",
    after: "::text)",
    phrase: plain_text,
};

/// The text checked: at most [`MAX_BODY_SEARCH`] characters.
pub(crate) fn checked(text: &str) -> Result<&str, Error> {
    if text.chars().count() > MAX_BODY_SEARCH {
        return Err(Error::options(format!(
            "a body search of more than {MAX_BODY_SEARCH} characters"
        )));
    }
    Ok(text)
}

/// An FTS5 string: inside double quotes every character is literal but `"`, written twice.
/// The tokenizer splits it into the phrase's words. A NUL, which SQLite's text functions
/// take for the end, is a space (the tokenizer separates words at both).
fn fts5_phrase(text: &str) -> String {
    let mut quoted = String::with_capacity(text.len() + 2);
    quoted.push('"');
    for c in text.chars() {
        match c {
            '"' => quoted.push_str("\"\""),
            '\0' => quoted.push(' '),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// Plain text for `phraseto_tsquery`, which has no syntax; PostgreSQL's text holds no NUL, so
/// a NUL is a space (its parser separates words at both).
fn plain_text(text: &str) -> String {
    text.replace('\0', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_doubled_and_nul_is_a_space() {
        assert_eq!(fts5_phrase(r#"a "b" c"#), r#""a ""b"" c""#);
        assert_eq!(fts5_phrase("x\0y"), "\"x y\"");
        assert_eq!(fts5_phrase(""), "\"\"");
        assert_eq!(plain_text("x\0y"), "x y");
    }

    #[test]
    fn long_texts_are_refused() {
        assert!(checked(&"é".repeat(MAX_BODY_SEARCH)).is_ok());
        assert!(checked(&"é".repeat(MAX_BODY_SEARCH + 1)).is_err());
    }
}
