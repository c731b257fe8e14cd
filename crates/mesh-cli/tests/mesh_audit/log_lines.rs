//! The `mesh-audit` binary's own log lines against hostile publishers: a routing key, an
//! `x-event-id`, an `x-time`, an `x-source` and a content type carrying CR/LF, ESC, the 8-bit
//! CSI and a right-to-left override each make it warn, and each warning is one line of its
//! log file with every unsafe character escaped: no publisher can forge a line.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use mesh_core::codec;
use mesh_core::{HeaderValue, PublishOptions, Transport, WireMessage};
use mesh_testkit::{eventually, TestVhost};
use tokio::process::Child;

use crate::common::transport;

const WAIT: Duration = Duration::from_secs(60);

/// What each hostile value carries: a line break and what looks like a record of its own
/// (dated 1999, so no real record starts like it), terminal escapes and a bidi override.
const FORGED: &str =
    "x\r\n1999-01-01T00:00:00.000000Z  INFO forged record\u{1b}[2J\u{9b}31m\u{202e}\u{85}end";

fn spawn_logger(url: &str, store: &str, log: &std::path::Path) -> anyhow::Result<Child> {
    let log = std::fs::File::create(log).context("creating the log file")?;
    crate::common::mesh_audit()
        .args(["run", "--node", "n1", "--store", store])
        .args(["--batch-size", "10", "--batch-wait", "20ms"])
        .env("MESH_URL", url)
        .env("RUST_LOG", "info")
        // No NO_COLOR: a log file gets no colour codes by default, so any escape byte in it
        // would be a publisher's.
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .kill_on_drop(true)
        .spawn()
        .context("starting mesh-audit")
}

/// A good event as any client could publish it, its headers set by hand.
fn raw_event(key: &str) -> WireMessage {
    let mut message = WireMessage::new(key, Bytes::from_static(br#"{"raw":true}"#));
    message.properties.content_type = Some(codec::CONTENT_TYPE_JSON.into());
    let headers = &mut message.properties.headers;
    headers.insert(
        codec::EVENT_ID.into(),
        mesh_core::EventId::new().to_string().into(),
    );
    headers.insert(codec::SOURCE.into(), "shop".into());
    headers.insert(codec::NODE.into(), "n1".into());
    headers.insert(codec::TIME.into(), "2026-09-03T12:00:00Z".into());
    message
}

/// One message per wire value the logger quotes when it refuses an event.
fn hostile_messages() -> Vec<WireMessage> {
    let mut id = raw_event("module.shop.paid");
    id.properties
        .headers
        .insert(codec::EVENT_ID.into(), HeaderValue::Str(FORGED.into()));
    let mut time = raw_event("module.shop.paid");
    time.properties
        .headers
        .insert(codec::TIME.into(), HeaderValue::Str(FORGED.into()));
    let mut source = raw_event("module.shop.paid");
    source
        .properties
        .headers
        .insert(codec::SOURCE.into(), HeaderValue::Str(FORGED.into()));
    let mut content_type = raw_event("module.shop.paid");
    content_type.properties.content_type = Some(FORGED.into());
    // A key is a short string: any bytes, line breaks included, reach a `#` binding.
    let key = raw_event(&format!("module.shop.{FORGED}"));
    // A key that is valid but holds a bidi override, with an id that is not: quoted as a
    // field beside the error.
    let mut bidi_key = raw_event("module.shop.paid\u{202e}gpj");
    bidi_key
        .properties
        .headers
        .insert(codec::EVENT_ID.into(), HeaderValue::Str(FORGED.into()));
    vec![id, time, source, content_type, key, bidi_key]
}

/// Whether `line` starts as the log format does: a UTC timestamp of this century.
fn starts_as_a_record(line: &str) -> bool {
    let bytes = line.as_bytes();
    bytes.len() > 20 && bytes.starts_with(b"20") && bytes[10] == b'T'
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_wire_values_cannot_forge_a_line_of_the_loggers_log() -> anyhow::Result<()> {
    let vhost = TestVhost::create("audit-log-lines").await?;
    let temp = crate::common::TempStore::sqlite();
    let log = std::env::temp_dir().join(format!("{}.log", vhost.name()));
    let url = vhost.url();
    let mut logger = spawn_logger(&url, temp.url(), &log)?;
    eventually(WAIT, "mesh-audit consuming its queue of events", || async {
        let queues = vhost.list_queues().await.ok()?;
        queues
            .iter()
            .any(|q| q.name == "n1.audit-logger.events" && q.consumers == 1)
            .then_some(())
    })
    .await;

    let raw = transport(&url).await?;
    let hostile = hostile_messages();
    let count = hostile.len();
    for message in hostile {
        let confirm = raw.publish(message, PublishOptions::default()).await?;
        tokio::time::timeout(WAIT, confirm).await??;
    }
    let text = eventually(WAIT, "a warning for each hostile event", || {
        let log = log.clone();
        async move {
            let text = std::fs::read_to_string(&log).ok()?;
            (text.matches("event dead-lettered").count() >= count).then_some(text)
        }
    })
    .await;

    assert_eq!(
        text.matches("event dead-lettered").count(),
        count,
        "one warning per hostile event:\n{text}"
    );
    for line in text.lines() {
        // (The command's own first line, written before logging starts, is no record.)
        if line.contains("forged record") {
            assert!(
                starts_as_a_record(line),
                "a line that is no record: {line:?}"
            );
        }
        assert!(!line.starts_with("1999-"), "a forged line: {line:?}");
        assert!(
            !line.chars().any(mesh_core::text::is_unsafe),
            "an unescaped character: {line:?}"
        );
    }
    assert!(!text.contains('\r'), "{text:?}");
    // Each hostile value is on its warning's line, escaped, never at the start of one.
    let warnings: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("event dead-lettered"))
        .collect();
    for warning in &warnings {
        assert!(warning.contains("x\\r\\n1999-01-01"), "{warning}");
    }
    assert!(
        warnings.iter().any(|w| w.contains("paid\\u{202e}gpj")),
        "the bidi key escaped: {warnings:#?}"
    );

    logger.start_kill().context("stopping mesh-audit")?;
    let _ = logger.wait().await;
    Transport::close(raw.as_ref()).await;
    let _ = std::fs::remove_file(&log);
    vhost.delete().await?;
    Ok(())
}
