//! Routing keys, event names and tool keys: the names an event or a call travels under.
//!
//! A routing key is `<origin>.<name>.<event…>` (the wire contract, `docs/CONTRACT.md`).
//! [`RoutingKey`] can only hold a key that satisfies every rule of the contract, so code that
//! holds one never re-validates it.

use std::fmt;
use std::str::FromStr;

/// The longest routing key AMQP carries (a short string).
pub const MAX_KEY_LEN: usize = 255;

/// The reserved first word of every routing key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Origin {
    /// `module.<module>.<event…>`: events a module emits.
    Module,
    /// `mesh.<context>.<event…>`: events of the runtime's own contexts.
    Mesh,
    /// `node.<node>.<event…>`: events about a node.
    Node,
}

impl Origin {
    /// The word that starts a key of this origin.
    pub const fn as_str(self) -> &'static str {
        match self {
            Origin::Module => "module",
            Origin::Mesh => "mesh",
            Origin::Node => "node",
        }
    }

    fn parse(word: &str) -> Option<Origin> {
        match word {
            "module" => Some(Origin::Module),
            "mesh" => Some(Origin::Mesh),
            "node" => Some(Origin::Node),
            _ => None,
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What is wrong with a key, a name or a pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The text was empty.
    #[error("key is empty")]
    Empty,
    /// The text is longer than AMQP allows.
    #[error("key is {len} bytes long, more than the {max} allowed")]
    TooLong {
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Two dots in a row, or a dot at either end.
    #[error("key has an empty word at position {position}")]
    EmptyWord {
        /// The 0-based index of the empty word.
        position: usize,
    },
    /// A `*` or `#` in a key that is emitted or served.
    #[error("key contains the wildcard `{wildcard}`, which only patterns may use")]
    Wildcard {
        /// The wildcard found.
        wildcard: char,
    },
    /// The first word is not a reserved origin.
    #[error(
        "unknown origin `{}`, expected one of `module`, `mesh` or `node`",
        crate::text::Escaped(.origin)
    )]
    UnknownOrigin {
        /// The first word found.
        origin: String,
    },
    /// `<origin>.<name>.<event…>` needs three words at least.
    #[error("key has {words} word(s), at least 3 are needed (`<origin>.<name>.<event>`)")]
    TooFewWords {
        /// How many words it has.
        words: usize,
    },
    /// A word of a pattern mixes a wildcard with other characters (`a*`, `#b`).
    #[error(
        "pattern word `{}` mixes a wildcard with other characters",
        crate::text::Escaped(.word)
    )]
    PartialWildcard {
        /// The offending word.
        word: String,
    },
    /// A module, node or context name must be one word.
    #[error(
        "name `{}` contains a dot; module, node and context names are one word",
        crate::text::Escaped(.name)
    )]
    DottedName {
        /// The offending name.
        name: String,
    },
    /// A character AMQP short strings or our names do not allow (control characters).
    #[error("key contains the control character {character:?}")]
    ControlCharacter {
        /// The offending character.
        character: char,
    },
    /// A node name the contract keeps for queues of its own: `shared`
    /// (`shared.<module>.events`) or `scheduled` (`scheduled.<module>.events`), see
    /// [`naming::node_name`](crate::naming::node_name).
    #[error(
        "node name `{}` is reserved for {purpose}",
        crate::text::Escaped(.name)
    )]
    ReservedNode {
        /// The reserved name.
        name: String,
        /// What the contract keeps it for.
        purpose: &'static str,
    },
}

/// Checks the word structure shared by keys and names: non-empty, bounded, no empty words,
/// no control characters; returns how many words there are.
fn words(text: &str, max: usize) -> Result<usize, KeyError> {
    if text.is_empty() {
        return Err(KeyError::Empty);
    }
    if text.len() > max {
        return Err(KeyError::TooLong {
            len: text.len(),
            max,
        });
    }
    // Every control character outside ASCII (U+0080..=U+009F) starts with the byte 0xC2.
    let maybe_control = |b: &u8| b.is_ascii_control() || *b == 0xC2;
    if text.as_bytes().iter().any(maybe_control) {
        if let Some(character) = text.chars().find(|c| c.is_control()) {
            return Err(KeyError::ControlCharacter { character });
        }
    }
    // One pass over the bytes: `.` is ASCII, so it never occurs inside a wider character.
    let mut count = 1;
    let mut word_len = 0;
    for &b in text.as_bytes() {
        if b == b'.' {
            if word_len == 0 {
                return Err(KeyError::EmptyWord {
                    position: count - 1,
                });
            }
            count += 1;
            word_len = 0;
        } else {
            word_len += 1;
        }
    }
    if word_len == 0 {
        return Err(KeyError::EmptyWord {
            position: count - 1,
        });
    }
    Ok(count)
}

fn no_wildcards(text: &str) -> Result<(), KeyError> {
    // Both are ASCII, so a byte of either is never inside a wider character.
    match text.bytes().find(|b| *b == b'*' || *b == b'#') {
        Some(wildcard) => Err(KeyError::Wildcard {
            wildcard: char::from(wildcard),
        }),
        None => Ok(()),
    }
}

/// A valid routing key of an event: `<origin>.<name>.<event…>`.
///
/// Rules: the origin is `module`, `mesh` or `node`; at least three non-empty words separated
/// by dots; no `*` or `#`; no control characters; at most 255 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RoutingKey {
    text: String,
    origin: Origin,
    /// Byte offset where the event part (after `<origin>.<name>.`) starts.
    event_start: usize,
}

impl RoutingKey {
    /// Parses and validates a key.
    pub fn parse(text: &str) -> Result<RoutingKey, KeyError> {
        let (origin, event_start) = RoutingKey::check(text)?;
        Ok(RoutingKey {
            text: text.to_owned(),
            origin,
            event_start,
        })
    }

    /// The rules of a key; its origin and where its event part starts.
    fn check(text: &str) -> Result<(Origin, usize), KeyError> {
        let count = words(text, MAX_KEY_LEN)?;
        no_wildcards(text)?;
        let mut parts = text.splitn(3, '.');
        let first = parts.next().unwrap_or_default();
        let origin = Origin::parse(first).ok_or_else(|| KeyError::UnknownOrigin {
            origin: first.to_owned(),
        })?;
        if count < 3 {
            return Err(KeyError::TooFewWords { words: count });
        }
        let second = parts.next().unwrap_or_default();
        Ok((origin, first.len() + 1 + second.len() + 1))
    }

    /// Builds `<origin>.<name>.<event>` from its parts. Each part is valid already, so
    /// only the length of the whole is left to check.
    ///
    /// ```
    /// use mesh_core::{EventName, Name, Origin, RoutingKey};
    ///
    /// let key = RoutingKey::new(
    ///     Origin::Module,
    ///     &Name::parse("billing")?,
    ///     &EventName::parse("invoice.paid")?,
    /// )?;
    /// assert_eq!(key.as_str(), "module.billing.invoice.paid");
    /// assert_eq!(key, RoutingKey::parse("module.billing.invoice.paid")?);
    /// # Ok::<(), mesh_core::KeyError>(())
    /// ```
    pub fn new(origin: Origin, name: &Name, event: &EventName) -> Result<RoutingKey, KeyError> {
        let event_start = origin.as_str().len() + 1 + name.as_str().len() + 1;
        let len = event_start + event.as_str().len();
        if len > MAX_KEY_LEN {
            return Err(KeyError::TooLong {
                len,
                max: MAX_KEY_LEN,
            });
        }
        let mut text = String::with_capacity(len);
        text.push_str(origin.as_str());
        text.push('.');
        text.push_str(name.as_str());
        text.push('.');
        text.push_str(event.as_str());
        Ok(RoutingKey {
            text,
            origin,
            event_start,
        })
    }

    /// The whole key.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Its origin.
    pub fn origin(&self) -> Origin {
        self.origin
    }

    /// The second word: the module, context or node that owns the key.
    pub fn name(&self) -> &str {
        &self.text[self.origin.as_str().len() + 1..self.event_start - 1]
    }

    /// The event part after `<origin>.<name>.`.
    pub fn event(&self) -> &str {
        &self.text[self.event_start..]
    }
}

impl fmt::Display for RoutingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Validates a key given as an owned string, keeping its buffer.
impl TryFrom<String> for RoutingKey {
    type Error = KeyError;
    fn try_from(text: String) -> Result<Self, Self::Error> {
        let (origin, event_start) = RoutingKey::check(&text)?;
        Ok(RoutingKey {
            text,
            origin,
            event_start,
        })
    }
}

impl FromStr for RoutingKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RoutingKey::parse(s)
    }
}

impl AsRef<str> for RoutingKey {
    fn as_ref(&self) -> &str {
        &self.text
    }
}

/// A one-word name: of a module, a node or a runtime context.
///
/// Names become words of routing keys and queue names, so they may not contain `.`, `*`, `#`
/// or control characters, and are at most 64 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(String);

/// The longest module, node or context name.
pub const MAX_NAME_LEN: usize = 64;

impl Name {
    /// Validates a name.
    pub fn parse(text: &str) -> Result<Name, KeyError> {
        words(text, MAX_NAME_LEN)?;
        no_wildcards(text)?;
        if text.contains('.') {
            return Err(KeyError::DottedName {
                name: text.to_owned(),
            });
        }
        Ok(Name(text.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for Name {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Name::parse(s)
    }
}

/// The event part of a key, chosen by the emitter: `site.created` in
/// `module.umami.site.created`. One or more words, no wildcards.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventName(String);

impl EventName {
    /// Validates an event name.
    pub fn parse(text: &str) -> Result<EventName, KeyError> {
        words(text, MAX_KEY_LEN)?;
        no_wildcards(text)?;
        Ok(EventName(text.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EventName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for EventName {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        EventName::parse(s)
    }
}

/// The key of a tool served over request/reply, e.g. `umami.sites.create`.
///
/// Dotted words without wildcards; at most 249 bytes so that its serve queue
/// `serve.<key>` fits AMQP's 255-byte names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ToolKey(String);

/// The longest tool key (`serve.` plus the key is a queue name of at most 255 bytes).
pub const MAX_TOOL_KEY_LEN: usize = MAX_KEY_LEN - "serve.".len();

impl ToolKey {
    /// Validates a tool key.
    pub fn parse(text: &str) -> Result<ToolKey, KeyError> {
        words(text, MAX_TOOL_KEY_LEN)?;
        no_wildcards(text)?;
        Ok(ToolKey(text.to_owned()))
    }

    /// The key.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ToolKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for ToolKey {
    type Err = KeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ToolKey::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Built from its parts, a key is exactly the key its text parses to, or refused
        /// for its length, as the parse would refuse it.
        #[test]
        fn a_key_built_from_parts_is_the_key_its_text_parses_to(
            origin in prop_oneof![Just(Origin::Module), Just(Origin::Mesh), Just(Origin::Node)],
            name in "[a-z0-9é_-]{1,64}",
            event in "[a-zé0-9_-]{1,40}(\\.[a-z0-9-]{1,40}){0,6}",
        ) {
            let (Ok(name), Ok(event)) = (Name::parse(&name), EventName::parse(&event)) else {
                // A name over 64 bytes or an event over 255: not parts to build from.
                return Ok(());
            };
            let text = format!("{}.{}.{}", origin.as_str(), name, event);
            prop_assert_eq!(RoutingKey::new(origin, &name, &event), RoutingKey::parse(&text));
        }
    }

    #[test]
    fn valid_keys_parse_into_their_parts() {
        let key = RoutingKey::parse("module.umami.site.created").unwrap();
        assert_eq!(key.origin(), Origin::Module);
        assert_eq!(key.name(), "umami");
        assert_eq!(key.event(), "site.created");
        let key = RoutingKey::parse("node.anchor.joined").unwrap();
        assert_eq!(
            (key.origin(), key.name(), key.event()),
            (Origin::Node, "anchor", "joined")
        );
        let key = RoutingKey::parse("mesh.delivery.deployed").unwrap();
        assert_eq!(key.origin(), Origin::Mesh);
    }

    #[test]
    fn a_key_with_a_wildcard_is_refused() {
        assert_eq!(
            RoutingKey::parse("module.umami.*"),
            Err(KeyError::Wildcard { wildcard: '*' })
        );
        assert_eq!(
            RoutingKey::parse("module.#.created"),
            Err(KeyError::Wildcard { wildcard: '#' })
        );
    }

    #[test]
    fn a_key_over_255_bytes_is_refused() {
        let long = format!("module.umami.{}", "a".repeat(243));
        assert_eq!(long.len(), 256);
        assert_eq!(
            RoutingKey::parse(&long),
            Err(KeyError::TooLong { len: 256, max: 255 })
        );
        let just = format!("module.umami.{}", "a".repeat(242));
        assert!(RoutingKey::parse(&just).is_ok());
    }

    #[test]
    fn an_unknown_origin_is_refused() {
        assert_eq!(
            RoutingKey::parse("service.umami.created"),
            Err(KeyError::UnknownOrigin {
                origin: "service".into()
            })
        );
    }

    #[test]
    fn an_error_escapes_the_text_it_quotes() {
        let error = RoutingKey::parse("serv\u{202e}ice.umami.created").unwrap_err();
        assert_eq!(
            error.to_string(),
            "unknown origin `serv\\u{202e}ice`, expected one of `module`, `mesh` or `node`"
        );
    }

    #[test]
    fn a_key_with_too_few_words_is_refused() {
        assert_eq!(
            RoutingKey::parse("module.umami"),
            Err(KeyError::TooFewWords { words: 2 })
        );
        assert_eq!(
            RoutingKey::parse("node"),
            Err(KeyError::TooFewWords { words: 1 })
        );
    }

    #[test]
    fn empty_words_and_empty_keys_are_refused() {
        assert_eq!(RoutingKey::parse(""), Err(KeyError::Empty));
        assert_eq!(
            RoutingKey::parse("module..created"),
            Err(KeyError::EmptyWord { position: 1 })
        );
        assert_eq!(
            RoutingKey::parse("module.umami.created."),
            Err(KeyError::EmptyWord { position: 3 })
        );
        assert_eq!(
            RoutingKey::parse(".module.umami.created"),
            Err(KeyError::EmptyWord { position: 0 })
        );
    }

    #[test]
    fn control_characters_are_refused() {
        assert_eq!(
            RoutingKey::parse("module.umami.cre\nated"),
            Err(KeyError::ControlCharacter { character: '\n' })
        );
    }

    /// The rules of `words` as plainly written (the code scans bytes once instead).
    fn words_as_written(text: &str, max: usize) -> Result<usize, KeyError> {
        if text.is_empty() {
            return Err(KeyError::Empty);
        }
        if text.len() > max {
            return Err(KeyError::TooLong {
                len: text.len(),
                max,
            });
        }
        if let Some(character) = text.chars().find(|c| c.is_control()) {
            return Err(KeyError::ControlCharacter { character });
        }
        let words: Vec<&str> = text.split('.').collect();
        if let Some(position) = words.iter().position(|w| w.is_empty()) {
            return Err(KeyError::EmptyWord { position });
        }
        Ok(words.len())
    }

    #[test]
    fn words_are_counted_and_checked_as_the_rules_say() {
        let pieces = [
            "", ".", "a", "bc", "é", "\u{85}", "\u{9f}", "\u{a0}", "\u{7f}", "\t", "ü.", "..",
            "\u{2028}", "日本",
        ];
        let mut checked = 0;
        for first in pieces {
            for second in pieces {
                for third in pieces {
                    let text = format!("{first}{second}.{third}");
                    for max in [3, 255] {
                        assert_eq!(words(&text, max), words_as_written(&text, max), "{text:?}");
                        checked += 1;
                    }
                }
            }
        }
        assert_eq!(checked, 2 * pieces.len().pow(3));
    }

    #[test]
    fn an_owned_key_follows_the_same_rules_as_a_parsed_one() {
        for text in [
            "module.umami.site.created",
            "node.n1.up",
            "mesh.audit.x",
            "",
            "module",
            "module.umami",
            "module..x",
            "module.umami.",
            "thing.umami.x",
            "module.umami.*",
            "module.um\u{7}ami.x",
        ] {
            assert_eq!(
                RoutingKey::try_from(text.to_owned()),
                RoutingKey::parse(text),
                "{text:?}"
            );
        }
        let key = RoutingKey::try_from("module.umami.site.created".to_owned()).unwrap();
        assert_eq!(
            (key.origin(), key.name(), key.event()),
            (Origin::Module, "umami", "site.created")
        );
    }

    #[test]
    fn names_are_single_words() {
        assert!(Name::parse("umami").is_ok());
        assert_eq!(
            Name::parse("um.ami"),
            Err(KeyError::DottedName {
                name: "um.ami".into()
            })
        );
        assert_eq!(Name::parse("*"), Err(KeyError::Wildcard { wildcard: '*' }));
        assert_eq!(Name::parse(""), Err(KeyError::Empty));
    }

    #[test]
    fn keys_are_built_from_parts() {
        let key = RoutingKey::new(
            Origin::Module,
            &Name::parse("umami").unwrap(),
            &EventName::parse("site.created").unwrap(),
        )
        .unwrap();
        assert_eq!(key.as_str(), "module.umami.site.created");
    }

    #[test]
    fn tool_keys_fit_their_serve_queue() {
        assert!(ToolKey::parse("umami.sites.create").is_ok());
        assert!(ToolKey::parse(&"a".repeat(249)).is_ok());
        assert_eq!(
            ToolKey::parse(&"a".repeat(250)),
            Err(KeyError::TooLong { len: 250, max: 249 })
        );
        assert_eq!(
            ToolKey::parse("umami.#"),
            Err(KeyError::Wildcard { wildcard: '#' })
        );
    }
}
