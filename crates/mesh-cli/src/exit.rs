//! Exit codes: what each one means, and how an error is mapped to one.
//!
//! A command either returns the code it decided on (`emit --count` with failures, `topology
//! plan --check` with differences) or fails with an `anyhow::Error`. Failures whose code is
//! not 1 carry a [`Coded`] context, added where the failure is understood (a refused
//! connection is "unreachable" only where the connection is opened); SDK call errors are
//! read from their predicates.

use std::fmt;
use std::process::ExitCode;

/// The documented exit codes of `mesh` (see the crate docs and `mesh --help`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Code {
    /// 0: done.
    Ok,
    /// 1: any failure without a code of its own.
    Error,
    /// 2: the command line is wrong: an unknown option, an invalid key, pattern or name, data
    /// that is not JSON.
    Usage,
    /// 3: the broker cannot be reached (refused, timed out, unknown host, tls failed).
    Unreachable,
    /// 4: `call`: no server serves the tool.
    NoServer,
    /// 5: `call`: no reply within the timeout.
    Timeout,
    /// 6: `call`: the tool answered with an error.
    Remote,
    /// 7: `emit`: at least one event was not confirmed by the broker.
    NotConfirmed,
    /// 8: RabbitMQ's management HTTP API cannot be reached.
    NoManagement,
    /// 9: `topology plan --check`, `access plan --check`: the broker differs from the
    /// contract or the access plan.
    Drift,
    /// 10: the broker refused this user the operation (a permission: a key it may not
    /// publish, a queue it may not read, the default exchange; see docs/SECURITY.md).
    Forbidden,
    /// 11: `contract check`: the newer contract breaks a module (a breaking change).
    Incompatible,
    /// 12: the broker refused the login: a wrong password or an unknown user.
    LoginRefused,
    /// 13: the broker refused the vhost: it does not exist, or the user has no permission
    /// on it.
    VhostRefused,
}

impl Code {
    /// The process exit status.
    pub(crate) const fn value(self) -> u8 {
        match self {
            Code::Ok => 0,
            Code::Error => 1,
            Code::Usage => 2,
            Code::Unreachable => 3,
            Code::NoServer => 4,
            Code::Timeout => 5,
            Code::Remote => 6,
            Code::NotConfirmed => 7,
            Code::NoManagement => 8,
            Code::Drift => 9,
            Code::Forbidden => 10,
            Code::Incompatible => 11,
            Code::LoginRefused => 12,
            Code::VhostRefused => 13,
        }
    }

    /// A short machine name (used in `--json` error output).
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Code::Ok => "ok",
            Code::Error => "error",
            Code::Usage => "usage",
            Code::Unreachable => "unreachable",
            Code::NoServer => "no-server",
            Code::Timeout => "timeout",
            Code::Remote => "remote",
            Code::NotConfirmed => "not-confirmed",
            Code::NoManagement => "no-management",
            Code::Drift => "drift",
            Code::Forbidden => "forbidden",
            Code::Incompatible => "incompatible",
            Code::LoginRefused => "login-refused",
            Code::VhostRefused => "vhost-refused",
        }
    }
}

impl From<Code> for ExitCode {
    fn from(code: Code) -> ExitCode {
        ExitCode::from(code.value())
    }
}

/// The exit-code table, as a literal so help texts can `concat!` it.
macro_rules! exit_table {
    () => {
        "\
Exit codes:
  0  success (also when the reader of the output went away: a broken pipe)
  1  error without a code of its own
  2  usage: bad arguments, an invalid key, pattern or name, data that is not JSON
  3  the broker is unreachable (connection refused, timed out, unknown host, tls failed)
  4  call: no server serves the tool
  5  call: no reply within --timeout
  6  call: the tool answered with an error
  7  emit: at least one event was not confirmed by the broker
  8  the RabbitMQ management API is unreachable (topology, status)
  9  topology plan --check, access plan --check: the broker differs from the contract
     or the access plan
  10  forbidden: the broker refused this user the operation (its permissions)
  11  contract check: a breaking change (the newer contract breaks a module)
  12  login refused: wrong password or unknown user
  13  vhost refused: no such vhost, or the user has no permission on it"
    };
}

/// A context that gives an error its exit code. Its message becomes the first part of the
/// one-line error (`{:#}`), so it says what was being done; its hint, if any, is printed
/// after it.
#[derive(Debug)]
pub(crate) struct Coded {
    pub(crate) code: Code,
    pub(crate) message: String,
    pub(crate) hint: Option<String>,
}

impl fmt::Display for Coded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// Adds a [`Coded`] context to results.
pub(crate) trait WithCode<T> {
    /// Fails with `code`, saying `message` first.
    fn coded(self, code: Code, message: impl FnOnce() -> String) -> anyhow::Result<T>;
}

impl<T, E> WithCode<T> for Result<T, E>
where
    E: Into<anyhow::Error>,
{
    fn coded(self, code: Code, message: impl FnOnce() -> String) -> anyhow::Result<T> {
        self.map_err(|e| {
            e.into().context(Coded {
                code,
                message: message(),
                hint: None,
            })
        })
    }
}

/// An error with a code and no cause.
pub(crate) fn fail(code: Code, message: impl Into<String>) -> anyhow::Error {
    anyhow::Error::msg(Coded {
        code,
        message: message.into(),
        hint: None,
    })
}

/// An error with a code, no cause, and what to do about it.
pub(crate) fn fail_with_hint(
    code: Code,
    message: impl Into<String>,
    hint: impl Into<String>,
) -> anyhow::Error {
    anyhow::Error::msg(Coded {
        code,
        message: message.into(),
        hint: Some(hint.into()),
    })
}

/// The exit code of a failed command.
pub(crate) fn classify(error: &anyhow::Error) -> Code {
    // A refusal by the broker's permissions says more than any code a command gave the
    // failure around it (`emit`'s "not confirmed", say).
    if is_forbidden(error) {
        return Code::Forbidden;
    }
    // So is a refused login or vhost, wherever the connection was opened.
    match refusal(error) {
        Some(
            mesh::amqp::ConnectRefused::Login { .. } | mesh::amqp::ConnectRefused::Mechanism { .. },
        ) => return Code::LoginRefused,
        Some(mesh::amqp::ConnectRefused::Vhost { .. }) => return Code::VhostRefused,
        _ => {}
    }
    if let Some(coded) = error.downcast_ref::<Coded>() {
        return coded.code;
    }
    for cause in error.chain() {
        if let Some(e) = cause.downcast_ref::<mesh_audit::Error>() {
            if matches!(e.kind(), mesh_audit::ErrorKind::InvalidOptions) {
                return Code::Usage;
            }
        }
        if let Some(e) = cause.downcast_ref::<mesh_outbox::Error>() {
            if matches!(e.kind(), mesh_outbox::ErrorKind::InvalidOptions) {
                return Code::Usage;
            }
        }
    }
    for cause in error.chain() {
        if let Some(e) = cause.downcast_ref::<mesh::Error>() {
            if e.is_no_server() {
                return Code::NoServer;
            }
            if e.is_timeout() {
                return Code::Timeout;
            }
            if e.remote().is_some() {
                return Code::Remote;
            }
        }
    }
    Code::Error
}

/// What to do about a failure, when a cause in its chain says (the audit store's errors do:
/// create the directory, start PostgreSQL, fix the URL…; the SDK's say to start a server).
pub(crate) fn hint(error: &anyhow::Error) -> Option<String> {
    if let Some(hint) = error
        .downcast_ref::<Coded>()
        .and_then(|coded| coded.hint.clone())
    {
        return Some(hint);
    }
    error.chain().find_map(|cause| {
        cause
            .downcast_ref::<mesh_audit::Error>()
            .and_then(mesh_audit::Error::hint)
            .or_else(|| {
                cause
                    .downcast_ref::<mesh::Error>()
                    .and_then(mesh::Error::hint)
            })
            .map(str::to_owned)
    })
}

/// Whether the broker refused this user the operation, somewhere in the error's chain.
fn is_forbidden(error: &anyhow::Error) -> bool {
    let forbidden = |kind: Option<&mesh::TransportErrorKind>| {
        matches!(kind, Some(mesh::TransportErrorKind::Forbidden { .. }))
    };
    error.chain().any(|cause| {
        cause
            .downcast_ref::<mesh::Error>()
            .is_some_and(|e| forbidden(e.transport_kind()))
            || cause
                .downcast_ref::<mesh::raw::TransportError>()
                .is_some_and(|e| forbidden(Some(e.kind())))
    })
}

/// The broker's refusal of the login or vhost, somewhere in the error's chain.
pub(crate) fn refusal(error: &anyhow::Error) -> Option<&mesh::amqp::ConnectRefused> {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<mesh::amqp::ConnectRefused>())
}

/// Whether the error is a closed output pipe (`mesh tail | head -1`), which is success.
pub(crate) fn is_broken_pipe(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context as _;

    #[test]
    fn a_coded_context_decides_the_code_even_under_more_context() {
        let error = Err::<(), _>(std::io::Error::other("refused"))
            .coded(Code::Unreachable, || "cannot connect".into())
            .context("running emit")
            .unwrap_err();
        assert_eq!(classify(&error), Code::Unreachable);
        assert_eq!(
            format!("{error:#}"),
            "running emit: cannot connect: refused"
        );
    }

    #[test]
    fn plain_errors_are_code_1_and_broken_pipes_are_recognised() {
        let error = anyhow::anyhow!("boom");
        assert_eq!(classify(&error), Code::Error);
        assert!(!is_broken_pipe(&error));
        let pipe = anyhow::Error::new(std::io::Error::from(std::io::ErrorKind::BrokenPipe))
            .context("writing");
        assert!(is_broken_pipe(&pipe));
    }

    #[test]
    fn a_hint_given_with_the_code_is_the_errors_hint() {
        let error = fail_with_hint(Code::NoServer, "cannot call `a.b`", "start a server");
        assert_eq!(classify(&error), Code::NoServer);
        assert_eq!(hint(&error).as_deref(), Some("start a server"));
        assert_eq!(hint(&fail(Code::NoServer, "cannot call `a.b`")), None);
    }

    #[test]
    fn fail_carries_its_code() {
        assert_eq!(classify(&fail(Code::Drift, "differs")), Code::Drift);
        assert_eq!(fail(Code::Drift, "differs").to_string(), "differs");
    }

    #[test]
    fn a_refusal_by_permissions_is_forbidden_whatever_code_surrounds_it() {
        let refused = mesh::raw::TransportError::new(
            mesh::TransportErrorKind::Forbidden {
                refused: "write access to topic 'module.billing.x' in exchange 'mesh.events' \
                          in vhost '/' refused for user 'module.umami'"
                    .into(),
            },
            "publishing",
        );
        let error = Err::<(), _>(refused)
            .coded(Code::NotConfirmed, || "not confirmed".into())
            .unwrap_err();
        assert_eq!(classify(&error), Code::Forbidden);
        assert_eq!(Code::Forbidden.value(), 10);
        let other = Err::<(), _>(mesh::raw::TransportError::new(
            mesh::TransportErrorKind::Nacked,
            "publishing",
        ))
        .coded(Code::NotConfirmed, || "not confirmed".into())
        .unwrap_err();
        assert_eq!(classify(&other), Code::NotConfirmed);
    }

    #[test]
    fn a_refused_login_or_vhost_has_its_code_whatever_code_surrounds_it() {
        for (refused, code) in [
            (
                mesh::amqp::ConnectRefused::Login {
                    user: "alice".into(),
                    vhost: "/".into(),
                },
                Code::LoginRefused,
            ),
            (
                mesh::amqp::ConnectRefused::Vhost {
                    user: "alice".into(),
                    vhost: "nope".into(),
                },
                Code::VhostRefused,
            ),
            (
                mesh::amqp::ConnectRefused::Mechanism {
                    mechanism: "EXTERNAL".into(),
                },
                Code::LoginRefused,
            ),
        ] {
            let error = mesh::raw::TransportError::new(
                mesh::TransportErrorKind::AccessRefused,
                "connecting",
            )
            .with_source(refused);
            let error = Err::<(), _>(error)
                .coded(Code::Error, || "cannot connect".into())
                .unwrap_err();
            assert_eq!(classify(&error), code);
        }
        assert_eq!(Code::LoginRefused.value(), 12);
        assert_eq!(Code::VhostRefused.value(), 13);
    }

    #[test]
    fn codes_are_distinct() {
        let all = [
            Code::Ok,
            Code::Error,
            Code::Usage,
            Code::Unreachable,
            Code::NoServer,
            Code::Timeout,
            Code::Remote,
            Code::NotConfirmed,
            Code::NoManagement,
            Code::Drift,
            Code::Forbidden,
            Code::Incompatible,
            Code::LoginRefused,
            Code::VhostRefused,
        ];
        for (i, a) in all.iter().enumerate() {
            assert!(exit_table!().contains(&format!("  {}  ", a.value())));
            for b in &all[i + 1..] {
                assert_ne!(a.value(), b.value());
            }
        }
    }
}
