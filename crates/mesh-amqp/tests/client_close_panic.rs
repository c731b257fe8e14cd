//! The cause `AmqpTransport::close` is built around, shown on the bare client library: amqprs
//! 2.1 panics when a `channel.close-ok` arrives for a close whose task is gone. Its channel
//! dispatcher hands the answer to the task that asked with `responder.send(..).unwrap()`,
//! and that send fails once the task's future was dropped — by a timeout around the close,
//! or by a runtime shutting down, which drops every task. So the transport never leaves a
//! close in flight when `close()` returns (see `tests/close.rs` and the crate docs).
//!
//! Here a relay holds the broker's answer back while the close future is dropped, then lets
//! it through. The panic hook is the process's, so this file holds one test.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use amqprs::connection::{Connection, OpenConnectionArguments};
use mesh_testkit::eventually;
use mesh_testkit::relay::Relay;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_library_panics_on_a_close_ok_for_a_dropped_close() {
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

    // The answer arrives for a close nobody waits for any more.
    relay.pass();
    let panic = eventually(common::WAIT, "the client library to panic", || {
        let panics = panics.lock().unwrap().clone();
        std::future::ready(panics.into_iter().next())
    })
    .await;
    let _ = std::panic::take_hook();
    assert!(
        panic.contains("dispatcher.rs") && panic.contains("unwrap"),
        "the dispatcher's unwrap: {panic}"
    );

    let _ = connection.close().await;
    drop(relay);
    vhost.delete().await.unwrap();
}
