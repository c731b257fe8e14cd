//! A password file is read again at every (re)connect: a broker user's password rotated,
//! and the file with it, is taken up by the next connect and by the reconnect of a running
//! transport, without a restart. On the shared broker, in a vhost and with a user of the
//! test's own.

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use mesh_amqp::{AmqpOptions, AmqpTransport, Lifecycle, Link};
use mesh_testkit::{eventually, rabbitmqctl, shared};

/// A broker user with full permissions on one vhost; deleted on drop.
struct User(String);

impl Drop for User {
    fn drop(&mut self) {
        let _ = std::process::Command::new("rabbitmqctl")
            .args(["delete_user", &self.0])
            .output();
    }
}

fn reconnected(link: Link) -> impl Fn(&Lifecycle) -> bool {
    move |e| matches!(e, Lifecycle::Connected { link: l, reconnect: true, .. } if *l == link)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_password_file_is_read_at_the_next_connect_and_reconnect() {
    let vhost = common::vhost("password-file").await;
    let user = User(format!("{}-user", vhost.name()));
    rabbitmqctl(None, &["add_user", &user.0, "first/?@#%"])
        .await
        .unwrap();
    rabbitmqctl(
        None,
        &[
            "set_permissions",
            "-p",
            vhost.name(),
            &user.0,
            ".*",
            ".*",
            ".*",
        ],
    )
    .await
    .unwrap();
    let file = std::env::temp_dir().join(format!("{}.password", vhost.name()));
    std::fs::write(&file, "first/?@#%\n").unwrap();
    let options = format!(
        "amqp://{}@{}/{}",
        shared::percent_encode(&user.0),
        vhost.broker_addr(),
        shared::percent_encode(vhost.name())
    )
    .parse::<AmqpOptions>()
    .unwrap()
    .password_file(&file)
    .connection_name("pwfile")
    .management_url("http://127.0.0.1:1");

    let transport = AmqpTransport::connect(options.clone()).await.unwrap();
    let events = common::Recorder::start(&transport);

    // The broker's password changes: a connect with the old file content fails.
    rabbitmqctl(None, &["change_password", &user.0, "second%#@?/"])
        .await
        .unwrap();
    let refused = AmqpTransport::connect(options.clone().connection_name("pwfile-old"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            mesh_amqp::ConnectRefused::of(&refused),
            Some(mesh_amqp::ConnectRefused::Login { user: u, .. }) if *u == user.0
        ),
        "a refused login: {refused:?}"
    );

    // The file follows: a new connect works, and so does the running transport's reconnect.
    std::fs::write(&file, "second%#@?/").unwrap();
    let fresh = AmqpTransport::connect(options.clone().connection_name("pwfile-new"))
        .await
        .unwrap();
    assert!(fresh.health().is_ready());
    fresh.close().await;
    let closed = vhost
        .close_connections(Some("pwfile."), "password rotation test")
        .await
        .unwrap();
    assert_eq!(closed, 2);
    eventually(
        common::WAIT,
        "both connections back with the new password",
        || async {
            (events.count(reconnected(Link::Publish)) >= 1
                && events.count(reconnected(Link::Consume)) >= 1
                && transport.health().is_ready())
            .then_some(())
        },
    )
    .await;
    transport.close().await;
    let _ = std::fs::remove_file(&file);
    drop(user);
    vhost.delete().await.unwrap();
}
