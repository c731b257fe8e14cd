//! How a connection logs in: [`AuthMechanism`], RabbitMQ's SASL mechanisms mesh offers.

use std::fmt;
use std::str::FromStr;

use mesh_core::{TransportError, TransportErrorKind};

/// The SASL mechanism a connection logs in with (the URL's `auth_mechanism` parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum AuthMechanism {
    /// A user name and a password (`PLAIN`). The default.
    #[default]
    Plain,
    /// The client certificate alone (`EXTERNAL`, RabbitMQ's plugin
    /// `rabbitmq_auth_mechanism_ssl`): the broker takes the user name from the certificate
    /// (its subject's common name with `ssl_cert_login_from = common_name`), no password is
    /// sent. Needs `amqps://` with a client certificate ([`TlsOptions::client_cert`]). The
    /// options' user must still name that user: every message carries it as `user-id`, and
    /// the broker refuses one naming another (`406`).
    ///
    /// [`TlsOptions::client_cert`]: crate::TlsOptions::client_cert
    External,
}

impl AuthMechanism {
    /// The URL parameter's value (`plain`, `external`), as RabbitMQ's URI spec writes it.
    pub const fn as_str(self) -> &'static str {
        match self {
            AuthMechanism::Plain => "plain",
            AuthMechanism::External => "external",
        }
    }
}

impl fmt::Display for AuthMechanism {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AuthMechanism {
    type Err = TransportError;

    /// `plain` or `external`, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "plain" => Ok(AuthMechanism::Plain),
            "external" => Ok(AuthMechanism::External),
            // Not quoted: a URL's parameters are no place for secrets, but a mistyped one
            // may hold anything.
            _ => Err(TransportError::new(
                TransportErrorKind::InvalidOptions,
                "auth_mechanism is neither `plain` nor `external`",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_mechanisms_in_any_case_and_nothing_else() {
        assert_eq!(
            "plain".parse::<AuthMechanism>().unwrap(),
            AuthMechanism::Plain
        );
        assert_eq!(
            "EXTERNAL".parse::<AuthMechanism>().unwrap(),
            AuthMechanism::External
        );
        assert_eq!(AuthMechanism::default(), AuthMechanism::Plain);
        assert!("amqplain".parse::<AuthMechanism>().is_err());
        assert_eq!(AuthMechanism::External.to_string(), "external");
    }
}
