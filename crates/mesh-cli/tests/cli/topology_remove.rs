//! `topology remove`: a dry run changes nothing, a module's queue holding a message is refused
//! without `--force`, and the real run removes exactly the module's queues on its node (its
//! consumer, retry and serve queues), leaving another module's on the same node and the same
//! module's on another node.
//!
//! On a private node with the management plugin, in a vhost of the test's own.

use std::collections::BTreeSet;

use mesh::amqp::management::{ManagementClient, ManagementOptions};
use mesh::{Bus, HandlerError, RetryPolicy};
use mesh_testkit::{eventually, NodeOptions, PrivateNode};

use crate::{assert_code, json, run, stderr, stdout, transport, WAIT};

const VHOST: &str = "remove";

struct Setup {
    _node: PrivateNode,
    url: String,
    management_url: String,
    client: ManagementClient,
}

impl Setup {
    async fn start() -> Setup {
        let node = PrivateNode::start(NodeOptions::default().management(true))
            .await
            .expect("a private RabbitMQ node with management");
        node.add_vhost(VHOST).await.expect("the test's vhost");
        let management_url = format!(
            "http://127.0.0.1:{}",
            node.management_port().expect("management enabled")
        );
        let client = ManagementClient::new(
            &ManagementOptions::new(management_url.clone()).credentials("guest", "guest"),
        )
        .expect("a management client");
        // The management listener may come up a moment after the node reports booted.
        eventually(WAIT, "the management API answers", || async {
            client.queues(VHOST).await.ok()
        })
        .await;
        Setup {
            url: format!("amqp://guest:guest@127.0.0.1:{}/{VHOST}", node.port()),
            _node: node,
            management_url,
            client,
        }
    }

    /// `mesh --node <node> topology remove <args…> --management-url …`.
    async fn remove(&self, node: &str, args: &[&str]) -> std::process::Output {
        let mut all = vec![
            "--node",
            node,
            "--management-url",
            &self.management_url,
            "topology",
            "remove",
        ];
        all.extend_from_slice(args);
        run(Some(&self.url), &all).await
    }

    async fn queue_names(&self) -> BTreeSet<String> {
        self.client
            .queues(VHOST)
            .await
            .expect("the queues are listed")
            .into_iter()
            .filter(|q| q.durable)
            .map(|q| q.name)
            .collect()
    }

    /// Starts `module` on `node` (its queue bound to `module.umami.#`, a retry ladder of two
    /// steps, and for billing the tool `billing.quote`), then stops it: its queues stay.
    async fn declare(&self, node: &str, module: &str) {
        let policy = RetryPolicy::new(
            3,
            vec![
                std::time::Duration::from_secs(1),
                std::time::Duration::from_secs(2),
            ],
        )
        .expect("a retry policy");
        let mut builder = Bus::builder()
            .node(node)
            .module(module)
            .retry(policy)
            .on_raw(["module.umami.#"], |_| async { Ok::<(), HandlerError>(()) });
        if module == "billing" {
            builder = builder.serve("billing.quote", |_: String, _| async { Ok(1_u64) });
        }
        let options = self.url.parse().expect("the URL parses");
        let bus = builder
            .start(transport(options).await)
            .await
            .expect("the module starts");
        bus.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remove_takes_exactly_the_module_s_queues_on_its_node() {
    let setup = Setup::start().await;
    setup.declare("n1", "billing").await;
    setup.declare("n1", "mailer").await;
    setup.declare("n2", "billing").await;
    let before = setup.queue_names().await;
    let billing_n1: BTreeSet<String> = [
        "n1.billing.events",
        "n1.billing.events.retry.1s",
        "n1.billing.events.retry.2s",
        "serve.billing.quote",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    assert!(before.is_superset(&billing_n1), "{before:?}");
    for other in [
        "n1.mailer.events",
        "n2.billing.events",
        "n2.billing.events.retry.1s",
    ] {
        assert!(before.contains(other), "{before:?}");
    }

    // One event in each module queue (each is bound to module.umami.#).
    let emitted = run(Some(&setup.url), &["emit", "module.umami.site.created"]).await;
    assert_code(&emitted, 0);
    eventually(WAIT, "the management API counts the event", || async {
        let queues = setup.client.queues(VHOST).await.ok()?;
        queues
            .iter()
            .any(|q| q.name == "n1.billing.events" && q.messages_ready == Some(1))
            .then_some(())
    })
    .await;

    // A dry run shows each queue and what it holds, and changes nothing.
    let output = setup
        .remove(
            "n1",
            &["--module", "billing", "--dry-run", "--force", "--json"],
        )
        .await;
    assert_code(&output, 0);
    let doc = json(&output);
    assert_eq!(doc["dry_run"], true);
    assert_eq!(doc["module"], "billing");
    assert_eq!(doc["node"], "n1");
    let listed: BTreeSet<String> = doc["queues"]
        .as_array()
        .expect("queues")
        .iter()
        .map(|q| q["queue"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, billing_n1);
    let events = doc["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["queue"] == "n1.billing.events")
        .unwrap();
    assert_eq!(events["messages_ready"], 1);
    assert!(events["action"]
        .as_str()
        .unwrap()
        .starts_with("would remove"));
    assert_eq!(setup.queue_names().await, before);

    let output = setup.remove("n1", &["-m", "billing", "--dry-run"]).await;
    assert_code(&output, 1);
    let text = stdout(&output);
    assert!(
        text.contains("n1.billing.events (1 ready, 0 unacked"),
        "{text}"
    );
    assert!(
        stderr(&output).contains("refusing to remove"),
        "{}",
        stderr(&output)
    );
    assert_eq!(setup.queue_names().await, before);

    // Without --force, a queue holding a message is refused, and nothing changes.
    let output = setup.remove("n1", &["--module", "billing"]).await;
    assert_code(&output, 1);
    let err = stderr(&output);
    assert!(err.contains("refusing to remove"), "{err}");
    assert!(err.contains("n1.billing.events (1 ready"), "{err}");
    assert!(err.contains("--force"), "{err}");
    assert_eq!(setup.queue_names().await, before);

    let output = setup
        .remove("n1", &["--module", "billing", "--force"])
        .await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert!(
        text.contains("removed 4 queue(s) of module billing on node n1"),
        "{text}"
    );
    let after = setup.queue_names().await;
    let expected: BTreeSet<String> = before.difference(&billing_n1).cloned().collect();
    assert_eq!(after, expected);

    // Nothing left of it: a second run has nothing to do.
    let output = setup.remove("n1", &["--module", "billing"]).await;
    assert_code(&output, 0);
    assert!(
        stdout(&output).contains("nothing to remove"),
        "{}",
        stdout(&output)
    );
}

#[tokio::test]
async fn an_invalid_module_name_is_a_usage_error() {
    let output = run(
        Some("amqp://guest:guest@127.0.0.1:1/"),
        &["topology", "remove", "--module", "bil*ing", "--dry-run"],
    )
    .await;
    assert_code(&output, 2);
}
