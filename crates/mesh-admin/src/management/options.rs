//! Where the management API is, how to trust it, and when credentials may go to it.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use url::{Host, Url};

use super::error::{ManagementError, ManagementErrorKind};

/// How long one request may take, connecting included, unless set.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// The largest answer read, unless set: a vhost's bindings of a big deployment fit.
const DEFAULT_MAX_RESPONSE: usize = 64 * 1024 * 1024;

/// Options of a [`ManagementClient`](super::ManagementClient).
///
/// ```
/// use mesh_admin::management::ManagementOptions;
///
/// let options = ManagementOptions::new("https://rabbit.prod:15671")
///     .credentials("mesh", "secret")
///     .ca_file("/etc/mesh/ca.pem");
/// assert!(!format!("{options:?}").contains("secret"));
/// ```
///
/// # Trust
///
/// - `https://` is verified against the [CA file](ManagementOptions::ca_file) when one is
///   given (only that CA then), else against the system's roots;
/// - credentials are sent as HTTP basic auth, so over plain `http://` they are sent only to
///   a loopback host (`localhost`, `127.0.0.0/8`, `::1`) unless
///   [`allow_insecure_http`](ManagementOptions::allow_insecure_http) says otherwise; a
///   request that would break this rule fails with
///   [`Insecure`](super::ManagementErrorKind::Insecure) before anything is sent;
/// - user and password in the URL itself are ignored (the
///   [credentials](ManagementOptions::credentials) are used), and never shown;
/// - redirects are not followed and no proxy is used.
#[derive(Clone)]
pub struct ManagementOptions {
    /// Parsed lazily by the client so that a bad URL is a typed error there; kept without
    /// userinfo when it parses.
    url: String,
    configured: bool,
    user: String,
    password: String,
    ca_file: Option<PathBuf>,
    allow_insecure_http: bool,
    timeout: Duration,
    max_response_size: usize,
    resolve: Vec<(String, SocketAddr)>,
}

impl fmt::Debug for ManagementOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagementOptions")
            .field("url", &self.url)
            .field("configured", &self.configured)
            .field("user", &self.user)
            .field("ca_file", &self.ca_file)
            .field("allow_insecure_http", &self.allow_insecure_http)
            .field("timeout", &self.timeout)
            .field("max_response_size", &self.max_response_size)
            .finish_non_exhaustive()
    }
}

impl ManagementOptions {
    /// The API at `url` (`http(s)://host[:port][/prefix]`), with `guest`/`guest`.
    pub fn new(url: impl Into<String>) -> ManagementOptions {
        ManagementOptions {
            url: strip_userinfo(url.into()),
            configured: true,
            user: "guest".to_owned(),
            password: "guest".to_owned(),
            ca_file: None,
            allow_insecure_http: false,
            timeout: DEFAULT_TIMEOUT,
            max_response_size: DEFAULT_MAX_RESPONSE,
            resolve: Vec::new(),
        }
    }

    /// The API of a broker as its AMQP options describe it: at `url`, which was
    /// `configured` explicitly or derived from the broker's address (see
    /// [`is_configured`](ManagementOptions::is_configured)), with the broker's `user` and
    /// `password`, and trusting an https API by the `ca_file` its AMQP port is trusted by,
    /// if any. The SDK's `amqp` feature builds these from `AmqpOptions`.
    pub fn for_broker(
        url: impl Into<String>,
        configured: bool,
        user: impl Into<String>,
        password: impl Into<String>,
        ca_file: Option<PathBuf>,
    ) -> ManagementOptions {
        let options = ManagementOptions::new(url)
            .credentials(user, password)
            .configured(configured);
        match ca_file {
            Some(ca_file) => options.ca_file(ca_file),
            None => options,
        }
    }

    /// The user name and password sent (basic auth).
    pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = user.into();
        self.password = password.into();
        self
    }

    /// Verifies an `https://` API against the CA certificates (PEM) in `path` only, instead
    /// of the system's roots.
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// Takes the `cacertfile` query parameter of an AMQP URL (`amqps://…?cacertfile=ca.pem`)
    /// as the [CA file](ManagementOptions::ca_file), unless one is set already: an https
    /// management API is then trusted as the broker's AMQP port is. A URL that does not parse
    /// or has no such parameter changes nothing.
    pub fn ca_file_from_amqp_url(self, amqp_url: &str) -> Self {
        if self.ca_file.is_some() {
            return self;
        }
        let ca_file = Url::parse(amqp_url.trim()).ok().and_then(|url| {
            url.query_pairs()
                .find(|(key, _)| key == "cacertfile")
                .map(|(_, value)| PathBuf::from(value.into_owned()))
        });
        match ca_file {
            Some(ca_file) => self.ca_file(ca_file),
            None => self,
        }
    }

    /// Allows sending the credentials over plain HTTP to a host that is not loopback (where
    /// anyone on the path can read them). Off by default.
    pub fn allow_insecure_http(mut self, allow: bool) -> Self {
        self.allow_insecure_http = allow;
        self
    }

    /// How long one request may take, connecting and reading the answer included
    /// (default 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The largest answer read, in bytes (default 64 MiB); a larger one is
    /// [`InvalidResponse`](super::ManagementErrorKind::InvalidResponse).
    pub fn max_response_size(mut self, bytes: usize) -> Self {
        self.max_response_size = bytes;
        self
    }

    /// Connects to `addr` for the host name `host` instead of resolving it (as
    /// `curl --resolve` does; the URL's port is still used). The host name is still the one
    /// TLS verifies and the credential rule judges (`localhost` pinned elsewhere is not
    /// loopback any more).
    pub fn resolve(mut self, host: impl Into<String>, addr: SocketAddr) -> Self {
        self.resolve.push((host.into().to_ascii_lowercase(), addr));
        self
    }

    /// Marks these options as configured or derived (see
    /// [`is_configured`](ManagementOptions::is_configured)).
    pub fn configured(mut self, configured: bool) -> Self {
        self.configured = configured;
        self
    }

    /// The URL, without any userinfo it was given with.
    pub fn get_url(&self) -> &str {
        &self.url
    }

    /// Whether the URL was given explicitly, rather than derived from the broker's address.
    /// The RabbitMQ transport, looking for stale bindings, contacts a derived URL only when
    /// its host is loopback.
    pub fn is_configured(&self) -> bool {
        self.configured
    }

    /// The user name.
    pub fn get_user(&self) -> &str {
        &self.user
    }

    /// The CA file, if set.
    pub fn get_ca_file(&self) -> Option<&Path> {
        self.ca_file.as_deref()
    }

    /// Whether credentials may go over plain HTTP to a host that is not loopback.
    pub fn get_allow_insecure_http(&self) -> bool {
        self.allow_insecure_http
    }

    /// The request timeout.
    pub fn get_timeout(&self) -> Duration {
        self.timeout
    }

    /// The largest answer read.
    pub fn get_max_response_size(&self) -> usize {
        self.max_response_size
    }

    pub(crate) fn get_password(&self) -> &str {
        &self.password
    }

    pub(crate) fn get_resolve(&self) -> &[(String, SocketAddr)] {
        &self.resolve
    }

    /// The parsed URL; `InvalidOptions` when it is not `http(s)://host…`. The error never
    /// quotes the URL (it may hold userinfo the caller typed).
    pub(crate) fn parse_url(&self) -> Result<Url, ManagementError> {
        let url = Url::parse(&self.url).map_err(|e| {
            ManagementError::new(
                ManagementErrorKind::InvalidOptions,
                "the management URL is not a URL",
            )
            .with_source(e)
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ManagementError::new(
                ManagementErrorKind::InvalidOptions,
                format!(
                    "the management URL's scheme `{}` is not http or https",
                    url.scheme()
                ),
            ));
        }
        if url.host().is_none() {
            return Err(ManagementError::new(
                ManagementErrorKind::InvalidOptions,
                "the management URL has no host",
            ));
        }
        Ok(url)
    }

    /// Whether the URL's host is loopback: a loopback IP, or `localhost` (or a name under
    /// it) not [pinned](ManagementOptions::resolve) to any address that is not loopback. A
    /// name pinned to a loopback address is judged by the name, as the rule is about what
    /// the URL says. `false` for a URL that does not parse.
    pub fn is_loopback(&self) -> bool {
        let Ok(url) = self.parse_url() else {
            return false;
        };
        match url.host() {
            Some(Host::Ipv4(ip)) => ip.is_loopback(),
            Some(Host::Ipv6(ip)) => ip.is_loopback(),
            Some(Host::Domain(name)) => {
                let name = name.to_ascii_lowercase();
                (name == "localhost" || name.ends_with(".localhost"))
                    && self
                        .resolve
                        .iter()
                        .filter(|(host, _)| *host == name)
                        .all(|(_, addr)| addr.ip().is_loopback())
            }
            None => false,
        }
    }

    /// Why credentials must not be sent, if they must not: plain HTTP to a host that is not
    /// loopback without the explicit opt-in.
    pub(crate) fn check_credential_policy(&self, url: &Url) -> Result<(), ManagementError> {
        if url.scheme() == "http" && !self.allow_insecure_http && !self.is_loopback() {
            return Err(ManagementError::new(
                ManagementErrorKind::Insecure,
                format!(
                    "refusing to send credentials in clear to the management API at {}: use \
                     https, or allow plain http explicitly",
                    shown(url)
                ),
            ));
        }
        Ok(())
    }
}

/// `scheme://host:port/prefix`, for messages (the stored URL has no userinfo).
pub(crate) fn shown(url: &Url) -> String {
    let mut shown = url.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    shown.as_str().trim_end_matches('/').to_owned()
}

/// The URL without userinfo; a URL that does not parse is kept as given (the client refuses
/// it, and no message quotes it).
fn strip_userinfo(url: String) -> String {
    match Url::parse(&url) {
        Ok(mut parsed) if !parsed.username().is_empty() || parsed.password().is_some() => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.into()
        }
        _ => url,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn userinfo_is_dropped_and_never_shown() {
        let options = ManagementOptions::new("https://admin:hunter2@rabbit:15671/api-prefix/")
            .credentials("mesh", "s3cret");
        assert_eq!(options.get_url(), "https://rabbit:15671/api-prefix/");
        let debug = format!("{options:?}");
        assert!(
            !debug.contains("hunter2") && !debug.contains("s3cret"),
            "{debug}"
        );
    }

    #[test]
    fn loopback_hosts_are_recognised() {
        for url in [
            "http://localhost:15672",
            "http://LOCALHOST",
            "http://rabbit.localhost",
            "http://127.0.0.1:15672",
            "http://127.8.9.10",
            "http://[::1]:15672",
        ] {
            assert!(ManagementOptions::new(url).is_loopback(), "{url}");
        }
        for url in [
            "http://rabbit:15672",
            "http://10.0.0.1",
            "http://[2001:db8::1]",
            "http://localhost.example.com",
            "not a url",
        ] {
            assert!(!ManagementOptions::new(url).is_loopback(), "{url}");
        }
    }

    #[test]
    fn a_pinned_name_is_judged_by_its_name() {
        let local: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let remote: SocketAddr = "192.0.2.1:0".parse().unwrap();
        assert!(!ManagementOptions::new("http://rabbit.example:15672")
            .resolve("Rabbit.Example", local)
            .is_loopback());
        assert!(ManagementOptions::new("http://localhost:15672")
            .resolve("localhost", local)
            .is_loopback());
        // Pinning `localhost` elsewhere makes it not loopback.
        assert!(!ManagementOptions::new("http://localhost:15672")
            .resolve("localhost", remote)
            .is_loopback());
    }

    #[test]
    fn credentials_go_in_clear_only_to_loopback_or_when_allowed() {
        let check = |options: ManagementOptions| {
            let url = options.parse_url().unwrap();
            options.check_credential_policy(&url).map_err(|e| e.kind())
        };
        assert_eq!(
            check(ManagementOptions::new("http://rabbit:15672")),
            Err(ManagementErrorKind::Insecure)
        );
        assert_eq!(
            check(ManagementOptions::new("http://rabbit:15672").allow_insecure_http(true)),
            Ok(())
        );
        assert_eq!(
            check(ManagementOptions::new("https://rabbit:15671")),
            Ok(())
        );
        assert_eq!(
            check(ManagementOptions::new("http://127.0.0.1:15672")),
            Ok(())
        );
    }

    #[test]
    fn for_broker_keeps_every_part() {
        let options = ManagementOptions::for_broker(
            "http://rabbit.example:15672",
            false,
            "u",
            "p",
            Some(PathBuf::from("/etc/ca.pem")),
        );
        assert_eq!(options.get_url(), "http://rabbit.example:15672");
        assert!(!options.is_configured());
        assert_eq!(options.get_user(), "u");
        assert_eq!(options.get_password(), "p");
        assert_eq!(options.get_ca_file(), Some(Path::new("/etc/ca.pem")));
        let configured =
            ManagementOptions::for_broker("http://rabbit.example:15672", true, "u", "p", None);
        assert!(configured.is_configured());
        assert_eq!(configured.get_ca_file(), None);
    }

    #[test]
    fn the_amqp_urls_cacertfile_is_the_default_ca() {
        let amqp = "amqps://u:p@h:5671/%2F?cacertfile=%2Fetc%2Fca.pem&verify=verify_peer";
        let options = ManagementOptions::new("https://h:15671").ca_file_from_amqp_url(amqp);
        assert_eq!(options.get_ca_file(), Some(Path::new("/etc/ca.pem")));
        let given = ManagementOptions::new("https://h:15671")
            .ca_file("/mine.pem")
            .ca_file_from_amqp_url(amqp);
        assert_eq!(given.get_ca_file(), Some(Path::new("/mine.pem")));
        for url in ["amqp://h", "not a url"] {
            let none = ManagementOptions::new("https://h").ca_file_from_amqp_url(url);
            assert_eq!(none.get_ca_file(), None);
        }
    }

    #[test]
    fn bad_urls_are_typed_errors_that_do_not_quote_the_url() {
        for url in ["ftp://u:pw@h", "rabbit:15672", "http://u:pw@", "::"] {
            let error = ManagementOptions::new(url).parse_url().unwrap_err();
            assert_eq!(error.kind(), ManagementErrorKind::InvalidOptions, "{url}");
            assert!(!error.to_string().contains("pw"), "{error}");
        }
    }
}
