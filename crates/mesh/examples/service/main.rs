//! A long-running service: module `billing` serves the tool `billing.quote` (a request
//! `{"plan": "basic"}`, a reply in cents), handles `module.umami.site.created`, and emits
//! `module.billing.quote.given` for each quote it gives. It runs until Ctrl-C or SIGTERM,
//! then drains (every handler finished, every emit confirmed) and exits 0; meanwhile
//! `/livez`, `/readyz` and `/metrics` answer on `MESH_METRICS_ADDR` (default
//! `127.0.0.1:9464`). All of it is `mesh::service::run`; the module is in `billing.rs`.
//!
//! Runs on the embedded in-memory transport by default, where a caller in the same process
//! asks for one quote; with `MESH_URL=amqp://…` it runs on RabbitMQ, where the `mesh`
//! command line can reach it:
//!
//! ```text
//! MESH_URL=amqp://guest:guest@127.0.0.1:5672/%2F cargo run -p meshbus --example service
//! mesh --node local call billing.quote --data '{"plan":"basic"}'
//! mesh --node local tail 'module.billing.#'
//! mesh --node local status
//! curl -s 127.0.0.1:9464/readyz
//! ```
//!
//! `RUST_LOG` filters the logs (default `info`); `MESH_LOG_FORMAT=json` writes them as JSON
//! lines.

mod billing;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    billing::main().await
}
