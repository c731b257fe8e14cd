//! Rust source as the few tokens the module graph needs: names, `::`, braces, commas, `;`,
//! `*`, `#`, `[`, `=` and string literals' contents. Whitespace, comments (nested block
//! comments too), character literals and lifetimes' quotes leave nothing; every other character is [`Token::Other`].

/// One token of a source text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Token {
    /// An identifier or keyword (`crate`, `mod`, `foo`, `r#type` as `type`).
    Name(String),
    /// `::`
    PathSep,
    /// `{`
    Open,
    /// `}`
    Close,
    /// `,`
    Comma,
    /// `;`
    Semi,
    /// `*`
    Star,
    /// `#`
    Pound,
    /// `[`
    Bracket,
    /// `=`
    Eq,
    /// A string literal's text, unescaped only as far as `#[path]` needs (none).
    Str(String),
    /// Anything else (one per character).
    Other,
}

/// The tokens of `text`. Never panics, whatever the text: an unterminated comment or
/// literal runs to the end.
pub(crate) fn tokens(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if matches!(c, 'r' | 'b' | 'c') {
            if let Some((end, text)) = raw_or_prefixed_string(&chars, i) {
                out.push(Token::Str(text));
                i = end;
                continue;
            }
        }
        match c {
            '/' if next == Some('/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '/' if next == Some('*') => i = skip_block_comment(&chars, i),
            '"' => {
                let (end, s) = string(&chars, i + 1, 0);
                out.push(Token::Str(s));
                i = end;
            }
            '\'' => i = skip_char_or_lifetime(&chars, i),
            c if c.is_whitespace() => i += 1,
            c if c.is_alphabetic() || c == '_' => {
                let start = i;
                while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                    i += 1;
                }
                let name: String = chars[start..i].iter().collect();
                // `r#type` is the name `type`.
                if name == "r" && chars.get(i) == Some(&'#') {
                    i += 1;
                    continue;
                }
                out.push(Token::Name(name));
            }
            ':' if next == Some(':') => {
                out.push(Token::PathSep);
                i += 2;
            }
            _ => {
                out.push(match c {
                    '{' => Token::Open,
                    '}' => Token::Close,
                    ',' => Token::Comma,
                    ';' => Token::Semi,
                    '*' => Token::Star,
                    '#' => Token::Pound,
                    '[' => Token::Bracket,
                    '=' => Token::Eq,
                    _ => Token::Other,
                });
                i += 1;
            }
        }
    }
    out
}

/// The index after the block comment opening at `start` (nested comments count).
fn skip_block_comment(chars: &[char], start: usize) -> usize {
    let mut depth = 0usize;
    let mut i = start;
    while i < chars.len() {
        match (chars[i], chars.get(i + 1)) {
            ('/', Some('*')) => {
                depth += 1;
                i += 2;
            }
            ('*', Some('/')) => {
                depth = depth.saturating_sub(1);
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    i
}

/// A string's text from `start` (just after the opening quote) to its closing quote
/// followed by `hashes` `#`s; escapes are honoured only when `hashes` is 0 (a plain
/// string). Returns the index after the end.
fn string(chars: &[char], start: usize, hashes: usize) -> (usize, String) {
    let mut i = start;
    let mut text = String::new();
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' && hashes == 0 {
            if let Some(&escaped) = chars.get(i + 1) {
                text.push(escaped);
            }
            i += 2;
            continue;
        }
        if c == '"' && (0..hashes).all(|k| chars.get(i + 1 + k) == Some(&'#')) {
            return (i + 1 + hashes, text);
        }
        text.push(c);
        i += 1;
    }
    (chars.len(), text)
}

/// A raw (`r"…"`, `r#"…"#`) or prefixed (`b"…"`, `br"…"`, `c"…"`) string starting at
/// `start`, if one does: the index after it and its text. `None` when the letter starts a
/// plain name (`r#type` is a raw identifier, not a string).
fn raw_or_prefixed_string(chars: &[char], start: usize) -> Option<(usize, String)> {
    // No string begins inside a name: `bar"` is not a byte string.
    if start > 0 && (chars[start - 1].is_alphanumeric() || chars[start - 1] == '_') {
        return None;
    }
    let mut i = start;
    if matches!(chars.get(i), Some('b' | 'c')) {
        i += 1;
    }
    let raw = chars.get(i) == Some(&'r');
    if raw {
        i += 1;
    }
    let mut hashes = 0;
    while raw && chars.get(i) == Some(&'#') {
        hashes += 1;
        i += 1;
    }
    if chars.get(i) != Some(&'"') || i == start {
        return None;
    }
    Some(string(chars, i + 1, if raw { hashes } else { 0 }))
}

/// The index after a character literal (`'a'`, `'\n'`, `'\u{1F600}'`) or a lifetime's
/// quote (`'a` leaves the name `a` to be read as a name).
fn skip_char_or_lifetime(chars: &[char], start: usize) -> usize {
    match chars.get(start + 1) {
        Some('\\') => {
            let mut i = start + 2;
            while i < chars.len() && chars[i] != '\'' && chars[i] != '\n' {
                i += 1;
            }
            i + 1
        }
        Some(_) if chars.get(start + 2) == Some(&'\'') => start + 3,
        _ => start + 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(text: &str) -> Vec<String> {
        tokens(text)
            .into_iter()
            .filter_map(|t| match t {
                Token::Name(n) => Some(n),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn comments_strings_and_chars_leave_no_names() {
        let text = r##"
            a // crate::b
            /* crate::c /* nested */ crate::d */ e
            "crate::f \" g" r#"crate::h "# b"i" 'j' '\'' 'k: loop {}
        "##;
        assert_eq!(names(text), ["a", "e", "k", "loop"]);
    }

    #[test]
    fn raw_identifiers_are_their_names() {
        assert_eq!(names("r#type::x"), ["type", "x"]);
    }

    #[test]
    fn unterminated_input_ends_without_panicking() {
        for text in ["/* open", "\"open", "r#\"open", "'", "'\\", "a::", "b\"x"] {
            let _ = tokens(text);
        }
    }
}
