//! A channel's dispatcher: content out of place, answers nobody asked for, a caller that
//! gave up. Each content case is followed by a good delivery, which must reach the consumer
//! (nothing after the bad frames is lost), on a channel that still answers.

use crate::channel::{BasicConsumeArguments, BasicGetArguments};

use super::{
    channel_answers,
    peer::{
        basic_return, body, channel_close_ok, deliver, get_empty, get_ok, header, method, Peer,
        TAG, WAIT,
    },
    still_serving,
};

/// Opens a channel with a consumer, sends `bad`, then a good delivery (tag 99, "ok"), and
/// checks that it arrives and that nothing panicked.
async fn consumer_survives(bad: impl Fn(u16) -> Vec<Vec<u8>>) {
    let peer = Peer::start(2047).await;
    let channel = peer.connection.open_channel(None).await.unwrap();
    let (_, mut messages) = channel
        .basic_consume_rx(BasicConsumeArguments::new("q", TAG))
        .await
        .unwrap();
    let id = channel.channel_id();
    peer.send(&bad(id)).await;
    peer.send(&[deliver(id, 99), header(id, 2), body(id, b"ok")])
        .await;
    let good = tokio::time::timeout(WAIT, async {
        while let Some(message) = messages.recv().await {
            if message.deliver.as_ref().map(|d| d.delivery_tag()) == Some(99) {
                return message.content;
            }
        }
        None
    })
    .await
    .expect("the good delivery arrived");
    assert_eq!(good.as_deref(), Some(&b"ok"[..]));
    channel_answers(&channel).await;
    still_serving(&peer).await;
}

#[tokio::test]
async fn a_content_header_with_no_method_before_it_is_dropped() {
    consumer_survives(|id| vec![header(id, 0)]).await;
}

#[tokio::test]
async fn a_content_body_with_no_method_before_it_is_dropped() {
    consumer_survives(|id| vec![body(id, b"x")]).await;
}

#[tokio::test]
async fn a_delivery_body_with_no_header_before_it_is_dropped() {
    consumer_survives(|id| vec![deliver(id, 1), body(id, b"x")]).await;
}

#[tokio::test]
async fn a_delivery_body_longer_than_its_header_said_ends_the_message() {
    consumer_survives(|id| vec![deliver(id, 1), header(id, 2), body(id, b"hello")]).await;
}

#[tokio::test]
async fn a_second_header_for_one_delivery_is_dropped() {
    consumer_survives(|id| vec![deliver(id, 1), header(id, 0), header(id, 0)]).await;
}

#[tokio::test]
async fn a_second_header_for_one_return_is_dropped() {
    consumer_survives(|id| vec![basic_return(id), header(id, 0), header(id, 0)]).await;
}

#[tokio::test]
async fn a_second_message_for_one_return_is_dropped() {
    consumer_survives(|id| {
        vec![
            basic_return(id),
            header(id, 1),
            body(id, b"a"),
            header(id, 1),
            body(id, b"b"),
        ]
    })
    .await;
}

#[tokio::test]
async fn a_return_body_with_no_header_before_it_is_dropped() {
    consumer_survives(|id| vec![basic_return(id), body(id, b"x")]).await;
}

#[tokio::test]
async fn a_return_body_longer_than_its_header_said_ends_the_message() {
    consumer_survives(|id| vec![basic_return(id), header(id, 2), body(id, b"hello")]).await;
}

/// A method no server sends on a channel (`connection.start` on channel 1, `basic.publish`)
/// reached upstream's `unreachable!` for an unexpected frame.
#[tokio::test]
async fn a_method_a_server_does_not_send_on_a_channel_is_dropped() {
    consumer_survives(|id| {
        let mut publish = vec![0, 0];
        publish.extend(super::peer::shortstr(""));
        publish.extend(super::peer::shortstr("k"));
        publish.push(0);
        let mut start = vec![0, 9, 0, 0, 0, 0];
        start.extend(super::peer::longstr("PLAIN"));
        start.extend(super::peer::longstr("en_US"));
        vec![method(id, 10, 10, &start), method(id, 60, 40, &publish)]
    })
    .await;
}

#[tokio::test]
async fn a_synchronous_answer_nobody_asked_for_is_dropped() {
    let peer = Peer::start(2047).await;
    let channel = peer.connection.open_channel(None).await.unwrap();
    peer.send(&[method(channel.channel_id(), 60, 11, &[])])
        .await;
    channel_answers(&channel).await;
    still_serving(&peer).await;
}

/// A close-ok for a close nobody began: the channel is closed (upstream panicked in the
/// dispatcher), and a frame for it afterwards costs nothing either.
#[tokio::test]
async fn a_close_ok_nobody_asked_for_closes_the_channel() {
    let peer = Peer::start(2047).await;
    let channel = peer.connection.open_channel(None).await.unwrap();
    let id = channel.channel_id();
    peer.send(&[channel_close_ok(id)]).await;
    tokio::time::timeout(WAIT, async {
        while channel.is_open() {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the channel closed");
    peer.send(&[deliver(id, 1)]).await;
    still_serving(&peer).await;
}

/// A caller that gives up a channel's synchronous request (its future dropped after the
/// dispatcher was asked to register the responder): upstream's dispatcher panicked
/// acknowledging the registration.
#[tokio::test]
async fn a_caller_that_gave_up_a_channel_request_costs_no_panic() {
    let peer = Peer::start(2047).await;
    let channel = peer.connection.open_channel(None).await.unwrap();
    tokio::select! {
        biased;
        _ = channel.flow(true) => panic!("the flow cannot be answered yet"),
        () = std::future::ready(()) => {}
    }
    channel_answers(&channel).await;
    still_serving(&peer).await;
}

/// `basic.get-empty`, `basic.get-ok` and its content when no `basic.get` waits: upstream's
/// dispatcher expected a registered get responder.
#[tokio::test]
async fn a_get_answer_nobody_asked_for_is_dropped() {
    consumer_survives(|id| {
        vec![
            get_empty(id),
            get_ok(id),
            header(id, 1),
            body(id, b"x"),
            get_ok(id),
            header(id, 0),
        ]
    })
    .await;
}

/// A `basic.get` given up while its answer is on the way: upstream's dispatcher unwrapped
/// the hand-over to the caller that was gone.
#[tokio::test]
async fn a_get_whose_caller_gave_up_costs_no_panic() {
    let peer = Peer::start(2047).await;
    let channel = peer.connection.open_channel(None).await.unwrap();
    tokio::select! {
        biased;
        _ = channel.basic_get(BasicGetArguments::new("q")) => panic!("the get cannot be answered yet"),
        () = std::future::ready(()) => {}
    }
    channel_answers(&channel).await;
    still_serving(&peer).await;
}

/// A `basic.get` answered with content and no `get-ok` before it (the dispatcher still in the
/// state an earlier, unasked `get-ok` left): upstream's `basic_get` hit `unreachable!` in the
/// caller's task; the fork returns an error naming what came, and the channel goes on.
#[tokio::test]
async fn a_get_answered_with_content_before_its_get_ok_is_an_error() {
    let peer = Peer::start(2047).await;
    let channel = peer.connection.open_channel(None).await.unwrap();
    let id = channel.channel_id();
    peer.send(&[get_ok(id)]).await;
    channel_answers(&channel).await;
    peer.headless_get(true);
    let answer = tokio::time::timeout(WAIT, channel.basic_get(BasicGetArguments::new("q")))
        .await
        .expect("the get ended");
    peer.headless_get(false);
    let error = answer
        .expect_err("content first is not a message")
        .to_string();
    assert!(error.contains("got a content header"), "{error}");
    channel_answers(&channel).await;
    still_serving(&peer).await;
}
