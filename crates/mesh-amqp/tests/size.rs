//! Bodies of every size that matters round-trip byte-exact: empty, one byte either side of
//! RabbitMQ 3.10's frame size (131,072 bytes, so the body splits across frames), 1 MiB and
//! 16 MiB. (Bodies over a broker's limit: `tests/limits.rs`.)

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use mesh_core::{PublishOptions, QueueSpec, SubscriptionSpec, TopicPattern};

const FRAME: usize = 131_072;

/// Bytes that differ from position to position, so a misplaced frame shows.
fn body(size: usize) -> Bytes {
    (0..size)
        .map(|i| (i % 251) as u8 ^ (i / 251) as u8)
        .collect::<Vec<u8>>()
        .into()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_around_the_frame_size_and_large_ones_round_trip_byte_exact() {
    let vhost = common::vhost("sizes").await;
    let transport = common::connect(&vhost, "sizes").await;
    let mut subscription = transport
        .subscribe(SubscriptionSpec {
            queue: QueueSpec::Durable {
                name: "n.sizes.events".to_owned(),
            },
            patterns: vec![TopicPattern::parse("module.sizes.#").unwrap()],
            prefetch: 2,
            retry_delays: vec![Duration::from_secs(1)],
        })
        .await
        .unwrap();
    let sizes = [0, 1, FRAME - 1, FRAME, FRAME + 1, 1 << 20, 16 << 20];
    for size in sizes {
        let mut message = common::event("module.sizes.blob", "");
        message.body = body(size);
        message.properties.content_type = Some("application/octet-stream".to_owned());
        let started = Instant::now();
        transport
            .publish(message, PublishOptions::default())
            .await
            .unwrap()
            .await
            .unwrap_or_else(|e| panic!("{size} bytes: {e}"));
        let delivery = common::next(&mut subscription).await;
        let took = started.elapsed();
        assert_eq!(delivery.message.body.len(), size);
        assert!(delivery.message.body == body(size), "{size} bytes differ");
        delivery.ack().await.unwrap();
        common::measured(&format!("round trip of {size} bytes"), took);
    }
    common::assert_window_empty(&transport);
    transport.close().await;
    vhost.delete().await.unwrap();
}
