//! `faults-consumer`: a consumer process for the consumer-crash scenario
//! (`tests/consumer_crash.rs`), which SIGKILLs it while its handler runs.
//!
//! ```text
//! faults-consumer <amqp-url> <quorum|classic> <node> <module> <pattern> <prefetch>
//! ```
//!
//! It starts a bus as module `<module>` on node `<node>` (queue `<node>.<module>.events`),
//! handling events matching `<pattern>` with a handler that never finishes, and tells its
//! parent what happens on stdout, one line each:
//!
//! - `ready` once it consumes;
//! - `handling <event id>` when the handler starts on an event (it then blocks forever, so
//!   the delivery stays unacknowledged until the process dies).
//!
//! `<amqp-url>` names the module's user; its password comes in `MESH_PASSWORD`
//! (`mesh_faults::worker::PASSWORD_ENV`), so that it is on no command line.
//!
//! It exits when its stdin closes (the parent is gone), so it never outlives a test.
//!
//! Exit codes: 0 when stdin closed or stdout is a broken pipe, 1 on an error (printed to
//! stderr), 2 on bad arguments.

use mesh_faults::worker::{child_main, child_options, say};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use mesh::amqp::QueueType;
use mesh::{Bus, HandlerError};
use tokio::io::AsyncReadExt;

fn main() -> ExitCode {
    child_main("faults-consumer", run)
}

fn run() -> anyhow::Result<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [url, queue_type, node, module, pattern, prefetch] = args.as_slice() else {
        eprintln!(
            "usage: faults-consumer <amqp-url> <quorum|classic> <node> <module> <pattern> \
             <prefetch>"
        );
        return Ok(ExitCode::from(2));
    };
    let queue_type: QueueType = queue_type.parse().context("the queue type")?;
    let prefetch: u16 = prefetch.parse().context("the prefetch")?;
    let options = child_options(url, &format!("faults-consumer-{}", std::process::id()))?
        .queue_type(queue_type);

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the runtime")?;
    runtime.block_on(async {
        let transport = mesh::amqp::connect(options).await.context("connecting")?;
        let _bus = Bus::builder()
            .node(node.as_str())
            .module(module.as_str())
            .prefetch(prefetch)
            .on_raw([pattern.as_str()], |incoming| async move {
                if say(&format!("handling {}", incoming.meta.id())).is_err() {
                    // The parent is gone; so should we be.
                    std::process::exit(0);
                }
                // Block the delivery until the process dies: the crash happens here.
                std::future::pending::<Result<(), HandlerError>>().await
            })
            .start(Arc::new(transport))
            .await
            .context("starting the bus")?;
        say("ready").context("writing to stdout")?;
        // Until the parent closes our stdin (or dies, which closes it too).
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 64];
        while stdin.read(&mut buf).await.context("reading stdin")? > 0 {}
        Ok(ExitCode::SUCCESS)
    })
}
