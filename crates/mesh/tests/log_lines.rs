//! The runtime's log lines against hostile input, on the in-memory broker: a routing key,
//! an `x-event-id`, an `x-time`, an `x-source`, a content type and a handler's error
//! carrying CR/LF, ESC, the 8-bit CSI and a right-to-left override each make the consumer
//! warn, and each warning is one line with every unsafe character escaped. And, for any
//! text, a tracing field through `mesh_core::text::Escaped` is one line.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use mesh::raw::codec;
use mesh::raw::{HeaderValue, PublishOptions, Transport, WireMessage};
use mesh::{Bus, HandlerError, Incoming, MemoryBroker};
use mesh_core::text::{is_unsafe, Escaped, EscapedDisplay};
use proptest::prelude::*;

/// Every wait of this file.
const WAIT: Duration = Duration::from_secs(10);

/// What each hostile value carries: a line break and what looks like a record of its own,
/// terminal escapes and a bidi override.
const FORGED: &str = "x\r\nFORGED  WARN forged record\u{1b}[2J\u{9b}31m\u{202e}\u{85}\u{2028}end";

/// What was logged, as text.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// A subscriber writing plain lines here, no time (each line then starts with its level).
    fn subscriber(&self) -> impl tracing::Subscriber + Send + Sync {
        let writer = self.clone();
        tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .without_time()
            .with_max_level(tracing::Level::DEBUG)
            .finish()
    }
}

/// Checks that every line of `text` is a whole record: it starts with a level, and holds no
/// unsafe character.
fn one_record_per_line(text: &str) -> Result<(), String> {
    if !text.is_empty() && !text.ends_with('\n') {
        return Err(format!("no final line break: {text:?}"));
    }
    for line in text.lines() {
        let level = line.trim_start();
        if !["TRACE ", "DEBUG ", "INFO ", "WARN ", "ERROR "]
            .iter()
            .any(|l| level.starts_with(l))
        {
            return Err(format!("a line that is no record: {line:?}"));
        }
        if line.chars().any(is_unsafe) {
            return Err(format!("an unescaped character: {line:?}"));
        }
    }
    Ok(())
}

/// A good event of billing's as any client could publish it, its headers set by hand.
fn raw_event(key: &str) -> WireMessage {
    let mut message = WireMessage::new(key, Bytes::from_static(br#"{"n":1}"#));
    message.properties.content_type = Some(codec::CONTENT_TYPE_JSON.into());
    let headers = &mut message.properties.headers;
    headers.insert(
        codec::EVENT_ID.into(),
        mesh::raw::EventId::new().to_string().into(),
    );
    headers.insert(codec::SOURCE.into(), "billing".into());
    headers.insert(codec::NODE.into(), "anchor".into());
    headers.insert(codec::TIME.into(), "2026-09-03T12:00:00Z".into());
    message
}

/// One message per wire value the consumer quotes when it refuses an event, and one that
/// its handler fails on permanently with an error quoting the hostile text.
fn hostile_messages() -> Vec<WireMessage> {
    let with_header = |name: &str| {
        let mut message = raw_event("module.billing.paid");
        message
            .properties
            .headers
            .insert(name.into(), HeaderValue::Str(FORGED.into()));
        message
    };
    let mut content_type = raw_event("module.billing.paid");
    content_type.properties.content_type = Some(FORGED.into());
    vec![
        with_header(codec::EVENT_ID),
        with_header(codec::TIME),
        with_header(codec::SOURCE),
        content_type,
        raw_event(&format!("module.billing.{FORGED}")),
        raw_event("module.billing.fail"),
    ]
}

#[tokio::test]
async fn hostile_wire_values_cannot_forge_a_line_of_the_runtimes_log() {
    let captured = Captured::default();
    // The test runtime has one thread: every task of the bus logs to this subscriber.
    let _guard = tracing::subscriber::set_default(captured.subscriber());
    let broker = MemoryBroker::new();
    let watcher = Bus::builder()
        .node("anchor")
        .module("watcher")
        .on_raw(["module.billing.#"], |e: Incoming<Bytes>| async move {
            if e.meta.key().as_str() == "module.billing.fail" {
                return Err(HandlerError::permanent(format!("refused `{FORGED}`")));
            }
            Ok(())
        })
        .start(Arc::new(broker.transport()))
        .await
        .expect("watcher starts");
    let mut dead = watcher.dead_letters().await.expect("dead letters");
    let raw = broker.transport();
    let hostile = hostile_messages();
    let count = hostile.len();
    for message in hostile {
        let confirm = tokio::time::timeout(WAIT, raw.publish(message, PublishOptions::default()))
            .await
            .expect("publish in time")
            .expect("published");
        tokio::time::timeout(WAIT, confirm)
            .await
            .expect("confirm in time")
            .expect("confirmed");
    }
    // Each is dead-lettered, its warning logged before.
    for _ in 0..count {
        let letter = tokio::time::timeout(WAIT, dead.next())
            .await
            .expect("a dead letter in time")
            .expect("the dead-letter stream is open");
        letter.ack().await.expect("acked");
    }
    watcher.drain().await.expect("drained");
    watcher.close().await;

    let text = captured.text();
    one_record_per_line(&text).unwrap();
    let warnings: Vec<&str> = text
        .lines()
        .filter(|line| line.contains("event dead-lettered"))
        .collect();
    assert_eq!(warnings.len(), count, "{text}");
    for warning in &warnings {
        assert!(warning.contains("x\\r\\nFORGED"), "{warning}");
    }
}

proptest! {
    /// Whatever the text, a field through `Escaped` (or an error through `EscapedDisplay`)
    /// makes one line holding no unsafe character, which says the text back unescaped.
    #[test]
    fn any_text_logged_through_escaped_is_one_line(text in any::<String>()) {
        let captured = Captured::default();
        tracing::subscriber::with_default(captured.subscriber(), || {
            tracing::warn!(value = %Escaped(&text), "hostile");
            let error = std::io::Error::other(text.clone());
            tracing::warn!(error = %EscapedDisplay(&error), "hostile error");
        });
        let logged = captured.text();
        prop_assert_eq!(logged.lines().count(), 2, "{:?}", logged);
        prop_assert!(one_record_per_line(&logged).is_ok(), "{:?}", one_record_per_line(&logged));
        let escaped = mesh_core::text::escape(&text);
        for line in logged.lines() {
            prop_assert!(line.ends_with(escaped.as_ref()), "{:?} {:?}", line, escaped);
        }
    }
}
