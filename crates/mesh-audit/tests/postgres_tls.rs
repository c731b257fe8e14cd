//! The audit store over TLS to PostgreSQL, with `sslmode` and `sslrootcert` in the store URL
//! as libpq users write them: a private server with a certificate of the test's own CA is
//! verified (`verify-full`), and one signed by another CA is refused with an error that says
//! so.

use std::time::{Duration, Instant};

use mesh_audit::{Store, StoreOptions};
use mesh_testkit::{error_chain, PrivatePostgres, TestPki};

const WAIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_verifies_the_server_with_sslrootcert() {
    let pki = TestPki::generate("pg-tls").unwrap();
    let cert = pki.server("postgres", &["localhost", "127.0.0.1"]).unwrap();
    let server = tokio::task::spawn_blocking(move || PrivatePostgres::start(Some(&cert)))
        .await
        .unwrap()
        .expect("a private PostgreSQL server with TLS");
    let url = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        server.url("localhost"),
        pki.ca_file().display()
    );

    // Verified: the store opens (migrations run) and the session is encrypted.
    let store = tokio::time::timeout(WAIT, Store::open(StoreOptions::url(&url).unwrap()))
        .await
        .expect("opened in time")
        .expect("the store opens over verified TLS");
    assert_eq!(store.counts().await.unwrap().events, 0);
    store.close().await;
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let (ssl,): (bool,) =
        sqlx::query_as("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            .fetch_one(&pool)
            .await
            .unwrap();
    assert!(ssl, "the session is not encrypted");
    pool.close().await;

    // Another CA: refused, quickly, saying why.
    let other = TestPki::generate("pg-tls-other").unwrap();
    let wrong = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        server.url("localhost"),
        other.ca_file().display()
    );
    let started = Instant::now();
    let error = tokio::time::timeout(WAIT, Store::open(StoreOptions::url(&wrong).unwrap()))
        .await
        .expect("refused in time")
        .expect_err("a server signed by another CA is refused");
    let text = error_chain(&error);
    assert!(
        text.contains("connecting to postgres://postgres@localhost")
            && text.to_ascii_lowercase().contains("certificate"),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    drop(server);
}
