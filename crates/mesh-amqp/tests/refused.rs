//! The client library (mesh's fork of amqprs) announces `authentication_failure_close`, so
//! RabbitMQ answers a refused login with `connection.close 403 ACCESS_REFUSED` at once,
//! rather than closing the socket after its delay (about 3 s).

// Helpers outside `#[test]` functions unwrap too: this whole file is a test.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use amqprs::connection::{Connection, OpenConnectionArguments};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_gets_the_brokers_403_at_once() {
    let vhost = common::vhost("refused-403").await;
    let addr = vhost.broker_addr();
    for (user, password) in [("guest", "wrong"), ("mesh-no-such-user", "x")] {
        let mut args =
            OpenConnectionArguments::new(&addr.ip().to_string(), addr.port(), user, password);
        args.virtual_host(vhost.name());
        let started = Instant::now();
        let Err(error) = Connection::open(&args.finish()).await else {
            panic!("{user} logged in with a wrong password");
        };
        let took = started.elapsed();
        println!("{user}: refused in {took:?}");
        match error {
            amqprs::error::Error::ConnectionRefused {
                reply_code,
                reply_text,
            } => {
                assert_eq!(reply_code, 403, "{reply_text}");
                assert!(reply_text.contains("ACCESS_REFUSED"), "{reply_text}");
            }
            other => panic!("expected the broker's 403, got {other}"),
        }
        // The broker's own delay without the capability is about 3 s; at once is well
        // under a second (generous bound for a loaded machine).
        assert!(took < Duration::from_secs(2), "{took:?}");
    }
    vhost.delete().await.unwrap();
}
