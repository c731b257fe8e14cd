//! `serve` runs as `on` does: requests are answered on the server's consumer task, at most
//! the bus's prefetch at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use mesh::{Bus, MemoryBroker, RemoteError, RequestMeta};
use tokio::sync::Semaphore;

/// In flight now, and the most ever in flight.
#[derive(Default)]
struct Load {
    now: AtomicUsize,
    most: AtomicUsize,
}

// The clock is paused: `sleep` returns once every task is idle, so the requests that can
// start have started; no wall time is waited for.
#[tokio::test(start_paused = true)]
async fn a_server_answers_at_most_the_bus_prefetch_at_once() -> Result<(), mesh::Error> {
    const PREFETCH: u16 = 3;
    const CALLS: usize = 10;
    let broker = MemoryBroker::new();
    let load = Arc::new(Load::default());
    let gate = Arc::new(Semaphore::new(0));
    let (server_load, server_gate) = (Arc::clone(&load), Arc::clone(&gate));
    let server = Bus::builder()
        .node("anchor")
        .module("billing")
        .prefetch(PREFETCH)
        .serve("billing.quote", move |n: u64, _: RequestMeta| {
            let (load, gate) = (Arc::clone(&server_load), Arc::clone(&server_gate));
            async move {
                let now = load.now.fetch_add(1, Ordering::SeqCst) + 1;
                load.most.fetch_max(now, Ordering::SeqCst);
                let permit = gate
                    .acquire()
                    .await
                    .map_err(|e| RemoteError::new(RemoteError::INTERNAL, e.to_string()))?;
                permit.forget();
                load.now.fetch_sub(1, Ordering::SeqCst);
                Ok::<u64, RemoteError>(n * 2)
            }
        })
        .start(Arc::new(broker.transport()))
        .await?;
    let client = Bus::builder()
        .node("anchor")
        .module("umami")
        .start(Arc::new(broker.transport()))
        .await?;

    let calls: Vec<_> = (0..CALLS as u64)
        .map(|n| {
            let client = client.clone();
            tokio::spawn(async move {
                client
                    .call::<_, u64>("billing.quote", &n, Duration::from_secs(600))
                    .await
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        load.now.load(Ordering::SeqCst),
        usize::from(PREFETCH),
        "as many requests in the handler as the prefetch lets in"
    );

    gate.add_permits(CALLS);
    for (n, call) in calls.into_iter().enumerate() {
        let doubled = call.await.expect("the call task")?;
        assert_eq!(doubled, 2 * n as u64);
    }
    assert_eq!(
        load.most.load(Ordering::SeqCst),
        usize::from(PREFETCH),
        "never more requests at once than the prefetch"
    );
    client.drain().await?;
    server.drain().await
}
