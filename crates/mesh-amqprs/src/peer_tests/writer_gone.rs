//! The dispatcher answering a server's `channel.close`, `channel.flow` or `basic.cancel`
//! after the connection's writer is gone (the peer hung up right after sending it): upstream
//! unwrapped the failed send. The channel's callback holds the dispatcher until the writer
//! has exited, which makes the order certain.

use async_trait::async_trait;

use crate::{
    callbacks::ChannelCallback,
    channel::{BasicConsumeArguments, Channel},
    error::Error,
    Ack, BasicProperties, Cancel, CloseChannel, Nack, Return,
};

use super::{
    no_panic,
    peer::{channel_close, method, panics_here, shortstr, Peer, TAG, WAIT},
};

struct WaitForTheWriter;

impl WaitForTheWriter {
    async fn wait(channel: &Channel) {
        tokio::time::timeout(WAIT, async {
            while !channel.writer_gone() {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the writer exited after the peer hung up");
    }
}

#[async_trait]
impl ChannelCallback for WaitForTheWriter {
    async fn close(&mut self, channel: &Channel, _: CloseChannel) -> Result<(), Error> {
        Self::wait(channel).await;
        Ok(())
    }
    async fn cancel(&mut self, channel: &Channel, _: Cancel) -> Result<(), Error> {
        Self::wait(channel).await;
        Ok(())
    }
    async fn flow(&mut self, channel: &Channel, active: bool) -> Result<bool, Error> {
        Self::wait(channel).await;
        Ok(active)
    }
    async fn publish_ack(&mut self, _: &Channel, _: Ack) {}
    async fn publish_nack(&mut self, _: &Channel, _: Nack) {}
    async fn publish_return(&mut self, _: &Channel, _: Return, _: BasicProperties, _: Vec<u8>) {}
}

/// Sends `last` on a channel with a consumer, hangs up, and waits until the dispatcher has
/// handled it (its callback returned and it answered into the closed writer).
async fn answer_after_the_writer_is_gone(last: impl Fn(u16) -> Vec<u8>) {
    let peer = Peer::start(2047).await;
    let channel = peer.connection.open_channel(None).await.unwrap();
    channel.register_callback(WaitForTheWriter).await.unwrap();
    let (_, _messages) = channel
        .basic_consume_rx(BasicConsumeArguments::new("q", TAG))
        .await
        .unwrap();
    let id = channel.channel_id();
    peer.send_and_hang_up(&[last(id)]);
    // The dispatcher marks its channel closed when it answers a close, and when it ends
    // (the reader, its frames' sender, gone after the hang-up). Single-threaded, the answer
    // into the closed writer happens in the same step; a panic there leaves it open.
    tokio::time::timeout(WAIT, async {
        while channel.is_open() && panics_here().is_empty() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the dispatcher handled the frame");
    no_panic();
}

#[tokio::test]
async fn a_server_close_answered_after_the_writer_is_gone_costs_no_panic() {
    answer_after_the_writer_is_gone(channel_close).await;
}

#[tokio::test]
async fn a_flow_answered_after_the_writer_is_gone_costs_no_panic() {
    answer_after_the_writer_is_gone(|id| method(id, 20, 20, &[0])).await;
}

#[tokio::test]
async fn a_cancel_answered_after_the_writer_is_gone_costs_no_panic() {
    answer_after_the_writer_is_gone(|id| {
        let mut args = shortstr(TAG);
        args.push(0);
        method(id, 60, 30, &args)
    })
    .await;
}
