//! Topic patterns with RabbitMQ's topic-exchange semantics.
//!
//! `*` matches exactly one word, `#` matches zero or more words, words are separated by `.`.
//! [`topic_matches`] follows the broker to the letter on any text (also keys mesh itself would
//! refuse, such as empty words), so the in-memory transport and the audit store route exactly
//! as RabbitMQ does; [`TopicPattern`] additionally refuses patterns that are surely mistakes.

use std::fmt;
use std::str::FromStr;

use crate::key::{KeyError, MAX_KEY_LEN};

/// The word of `text` that starts at byte `at`, and where the next one starts; `None` past
/// the last word. Words are split like RabbitMQ does: the empty text has no words; otherwise
/// every `.` separates two words, which may be empty.
fn word_at(text: &str, at: usize) -> Option<(&str, usize)> {
    if text.is_empty() {
        return None;
    }
    let rest = text.get(at..)?;
    Some(match rest.find('.') {
        Some(dot) => (&rest[..dot], at + dot + 1),
        None => (rest, text.len() + 1),
    })
}

/// Whether routing key `key` matches binding pattern `pattern` on a RabbitMQ topic exchange.
///
/// Word by word, without allocating (it runs for every delivery and handler): on a mismatch
/// the last `#` seen takes one more key word and matching resumes after it, which is enough
/// because a `#` can absorb whatever an earlier one would have.
pub fn topic_matches(pattern: &str, key: &str) -> bool {
    let (mut p, mut k) = (0, 0);
    // After the last `#`: where the pattern resumes, and the key word it resumes at.
    let mut resume: Option<(usize, usize)> = None;
    loop {
        match (word_at(pattern, p), word_at(key, k)) {
            (None, None) => return true,
            (Some(("#", next)), _) => {
                resume = Some((next, k));
                p = next;
                continue;
            }
            (Some((word, p_next)), Some((key_word, k_next))) if word == "*" || word == key_word => {
                p = p_next;
                k = k_next;
                continue;
            }
            _ => {}
        }
        let Some((after_hash, from)) = resume else {
            return false;
        };
        let Some((_, taken)) = word_at(key, from) else {
            return false;
        };
        resume = Some((after_hash, taken));
        p = after_hash;
        k = taken;
    }
}

/// A binding pattern a subscription asks for, such as `module.umami.#` or `node.*.joined`.
///
/// Beyond what the broker accepts, it refuses: an empty pattern, empty words, a wildcard
/// glued to other characters (`site*`, which RabbitMQ would take literally), control
/// characters and more than 255 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPattern(String);

impl TopicPattern {
    /// Validates a pattern.
    pub fn parse(text: &str) -> Result<TopicPattern, KeyError> {
        if text.is_empty() {
            return Err(KeyError::Empty);
        }
        if text.len() > MAX_KEY_LEN {
            return Err(KeyError::TooLong {
                len: text.len(),
                max: MAX_KEY_LEN,
            });
        }
        if let Some(character) = text.chars().find(|c| c.is_control()) {
            return Err(KeyError::ControlCharacter { character });
        }
        for (position, word) in text.split('.').enumerate() {
            if word.is_empty() {
                return Err(KeyError::EmptyWord { position });
            }
            if word.len() > 1 && word.contains(['*', '#']) {
                return Err(KeyError::PartialWildcard {
                    word: word.to_owned(),
                });
            }
        }
        Ok(TopicPattern(text.to_owned()))
    }

    /// The pattern that matches every key.
    pub fn all() -> TopicPattern {
        TopicPattern("#".to_owned())
    }

    /// The pattern as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `key` matches this pattern, as RabbitMQ's topic exchange matches: `*` is
    /// exactly one word, `#` zero or more.
    ///
    /// ```
    /// use mesh_core::TopicPattern;
    ///
    /// let one = TopicPattern::parse("module.*.paid")?;
    /// assert!(one.matches("module.billing.paid"));
    /// assert!(!one.matches("module.billing.invoice.paid"));
    ///
    /// let any = TopicPattern::parse("module.billing.#")?;
    /// assert!(any.matches("module.billing"));
    /// assert!(any.matches("module.billing.invoice.paid"));
    /// # Ok::<(), mesh_core::KeyError>(())
    /// ```
    pub fn matches(&self, key: &str) -> bool {
        topic_matches(&self.0, key)
    }
}

impl fmt::Display for TopicPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for TopicPattern {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TopicPattern::parse(s)
    }
}

impl From<&crate::key::RoutingKey> for TopicPattern {
    /// A key is the pattern that matches exactly itself.
    fn from(key: &crate::key::RoutingKey) -> Self {
        TopicPattern(key.as_str().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The matcher as first written, kept as the reference: dynamic programming over
    /// (pattern words, key words).
    fn reference(pattern: &str, key: &str) -> bool {
        let split = |text: &str| -> Vec<String> {
            if text.is_empty() {
                Vec::new()
            } else {
                text.split('.').map(str::to_owned).collect()
            }
        };
        let (pattern, key) = (split(pattern), split(key));
        let mut reach = vec![false; key.len() + 1];
        reach[0] = true;
        for word in &pattern {
            let mut next = vec![false; key.len() + 1];
            match word.as_str() {
                "#" => {
                    let mut any = false;
                    for j in 0..=key.len() {
                        any |= reach[j];
                        next[j] = any;
                    }
                }
                "*" => next[1..].copy_from_slice(&reach[..key.len()]),
                literal => {
                    for j in 1..=key.len() {
                        next[j] = reach[j - 1] && key[j - 1] == literal;
                    }
                }
            }
            reach = next;
        }
        reach[key.len()]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(5_000))]

        /// On any text (empty words included), the matcher agrees with the reference.
        #[test]
        fn the_matcher_agrees_with_the_reference(
            pattern in "((#|\\*|a|b|)(\\.(#|\\*|a|b|)){0,7})?",
            key in "((a|b|c|)(\\.(a|b|c|)){0,7})?",
        ) {
            prop_assert_eq!(topic_matches(&pattern, &key), reference(&pattern, &key));
        }
    }

    /// (pattern, key, matches) — the broker's behaviour, including edge cases.
    const CASES: &[(&str, &str, bool)] = &[
        // literal
        ("a.b.c", "a.b.c", true),
        ("a.b.c", "a.b", false),
        ("a.b", "a.b.c", false),
        ("a.b.c", "a.b.d", false),
        // `*` is exactly one word
        ("*", "a", true),
        ("*", "a.b", false),
        ("*", "", false),
        ("*.*", "a.b", true),
        ("*.*", "a", false),
        ("*.*", "a.b.c", false),
        ("a.*", "a.b", true),
        ("a.*", "a", false),
        ("a.*", "a.b.c", false),
        ("*.b.*", "a.b.c", true),
        ("*.b.*", "a.x.c", false),
        ("node.*.joined", "node.anchor.joined", true),
        ("node.*.joined", "node.anchor.left", false),
        // `#` is zero or more words
        ("#", "a", true),
        ("#", "a.b.c.d", true),
        ("#", "", true),
        ("a.#", "a", true),
        ("a.#", "a.b", true),
        ("a.#", "a.b.c", true),
        ("a.#", "b.a", false),
        ("#.c", "c", true),
        ("#.c", "a.b.c", true),
        ("#.c", "a.b.c.d", false),
        ("a.#.b", "a.b", true),
        ("a.#.b", "a.x.b", true),
        ("a.#.b", "a.x.y.b", true),
        ("a.#.b", "a.x.y", false),
        ("a.#.b", "a.b.b", true),
        ("#.#", "", true),
        ("#.#", "a", true),
        ("#.#", "a.b.c", true),
        ("#.*", "", false),
        ("#.*", "a", true),
        ("*.#", "a", true),
        ("*.#", "", false),
        ("#.*.#", "a.b", true),
        ("a.*.#", "a", false),
        ("a.*.#", "a.b", true),
        ("a.*.#", "a.b.c.d", true),
        ("module.umami.#", "module.umami.site.created", true),
        ("module.umami.#", "module.umamix.site", false),
        ("a.#.#.b", "a.b", true),
        // empty words, as the broker treats them
        ("a..b", "a..b", true),
        ("a.*.b", "a..b", true),
        ("a.#", "a.", true),
        ("*", ".", false),
        ("*.*", ".", true),
        ("", "", true),
        ("", "a", false),
        ("#", ".", true),
        // wildcards glued to text are literal words on the broker
        ("a*", "a*", true),
        ("a*", "ab", false),
    ];

    #[test]
    fn matcher_follows_the_broker() {
        assert!(CASES.len() >= 30);
        for (pattern, key, expected) in CASES {
            assert_eq!(
                topic_matches(pattern, key),
                *expected,
                "pattern {pattern:?} against key {key:?}"
            );
        }
    }

    #[test]
    fn patterns_refuse_mistakes() {
        assert!(TopicPattern::parse("#").is_ok());
        assert!(TopicPattern::parse("node.*.joined").is_ok());
        assert!(TopicPattern::parse("a.#.b").is_ok());
        assert_eq!(TopicPattern::parse(""), Err(KeyError::Empty));
        assert_eq!(
            TopicPattern::parse("a..b"),
            Err(KeyError::EmptyWord { position: 1 })
        );
        assert_eq!(
            TopicPattern::parse("site*"),
            Err(KeyError::PartialWildcard {
                word: "site*".into()
            })
        );
        assert_eq!(
            TopicPattern::parse(&"a".repeat(256)),
            Err(KeyError::TooLong { len: 256, max: 255 })
        );
    }
}
