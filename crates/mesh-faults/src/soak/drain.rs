//! The soak's drain: once the last fault was lifted, the load stops, every emit in flight
//! gets its outcome, the cluster is whole again and the queues empty; what is then still
//! unhandled is lost.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use mesh_testkit::{Cluster, ClusterHarness};

use super::load::{Calls, Clients, Tally};
use super::settings::{LINES_AFTER_DRAIN, REJOIN, SETTLE, VHOST, WAIT};
use super::work::Fate;
use crate::secs;

/// Stops the load (the emitters and `calls`; the load began at `origin`), drains the
/// emitters' buses, heals the cluster and waits for the queues of the soak's vhost to drain,
/// then for the consumers' lines about what they handled. Returns how long the queues took to
/// drain once the load stopped, if they did; every failure is a problem in `tally`.
pub(super) async fn drain(
    cluster: &Cluster,
    clients: &Clients,
    calls: Calls,
    tally: &Tally,
    origin: Instant,
) -> Option<Duration> {
    let problems = &tally.problems;
    let load_end = Instant::now();
    eprintln!(
        "[soak] load stops at +{:.1}s; {} confirmed so far",
        origin.elapsed().as_secs_f64(),
        clients
            .emitters
            .iter()
            .map(|(_, e)| e.confirmed())
            .sum::<usize>()
    );
    for (_, emitter) in &clients.emitters {
        emitter.stop();
    }
    calls.stop();
    // Every try handed to a bus gets its outcome (a confirm, or a failure by its deadline)
    // before the drain below may close that bus under it.
    for (_, emitter) in &clients.emitters {
        if let Err(e) = emitter.settled(WAIT).await {
            problems.push(format!("an emitter did not settle: {e}"));
        }
    }
    // Every emit still unconfirmed gets its outcome (a confirm, or a failure within the
    // deadline).
    for (bus, _) in &clients.emitters {
        match tokio::time::timeout(WAIT, bus.drain()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => problems.push(format!("draining an emitter: {}", crate::chain(&e))),
            Err(_) => problems.push(format!("an emitter did not drain within {WAIT:?}")),
        }
    }
    calls.ended(problems).await;
    if let Err(e) = cluster.heal(REJOIN).await {
        problems.push(format!("healing the cluster: {e:#}"));
    }

    // The queues drain first: then every delivery was settled, and what a consumer handled
    // it said before its ack, so what is still unhandled after a short read of their lines
    // is lost (a broken build fails here within a minute of the load, not at a long
    // timeout).
    let drained = cluster.await_drained(VHOST, SETTLE).await;
    let drained_after = match drained {
        Ok(_) => Some(load_end.elapsed()),
        Err(e) => {
            // Where the messages sit, for the report: leaders, members, counts.
            let queues = cluster.quorum_queues(VHOST).await.map_or_else(
                |e| format!("(no listing: {e:#})"),
                |queues| {
                    queues
                        .iter()
                        .filter(|q| q.messages > 0)
                        .map(|q| format!("{q:?}"))
                        .collect::<Vec<_>>()
                        .join("; ")
                },
            );
            problems.push(format!("{e:#}; quorum queues holding messages: {queues}"));
            None
        }
    };
    await_handled(clients, tally).await;
    drained_after
}

/// Waits a little for every confirmed event that is not poison to be handled (the handles
/// come from the consumers' lines); what is still unhandled then is a problem.
async fn await_handled(clients: &Clients, tally: &Tally) {
    let poison: BTreeSet<String> = clients
        .fates
        .iter()
        .filter(|(_, f)| **f == Fate::Poison)
        .map(|(id, _)| id.clone())
        .collect();
    let settle_by = Instant::now() + LINES_AFTER_DRAIN;
    let lost_good = loop {
        let lost: Vec<String> = tally
            .ledger
            .report()
            .lost
            .into_iter()
            .filter(|id| !poison.contains(id))
            .collect();
        if lost.is_empty() || Instant::now() >= settle_by {
            break lost;
        }
        // Polling the books under a deadline; the handles come from the consumers' lines.
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    if !lost_good.is_empty() {
        tally.problems.push(format!(
            "{} confirmed events were not handled, {} after the queues drained",
            lost_good.len(),
            secs(LINES_AFTER_DRAIN)
        ));
    }
}
