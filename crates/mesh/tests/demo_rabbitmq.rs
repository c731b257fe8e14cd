//! The demo on RabbitMQ, run twice in one vhost: the same numbered steps both times, and
//! nothing left on the broker after either run (the management API lists no queue); and the
//! same steps again after an interrupted run left its queues with 25 events in them; and a
//! queue of the demo's names that something consumes stays through its clean-up.
//!
//! On a private node with the management plugin (the demo removes its queues through the
//! management API), in a vhost of the test's own.

#[path = "../examples/demo/cleanup.rs"]
mod cleanup;
#[path = "../examples/demo/modules.rs"]
mod modules;
#[path = "../examples/demo/tour.rs"]
#[allow(dead_code)]
mod tour;

use std::sync::Arc;
use std::time::Duration;

use mesh::amqp::management::{ManagementClient, ManagementOptions, QueueRow};
use mesh::amqp::AmqpOptions;
use mesh::EventId;
use mesh_testkit::{eventually, NodeOptions, PrivateNode};

const WAIT: Duration = Duration::from_secs(60);
const VHOST: &str = "demo-twice";

/// The step lines of one run, each event id replaced by `<id>`, once the dead letter shown
/// is checked to be the run's own event's.
async fn run_demo(options: &AmqpOptions) -> anyhow::Result<Vec<String>> {
    let mut steps = Vec::new();
    let place = tour::Place::RabbitMq(Box::new(options.clone()));
    tokio::time::timeout(
        Duration::from_secs(120),
        tour::run(&place, &mut |line| steps.push(line)),
    )
    .await??;
    let ids: Vec<Vec<EventId>> = steps.iter().map(|line| event_ids(line).0).collect();
    assert_eq!(ids.len(), 8, "{steps:#?}");
    assert_eq!(ids[1].len(), 1, "step 2 names the event: {steps:#?}");
    assert_eq!(ids[3], ids[1], "step 4 shows this run's event: {steps:#?}");
    Ok(steps.iter().map(|line| event_ids(line).1).collect())
}

/// The event ids in `line`, and the line with each replaced by `<id>`.
fn event_ids(line: &str) -> (Vec<EventId>, String) {
    let mut ids = Vec::new();
    let words: Vec<&str> = line
        .split(' ')
        .map(|word| match word.trim_end_matches(';').parse::<EventId>() {
            Ok(id) => {
                ids.push(id);
                "<id>"
            }
            Err(_) => word,
        })
        .collect();
    (ids, words.join(" "))
}

/// What an interrupted run leaves: the modules' queues (declared, then the modules stopped
/// without the clean-up), and 25 events emitted since, waiting in them.
async fn leave_queues_with_events(options: &AmqpOptions) -> anyhow::Result<()> {
    let (done, _) = tokio::sync::mpsc::unbounded_channel();
    for builder in [modules::billing(done.clone()), modules::mailer(done)?] {
        let transport = mesh::amqp::connect(options.clone()).await?;
        builder.start(Arc::new(transport)).await?.close().await;
    }
    let transport = mesh::amqp::connect(options.clone()).await?;
    let umami = modules::umami().start(Arc::new(transport)).await?;
    for n in 0..25 {
        let site = modules::SiteCreated {
            site: format!("site-{n}"),
            owner: "ada".into(),
        };
        umami.emit(&site).await?;
    }
    umami.drain().await?;
    Ok(())
}

async fn queues(client: &ManagementClient) -> Vec<QueueRow> {
    client
        .queues(VHOST)
        .await
        .expect("the management API lists the vhost's queues")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_demo_twice_gives_the_same_steps_and_leaves_no_queue() -> anyhow::Result<()> {
    let node = PrivateNode::start(NodeOptions::default().management(true)).await?;
    node.rabbitmqctl(&["add_vhost", VHOST]).await?;
    node.rabbitmqctl(&["set_permissions", "-p", VHOST, "guest", ".*", ".*", ".*"])
        .await?;
    let management_url = format!(
        "http://127.0.0.1:{}",
        node.management_port().expect("management enabled")
    );
    let options: AmqpOptions = format!("amqp://guest:guest@127.0.0.1:{}/{VHOST}", node.port())
        .parse::<AmqpOptions>()?
        .management_url(management_url.clone());
    let client = ManagementClient::new(
        &ManagementOptions::new(management_url).credentials("guest", "guest"),
    )?;
    // The management listener may come up a moment after the node reports booted.
    eventually(WAIT, "the management API answers", || async {
        client.queues(VHOST).await.ok()
    })
    .await;

    let first = run_demo(&options).await?;
    let numbered: Vec<&str> = first
        .iter()
        .filter_map(|line| line.split_once(". ").map(|(n, _)| n))
        .collect();
    assert_eq!(
        numbered,
        ["1", "2", "3", "4", "5", "6", "7", "8"],
        "{first:#?}"
    );
    assert_eq!(first[0], "1. mesh demo on RabbitMQ");
    assert!(
        first[3].starts_with("4. dead-lettered <id> after 3 attempts from demo.mailer.events"),
        "{first:#?}"
    );
    let durable: Vec<String> = queues(&client)
        .await
        .into_iter()
        .filter(|q| q.durable)
        .map(|q| q.name)
        .collect();
    assert!(durable.is_empty(), "left behind: {durable:?}");

    let second = run_demo(&options).await?;
    assert_eq!(first, second);

    // After an interrupted run, with stale events in its queues: the same steps again.
    leave_queues_with_events(&options).await?;
    assert!(queues(&client)
        .await
        .iter()
        .any(|q| q.name == "demo.mailer.events"));
    let third = run_demo(&options).await?;
    assert_eq!(first, third);
    let durable: Vec<String> = queues(&client)
        .await
        .into_iter()
        .filter(|q| q.durable)
        .map(|q| q.name)
        .collect();
    assert!(durable.is_empty(), "left behind: {durable:?}");

    // What something else consumes stays: while a server of `billing.quote` runs (the service
    // example serves it too), the demo's clean-up keeps its queues; once it stopped, they go.
    let (done, _) = tokio::sync::mpsc::unbounded_channel();
    let transport = mesh::amqp::connect(options.clone()).await?;
    let billing = modules::billing(done).start(Arc::new(transport)).await?;
    let cleanup = cleanup::Cleanup::new(&options)?;
    let busy = eventually(
        WAIT,
        "the management API counts billing's consumers",
        || async {
            let busy = cleanup.in_use().await.ok()?;
            (busy.iter().any(|q| q == "serve.billing.quote")
                && busy.iter().any(|q| q == "demo.billing.events"))
            .then_some(busy)
        },
    )
    .await;
    let removed = cleanup.remove(&busy).await?;
    assert!(removed.is_empty(), "removed queues in use: {removed:?}");
    billing.close().await;
    let mut removed = cleanup.remove(&[]).await?;
    removed.sort();
    assert_eq!(
        removed,
        [
            "demo.billing.events",
            "demo.billing.events.retry.1s",
            "demo.billing.events.retry.25s",
            "demo.billing.events.retry.2m",
            "demo.billing.events.retry.5s",
            "serve.billing.quote"
        ]
    );

    // The server-named queues (reply queues, the dead-letter tap) go with their connections.
    eventually(WAIT, "no queue left in the vhost", || async {
        queues(&client).await.is_empty().then_some(())
    })
    .await;
    Ok(())
}

#[test]
fn the_demo_removes_only_its_own_queues() {
    for queue in [
        "demo.billing.events",
        "demo.mailer.events",
        "demo.mailer.events.retry.200ms",
        "serve.billing.quote",
    ] {
        assert!(cleanup::Cleanup::is_demo_queue(queue), "{queue}");
    }
    for queue in [
        "demo2.billing.events",
        "demox.billing.events",
        "n1.billing.events",
        "serve.billing.quote.x",
        "serve.billing",
        "amq.gen-abc",
        "demo",
    ] {
        assert!(!cleanup::Cleanup::is_demo_queue(queue), "{queue}");
    }
}
