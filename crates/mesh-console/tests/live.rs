//! The live tail over the embedded broker: the stream says `ready` once its queue is bound,
//! then carries exactly the events that match its patterns; its errors are clear, and the
//! number of streams is bounded.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{client, get, seeded, serve};
use mesh::{Bus, MemoryBroker, Outgoing};
use mesh_console::Console;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(20);

/// One SSE event: its name and data.
#[derive(Debug)]
struct SseEvent {
    name: String,
    data: String,
}

/// A stream of SSE events read from a response, chunk by chunk.
struct SseReader {
    response: reqwest::Response,
    buffer: String,
}

impl SseReader {
    async fn open(url: &str) -> anyhow::Result<SseReader> {
        let response = client().get(url).send().await?;
        anyhow::ensure!(response.status() == 200, "GET {url}: {}", response.status());
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        anyhow::ensure!(
            content_type.starts_with("text/event-stream"),
            "content type {content_type}"
        );
        Ok(SseReader {
            response,
            buffer: String::new(),
        })
    }

    /// The next event (comments and keep-alives skipped), within [`WAIT`].
    async fn next(&mut self) -> anyhow::Result<SseEvent> {
        tokio::time::timeout(WAIT, async {
            loop {
                if let Some(end) = self.buffer.find("\n\n") {
                    let block: String = self.buffer.drain(..end + 2).collect();
                    let mut name = String::from("message");
                    let mut data = Vec::new();
                    for line in block.lines() {
                        if let Some(value) = line.strip_prefix("event: ") {
                            name = value.to_owned();
                        } else if let Some(value) = line.strip_prefix("data: ") {
                            data.push(value.to_owned());
                        }
                    }
                    if !data.is_empty() {
                        return Ok(SseEvent {
                            name,
                            data: data.join("\n"),
                        });
                    }
                    continue;
                }
                let chunk = self
                    .response
                    .chunk()
                    .await?
                    .ok_or_else(|| anyhow::anyhow!("the stream ended"))?;
                self.buffer.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
        .await
        .map_err(|_| anyhow::anyhow!("no event within {WAIT:?}"))?
    }
}

#[tokio::test]
async fn the_stream_carries_exactly_the_matching_events() -> anyhow::Result<()> {
    let seeded = seeded().await?;
    let broker = MemoryBroker::new();
    let console = Console::new(seeded.store.clone()).transport(Arc::new(broker.transport()));
    let served = serve(console).await?;
    let shop = Bus::builder()
        .node("n1")
        .module("shop")
        .start(Arc::new(broker.transport()))
        .await?;
    let billing = Bus::builder()
        .node("n1")
        .module("billing")
        .start(Arc::new(broker.transport()))
        .await?;

    let (status, page) = get(&format!("{}/live?key=module.shop.%23", served.base)).await?;
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains(r#"data-stream="/live/stream?key=module.shop.%23""#),
        "the page names its stream: {page}"
    );

    let mut stream =
        SseReader::open(&format!("{}/live/stream?key=module.shop.%23", served.base)).await?;
    let ready = stream.next().await?;
    assert_eq!(ready.name, "ready", "{ready:?}");

    // Billing's event does not match; shop's two do, in order.
    billing
        .emit_outgoing(Outgoing::json(
            "invoice.paid",
            &serde_json::json!({"n": 0}),
        )?)
        .await?;
    let first = shop
        .emit_outgoing(Outgoing::json(
            "order.placed",
            &serde_json::json!({"n": 1}),
        )?)
        .await?;
    let second = shop
        .emit_outgoing(Outgoing::json(
            "order.cancelled",
            &serde_json::json!({"note": "<b>no</b>"}),
        )?)
        .await?;
    for (id, key) in [
        (first, "module.shop.order.placed"),
        (second, "module.shop.order.cancelled"),
    ] {
        let event = stream.next().await?;
        assert_eq!(event.name, "event", "{event:?}");
        let data: Value = serde_json::from_str(&event.data)?;
        assert_eq!(data["id"], id.to_string(), "{data}");
        assert_eq!(data["key"], key, "{data}");
        assert_eq!(data["source"], "shop", "{data}");
        assert_eq!(data["node"], "n1", "{data}");
    }
    shop.close().await;
    billing.close().await;
    Ok(())
}

#[tokio::test]
async fn bad_input_and_no_broker_are_clear_errors() -> anyhow::Result<()> {
    let seeded = seeded().await?;
    let without = serve(Console::new(seeded.store.clone())).await?;
    let (status, body) = get(&format!("{}/live/stream", without.base)).await?;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("no broker connection"), "{body}");
    let (status, body) = get(&format!("{}/live", without.base)).await?;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("no broker connection"), "{body}");

    let broker = MemoryBroker::new();
    let with =
        serve(Console::new(seeded.store.clone()).transport(Arc::new(broker.transport()))).await?;
    for (query, expected) in [
        ("key=module..x", "is not a topic pattern"),
        ("key=%00", "is not a topic pattern"),
        (
            "key=a&key=b&key=c&key=d&key=e&key=f&key=g&key=h&key=i",
            "at most 8",
        ),
        ("key=a+b+c+d+e+f+g+h+i", "at most 8"),
    ] {
        for path in ["/live", "/live/stream"] {
            let (status, body) = get(&format!("{}{path}?{query}", with.base)).await?;
            assert_eq!(status, 400, "{path}?{query}: {body}");
            assert!(body.contains(expected), "{path}?{query}: {body}");
        }
    }
    Ok(())
}

#[tokio::test]
async fn at_most_sixteen_streams_are_open_at_once() -> anyhow::Result<()> {
    let seeded = seeded().await?;
    let broker = MemoryBroker::new();
    let served =
        serve(Console::new(seeded.store.clone()).transport(Arc::new(broker.transport()))).await?;
    let url = format!("{}/live/stream?key=%23", served.base);
    let mut open = Vec::new();
    for _ in 0..16 {
        let mut stream = SseReader::open(&url).await?;
        assert_eq!(stream.next().await?.name, "ready");
        open.push(stream);
    }
    let (status, body) = get(&url).await?;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("16 live tails are open already"), "{body}");

    // A closed page frees its slot.
    drop(open.pop());
    let mut reopened = mesh_testkit::eventually(Duration::from_secs(45), "a freed slot", || {
        let url = url.clone();
        async move { SseReader::open(&url).await.ok() }
    })
    .await;
    assert_eq!(reopened.next().await?.name, "ready");
    Ok(())
}
