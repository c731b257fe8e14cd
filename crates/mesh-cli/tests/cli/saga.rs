//! `mesh saga list | show` against the store of the saga example (`crates/mesh-saga/examples`):
//! on SQLite and PostgreSQL, an order placed and paid and one cancelled by its timeout are
//! listed and shown with their state, version and pending timeouts; a database without saga
//! tables, an unknown instance and a bad URL are errors.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use mesh::{Bus, MemoryBroker};
use mesh_saga::{Database, SagaStore};
use mesh_testkit::{eventually, TempStore};
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

use crate::{assert_code, json, run, stderr, stdout, WAIT};

#[path = "../../../mesh-saga/examples/order/mod.rs"]
mod order;

use order::{OrderPlaced, PaymentReceived};

/// Runs the example's saga on the in-memory broker over `pool`, as the example does: order 1
/// placed and paid (waiting for its shipment, its payment timeout cancelled), then, with a
/// short payment timeout, order 2 placed and never paid (cancelled by its timeout).
async fn populate<DB: Database>(pool: sqlx::Pool<DB>) {
    let store = SagaStore::new(pool).await.expect("the saga tables");
    for (timeout, order) in [
        (Duration::from_secs(3600), 1),
        (Duration::from_millis(300), 2),
    ] {
        let broker = MemoryBroker::new();
        let bus = |module: &str| Bus::builder().node("n1").module(module);
        let saga = order::saga(timeout).service(store.clone());
        let orders = saga
            .wire(bus("orders"))
            .start(Arc::new(broker.transport()))
            .await
            .expect("the saga's bus");
        saga.attach(&orders);
        let relay = mesh_outbox::Outbox::new(store.pool().clone())
            .await
            .expect("the outbox")
            .start_relay(
                [orders.clone()],
                mesh_outbox::RelayOptions::default().poll_interval(Duration::from_millis(20)),
            )
            .await
            .expect("the relay");
        let other = bus("shop")
            .start(Arc::new(broker.transport()))
            .await
            .expect("the shop's bus");
        let payments = bus("payments")
            .start(Arc::new(broker.transport()))
            .await
            .expect("the payments' bus");
        other
            .emit(&OrderPlaced { order, cents: 100 })
            .await
            .expect("placed");
        if order == 1 {
            payments
                .emit(&PaymentReceived { order })
                .await
                .expect("paid");
        }
        let key = order.to_string();
        eventually(WAIT, "order 1 paid, order 2 cancelled", || async {
            let i = store.instance::<order::Order>("order", &key).await.ok()??;
            (i.version == 2).then_some(())
        })
        .await;
        relay.stop().await;
        for bus in [orders, other, payments] {
            bus.drain().await.expect("drained");
        }
    }
}

/// The commands on `database` after [`populate`].
async fn list_and_show(database: &str) {
    let listed = run(None, &["saga", "list", "--database", database, "--json"]).await;
    assert_code(&listed, 0);
    let listed = json(&listed);
    let all = listed.as_array().expect("an array");
    assert_eq!(all.len(), 2, "{listed}");
    let one = all.iter().find(|i| i["key"] == "1").expect("order 1");
    assert_eq!(one["saga"], "order");
    assert_eq!(one["version"], 2);
    assert_eq!(one["completed"], false);
    assert_eq!(one["state"]["stage"], "AwaitingShipment");
    assert_eq!(
        one["timeouts"],
        serde_json::json!([]),
        "its payment timeout cancelled"
    );
    let two = all.iter().find(|i| i["key"] == "2").expect("order 2");
    assert_eq!(two["completed"], true);
    assert_eq!(two["state"]["stage"], "Cancelled");

    let shown = run(
        None,
        &["saga", "show", "order", "2", "--database", database],
    )
    .await;
    assert_code(&shown, 0);
    let text = stdout(&shown);
    assert!(
        text.contains("saga order, key 2: version 2, completed"),
        "{text}"
    );
    assert!(text.contains("\"stage\":\"Cancelled\""), "{text}");
    assert!(text.contains("no pending timeouts"), "{text}");

    let text = stdout(
        &run(
            None,
            &["saga", "list", "--database", database, "--saga", "order"],
        )
        .await,
    );
    assert_eq!(text.lines().count(), 2, "{text}");
    assert!(
        text.lines().any(|l| l.starts_with("order 1 v2 running")),
        "{text}"
    );

    let missing = run(
        None,
        &["saga", "show", "order", "9", "--database", database],
    )
    .await;
    assert_code(&missing, 1);
    assert!(
        stderr(&missing).contains("no instance 9 of saga order"),
        "{}",
        stderr(&missing)
    );
    let none = run(
        None,
        &[
            "saga",
            "list",
            "--database",
            database,
            "--saga",
            "nope",
            "--json",
        ],
    )
    .await;
    assert_code(&none, 0);
    assert_eq!(json(&none), serde_json::json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saga_list_and_show_read_the_example_store_on_sqlite() {
    let store = TempStore::sqlite();
    let options = SqliteConnectOptions::from_str(store.url())
        .expect("a SQLite URL")
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30));
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .expect("the test opens its file");
    populate(pool.clone()).await;
    pool.close().await;
    list_and_show(store.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saga_list_and_show_read_the_example_store_on_postgres() {
    let store = TempStore::postgres()
        .await
        .expect("a database on the test PostgreSQL server");
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect(store.url())
        .await
        .expect("the test connects to its database");
    populate(pool).await;
    list_and_show(store.url()).await;
}

/// A database without the saga tables: an error saying so, exit code 1, nothing created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_without_sagas_is_an_error() {
    let store = TempStore::sqlite();
    let pool = SqlitePoolOptions::new()
        .connect(store.url())
        .await
        .expect("the file");
    sqlx::query("CREATE TABLE t (x INTEGER)")
        .execute(&pool)
        .await
        .expect("a table");
    pool.close().await;
    let listed = run(None, &["saga", "list", "--database", store.url()]).await;
    assert_code(&listed, 1);
    assert!(
        stderr(&listed).contains("no saga tables"),
        "{}",
        stderr(&listed)
    );
    let bad = run(
        None,
        &["saga", "list", "--database", "mysql://u:s3cret@h/db"],
    )
    .await;
    assert_code(&bad, 2);
    assert!(!stderr(&bad).contains("s3cret"));
}
