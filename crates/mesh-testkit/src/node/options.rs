//! The settings of a private node ([`NodeOptions`], [`TlsListener`]) and the configuration
//! files they become.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::certs::CertFiles;

/// Settings of a private node. `Default` is RabbitMQ's defaults, no plugins, 60 s boot timeout.
///
/// ```
/// use mesh_testkit::node::NodeOptions;
/// let opts = NodeOptions::default()
///     .heartbeat(2)
///     .consumer_timeout_ms(5_000)
///     .channel_tick_interval_ms(1_000);
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeOptions {
    heartbeat: Option<u32>,
    max_message_size: Option<u64>,
    consumer_timeout_ms: Option<u64>,
    channel_tick_interval_ms: Option<u64>,
    extra_conf: Vec<String>,
    pub(super) management: bool,
    certificate_login: bool,
    pub(super) tls: Option<TlsListener>,
    pub(super) boot_timeout: Duration,
}

/// A TLS listener of a private node (see [`NodeOptions::tls`]): RabbitMQ's `ssl_options`.
/// The files are copied into the node's directory when it starts, so the node's user can
/// read them and they outlive the [`TestPki`](crate::TestPki) that made them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsListener {
    /// The CA that signs the client certificates the node accepts (`ssl_options.cacertfile`).
    pub ca_file: PathBuf,
    /// The server's certificate (`ssl_options.certfile`).
    pub server_cert: PathBuf,
    /// The server's private key (`ssl_options.keyfile`).
    pub server_key: PathBuf,
    /// Refuse a client without a certificate (`ssl_options.fail_if_no_peer_cert`); either
    /// way the node asks for one and verifies what it gets (`ssl_options.verify =
    /// verify_peer`).
    pub require_client_cert: bool,
}

impl Default for NodeOptions {
    fn default() -> Self {
        NodeOptions {
            heartbeat: None,
            max_message_size: None,
            consumer_timeout_ms: None,
            channel_tick_interval_ms: None,
            extra_conf: Vec::new(),
            management: false,
            certificate_login: false,
            tls: None,
            boot_timeout: Duration::from_secs(60),
        }
    }
}

impl NodeOptions {
    /// The heartbeat the server proposes, in seconds (`heartbeat` in `rabbitmq.conf`; 0
    /// disables). Clients negotiate the smaller non-zero value.
    pub fn heartbeat(mut self, secs: u32) -> Self {
        self.heartbeat = Some(secs);
        self
    }

    /// Largest message body accepted, in bytes (`max_message_size`).
    pub fn max_message_size(mut self, bytes: u64) -> Self {
        self.max_message_size = Some(bytes);
        self
    }

    /// How long a delivery may stay unacknowledged before the broker closes the channel, in
    /// milliseconds (`consumer_timeout`). The broker only checks on its channel tick, so pair
    /// a short timeout with [`NodeOptions::channel_tick_interval_ms`].
    pub fn consumer_timeout_ms(mut self, ms: u64) -> Self {
        self.consumer_timeout_ms = Some(ms);
        self
    }

    /// The channel tick, in milliseconds (`rabbit.channel_tick_interval` in
    /// `advanced.config`; RabbitMQ's default is 60000).
    pub fn channel_tick_interval_ms(mut self, ms: u64) -> Self {
        self.channel_tick_interval_ms = Some(ms);
        self
    }

    /// Appends a raw line to `rabbitmq.conf` (sysctl format), e.g.
    /// `"disk_free_limit.absolute = 1MB"`.
    pub fn extra_conf(mut self, line: impl Into<String>) -> Self {
        self.extra_conf.push(line.into());
        self
    }

    /// Enables `rabbitmq_management` on a free port (see [`PrivateNode::management_port`](crate::PrivateNode::management_port)).
    /// Adds a few seconds to each boot.
    pub fn management(mut self, enabled: bool) -> Self {
        self.management = enabled;
        self
    }

    /// Serves the management API over HTTPS too, on `127.0.0.1:port` (take one from
    /// [`free_port`](crate::free_port)), with `server`'s certificate and key and `ca_file` as its CA
    /// (`management.ssl.*`); implies [`NodeOptions::management`]. The files are read where
    /// they are, so they must outlive the node.
    pub fn management_tls(self, port: u16, ca_file: &Path, server: &CertFiles) -> Self {
        self.management(true)
            .extra_conf(format!("management.ssl.port = {port}"))
            .extra_conf("management.ssl.ip = 127.0.0.1")
            .extra_conf(format!("management.ssl.cacertfile = {}", ca_file.display()))
            .extra_conf(format!(
                "management.ssl.certfile = {}",
                server.cert.display()
            ))
            .extra_conf(format!("management.ssl.keyfile = {}", server.key.display()))
    }

    /// Lets clients log in with their TLS client certificate alone: enables
    /// `rabbitmq_auth_mechanism_ssl`, offers `EXTERNAL` beside `PLAIN` and `AMQPLAIN`, and
    /// names the user after the certificate's subject common name (`ssl_cert_login_from =
    /// common_name`). Only a TLS connection that presented a certificate is offered
    /// `EXTERNAL`: pair it with [`NodeOptions::tls`].
    pub fn certificate_login(mut self, enabled: bool) -> Self {
        self.certificate_login = enabled;
        self
    }

    /// Adds a TLS listener on a free port of its own (see [`PrivateNode::tls_port`](crate::PrivateNode::tls_port)), beside
    /// the plain AMQP one.
    pub fn tls(mut self, listener: TlsListener) -> Self {
        self.tls = Some(listener);
        self
    }

    /// How long a boot may take before `start`/`start_again` give up (default 60 s).
    pub fn boot_timeout(mut self, timeout: Duration) -> Self {
        self.boot_timeout = timeout;
        self
    }

    /// The boot timeout set with [`NodeOptions::boot_timeout`].
    pub fn get_boot_timeout(&self) -> Duration {
        self.boot_timeout
    }

    pub(crate) fn rabbitmq_conf(
        &self,
        name: &str,
        port: u16,
        management_port: Option<u16>,
        tls: Option<(u16, &Path)>,
    ) -> String {
        let mut conf = format!(
            "# Written by mesh-testkit for private node {name}.\n\
             listeners.tcp.1 = 127.0.0.1:{port}\n"
        );
        if let (Some(listener), Some((tls_port, dir))) = (&self.tls, tls) {
            let d = |file: &str| dir.join(file).display().to_string();
            conf.push_str(&format!(
                "listeners.ssl.1 = 127.0.0.1:{tls_port}\n\
                 ssl_options.cacertfile = {}\n\
                 ssl_options.certfile = {}\n\
                 ssl_options.keyfile = {}\n\
                 ssl_options.verify = verify_peer\n\
                 ssl_options.fail_if_no_peer_cert = {}\n",
                d(TLS_FILES[0]),
                d(TLS_FILES[1]),
                d(TLS_FILES[2]),
                listener.require_client_cert
            ));
        }
        if self.certificate_login {
            conf.push_str(
                "auth_mechanisms.1 = PLAIN\n\
                 auth_mechanisms.2 = AMQPLAIN\n\
                 auth_mechanisms.3 = EXTERNAL\n\
                 ssl_cert_login_from = common_name\n",
            );
        }
        if let Some(v) = self.heartbeat {
            conf.push_str(&format!("heartbeat = {v}\n"));
        }
        if let Some(v) = self.max_message_size {
            conf.push_str(&format!("max_message_size = {v}\n"));
        }
        if let Some(v) = self.consumer_timeout_ms {
            conf.push_str(&format!("consumer_timeout = {v}\n"));
        }
        if let Some(p) = management_port {
            conf.push_str(&format!(
                "management.tcp.port = {p}\nmanagement.tcp.ip = 127.0.0.1\n"
            ));
        }
        for line in &self.extra_conf {
            conf.push_str(line);
            conf.push('\n');
        }
        conf
    }

    pub(crate) fn advanced_config(&self) -> String {
        match self.channel_tick_interval_ms {
            Some(ms) => format!("[{{rabbit, [{{channel_tick_interval, {ms}}}]}}].\n"),
            None => "[].\n".to_owned(),
        }
    }

    pub(crate) fn enabled_plugins(&self) -> String {
        let plugins: Vec<&str> = [
            (self.management, "rabbitmq_management"),
            (self.certificate_login, "rabbitmq_auth_mechanism_ssl"),
        ]
        .into_iter()
        .filter_map(|(on, plugin)| on.then_some(plugin))
        .collect();
        format!("[{}].\n", plugins.join(","))
    }
}

/// The names of a TLS listener's files in the node's directory: CA, certificate, key.
pub(crate) const TLS_FILES: [&str; 3] = ["tls-ca.pem", "tls-server.pem", "tls-server.key"];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_a_tls_listener() {
        let opts = NodeOptions::default().tls(TlsListener {
            ca_file: "/x/ca.pem".into(),
            server_cert: "/x/s.pem".into(),
            server_key: "/x/s.key".into(),
            require_client_cert: true,
        });
        let conf = opts.rabbitmq_conf("n", 1, None, Some((2, Path::new("/d"))));
        for line in [
            "listeners.ssl.1 = 127.0.0.1:2",
            "ssl_options.cacertfile = /d/tls-ca.pem",
            "ssl_options.certfile = /d/tls-server.pem",
            "ssl_options.keyfile = /d/tls-server.key",
            "ssl_options.verify = verify_peer",
            "ssl_options.fail_if_no_peer_cert = true",
        ] {
            assert!(conf.lines().any(|l| l == line), "{line} in:\n{conf}");
        }
        assert!(!NodeOptions::default()
            .rabbitmq_conf("n", 1, None, None)
            .contains("ssl"));
        let certificates = opts.management(true).certificate_login(true);
        let conf = certificates.rabbitmq_conf("n", 1, None, Some((2, Path::new("/d"))));
        for line in [
            "auth_mechanisms.3 = EXTERNAL",
            "ssl_cert_login_from = common_name",
        ] {
            assert!(conf.lines().any(|l| l == line), "{line} in:\n{conf}");
        }
        assert_eq!(
            certificates.enabled_plugins(),
            "[rabbitmq_management,rabbitmq_auth_mechanism_ssl].\n"
        );
    }

    #[test]
    fn writes_config_from_options() {
        let opts = NodeOptions::default()
            .heartbeat(2)
            .max_message_size(1024)
            .consumer_timeout_ms(5000)
            .channel_tick_interval_ms(500)
            .extra_conf("disk_free_limit.absolute = 1MB")
            .management(true);
        let conf = opts.rabbitmq_conf("n@localhost", 20001, Some(20002), None);
        for line in [
            "listeners.tcp.1 = 127.0.0.1:20001",
            "heartbeat = 2",
            "max_message_size = 1024",
            "consumer_timeout = 5000",
            "management.tcp.port = 20002",
            "disk_free_limit.absolute = 1MB",
        ] {
            assert!(
                conf.lines().any(|l| l == line),
                "missing {line:?} in\n{conf}"
            );
        }
        assert_eq!(
            opts.advanced_config(),
            "[{rabbit, [{channel_tick_interval, 500}]}].\n"
        );
        assert_eq!(opts.enabled_plugins(), "[rabbitmq_management].\n");
        let https = NodeOptions::default().management_tls(
            20003,
            Path::new("/pki/ca.pem"),
            &CertFiles {
                cert: "/pki/m.pem".into(),
                key: "/pki/m.key".into(),
            },
        );
        assert_eq!(https.enabled_plugins(), "[rabbitmq_management].\n");
        let conf = https.rabbitmq_conf("n@localhost", 20001, Some(20002), None);
        for line in [
            "management.tcp.port = 20002",
            "management.ssl.port = 20003",
            "management.ssl.ip = 127.0.0.1",
            "management.ssl.cacertfile = /pki/ca.pem",
            "management.ssl.certfile = /pki/m.pem",
            "management.ssl.keyfile = /pki/m.key",
        ] {
            assert!(
                conf.lines().any(|l| l == line),
                "missing {line:?} in\n{conf}"
            );
        }
        let plain = NodeOptions::default();
        assert_eq!(plain.advanced_config(), "[].\n");
        assert_eq!(plain.enabled_plugins(), "[].\n");
        assert!(!plain
            .rabbitmq_conf("n", 1, None, None)
            .contains("heartbeat"));
    }
}
