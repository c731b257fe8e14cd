//! Mapping what the broker and the client library report to
//! [`TransportError`] kinds.
//!
//! The broker explains a refusal only in the text of the `channel.close` or
//! `connection.close` it sends (`406 PRECONDITION_FAILED - inequivalent arg ...`); this module
//! reads those texts, so the kinds say what happened and the text stays in the source chain.

use std::fmt;

use mesh_core::{TransportError, TransportErrorKind};

/// AMQP reply codes mesh reacts to.
pub(crate) mod code {
    pub(crate) const ACCESS_REFUSED: u16 = 403;
    pub(crate) const NOT_FOUND: u16 = 404;
    pub(crate) const PRECONDITION_FAILED: u16 = 406;
    pub(crate) const NOT_ALLOWED: u16 = 530;
}

/// A `channel.close` or `connection.close` the broker sent: the cause kept in an error's
/// source chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct BrokerClose {
    pub(crate) code: u16,
    pub(crate) text: String,
}

impl fmt::Display for BrokerClose {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "broker closed with {}: {}", self.code, self.text)
    }
}

impl std::error::Error for BrokerClose {}

/// The error for a channel or connection the broker closed while doing `context`.
pub(crate) fn from_close(close: BrokerClose, context: &str) -> TransportError {
    let kind = match close.code {
        code::ACCESS_REFUSED => TransportErrorKind::Forbidden {
            refused: refused_text(&close.text),
        },
        code::NOT_ALLOWED => TransportErrorKind::AccessRefused,
        code::PRECONDITION_FAILED if is_user_id_refusal(&close.text) => {
            TransportErrorKind::Forbidden {
                refused: refused_text(&close.text),
            }
        }
        code::PRECONDITION_FAILED => match parse_inequivalent(&close.text) {
            Some(kind) => kind,
            None => TransportErrorKind::Protocol,
        },
        _ => TransportErrorKind::Protocol,
    };
    TransportError::new(kind, context).with_source(close)
}

/// The most bytes of the broker's words a [`TransportErrorKind::Forbidden`] keeps.
const MAX_REFUSED_TEXT: usize = 512;

/// What a refusal names, without the reply code's name: `ACCESS_REFUSED - write access to
/// …` → `write access to …`, escaped (it quotes names a client chose, a routing key) and cut
/// to [`MAX_REFUSED_TEXT`] bytes.
fn refused_text(text: &str) -> String {
    let words = text.split_once(" - ").map_or(text, |(name, rest)| {
        if name.bytes().all(|b| b.is_ascii_uppercase() || b == b'_') {
            rest
        } else {
            text
        }
    });
    mesh_core::codec::cut(&mesh_core::text::escape(words), MAX_REFUSED_TEXT)
}

/// `PRECONDITION_FAILED - user_id property set to 'x' but authenticated user was 'y'`.
fn is_user_id_refusal(text: &str) -> bool {
    text.contains("user_id property set to '")
}

/// The error for a client library failure while doing `context`, when the broker did not
/// say why: the channel or connection is gone.
pub(crate) fn from_client(err: amqprs::error::Error, context: &str) -> TransportError {
    let text = err.to_string();
    // A refused login surfaces as a connection-open error quoting the broker's close.
    let kind = if text.contains("ACCESS_REFUSED") || text.contains("NOT_ALLOWED") {
        TransportErrorKind::AccessRefused
    } else {
        TransportErrorKind::ConnectionLost
    };
    TransportError::new(kind, context).with_source(err)
}

/// Why the broker closed a publishing channel, as far as it concerns the messages on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PublishRefusal {
    /// `406 PRECONDITION_FAILED - message size N is larger than configured max size M`: the
    /// message of `size` body bytes must not be sent again.
    TooLarge { size: usize, max: usize },
    /// `404 NOT_FOUND - no exchange 'X' in vhost 'v'`, or `403 ACCESS_REFUSED - write access
    /// to exchange 'X' in vhost 'v' refused for user 'u'`: about the messages to `exchange`.
    Exchange { code: u16, exchange: String },
    /// `403 ACCESS_REFUSED - write access to topic 'K' in exchange 'X' in vhost 'v' refused
    /// for user 'u'`: about the messages to `exchange` under `key` (a topic permission).
    Topic { exchange: String, key: String },
    /// `406 PRECONDITION_FAILED - user_id property set to 'x' but authenticated user was 'y'`:
    /// about every message, since the publisher stamps the same `user-id` on each.
    UserId,
    /// Anything else: nothing to say about a particular message.
    Other,
}

/// Reads a publishing channel's close.
pub(crate) fn publish_refusal(close: &BrokerClose) -> PublishRefusal {
    if close.code == code::PRECONDITION_FAILED {
        if let Some((size, max)) = parse_too_large(&close.text) {
            return PublishRefusal::TooLarge { size, max };
        }
    }
    if close.code == code::PRECONDITION_FAILED && is_user_id_refusal(&close.text) {
        return PublishRefusal::UserId;
    }
    if close.code == code::ACCESS_REFUSED {
        if let Some((key, exchange)) = parse_topic(&close.text) {
            return PublishRefusal::Topic { exchange, key };
        }
    }
    if matches!(close.code, code::NOT_FOUND | code::ACCESS_REFUSED) {
        if let Some(exchange) = parse_exchange(&close.text) {
            return PublishRefusal::Exchange {
                code: close.code,
                exchange,
            };
        }
    }
    PublishRefusal::Other
}

/// `... message size 2097152 is larger than configured max size 1048576` (or `than max size`,
/// RabbitMQ's wording when the limit is its built-in maximum) → `(2097152, 1048576)`.
pub(crate) fn parse_too_large(text: &str) -> Option<(usize, usize)> {
    let rest = &text[text.find("message size ")? + "message size ".len()..];
    let (size, rest) = rest.split_once(' ')?;
    let rest = &rest[rest.find("max size ")? + "max size ".len()..];
    let max: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((size.parse().ok()?, max.parse().ok()?))
}

/// The exchange named in `... exchange 'X' in vhost 'v' ...`.
fn parse_exchange(text: &str) -> Option<String> {
    let rest = &text[text.find("exchange '")? + "exchange '".len()..];
    // The name may itself hold quotes, so cut at the vhost.
    let (exchange, _) = rest.split_once("' in vhost '")?;
    Some(exchange.to_owned())
}

/// The key and exchange named in `... access to topic 'K' in exchange 'X' in vhost 'v' ...`.
fn parse_topic(text: &str) -> Option<(String, String)> {
    let rest = &text[text.find("access to topic '")? + "access to topic '".len()..];
    let (key, rest) = rest.split_once("' in exchange '")?;
    let (exchange, _) = rest.split_once("' in vhost '")?;
    Some((key.to_owned(), exchange.to_owned()))
}

/// Whether a channel was closed for an ack or nack with a delivery tag it does not know: an
/// acker settled a delivery on a channel it did not come from.
pub(crate) fn is_unknown_delivery_tag(close: &BrokerClose) -> bool {
    close.code == code::PRECONDITION_FAILED && close.text.contains("unknown delivery tag")
}

/// Reads RabbitMQ's `inequivalent arg` refusal:
///
/// `PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'q' in vhost 'v':
/// received the value 'quorum' of type 'longstr' but current is none`
///
/// Values are given as `the value '<v>' of type '<t>'`, `'<v>'` or `none` (the argument is
/// absent), on either side.
pub(crate) fn parse_inequivalent(text: &str) -> Option<TransportErrorKind> {
    let rest = &text[text.find("inequivalent arg '")? + "inequivalent arg '".len()..];
    let (argument, rest) = rest.split_once("' for ")?;
    // `queue 'q' in vhost 'v': ...`; the name may itself hold quotes, so cut at the vhost.
    let (_kind, rest) = rest.split_once(" '")?;
    let (entity, rest) = rest.split_once("' in vhost '")?;
    let rest = &rest[rest.find("': received ")? + "': received ".len()..];
    let (ours, theirs) = rest.split_once(" but current is ")?;
    Some(TransportErrorKind::Incompatible {
        entity: entity.to_owned(),
        argument: argument.to_owned(),
        ours: quoted_value(ours),
        theirs: quoted_value(theirs),
    })
}

/// `the value 'quorum' of type 'longstr'` → `quorum`; `'true'` → `true`; `none` → `none`.
fn quoted_value(text: &str) -> String {
    let text = text.trim();
    let text = text.strip_prefix("the value ").unwrap_or(text);
    match text.strip_prefix('\'') {
        Some(rest) => match rest.rfind("' of type '") {
            Some(end) => rest[..end].to_owned(),
            None => rest.strip_suffix('\'').unwrap_or(rest).to_owned(),
        },
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incompatible(text: &str) -> (String, String, String, String) {
        match parse_inequivalent(text) {
            Some(TransportErrorKind::Incompatible {
                entity,
                argument,
                ours,
                theirs,
            }) => (entity, argument, ours, theirs),
            other => panic!("not parsed: {other:?}"),
        }
    }

    #[test]
    fn reads_the_3_10_form() {
        let text = "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue 'q' in \
                    vhost 'v': received the value 'quorum' of type 'longstr' but current is none";
        assert_eq!(
            incompatible(text),
            (
                "q".into(),
                "x-queue-type".into(),
                "quorum".into(),
                "none".into()
            )
        );
        let text = "PRECONDITION_FAILED - inequivalent arg 'x-queue-type' for queue \
                    'a.b.events' in vhost '/': received the value 'quorum' of type 'longstr' \
                    but current is the value 'classic' of type 'longstr'";
        assert_eq!(
            incompatible(text),
            (
                "a.b.events".into(),
                "x-queue-type".into(),
                "quorum".into(),
                "classic".into()
            )
        );
    }

    #[test]
    fn reads_the_short_form_and_absent_values() {
        let text = "PRECONDITION_FAILED - inequivalent arg 'durable' for exchange 'mesh.events' \
                    in vhost 'v': received 'true' but current is 'false'";
        assert_eq!(
            incompatible(text),
            (
                "mesh.events".into(),
                "durable".into(),
                "true".into(),
                "false".into()
            )
        );
        let text = "PRECONDITION_FAILED - inequivalent arg 'x-message-ttl' for queue 'q' in \
                    vhost 'v': received none but current is the value '1000' of type 'long'";
        assert_eq!(incompatible(text).2, "none");
        assert_eq!(incompatible(text).3, "1000");
    }

    #[test]
    fn other_refusals_are_not_incompatible() {
        assert_eq!(
            parse_inequivalent("PRECONDITION_FAILED - unknown delivery tag 1"),
            None
        );
        let err = from_close(
            BrokerClose {
                code: 406,
                text: "PRECONDITION_FAILED - unknown delivery tag 1".into(),
            },
            "ack",
        );
        assert_eq!(err.kind(), &TransportErrorKind::Protocol);
        let err = from_close(
            BrokerClose {
                code: 403,
                text: "ACCESS_REFUSED - no".into(),
            },
            "declare",
        );
        assert_eq!(
            err.kind(),
            &TransportErrorKind::Forbidden {
                refused: "no".into()
            }
        );
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn reads_publish_refusals() {
        let close = |code, text: &str| BrokerClose {
            code,
            text: text.to_owned(),
        };
        assert_eq!(
            publish_refusal(&close(
                406,
                "PRECONDITION_FAILED - message size 2097152 is larger than configured max \
                 size 1048576"
            )),
            PublishRefusal::TooLarge {
                size: 2_097_152,
                max: 1_048_576
            }
        );
        assert_eq!(
            parse_too_large(
                "PRECONDITION_FAILED - message size 536870913 is larger than max size 536870912"
            ),
            Some((536_870_913, 536_870_912))
        );
        assert_eq!(
            publish_refusal(&close(
                404,
                "NOT_FOUND - no exchange 'mesh.events' in vhost 'v'"
            )),
            PublishRefusal::Exchange {
                code: 404,
                exchange: "mesh.events".to_owned()
            }
        );
        assert_eq!(
            publish_refusal(&close(
                403,
                "ACCESS_REFUSED - write access to exchange 'it''s' in vhost 'v' refused for \
                 user 'u'"
            )),
            PublishRefusal::Exchange {
                code: 403,
                exchange: "it''s".to_owned()
            }
        );
        assert_eq!(
            publish_refusal(&close(
                403,
                "ACCESS_REFUSED - write access to topic 'module.billing.x' in exchange \
                 'mesh.events' in vhost 'v' refused for user 'module.umami'"
            )),
            PublishRefusal::Topic {
                exchange: "mesh.events".to_owned(),
                key: "module.billing.x".to_owned()
            }
        );
        assert_eq!(
            publish_refusal(&close(
                406,
                "PRECONDITION_FAILED - user_id property set to 'a' but authenticated user \
                 was 'b'"
            )),
            PublishRefusal::UserId
        );
        assert_eq!(
            publish_refusal(&close(406, "PRECONDITION_FAILED - something else")),
            PublishRefusal::Other
        );
        assert!(is_unknown_delivery_tag(&close(
            406,
            "PRECONDITION_FAILED - unknown delivery tag 7"
        )));
        assert!(!is_unknown_delivery_tag(&close(
            406,
            "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out"
        )));
    }

    #[test]
    fn garbage_does_not_panic() {
        for text in [
            "",
            "inequivalent arg '",
            "inequivalent arg 'x' for ",
            "inequivalent arg 'x' for queue 'q' in vhost 'v': received ",
            "inequivalent arg 'x' for queue 'q' in vhost 'v': received 'a but current is '",
        ] {
            let _ = parse_inequivalent(text);
        }
        assert_eq!(quoted_value("'"), "");
        for text in [
            "message size ",
            "message size 1",
            "message size x is larger than max size ",
            "exchange '",
        ] {
            let _ = parse_too_large(text);
            let _ = parse_exchange(text);
            let _ = parse_topic(text);
            let _ = refused_text(text);
        }
        for text in [
            "access to topic '",
            "access to topic 'k' in exchange '",
            " - ",
            "A - ",
        ] {
            let _ = parse_topic(text);
            let _ = refused_text(text);
        }
    }

    #[test]
    fn refusals_are_forbidden_and_name_what_was_refused() {
        let close = |code, text: &str| BrokerClose {
            code,
            text: text.to_owned(),
        };
        let error = from_close(
            close(
                403,
                "ACCESS_REFUSED - read access to queue 'n1.billing.events' in vhost 'v' \
                 refused for user 'module.umami'",
            ),
            "consuming",
        );
        assert_eq!(
            error.kind(),
            &TransportErrorKind::Forbidden {
                refused: "read access to queue 'n1.billing.events' in vhost 'v' refused for \
                          user 'module.umami'"
                    .to_owned()
            }
        );
        let error = from_close(
            close(
                406,
                "PRECONDITION_FAILED - user_id property set to 'a' but authenticated user was 'b'",
            ),
            "publishing",
        );
        assert!(matches!(error.kind(), TransportErrorKind::Forbidden { .. }));
        let long = format!("ACCESS_REFUSED - {}", "x".repeat(10_000));
        match from_close(close(403, &long), "x").kind() {
            TransportErrorKind::Forbidden { refused } => assert!(refused.len() <= 512),
            other => panic!("{other:?}"),
        }
    }
}
