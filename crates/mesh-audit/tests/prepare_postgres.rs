//! The test command's PostgreSQL preparation (`scripts/prepare-postgres.sh`) on a server set
//! up as a fresh Debian install is (passwords over TCP, no `test` database), never the
//! machine's shared one: before it, the store cannot reach `test` without a password; after
//! it, a store of the tests' own kind is created on `test`'s server, opens, migrates, and
//! answers.

use std::path::Path;
use std::time::Duration;

use mesh_audit::{Store, StoreOptions};
use mesh_testkit::{error_chain, PrivatePostgres, TempStore};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preparation_makes_a_fresh_server_usable_by_the_store_tests() {
    let server = tokio::task::spawn_blocking(PrivatePostgres::start_as_debian_ships)
        .await
        .unwrap()
        .expect("a private PostgreSQL server set up as Debian ships it");
    let test_url = format!("postgres://postgres@127.0.0.1:{}/test", server.port());

    // As Debian ships it: a TCP login without a password is refused.
    let refused = tokio::time::timeout(WAIT, Store::open(StoreOptions::url(&test_url).unwrap()))
        .await
        .expect("refused in time")
        .expect_err("a fresh server lets nobody in over TCP without a password");
    let text = error_chain(&refused);
    assert!(text.contains("password"), "{text}");

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/prepare-postgres.sh");
    let port = server.port().to_string();
    let socket_dir = server.socket_dir().to_owned();
    let output = tokio::process::Command::new("bash")
        .arg(&script)
        .args(["--port", &port, "--socket-dir"])
        .arg(&socket_dir)
        .output()
        .await
        .expect("bash runs the script");
    assert!(
        output.status.success(),
        "the preparation failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let said = String::from_utf8_lossy(&output.stdout);
    assert!(
        said.contains("trust for TCP logins") && said.contains("creating the database test"),
        "{said}"
    );

    // What the store tests do: a database of their own on the server of `test`, opened,
    // migrated and read.
    let store = TempStore::postgres_on(test_url.clone())
        .await
        .expect("the tests' user creates databases over TCP");
    let opened = tokio::time::timeout(WAIT, Store::open(StoreOptions::url(store.url()).unwrap()))
        .await
        .expect("opened in time")
        .expect("the store opens on the prepared server");
    assert_eq!(opened.counts().await.unwrap().events, 0);
    opened.close().await;

    // A second run finds everything in place and changes nothing.
    let again = tokio::process::Command::new("bash")
        .arg(&script)
        .args(["--port", &port, "--socket-dir"])
        .arg(&socket_dir)
        .output()
        .await
        .expect("bash runs the script");
    assert!(again.status.success());
    assert_eq!(String::from_utf8_lossy(&again.stdout), "");
    drop(store);
}
