//! The RabbitMQ transport joined to the broker's management API: `meshbus-amqp` speaks AMQP
//! only and asks for a queue's bindings through its [`EventBindings`] trait; `meshbus-admin`
//! has the management client. This module, behind the `amqp` feature, is where the two
//! meet, reached as [`amqp::connect`](crate::amqp::connect) and its siblings.

use std::sync::Arc;
use std::time::Duration;

use mesh_admin::management::{ManagementClient, ManagementError, ManagementOptions};
use mesh_amqp::{AmqpOptions, AmqpTransport, EventBindings};
use mesh_core::{BoxError, BoxFuture, TransportError};

/// Connects an [`AmqpTransport`] that finds a durable queue's stale bindings through the
/// management API of [`management_options`]`(&options)`: the options' management URL, or one
/// derived from the broker's first address and asked only when that host is loopback.
///
/// What `AmqpTransport::connect` does, plus the bindings of the broker: see
/// [`AmqpTransport::subscribe`].
pub async fn connect(options: AmqpOptions) -> Result<AmqpTransport, TransportError> {
    let copy = options.clone();
    let bindings = off_runtime(move || event_bindings(management_options(&copy).as_ref())).await?;
    AmqpTransport::connect_with(options, bindings).await
}

/// [`connect`] with the management API's options (a CA file,
/// [`allow_insecure_http`](ManagementOptions::allow_insecure_http)); `None` never contacts
/// it.
pub async fn connect_with_management(
    options: AmqpOptions,
    management: Option<ManagementOptions>,
) -> Result<AmqpTransport, TransportError> {
    let bindings = off_runtime(move || event_bindings(management.as_ref())).await?;
    AmqpTransport::connect_with(options, bindings).await
}

/// `read` on tokio's blocking pool: the management options read the password file and the
/// client the CA file (bounded, but a FIFO may take `mesh_files`' deadline), never on a worker
/// of the caller's runtime.
async fn off_runtime<T: Send + 'static>(
    read: impl FnOnce() -> T + Send + 'static,
) -> Result<T, TransportError> {
    tokio::task::spawn_blocking(read).await.map_err(|e| {
        TransportError::new(
            mesh_core::TransportErrorKind::InvalidOptions,
            "reading the management options' files did not finish",
        )
        .with_source(e)
    })
}

/// The management API of the broker `amqp` names: its [management
/// URL](AmqpOptions::management_url) when one is set, else `http://<first host>:15672`
/// (`https://<first host>:15671` when the broker is reached with TLS; then [not
/// configured](ManagementOptions::is_configured)), with its credentials (a password file
/// read now), the TLS options' CA file for an https API, and its connect timeout (at least
/// 1 s) as the request timeout. `None` for options with neither a management URL nor an
/// address.
pub fn management_options(amqp: &AmqpOptions) -> Option<ManagementOptions> {
    // Without addresses, the management URL is only the one set explicitly.
    let configured = amqp
        .clone()
        .addresses(std::iter::empty())
        .get_management_url();
    let (url, is_configured) = match configured {
        Some(url) => (url, true),
        None => (amqp.get_management_url()?, false),
    };
    // The password as the next AMQP connect would send it (a password file read now); a
    // file that cannot be read fails that connect with its own error, so the API gets the
    // password given in the options meanwhile.
    let password = amqp
        .load_password()
        .unwrap_or_else(|_| amqp.get_password().to_owned());
    // An https API is trusted as the broker's AMQP port is: by the TLS options' CA file.
    let ca_file = amqp
        .get_tls()
        .and_then(|tls| tls.get_ca_file())
        .map(Into::into);
    Some(
        ManagementOptions::for_broker(url, is_configured, amqp.get_user(), password, ca_file)
            .timeout(amqp.get_connect_timeout().max(Duration::from_secs(1))),
    )
}

/// The lister a transport is connected with for `management`: none when there are no
/// options, or when they were derived (not configured) for a host that is not loopback.
fn event_bindings(management: Option<&ManagementOptions>) -> Option<Arc<dyn EventBindings>> {
    let options = management?;
    if !options.is_configured() && !options.is_loopback() {
        return None;
    }
    let lister = match ManagementClient::new(options) {
        Ok(client) => Management::Client(client),
        Err(error) => Management::Unusable(Arc::new(error)),
    };
    Some(Arc::new(lister))
}

/// The management API as the transport sees it when it looks for stale bindings.
enum Management {
    /// Options the client refused (a bad URL, credentials in clear): warned about on use.
    Unusable(Arc<ManagementError>),
    /// Contacted.
    Client(ManagementClient),
}

impl EventBindings for Management {
    fn list<'a>(
        &'a self,
        vhost: &'a str,
        queue: &'a str,
    ) -> BoxFuture<'a, Result<Vec<String>, BoxError>> {
        Box::pin(async move {
            match self {
                Management::Client(client) => client
                    .event_binding_keys(vhost, queue)
                    .await
                    .map_err(BoxError::from),
                // Never asked (see `unusable`); the refusal is the answer all the same.
                Management::Unusable(error) => Err(Box::new(Arc::clone(error)) as BoxError),
            }
        })
    }

    fn unusable(&self) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
        match self {
            Management::Unusable(error) => Some(&**error),
            Management::Client(_) => None,
        }
    }
}

impl std::fmt::Debug for Management {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Management::Unusable(error) => f.debug_tuple("Unusable").field(&error.kind()).finish(),
            Management::Client(client) => client.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn management_options_tell_a_configured_url_from_a_derived_one() {
        let amqp: AmqpOptions = "amqp://u:p@rabbit.example:5672/%2F".parse().unwrap();
        let derived = management_options(&amqp).unwrap();
        assert_eq!(derived.get_url(), "http://rabbit.example:15672");
        assert!(!derived.is_configured());
        assert_eq!(derived.get_user(), "u");

        let configured =
            management_options(&amqp.management_url("http://rabbit.example:15672")).unwrap();
        assert!(configured.is_configured());
        assert_eq!(configured.get_url(), "http://rabbit.example:15672");
    }
}
