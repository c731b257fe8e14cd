//! The cause `AmqpTransport::close` was built around, on the bare client library: upstream
//! amqprs 2.1 panicked when a `channel.close-ok` arrived for a close whose task was gone (its
//! channel dispatcher handed the answer over with `responder.send(..).unwrap()`, which fails
//! once the close's future was dropped by a timeout or a runtime shutting down). The fork,
//! `meshbus-amqprs` (docs/decisions/0012-a-fork-of-amqprs.md), drops such an answer: no panic,
//! and the connection goes on serving.
//!
//! Here a relay holds the broker's answer back while the close future is dropped, then lets
//! it through. The panic hook is the process's, so this file holds one test.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqprs::connection::{Connection, OpenConnectionArguments};
use mesh_testkit::relay::Relay;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_ok_for_a_dropped_close_costs_no_panic_and_no_connection() {
    let panics: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&panics);
    let print = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if let Ok(mut seen) = seen.lock() {
            seen.push(info.to_string());
        }
        print(info);
    }));

    let vhost = common::vhost("client-close-panic").await;
    let relay = Relay::start(vhost.broker_addr()).await.unwrap();
    let args = OpenConnectionArguments::new("127.0.0.1", relay.port(), "guest", "guest")
        .virtual_host(vhost.name())
        .connection_name("client-close-panic")
        .finish();
    let connection = Connection::open(&args).await.unwrap();
    let channel = connection.open_channel(None).await.unwrap();

    // The close goes out, its answer is held back, and the close is given up (dropped), as
    // a timeout or a runtime shutting down does.
    relay.blackhole();
    let gave_up = tokio::time::timeout(Duration::from_millis(200), channel.close()).await;
    assert!(gave_up.is_err(), "the close-ok cannot have come through");
    assert!(panics.lock().unwrap().is_empty());

    // The answer arrives for a close nobody waits for any more. The connection's frames are
    // read in order, so once a channel opened after it has made a round trip (open, declare,
    // close: three more exchanges with the broker), the held answer was read and handed to
    // its channel's dispatcher long before.
    relay.pass();
    let after = tokio::time::timeout(common::WAIT, async {
        let channel = connection.open_channel(None).await?;
        channel
            .queue_declare(
                amqprs::channel::QueueDeclareArguments::default()
                    .exclusive(true)
                    .finish(),
            )
            .await?;
        channel.close().await
    })
    .await
    .expect("a round trip on the same connection in time");
    let _ = std::panic::take_hook();
    assert!(
        after.is_ok(),
        "the connection serves after the answer: {after:?}"
    );
    assert_eq!(*panics.lock().unwrap(), Vec::<String>::new(), "no panic");

    let _ = connection.close().await;
    drop(relay);
    vhost.delete().await.unwrap();
}
