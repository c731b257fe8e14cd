//! The service example's module `billing` and its `main`, apart from the binary's so that the
//! example's test can run the same code as a child process of its own.

use std::process::ExitCode;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use mesh::raw::Transport;
use mesh::service::ServiceOptions;
use mesh::{Bus, BusBuilder, Event, Incoming, Outgoing, RemoteError, RequestMeta, Schema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tracing::{error, info};

/// The node billing runs on.
pub(crate) const NODE: &str = "local";

/// The tool billing serves.
pub(crate) const QUOTE: &str = "billing.quote";

/// The request of `billing.quote`; its reply is a price in cents (`u64`).
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub(crate) struct QuoteRequest {
    /// The plan to price: `basic` or `pro`.
    pub(crate) plan: String,
}

/// billing gave a quote.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub(crate) struct QuoteGiven {
    /// The plan priced.
    pub(crate) plan: String,
    /// Its price in cents.
    pub(crate) cents: u64,
}

impl Event for QuoteGiven {
    const KEY: &'static str = "module.billing.quote.given";
    fn json_schema() -> Option<Schema> {
        Some(Schema::of::<Self>())
    }
}

/// umami created a site (what `mesh emit module.umami.site.created` sends, from umami's side).
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub(crate) struct SiteCreated {
    /// The site's name.
    pub(crate) site: String,
    /// Who owns it, when said.
    #[serde(default)]
    pub(crate) owner: Option<String>,
}

impl Event for SiteCreated {
    const KEY: &'static str = "module.umami.site.created";
    fn json_schema() -> Option<Schema> {
        Some(Schema::of::<Self>())
    }
}

/// Reads the options from the environment, installs the logs, runs billing until a stopping
/// signal and drains it: exit 0 once drained, 1 on any failure (logged).
pub(crate) async fn main() -> ExitCode {
    let options = match ServiceOptions::from_env() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("billing cannot start: {:#}", anyhow::Error::from(e));
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = options.install_logs() {
        eprintln!("billing cannot log: {:#}", anyhow::Error::from(e));
        return ExitCode::FAILURE;
    }
    match run(options).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!(error = %mesh::raw::text::EscapedDisplay(format!("{e:#}")), "billing failed");
            ExitCode::FAILURE
        }
    }
}

async fn run(options: ServiceOptions) -> anyhow::Result<()> {
    let (transport, broker) = transport().await?;
    info!(transport = broker, "billing starts");
    // The quote handler emits through the bus it belongs to, which exists once started.
    let started: Arc<OnceLock<Bus>> = Arc::default();
    let bus = billing(Arc::clone(&started))
        .start(transport.clone())
        .await?;
    let _ = started.set(bus.clone());
    if broker == MEMORY {
        // Nobody outside this process can reach the in-memory transport: a caller here
        // shows the round trip once.
        let umami = Bus::builder()
            .node(NODE)
            .module("umami")
            .emits::<SiteCreated>()
            .calls::<QuoteRequest, u64>(QUOTE)
            .start(transport)
            .await?;
        umami
            .emit(&SiteCreated {
                site: "blog".into(),
                owner: Some("ada".into()),
            })
            .await?;
        let basic = QuoteRequest {
            plan: "basic".into(),
        };
        let cents: u64 = umami.call(QUOTE, &basic, Duration::from_secs(5)).await?;
        info!(
            cents,
            "umami called billing.quote in process; Ctrl-C to stop"
        );
    }
    mesh::service::run(bus, options).await?;
    Ok(())
}

const MEMORY: &str = "the in-memory transport";

/// RabbitMQ when `MESH_URL` is set, else the in-memory transport.
async fn transport() -> anyhow::Result<(Arc<dyn Transport>, &'static str)> {
    match std::env::var("MESH_URL") {
        Ok(url) if !url.is_empty() => {
            let options: mesh::amqp::AmqpOptions = url.parse()?;
            let transport = mesh::amqp::connect(options.connection_name("local.billing")).await?;
            Ok((Arc::new(transport), "RabbitMQ"))
        }
        _ => Ok((Arc::new(mesh::MemoryBroker::new().transport()), MEMORY)),
    }
}

/// billing: serves quotes (emitting `quote.given` for each) and handles `site.created`.
pub(crate) fn billing(started: Arc<OnceLock<Bus>>) -> BusBuilder {
    Bus::builder()
        .node(NODE)
        .module("billing")
        .emits::<QuoteGiven>()
        .on(|incoming: Incoming<SiteCreated>| async move {
            info!(
                site = %mesh::raw::text::Escaped(&incoming.event.site),
                owner = %mesh::raw::text::Escaped(
                    incoming.event.owner.as_deref().unwrap_or("nobody said")
                ),
                id = %incoming.meta.id(),
                "opening an account for a new site"
            );
            Ok(())
        })
        .serve_with_schemas(QUOTE, move |request: QuoteRequest, meta| {
            let bus = started.get().cloned();
            async move { quote(bus, request, meta).await }
        })
}

/// Prices a plan, and emits that it did without waiting for the broker's confirm: the reply
/// goes now, and the drain on SIGTERM waits for the confirms still out.
async fn quote(
    bus: Option<Bus>,
    request: QuoteRequest,
    meta: RequestMeta,
) -> Result<u64, RemoteError> {
    let cents = match request.plan.as_str() {
        "basic" => 900,
        "pro" => 2900,
        other => {
            return Err(RemoteError {
                code: "unknown-plan".into(),
                message: format!("no plan named `{}`", other.escape_debug()),
            })
        }
    };
    let Some(bus) = bus else {
        return Err(RemoteError {
            code: "starting".into(),
            message: "billing is starting; call again".into(),
        });
    };
    let given = Outgoing::event(&QuoteGiven {
        plan: request.plan.clone(),
        cents,
    })
    .map_err(|e| RemoteError::new(RemoteError::INTERNAL, e.to_string()))?;
    // The pending confirm is dropped, not awaited: the bus keeps count of it.
    drop(
        bus.emit_nowait(given)
            .await
            .map_err(|e| RemoteError::new("unavailable", e.to_string()))?,
    );
    info!(
        plan = %mesh::raw::text::Escaped(&request.plan),
        cents,
        caller = %mesh::raw::text::Escaped(&meta.source),
        "quote given"
    );
    Ok(cents)
}
