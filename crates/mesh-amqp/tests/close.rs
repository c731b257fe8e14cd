//! Closing a transport leaves nothing in flight: once `close()` returned, every channel
//! close it made is acknowledged, so a program may tear its runtime down at once.
//!
//! Why it matters: the client library hands a `channel.close-ok` to the task that asked for
//! the close and panics (an `unwrap` in its channel dispatcher) when that task is gone, as
//! it is when the runtime drops it on shutdown. Before `close()` waited for them, the
//! consumers, their ack trackers and the reply queue closed their channels on tasks of their
//! own while the connection was being closed, and a runtime dropped right after `close()`
//! could drop such a task while the broker's answer was being dispatched.
//!
//! Each round builds a runtime, opens every kind of channel the transport closes on its own
//! (a durable consumer with its ack tracker, an ephemeral listener without acks, the reply
//! queue of a call), closes the transport and drops the runtime: no round may panic. The
//! panic hook is the process's, so this file holds one test.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use mesh_core::{
    QueueSpec, SubscriptionSpec, ToolKey, TopicPattern, TransportErrorKind, WireMessage,
};

/// Enough rounds to meet a race that shows once in a few dozen runs of the CLI.
const ROUNDS: usize = 30;

fn spec(queue: QueueSpec) -> SubscriptionSpec {
    SubscriptionSpec {
        queue,
        patterns: vec![TopicPattern::parse("module.closing.#").unwrap()],
        prefetch: 8,
        retry_delays: vec![Duration::from_secs(1)],
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// One program's life: connect, open the channels, close, and leave the runtime to drop.
async fn round(vhost: &mesh_testkit::TestVhost, round: usize) {
    let transport = common::connect(vhost, &format!("close-round-{round}")).await;
    let durable = transport
        .subscribe(spec(QueueSpec::Durable {
            name: "closing.consumer.events".to_owned(),
        }))
        .await
        .unwrap();
    let ephemeral = transport
        .subscribe(spec(QueueSpec::Ephemeral))
        .await
        .unwrap();
    let mut request = WireMessage::new("", "{}");
    request.properties.content_type = Some("application/json".to_owned());
    let error = transport
        .call(
            &ToolKey::parse("nobody.serves.this").unwrap(),
            request,
            common::WAIT,
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), &TransportErrorKind::NoServer, "{error}");
    // The subscriptions are still held, as a program's are when it closes its transport.
    tokio::time::timeout(common::WAIT, transport.close())
        .await
        .expect("close returns");
    drop((durable, ephemeral));
}

#[test]
fn a_runtime_dropped_right_after_close_never_panics_the_client() {
    let panics: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = Arc::clone(&panics);
    let print = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if let Ok(mut seen) = seen.lock() {
            seen.push(info.to_string());
        }
        print(info);
    }));

    let setup = runtime();
    let vhost = setup.block_on(common::vhost("close-runtime"));
    for i in 0..ROUNDS {
        let runtime = runtime();
        runtime.block_on(round(&vhost, i));
        drop(runtime);
    }
    let _ = std::panic::take_hook();
    let panics = panics.lock().unwrap().clone();
    assert!(
        panics.is_empty(),
        "panicked {} times: {panics:#?}",
        panics.len()
    );
    setup.block_on(vhost.delete()).unwrap();
}
