//! The command line of `mesh-audit run`, shared with the `mesh` CLI (`mesh audit run`), which
//! flattens [`RunArgs`] into its own command.
//!
//! With `--metrics-addr ADDR` the process serves `GET /metrics` (Prometheus text: the
//! `mesh_audit_*` metrics of [`crate::telemetry::names`]), `/livez` (200 while the process
//! answers) and `/readyz` (200 while [`AuditService::readiness`] says ready, else 503 with
//! the reason) on ADDR, and prints one line to stderr once it listens:
//!
//! ```text
//! metrics on http://127.0.0.1:9464/metrics (also /livez and /readyz)
//! ```
//!
//! With port 0 the system picks a free port; that line tells which.
//!
//! The password can stay out of the URL (and so out of `ps` and shell histories):
//! `--password-file PATH` (or `MESH_PASSWORD_FILE`) names a file holding it, read again at
//! every reconnect so a rotated password takes effect without a restart; else
//! `MESH_PASSWORD` holds it. Either overrides a password in the URL.

use std::fmt;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use mesh_amqp::management::ManagementOptions;
use mesh_amqp::AmqpOptions;
use tokio_util::sync::CancellationToken;

use crate::options::{
    AuditOptions, StoreOptions, DEFAULT_BATCH_SIZE, DEFAULT_PREFETCH, DEFAULT_STORE_URL,
    MAX_BATCH_SIZE, MAX_BATCH_WAIT, MAX_USER_PREFIX_LEN,
};
use crate::service::AuditService;

/// Runs the audit logger until SIGTERM or Ctrl-C.
#[derive(Clone, Args)]
pub struct RunArgs {
    /// The broker: amqp[s]://user[:password]@host:port/vhost[?cacertfile=PATH&…] (see the
    /// README for the TLS parameters)
    #[arg(long, env = "MESH_URL", hide_env_values = true)]
    pub url: String,
    /// A file holding the broker password (overrides the URL's; read again at every
    /// reconnect). Without it, MESH_PASSWORD may hold the password itself
    #[arg(long, env = "MESH_PASSWORD_FILE", value_name = "PATH")]
    pub password_file: Option<PathBuf>,
    /// The password of `MESH_PASSWORD`, if set (never a command-line flag).
    #[arg(skip = EnvPassword::from_env())]
    pub password: EnvPassword,
    /// This node's name: the logger consumes NODE.audit-logger.events
    #[arg(long, env = "MESH_NODE")]
    pub node: String,
    /// Where to store: sqlite://path?mode=rwc or postgres://user@host/db
    #[arg(long, env = "MESH_AUDIT_STORE", default_value = DEFAULT_STORE_URL, hide_env_values = true)]
    pub store: String,
    /// Rows per transaction, at most (1 to 100000)
    #[arg(long, default_value_t = DEFAULT_BATCH_SIZE, value_parser = parse_batch_size)]
    pub batch_size: usize,
    /// Milliseconds a batch stays open after its first message (0 to 3600000, an hour)
    #[arg(long, default_value_t = 50, value_parser = parse_batch_wait_ms)]
    pub batch_wait_ms: u64,
    /// Unacked deliveries per queue, at most (1 to 65535)
    #[arg(long, default_value_t = DEFAULT_PREFETCH, value_parser = parse_prefetch)]
    pub prefetch: u16,
    /// The x-delivery-limit of the deployment's quorum consumer queues: a dead letter the
    /// broker made for it is recorded with this + 1 attempts
    #[arg(long, default_value_t = mesh_audit_default_delivery_limit(), value_name = "N")]
    pub delivery_limit: u32,
    /// Store an event only when its broker-validated publisher (the user-id RabbitMQ
    /// checked) is the user owning its key (module.umami.… only from the user module.umami,
    /// after the --user-prefix);
    /// dead-letter any other as forged-source. Only where every publisher connects as its
    /// own user under the access plan
    #[arg(long)]
    pub enforce_identity: bool,
    /// The access plan's user prefix the owners of keys carry, with --enforce-identity (at
    /// most 100 bytes, no control character) [default: none]
    #[arg(long, value_name = "P", default_value = "", hide_default_value = true, requires = "enforce_identity", value_parser = parse_user_prefix)]
    pub user_prefix: String,
    /// Serve /metrics, /livez and /readyz on this address (e.g. 127.0.0.1:9464; port 0
    /// picks a free one, printed on stderr)
    #[arg(long, env = "MESH_METRICS_ADDR", value_name = "ADDR")]
    pub metrics_addr: Option<SocketAddr>,
    /// RabbitMQ's management API, used to remove stale bindings of the logger's queues
    /// (http(s)://host:port, with the --url credentials) [default:
    /// http://<first broker host>:15672, contacted only when that host is loopback]
    #[arg(long, env = "MESH_MANAGEMENT_URL")]
    pub management_url: Option<String>,
    /// The CA certificates (PEM) an https management URL is verified against [default: the
    /// --url's cacertfile, else the system's roots]
    #[arg(long, env = "MESH_MANAGEMENT_CA_FILE", value_name = "PEM")]
    pub management_ca_file: Option<PathBuf>,
    /// Send the credentials over plain http to a management host that is not loopback
    #[arg(long)]
    pub management_allow_http: bool,
}

/// Marks an error as one in the arguments (a usage error: `mesh-audit` exits with code 2),
/// not one met while running. Find it with `error.downcast_ref::<UsageError>()`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageError;

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("invalid arguments")
    }
}

/// `text` as a whole number within `min..=max`, or a message saying which numbers are
/// accepted (for clap's `value_parser`: a usage error, exit code 2).
fn parse_within<T>(text: &str, min: T, max: T) -> Result<T, String>
where
    T: std::str::FromStr + PartialOrd + fmt::Display + Copy,
{
    match text.trim().parse::<T>() {
        Ok(value) if min <= value && value <= max => Ok(value),
        _ => Err(format!("expected a whole number from {min} to {max}")),
    }
}

/// `--batch-size`: rows per transaction, 1 to [`MAX_BATCH_SIZE`].
pub fn parse_batch_size(text: &str) -> Result<usize, String> {
    parse_within(text, 1, MAX_BATCH_SIZE)
}

/// `--batch-wait-ms`: 0 to [`MAX_BATCH_WAIT`] in milliseconds.
pub fn parse_batch_wait_ms(text: &str) -> Result<u64, String> {
    let max = u64::try_from(MAX_BATCH_WAIT.as_millis()).unwrap_or(u64::MAX);
    parse_within(text, 0, max)
}

/// mesh-amqp's default `x-delivery-limit`, the default of `--delivery-limit`.
fn mesh_audit_default_delivery_limit() -> u32 {
    AmqpOptions::default().get_delivery_limit()
}

/// `--user-prefix`: at most [`MAX_USER_PREFIX_LEN`] bytes, no control character.
pub fn parse_user_prefix(text: &str) -> Result<String, String> {
    if text.len() > MAX_USER_PREFIX_LEN || text.chars().any(char::is_control) {
        return Err(format!(
            "expected at most {MAX_USER_PREFIX_LEN} bytes with no control character"
        ));
    }
    Ok(text.to_owned())
}

/// `--prefetch`: unacked deliveries per queue, 1 to 65535.
pub fn parse_prefetch(text: &str) -> Result<u16, String> {
    parse_within(text, 1, u16::MAX)
}

impl fmt::Debug for RunArgs {
    /// Like the struct, the URLs' user information redacted.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunArgs")
            .field("url", &mesh_amqp::redact_url(&self.url))
            .field("password_file", &self.password_file)
            .field("password", &self.password)
            .field("node", &self.node)
            .field("store", &mesh_amqp::redact_url(&self.store))
            .field("batch_size", &self.batch_size)
            .field("batch_wait_ms", &self.batch_wait_ms)
            .field("prefetch", &self.prefetch)
            .field("delivery_limit", &self.delivery_limit)
            .field("enforce_identity", &self.enforce_identity)
            .field("user_prefix", &self.user_prefix)
            .field("metrics_addr", &self.metrics_addr)
            .field(
                "management_url",
                &self.management_url.as_deref().map(mesh_amqp::redact_url),
            )
            .field("management_ca_file", &self.management_ca_file)
            .field("management_allow_http", &self.management_allow_http)
            .finish()
    }
}

impl RunArgs {
    /// The service these arguments describe; an error here is in the arguments (it carries
    /// [`UsageError`]).
    pub fn service(&self) -> anyhow::Result<AuditService> {
        self.build_service().context(UsageError)
    }

    fn build_service(&self) -> anyhow::Result<AuditService> {
        let amqp: AmqpOptions = self.url.parse().context("--url")?;
        let amqp = with_password(amqp, &self.password, self.password_file.as_deref())
            .context("invalid connection options")?;
        let store: StoreOptions = self.store.parse().context("--store")?;
        let audit = AuditOptions::new()
            .node(self.node.clone())
            .batch_size(self.batch_size)
            .batch_wait(Duration::from_millis(self.batch_wait_ms))
            .prefetch(self.prefetch)
            .delivery_limit(Some(self.delivery_limit))
            .enforce_identity(self.enforce_identity.then(|| self.user_prefix.clone()));
        audit.validate().context("invalid options")?;
        let management = match &self.management_url {
            Some(url) => Some(
                ManagementOptions::new(url.trim())
                    .credentials(amqp.get_user(), amqp.get_password()),
            ),
            None => ManagementOptions::from_amqp(&amqp),
        }
        .map(|management| {
            let management = management.allow_insecure_http(self.management_allow_http);
            match &self.management_ca_file {
                Some(ca_file) => management.ca_file(ca_file),
                None => management,
            }
            .ca_file_from_amqp_url(&self.url)
        });
        Ok(AuditService::new(amqp, store, audit).management(management))
    }

    /// Runs the service until SIGTERM or Ctrl-C, then shuts it down gracefully.
    pub async fn run(&self) -> anyhow::Result<()> {
        let service = self.service()?;
        let telemetry = match self.metrics_addr {
            Some(addr) => Some(serve_metrics(addr, &service).await?),
            None => None,
        };
        let shutdown = CancellationToken::new();
        // Registered before the service starts, so a SIGTERM from then on is never missed
        // (the default action would kill the process mid-batch).
        let signals = tokio::spawn(cancel_on_signal(Signals::register()?, shutdown.clone()));
        let outcome = service.run(shutdown.clone()).await;
        signals.abort();
        if let Some(telemetry) = telemetry {
            telemetry.shutdown();
        }
        let stats = outcome?;
        tracing::info!(?stats, "mesh-audit stopped");
        Ok(())
    }
}

/// The environment variable holding the broker password, for binaries that take it.
pub const PASSWORD_ENV: &str = "MESH_PASSWORD";

/// A password taken from [`PASSWORD_ENV`]: `Debug` only says whether it is set.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EnvPassword(Option<String>);

impl EnvPassword {
    /// Reads [`PASSWORD_ENV`] (unset, empty or not UTF-8: none).
    pub fn from_env() -> EnvPassword {
        EnvPassword(std::env::var(PASSWORD_ENV).ok().filter(|p| !p.is_empty()))
    }

    /// The password, if set.
    pub fn get(&self) -> Option<&str> {
        self.0.as_deref()
    }
}

impl From<Option<String>> for EnvPassword {
    fn from(password: Option<String>) -> Self {
        EnvPassword(password)
    }
}

impl fmt::Debug for EnvPassword {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(_) => f.write_str("EnvPassword(<redacted>)"),
            None => f.write_str("EnvPassword(None)"),
        }
    }
}

/// `options` with the password of a password file (which wins) or of the environment; the
/// file is read now (a missing or empty one is an error naming it) and again at every
/// connect.
pub fn with_password(
    options: AmqpOptions,
    password: &EnvPassword,
    password_file: Option<&Path>,
) -> Result<AmqpOptions, mesh_core::TransportError> {
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

/// Serves `/metrics`, `/livez` and `/readyz` on `addr`, readiness following `service`, and
/// says where on stderr.
async fn serve_metrics(
    addr: SocketAddr,
    service: &AuditService,
) -> anyhow::Result<mesh::telemetry::TelemetryServer> {
    let telemetry = mesh::telemetry::serve_prometheus(addr)
        .await
        .with_context(|| format!("--metrics-addr {addr}"))?;
    crate::telemetry::describe();
    let watched = service.clone();
    telemetry.watch_check("audit logger", move || watched.readiness());
    // A note, not a result: a closed stderr must not stop the service.
    let _ = writeln!(
        std::io::stderr(),
        "metrics on http://{}/metrics (also /livez and /readyz)",
        telemetry.local_addr()
    );
    Ok(telemetry)
}

#[cfg(unix)]
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

#[cfg(unix)]
impl Signals {
    fn register() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        Ok(Signals {
            term: signal(SignalKind::terminate()).context("listening for SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("listening for SIGINT")?,
        })
    }
}

/// Cancels `shutdown` on SIGTERM or Ctrl-C (SIGINT).
#[cfg(unix)]
async fn cancel_on_signal(mut signals: Signals, shutdown: CancellationToken) {
    tokio::select! {
        _ = signals.term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = signals.int.recv() => tracing::info!("Ctrl-C: shutting down"),
    }
    shutdown.cancel();
}

#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
impl Signals {
    fn register() -> anyhow::Result<Signals> {
        Ok(Signals)
    }
}

/// Cancels `shutdown` on Ctrl-C.
#[cfg(not(unix))]
async fn cancel_on_signal(_signals: Signals, shutdown: CancellationToken) {
    if tokio::signal::ctrl_c().await.is_ok() {
        shutdown.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> RunArgs {
        RunArgs {
            url: "amqp://u:amqps3cr/et@h/v".to_owned(),
            password_file: None,
            password: EnvPassword::from(Some("envs3cret".to_owned())),
            node: "n1".to_owned(),
            store: "postgres://u:pgs3cret@h/db".to_owned(),
            batch_size: 1,
            batch_wait_ms: 1,
            prefetch: 1,
            delivery_limit: 20,
            enforce_identity: false,
            user_prefix: String::new(),
            metrics_addr: None,
            management_url: Some("https://u:mgmts3cret@h:15671".to_owned()),
            management_ca_file: None,
            management_allow_http: false,
        }
    }

    #[test]
    fn numbers_at_their_limits_parse_or_say_what_is_accepted() {
        assert_eq!(parse_batch_size("1"), Ok(1));
        assert_eq!(parse_batch_size("100000"), Ok(MAX_BATCH_SIZE));
        for bad in [
            "0",
            "100001",
            "18446744073709551615",
            "18446744073709551616",
            "-1",
            "",
        ] {
            let message = parse_batch_size(bad).unwrap_err();
            assert_eq!(message, "expected a whole number from 1 to 100000", "{bad}");
        }
        assert_eq!(parse_batch_wait_ms("0"), Ok(0));
        assert_eq!(parse_batch_wait_ms("3600000"), Ok(3_600_000));
        assert!(parse_batch_wait_ms("3600001").is_err());
        assert!(parse_batch_wait_ms("18446744073709551615").is_err());
        assert_eq!(parse_prefetch("65535"), Ok(u16::MAX));
        assert!(parse_prefetch("0").is_err());
        assert!(parse_prefetch("65536").is_err());
        assert_eq!(parse_user_prefix(""), Ok(String::new()));
        assert_eq!(parse_user_prefix("acme/"), Ok("acme/".to_owned()));
        let longest = "p".repeat(MAX_USER_PREFIX_LEN);
        assert_eq!(parse_user_prefix(&longest), Ok(longest.clone()));
        for bad in [
            format!("{longest}p"),
            "a\nb".to_owned(),
            "\u{1b}[2J".to_owned(),
        ] {
            assert!(parse_user_prefix(&bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn enforce_identity_reaches_the_options() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunArgs,
        }
        let base = ["mesh-audit", "--url", "amqp://h", "--node", "n1"];
        let off = Cli::try_parse_from(base).unwrap().run;
        assert!(!off.enforce_identity);
        let on = Cli::try_parse_from(base.iter().copied().chain(["--enforce-identity"]))
            .unwrap()
            .run;
        assert!(on.enforce_identity);
        assert_eq!(on.user_prefix, "");
        let prefixed = Cli::try_parse_from(base.iter().copied().chain([
            "--enforce-identity",
            "--user-prefix",
            "acme/",
        ]))
        .unwrap()
        .run;
        assert_eq!(prefixed.user_prefix, "acme/");
        // A prefix without enforcement would be silently ignored: refused instead.
        assert!(
            Cli::try_parse_from(base.iter().copied().chain(["--user-prefix", "acme/"])).is_err()
        );
        let service = prefixed.service().unwrap();
        assert_eq!(
            service.audit_options().get_enforce_identity(),
            Some("acme/")
        );
        let service = off.service().unwrap();
        assert_eq!(service.audit_options().get_enforce_identity(), None);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(10_000))]

        /// Any text parses into a value within the bounds, or is refused: never a panic.
        #[test]
        fn any_text_is_a_bounded_number_or_refused(text in "\\PC{0,24}|[-+]?[0-9]{1,40}") {
            if let Ok(size) = parse_batch_size(&text) {
                proptest::prop_assert!((1..=MAX_BATCH_SIZE).contains(&size));
            }
            if let Ok(ms) = parse_batch_wait_ms(&text) {
                proptest::prop_assert!(Duration::from_millis(ms) <= MAX_BATCH_WAIT);
            }
            if let Ok(prefetch) = parse_prefetch(&text) {
                proptest::prop_assert!(prefetch >= 1);
            }
        }
    }

    #[test]
    fn debug_shows_no_password() {
        let shown = format!("{:?}", args());
        assert!(!shown.contains("s3cr"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
    }

    #[test]
    fn the_password_file_wins_over_the_environment() {
        let file = std::env::temp_dir().join(format!("mesh-audit-cli-{}", std::process::id()));
        std::fs::write(&file, "from-file\n").unwrap();
        let options: AmqpOptions = "amqp://u:from-url@h/v".parse().unwrap();
        let env = EnvPassword::from(Some("from-env".to_owned()));
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
    }
}
