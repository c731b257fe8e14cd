//! A password file is read bounded in size and time (`mesh_files`): `/dev/zero` or a FIFO
//! nobody writes to fails the connect with a typed error, at the bound or the deadline, and
//! never on a worker of the caller's runtime (no broker: the file is refused before any
//! address is tried); a running transport whose password file becomes `/dev/zero` fails its
//! reconnects, and comes back when the file does (on the shared broker, in a vhost of the
//! test's own).

// The shared helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use mesh_amqp::{AmqpOptions, AmqpTransport, Lifecycle, Link};
use mesh_core::TransportErrorKind;
use mesh_files::{FileError, FileErrorKind};
use mesh_testkit::eventually;

/// What a refusal may take: three deadlines, for a loaded machine.
fn bound() -> Duration {
    mesh_files::DEADLINE * 3
}

/// Connects with `password_file` as the password file, on a one-thread runtime of a thread
/// of its own (so a connect that hangs fails the test instead of stopping it): the kind and
/// path of the file error it failed with, and whether another task ran while the connect
/// was still reading.
fn refusal(password_file: &Path) -> (FileErrorKind, PathBuf, bool) {
    let options = "amqp://guest@127.0.0.1:1/"
        .parse::<AmqpOptions>()
        .expect("the URL parses")
        .password_file(password_file);
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let (outcome, ran_meanwhile) = runtime.block_on(async {
            let connect = tokio::spawn(AmqpTransport::connect(options));
            // Runs after the connect's first poll: on this one thread only if that poll
            // returned while the file was still being read.
            tokio::spawn(async {}).await.expect("another task runs");
            let ran_meanwhile = !connect.is_finished();
            let outcome = connect.await.expect("the connect task ends");
            (outcome, ran_meanwhile)
        });
        let _ = sender.send((outcome.map(|_| ()), ran_meanwhile));
    });
    let (outcome, ran_meanwhile) = receiver
        .recv_timeout(bound())
        .expect("the connect ends within three deadlines");
    let error = outcome.expect_err("the password file is refused");
    assert_eq!(error.kind(), &TransportErrorKind::InvalidOptions, "{error}");
    let source = std::error::Error::source(&error).expect("the file error as the source");
    let file = source
        .downcast_ref::<FileError>()
        .expect("a mesh_files::FileError");
    assert!(
        error.to_string().contains("password file"),
        "the error names what the file is: {error}"
    );
    (file.kind(), file.path().to_owned(), ran_meanwhile)
}

#[test]
fn dev_zero_as_the_password_file_fails_the_connect_at_the_bound() {
    let (kind, path, _) = refusal(Path::new("/dev/zero"));
    assert_eq!(path, Path::new("/dev/zero"));
    assert_eq!(
        kind,
        FileErrorKind::TooLarge {
            limit: mesh_files::MAX_SECRET
        }
    );
}

#[test]
fn a_fifo_nobody_writes_to_as_the_password_file_fails_the_connect_at_the_deadline() {
    let dir = std::env::temp_dir().join(format!("mesh-amqp-files-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    let fifo: PathBuf = dir.join("password");
    let status = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo runs");
    assert!(status.success());
    let (kind, path, ran_meanwhile) = refusal(&fifo);
    assert!(
        matches!(kind, FileErrorKind::NotReady { received: 0, .. }),
        "{kind:?}"
    );
    assert_eq!(path, fifo);
    assert!(ran_meanwhile, "the read held the runtime's thread");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_file_turned_dev_zero_fails_the_reconnects_until_it_is_back() {
    let vhost = common::vhost("password-zero").await;
    let file = std::env::temp_dir().join(format!("{}.password", vhost.name()));
    std::fs::write(&file, "guest\n").expect("the password file");
    let options = common::options(&vhost, "pwzero")
        .password_file(&file)
        .management_url("http://127.0.0.1:1");
    let transport = AmqpTransport::connect(options).await.expect("connected");
    let events = common::Recorder::start(&transport);

    std::fs::remove_file(&file).expect("removed");
    std::os::unix::fs::symlink("/dev/zero", &file).expect("the file is /dev/zero now");
    vhost
        .close_connections(Some("pwzero."), "password file test")
        .await
        .expect("connections closed");
    let refused = |link: Link| {
        move |e: &Lifecycle| {
            matches!(e, Lifecycle::ReconnectFailed { link: l, reason, .. }
                if *l == link && reason.contains("password file"))
        }
    };
    eventually(
        common::WAIT,
        "both reconnects refused by the file",
        || async {
            (events.count(refused(Link::Publish)) >= 1 && events.count(refused(Link::Consume)) >= 1)
                .then_some(())
        },
    )
    .await;

    std::fs::remove_file(&file).expect("removed");
    std::fs::write(&file, "guest\n").expect("the password file again");
    let reconnected = |link: Link| move |e: &Lifecycle| matches!(e, Lifecycle::Connected { link: l, reconnect: true, .. } if *l == link);
    eventually(common::WAIT, "both connections back", || async {
        (events.count(reconnected(Link::Publish)) >= 1
            && events.count(reconnected(Link::Consume)) >= 1
            && transport.health().is_ready())
        .then_some(())
    })
    .await;
    transport.close().await;
    let _ = std::fs::remove_file(&file);
    vhost.delete().await.expect("the vhost deleted");
}
