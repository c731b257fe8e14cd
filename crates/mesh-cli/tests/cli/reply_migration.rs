//! A deployment on the retired direct `mesh.reply`, migrated to `mesh.replies` in the
//! documented order (docs/CONTRACT.md, "From mesh.reply to mesh.replies") on a private node
//! under the access plan: `topology plan --check` reports it, `topology apply` creates
//! `mesh.replies` and keeps `mesh.reply` while a caller of an earlier version waits there,
//! callers and servers of both versions answer each other meanwhile, and the next `apply`
//! deletes it. Under the plan's narrowed permissions: `topology apply` declares the serve
//! queues of both versions' tools (the spec's `serves`), which the servers find passively.

use amqprs::channel::{
    BasicConsumeArguments, BasicPublishArguments, QueueBindArguments, QueueDeclareArguments,
};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{BasicProperties, FieldTable, FieldValue};
use mesh::Bus;

use crate::access_drift::Setup;
use crate::{assert_code, stdout, WAIT};

/// A raw connection as the planned user `user` (without the prefix).
async fn raw(setup: &Setup, user: &str) -> Connection {
    let user = format!("{}{user}", setup.prefix);
    let args =
        OpenConnectionArguments::new("127.0.0.1", setup.node.port(), &user, setup.password(&user));
    Connection::open(&args).await.expect("a raw connection")
}

fn headers(pairs: &[(&str, &str)]) -> FieldTable {
    let mut table = FieldTable::new();
    for (name, value) in pairs {
        table.insert(
            (*name).try_into().expect("a short header name"),
            FieldValue::S((*value).try_into().expect("a short header value")),
        );
    }
    table
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_on_mesh_reply_is_reported_and_migrated_while_both_versions_talk() {
    let setup = Setup::start(
        "replies",
        "",
        &[
            // The tools of both versions' servers: `topology apply` declares their queues.
            (
                "umami",
                "[\"module.umami.#\"]\nserves = [\"umami.echo\", \"umami.old\"]",
            ),
            ("billing", r#"["module.billing.#"]"#),
        ],
    )
    .await;
    let billing_user = format!("{}module.billing", setup.prefix);
    let api = setup.operator_api();
    // The earlier version's exchanges: `mesh.reply` (direct), no `mesh.replies`.
    api.delete_exchange("/", "mesh.replies").await.unwrap();
    api.put_exchange("/", "mesh.reply", "direct", true)
        .await
        .unwrap();
    // A caller of the earlier version: its reply queue bound on its own name.
    let earlier = raw(&setup, "module.billing").await;
    let earlier_channel = earlier.open_channel(None).await.unwrap();
    let (earlier_queue, _, _) = earlier_channel
        .queue_declare(QueueDeclareArguments::exclusive_server_named())
        .await
        .unwrap()
        .expect("a declare-ok");
    earlier_channel
        .queue_bind(QueueBindArguments::new(
            &earlier_queue,
            "mesh.reply",
            &earlier_queue,
        ))
        .await
        .expect("an earlier caller binds on mesh.reply");
    let (_, mut earlier_replies) = earlier_channel
        .basic_consume_rx(
            BasicConsumeArguments::new(&earlier_queue, "replies")
                .auto_ack(true)
                .finish(),
        )
        .await
        .unwrap();

    let output = setup.mesh("topology", &["plan", "--check"]).await;
    assert_code(&output, 9);
    let text = stdout(&output);
    assert!(text.contains("exchange mesh.replies (topic"), "{text}");
    assert!(
        text.contains("exchange mesh.reply (direct) is retired"),
        "{text}"
    );
    // Step 1: apply creates `mesh.replies`, and keeps `mesh.reply` for the earlier caller.
    let output = setup.mesh("topology", &["apply"]).await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert!(
        text.contains("kept while callers of an earlier version use it"),
        "{text}"
    );
    let output = setup.mesh("topology", &["plan", "--check"]).await;
    assert_code(&output, 9);

    // Step 2, upgraded modules: umami serves `umami.echo`; billing calls.
    let umami = Bus::builder()
        .node("n1")
        .module("umami")
        .serve(
            "umami.echo",
            |request: serde_json::Value, _: mesh::RequestMeta| async move {
                Ok::<_, mesh::RemoteError>(request)
            },
        )
        .start(crate::transport(setup.options("module.umami")).await)
        .await
        .expect("umami serves as its own user");
    let billing = Bus::builder()
        .node("n1")
        .module("billing")
        .start(crate::transport(setup.options("module.billing")).await)
        .await
        .expect("billing starts as its own user");

    // The earlier caller is answered by the upgraded server, through `mesh.reply`.
    let mut request = BasicProperties::default();
    request
        .with_content_type("application/json")
        .with_user_id(&billing_user)
        .with_reply_to(&earlier_queue)
        .with_correlation_id("earlier-1")
        .with_headers(headers(&[
            ("x-event-id", &uuid_like()),
            ("x-source", "billing"),
            ("x-node", "n1"),
            ("x-time", "2026-12-07T00:00:00Z"),
        ]));
    earlier_channel
        .basic_publish(
            request,
            br#"{"n":1}"#.to_vec(),
            BasicPublishArguments::new("mesh.rpc", "umami.echo"),
        )
        .await
        .unwrap();
    let reply = tokio::time::timeout(WAIT, earlier_replies.recv())
        .await
        .expect("the earlier caller's reply in time")
        .expect("its consumer is open");
    assert_eq!(reply.deliver.unwrap().exchange(), "mesh.reply");
    assert_eq!(
        reply
            .basic_properties
            .unwrap()
            .correlation_id()
            .map(String::as_str),
        Some("earlier-1")
    );
    assert_eq!(reply.content.unwrap(), br#"{"n":1}"#.to_vec());

    // The upgraded caller is answered by a server of the earlier version, which replies
    // through `mesh.reply` under the `reply_to`.
    let old_server = raw(&setup, "module.umami").await;
    let server = old_server.open_channel(None).await.unwrap();
    // Its serve queue is the operator's: found passively (a declaration would be refused).
    let (serve, _, _) = server
        .queue_declare(
            QueueDeclareArguments::new("serve.umami.old")
                .passive(true)
                .finish(),
        )
        .await
        .unwrap()
        .unwrap();
    server
        .queue_bind(QueueBindArguments::new(&serve, "mesh.rpc", "umami.old"))
        .await
        .unwrap();
    let (_, mut requests) = server
        .basic_consume_rx(
            BasicConsumeArguments::new(&serve, "old")
                .auto_ack(true)
                .finish(),
        )
        .await
        .unwrap();
    let caller = billing.clone();
    let call = tokio::spawn(async move {
        caller
            .call::<_, serde_json::Value>("umami.old", &serde_json::json!({"n": 2}), WAIT)
            .await
    });
    let incoming = tokio::time::timeout(WAIT, requests.recv())
        .await
        .expect("the request in time")
        .expect("the consumer is open");
    let properties = incoming.basic_properties.unwrap();
    let reply_to = properties.reply_to().cloned().unwrap();
    assert!(
        reply_to.starts_with(&format!("{billing_user}.amq.gen-")),
        "{reply_to}"
    );
    let mut reply = BasicProperties::default();
    reply
        .with_content_type("application/json")
        .with_correlation_id(properties.correlation_id().unwrap())
        .with_headers(headers(&[("x-mesh-status", "ok")]));
    server
        .basic_publish(
            reply,
            br#"{"n":2}"#.to_vec(),
            BasicPublishArguments::new("mesh.reply", &reply_to),
        )
        .await
        .unwrap();
    let answer = call
        .await
        .unwrap()
        .expect("the upgraded caller is answered through mesh.reply");
    assert_eq!(answer, serde_json::json!({"n": 2}));
    let _ = old_server.close().await;

    // Step 3: the earlier caller is gone; apply deletes `mesh.reply`.
    let _ = earlier.close().await;
    let output = setup.mesh("topology", &["apply"]).await;
    assert_code(&output, 0);
    let text = stdout(&output);
    assert!(
        text.contains("exchange mesh.reply (direct) is retired") && text.contains("deleted"),
        "{text}"
    );
    let output = setup.mesh("topology", &["plan", "--check"]).await;
    assert_code(&output, 0);
    assert!(
        !api.exchanges("/")
            .await
            .unwrap()
            .iter()
            .any(|e| e.name == "mesh.reply"),
        "mesh.reply is gone"
    );
    // Upgraded caller and server still talk, through `mesh.replies`.
    let answer: serde_json::Value = billing
        .call("umami.echo", &serde_json::json!({"n": 3}), WAIT)
        .await
        .expect("answered through mesh.replies");
    assert_eq!(answer, serde_json::json!({"n": 3}));
    billing.close().await;
    umami.close().await;
}

/// A fresh event id.
fn uuid_like() -> String {
    let n: u128 = rand::random();
    let hex = format!("{n:032x}");
    format!(
        "{}-{}-4{}-8{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[13..16],
        &hex[17..20],
        &hex[20..32]
    )
}
