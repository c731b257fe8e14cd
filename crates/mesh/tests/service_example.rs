//! Acceptance: the service example on RabbitMQ answers calls, `/livez`, `/readyz` and
//! `/metrics`; on SIGTERM it drains within its deadline, exits 0, and every event it emitted
//! without awaiting the confirm arrives; a call after it stopped fails with no-server within
//! 3 s.
//!
//! No test harness (`harness = false`): the example is not a binary cargo hands to tests, so
//! this file includes the example's code and runs it as its own child process, started with
//! [`CHILD`] set. The `metrics` recorder is global to the process: the child's is its own.

#[path = "../examples/service/billing.rs"]
mod billing;
#[path = "support/broker.rs"]
mod broker;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use mesh::telemetry::names;
use mesh::{Bus, HandlerError, Incoming};
use mesh_testkit::http::{get, must_get};
use mesh_testkit::prometheus::sample;
use mesh_testkit::{eventually, TestVhost};
use tokio::io::AsyncReadExt as _;
use tokio::sync::mpsc;

use billing::{QuoteRequest, NODE, QUOTE};
use broker::{transport, WAIT};

/// Set in the child: run the example, not the test.
const CHILD: &str = "MESH_SERVICE_EXAMPLE_CHILD";

/// Quotes asked before SIGTERM; each emits one event.
const QUOTES: usize = 50;

/// The example's drain deadline (the default), and the slack a loaded machine gets on it.
const DRAIN: Duration = mesh::service::DEFAULT_DRAIN_DEADLINE;

const TEST: &str = "the_service_example_answers_calls_and_drains_on_sigterm";

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    if std::env::var_os(CHILD).is_some() {
        return runtime.block_on(billing::main());
    }
    if std::env::args().any(|arg| arg == "--list") {
        println!("{TEST}: test");
        return ExitCode::SUCCESS;
    }
    println!("running 1 test");
    runtime.block_on(the_service_example_answers_calls_and_drains_on_sigterm());
    println!("test {TEST} ... ok");
    ExitCode::SUCCESS
}

async fn the_service_example_answers_calls_and_drains_on_sigterm() {
    let vhost = TestVhost::create("svc-example")
        .await
        .expect("a test vhost");
    // Sees every event billing emits, on a queue bound before billing starts.
    let (seen_tx, mut seen) = mpsc::unbounded_channel::<String>();
    let auditor = Bus::builder()
        .node(NODE)
        .module("auditor")
        .on_raw(["module.billing.quote.given"], move |e: Incoming<Bytes>| {
            let seen_tx = seen_tx.clone();
            async move {
                let _ = seen_tx.send(e.meta.id().to_string());
                Ok::<(), HandlerError>(())
            }
        })
        .start(transport(&vhost, "svc.auditor").await)
        .await
        .expect("the auditor starts");

    let addr = SocketAddr::from(([127, 0, 0, 1], mesh_testkit::free_port()));
    let mut child = tokio::process::Command::new(std::env::current_exe().expect("this binary"))
        .env(CHILD, "1")
        .env("MESH_URL", vhost.url())
        .env("MESH_METRICS_ADDR", addr.to_string())
        .env("MESH_LOG_FORMAT", "json")
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the example starts");
    // Read all along, so the child never blocks on a full pipe.
    let mut stderr = child.stderr.take().expect("stderr is piped");
    let logs = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });

    eventually(WAIT, "the example is ready", || async {
        (get(addr, "/readyz").await.map(|(status, _)| status) == Some(200)).then_some(())
    })
    .await;
    assert_eq!(must_get(addr, "/livez").await.0, 200);
    let (status, metrics) = must_get(addr, "/metrics").await;
    assert_eq!(status, 200);
    let bus = [("node", NODE), ("bus", "billing")];
    assert_eq!(sample(&metrics, names::READY, &bus), Some(1.0), "{metrics}");
    // Its event queue and the serve queue of billing.quote, at least.
    let attached = sample(&metrics, names::CONSUMERS_ATTACHED, &bus);
    assert!(attached.is_some_and(|n| n >= 2.0), "{metrics}");
    assert_eq!(
        attached,
        sample(&metrics, names::CONSUMERS_EXPECTED, &bus),
        "{metrics}"
    );

    let caller = Bus::builder()
        .node(NODE)
        .module("umami")
        .start(transport(&vhost, "svc.umami").await)
        .await
        .expect("the caller starts");
    let basic = QuoteRequest {
        plan: "basic".into(),
    };
    for _ in 0..QUOTES {
        let cents: u64 = caller.call(QUOTE, &basic, WAIT).await.expect("a quote");
        assert_eq!(cents, 900);
    }
    let gold = QuoteRequest {
        plan: "gold".into(),
    };
    let error = caller
        .call::<_, u64>(QUOTE, &gold, WAIT)
        .await
        .expect_err("no plan gold");
    assert_eq!(
        error.remote().map(|r| r.code),
        Some("unknown-plan".to_owned())
    );

    // SIGTERM right after the last reply: confirms of the quotes' events may still be out,
    // and the drain waits for them.
    let pid = child.id().expect("the example runs");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).expect("a pid"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("SIGTERM sent");
    let exited = tokio::time::timeout(DRAIN * 3, child.wait())
        .await
        .expect("the example exits within its drain deadline")
        .expect("its status");
    let logs = tokio::time::timeout(WAIT, logs)
        .await
        .expect("its stderr ends")
        .expect("read");
    assert!(exited.success(), "{exited:?}\n{logs}");
    // JSON log lines, the drain's among them.
    assert!(
        logs.lines()
            .all(|line| serde_json::from_str::<serde_json::Value>(line).is_ok()),
        "{logs}"
    );
    assert!(logs.contains("SIGTERM"), "{logs}");
    assert!(logs.contains("drained: every handler finished"), "{logs}");

    let mut ids = HashSet::new();
    while ids.len() < QUOTES {
        let id = tokio::time::timeout(WAIT, seen.recv())
            .await
            .unwrap_or_else(|_| panic!("{} of {QUOTES} events arrived\n{logs}", ids.len()))
            .expect("the auditor runs");
        ids.insert(id);
    }

    // Nothing consumes billing.quote's queue any more: a call says so, long before its
    // timeout.
    let started = Instant::now();
    let error = caller
        .call::<_, u64>(QUOTE, &basic, Duration::from_secs(120))
        .await
        .expect_err("no server");
    assert!(error.is_no_server(), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        mesh_testkit::error_chain(&error).contains("no server is consuming `serve.billing.quote`"),
        "{}",
        mesh_testkit::error_chain(&error)
    );

    caller.drain().await.expect("drained");
    auditor.drain().await.expect("drained");
    vhost.delete().await.expect("vhost deleted");
}
