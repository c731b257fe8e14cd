//! Scenario r: a publishing channel that answers nothing while its connection lives.
//!
//! The node suspends the emitting client's publishing channel (`sys:suspend` of the channel
//! process, through `rabbitmqctl eval`): it takes the publishes in and neither confirms nor
//! nacks them, the connection stays up and the broker says no `connection.blocked`. That is
//! what RabbitMQ 3.10 does to a channel whose first publish to a quorum queue calls a leader
//! that a partition made unreachable (docs/RELIABILITY.md, p4). The window is kept small
//! (64), so the suspended channel never holds enough frames to stop the connection's reader
//! (RabbitMQ's credit flow gives a channel 400).
//!
//! Asserted: the emits are confirmed again on a new channel within 3× the transport's
//! 10 s stuck limit of the suspension, the transport counted a stuck channel replaced, and,
//! once the channel is resumed, lost = 0 and unexpected = 0.

use std::time::{Duration, Instant};

use mesh::amqp::QueueType;
use mesh::{Bus, HandlerError};
use mesh_faults::setup::{self, connect};
use mesh_faults::{secs, EmitPlan, Emitter};
use mesh_testkit::{eventually, Ledger, NodeOptions, PrivateNode};

/// 3× the transport's stuck limit (10 s, `STUCK_AFTER`).
const RECOVERY_LIMIT: Duration = Duration::from_secs(30);
/// Any other wait.
const WAIT: Duration = Duration::from_secs(120);
const EVENTS: usize = 3_000;
const PACE: Duration = Duration::from_millis(10);

/// Suspends the channels of `vhost` in confirm mode whose user is `user`; prints them.
fn suspend(vhost: &str, user: &str) -> String {
    format!(
        "Ps = [P || P <- rabbit_channel:list(), \
             try rabbit_channel:info(P, [vhost, user, confirm]) of \
                 [{{vhost, <<\"{vhost}\">>}}, {{user, <<\"{user}\">>}}, {{confirm, true}}] -> true; \
                 _ -> false \
             catch _:_ -> false end], \
         [sys:suspend(P) || P <- Ps], Ps."
    )
}

/// Resumes every suspended channel of the node.
const RESUME: &str = "[catch sys:resume(P, 1000) || P <- rabbit_channel:list()].";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publishing_channel_that_answers_nothing_is_replaced() {
    setup::init_tracing();
    let began = Instant::now();
    let node = PrivateNode::start(NodeOptions::default())
        .await
        .expect("a private RabbitMQ node (is rabbitmq-server installed?)");
    let vhost = setup::vhost(&node, "stuck-channel").await.unwrap();
    let access = setup::access(&node, &vhost).await.unwrap();

    let ledger = Ledger::new();
    let sink = {
        let ledger = ledger.clone();
        Bus::builder()
            .node("faults")
            .module("sink")
            .on_raw(["module.source.#"], move |incoming| {
                ledger.handled(incoming.meta.id().to_string());
                async { Ok::<(), HandlerError>(()) }
            })
            .start(connect(access.options("sink", QueueType::Quorum)).await)
            .await
            .unwrap()
    };
    let options = access
        .options("source", QueueType::Quorum)
        .confirm_window(64);
    let user = options.get_user().to_owned();
    let transport = connect(options).await;
    let source = Bus::builder()
        .node("faults")
        .module("source")
        .emit_deadline(Some(Duration::from_secs(5)))
        .start(transport.clone())
        .await
        .unwrap();
    let emitter = Emitter::start(
        source.clone(),
        ledger.clone(),
        EmitPlan::new(EVENTS, "tick").paced(PACE),
    );
    emitter.wait_confirmed(200, WAIT).await.unwrap();

    let suspended = node
        .rabbitmqctl(&["eval", &suspend(&vhost, &user)])
        .await
        .unwrap();
    let suspended_at = Instant::now();
    assert!(
        suspended.contains('<'),
        "no publishing channel of {user} found to suspend: {suspended}"
    );
    let at_suspend = emitter.confirmed();
    // Confirms that were on their way may still come: the recovery is the first confirm of
    // a publish sent after the channel was given up, seen as the transport's count.
    let replaced_at = eventually(WAIT, "a stuck channel replaced", || async {
        (transport.stats().stuck_reopens >= 1).then(Instant::now)
    })
    .await;
    emitter
        .wait_confirmed(at_suspend + 100, WAIT)
        .await
        .unwrap();
    let recovered_at = Instant::now();
    let resumed = node.rabbitmqctl(&["eval", RESUME]).await.unwrap();

    emitter
        .wait_confirmed(EVENTS, WAIT)
        .await
        .unwrap_or_else(|e| panic!("the client did not finish: {e}"));
    let report = ledger.wait_all_handled(WAIT).await;
    let stats = transport.stats();
    let recovery = recovered_at - suspended_at;
    eprintln!(
        "[r] suspended {} ({}); the channel was replaced {} after the suspension, 100 more \
         confirms {} after it; resumed: {}; stuck reopens {}, resent {}, failures {:?}; \
         {report}; total {}",
        suspended.trim(),
        secs(suspended_at - began),
        secs(replaced_at - suspended_at),
        secs(recovery),
        resumed.trim().len(),
        stats.stuck_reopens,
        stats.resent,
        emitter.failures(),
        secs(began.elapsed())
    );
    report.assert_clean();
    assert_eq!(report.confirmed, EVENTS);
    assert!(emitter.fatal().is_empty(), "{:?}", emitter.fatal());
    assert!(
        recovery <= RECOVERY_LIMIT,
        "confirms came back {} after the suspension (limit {})",
        secs(recovery),
        secs(RECOVERY_LIMIT)
    );
    source.close().await;
    sink.close().await;
}
