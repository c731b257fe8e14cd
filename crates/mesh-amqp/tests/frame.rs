//! Headers against the connection's frame size: AMQP carries a message's properties and
//! headers in one content-header frame of at most `frame_max` bytes, and a broker closes the
//! whole connection on a larger one. mesh refuses such a publish with a typed error before
//! it is sent (never resent), everything else goes on, and a copy mesh makes itself (a dead
//! letter whose annotations push a message that fitted over the limit) is trimmed, not lost.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use mesh::{Bus, HandlerError, Incoming};
use mesh_amqp::{AmqpTransport, Lifecycle};
use mesh_core::codec::{self, DeadReason};
use mesh_core::{
    HeaderValue, PublishOptions, RetryPolicy, TransportError, TransportErrorKind, WireMessage,
};

/// An event of `pad` whose `x-pad` header holds `pad_len` bytes.
fn padded(key: &str, pad_len: usize) -> WireMessage {
    let mut message = common::event(key, "{}");
    let headers = &mut message.properties.headers;
    headers.insert(
        codec::EVENT_ID.to_owned(),
        mesh_core::EventId::new().to_string().into(),
    );
    headers.insert(codec::SOURCE.to_owned(), "pad".into());
    headers.insert(codec::NODE.to_owned(), "n1".into());
    headers.insert(codec::TIME.to_owned(), "2026-12-01T12:00:00Z".into());
    headers.insert("x-pad".to_owned(), HeaderValue::Str("p".repeat(pad_len)));
    message
}

async fn publish(transport: &AmqpTransport, message: WireMessage) -> Result<(), TransportError> {
    transport
        .publish(message, PublishOptions::default())
        .await?
        .await
}

/// The header frame's size and the limit for a message padded with `pad_len` bytes, from
/// the refusal of one that is too large.
async fn refusal(transport: &AmqpTransport, pad_len: usize) -> (usize, usize) {
    let error = publish(transport, padded("module.pad.big", pad_len))
        .await
        .unwrap_err();
    match error.kind() {
        TransportErrorKind::HeadersTooLarge { size, max } => (*size, *max),
        other => panic!("expected HeadersTooLarge, got {other:?}: {error}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_over_the_frame_size_are_refused_exactly_and_nothing_else_is_disturbed() {
    let vhost = common::vhost("frame-refuse").await;
    let transport = common::connect(&vhost, "frame-refuse").await;
    let events = common::Recorder::start(&transport);

    let (size, max) = refusal(&transport, 200_000).await;
    assert!(size > max, "{size} > {max}");
    // The largest padding that fits gives a frame of exactly the limit: the broker takes it,
    // so the measure is the broker's own. One byte more is refused.
    let fits = 200_000 - (size - max);
    publish(&transport, padded("module.pad.fits", fits))
        .await
        .expect("a header frame of exactly frame_max is accepted");
    assert_eq!(refusal(&transport, fits + 1).await, (max + 1, max));
    // A double that is not finite crashes a RabbitMQ channel's header parser: refused too.
    let mut nan = padded("module.pad.nan", 10);
    nan.properties
        .headers
        .insert("x-nan".to_owned(), HeaderValue::Float(f64::NAN));
    let error = publish(&transport, nan).await.unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::Protocol, "{error}");
    // Nothing was sent that the broker would close the connection for.
    publish(&transport, padded("module.pad.small", 10))
        .await
        .unwrap();
    assert_eq!(
        events.count(|e| matches!(e, Lifecycle::Disconnected { .. })),
        0,
        "{:?}",
        events.events()
    );
    common::assert_window_empty(&transport);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_that_would_not_fit_is_trimmed_and_the_consumer_goes_on() {
    let vhost = common::vhost("frame-dead").await;
    let transport = common::connect(&vhost, "frame-dead").await;
    let events = common::Recorder::start(&transport);
    let (size, max) = refusal(&transport, 200_000).await;
    // Fits by 40 bytes: mesh's dead-letter annotations take more.
    let near = 200_000 - (size - max) - 40;
    let huge_error = "e".repeat(100_000);

    let (seen, mut handled) = tokio::sync::mpsc::unbounded_channel::<String>();
    let bus = Bus::builder()
        .node("n1")
        .module("pad")
        // Its handler takes its own prefix: the contract announcement would be one more
        // event there, which this test does not expect.
        .announce(false)
        .retry(RetryPolicy::new(1, vec![Duration::from_secs(1)]).unwrap())
        .on_raw(["module.pad.#"], move |incoming: Incoming<Bytes>| {
            let seen = seen.clone();
            let huge_error = huge_error.clone();
            async move {
                let key = incoming.meta.key().to_string();
                let _ = seen.send(key.clone());
                if key.ends_with("fails") {
                    Err(HandlerError::permanent(std::io::Error::other(huge_error)))
                } else {
                    Ok(())
                }
            }
        })
        .start(Arc::new(transport.clone()))
        .await
        .unwrap();
    let mut dead = bus.all_dead_letters().await.unwrap();

    // A failure whose error is 100 KB: the dead letter quotes a bounded part of it.
    publish(&transport, padded("module.pad.small.fails", 10))
        .await
        .unwrap();
    // A message at the frame limit: its dead letter is trimmed.
    publish(&transport, padded("module.pad.near.fails", near))
        .await
        .unwrap();
    // The consumer is not wedged: a good event after them is handled.
    publish(&transport, padded("module.pad.good", 10))
        .await
        .unwrap();

    let mut letters = Vec::new();
    for _ in 0..2 {
        let letter = tokio::time::timeout(common::WAIT, dead.next())
            .await
            .expect("a dead letter in time")
            .expect("the dead letters stream is open");
        letters.push(letter);
    }
    letters.sort_by(|a, b| a.message.routing_key.cmp(&b.message.routing_key));
    let (near_letter, small_letter) = (&letters[0], &letters[1]);
    assert_eq!(near_letter.message.routing_key, "module.pad.near.fails");
    assert_eq!(small_letter.message.routing_key, "module.pad.small.fails");

    let small = small_letter.note.clone().unwrap();
    assert_eq!(small.reason, DeadReason::Permanent);
    let error = small.last_error.unwrap();
    assert!(
        error.len() <= codec::MAX_DEAD_ERROR_BYTES,
        "{} bytes",
        error.len()
    );
    assert!(small_letter.message.header("x-pad").is_some());
    assert!(small_letter.message.header(codec::TRIMMED).is_none());

    let near_dead = near_letter.note.clone().unwrap();
    assert_eq!(near_dead.reason, DeadReason::Permanent);
    assert_eq!(near_dead.queue, "n1.pad.events");
    assert!(near_letter.message.header("x-pad").is_none());
    assert!(
        matches!(near_letter.message.header(codec::TRIMMED), Some(HeaderValue::UInt(n)) if *n >= 1),
        "{:?}",
        near_letter.message.properties.headers.keys()
    );
    assert_eq!(
        near_letter.message.header(codec::SOURCE),
        Some(&HeaderValue::Str("pad".into()))
    );

    let mut keys = Vec::new();
    while keys.len() < 3 {
        keys.push(
            tokio::time::timeout(common::WAIT, handled.recv())
                .await
                .expect("handled in time")
                .unwrap(),
        );
    }
    assert!(keys.contains(&"module.pad.good".to_owned()), "{keys:?}");
    assert_eq!(
        events.count(|e| matches!(e, Lifecycle::Disconnected { .. })),
        0,
        "{:?}",
        events.events()
    );
    bus.close().await;
}
