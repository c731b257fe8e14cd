//! `status`: the connection and this node's module queues.

use mesh::{Bus, HandlerError};
use mesh_testkit::eventually;

use crate::{assert_code, json, options, run, stdout, transport, vhost, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_this_nodes_module_queues() {
    let vhost = vhost("cli-status").await;
    let url = vhost.url();
    let bus = Bus::builder()
        .node(crate::NODE)
        .module("billing")
        .on_raw(["module.umami.#"], |_| async { Ok::<(), HandlerError>(()) })
        .start(transport(options(&vhost)).await)
        .await
        .unwrap();
    // Another node's module is not this node's.
    let other = Bus::builder()
        .node("elsewhere")
        .module("mailer")
        .on_raw(["module.umami.#"], |_| async { Ok::<(), HandlerError>(()) })
        .start(transport(options(&vhost)).await)
        .await
        .unwrap();

    let status = eventually(WAIT, "billing's consumer in the statistics", || {
        let url = url.clone();
        async move {
            let output = run(Some(&url), &["status", "--json"]).await;
            assert_code(&output, 0);
            let status = json(&output);
            (status["modules"][0]["consumers"] == 1).then_some(status)
        }
    })
    .await;
    assert_eq!(status["connected"], true);
    assert_eq!(status["node"], crate::NODE);
    let modules = status["modules"].as_array().unwrap();
    assert_eq!(modules.len(), 1, "{status}");
    assert_eq!(modules[0]["module"], "billing");
    assert_eq!(modules[0]["queue"], "clitest.billing.events");
    assert_eq!(modules[0]["type"], "quorum");

    let output = run(Some(&url), &["status"]).await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert!(text.contains("connected"), "{text}");
    assert!(text.contains("billing"), "{text}");
    assert!(!text.contains("mailer"), "{text}");

    bus.close().await;
    other.close().await;
    vhost.delete().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_names_its_node_and_the_nodes_it_did_not_look_at() {
    let vhost = vhost("cli-status-node").await;
    let url = vhost.url();
    // Only another node's module here (as after the demo, whose node is `demo`).
    let other = Bus::builder()
        .node("elsewhere")
        .module("mailer")
        .on_raw(["module.umami.#"], |_| async { Ok::<(), HandlerError>(()) })
        .start(transport(options(&vhost)).await)
        .await
        .unwrap();

    let output = run(Some(&url), &["status"]).await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert!(
        text.contains(&format!("node      {}\n", crate::NODE)),
        "{text}"
    );
    assert!(text.contains("modules   none"), "{text}");
    assert!(
        text.contains("other nodes have module queues here: elsewhere (give --node elsewhere"),
        "{text}"
    );
    let output = run(Some(&url), &["status", "--json"]).await;
    assert_eq!(
        json(&output)["other_nodes"],
        serde_json::json!(["elsewhere"])
    );

    // The node of the flag is the one looked at.
    let output = run(Some(&url), &["status", "--node", "elsewhere", "--json"]).await;
    assert_code(&output, 0);
    let status = json(&output);
    assert_eq!(status["node"], "elsewhere");
    assert_eq!(status["modules"][0]["module"], "mailer", "{status}");

    // No node given: the host name's, and the output says so.
    let child = crate::mesh(Some(&url))
        .env_remove("MESH_NODE")
        .arg("status")
        .spawn()
        .expect("the mesh binary starts");
    let output = crate::finish(child).await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert!(text.contains("(the host name's: --node"), "{text}");

    other.close().await;
    vhost.delete().await.unwrap();
}
