//! [`AmqpOptions`] as a URL: parsed from `amqp://` and `amqps://` ([`FromStr`]), written
//! without the password for logs ([`Display`](fmt::Display)), and a URL kept as text
//! redacted ([`redact_url`]). No error quotes a part of the URL that may hold a password.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use mesh_core::TransportError;

use crate::tls::{TlsOptions, TlsVerify};

use super::builder::{invalid, AmqpOptions, BrokerAddress, DEFAULT_PORT};

const DEFAULT_TLS_PORT: u16 = 5671;

impl fmt::Display for AmqpOptions {
    /// The URL without the password nor the TLS parameters, for logs:
    /// `amqp://user@h1:5672,h2:5672/vhost` (`amqps://` with TLS).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls.is_some() { "amqps" } else { "amqp" };
        write!(f, "{scheme}://{}@", percent_encode(&self.user))?;
        for (i, address) in self.addresses.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{address}")?;
        }
        write!(f, "/{}", percent_encode(&self.vhost))
    }
}

impl FromStr for AmqpOptions {
    type Err = TransportError;

    /// Parses an `amqp://` or `amqps://` URL; see the [type's docs](AmqpOptions#url-syntax).
    ///
    /// No error quotes the user information or anything that may be part of a password.
    fn from_str(url: &str) -> Result<Self, Self::Err> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| invalid("not an amqp:// URL (no `://`)"))?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "amqp" => false,
            "amqps" => true,
            // Not quoted: a mistyped URL may start with anything.
            _ => return Err(invalid("the scheme is neither amqp nor amqps")),
        };
        // The authority ends at the first `/`, `?` or `#`. An `@` after that means the user
        // information holds one of them unescaped: refuse, quoting nothing, as the pieces
        // are parts of the password.
        let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        if !rest[..authority_end].contains('@') && rest[authority_end..].contains('@') {
            return Err(invalid(
                "the URL holds an `@` after its host part: a password holding `/`, `?` or `#` \
                 must percent-encode them (and a vhost or parameter holding `@` must write %40)",
            ));
        }
        if rest.contains('#') {
            return Err(invalid("a URL fragment (`#`) is not allowed"));
        }
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        let (authority, path) = match rest.split_once('/') {
            Some((authority, path)) => (authority, path),
            None => (rest, ""),
        };
        let mut options = AmqpOptions::default();
        let default_port = if tls { DEFAULT_TLS_PORT } else { DEFAULT_PORT };
        let mut tls_options = TlsOptions::new();
        let mut tls_parameters = false;

        let hosts = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => {
                let (user, password) = match userinfo.split_once(':') {
                    Some((user, password)) => (user, password),
                    None => (userinfo, ""),
                };
                options.user = percent_decode(user, "user")?;
                options.password = percent_decode(password, "password")?;
                hosts
            }
            None => authority,
        };
        options.addresses = hosts
            .split(',')
            .map(|host| parse_address(host, default_port))
            .collect::<Result<_, _>>()?;

        options.vhost = if path.is_empty() {
            "/".to_owned()
        } else if path.contains('/') {
            return Err(invalid(
                "the vhost contains `/`; write it percent-encoded as %2F",
            ));
        } else {
            percent_decode(path, "vhost")?
        };

        if let Some(query) = query.filter(|q| !q.is_empty()) {
            for pair in query.split('&') {
                let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
                match key {
                    "heartbeat" => {
                        let secs: u64 = value.parse().map_err(|_| {
                            invalid(format!("heartbeat `{value}` is not a number of seconds"))
                        })?;
                        options.heartbeat = Duration::from_secs(secs);
                    }
                    "connection_timeout" => {
                        let ms: u64 = value.parse().map_err(|_| {
                            invalid(format!(
                                "connection_timeout `{value}` is not a number of milliseconds"
                            ))
                        })?;
                        options.connect_timeout = Duration::from_millis(ms);
                    }
                    "cacertfile" => {
                        tls_options = tls_options.ca_file(file_parameter(key, value)?);
                        tls_parameters = true;
                    }
                    "certfile" => {
                        tls_options.set_cert_file(file_parameter(key, value)?);
                        tls_parameters = true;
                    }
                    "keyfile" => {
                        tls_options.set_key_file(file_parameter(key, value)?);
                        tls_parameters = true;
                    }
                    "verify" => {
                        let verify = match value {
                            "verify_peer" => TlsVerify::Peer,
                            "verify_none" => TlsVerify::None,
                            other => {
                                return Err(invalid(format!(
                                    "verify `{other}` is neither `verify_peer` nor `verify_none`"
                                )))
                            }
                        };
                        tls_options = tls_options.verify(verify);
                        tls_parameters = true;
                    }
                    "auth_mechanism" => {
                        options.auth_mechanism = value.parse()?;
                    }
                    "server_name_indication" => {
                        let name = percent_decode(value, "server_name_indication")?;
                        crate::tls::server_name(&name)?;
                        tls_options = tls_options.server_name(name);
                        tls_parameters = true;
                    }
                    other => {
                        return Err(invalid(format!(
                            "unsupported URL parameter `{other}` (supported: heartbeat, \
                             connection_timeout, auth_mechanism, cacertfile, certfile, keyfile, \
                             verify, server_name_indication)"
                        )))
                    }
                }
            }
        }
        if tls {
            options.tls = Some(tls_options);
        } else if tls_parameters {
            return Err(invalid(
                "tls parameters (cacertfile, certfile, keyfile, verify, \
                 server_name_indication) need an amqps:// URL",
            ));
        }
        options.validate()?;
        Ok(options)
    }
}

/// `url` with everything between `://` and its last `@` (the user information) replaced by
/// `<redacted>`, without parsing it: for the `Debug` of a URL kept as text, which may be
/// malformed (a password holding an unescaped `/`, `?` or `#` still ends at the last `@`).
///
/// ```
/// assert_eq!(
///     mesh_amqp::redact_url("amqps://u:pa/ss@h:5671/v"),
///     "amqps://<redacted>@h:5671/v"
/// );
/// assert_eq!(mesh_amqp::redact_url("amqp://h/v"), "amqp://h/v");
/// ```
pub fn redact_url(url: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    match url.rfind('@') {
        Some(at) if at >= start => format!("{}<redacted>{}", &url[..start], &url[at..]),
        _ => url.to_owned(),
    }
}

/// A file path given as a URL parameter, percent-decoded.
fn file_parameter(key: &str, value: &str) -> Result<PathBuf, TransportError> {
    let path = percent_decode(value, key)?;
    if path.is_empty() {
        return Err(invalid(format!("{key} is empty")));
    }
    Ok(PathBuf::from(path))
}

fn parse_address(text: &str, default_port: u16) -> Result<BrokerAddress, TransportError> {
    let text = text.trim();
    let (host, port) = if let Some(end) = text.find(']') {
        if !text.starts_with('[') {
            return Err(invalid(format!("address `{text}` has a stray `]`")));
        }
        let host = &text[..=end];
        match &text[end + 1..] {
            "" => (host, None),
            rest => match rest.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return Err(invalid(format!("address `{text}` is malformed"))),
            },
        }
    } else {
        match text.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    if host.is_empty() {
        return Err(invalid(format!("address `{text}` has no host")));
    }
    let port = match port {
        None | Some("") => default_port,
        Some(port) => port
            .parse()
            .map_err(|_| invalid(format!("port `{port}` of address `{text}` is not a port")))?,
    };
    Ok(BrokerAddress::new(percent_decode(host, "host")?, port))
}

/// Percent-decodes URL text, refusing a malformed escape (a `%` not followed by two hex
/// digits, which the decoder would pass through as it is) or a result that is not UTF-8.
fn percent_decode(text: &str, what: &str) -> Result<String, TransportError> {
    let malformed = text.match_indices('%').any(|(at, _)| {
        !text
            .as_bytes()
            .get(at + 1..at + 3)
            .is_some_and(|hex| hex.iter().all(u8::is_ascii_hexdigit))
    });
    if malformed {
        return Err(invalid(format!("the {what} has a malformed %-escape")));
    }
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(std::borrow::Cow::into_owned)
        .map_err(|_| invalid(format!("the {what} is not UTF-8")))
}

/// Everything but RFC 3986's unreserved characters: what a URL's user, vhost or path
/// segment percent-encodes, so the vhost `/` is `%2F` and a pattern's `#` is `%23`.
pub(crate) const UNRESERVED_COMPLEMENT: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC
        .remove(b'-')
        .remove(b'.')
        .remove(b'_')
        .remove(b'~');

/// Percent-encodes everything but RFC 3986's unreserved characters.
pub(crate) fn percent_encode(text: &str) -> String {
    percent_encoding::utf8_percent_encode(text, UNRESERVED_COMPLEMENT).to_string()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use mesh_core::TransportErrorKind;

    use super::*;

    fn parse(url: &str) -> AmqpOptions {
        url.parse().unwrap()
    }

    fn refused(url: &str) -> String {
        let err = url.parse::<AmqpOptions>().unwrap_err();
        assert_eq!(err.kind(), &TransportErrorKind::InvalidOptions, "{url}");
        err.to_string()
    }

    #[test]
    fn parses_a_single_node_url() {
        let o = parse("amqp://mesh:s3cret@rabbit.local:5673/prod");
        assert_eq!(
            o.get_addresses(),
            &[BrokerAddress::new("rabbit.local", 5673)]
        );
        assert_eq!((o.get_user(), o.get_password()), ("mesh", "s3cret"));
        assert_eq!(o.get_vhost(), "prod");
        assert_eq!(
            o.get_management_url().as_deref(),
            Some("http://rabbit.local:15672")
        );
    }

    #[test]
    fn vhost_is_percent_decoded_and_defaults_to_slash() {
        assert_eq!(parse("amqp://h/%2F").get_vhost(), "/");
        assert_eq!(parse("amqp://h/").get_vhost(), "/");
        assert_eq!(parse("amqp://h").get_vhost(), "/");
        assert_eq!(parse("amqp://h/a%2Fb%20c").get_vhost(), "a/b c");
        assert!(refused("amqp://h/a/b").contains("%2F"));
        assert!(refused("amqp://h/%zz").contains("malformed"));
    }

    #[test]
    fn parses_cluster_addresses() {
        let o = parse("amqp://u:p@h1:5672,h2:5673,h3/v");
        assert_eq!(
            o.get_addresses(),
            &[
                BrokerAddress::new("h1", 5672),
                BrokerAddress::new("h2", 5673),
                BrokerAddress::new("h3", 5672)
            ]
        );
        let o = parse("amqp://[::1]:5673,[fe80::1]/v");
        assert_eq!(
            o.get_addresses(),
            &[
                BrokerAddress::new("[::1]", 5673),
                BrokerAddress::new("[fe80::1]", 5672)
            ]
        );
    }

    #[test]
    fn credentials_default_to_guest_and_are_decoded() {
        let o = parse("amqp://localhost");
        assert_eq!((o.get_user(), o.get_password()), ("guest", "guest"));
        let o = parse("amqp://me%40corp:p%3Ass@h/v");
        assert_eq!((o.get_user(), o.get_password()), ("me@corp", "p:ss"));
    }

    #[test]
    fn refuses_what_cannot_work() {
        assert!(refused("http://h/v").contains("scheme"));
        assert!(refused("h:5672").contains("://"));
        assert!(refused("amqp://h:99999/v").contains("port"));
        assert!(refused("amqp://u:p@/v").contains("no host"));
        assert!(refused("amqp://h,,h2/v").contains("no host"));
        assert!(refused("amqp://h/v?frame_max=1").contains("frame_max"));
        assert!(refused(&format!("amqp://h/{}", "v".repeat(256))).contains("255"));
    }

    #[test]
    fn query_parameters() {
        let o = parse("amqp://h/v?heartbeat=3&connection_timeout=1500");
        assert_eq!(o.get_heartbeat(), Duration::from_secs(3));
        assert_eq!(o.get_connect_timeout(), Duration::from_millis(1500));
    }

    #[test]
    fn debug_and_display_hide_the_password() {
        let o = parse("amqp://u:hunter2@h/v");
        assert!(!format!("{o:?}").contains("hunter2"));
        assert!(!o.to_string().contains("hunter2"));
        assert_eq!(o.to_string(), "amqp://u@h:5672/v");
    }

    /// A directory of PEM files for the TLS tests: a CA, and a client certificate and key.
    struct Files(std::path::PathBuf);

    impl Files {
        fn new(label: &str) -> Files {
            let dir = std::env::temp_dir()
                .join(format!("mesh-amqp-options-{label}-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            // A self-signed certificate and its key (ECDSA P-256), generated once for these
            // tests; as a CA it only has to parse.
            std::fs::write(dir.join("ca.pem"), TEST_CERT).unwrap();
            std::fs::write(dir.join("client.pem"), TEST_CERT).unwrap();
            std::fs::write(dir.join("client.key"), TEST_KEY).unwrap();
            std::fs::write(dir.join("garbage.pem"), "not pem at all").unwrap();
            Files(dir)
        }

        fn path(&self, file: &str) -> String {
            self.0.join(file).display().to_string()
        }
    }

    impl Drop for Files {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    const TEST_CERT: &str = include_str!("../../tests/data/self-signed.pem");
    const TEST_KEY: &str = include_str!("../../tests/data/self-signed.key");

    #[test]
    fn amqps_defaults_to_port_5671_and_verify_peer() {
        let files = Files::new("port");
        let o = parse(&format!(
            "amqps://u:p@h1,h2:7000/v?cacertfile={}",
            files.path("ca.pem")
        ));
        assert_eq!(
            o.get_addresses(),
            &[
                BrokerAddress::new("h1", 5671),
                BrokerAddress::new("h2", 7000)
            ]
        );
        let tls = o.get_tls().unwrap();
        assert_eq!(tls.get_verify(), TlsVerify::Peer);
        assert_eq!(tls.get_ca_file(), Some(Path::new(&files.path("ca.pem"))));
        assert_eq!(tls.get_server_name(), None);
        assert_eq!(o.to_string(), "amqps://u@h1:5671,h2:7000/v");
        assert_eq!(o.get_management_url().as_deref(), Some("https://h1:15671"));
        assert!(parse("amqp://h").get_tls().is_none());
    }

    #[test]
    fn parses_every_tls_parameter() {
        let files = Files::new("params");
        let o = parse(&format!(
            "amqps://h/v?cacertfile={}&certfile={}&keyfile={}&verify=verify_none&\
             server_name_indication=rabbit.internal&heartbeat=2",
            files.path("ca.pem"),
            files.path("client.pem"),
            files.path("client.key"),
        ));
        let tls = o.get_tls().unwrap();
        assert_eq!(tls.get_verify(), TlsVerify::None);
        assert_eq!(tls.get_server_name(), Some("rabbit.internal"));
        assert_eq!(
            tls.get_cert_file(),
            Some(Path::new(&files.path("client.pem")))
        );
        assert_eq!(
            tls.get_key_file(),
            Some(Path::new(&files.path("client.key")))
        );
        assert_eq!(o.get_heartbeat(), Duration::from_secs(2));
        // Percent-decoded paths.
        let encoded = files.path("ca.pem").replace('/', "%2F");
        let o = parse(&format!("amqps://h/v?cacertfile={encoded}"));
        assert_eq!(
            o.get_tls().unwrap().get_ca_file(),
            Some(Path::new(&files.path("ca.pem")))
        );
    }

    #[test]
    fn auth_mechanism_external_needs_a_client_certificate() {
        use crate::AuthMechanism;
        let files = Files::new("external");
        let o = parse(&format!(
            "amqps://h/v?auth_mechanism=external&certfile={}&keyfile={}",
            files.path("client.pem"),
            files.path("client.key"),
        ));
        assert_eq!(o.get_auth_mechanism(), AuthMechanism::External);
        assert_eq!(parse("amqp://h").get_auth_mechanism(), AuthMechanism::Plain);
        assert_eq!(
            parse("amqp://h?auth_mechanism=plain").get_auth_mechanism(),
            AuthMechanism::Plain
        );
        for url in [
            "amqp://h/v?auth_mechanism=external".to_owned(),
            format!(
                "amqps://h/v?auth_mechanism=external&cacertfile={}",
                files.path("ca.pem")
            ),
        ] {
            assert!(refused(&url).contains("client certificate"), "{url}");
        }
        assert!(refused("amqp://h?auth_mechanism=cr-demo").contains("auth_mechanism"));
        // A password file is not read for a certificate login.
        let o = o.password_file(files.path("missing-password"));
        assert!(o.validate().is_ok());
    }

    #[test]
    fn refuses_bad_tls_parameters() {
        let files = Files::new("bad");
        let ca = files.path("ca.pem");
        assert!(refused(&format!("amqps://h/v?cacertfile={ca}&verify=maybe")).contains("maybe"));
        let missing = files.path("missing.pem");
        let text = refused(&format!("amqps://h/v?cacertfile={missing}"));
        assert!(
            text.contains("cannot read the CA file") && text.contains("missing.pem"),
            "{text}"
        );
        let text = refused(&format!(
            "amqps://h/v?cacertfile={}",
            files.path("garbage.pem")
        ));
        assert!(
            text.contains("holds no certificate") && text.contains("garbage.pem"),
            "{text}"
        );
        let text = refused(&format!(
            "amqps://h/v?cacertfile={ca}&certfile={}",
            files.path("client.pem")
        ));
        assert!(text.contains("keyfile"), "{text}");
        let text = refused(&format!(
            "amqps://h/v?cacertfile={ca}&certfile={}&keyfile={}",
            files.path("client.pem"),
            files.path("garbage.pem")
        ));
        assert!(
            text.contains("no PEM private key") && text.contains("garbage.pem"),
            "{text}"
        );
        assert!(refused(&format!("amqp://h/v?cacertfile={ca}")).contains("amqps"));
        assert!(refused(&format!(
            "amqps://h/v?cacertfile={ca}&server_name_indication=a%20b"
        ))
        .contains("server name"));
        assert!(refused("amqps://h/v?cacertfile=").contains("empty"));
        // The builder checks the same at validation.
        let o = AmqpOptions::new().tls(TlsOptions::new().ca_file(&missing));
        assert_eq!(
            o.validate().unwrap_err().kind(),
            &TransportErrorKind::InvalidOptions
        );
    }

    #[test]
    fn no_error_quotes_a_password() {
        for (url, secret) in [
            ("amqp://u:s3cr/et9@h/v", ["s3cr", "et9@h"]),
            ("amqp://u:s3cr?et9@h/v", ["s3cr", "et9@h"]),
            ("amqp://u:s3cr#et9@h/v", ["s3cr", "et9@h"]),
            ("amqp://u:s3cr%zzet9@h/v", ["s3cr", "zzet9"]),
            ("htp://u:s3cret9@h/v", ["s3cr", "u:s3"]),
            ("amqp://u:s3cr/et9@h:notaport/v", ["s3cr", "et9@h"]),
        ] {
            let err = url.parse::<AmqpOptions>().unwrap_err();
            let shown = format!("{err} {err:?} {:?}", std::error::Error::source(&err));
            for s in secret {
                assert!(!shown.contains(s), "{url}: {shown}");
            }
        }
        // A password holding every reserved character works when percent-encoded.
        let o = parse("amqp://u:a%2Fb%3Fc%40d%23e%25f@h/v");
        assert_eq!(o.get_password(), "a/b?c@d#e%f");
        let shown = format!("{o} {o:?}");
        assert!(
            !shown.contains("a/b") && !shown.contains("a%2Fb"),
            "{shown}"
        );
    }

    #[test]
    fn urls_as_text_are_redacted() {
        for (url, shown) in [
            ("amqp://u:s3cret@h/v", "amqp://<redacted>@h/v"),
            ("amqp://u:s3/c?r#et@h/v", "amqp://<redacted>@h/v"),
            ("u:s3cret@h", "<redacted>@h"),
            ("amqp://h:5672/v", "amqp://h:5672/v"),
            ("", ""),
        ] {
            assert_eq!(redact_url(url), shown);
        }
    }

    #[test]
    fn the_password_file_is_read_at_every_load() {
        let files = Files::new("password");
        let path = files.0.join("password");
        std::fs::write(&path, "first\n").unwrap();
        let o = parse("amqp://u:inline@h/v").password_file(&path);
        assert!(o.validate().is_ok());
        assert_eq!(o.load_password().unwrap(), "first");
        std::fs::write(&path, "second\r\n").unwrap();
        assert_eq!(o.load_password().unwrap(), "second");
        assert!(!format!("{o:?}").contains("second"));
        std::fs::write(&path, "").unwrap();
        assert!(o.load_password().unwrap_err().to_string().contains("empty"));
        std::fs::remove_file(&path).unwrap();
        let err = o.validate().unwrap_err();
        assert!(err.to_string().contains("password file"), "{err}");
        assert_eq!(
            parse("amqp://u:inline@h").load_password().unwrap(),
            "inline"
        );
    }
}
