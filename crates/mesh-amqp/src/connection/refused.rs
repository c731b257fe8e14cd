//! Why the broker refused to open a connection: the refusals retrying cannot cure, each a
//! [`ConnectRefused`] in the source chain of an `AccessRefused` error.

use std::fmt;

use mesh_core::{TransportError, TransportErrorKind};

use crate::error::code;

/// The broker refused to open the connection. The source of the
/// [`TransportErrorKind::AccessRefused`] error connecting returns, so a caller can tell a
/// refused login from a refused vhost (`std::error::Error::source` and `downcast_ref`).
/// Neither is an outage: the same credentials and vhost are refused again.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnectRefused {
    /// The login was refused: a wrong password or an unknown user (the broker's
    /// `403 ACCESS_REFUSED`, or the socket it closed during the login).
    Login {
        /// The user that tried to log in.
        user: String,
        /// The vhost it asked for.
        vhost: String,
    },
    /// The login was accepted, the vhost refused: it does not exist, or the user has no
    /// permission on it (the broker's `530 NOT_ALLOWED`).
    Vhost {
        /// The user that logged in.
        user: String,
        /// The vhost refused.
        vhost: String,
    },
    /// The broker does not offer the login mechanism asked for: `EXTERNAL` needs the plugin
    /// `rabbitmq_auth_mechanism_ssl`, `EXTERNAL` in `auth_mechanisms`, and a TLS connection
    /// that presented a client certificate.
    Mechanism {
        /// The mechanism asked for (`PLAIN`, `EXTERNAL`).
        mechanism: String,
    },
}

impl fmt::Display for ConnectRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let escape = mesh_core::text::escape;
        match self {
            ConnectRefused::Login { user, vhost } => write!(
                f,
                "the broker refused the login of user `{}` (vhost `{}`): wrong password or unknown user",
                escape(user),
                escape(vhost)
            ),
            ConnectRefused::Vhost { user, vhost } => write!(
                f,
                "the broker refused vhost `{}` to user `{}`: no such vhost, or no permission on it",
                escape(vhost),
                escape(user)
            ),
            ConnectRefused::Mechanism { mechanism } => write!(
                f,
                "the broker does not offer the login mechanism {}",
                escape(mechanism)
            ),
        }
    }
}

impl std::error::Error for ConnectRefused {}

impl ConnectRefused {
    /// The refusal in `error`'s source chain, if connecting failed by one.
    pub fn of(error: &TransportError) -> Option<&ConnectRefused> {
        let mut source = std::error::Error::source(error);
        while let Some(error) = source {
            if let Some(refused) = error.downcast_ref::<ConnectRefused>() {
                return Some(refused);
            }
            source = error.source();
        }
        None
    }
}

/// The error for the client library's refusal to open a connection as `user` on `vhost`,
/// while doing `context`; `None` if `error` is not a refusal.
pub(crate) fn from_refusal(
    error: &amqprs::error::Error,
    user: &str,
    vhost: &str,
    context: &str,
) -> Option<TransportError> {
    if let amqprs::error::Error::ConnectionOpenError(text) = error {
        // The client library's own check of the broker's offer, before it logs in.
        let mechanism = text
            .strip_prefix("authentication '")?
            .strip_suffix("' is not supported by server")?;
        let refused = ConnectRefused::Mechanism {
            mechanism: mechanism.to_owned(),
        };
        return Some(
            TransportError::new(TransportErrorKind::AccessRefused, context).with_source(refused),
        );
    }
    let amqprs::error::Error::ConnectionRefused { reply_code, .. } = error else {
        return None;
    };
    let (user, vhost) = (user.to_owned(), vhost.to_owned());
    let refused = match *reply_code {
        // 0: the socket closed after start-ok, before tune: how a broker refuses a login to
        // a client that does not announce `authentication_failure_close`.
        0 | code::ACCESS_REFUSED => ConnectRefused::Login { user, vhost },
        code::NOT_ALLOWED => ConnectRefused::Vhost { user, vhost },
        _ => return None,
    };
    Some(TransportError::new(TransportErrorKind::AccessRefused, context).with_source(refused))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(reply_code: u16) -> amqprs::error::Error {
        amqprs::error::Error::ConnectionRefused {
            reply_code,
            reply_text: "ACCESS_REFUSED - Login was refused".to_owned(),
        }
    }

    #[test]
    fn a_refused_login_and_a_refused_vhost_are_told_apart() {
        for (reply_code, login) in [(403, true), (0, true), (530, false)] {
            let error = from_refusal(&refusal(reply_code), "alice", "prod", "connecting")
                .expect("a refusal");
            assert_eq!(error.kind(), &TransportErrorKind::AccessRefused);
            let refused = ConnectRefused::of(&error).expect("the refusal in the chain");
            let (user, vhost) = ("alice".to_owned(), "prod".to_owned());
            let expected = if login {
                ConnectRefused::Login { user, vhost }
            } else {
                ConnectRefused::Vhost { user, vhost }
            };
            assert_eq!(refused, &expected);
        }
    }

    #[test]
    fn a_mechanism_the_broker_does_not_offer_is_a_refusal() {
        let error = amqprs::error::Error::ConnectionOpenError(
            "authentication 'EXTERNAL' is not supported by server".to_owned(),
        );
        let error = from_refusal(&error, "u", "v", "c").expect("a refusal");
        assert_eq!(error.kind(), &TransportErrorKind::AccessRefused);
        assert_eq!(
            ConnectRefused::of(&error),
            Some(&ConnectRefused::Mechanism {
                mechanism: "EXTERNAL".to_owned()
            })
        );
        let locale = amqprs::error::Error::ConnectionOpenError("locale".to_owned());
        assert!(from_refusal(&locale, "u", "v", "c").is_none());
    }

    #[test]
    fn other_closes_and_errors_are_not_refusals() {
        assert!(from_refusal(&refusal(320), "u", "v", "c").is_none());
        let network = amqprs::error::Error::NetworkError("reset".to_owned());
        assert!(from_refusal(&network, "u", "v", "c").is_none());
    }

    #[test]
    fn the_names_are_escaped_in_the_message() {
        let refused = ConnectRefused::Login {
            user: "a\u{1b}[31m".to_owned(),
            vhost: "/".to_owned(),
        };
        assert!(!refused.to_string().contains('\u{1b}'));
    }
}
