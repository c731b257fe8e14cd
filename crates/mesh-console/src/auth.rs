//! Who may act: the operators' tokens, compared in constant time, and the origin a request
//! to act must come from.

use std::fmt;

use axum::http::{header, HeaderMap};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The tokens that may re-drive and purge, each with the name actions are logged under.
///
/// Only their SHA-256 digests are kept; a given token is hashed and compared with every one
/// in constant time, so neither its content nor its length shows in the time taken.
#[derive(Clone, Default)]
pub struct Tokens {
    digests: Vec<(String, [u8; 32])>,
}

impl fmt::Debug for Tokens {
    /// The names only: a token never appears in output.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.digests.iter().map(|(name, _)| name))
            .finish()
    }
}

/// A token file or variable that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenError(String);

impl fmt::Display for TokenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TokenError {}

/// The shortest token accepted.
pub const MIN_TOKEN_LEN: usize = 16;

fn digest(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

impl Tokens {
    /// No token: every action is refused.
    pub fn none() -> Tokens {
        Tokens::default()
    }

    /// One token, logged as `name`.
    pub fn single(name: &str, secret: &str) -> Result<Tokens, TokenError> {
        let mut tokens = Tokens::none();
        tokens.push(name, secret.trim(), 0)?;
        Ok(tokens)
    }

    /// A token file: one token a line, either `TOKEN` (logged as `operator`) or
    /// `NAME TOKEN` (logged as `NAME`); blank lines and lines starting with `#` are skipped.
    /// Errors name the line, never its content.
    pub fn parse_file(text: &str) -> Result<Tokens, TokenError> {
        let mut tokens = Tokens::none();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            match words.as_slice() {
                [secret] => tokens.push("operator", secret, n + 1)?,
                [name, secret] => tokens.push(name, secret, n + 1)?,
                _ => {
                    return Err(TokenError(format!(
                        "token file line {}: expected `TOKEN` or `NAME TOKEN`",
                        n + 1
                    )))
                }
            }
        }
        if tokens.is_empty() {
            return Err(TokenError("the token file holds no token".into()));
        }
        Ok(tokens)
    }

    fn push(&mut self, name: &str, secret: &str, line: usize) -> Result<(), TokenError> {
        let at = if line == 0 {
            String::new()
        } else {
            format!("line {line}: ")
        };
        if secret.len() < MIN_TOKEN_LEN {
            return Err(TokenError(format!(
                "{at}a token has at least {MIN_TOKEN_LEN} characters"
            )));
        }
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
        {
            return Err(TokenError(format!(
                "{at}a token's name is letters, digits, `-`, `_`, `.` or `@`"
            )));
        }
        self.digests.push((name.to_owned(), digest(secret)));
        Ok(())
    }

    /// Whether there is no token (every action refused).
    pub fn is_empty(&self) -> bool {
        self.digests.is_empty()
    }

    /// The name of the token `given` is, if any: every token is compared, in constant time.
    pub fn check(&self, given: &str) -> Option<&str> {
        let given = digest(given);
        let mut found = None;
        for (name, expected) in &self.digests {
            if bool::from(expected.ct_eq(&given)) && found.is_none() {
                found = Some(name.as_str());
            }
        }
        found
    }
}

/// The token a request carries: `Authorization: Bearer TOKEN`, else the form's `token`.
pub(crate) fn given_token<'a>(
    headers: &'a HeaderMap,
    form_token: Option<&'a str>,
) -> Option<&'a str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .or(form_token)
        .filter(|t| !t.is_empty())
}

/// Whether a request comes from one of `origins` (each `scheme://host[:port]`): its
/// `Origin` header, or, when it has none, its `Referer`. A request with neither is not.
pub(crate) fn same_origin(headers: &HeaderMap, origins: &[String]) -> bool {
    if let Some(origin) = headers.get(header::ORIGIN) {
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        return origins.iter().any(|o| o == origin);
    }
    if let Some(referer) = headers.get(header::REFERER) {
        let Ok(referer) = referer.to_str() else {
            return false;
        };
        return origins.iter().any(|o| {
            referer
                .strip_prefix(o.as_str())
                .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
        });
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_file_names_its_tokens_and_never_shows_them() {
        let tokens =
            Tokens::parse_file("# operators\nalice aaaaaaaaaaaaaaaaaaaa\n\nbbbbbbbbbbbbbbbbbbbb\n")
                .expect("valid");
        assert_eq!(tokens.check("aaaaaaaaaaaaaaaaaaaa"), Some("alice"));
        assert_eq!(tokens.check("bbbbbbbbbbbbbbbbbbbb"), Some("operator"));
        assert_eq!(tokens.check("aaaaaaaaaaaaaaaaaaab"), None);
        assert_eq!(tokens.check(""), None);
        assert!(!format!("{tokens:?}").contains("aaaa"));
        let short = Tokens::parse_file("alice short").expect_err("too short");
        assert!(!short.to_string().contains("short"), "{short}");
        assert!(Tokens::parse_file("a b c").is_err());
        assert!(Tokens::parse_file("# none\n").is_err());
    }

    #[test]
    fn only_the_consoles_own_origin_may_act() {
        let own = vec!["http://127.0.0.1:8642".to_owned()];
        let mut headers = HeaderMap::new();
        assert!(!same_origin(&headers, &own));
        headers.insert(
            header::REFERER,
            "http://127.0.0.1:8642/dead".parse().expect("v"),
        );
        assert!(same_origin(&headers, &own));
        headers.insert(
            header::REFERER,
            "http://127.0.0.1:86420/".parse().expect("v"),
        );
        assert!(!same_origin(&headers, &own));
        headers.insert(header::ORIGIN, "http://evil.example".parse().expect("v"));
        headers.insert(
            header::REFERER,
            "http://127.0.0.1:8642/dead".parse().expect("v"),
        );
        assert!(!same_origin(&headers, &own));
        headers.insert(header::ORIGIN, "http://127.0.0.1:8642".parse().expect("v"));
        assert!(same_origin(&headers, &own));
    }
}
