//! From the global options to a broker connection, a node name and a management client.

use std::sync::Arc;

use mesh::amqp::management::{ManagementClient, ManagementOptions};
use mesh::amqp::{AmqpOptions, AmqpTransport, QueueType};
use mesh::core::{Name, TransportErrorKind};
use mesh::Transport;

use crate::cli::{Global, QueueTypeArg};
use crate::exit::{Code, WithCode};
use crate::management::Management;

/// The prefix of the CLI's connection names (`mesh-cli.publish`, `mesh-cli.consume`), so an
/// operator can tell them apart from services' connections.
const CONNECTION_NAME: &str = "mesh-cli";

/// The AMQP options from `--url`/`MESH_URL`, the password of `--password-file` or
/// `MESH_PASSWORD`, and `--connect-timeout`; a bad URL, or a password file that cannot be
/// read, is a usage error. No message quotes the URL's password.
pub(crate) fn amqp_options(global: &Global) -> anyhow::Result<AmqpOptions> {
    let options: AmqpOptions = global
        .url
        .trim()
        .parse()
        .coded(Code::Usage, || "invalid --url (or MESH_URL)".to_owned())?;
    let options =
        mesh_audit::cli::with_password(options, &global.password, global.password_file.as_deref())
            .coded(Code::Usage, || {
                "invalid --password-file (or MESH_PASSWORD_FILE)".to_owned()
            })?;
    let mut options = options
        .connect_timeout(global.connect_timeout)
        .connection_name(CONNECTION_NAME);
    // The queues a command declares must match the broker's (an audit logger's queue of
    // dead letters, its queue type), or the broker refuses them.
    if let Some(kind) = global.queue_type {
        options = options.queue_type(match kind {
            QueueTypeArg::Quorum => QueueType::Quorum,
            QueueTypeArg::Classic => QueueType::Classic,
        });
    }
    options
        .validate()
        .coded(Code::Usage, || "invalid connection options".to_owned())?;
    Ok(options)
}

/// The node: `--node`/`MESH_NODE`, or the host name up to its first dot.
pub(crate) fn node(global: &Global) -> anyhow::Result<Name> {
    match &global.node {
        Some(node) => {
            Name::parse(node).coded(Code::Usage, || format!("invalid node name `{node}`"))
        }
        None => {
            let host = nix::unistd::gethostname()
                .coded(Code::Usage, || {
                    "cannot read the host name: give --node or MESH_NODE".to_owned()
                })?
                .to_string_lossy()
                .into_owned();
            let first = host.split('.').next().unwrap_or_default();
            Name::parse(first).coded(Code::Usage, || {
                format!("the host name `{host}` is not a node name: give --node or MESH_NODE")
            })
        }
    }
}

/// Connects (declaring the base topology, as every mesh client does). A broker that cannot
/// be reached is exit code 3.
pub(crate) async fn connect(options: AmqpOptions) -> anyhow::Result<Arc<dyn Transport>> {
    let shown = options.to_string();
    match AmqpTransport::connect(options).await {
        Ok(transport) => Ok(Arc::new(transport)),
        Err(error) => {
            // A failed TLS handshake is unreachable too: the reason (unknown CA, name
            // mismatch, expired, client certificate required…) is in the error's chain.
            let code = match error.kind() {
                TransportErrorKind::ConnectionLost
                | TransportErrorKind::Timeout
                | TransportErrorKind::Tls => Code::Unreachable,
                TransportErrorKind::InvalidOptions => Code::Usage,
                _ => Code::Error,
            };
            let message = match error.kind() {
                TransportErrorKind::AccessRefused => {
                    format!(
                        "the broker at {shown} refused access (credentials, vhost or permissions)"
                    )
                }
                TransportErrorKind::Tls => {
                    format!("cannot set up tls with the broker at {shown}")
                }
                _ => format!("cannot connect to the broker at {shown}"),
            };
            Err(anyhow::Error::new(error).context(crate::exit::Coded { code, message }))
        }
    }
}

/// The management API client for the broker of `--url`: `--management-url` or
/// `http://<first host>:15672`, with the `--url` credentials and vhost. An https URL is
/// verified against `--management-ca-file`, else the `cacertfile` of `--url`, else the
/// system's roots.
pub(crate) fn management(global: &Global) -> anyhow::Result<Management> {
    let options = amqp_options(global)?;
    let management = management_options(global, &options)?;
    let client = ManagementClient::new(&management)
        .coded(Code::Usage, || "invalid management API options".to_owned())?;
    Ok(Management::new(client, options.get_vhost()))
}

/// The management options of `--management-*` over those `options` imply.
fn management_options(global: &Global, options: &AmqpOptions) -> anyhow::Result<ManagementOptions> {
    let mut management = match &global.management_url {
        Some(url) => ManagementOptions::new(url.trim())
            .credentials(options.get_user(), options.get_password()),
        None => ManagementOptions::from_amqp(options).ok_or_else(|| {
            crate::exit::fail(
                Code::Usage,
                "no broker address to derive the management URL from",
            )
        })?,
    }
    .timeout(
        global
            .connect_timeout
            .max(std::time::Duration::from_secs(30)),
    )
    .allow_insecure_http(global.management_allow_http)
    .configured(true);
    if let Some(ca_file) = &global.management_ca_file {
        management = management.ca_file(ca_file);
    }
    Ok(management.ca_file_from_amqp_url(&global.url))
}
