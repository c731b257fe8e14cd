//! From the global options to a broker connection, a node name and a management client;
//! and the config file of named contexts that fills in what the command line and the
//! environment leave unset.
//!
//! # The config file
//!
//! `MESH_CONFIG`, else `$XDG_CONFIG_HOME/mesh/config.toml`, else
//! `~/.config/mesh/config.toml`; a missing file is no contexts (unless `MESH_CONFIG` names
//! it or a context is asked for). TOML:
//!
//! ```toml
//! current-context = "prod"            # optional: the context used without --context
//!
//! [contexts.prod]
//! url = "amqps://mesh@rabbit.prod/prod"
//! cacertfile = "prod/ca.pem"          # TLS files, added to the url's parameters (amqps)
//! certfile = "prod/client.pem"
//! keyfile = "prod/client.key"
//! password-file = "prod/password"     # never a password itself
//! node = "anchor"
//! store = "postgres://audit@db.prod/audit"
//! management-url = "https://rabbit.prod:15671"
//! management-ca-file = "prod/ca.pem"
//! queue-type = "classic"
//! connect-timeout = "10s"
//! ```
//!
//! Every key of a context is optional; relative paths are relative to the file's directory.
//! The context is `--context NAME`, else `MESH_CONTEXT`, else `current-context`, else none.
//! Each setting is then taken from the first of: its flag, its `MESH_*` variable, the
//! context, its default (`MESH_PASSWORD` beats a context's `password-file`). The context's
//! TLS files belong to its `url`: a `--url` given instead does not get them.
//!
//! A password never sits in the file: a `password` key, or a `url`, `management-url` or
//! `store` with a password in it, is refused (use `password-file` or `MESH_PASSWORD`; for
//! PostgreSQL `~/.pgpass` or `PGPASSWORD`). A file that cannot be read or parsed, an unknown
//! key or context, a value of the wrong kind: a usage error (exit code 2) naming the file
//! and the line.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use mesh::amqp::management::{ManagementClient, ManagementOptions};
use mesh::amqp::{AmqpOptions, QueueType};
use mesh::raw::Transport;
use mesh::raw::{Name, TransportErrorKind};

use crate::cli::{parse_duration, EnvPassword, Global, QueueTypeArg};
use crate::exit::{fail, Code, WithCode};
use crate::management::Management;

/// The broker when no flag, variable or context names one.
pub(crate) const DEFAULT_URL: &str = "amqp://127.0.0.1:5672";
/// `--connect-timeout` when nothing sets it.
pub(crate) const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The variable naming the config file.
pub(crate) const CONFIG_ENV: &str = "MESH_CONFIG";
/// The largest event body `mesh emit` reads from a file or stdin: far above any sensible
/// event, and a bound on what a wrong path (a device, a log, an endless pipe) can make the
/// tool hold.
pub(crate) const MAX_BODY_FILE: u64 = 16 * 1024 * 1024;
/// `options` with the password of a password file (which wins) or of the environment; the
/// file is read now (a missing or empty one is an error naming it) and again at every
/// connect.
fn with_password(
    options: AmqpOptions,
    password: &EnvPassword,
    password_file: Option<&Path>,
) -> Result<AmqpOptions, mesh::raw::TransportError> {
    match (password_file, password.get()) {
        (Some(path), _) => {
            let options = options.password_file(path);
            // Also as the plain password, for what reads it once (the management API).
            let now = options.load_password()?;
            Ok(options.password(now))
        }
        (None, Some(password)) => Ok(options.password(password)),
        (None, None) => Ok(options),
    }
}

/// The broker URL: `--url`, `MESH_URL`, the context's, or [`DEFAULT_URL`].
pub(crate) fn url(global: &Global) -> &str {
    global.url.as_deref().unwrap_or(DEFAULT_URL)
}

/// `--connect-timeout`, `MESH_CONNECT_TIMEOUT`, the context's, or 5 s.
pub(crate) fn connect_timeout(global: &Global) -> Duration {
    global.connect_timeout.unwrap_or(DEFAULT_CONNECT_TIMEOUT)
}

/// The prefix of the CLI's connection names (`mesh-cli.publish`, `mesh-cli.consume`), so an
/// operator can tell them apart from services' connections.
const CONNECTION_NAME: &str = "mesh-cli";

/// The AMQP options from `--url`/`MESH_URL`, the password of `--password-file` or
/// `MESH_PASSWORD`, and `--connect-timeout`; a bad URL, or a password file that cannot be
/// read, is a usage error. No message quotes the URL's password.
pub(crate) fn amqp_options(global: &Global) -> anyhow::Result<AmqpOptions> {
    let options: AmqpOptions = url(global).trim().parse().coded(Code::Usage, || {
        "invalid --url (or MESH_URL, or the context's url)".to_owned()
    })?;
    let options = with_password(options, &global.password, global.password_file.as_deref()).coded(
        Code::Usage,
        || {
            "invalid --password-file (or MESH_PASSWORD_FILE, or the context's password-file)"
                .to_owned()
        },
    )?;
    let mut options = options
        .connect_timeout(connect_timeout(global))
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
    match mesh::amqp::connect(options).await {
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
            let refused = mesh::amqp::ConnectRefused::of(&error).cloned();
            let message = match error.kind() {
                // Says which user and vhost itself; the chain adds the broker's words.
                TransportErrorKind::AccessRefused if refused.is_some() => {
                    format!("cannot connect to the broker at {shown}")
                }
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
            let hint = match refused {
                Some(mesh::amqp::ConnectRefused::Login { .. }) => Some(
                    "check the user and password of --url (or MESH_URL, or the password file)"
                        .to_owned(),
                ),
                Some(mesh::amqp::ConnectRefused::Vhost { .. }) => Some(
                    "check the vhost of --url (or MESH_URL) and the user's permissions on it"
                        .to_owned(),
                ),
                Some(mesh::amqp::ConnectRefused::Mechanism { .. }) => Some(
                    "a certificate login (auth_mechanism=external) needs the broker's plugin \
                     rabbitmq_auth_mechanism_ssl, EXTERNAL in its auth_mechanisms, and a \
                     client certificate it accepts"
                        .to_owned(),
                ),
                _ => None,
            };
            Err(anyhow::Error::new(error).context(crate::exit::Coded {
                code,
                message,
                hint,
            }))
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
        None => mesh::amqp::management_options(options).ok_or_else(|| {
            crate::exit::fail(
                Code::Usage,
                "no broker address to derive the management URL from",
            )
        })?,
    }
    .timeout(connect_timeout(global).max(Duration::from_secs(30)))
    .allow_insecure_http(global.management_allow_http)
    .configured(true);
    if let Some(ca_file) = &global.management_ca_file {
        management = management.ca_file(ca_file);
    }
    Ok(management.ca_file_from_amqp_url(url(global)))
}

/// The management API of the audit logger's transport, which removes stale bindings of the
/// logger's queues with it: `--management-url` as for every command; without it the API
/// of the broker's first host, asked only when that host is loopback (`None`: no address).
pub(crate) fn logger_management(
    global: &Global,
    options: &AmqpOptions,
) -> anyhow::Result<Option<ManagementOptions>> {
    if global.management_url.is_some() {
        return management_options(global, options).map(Some);
    }
    Ok(mesh::amqp::management_options(options).map(|management| {
        let management = management.allow_insecure_http(global.management_allow_http);
        match &global.management_ca_file {
            Some(ca_file) => management.ca_file(ca_file),
            None => management,
        }
        .ca_file_from_amqp_url(url(global))
    }))
}

/// The settings of the chosen context, paths made absolute.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Context {
    url: Option<String>,
    password_file: Option<PathBuf>,
    node: Option<String>,
    store: Option<String>,
    management_url: Option<String>,
    management_ca_file: Option<PathBuf>,
    queue_type: Option<QueueTypeArg>,
    connect_timeout: Option<Duration>,
}

/// Fills in, from the chosen context of the config file, every setting that neither a flag
/// nor a `MESH_*` variable gave. A bad file, or a context that is asked for and not there,
/// is a usage error naming the file (and the line).
pub(crate) fn apply_context(global: &mut Global) -> anyhow::Result<()> {
    let Some(context) = load_context(global.context.as_deref())? else {
        return Ok(());
    };
    fill(&mut global.url, context.url);
    // MESH_PASSWORD beats the context's password file (a flag's or MESH_PASSWORD_FILE's
    // file beats MESH_PASSWORD, as without a context).
    if global.password.get().is_none() {
        fill(&mut global.password_file, context.password_file);
    }
    fill(&mut global.node, context.node);
    fill(&mut global.management_url, context.management_url);
    fill(&mut global.management_ca_file, context.management_ca_file);
    fill(&mut global.queue_type, context.queue_type);
    fill(&mut global.connect_timeout, context.connect_timeout);
    global.context_store = context.store;
    Ok(())
}

fn fill<T>(slot: &mut Option<T>, value: Option<T>) {
    if slot.is_none() {
        *slot = value;
    }
}

/// The text of a settings file (the config file, a spec, a contract export), read as every
/// file a user names is ([`mesh_files`]): at most [`mesh_files::MAX_SETTINGS`] bytes, a FIFO
/// or device within [`mesh_files::DEADLINE`], UTF-8.
pub(crate) fn read_settings_file(path: &Path) -> Result<String, mesh_files::FileError> {
    mesh_files::read_bounded_text(path, mesh_files::MAX_SETTINGS, mesh_files::DEADLINE)
}

/// The text of a file of secrets (the console's token file, the access plan's passwords
/// file): as [`read_settings_file`], at most [`mesh_files::MAX_SECRETS`] bytes.
pub(crate) fn read_secrets_file(path: &Path) -> Result<String, mesh_files::FileError> {
    mesh_files::read_bounded_text(path, mesh_files::MAX_SECRETS, mesh_files::DEADLINE)
}

/// All of `reader` (a stream, not a file: stdin) as text, refused (`InvalidData`) beyond
/// `max` bytes (at most `max + 1` are read) or when it is not UTF-8.
pub(crate) fn read_bounded(reader: impl std::io::Read, max: u64) -> std::io::Result<String> {
    use std::io::Read as _;
    let mut text = String::new();
    reader
        .take(max.saturating_add(1))
        .read_to_string(&mut text)?;
    if text.len() as u64 > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {} MiB", max / (1024 * 1024)),
        ));
    }
    Ok(text)
}

/// The config file's path, and whether `MESH_CONFIG` named it.
fn config_path() -> Option<(PathBuf, bool)> {
    if let Some(path) = std::env::var_os(CONFIG_ENV).filter(|p| !p.is_empty()) {
        return Some((PathBuf::from(path), true));
    }
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|dir| dir.is_absolute())
        .or_else(|| dirs::home_dir().map(|home| home.join(".config")))?;
    Some((base.join("mesh").join("config.toml"), false))
}

/// The context `asked` (or the file's current one) from the config file, if any.
fn load_context(asked: Option<&str>) -> anyhow::Result<Option<Context>> {
    let Some((path, named)) = config_path() else {
        return match asked {
            Some(name) => Err(fail(
                Code::Usage,
                format!(
                    "no config file to take the context `{name}` from (no home directory): set \
                     {CONFIG_ENV}"
                ),
            )),
            None => Ok(None),
        };
    };
    let text = match read_settings_file(&path) {
        Ok(text) => text,
        Err(e) if e.is_not_found() && !named && asked.is_none() => return Ok(None),
        Err(e) => {
            let why = match asked {
                Some(name) => format!("the config file to take the context `{name}` from"),
                None => format!("the config file {CONFIG_ENV} names"),
            };
            return Err(e).coded(Code::Usage, || {
                format!("cannot read {why}, {}", path.display())
            });
        }
    };
    parse_context(&path, &text, asked)
}

/// The config file as written.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ConfigFile {
    current_context: Option<toml::Spanned<String>>,
    #[serde(default)]
    contexts: BTreeMap<String, ContextFile>,
}

/// One context as written (`Debug` shows no value of a `password` key: it is never kept).
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct ContextFile {
    url: Option<toml::Spanned<String>>,
    cacertfile: Option<PathBuf>,
    certfile: Option<PathBuf>,
    keyfile: Option<PathBuf>,
    password_file: Option<PathBuf>,
    /// Refused when present: read only to say so, at its line.
    password: Option<toml::Spanned<serde::de::IgnoredAny>>,
    node: Option<String>,
    store: Option<toml::Spanned<String>>,
    management_url: Option<toml::Spanned<String>>,
    management_ca_file: Option<PathBuf>,
    queue_type: Option<QueueTypeArg>,
    connect_timeout: Option<toml::Spanned<String>>,
}

/// A usage error about the config file at `path`, at the line of `span` when known.
fn file_error(
    path: &Path,
    text: &str,
    span: Option<std::ops::Range<usize>>,
    message: impl fmt::Display,
) -> anyhow::Error {
    let location = match span {
        Some(span) => {
            let line = text
                .get(..span.start.min(text.len()))
                .map_or(1, |before| before.matches('\n').count() + 1);
            format!("{}:{line}", path.display())
        }
        None => path.display().to_string(),
    };
    fail(
        Code::Usage,
        format!("bad config file {location}: {message}"),
    )
}

/// Whether a URL carries a password (`scheme://user:password@host…`).
fn has_password(url: &str) -> bool {
    let Some((_, rest)) = url.split_once("://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    authority
        .rsplit_once('@')
        .is_some_and(|(userinfo, _)| userinfo.contains(':'))
}

/// `value` percent-encoded for a URL's query (every byte but unreserved ones and `/`).
fn query_value(value: &str) -> String {
    let mut encoded = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            encoded.push(char::from(byte));
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// The context `asked`, else the file's `current-context`, from the text of the file at
/// `path`; `None` when neither names one.
fn parse_context(path: &Path, text: &str, asked: Option<&str>) -> anyhow::Result<Option<Context>> {
    let file: ConfigFile =
        toml::from_str(text).map_err(|e| file_error(path, text, e.span(), e.message()))?;
    let (name, span) = match (asked, &file.current_context) {
        (Some(name), _) => (name.to_owned(), None),
        (None, Some(current)) => (current.get_ref().clone(), Some(current.span())),
        (None, None) => return Ok(None),
    };
    let Some(written) = file.contexts.get(&name) else {
        let known: Vec<&str> = file.contexts.keys().map(String::as_str).collect();
        let known = if known.is_empty() {
            "none".to_owned()
        } else {
            known.join(", ")
        };
        return Err(file_error(
            path,
            text,
            span,
            format!("no context `{name}` (its contexts: {known})"),
        ));
    };
    let error = |span: std::ops::Range<usize>, message: String| {
        file_error(
            path,
            text,
            Some(span),
            format!("context `{name}`: {message}"),
        )
    };
    if let Some(password) = &written.password {
        return Err(error(
            password.span(),
            "a context holds no password: name a file holding it with password-file (readable \
             by this user only), or set MESH_PASSWORD"
                .to_owned(),
        ));
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    let absolute = |file: &PathBuf| -> PathBuf {
        match file.strip_prefix("~") {
            Ok(rest) => dirs::home_dir().map_or_else(|| file.clone(), |home| home.join(rest)),
            Err(_) => dir.join(file),
        }
    };
    for (key, value) in [
        ("url", &written.url),
        ("management-url", &written.management_url),
    ] {
        if let Some(value) = value.as_ref().filter(|v| has_password(v.get_ref())) {
            return Err(error(
                value.span(),
                format!(
                    "its {key} holds a password: leave it out, and name a file holding it with \
                     password-file, or set MESH_PASSWORD"
                ),
            ));
        }
    }
    if let Some(store) = written.store.as_ref().filter(|v| has_password(v.get_ref())) {
        return Err(error(
            store.span(),
            "its store holds a password: leave it out, and give it to PostgreSQL with \
             ~/.pgpass or PGPASSWORD"
                .to_owned(),
        ));
    }
    let mut url = written
        .url
        .as_ref()
        .map(|url| url.get_ref().trim().to_owned());
    let tls = [
        ("cacertfile", &written.cacertfile),
        ("certfile", &written.certfile),
        ("keyfile", &written.keyfile),
    ];
    for (key, file) in tls {
        let Some(file) = file else { continue };
        let Some(url) = url.as_mut() else {
            return Err(file_error(
                path,
                text,
                None,
                format!("context `{name}`: {key} belongs to the context's url, which it has not"),
            ));
        };
        let url_span = written.url.as_ref().map(toml::Spanned::span);
        if !url.starts_with("amqps://") {
            return Err(file_error(
                path,
                text,
                url_span,
                format!("context `{name}`: {key} needs an amqps:// url"),
            ));
        }
        if url.contains(&format!("{key}=")) {
            return Err(file_error(
                path,
                text,
                url_span,
                format!("context `{name}`: its url names {key} and so does the context: keep one"),
            ));
        }
        let file = absolute(file);
        let Some(file) = file.to_str() else {
            return Err(file_error(
                path,
                text,
                None,
                format!("context `{name}`: the path of its {key} is not UTF-8"),
            ));
        };
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(&format!("{key}={}", query_value(file)));
    }
    let connect_timeout = match &written.connect_timeout {
        Some(timeout) => Some(
            parse_duration(timeout.get_ref())
                .map_err(|message| error(timeout.span(), format!("connect-timeout: {message}")))?,
        ),
        None => None,
    };
    Ok(Some(Context {
        url,
        password_file: written.password_file.as_ref().map(absolute),
        node: written.node.clone(),
        store: written.store.as_ref().map(|store| store.get_ref().clone()),
        management_url: written
            .management_url
            .as_ref()
            .map(|url| url.get_ref().clone()),
        management_ca_file: written.management_ca_file.as_ref().map(absolute),
        queue_type: written.queue_type,
        connect_timeout,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settings_file_is_read_up_to_its_bound_and_refused_beyond() {
        let path = std::env::temp_dir().join(format!(
            "mesh-cli-settings-{}-{}.toml",
            std::process::id(),
            rand::random::<u64>()
        ));
        let at_bound = usize::try_from(mesh_files::MAX_SETTINGS).expect("a small bound");
        std::fs::write(&path, "#".repeat(at_bound)).expect("a temporary file");
        assert_eq!(
            read_settings_file(&path).map(|t| t.len()).ok(),
            Some(at_bound)
        );
        std::fs::write(&path, "#".repeat(at_bound + 1)).expect("a temporary file");
        let refused = read_settings_file(&path).expect_err("one byte too many");
        assert_eq!(
            refused.kind(),
            mesh_files::FileErrorKind::TooLarge {
                limit: mesh_files::MAX_SETTINGS
            }
        );
        let _ = std::fs::remove_file(&path);
    }

    const FILE: &str = r#"
current-context = "prod"

[contexts.prod]
url = "amqps://mesh@rabbit.prod/prod"
cacertfile = "certs/ca.pem"
keyfile = "/etc/mesh/client key.pem"
password-file = "secret/password"
node = "anchor"
store = "postgres://audit@db/audit"
queue-type = "classic"
connect-timeout = "10s"

[contexts.dev]
url = "amqp://127.0.0.1"
"#;

    fn path() -> PathBuf {
        PathBuf::from("/home/u/.config/mesh/config.toml")
    }

    fn error(text: &str, asked: Option<&str>) -> String {
        let error = parse_context(&path(), text, asked).unwrap_err();
        assert_eq!(crate::exit::classify(&error), Code::Usage, "{error:#}");
        format!("{error:#}")
    }

    #[test]
    fn the_current_context_is_read_with_paths_beside_the_file() {
        let context = parse_context(&path(), FILE, None).unwrap().unwrap();
        assert_eq!(
            context.url.as_deref(),
            Some(
                "amqps://mesh@rabbit.prod/prod?cacertfile=/home/u/.config/mesh/certs/ca.pem\
                 &keyfile=/etc/mesh/client%20key.pem"
            )
        );
        assert_eq!(
            context.password_file,
            Some(PathBuf::from("/home/u/.config/mesh/secret/password"))
        );
        assert_eq!(context.node.as_deref(), Some("anchor"));
        assert_eq!(context.store.as_deref(), Some("postgres://audit@db/audit"));
        assert_eq!(context.queue_type, Some(QueueTypeArg::Classic));
        assert_eq!(context.connect_timeout, Some(Duration::from_secs(10)));
        let dev = parse_context(&path(), FILE, Some("dev")).unwrap().unwrap();
        assert_eq!(dev.url.as_deref(), Some("amqp://127.0.0.1"));
        assert_eq!(dev.node, None);
        assert_eq!(parse_context(&path(), "", None).unwrap(), None);
        assert_eq!(
            parse_context(&path(), "[contexts.a]\nnode = \"n\"\n", None).unwrap(),
            None,
            "no current-context, none asked for: no context"
        );
    }

    #[test]
    fn a_bad_file_is_a_usage_error_naming_the_file_and_the_line() {
        let shown = error("[contexts.a]\nnode = \"n\"\nnod = \"x\"\n", None);
        assert!(
            shown.contains("config.toml:3: ") && shown.contains("unknown field `nod`"),
            "{shown}"
        );
        let shown = error("[contexts.a]\nurl = \n", None);
        assert!(shown.contains("config.toml:2: "), "{shown}");
        let shown = error("[contexts.a]\nqueue-type = \"stream\"\n", Some("a"));
        assert!(
            shown.contains("config.toml:2: ") && shown.contains("classic"),
            "{shown}"
        );
        let shown = error("[contexts.a]\nconnect-timeout = \"25h\"\n", Some("a"));
        assert!(
            shown.contains("config.toml:2: ") && shown.contains("1ms to 24h"),
            "{shown}"
        );
        let shown = error("current-context = \"b\"\n[contexts.a]\n", None);
        assert!(
            shown.contains("config.toml:1: ") && shown.contains("no context `b` (its contexts: a)"),
            "{shown}"
        );
        let shown = error(FILE, Some("staging"));
        assert!(
            shown.contains("no context `staging` (its contexts: dev, prod)"),
            "{shown}"
        );
        let shown = error(
            "[contexts.a]\ncacertfile = \"ca.pem\"\nurl = \"amqp://h\"\n",
            Some("a"),
        );
        assert!(shown.contains("amqps"), "{shown}");
    }

    #[test]
    fn a_password_in_the_file_is_refused_and_never_shown() {
        for (text, line) in [
            ("[contexts.a]\n\npassword = \"hunter2s3cret\"\n", 3),
            ("[contexts.a]\nurl = \"amqp://u:hunter2s3cret@h\"\n", 2),
            (
                "[contexts.a]\nmanagement-url = \"http://u:hunter2s3cret@h\"\n",
                2,
            ),
            (
                "[contexts.a]\nstore = \"postgres://u:hunter2s3cret@db/a\"\n",
                2,
            ),
        ] {
            let shown = error(text, Some("a"));
            assert!(
                shown.contains(&format!("config.toml:{line}: ")) && shown.contains("password"),
                "{shown}"
            );
            assert!(!shown.contains("hunter2"), "{shown}");
        }
        assert!(!has_password("amqp://user@host/v?x=a:b@c"));
        assert!(has_password("amqps://user:p@host"));
        assert!(!has_password("sqlite:///var/lib/a:b@c.db"));
    }

    #[test]
    fn the_password_file_wins_over_the_environment() {
        let file = std::env::temp_dir().join(format!("mesh-cli-password-{}", std::process::id()));
        std::fs::write(&file, "from-file\n").unwrap();
        let options: AmqpOptions = "amqp://u:from-url@h/v".parse().unwrap();
        let env = EnvPassword::new(Some("from-env".to_owned()));
        let with_file = with_password(options.clone(), &env, Some(&file)).unwrap();
        assert_eq!(with_file.load_password().unwrap(), "from-file");
        assert_eq!(with_file.get_password(), "from-file");
        let with_env = with_password(options.clone(), &env, None).unwrap();
        assert_eq!(with_env.get_password(), "from-env");
        let neither = with_password(options, &EnvPassword::default(), None).unwrap();
        assert_eq!(neither.get_password(), "from-url");
        std::fs::remove_file(&file).unwrap();
        let missing = with_password(neither, &env, Some(&file)).unwrap_err();
        assert!(missing.to_string().contains("password file"), "{missing}");
        assert_eq!(format!("{env:?}"), "EnvPassword(<redacted>)");
    }

    #[test]
    fn flags_and_variables_beat_the_context() {
        let context = parse_context(&path(), FILE, None).unwrap().unwrap();
        let mut given = Some("amqp://flag".to_owned());
        fill(&mut given, context.url.clone());
        assert_eq!(given.as_deref(), Some("amqp://flag"));
        let mut unset = None;
        fill(&mut unset, context.url);
        assert!(unset.is_some_and(|url| url.starts_with("amqps://mesh@rabbit.prod")));
    }
}
