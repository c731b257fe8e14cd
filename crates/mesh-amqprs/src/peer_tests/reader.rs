//! The connection's reader: answers nobody asked for, frames for channels that are gone, a
//! caller that gave up, and channel ids a server's closes used to leak.

use crate::frame::Frame;

use super::{
    channel_answers,
    peer::{channel_close, channel_close_ok, deliver, longstr, method, Peer},
    still_serving,
};

#[tokio::test]
async fn an_open_ok_nobody_asked_for_is_dropped() {
    let peer = Peer::start(2047).await;
    peer.send(&[method(7, 20, 11, &longstr(""))]).await;
    still_serving(&peer).await;
}

#[tokio::test]
async fn an_update_secret_ok_nobody_asked_for_is_dropped() {
    let peer = Peer::start(2047).await;
    peer.send(&[method(0, 10, 71, &[])]).await;
    still_serving(&peer).await;
}

#[tokio::test]
async fn a_frame_for_a_channel_never_opened_is_dropped() {
    let peer = Peer::start(2047).await;
    peer.send(&[deliver(9, 1)]).await;
    still_serving(&peer).await;
}

/// The teardown the live forced-close test saw: the server closes a channel while a close
/// of ours is in flight (the closes cross), the dispatcher answers the server's and exits,
/// then the server's close-ok for ours arrives for a dispatcher that is gone. Upstream's
/// reader took the failed hand-over for a broken connection and closed the socket.
#[tokio::test]
async fn a_close_ok_for_a_channel_whose_dispatcher_exited_costs_no_connection() {
    let mut peer = Peer::start(2047).await;
    let channel = peer.connection.open_channel(None).await.unwrap();
    let id = channel.channel_id();
    peer.hold_channel_close(true);
    let ours = tokio::spawn(channel.close());
    peer.expect("its channel.close", |ch, frame| {
        ch == id && matches!(frame, Frame::CloseChannel(..))
    })
    .await;
    peer.send(&[channel_close(id)]).await;
    peer.expect("the close-ok for the server's close", |ch, frame| {
        ch == id && matches!(frame, Frame::CloseChannelOk(..))
    })
    .await;
    // What RabbitMQ sends for a close that crossed its own, and a frame after it.
    peer.send(&[channel_close_ok(id), deliver(id, 1)]).await;
    // Our close ends either way (its answer went to a dispatcher that had exited).
    let _ = tokio::time::timeout(super::WAIT, ours).await.unwrap();
    still_serving(&peer).await;
}

/// Upstream never gave back the id of a channel the server closed; once every id had been
/// used so, the next `open_channel` panicked the reader ("id allocation never fail"). The
/// peer allows 8 channels; 20 are opened and closed by the server one after the other.
#[tokio::test]
async fn a_channel_the_server_closes_gives_its_id_back() {
    let mut peer = Peer::start(8).await;
    for round in 0..20 {
        let channel = tokio::time::timeout(super::WAIT, peer.connection.open_channel(None))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        channel_answers(&channel).await;
        let id = channel.channel_id();
        peer.send(&[channel_close(id)]).await;
        peer.expect("the close-ok for the server's close", |ch, frame| {
            ch == id && matches!(frame, Frame::CloseChannelOk(..))
        })
        .await;
    }
    still_serving(&peer).await;
}

/// A caller that gives up opening a channel (its future dropped after asking the reader
/// for an id): upstream's reader panicked handing the id over.
#[tokio::test]
async fn a_caller_that_gave_up_opening_a_channel_costs_no_panic() {
    let peer = Peer::start(2047).await;
    tokio::select! {
        biased;
        _ = peer.connection.open_channel(None) => panic!("the open cannot be answered yet"),
        () = std::future::ready(()) => {}
    }
    still_serving(&peer).await;
}

/// The same for a request answered on channel 0 (`connection.update-secret`), whose
/// responder the reader registers.
#[tokio::test]
async fn a_caller_that_gave_up_updating_the_secret_costs_no_panic() {
    let peer = Peer::start(2047).await;
    tokio::select! {
        biased;
        _ = peer.connection.update_secret("s", "r") => panic!("the update cannot be answered yet"),
        () = std::future::ready(()) => {}
    }
    still_serving(&peer).await;
}

/// A server whose `connection.start` carries properties of the wrong type: upstream
/// unwrapped each conversion in `Connection::open` (a panic in the caller's task).
#[tokio::test]
async fn server_properties_of_the_wrong_type_cost_no_panic() {
    use super::peer::table;
    // capabilities not a table: the open fails.
    let not_a_table = table(&[("capabilities", b'S', longstr("yes"))]);
    let refused = Peer::start_with(2047, &not_a_table).await;
    assert!(
        matches!(refused, Err(crate::error::Error::ConnectionOpenError(_))),
        "{:?}",
        refused.err()
    );
    // a capability that is not a bool, a product that is not a string: their defaults.
    let odd = table(&[
        (
            "capabilities",
            b'F',
            table(&[("publisher_confirms", b'S', longstr("yes"))]),
        ),
        ("product", b't', vec![1]),
    ]);
    let peer = Peer::start_with(2047, &odd).await.unwrap();
    still_serving(&peer).await;
}
