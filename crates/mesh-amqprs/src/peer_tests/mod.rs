//! mesh's fork: each path a peer or a timing could make upstream panic, driven by a fake
//! AMQP peer that sends the frames that reached the panic. Every test then checks that no
//! task of its connection panicked and that the connection (and, where it stays open, the
//! channel) goes on serving. docs/decisions/0012-a-fork-of-amqprs.md lists the sites.

// This whole module is a test.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod dispatcher;
mod peer;
mod reader;
mod writer_gone;

use crate::channel::{BasicQosArguments, Channel};
use peer::{panics_here, Peer, WAIT};

/// No task of this test panicked, and the connection still opens a channel that answers.
async fn still_serving(peer: &Peer) {
    let channel = tokio::time::timeout(WAIT, peer.connection.open_channel(None))
        .await
        .expect("an open_channel answered")
        .expect("the connection still opens channels");
    channel_answers(&channel).await;
    no_panic();
}

/// The channel still answers a synchronous request.
async fn channel_answers(channel: &Channel) {
    tokio::time::timeout(
        WAIT,
        channel.basic_qos(BasicQosArguments::new(0, 10, false)),
    )
    .await
    .expect("basic.qos answered")
    .expect("the channel still serves");
}

fn no_panic() {
    let panics = panics_here();
    assert!(panics.is_empty(), "a library task panicked: {panics:?}");
}
