//! The main job of mesh in one program: two modules exchange events with `emit`/`on`, a
//! failing handler is retried and then dead-lettered, and a tool is called over RPC. The
//! modules are defined in `modules.rs`, with the schemas of their events and tools; the
//! numbered steps are in `tour.rs`.
//!
//! Runs on the embedded in-memory transport by default; with `MESH_URL=amqp://…` it runs
//! on RabbitMQ, and removes the durable queues its modules declare there when it ends
//! (through the management API: `MESH_MANAGEMENT_URL`, else `http://<host>:15672`; see
//! `cleanup.rs`), so a second run behaves as the first and nothing keeps collecting events.
//!
//! ```text
//! cargo run -p meshbus --example demo
//! MESH_URL=amqp://guest:guest@127.0.0.1:5672/%2F cargo run -p meshbus --example demo
//! ```

mod cleanup;
mod modules;
mod tour;

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    let result = match tour::Place::from_env() {
        Ok(place) => tour::run(&place, &mut |line| println!("{line}")).await,
        Err(e) => Err(e),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}
