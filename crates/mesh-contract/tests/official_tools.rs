//! The demo's exported document through AsyncAPI's own tools and a client built from it:
//! `@asyncapi/parser` (npm) finds no error and no warning, `@asyncapi/modelina` generates
//! TypeScript and Python models whose fields are the demo's events' and tools', and a pika
//! client (Python) that reads the exchange, the routing key, the delivery mode and the
//! headers from the document alone publishes an event that a mesh module handles (on the
//! shared RabbitMQ, in a vhost of its own).
//!
//! The tools live in tests/asyncapi (package.json, package-lock.json, check.mjs, publish.py);
//! scripts/prepare-tests.sh installs them (npm ci there, pip install pika). This test fails,
//! never skips, when they are missing.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use mesh::{Event, MemoryBroker};
use mesh_contract::asyncapi::{export, ExportOptions, Server};
use mesh_contract::System;
use mesh_testkit::shared::{percent_encode, TestVhost};
use mesh_testkit::temp::TempDir;
use serde_json::Value;

#[path = "../../mesh/examples/demo/modules.rs"]
#[allow(dead_code, unreachable_pub)]
mod modules;

const HINT: &str = "run scripts/prepare-tests.sh (it installs Node's packages in tests/asyncapi with `npm ci` and Python's pika with pip)";

fn tools() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/asyncapi")
}

/// Runs `command`, its stdout on success; a failure says what failed and the hint.
fn run(command: &mut Command, what: &str) -> String {
    let output = command
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}: {HINT}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{what} failed ({}): {stderr}\n{HINT}",
        output.status
    );
    String::from_utf8(output.stdout).expect("utf-8 output")
}

/// The demo's system, as its buses announce it (on the in-memory transport: a contract does
/// not depend on the transport).
async fn demo_system() -> anyhow::Result<System> {
    let broker = MemoryBroker::new();
    let (done, _) = tokio::sync::mpsc::unbounded_channel();
    let mut system = System::new();
    for builder in [
        modules::billing(done.clone()),
        modules::mailer(done)?,
        modules::umami(),
    ] {
        let bus = builder.start(Arc::new(broker.transport())).await?;
        system.insert(bus.contract().clone());
        bus.drain().await?;
    }
    Ok(system)
}

/// The wire names of the properties of the model named `name` (modelina names a model by its
/// schema's title, the Rust type's name where the schema was derived).
fn fields(models: &Value, name: &str) -> BTreeSet<String> {
    let model = models
        .as_array()
        .expect("models")
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| {
            let names: Vec<&Value> = models
                .as_array()
                .into_iter()
                .flatten()
                .map(|m| &m["name"])
                .collect();
            panic!("no model {name} among {names:?}")
        });
    model["properties"]
        .as_array()
        .expect("properties")
        .iter()
        .map(|p| p["wire"].as_str().expect("a wire name").to_owned())
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

#[tokio::test]
async fn the_official_tools_read_the_demos_document_and_a_client_built_from_it_is_handled(
) -> anyhow::Result<()> {
    let vhost = TestVhost::create("contract-tools").await?;
    let system = demo_system().await?;
    let options = ExportOptions {
        server: Some(Server {
            host: vhost.broker_addr().to_string(),
            protocol: "amqp".into(),
            pathname: format!("/{}", percent_encode(vhost.name())),
        }),
        ..ExportOptions::default()
    };
    let document = export(&system, &options)?;
    let dir = TempDir::new("contract-tools")?;
    let path = dir.join("demo.asyncapi.json");
    std::fs::write(&path, serde_json::to_string_pretty(&document)?)?;

    // The parser and the model generator.
    let report = run(
        Command::new("node")
            .arg(tools().join("check.mjs"))
            .arg(&path)
            .current_dir(tools()),
        "node tests/asyncapi/check.mjs (@asyncapi/parser, @asyncapi/modelina)",
    );
    let report: Value = serde_json::from_str(&report)?;
    let diagnostics: Vec<&Value> = report["diagnostics"]
        .as_array()
        .expect("diagnostics")
        .iter()
        .filter(|d| d["severity"].as_u64().is_some_and(|s| s <= 1))
        .collect();
    assert!(
        diagnostics.is_empty(),
        "@asyncapi/parser: errors or warnings: {diagnostics:#?}"
    );
    for language in ["typescript", "python"] {
        let models = &report[language];
        assert_eq!(
            fields(models, "SiteCreated"),
            set(&["site", "owner"]),
            "{language}"
        );
        assert_eq!(fields(models, "QuoteRequest"), set(&["plan"]), "{language}");
        assert_eq!(
            fields(models, "ModuleContract"),
            set(&["owner", "node", "emits", "handles", "serves", "calls"]),
            "{language}"
        );
    }

    // A client from the document alone, and billing handling what it sent.
    let (done, mut handled) = tokio::sync::mpsc::unbounded_channel();
    let transport = mesh_testkit::sdk::transport(&vhost.url()).await?;
    let billing = modules::billing(done).start(transport).await?;
    let id = run(
        Command::new("python3")
            .arg(tools().join("publish.py"))
            .arg(&path)
            .arg(modules::SiteCreated::KEY)
            .arg(r#"{"site": "blog", "owner": "ada"}"#)
            .env("MESH_PUBLISH_URL", vhost.url()),
        "python3 tests/asyncapi/publish.py (pika)",
    );
    let got = tokio::time::timeout(Duration::from_secs(30), handled.recv())
        .await
        .map_err(|_| anyhow::anyhow!("billing did not handle the event pika published"))?;
    assert_eq!(got, Some(format!("billing {}", id.trim())));
    billing.drain().await?;
    vhost.delete().await?;
    Ok(())
}
